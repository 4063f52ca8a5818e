"""``flowpipe serve``: graphs started, watched and given streams over HTTP (REST API and web console)."""
from .instances import Instance, Instances, RequestError

__all__ = ["Instance", "Instances", "RequestError"]

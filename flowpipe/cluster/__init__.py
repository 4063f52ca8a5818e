"""Many hosts: streams placed over a Ray cluster, each host running its streams in flowpipe's own runtime."""
from .placement import Host, PlacementError, StreamNeed, place

__all__ = ["Host", "PlacementError", "StreamNeed", "place"]

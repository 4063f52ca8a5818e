"""Many hosts: streams placed over a Ray cluster, each host running its streams in flowpipe's own runtime.

Importing the package registers the ``cluster`` executor with the runtime (``executor(spec, cluster=ADDRESS)``).
"""
from __future__ import annotations

from ..graph import GraphSpec
from ..runtime.executor import Executor, provide
from .placement import Host, PlacementError, StreamNeed, place


def _on_cluster(spec: GraphSpec, address: str, name: str, max_frames: int | None = None) -> Executor:
    """A run over the hosts of the Ray cluster at ``address``, named ``name`` there."""
    from .service import ClusterInstance  # Ray, an optional dependency, loads with it

    return ClusterInstance(spec, address, name, max_frames=max_frames)


provide("cluster", _on_cluster)

__all__ = ["Host", "PlacementError", "StreamNeed", "place"]

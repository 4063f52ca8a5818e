"""One interface for every way a graph runs, and the one factory that picks it.

A run is an ``Executor``: one process (``Runner``), several processes on one host (``ShardedRun``), or
several hosts (``flowpipe.cluster``). Whoever starts runs (the command line, ``flowpipe serve``, a
cluster's host agent, a benchmark) holds this interface and asks ``executor()`` for one; none of them
names a concrete class or reads its fields. Streams added while it runs go through ``live``
(``LiveControl``, runtime/commands.py), the same calls in one process, over processes and over hosts.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Protocol

from ..errors import Diagnostic, GraphError
from ..graph import GraphSpec
from .commands import LiveControl
from .context import RunHooks, Share
from .runner import Runner
from .settings import open_files_short
from .shards import ShardedRun, resolve_processes
from .stats import RunSummary


class Executor(Protocol):
    """A graph being run: ``run()`` blocks until it ends; the other calls come from other threads (a
    signal handler, the API)."""

    spec: GraphSpec
    interrupted: bool
    started_at: float
    pids: list[int]  # the run's other processes on this host (shards, device owner), as they start

    @property
    def live(self) -> LiveControl:
        """Streams added and removed while it runs."""

    @property
    def running(self) -> bool:
        """Every node is open and frames flow."""

    def run(self) -> RunSummary:
        """Open, run until the sources end or a stop, close; what happened (``--stats``)."""

    def stop(self) -> None:
        """Graceful: sources stop, frames in flight drain."""

    def abort(self) -> None:
        """Immediate: frames still queued fail."""

    def interrupt(self) -> None:
        """What Ctrl-C or SIGTERM does: drain on the first, stop at once on the second."""

    def snapshot(self) -> dict[str, Any]:
        """Frames by fate so far (thread-safe)."""

    @property
    def per_stream(self) -> dict[str, int]:
        """Frames accounted per stream so far."""


#: Executors over several hosts, by kind, registered by the package that provides them (``flowpipe.cluster``
#: registers ``cluster``): the runtime does not import them, the package is imported by name when first
#: asked for, as its dependency (Ray) is optional.
_REMOTE: dict[str, Callable[..., Executor]] = {}
_PROVIDERS = {"cluster": "flowpipe.cluster"}


def provide(kind: str, factory: Callable[..., Executor]) -> None:
    """Register the executor ``executor(..., cluster=ADDRESS)`` makes (called by ``flowpipe.cluster``)."""
    _REMOTE[kind] = factory


def executor(spec: GraphSpec, processes: int | str | None = None, *, cluster: str | None = None,
             name: str | None = None, max_frames: int | None = None,
             progress: Callable[[dict[str, Any]], None] | None = None, record_times: bool = False,
             share: Share | None = None, hooks: RunHooks | None = None) -> Executor:
    """The executor for ``spec``: over the hosts of a cluster at ``cluster`` (a Ray address; ``name`` names
    the run there), else over ``processes`` processes (the graph's ``processes`` when None; ``auto``
    decided here: ``spec.processes`` says what was), else in this process."""
    if cluster:
        unused = [arg for arg, value in (("progress", progress), ("record_times", record_times), ("share", share),
                                          ("hooks", hooks)) if value]
        if unused:  # a cluster's hosts run their parts themselves, and report through the controller
            raise ValueError(f"a run over a cluster takes no {', '.join(unused)}")
        if "cluster" not in _REMOTE:
            importlib.import_module(_PROVIDERS["cluster"])
        return _REMOTE["cluster"](spec, cluster, name or "flowpipe", max_frames=max_frames)
    n = resolve_processes(spec, processes)
    spec.processes = n
    short = open_files_short(n, len(spec.sources()))
    if short is not None:  # said before any node opens, not as "Too many open files" from one of them
        raise GraphError(Diagnostic(short, file=spec.file))
    if n > 1:
        return ShardedRun(spec, n, max_frames=max_frames, progress=progress, record_times=record_times,
                          share=share, hooks=hooks)
    return Runner(spec, max_frames=max_frames, progress=progress, record_times=record_times, share=share,
                  hooks=hooks)

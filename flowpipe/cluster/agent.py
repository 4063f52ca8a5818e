"""A host agent: one Ray actor per host, running that host's streams in flowpipe's own runtime.

Frames never travel through Ray: the agent runs the part of the graph its streams reach with the same
runtime as ``flowpipe run`` on that host (shards and a device owner when the host has the cores, one
process otherwise), so decode, shared memory and the accelerator stay local. Only control calls, progress
and the final statistics cross the network.
"""
from __future__ import annotations

import os
import pickle
import socket
import threading
from typing import Any

from ..graph import GraphSpec
from ..runtime.context import Resume


class HostAgent:
    """Runs ``sources`` of the graph (and every node they reach) on this host. ``start`` returns at once;
    ``progress`` answers while the run goes on; ``result`` waits for its statistics."""

    def __init__(self, payload: bytes, sources: list[str], shard_base: int, resume: dict[str, int] | None = None,
                 generation: int = 0, max_frames: int | None = None):
        from ..runtime.shards import subgraph

        full: GraphSpec = pickle.loads(payload)  # noqa: S301 - from the controller of this run
        self.spec = subgraph(full, sources)
        self.streams = len(full.sources())
        self.sources = sources
        self.shard_base = shard_base
        self.resume = Resume(generation, dict(resume or {}))
        self.max_frames = max_frames
        self.runner: Any = None
        self.summary: dict[str, Any] | None = None
        self.done = threading.Event()
        self.opened, self.go = threading.Event(), threading.Event()
        self.started = False

    def start(self) -> dict[str, Any]:
        from ..runtime.runner import Runner
        from ..runtime.shards import ShardedRun, resolve_processes

        processes = resolve_processes(self.spec, self.spec.processes)
        if processes > 1:
            self.runner = ShardedRun(self.spec, processes, max_frames=self.max_frames, shard_base=self.shard_base,
                                     resume=self.resume, on_opened=self._opened)
        else:
            self.runner = Runner(self.spec, max_frames=self.max_frames, shard=(self.shard_base, 1),
                                 streams=self.streams, resume=self.resume, on_opened=self._opened)
        threading.Thread(target=self._run, name="flowpipe:agent", daemon=True).start()
        while not self.opened.wait(0.1) and not self.done.is_set():
            pass
        return {"host": socket.gethostname(), "pid": os.getpid(), "processes": processes, "streams": self.sources,
                "opened": self.opened.is_set()}

    def _opened(self) -> bool:
        """Every node open: wait for the controller's word (every host opens before any frame flows, so the
        first host's truncation of a shared output comes before another host's first line)."""
        self.opened.set()
        self.go.wait()
        return self.started

    def begin(self, start: bool = True) -> None:
        self.started = start
        self.go.set()

    def _run(self) -> None:
        try:
            self.summary = self.runner.run().to_json()
        except BaseException as e:  # noqa: BLE001 - whatever ends the run is its result, one line
            self.summary = {"exit": 1, "error": f"{type(e).__name__}: {e}", "frames": {}, "streams": {}}
        finally:
            self.done.set()

    def progress(self) -> dict[str, Any]:
        """Frames by fate, and per stream the frames accounted so far (where a re-placed stream resumes)."""
        snap = self.runner.snapshot() if self.runner is not None else {}
        out: dict[str, Any] = {k: snap.get(k, 0) for k in ("in", "out", "dropped", "failed")}
        out["streams"] = dict(self.runner.per_stream) if self.runner is not None else {}
        return out

    def result(self, timeout: float = 1.0) -> dict[str, Any] | None:
        """The run's statistics once it has ended, else None after ``timeout`` seconds."""
        return self.summary if self.done.wait(timeout) else None

    def stop(self, now: bool = False) -> None:
        if self.runner is not None:
            self.runner.abort() if now else self.runner.stop()

"""A host agent: one Ray actor per host, running that host's streams in flowpipe's own runtime.

Frames never travel through Ray: the agent runs the part of the graph its streams reach with the same
runtime as ``flowpipe run`` on that host (shards and a device owner when the host has the cores, one
process otherwise), so decode, shared memory and the accelerator stay local. Only control calls, progress
and the final statistics cross the network. Inference nodes without a ``cache_dir`` get the host's model
cache, so an agent started again on a host loads its compiled models from there (FIL, not FEIL).
"""
from __future__ import annotations

import errno
import logging
import os
import pickle
import socket
import threading
import time
from pathlib import Path
from typing import Any

from ..graph import GraphSpec
from ..metrics import Collector, run_metrics
from ..runtime.commands import Command
from ..runtime.context import Resume, RunHooks, Share
from ..runtime.executor import Executor, executor

log = logging.getLogger("flowpipe.cluster")

#: an HTTP byte range (``Range: bytes=FIRST-LAST``): (first, last), first None for the last ``last`` bytes, last
#: None for all from ``first``; None for the whole file
Span = tuple[int | None, int | None] | None
#: a file's size, where the part read starts (-1: none of the span is in the file), the part's bytes
FilePart = tuple[int, int, bytes]


def byte_span(span: Span, size: int) -> tuple[int, int]:
    """[start, end) of a file of ``size`` bytes that ``span`` names; start -1 where none of it is in the file
    (RFC 9110: a range past the end, the last 0 bytes)."""
    if span is None:
        return 0, size
    first, last = span
    if first is None:
        n = min(size, last or 0)
        return (size - n, size) if n > 0 else (-1, -1)
    if first >= size:
        return -1, -1
    return first, size if last is None else min(size, last + 1)


class HostAgent:
    """Runs ``sources`` of the graph (and every node they reach) on this host. ``start`` returns at once;
    ``progress`` answers while the run goes on; ``result`` waits for its statistics."""

    def __init__(self, payload: bytes, sources: list[str], shard_base: int, resume: dict[str, int] | None = None,
                 generation: int = 0, max_frames: int | None = None, metrics_port: int | None = None):
        from ..runtime.shards import subgraph, with_model_cache

        full: GraphSpec = pickle.loads(payload)  # noqa: S301 - from the controller of this run
        self.spec = subgraph(full, sources + [t.id for t in full.templates()])  # templates: streams to come
        cache = full.cluster.model_cache if full.cluster else None  # unset: this host's
        self.spec.nodes = [with_model_cache(node, cache) for node in self.spec.nodes]
        self.metrics_port = metrics_port
        self.metrics_url: str | None = None
        self.streams = len(full.sources())
        self.sources = sources
        self.shard_base = shard_base
        self.resume = Resume(generation, dict(resume or {}))
        self.max_frames = max_frames
        self.runner: Executor | None = None
        self.summary: dict[str, Any] | None = None
        self.done = threading.Event()
        self.opened, self.go = threading.Event(), threading.Event()
        self.started = False

    def start(self) -> dict[str, Any]:
        self.runner = executor(self.spec, self.spec.processes, max_frames=self.max_frames,
                               share=Share(self.shard_base, 1, self.streams, self.resume, alone=False),
                               hooks=RunHooks(on_opened=self._opened))
        processes = self.spec.processes
        threading.Thread(target=self._run, name="flowpipe:agent", daemon=True).start()
        while not self.opened.wait(0.1) and not self.done.is_set():
            pass
        if self.metrics_port is not None and self.opened.is_set():
            self._serve_metrics(self.metrics_port)
        return {"host": socket.gethostname(), "pid": os.getpid(), "processes": processes, "streams": self.sources,
                "opened": self.opened.is_set(), "metrics": self.metrics_url}

    def _serve_metrics(self, port: int) -> None:
        """This host's counts for Prometheus, on the address the host has in the Ray cluster (a port taken
        by another run on this host: a free one, named in ``flowpipe status``)."""
        import ray
        from prometheus_client import CollectorRegistry, start_http_server

        me, host = self, socket.gethostname()

        def families() -> list[Any]:  # the names and labels of every flowpipe endpoint, with this host's name
            p = me.progress()  # frames by fate and per stream (per node figures stay in each host's --stats)
            return run_metrics({k: p[k] for k in ("in", "out", "dropped", "failed")}, p["streams"],
                               const_labels={"host": host}, running=0 if me.done.is_set() else len(me.sources),
                               streams_help="frames accounted per stream on this host")

        registry = CollectorRegistry()
        registry.register(Collector(families))
        addr = ray.util.get_node_ip_address()
        try:
            self._metrics, _ = start_http_server(port, addr=addr, registry=registry)
        except OSError as e:
            if e.errno != errno.EADDRINUSE:
                raise
            self._metrics, _ = start_http_server(0, addr=addr, registry=registry)
            log.warning("metrics port %d is taken on %s: serving on %d", port, host, self._metrics.server_address[1])
        self.metrics_url = f"http://{addr}:{self._metrics.server_address[1]}/metrics"

    def _opened(self) -> bool:
        """Every node open: wait for the controller's word (every host opens before any frame flows, so the
        first host's truncation of a shared output comes before another host's first line)."""
        self.opened.set()
        self.go.wait()
        return self.started

    def begin(self, start: bool = True) -> None:
        """The controller's word; once started, it returns when frames flow (within 10 s), so a stream added
        right after finds the graph running."""
        self.started = start
        self.go.set()
        until = time.monotonic() + 10
        while start and self.runner is not None and not self.runner.running and not self.done.is_set() \
                and time.monotonic() < until:
            time.sleep(0.01)

    def _run(self) -> None:
        import resource

        def cpu() -> float:
            own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
            return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

        c0 = cpu()
        try:
            self.summary = self._started().run().to_json()
            self.summary["cpu_s"] = round(cpu() - c0, 3)  # this host's processes over the run, Ray's own not
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

    def _started(self) -> Executor:
        if self.runner is None:
            raise RuntimeError("this host's part of the run has not started")
        return self.runner

    def command(self, command: Command) -> Any:
        """A command on this host's streams (``runtime/commands.py``), applied to its run's ``LiveControl``
        (over its processes, where it has several)."""
        return command.apply(self._started().live)

    def file(self, path: str, span: Span = None) -> FilePart | None:
        """A snapshot or clip one of this host's newest events names (None for any other path): its size,
        and the bytes of ``span`` (an HTTP byte range; None: all of it) from where they start (-1: none of the
        span is in the file). Only those bytes travel, not the whole clip for each range a player asks for."""
        file = Path(path).resolve()
        named = {Path(e[k]).resolve() for e in self._started().live.events() for k in ("snapshot", "clip")
                 if isinstance(e.get(k), str)}
        if file not in named or not file.is_file():
            return None
        with file.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            start, end = byte_span(span, size)
            if start < 0:
                return size, -1, b""
            f.seek(start)
            return size, start, f.read(end - start)

    def stop(self, now: bool = False) -> None:
        if self.runner is not None:
            self.runner.abort() if now else self.runner.stop()

"""Streams added to and removed from a running graph (``flowpipe serve``).

A stream is added as a copy of a source node (a ``template: true`` source, or any source of the graph) with
its own config (a camera's URI): it gets its own source thread feeding the same consumers, so the stages
after it (one inference node, one tracker) serve every stream, and the others never pause. Each consumer
waits for one more end of stream while it runs. A stream removed stops its source, waits until every frame
of it that entered has a fate, then every node closes what belongs to it (``Node.end_stream``: its video
file, its tracks). A source that fails (a camera gone after its reconnects) ends its own stream only.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import functools
import logging
import queue
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

import networkx as nx
from pydantic import ValidationError

from ..errors import NodeError, reason
from ..graph import GraphSpec, NodeSpec
from ..graph.validate import config_error
from ..node import Answer, Node, NodeConfig, Source
from .stats import NodeStats

log = logging.getLogger("flowpipe.runtime")


@dataclasses.dataclass
class Added:
    """One stream added to the running graph."""

    spec: NodeSpec
    node: Node
    stream: str
    like: str  # the source it copies
    stop: threading.Event
    done: threading.Event = dataclasses.field(default_factory=threading.Event)  # its source's loop has ended
    state: str = "running"  # running, reconnecting, removing, ended, failed
    error: str | None = None
    added_at: float = dataclasses.field(default_factory=time.time)


def template_of(spec: GraphSpec, like: str | None) -> NodeSpec:
    """The source a stream added to ``spec`` copies: ``like``, else the graph's only template or source."""
    if like is None:
        templates = spec.templates() or spec.sources()
        if len(templates) != 1:
            names = ", ".join(s.id for s in templates) or "none"
            raise ValueError(f"the graph has {len(templates)} sources that a stream can copy ({names}): name one "
                             "with 'like'")
        return templates[0]
    try:
        found = spec.node(like)
    except StopIteration:
        raise ValueError(f"no source named {like!r} in the graph") from None
    if found not in spec.templates() + spec.sources():
        raise ValueError(f"node {like!r} is not a source")
    return found


class PartlyRetunedError(RuntimeError):
    """A change of configs that some processes or hosts of a run took and others, still running, did not:
    the graph the run starts parts from has it (a replacement takes it)."""


def retuned(spec: NodeSpec, fields: dict[str, Any]) -> NodeConfig:
    """Node ``spec``'s config with ``fields`` over it, each a field its contract lets a running graph change
    (``NodeContract.tunable``, never a file it writes); a ValueError in one line otherwise, or where the new
    config would change what the node declares (its contract), which the run was planned on."""
    node = f"node {spec.id!r} ({spec.type})"
    fixed = sorted(set(fields) - spec.contract.retunable)
    if fixed:
        may = ", ".join(sorted(spec.contract.retunable)) or "none"
        raise ValueError(f"{node}: {', '.join(fixed)} cannot change while the graph runs (fields that can: {may})")
    try:
        cfg = type(spec.config).model_validate({**spec.config.model_dump(by_alias=True), **fields})
    except ValidationError as e:
        raise ValueError(f"{node}: {_first_problem(e, type(spec.config))}") from None
    if spec.cls.contract(cfg) != spec.contract:
        raise ValueError(f"{node}: the new config changes what the node declares; start the graph again with it")
    return cfg


def _first_problem(e: ValidationError, model: type[NodeConfig]) -> str:
    """A config's first validation error in one line, as a graph file's are told: ``config.FIELD: what was
    expected`` (an unknown key with the keys there are)."""
    return config_error(model, e.errors()[0])


def retune_specs(spec: GraphSpec, changes: dict[str, dict[str, Any]]) -> dict[str, NodeConfig]:
    """Each node's new config (``retuned``), every node checked before any is changed."""
    known = {s.id: s for s in spec.nodes}
    missing = sorted(set(changes) - set(known))
    if missing:
        raise ValueError(f"no node {missing[0]!r} in the running graph")
    return {nid: retuned(known[nid], fields) for nid, fields in changes.items()}


class _StreamThreads:
    """Threads that run added streams' sources, one stream after another: the stages a source runs in its
    thread (``Runner._runs_in``) allocate there, and glibc gives every new thread a heap arena of its own, so
    a service that started a thread per camera spread its heap over ever more arenas as cameras came and went.
    A thread whose stream ended waits for the next one. (``concurrent.futures``' pool reuses threads too, but
    they are not daemons: one stuck in a camera's read would hold the interpreter's exit.)"""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._count = 0

    def start(self, job: Callable[[], None]) -> None:
        with self._lock:
            if self._idle:
                self._idle -= 1
            else:
                self._count += 1
                threading.Thread(target=self._work, name="flowpipe:stream", daemon=True).start()
        self._jobs.put(job)

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            job()
            with self._lock:
                self._idle += 1

    def close(self) -> None:
        with self._lock:
            for _ in range(self._count):
                self._jobs.put(None)
            self._count = self._idle = 0


class StreamHost(Protocol):
    """What ``LiveStreams`` asks of the single-process runner it adds streams to (``Runner``)."""

    spec: GraphSpec
    running: bool
    started_at: float
    stop_event: threading.Event
    nodes: dict[str, Node]
    stats: dict[str, NodeStats]

    def attach(self, spec: NodeSpec, node: Source, like: str, stop: threading.Event) -> None: ...

    def run_source(self, spec: NodeSpec, node: Source,
                   on_error: Callable[[BaseException], None] | None = None) -> None: ...

    def settle(self, stream: str, timeout: float) -> None: ...

    def detach(self, stream: str, like: str) -> tuple[dict[str, int], float | None, list[NodeError]]: ...

    def stream_accounts(self) -> tuple[dict[str, dict[str, int]], dict[str, float]]: ...

    def has_stream(self, name: str) -> bool: ...


class LiveStreams:
    """The streams a running ``Runner`` was given after its start."""

    KEEP_ENDED = 256  # accounts of removed streams kept for the API

    def __init__(self, runner: StreamHost):
        self.runner = weakref.proxy(runner)  # no cycle: a finished run's pools and fds go with it
        self.added: dict[str, Added] = {}  # by stream
        self.ended: deque[dict[str, Any]] = deque(maxlen=self.KEEP_ENDED)
        self.last_events: list[dict[str, Any]] = []  # what the nodes held when the run closed them
        self._lock = threading.Lock()
        self._threads = _StreamThreads()

    def template(self, like: str | None) -> NodeSpec:
        return template_of(self.runner.spec, like)

    def add(self, stream: str, like: str | None = None, config: dict[str, Any] | None = None) -> Added:
        """Starts stream ``stream`` as a copy of source ``like`` with ``config`` over its settings; a stream of
        that name that failed or ended is removed first (its account kept, as a removal keeps it)."""
        r = self.runner
        if not r.running or r.stop_event.is_set():
            raise RuntimeError("the graph is not running")
        template = self.template(like)
        schema = type(template.config)
        merged = {**template.config.model_dump(), **(config or {})}
        if "stream" in schema.model_fields:
            merged["stream"] = stream  # frames carry the stream's name, not the template's
        try:
            cfg = schema.model_validate(merged)
        except ValidationError as e:
            raise ValueError(f"stream {stream!r}: {_first_problem(e, schema)}") from None
        if template.cls.contract(cfg).live:  # a camera's stream never ends: no node may hold it whole
            for n in nx.descendants(r.spec.dag, template.id):
                whole = r.spec.node(n).contract.whole_stream
                if whole is not None:
                    raise ValueError(f"stream {stream!r}: node {n!r}: {whole}, and this stream is live (it never "
                                     "ends); expected a recorded file")
        old = self.added.get(stream)
        if old is not None and old.state in ("failed", "ended"):  # its place is free: its account is kept
            self.remove(stream)
        with self._lock:
            if stream in self.added or r.has_stream(stream):
                raise ValueError(f"a stream or node named {stream!r} is already in the graph")
            spec = dataclasses.replace(template, id=stream, config=cfg, template=False)
            node = spec.make()
            assert isinstance(node, Source)
            rec = Added(spec, node, stream, template.id, threading.Event())
            self.added[stream] = rec
        try:
            r.attach(spec, node, template.id, rec.stop)
        except Exception as e:  # noqa: BLE001 - the caller gets one line; the graph goes on
            with self._lock:
                del self.added[stream]
            raise ValueError(f"stream {stream!r}: open failed: {reason(e)}") from None
        self._threads.start(functools.partial(self._run, rec))
        log.info("stream %s added (like %s)", stream, template.id)
        return rec

    def _run(self, rec: Added) -> None:
        def failed(err: BaseException) -> None:
            rec.state, rec.error = "failed", str(err)
            log.error("stream %s: %s (the other streams go on)", rec.stream, err)

        assert isinstance(rec.node, Source)
        threading.current_thread().name = f"flowpipe:{rec.stream}"
        try:
            self.runner.run_source(rec.spec, rec.node, failed)
        finally:
            if rec.state == "running":
                rec.state = "ended"
            threading.current_thread().name = "flowpipe:stream"
            rec.done.set()

    def remove(self, stream: str, timeout: float = 30.0) -> dict[str, Any]:
        """Stops stream ``stream``, waits for the fates of its frames, closes what each node keeps of it;
        returns its account."""
        r = self.runner
        with self._lock:
            rec = self.added.get(stream)
            if rec is None or rec.state == "removing":
                raise KeyError(f"no stream named {stream!r} was added to this graph")
            rec.state = "removing" if rec.state in ("running", "reconnecting") else rec.state
        rec.stop.set()
        rec.done.wait(timeout)
        r.settle(stream, timeout)
        counts, latency, errors = r.detach(stream, rec.like)
        try:
            rec.node.close()
        except Exception as e:  # noqa: BLE001
            errors.append(NodeError(rec.stream, rec.spec.type, f"close failed: {type(e).__name__}: {e}"))
        with self._lock:
            del self.added[rec.stream]
        account: dict[str, Any] = dict(counts)
        account.update(stream=stream, state="failed" if rec.error else "removed", error=rec.error,
                       latency_ms=round(latency, 2) if latency is not None else None,
                       in_flight=account["in"] - account["out"] - account["dropped"] - account["failed"],
                       seconds=round(time.time() - rec.added_at, 3))
        if errors:
            account["error"] = "; ".join(str(e) for e in errors)
        self.ended.append(account)
        release_freed_heap()
        log.info("stream %s removed: in %d, out %d, dropped %d, failed %d", stream, account["in"], account["out"],
                 account["dropped"], account["failed"])
        return account

    def states(self) -> list[dict[str, Any]]:
        """Every stream now, the graph's own and those added, with its account so far."""
        r = self.runner
        counts, latency = r.stream_accounts()
        rows: list[tuple[str, str | None, str, str | None, NodeSpec, float]] = [
            (s.id, None, "running" if r.running else "ended", None, s, r.started_at) for s in r.spec.sources()]
        rows += [(rec.stream, rec.like, rec.state, rec.error, rec.spec, rec.added_at)
                 for rec in list(self.added.values())]
        out = []
        for stream, like, state, error, spec, since in rows:
            extra = r.stats[spec.id].extra if spec.id in r.stats else {}
            if state == "running" and extra.get("reconnecting"):
                state = "reconnecting"
            c = counts.get(stream, {"in": 0, "out": 0, "dropped": 0, "failed": 0})
            out.append({"stream": stream, "like": like, "state": state, "error": error,
                        "uri": getattr(spec.config, "uri", None), **c,
                        "latency_ms": round(latency[stream], 2) if stream in latency else None,
                        "reconnects": extra.get("reconnects", 0), "added_at": since})
        return out

    def retune(self, changes: dict[str, dict[str, Any]], opening: bool = False) -> None:
        """Nodes' configs changed while the graph runs: ``changes`` node id -> {field: value}, fields their
        contracts call tunable; every node is checked before any changes, each takes its new config between
        frames (``Node.retune``). ``opening``: every node is open and no frame has gone yet (a process that
        replaces one is given the changes made while it opened)."""
        r = self.runner
        if not (r.running or opening) or r.stop_event.is_set():
            raise RuntimeError("the graph is not running")
        configs = retune_specs(r.spec, changes)
        for nid in configs:
            node = r.nodes.get(nid)
            if node is None:
                raise ValueError(f"node {nid!r} is not open in this process")
            if type(node) is not r.spec.node(nid).cls:
                raise ValueError(f"node {nid!r} runs in another process (isolation: process, or the device "
                                 "owner of a run over several processes): its config cannot change while it runs")
        with self._lock:
            done: list[tuple[str, NodeConfig]] = []
            try:
                for nid, cfg in configs.items():
                    old = r.spec.node(nid).config
                    r.nodes[nid].retune(cfg)
                    r.spec.configure({nid: cfg})
                    done.append((nid, old))
            except Exception:
                for nid, old in reversed(done):  # every node as it was, or none changed
                    r.nodes[nid].retune(old)
                    r.spec.configure({nid: old})
                raise
        for nid in configs:
            log.info("node %s retuned: %s", nid, ", ".join(sorted(changes[nid])))

    def _answers(self, kind: Answer) -> list[Callable[..., Any]]:
        """What the running nodes answer with (``RunContext.provide``), in the graph's node order."""
        given = self.runner.state.provided.get(kind, {})
        return [given[nid] for nid in list(self.runner.nodes) if nid in given]

    def picture(self, stream: str) -> bytes | None:
        """The stream's newest picture, where the graph keeps them (``flowpipe serve``'s preview node)."""
        answers = self._answers("picture")
        return answers[0](stream) if answers else None

    def video(self, stream: str, seq: int) -> tuple[bytes | None, list[tuple[int, bytes]]] | None:
        """The stream's live view after fragment ``seq`` (``flowpipe serve``'s preview node makes it)."""
        answers = self._answers("video")
        return answers[0](stream, seq) if answers else None

    def events(self) -> list[dict[str, Any]]:
        """The newest events of the graph's event sources (analytics nodes), oldest first; once the run has
        closed its nodes, those they held then."""
        if not self.runner.nodes:
            return [dict(e) for e in self.last_events]
        got = [e for answer in self._answers("events") for e in answer()]
        return sorted(got, key=lambda e: e.get("at", 0.0))

    def keep_events(self) -> None:
        """The run ends: its events are kept past its nodes (a finished instance still lists them)."""
        self.last_events = self.events()

    def threads_alive(self) -> bool:
        return any(not rec.done.is_set() for rec in list(self.added.values()))

    def close(self) -> list[NodeError]:
        """The run ends: added streams' sources stop and close (their frames were drained with the run's)."""
        errors = []
        for rec in list(self.added.values()):
            rec.stop.set()
            rec.done.wait(timeout=5.0)
            try:
                rec.node.close()
            except Exception as e:  # noqa: BLE001
                errors.append(NodeError(rec.stream, rec.spec.type, f"close failed: {type(e).__name__}: {e}"))
        self._threads.close()
        return errors


@functools.cache
def _malloc_trim() -> Any:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):  # not glibc (musl, macOS, Windows): nothing to hand back
        return None


def release_freed_heap() -> None:
    """Hands the heap pages freed by a stream's threads back to the OS (glibc keeps them in per-thread arenas:
    without this a service adding and removing cameras for days grows though nothing leaks)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)

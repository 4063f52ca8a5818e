"""The streaming executor: one thread per node, bounded channels, end-of-stream, accounting.

Every frame a source emits is accounted exactly once when its last reference ends: delivered
("out"), "dropped" by a policy, or "failed". Buffer leases travel with the frame's reference and go
back to their pool at that moment, so pools bound the memory in flight.
"""
from __future__ import annotations

import logging
import signal
import threading
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np

from . import memory
from .errors import NodeError
from .frame import Frame, FrameRef
from .graph import GraphSpec, NodeSpec
from .node import Node, Source

log = logging.getLogger("flowpipe")
_EOS = object()


class FrameError(Exception):
    """Raised by a node (often from an async callback) to say which frame failed, or which frames:
    a batched request fails for every frame in it, and the node's ``on_error`` applies to each."""

    def __init__(self, frame: Frame | list[Frame], cause: BaseException | str):
        self.frames = list(frame) if isinstance(frame, (list, tuple)) else [frame]
        self.frame, self.cause = self.frames[0], cause
        super().__init__(str(cause))


def _frame_list(frames: list[Frame]) -> str:
    """``cam-a 4-7, cam-b 4`` : the frames of a batch, per stream."""
    by: dict[str, list[int]] = {}
    for f in frames:
        by.setdefault(f.stream, []).append(f.index)
    out = []
    for stream, idx in by.items():
        idx.sort()
        contiguous = idx[-1] - idx[0] == len(idx) - 1
        out.append(f"{stream} {idx[0]}-{idx[-1]}" if contiguous and len(idx) > 1 else
                   f"{stream} {','.join(map(str, idx))}")
    return ", ".join(out)


class Channel:
    """A bounded FIFO with batch get: under load a consumer wakes once for many items.

    ``overflow`` decides what a full channel does: ``block`` the producer (backpressure, nothing lost),
    or drop (``drop_oldest`` for live sources: the freshest frame wins; ``drop_newest``). Every drop
    goes to ``on_drop`` so the frame is accounted for.
    """

    def __init__(self, capacity: int, overflow: str = "block", on_drop: Callable[[Any], None] | None = None):
        self.capacity = capacity
        self.overflow = overflow
        self.on_drop = on_drop
        self.dropped = 0
        self._items: deque = deque()
        self._cond = threading.Condition(threading.Lock())
        self.closed = False
        self.high_water = 0
        self._woken = False

    def put(self, item: Any, force: bool = False) -> bool:
        victim = None
        with self._cond:
            if not force and len(self._items) >= self.capacity and self.overflow != "block" and not self.closed:
                self.dropped += 1
                if self.overflow == "drop_newest":
                    victim = item
                else:
                    idx = next((i for i, x in enumerate(self._items) if x is not _EOS), None)
                    if idx is None:
                        victim = item
                    else:
                        victim = self._items[idx]
                        del self._items[idx]
                        self._items.append(item)
                        self._cond.notify_all()
            else:
                while not force and len(self._items) >= self.capacity and not self.closed:
                    self._cond.wait()
                if self.closed:
                    return False
                self._items.append(item)
            if len(self._items) > self.high_water:
                self.high_water = len(self._items)
            self._cond.notify_all()
        if victim is not None and self.on_drop is not None:
            self.on_drop(victim)
        return True

    def wake(self) -> None:
        """Wake the consumer with no item (an async completion is ready to collect)."""
        with self._cond:
            self._woken = True
            self._cond.notify_all()

    def get_batch(self) -> list[Any] | None:
        """All queued items; [] when woken without items; None when closed and empty."""
        with self._cond:
            while not self._items and not self.closed and not self._woken:
                self._cond.wait()
            self._woken = False
            if not self._items:
                return None if self.closed else []
            items = list(self._items)
            self._items.clear()
            self._cond.notify_all()
            return items

    def close(self) -> list[Any]:
        with self._cond:
            self.closed = True
            left = list(self._items)
            self._items.clear()
            self._cond.notify_all()
            return left


class StreamRouter:
    """A node's input spread over several worker channels by stream: a stream always meets the same
    worker (first seen, round robin), so per-stream order and per-stream state hold without reordering."""

    def __init__(self, channels: list[Channel]):
        self.channels = channels
        self._assign: dict[str, Channel] = {}
        self._lock = threading.Lock()

    def put(self, item: Any, force: bool = False) -> bool:
        if item is _EOS:
            for ch in self.channels:
                ch.put(_EOS, force=True)
            return True
        stream = item[1].stream
        ch = self._assign.get(stream)
        if ch is None:
            with self._lock:
                ch = self._assign.setdefault(stream, self.channels[len(self._assign) % len(self.channels)])
        return ch.put(item, force)

    @property
    def high_water(self) -> int:
        return max(ch.high_water for ch in self.channels)

    def wake(self) -> None:
        for ch in self.channels:
            ch.wake()

    def close(self) -> list[Any]:
        return [item for ch in self.channels for item in ch.close()]


@dataclass
class NodeStats:
    type: str
    frames: int = 0
    dropped: int = 0
    failed: int = 0
    restarts: int = 0
    busy_s: float = 0.0
    first: float | None = None
    last: float | None = None
    latency: deque = field(default_factory=lambda: deque(maxlen=100_000))
    extra: dict[str, Any] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def summary(self, channel: Channel | None) -> dict[str, Any]:
        lat = np.asarray(self.latency, dtype=np.float64) * 1e3
        span = (self.last - self.first) if self.first is not None and self.last is not None else 0.0
        out: dict[str, Any] = {
            "type": self.type, "frames": self.frames, "dropped": self.dropped, "failed": self.failed,
            "restarts": self.restarts,
            "fps": round(self.frames / span, 2) if span > 0 else None,
            "busy_s": round(self.busy_s, 4),
            "latency_ms": {f"p{q}": round(float(np.percentile(lat, q)), 4) if lat.size else None
                           for q in (50, 95, 99)},
            "queue_max": channel.high_water if channel else 0,
        }
        out.update(self.extra)
        return out


class RunContext:
    """What nodes get in ``open``: the graph, the copy ledger, the stop flag and shared services."""

    def __init__(self, spec: GraphSpec, runner: Runner):
        self.spec = spec
        self.ledger = memory.ledger
        self._runner = runner
        self.services: dict[str, Any] = {}

    @property
    def stopping(self) -> bool:
        return self._runner.stop_event.is_set()

    def frames_in_flight(self, node_id: str) -> int:
        """How many frames can be in flight downstream of ``node_id``: the size a source's pool needs."""
        import networkx as nx

        down = nx.descendants(self.spec.dag, node_id)
        queues = sum(self.spec.node(n).queue for n in down)
        holders = sum(getattr(self._runner.nodes.get(n), "max_held", 0) for n in down)
        return queues + holders + 2 * len(down) + 2

    def stats_for(self, node_id: str) -> dict[str, Any]:
        return self._runner.stats[node_id].extra

    def frame_pool(self, node_id: str, nbytes: int, count: int, kind: str | None = None) -> memory.BufferPool:
        """A source's frame pool, in the memory its consumers asked for (negotiated at open: consumers
        open first and publish ``services['memory:<id>']``), else the best shared kind here."""
        for _, consumer, _ in self.spec.consumers(node_id):
            want = self.services.get(f"memory:{consumer}") or {}
            if want.get("frames") == "ocl-pinned" and kind is None:
                return memory.BufferPool(nbytes, count, "ocl-pinned", cl_device=want["cl"])
        return memory.BufferPool(nbytes, count, kind)

    def waker(self, node_id: str) -> Callable[[], None]:
        """A thread-safe callable that makes the engine call ``node.poll()`` soon (async completions)."""
        ch = self._runner.channels.get(node_id)
        return ch.wake if ch is not None else (lambda: None)

    def section(self, name: str, data: dict[str, Any], node_id: str) -> None:
        """A top-level block of ``--stats`` (e.g. ``inference.<id>``)."""
        self._runner.stats[node_id].extra.setdefault("_sections", {})[name] = data


class Runner:
    """Runs a validated graph. Use as ``Runner(spec).run()``; returns a RunResult."""

    def __init__(self, spec: GraphSpec, max_frames: int | None = None, drain_timeout: float = 30.0,
                 progress: Callable[[dict[str, Any]], None] | None = None, handle_signals: bool = True):
        self.spec = spec
        self.max_frames = max_frames
        self.drain_timeout = drain_timeout
        self.progress = progress
        self.handle_signals = handle_signals
        self.stop_event = threading.Event()
        self.abort_event = threading.Event()
        self.nodes: dict[str, Node] = {}
        self.channels: dict[str, Channel] = {}
        self.stats = {n.id: NodeStats(n.type) for n in spec.nodes}
        self.routes: dict[str, dict[str, list[tuple[Channel, str, str]]]] = {}
        self.counts = {"in": 0, "out": 0, "dropped": 0, "failed": 0}
        self._count_lock = threading.Lock()
        self.error: BaseException | None = None
        self.interrupted = False
        self._emitted = 0
        self.per_stream: dict[str, int] = {}
        self.record_times = False
        self.done_times: list[tuple[float, str]] = []
        memory.ledger.edges.clear()

    # accounting ------------------------------------------------------------------------------------
    def _on_final(self, ref: FrameRef) -> None:
        now = time.perf_counter()
        with self._count_lock:
            self.counts[ref.fate] += 1
            self.per_stream[ref.stream] = self.per_stream.get(ref.stream, 0) + 1
            if self.record_times:
                self.done_times.append((now, ref.stream))

    def _overflow_drop(self, node_id: str) -> Callable[[Any], None]:
        st = self.stats[node_id]

        def drop(item: Any) -> None:
            st.dropped += 1
            item[1].ref.end("dropped")

        return drop

    def _fail(self, err: BaseException) -> None:
        if self.error is None:
            self.error = err
            log.error("%s", err)
        self.abort()

    def stop(self) -> None:
        """Graceful: sources stop, queued frames drain, end-of-stream flows to the sinks."""
        self.stop_event.set()

    def abort(self) -> None:
        """Immediate: every channel closes; frames still queued are counted as failed."""
        self.stop_event.set()
        self.abort_event.set()
        for ch in self.channels.values():
            if ch is not None:
                ch.close()

    # emission --------------------------------------------------------------------------------------
    def _emit(self, node_id: str, result: Any, default_port: str | None, held: bool) -> None:
        if result is None:
            return
        if isinstance(result, Frame):
            result = {default_port: [result]}
        elif isinstance(result, list):
            result = {default_port: result}
        routes = self.routes[node_id]
        for port, frames in result.items():
            if port not in routes:
                raise RuntimeError(f"emitted on unknown output port {port!r}; declared: {', '.join(routes)}")
            targets = routes[port]
            for fr in frames if isinstance(frames, list) else [frames]:
                n = len(targets)
                fr.ref.add(n - 1 if held else n)
                for i, (ch, in_port, edge) in enumerate(targets):
                    # each branch gets its own packet (shared pixels, own metadata)
                    pkt = fr if i == 0 else replace(fr, meta=dict(fr.meta), tensors=dict(fr.tensors),
                                                    detections=list(fr.detections))
                    em = memory.ledger.edges[edge]
                    em.frames += 1
                    if em.memory == "none":
                        em.memory = fr.memory
                    if not ch.put((in_port, pkt, edge)):
                        fr.ref.end("failed")

    # threads ---------------------------------------------------------------------------------------
    def _run_source(self, spec: NodeSpec, node: Source) -> None:
        st = self.stats[spec.id]
        port = next(iter(spec.cls.outputs), None)
        try:
            it = iter(node.frames())
            while not self.stop_event.is_set():
                t0 = time.perf_counter()
                try:
                    frame = next(it)
                except StopIteration:
                    break
                t1 = time.perf_counter()
                if frame.ref is None:
                    frame.ref = FrameRef(frame.stream, frame.index)
                frame.ref._on_final = self._on_final
                with self._count_lock:
                    self.counts["in"] += 1
                    self._emitted += 1
                    limit_hit = self.max_frames is not None and self._emitted >= self.max_frames
                st.frames += 1
                st.busy_s += t1 - t0
                st.latency.append(t1 - t0)
                st.first = st.first or t0
                st.last = t1
                self._emit(spec.id, frame, port, held=True)
                if limit_hit:
                    self.stop()
        except Exception as e:  # noqa: BLE001
            self._fail(NodeError(spec.id, spec.type, f"{type(e).__name__}: {e}"))
        finally:
            self._send_eos(spec.id)

    def _send_eos(self, node_id: str) -> None:
        for targets in self.routes[node_id].values():
            for ch, _, _ in targets:
                ch.put(_EOS, force=True)

    def _run_node(self, spec: NodeSpec, node: Node, ch: Channel | None = None,
                  workers_left: list[int] | None = None) -> None:
        ch = ch or self.channels[spec.id]
        st = self.stats[spec.id]
        n_in = sum(len(v) for v in spec.inputs.values())
        eos = 0
        default_port = next(iter(spec.cls.outputs), None)
        held = node.holds_frames
        process, emit, ledger = node.process, self._emit, memory.ledger
        while True:
            batch = ch.get_batch()
            if batch is None:
                return
            if held and not batch:
                self._poll(spec, st, node)
                continue
            for item in batch:
                if item is _EOS:
                    eos += 1
                    if eos == n_in:
                        if workers_left is not None:  # several workers: the last one to finish ends it
                            with st.lock:
                                workers_left[0] -= 1
                                if workers_left[0] > 0:
                                    return
                        try:
                            emit(spec.id, node.flush(), default_port, held)
                        except Exception as e:  # noqa: BLE001
                            self._node_error(spec, st, None, e, held)
                        if held:
                            self._drain(spec, st, node)
                        self._send_eos(spec.id)
                        return
                    continue
                in_port, frame, edge = item
                if self.abort_event.is_set():
                    frame.ref.end("failed")
                    continue
                t0 = time.perf_counter()
                try:
                    with ledger.on_edge(edge):
                        if node.writes_input and frame.ref.count > 1 and frame.data is not None:
                            frame = replace(frame, data=memory.copy(frame.data), meta=dict(frame.meta))
                        result = process(frame, in_port)
                        emit(spec.id, result, default_port, held)
                    if not held:
                        frame.ref.end("out")
                except Exception as e:  # noqa: BLE001
                    self._node_error(spec, st, None if held else frame, e, held)
                t1 = time.perf_counter()
                with st.lock:
                    st.frames += 1
                    st.busy_s += t1 - t0
                    st.latency.append(t1 - t0)
                    if st.first is None:
                        st.first = t0
                    st.last = max(st.last or t1, t1)
            if held:
                self._poll(spec, st, node)

    def _drain(self, spec: NodeSpec, st: NodeStats, node: Node) -> None:
        """After ``flush``: what an async node still reports through ``poll`` (failed requests whose
        frames are not yet accounted for), until it has nothing left."""
        for _ in range(st.frames + 1):
            if not self._poll(spec, st, node):
                return

    def _poll(self, spec: NodeSpec, st: NodeStats, node: Node) -> bool:
        """Collect what an async node has finished (in order) and send it on; False when it had nothing."""
        try:
            out = node.poll()
            self._emit(spec.id, out, next(iter(spec.cls.outputs), None), True)
            return bool(out)
        except Exception as e:  # noqa: BLE001
            self._node_error(spec, st, None, e, True)
            return True

    def _node_error(self, spec: NodeSpec, st: NodeStats, frame: Frame | None, err: Exception, held: bool) -> None:
        frames = [frame] if frame is not None else []
        if isinstance(err, FrameError):
            frames, cause = err.frames, err.cause
            frame = frames[0]
        else:
            cause = err
        msg = f"{type(cause).__name__}: {cause}" if isinstance(cause, BaseException) else str(cause)
        if len(frames) > 1:
            msg += f" (a batch of {len(frames)} frames: {_frame_list(frames)})"
        if spec.on_error == "restart" and frame is not None and st.restarts < spec.restarts:
            st.restarts += 1
            st.failed += len(frames)
            log.warning("node '%s' (%s), stream '%s', frame %d: %s (restart %d/%d)", spec.id, spec.type,
                        frame.stream, frame.index, msg, st.restarts, spec.restarts)
            for f in frames:
                f.ref.end("failed")
            if not isinstance(err, FrameError):  # a worker process restarts itself; a thread node reopens
                node = self.nodes[spec.id]
                try:
                    node.close()
                    node.open(self._ctx)
                except Exception as e:  # noqa: BLE001
                    self._fail(NodeError(spec.id, spec.type, f"restart failed: {type(e).__name__}: {e}"))
            return
        if spec.on_error == "drop" and frame is not None:
            st.dropped += len(frames)
            log.warning("node '%s' (%s), stream '%s', frame %d: %s (dropped by policy)",
                        spec.id, spec.type, frame.stream, frame.index, msg)
            for f in frames:
                f.ref.end("dropped")
            return
        st.failed += max(len(frames), 1)
        for f in frames:
            f.ref.end("failed")
        self._fail(NodeError(spec.id, spec.type, msg, frame.stream if frame else None,
                             frame.index if frame else None))

    # the run ---------------------------------------------------------------------------------------
    def run(self) -> RunResult:
        from .isolation import maybe_isolate

        t_start = time.perf_counter()
        ctx = self._ctx = RunContext(self.spec, self)
        order = self.spec.topo_order()
        for s in order:
            if not s.cls.inputs:
                self.channels[s.id] = None  # type: ignore[assignment]
            elif s.workers > 1:
                self.channels[s.id] = StreamRouter(  # type: ignore[assignment]
                    [Channel(s.queue, s.overflow, self._overflow_drop(s.id)) for _ in range(s.workers)])
            else:
                self.channels[s.id] = Channel(s.queue, s.overflow, self._overflow_drop(s.id))
            self.routes[s.id] = {p: [] for p in s.cls.outputs}
        for s in order:
            for port, refs in s.inputs.items():
                for up_id, up_port in refs:
                    self.routes[up_id][up_port].append((self.channels[s.id], port, f"{up_id}->{s.id}"))
        opened: list[tuple[NodeSpec, Node]] = []
        threads: list[threading.Thread] = []
        old_handlers = self._install_signals()
        cv_threads = self._limit_library_threads()
        try:
            # open sinks first so a source never feeds a node that is not ready
            for s in reversed(order):
                node = maybe_isolate(s)
                self.nodes[s.id] = node
                try:
                    node.open(ctx)
                except Exception as e:  # noqa: BLE001
                    raise NodeError(s.id, s.type, f"open failed: {type(e).__name__}: {e}") from e
                opened.append((s, node))
            for s, node in opened:
                if isinstance(node, Source):
                    threads.append(threading.Thread(target=self._run_source, args=(s, node), name=f"flowpipe:{s.id}",
                                                    daemon=True))
                elif s.workers > 1:
                    left = [s.workers]
                    for i, ch in enumerate(self.channels[s.id].channels):
                        threads.append(threading.Thread(target=self._run_node, args=(s, node, ch, left),
                                                        name=f"flowpipe:{s.id}:{i}", daemon=True))
                else:
                    threads.append(threading.Thread(target=self._run_node, args=(s, node), name=f"flowpipe:{s.id}",
                                                    daemon=True))
            for t in threads:
                t.start()
            self._wait(threads)
        except KeyboardInterrupt:
            self.interrupted = True
            self.abort()
        except NodeError as e:
            self._fail(e)
        finally:
            for ch in self.channels.values():
                if ch is not None:
                    for item in ch.close():
                        if item is not _EOS:
                            item[1].ref.end("failed")
            for t in threads:
                t.join(timeout=5.0)
            close_errors = []
            for s, node in reversed(opened):
                try:
                    node.close()
                except Exception as e:  # noqa: BLE001
                    close_errors.append(NodeError(s.id, s.type, f"close failed: {type(e).__name__}: {e}"))
                    log.error("%s", close_errors[-1])
            self._restore_signals(old_handlers)
            if cv_threads is not None:
                import cv2

                cv2.setNumThreads(cv_threads)
            if close_errors and self.error is None:
                self.error = close_errors[0]
            # nodes, the context and the runner refer to each other: break the cycle so buffers, fds and
            # device objects go now, not at the next full garbage collection (long-lived processes)
            self.nodes.clear()
            ctx.services.clear()
            ctx._runner = None  # type: ignore[assignment]
        elapsed = time.perf_counter() - t_start
        return RunResult(self, elapsed)

    def _limit_library_threads(self) -> int | None:
        """When the graph alone has at least as many stage threads as there are cores, OpenCV's own thread
        pool only oversubscribes them (measured on 16 cores: 8 streams 283 -> 416 fps): run it single-
        threaded for this run. Returns the previous setting to restore."""
        import os

        try:
            import cv2
        except ImportError:
            return None
        stage_threads = sum(s.workers for s in self.spec.nodes)
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        if stage_threads < cores:
            return None
        previous = cv2.getNumThreads()
        cv2.setNumThreads(1)
        log.info("%d stage threads on %d cores: OpenCV runs single-threaded for this run", stage_threads, cores)
        return previous

    def _wait(self, threads: list[threading.Thread]) -> None:
        last = time.monotonic()
        stop_seen: float | None = None
        while any(t.is_alive() for t in threads):
            next(t for t in threads if t.is_alive()).join(timeout=0.1)
            now = time.monotonic()
            if self.progress is not None and now - last >= 0.5:
                last = now
                self.progress(self.snapshot())
            if self.stop_event.is_set() and not self.abort_event.is_set():
                stop_seen = stop_seen or now
                if now - stop_seen > self.drain_timeout:
                    log.error("drain took longer than %.0fs; aborting", self.drain_timeout)
                    self.abort()
            if self.abort_event.is_set():
                break

    def snapshot(self) -> dict[str, Any]:
        with self._count_lock:
            return dict(self.counts)

    # signals ---------------------------------------------------------------------------------------
    def _install_signals(self) -> dict[int, Any]:
        if not self.handle_signals or threading.current_thread() is not threading.main_thread():
            return {}
        old = {}

        def on_signal(signum: int, _frame: Any) -> None:
            if self.stop_event.is_set():
                log.warning("second interrupt: stopping now")
                self.interrupted = True
                self.abort()
                return
            log.warning("interrupted (%s): finishing frames in flight; interrupt again to stop now",
                        signal.Signals(signum).name)
            self.interrupted = True
            self.stop()

        for sig in (signal.SIGINT, signal.SIGTERM):
            old[sig] = signal.signal(sig, on_signal)
        return old

    def _restore_signals(self, old: dict[int, Any]) -> None:
        for sig, handler in old.items():
            signal.signal(sig, handler)


class RunResult:
    def __init__(self, runner: Runner, elapsed: float):
        self.error = runner.error
        self.interrupted = runner.interrupted
        counts = dict(runner.counts)
        lost = counts["in"] - counts["out"] - counts["dropped"] - counts["failed"]
        counts["failed"] += max(0, lost)  # references never ended: in flight when the run stopped
        self.frames = counts
        self.per_stream = dict(runner.per_stream)
        self.done_times = runner.done_times
        self.elapsed_s = elapsed
        self.exit_code = 1 if self.error else (130 if self.interrupted else 0)
        self.nodes = {s.id: runner.stats[s.id].summary(runner.channels.get(s.id)) for s in runner.spec.nodes}
        edges = {}
        for s in runner.spec.nodes:
            for refs in s.inputs.values():
                for up, _ in refs:
                    name = f"{up}->{s.id}"
                    em = memory.ledger.edges.get(name, memory.EdgeMemory())
                    edges[name] = {"frames": em.frames, "copies": em.copies, "bytes_copied": em.bytes_copied,
                                   "memory": em.memory}
        stray = memory.ledger.edges.get("<unattributed>")
        if stray is not None:
            edges["<unattributed>"] = {"frames": 0, "copies": stray.copies, "bytes_copied": stray.bytes_copied,
                                       "memory": "none"}
        self.edges = edges
        self.inference = {k: v for s in runner.spec.nodes
                          for k, v in runner.stats[s.id].extra.get("_sections", {}).items()}
        for n in self.nodes.values():
            n.pop("_sections", None)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def to_json(self) -> dict[str, Any]:
        out = {"frames": self.frames, "streams": self.per_stream, "nodes": self.nodes, "edges": self.edges,
               "elapsed_s": round(self.elapsed_s, 4), "exit": self.exit_code,
               "error": str(self.error) if self.error else None}
        out.update(self.inference)
        return out


def run(spec: GraphSpec, **kwargs: Any) -> RunResult:
    return Runner(spec, **kwargs).run()

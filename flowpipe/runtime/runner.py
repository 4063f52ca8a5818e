"""The streaming executor: threads joined by bounded channels, end-of-stream, accounting.

A stage runs in its producer's thread where nothing needs a queue in between (``Runner._runs_in``); a
source, a stage that holds frames (inference, a tracker's lookahead), one with several workers, inputs or an
overflow policy, and one that asks ``thread: own`` run in threads of their own behind bounded channels.

Every frame a source emits is accounted exactly once when its last reference ends: delivered
("out"), "dropped" by a policy, or "failed". Buffer leases travel with the frame's reference and go
back to their pool at that moment, so pools bound the memory in flight.

A run owns everything it creates (``RunState``: copy ledger, feeds, collections, memory contracts);
process-wide settings (signal handlers, OpenCV's thread pool) belong to the command line
(``flowpipe.runtime.process_settings``), never to a run.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import networkx as nx

from ..accel import Devices, devices
from ..errors import FrameError, NodeError
from ..frame import Frame, FrameRef
from ..graph import GraphSpec, NodeSpec
from ..memory import ledger as ledgers
from ..memory.ledger import UNATTRIBUTED, EdgeMemory
from ..node import Node, Source
from .account import Account
from .channel import EOS, Channel, Inline, StreamRouter
from .context import NodeContext, RunHooks, RunState, Share
from .live import LiveStreams
from .negotiate import resolve
from .process import isolate
from .stats import NodeStats, RunSummary, frame_list

log = logging.getLogger("flowpipe")
Inbox = Channel | StreamRouter | Inline


class _Nested(threading.local):
    """Time this thread spent in stages run inline, inside the stage that is running now: subtracted from
    that stage's own figures (a stage's wall and CPU time are its own, wherever it runs)."""

    wall: float = 0.0
    cpu: float = 0.0


_nested = _Nested()


class _Gate:
    """Lets a node's worker threads into ``process`` together, and a restart in alone: ``on_error:
    restart`` closes and reopens the one node instance all workers share, which must not happen while
    another worker is inside it."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._inside = 0
        self._closed = False

    def enter(self) -> None:
        with self._cond:
            while self._closed:
                self._cond.wait()
            self._inside += 1

    def leave(self) -> None:
        with self._cond:
            self._inside -= 1
            if self._inside == 0:
                self._cond.notify_all()

    def exclusive(self, action: Callable[[], None]) -> None:
        with self._cond:
            while self._closed:  # another worker is restarting it: that restart serves this error too
                self._cond.wait()
            self._closed = True
            while self._inside:
                self._cond.wait()
        try:
            action()
        finally:
            with self._cond:
                self._closed = False
                self._cond.notify_all()


class Runner:
    """Runs a validated graph: ``Runner(spec).run()`` returns a RunResult.

    ``feeds`` are in-memory inputs for ``list_source`` nodes; what ``collect`` nodes keep comes back in
    ``RunResult.collected``. ``devices`` are the device owners to use (this process's by default).
    """

    def __init__(self, spec: GraphSpec, max_frames: int | None = None, drain_timeout: float = 30.0,
                 progress: Callable[[dict[str, Any]], None] | None = None,
                 feeds: dict[str, list[Any]] | None = None, devices_: Devices | None = None,
                 record_times: bool = False, share: Share | None = None, hooks: RunHooks | None = None):
        self.spec = spec
        share = share or Share()
        # this process's part of the run (a shard: its index, the whole run's streams, where they resume)
        self.share = replace(share, streams=share.streams or max(1, len(spec.sources())))
        self.hooks = hooks or RunHooks()
        self.max_frames = max_frames
        self.drain_timeout = drain_timeout
        self.progress = progress
        self.progress_every = 0.5  # seconds between progress calls
        self.devices = devices_ or devices()
        self.state = RunState(feeds=dict(feeds or {}))
        self.stop_event = threading.Event()
        self.abort_event = threading.Event()
        self.nodes: dict[str, Node] = {}
        self.contexts: dict[str, NodeContext] = {}
        self.channels: dict[str, Inbox] = {}
        self.gates: dict[str, _Gate] = {}
        self.stats = {n.id: NodeStats(n.type) for n in spec.nodes}
        self.routes: dict[str, dict[str, list[tuple[Inbox, str, str]]]] = {}
        self.pids: list[int] = []  # a run in one process starts no other
        self.account = Account(max_frames, self.hooks.fates, record_times)
        self.error: BaseException | None = None
        self.interrupted = False
        self._inputs: dict[str, int] = {}  # per node: inputs whose end of stream it waits for (streams added)
        self.live = LiveStreams(self)
        self.running = False
        self.started_at = time.time()

    @property
    def per_stream(self) -> dict[str, int]:
        """Frames accounted per stream so far."""
        return self.account.per_stream

    # accounting ------------------------------------------------------------------------------------
    def _overflow_drop(self, node_id: str) -> Callable[[Any], None]:
        st = self.stats[node_id]

        def drop(item: Any) -> None:
            with st.lock:
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
            ch.close()

    def interrupt(self) -> None:
        """What Ctrl-C or SIGTERM does: drain on the first, stop at once on the second."""
        if self.stop_event.is_set():
            log.warning("second interrupt: stopping now")
            self.interrupted = True
            self.abort()
            return
        log.warning("interrupted: finishing frames in flight; interrupt again to stop now")
        self.interrupted = True
        self.stop()

    def frames_in_flight(self, node_id: str) -> int:
        """How many frames of the streams through ``node_id`` need to be in flight downstream of it to keep
        every stage busy: the size of the pools it makes, which bound the frames it can have out (the pool
        is the backpressure; a blocking queue fills no further, so its capacity is not memory).

        A stage keeps busy with one frame inside and the graph's ``prefetch`` (1) waiting per worker its
        streams reach (a stream keeps to one worker); streams that share a stage share those frames, each
        keeping at least one there so that it moves on every stage at once; async stages' held frames
        (``max_held``) are shared alike. A stage that drops on overflow keeps its whole queue: its policy
        needs frames to drop, and a live source must never wait for it."""
        dag, spec = self.spec.dag, self.spec
        sources = {n for n in dag if not spec.node(n).inputs}

        def streams(n: str) -> int:
            return max(1, len((nx.ancestors(dag, n) | {n}) & sources))

        mine = streams(node_id)
        total = 2
        for n in nx.descendants(dag, node_id):
            s, share = spec.node(n), streams(n)
            if s.overflow != "block":
                total += s.queue
                continue
            busy = min(s.workers, share) * (1 + min(s.queue, spec.prefetch))
            total += max(mine, -(-busy * mine // share))
            held = self.nodes[n].max_held if n in self.nodes else 0
            total += -(-held * mine // share)
        return total

    # emission --------------------------------------------------------------------------------------
    def _emit(self, node_id: str, result: Any, default_port: str | None, held: bool) -> None:
        if result is None:
            return
        if isinstance(result, Frame):
            result = {default_port: [result]}
        elif isinstance(result, list):
            result = {default_port: result}
        routes = self.routes[node_id]
        ledger = self.state.ledger
        passed = ledger.passed
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
                    if passed(edge):  # the first frame on an edge names its memory (costly to find)
                        ledger.name_memory(edge, fr.memory)
                    if not ch.put((in_port, pkt, edge)):
                        fr.end("failed")

    # threads ---------------------------------------------------------------------------------------
    def run_source(self, spec: NodeSpec, node: Source,
                    on_error: Callable[[BaseException], None] | None = None) -> None:
        """A source's thread, until its context says stop (the run's, or a stream of its own being removed);
        ``on_error`` for a stream added to the running graph: its failure is its own, not the run's."""
        ledgers.bind(self.state.ledger)
        st = self.stats[spec.id]
        port = next(iter(spec.contract.outputs), None)
        start = self.share.resume.start
        ctx = self.contexts[spec.id]
        try:
            it = iter(node.frames())
            while not ctx.stopping:
                t0, c0 = time.perf_counter(), time.thread_time()
                try:
                    frame = next(it)
                except StopIteration:
                    break
                t1 = time.perf_counter()
                st.cpu_s += time.thread_time() - c0
                if frame.index < start.get(frame.stream, 0):  # entered an earlier process of this run
                    if frame.ref is not None:
                        frame.ref.end()  # its buffers go back; not this run's frame to account
                    continue
                if frame.ref is None:
                    frame.ref = FrameRef(frame.stream, frame.index)
                limit_hit = self.account.entered(frame.ref, t1)
                st.frames += 1
                st.busy_s += t1 - t0
                st.latency.append(t1 - t0)
                st.first = st.first or t0
                st.last = t1
                self._emit(spec.id, frame, port, held=True)
                if limit_hit:
                    self.stop()
        except Exception as e:  # noqa: BLE001
            (on_error or self._fail)(NodeError(spec.id, spec.type, f"{type(e).__name__}: {e}"))
        finally:
            self._send_eos(spec.id)

    def _send_eos(self, node_id: str) -> None:
        for targets in self.routes[node_id].values():
            for ch, _, _ in targets:
                ch.put(EOS, force=True)

    def _run_node(self, spec: NodeSpec, node: Node, ch: Channel, workers_left: list[int] | None = None) -> None:
        ledgers.bind(self.state.ledger)
        st = self.stats[spec.id]
        eos = 0
        default_port = next(iter(spec.contract.outputs), None)
        held = node.declared.holds_frames
        gate = self.gates.get(spec.id)
        while True:
            batch = ch.get_batch()
            if batch is None:
                return
            if held and not batch:
                self._poll(spec, st, node)
                continue
            for item in batch:
                if item is EOS:
                    eos += 1
                    if eos >= self._inputs[spec.id]:  # streams added since the start raised it
                        if workers_left is not None:  # several workers: the last one to finish ends it
                            with st.lock:
                                workers_left[0] -= 1
                                if workers_left[0] > 0:
                                    return
                        self._end(spec, node, st, default_port, held)
                        return
                    continue
                self._item(spec, node, st, item, default_port, held, gate)
            if held:
                self._poll(spec, st, node)

    def _end(self, spec: NodeSpec, node: Node, st: NodeStats, default_port: str | None, held: bool) -> None:
        """Every input has ended: what the node still has goes on, then the end of stream."""
        try:
            self._emit(spec.id, node.flush(), default_port, held)
        except Exception as e:  # noqa: BLE001
            self._node_error(spec, st, None, e)
        if held:
            self._drain(spec, st, node)
        self._send_eos(spec.id)

    def _inline(self, spec: NodeSpec, node: Node) -> Callable[[Any], None]:
        """What ``Inline.put`` does for ``node``: the frame through it, or an end of stream counted."""
        st = self.stats[spec.id]
        default_port = next(iter(spec.contract.outputs), None)
        eos = [0]

        def handle(item: Any) -> None:
            if item is not EOS:
                self._item(spec, node, st, item, default_port, False, None)
                return
            eos[0] += 1
            if eos[0] >= self._inputs[spec.id]:  # streams added since the start raised it
                self._end(spec, node, st, default_port, False)

        return handle

    def _item(self, spec: NodeSpec, node: Node, st: NodeStats, item: tuple[str, Frame, str],
              default_port: str | None, held: bool, gate: _Gate | None) -> None:
        """One frame through ``node``: process, send on, account; the stage's time without that of the stages
        its sending ran inline."""
        in_port, frame, edge = item
        if self.abort_event.is_set():
            frame.end("failed")
            return
        writes = node.declared.writes_input
        t0, c0 = time.perf_counter(), time.thread_time()
        w0, n0 = _nested.wall, _nested.cpu
        if gate is not None:
            gate.enter()
        try:
            with self.state.ledger.on_edge(edge):
                if writes and frame.ref is not None and frame.ref.count > 1 and frame.data is not None:
                    frame = replace(frame, data=ledgers.copy(frame.data), meta=dict(frame.meta))
                result = node.process(frame, in_port)
                self._emit(spec.id, result, default_port, held)
            if not held:
                frame.end("out")
            error = None
        except Exception as e:  # noqa: BLE001
            error = e
        finally:
            if gate is not None:
                gate.leave()
        if error is not None:
            self._node_error(spec, st, None if held else frame, error)
        t1, c1 = time.perf_counter(), time.thread_time()
        wall, cpu = (t1 - t0) - (_nested.wall - w0), (c1 - c0) - (_nested.cpu - n0)
        _nested.wall += wall  # a stage this one runs inside takes out both: the nested stages' and this one's
        _nested.cpu += cpu
        with st.lock:
            st.frames += 1
            st.busy_s += wall
            st.cpu_s += cpu
            st.latency.append(wall)
            if st.first is None:
                st.first = t0
            st.last = max(st.last or t1, t1)

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
            self._emit(spec.id, out, next(iter(spec.contract.outputs), None), True)
            return bool(out)
        except Exception as e:  # noqa: BLE001
            self._node_error(spec, st, None, e)
            return True

    def _node_error(self, spec: NodeSpec, st: NodeStats, frame: Frame | None, err: Exception) -> None:
        frames = [frame] if frame is not None else []
        cause: BaseException | str = err
        if isinstance(err, FrameError):
            frames, cause = err.frames, err.cause
            frame = frames[0]
        msg = f"{type(cause).__name__}: {cause}" if isinstance(cause, BaseException) else str(cause)
        if len(frames) > 1:
            msg += f" (a batch of {len(frames)} frames: {frame_list((f.stream, f.index) for f in frames)})"
        if spec.on_error == "restart" and frame is not None:
            with st.lock:
                restart = st.restarts < spec.restarts
                if restart:
                    st.restarts += 1
                    st.failed += len(frames)
                    n = st.restarts
        else:
            restart = False
        if restart and frame is not None:
            log.warning("node '%s' (%s), stream '%s', frame %d: %s (restart %d/%d)", spec.id, spec.type,
                        frame.stream, frame.index, msg, n, spec.restarts)
            for f in frames:
                f.end("failed")
            if not isinstance(err, FrameError):  # a worker process restarts itself; a thread node reopens
                self._reopen(spec)
            return
        if spec.on_error == "drop" and frame is not None:
            with st.lock:
                st.dropped += len(frames)
            log.warning("node '%s' (%s), stream '%s', frame %d: %s (dropped by policy)",
                        spec.id, spec.type, frame.stream, frame.index, msg)
            for f in frames:
                f.end("dropped")
            return
        with st.lock:
            st.failed += max(len(frames), 1)
        for f in frames:
            f.end("failed")
        self._fail(NodeError(spec.id, spec.type, msg, frame.stream if frame else None,
                             frame.index if frame else None))

    def _reopen(self, spec: NodeSpec) -> None:
        node = self.nodes[spec.id]

        def reopen() -> None:
            try:
                node.close()
                node.open(self.contexts[spec.id])
            except Exception as e:  # noqa: BLE001
                self._fail(NodeError(spec.id, spec.type, f"restart failed: {type(e).__name__}: {e}"))

        gate = self.gates.get(spec.id)
        if gate is None:
            reopen()
        else:
            gate.exclusive(reopen)

    # streams added at run time (``LiveStreams``) ------------------------------------------------------
    def attach(self, spec: NodeSpec, node: Source, like: str, stop: threading.Event) -> None:
        """Open ``node``, a copy of source ``like`` for one more stream, into the running graph: it feeds
        the same consumers over the same edges, each of which waits for one more end of stream. A failed
        open leaves nothing behind and raises."""
        stream = spec.id
        self.stats[stream] = NodeStats(spec.type)
        self.routes[stream] = self.routes[like]  # the same consumers, the same edges (named by the template)
        self.contexts[stream] = ctx = self._context(spec, stop=stop, like=like)
        try:
            node.open(ctx)
        except BaseException:
            self.stats.pop(stream, None)
            self.routes.pop(stream, None)
            self.contexts.pop(stream, None)
            raise
        for targets in self.routes[stream].values():  # each consumer waits for one more end of stream
            for _, _, edge in targets:
                self._inputs[edge.split("->", 1)[1]] += 1
        self.account.open_stream(stream)

    def settle(self, stream: str, timeout: float) -> None:
        """Wait until every frame of ``stream`` that entered has a fate (or ``timeout`` passes)."""
        self.account.settle(stream, timeout)

    def detach(self, stream: str, like: str) -> tuple[dict[str, int], float | None, list[NodeError]]:
        """A stream whose frames have their fates leaves the graph: every node closes what it keeps of it,
        its figures go to its template's; returns its account, its latency and what failed on the way."""
        errors = []
        for nid, node in list(self.nodes.items()):
            try:
                node.end_stream(stream)
            except Exception as e:  # noqa: BLE001
                errors.append(NodeError(nid, self.spec.node(nid).type, f"end of stream {stream}: {e}"))
                log.error("%s", errors[-1])
        for ch in self.channels.values():
            if isinstance(ch, StreamRouter):
                ch.forget(stream)
        st = self.stats.pop(stream)
        into = self.stats.get(like)
        if into is not None:  # the source's counts go to its template's (stats keep one entry per node)
            with into.lock:
                into.frames += st.frames
                into.busy_s += st.busy_s
                into.cpu_s += st.cpu_s
        self.contexts.pop(stream, None)
        self.routes.pop(stream, None)
        account, latency = self.account.close_stream(stream)
        return account, latency, errors

    def stream_accounts(self) -> tuple[dict[str, dict[str, int]], dict[str, float]]:
        """Every stream's frames by fate so far, and its smoothed latency (ms)."""
        return self.account.now()

    def has_stream(self, name: str) -> bool:
        """Whether a stream or a node of the graph has this name."""
        return name in self.routes or self.account.has(name)

    # the run ---------------------------------------------------------------------------------------
    def _wire(self, order: list[NodeSpec]) -> None:
        """Inboxes and routes, once the nodes are made (whether a node holds frames decides its inbox)."""
        runs_in: dict[str, str] = {}
        for s in order:
            if s.contract.inputs:
                owner = self._runs_in(s, runs_in)
                if owner is not None:
                    runs_in[s.id] = owner
                    self.channels[s.id] = Inline(self._inline(s, self.nodes[s.id]))
                    self.stats[s.id].extra["thread"] = f"{owner}'s"
                elif s.workers > 1:
                    self.channels[s.id] = StreamRouter(
                        [Channel(s.queue, s.overflow, self._overflow_drop(s.id)) for _ in range(s.workers)])
                    self.gates[s.id] = _Gate()
                else:
                    self.channels[s.id] = Channel(s.queue, s.overflow, self._overflow_drop(s.id))
            self.routes[s.id] = {p: [] for p in s.contract.outputs}
            self._inputs[s.id] = sum(len(v) for v in s.inputs.values())
        for s in order:
            for port, refs in s.inputs.items():
                for up_id, up_port in refs:
                    self.routes[up_id][up_port].append((self.channels[s.id], port, f"{up_id}->{s.id}"))

    def _runs_in(self, s: NodeSpec, runs_in: dict[str, str]) -> str | None:
        """The node whose thread runs ``s`` (its producer's, or the thread that one runs in), or None where
        ``s`` needs a thread of its own: it asks for one (``thread: own``), holds frames past ``process``
        (its thread polls them), has several workers, drops on overflow (a queue to drop from), takes more
        than one input, or its producer has several workers (one node, one thread at a time)."""
        edges = [up for refs in s.inputs.values() for up, _ in refs]
        if s.thread != "auto" or s.workers > 1 or s.overflow != "block" or len(edges) != 1:
            return None
        if self.nodes[s.id].declared.holds_frames or self.spec.node(edges[0]).workers > 1:
            return None
        return runs_in.get(edges[0], edges[0])

    def _threads(self, opened: list[tuple[NodeSpec, Node]]) -> list[threading.Thread]:
        threads = []
        for s, node in opened:
            ch = self.channels.get(s.id)
            if s.template:  # not run: its consumers keep going until the run stops, for streams to come
                threads.append(threading.Thread(target=self._hold, args=(s.id,), name=f"flowpipe:{s.id}",
                                                daemon=True))
            elif isinstance(node, Source):
                threads.append(threading.Thread(target=self.run_source, args=(s, node), name=f"flowpipe:{s.id}",
                                                daemon=True))
            elif isinstance(ch, StreamRouter):
                left = [s.workers]
                for i, c in enumerate(ch.channels):
                    threads.append(threading.Thread(target=self._run_node, args=(s, node, c, left),
                                                    name=f"flowpipe:{s.id}:{i}", daemon=True))
            elif isinstance(ch, Channel):
                threads.append(threading.Thread(target=self._run_node, args=(s, node, ch), name=f"flowpipe:{s.id}",
                                                daemon=True))
        return threads

    def _hold(self, node_id: str) -> None:
        """A template source's place: its end of stream goes out when the run stops."""
        self.stop_event.wait()
        self._send_eos(node_id)

    def _context(self, s: NodeSpec, stop: threading.Event | None = None, like: str | None = None) -> NodeContext:
        ch = self.channels.get(s.id)
        run_stop = self.stop_event

        def stopping() -> bool:
            return run_stop.is_set() or (stop is not None and stop.is_set())

        return NodeContext(s.id, self.state, self.devices, self.stats[s.id].extra, self.share,
                           ch.wake if ch is not None else (lambda: None), stopping, self.frames_in_flight,
                           self.snapshot, like=like)

    def _make(self, s: NodeSpec) -> Node:
        """The node that runs graph node ``s``: the hooks' (a device owner's client), else its own type,
        in a worker process where it asks for one."""
        made = self.hooks.make_node(s) if self.hooks.make_node is not None else None
        if made is not None:
            return made
        return isolate(s, self.spec.plugins, self.spec.plugin_dir) if s.isolation == "process" else s.make()

    def run(self) -> RunResult:
        t_start = time.perf_counter()
        order = self.spec.topo_order()
        opened: list[tuple[NodeSpec, Node]] = []
        threads: list[threading.Thread] = []
        ledgers.bind(self.state.ledger)  # copies made while nodes open count in this run
        try:
            for s in order:
                self.nodes[s.id] = self._make(s)
            self._wire(order)
            for s in order:
                self.contexts[s.id] = self._context(s)
            self.state.contracts = resolve(self.spec, self.nodes, self.devices, self.frames_in_flight)
            # consumers open before producers: a source never feeds a node that is not ready, and an
            # async consumer's max_held is known when its producer sizes a pool (frames_in_flight)
            for s in reversed(order):
                node = self.nodes[s.id]
                if s.template:  # not opened: streams added at run time open their own copy of it
                    opened.append((s, node))
                    continue
                try:
                    node.open(self.contexts[s.id])
                except Exception as e:
                    raise NodeError(s.id, s.type, f"open failed: {type(e).__name__}: {e}") from e
                opened.append((s, node))
            if self.hooks.on_opened is None or self.hooks.on_opened():
                threads = self._threads(opened)
                self.running = True
                for t in threads:
                    t.start()
                self._wait(threads)
            else:
                self.interrupted = True  # stopped before any frame: another shard failed to open
        except KeyboardInterrupt:
            self.interrupted = True
            self.abort()
        except NodeError as e:
            self._fail(e)
        finally:
            self.running = False
            for ch in self.channels.values():
                for item in ch.close():
                    if item is not EOS:
                        item[1].ref.end("failed")
            for t in threads:
                t.join(timeout=5.0)
            close_errors = self.live.close()
            for s, node in reversed(opened):
                if s.template:
                    continue
                try:
                    node.close()
                except Exception as e:  # noqa: BLE001
                    close_errors.append(NodeError(s.id, s.type, f"close failed: {type(e).__name__}: {e}"))
                    log.error("%s", close_errors[-1])
            self.state.contracts.close()
            ledgers.bind(None)
            if close_errors and self.error is None:
                self.error = close_errors[0]
            # nodes, their contexts and the runner refer to each other: break the cycle so buffers, fds and
            # device objects go now, not at the next full garbage collection (long-lived processes)
            self.nodes.clear()
            self.contexts.clear()
        elapsed = time.perf_counter() - t_start
        return RunResult(self, elapsed)

    def _wait(self, threads: list[threading.Thread]) -> None:
        last = time.monotonic()
        stop_seen: float | None = None
        while any(t.is_alive() for t in threads) or self.live.threads_alive():
            alive = next((t for t in threads if t.is_alive()), None)
            if alive is not None:
                alive.join(timeout=0.1)
            else:
                time.sleep(0.1)
            now = time.monotonic()
            if self.progress is not None and now - last >= self.progress_every:
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
        """Frames by fate so far, and per node counts (thread-safe; for progress and metrics)."""
        out: dict[str, Any] = self.account.frames()
        out["nodes"] = {nid: {"type": st.type, "frames": st.frames, "dropped": st.dropped, "failed": st.failed,
                              "busy_s": st.busy_s,
                              "queue_max": self.channels[nid].high_water if nid in self.channels else 0}
                        for nid, st in self.stats.items()}
        return out


class RunResult(RunSummary):
    def __init__(self, runner: Runner, elapsed: float):
        self.error = runner.error
        self.interrupted = runner.interrupted
        counts = runner.account.frames()
        lost = counts["in"] - counts["out"] - counts["dropped"] - counts["failed"]
        counts["failed"] += max(0, lost)  # references never ended: in flight when the run stopped
        self.frames = counts
        self.per_stream = dict(runner.per_stream)
        self.done_times = runner.account.done_times
        self.elapsed_s = elapsed
        self.exit_code = 1 if self.error else (130 if self.interrupted else 0)
        self.nodes = {s.id: runner.stats[s.id].summary(runner.channels.get(s.id)) for s in runner.spec.nodes}
        self.collected = runner.state.collected
        ledger = runner.state.ledger
        edges: dict[str, dict[str, Any]] = {}
        for s in runner.spec.nodes:
            for refs in s.inputs.values():
                for up, _ in refs:
                    name = f"{up}->{s.id}"
                    em = ledger.edges.get(name, EdgeMemory())
                    edges[name] = {"frames": em.frames, "copies": em.copies, "bytes_copied": em.bytes_copied,
                                   "memory": em.memory}
        stray = ledger.edges.get(UNATTRIBUTED)
        if stray is not None:
            edges[UNATTRIBUTED] = {"frames": 0, "copies": stray.copies, "bytes_copied": stray.bytes_copied,
                                   "memory": "none"}
        self.edges = edges
        self.contracts = runner.state.contracts.describe()
        self.inference = dict(runner.state.sections)


def run(spec: GraphSpec, **kwargs: Any) -> RunResult:
    return Runner(spec, **kwargs).run()

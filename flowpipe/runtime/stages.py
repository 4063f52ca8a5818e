"""How each stage of a run works: a source's loop, a node's loop behind its inbox or inline in its producer's
thread, what a node emits going to its consumers, and the ``on_error`` policy (fail, drop, restart).

Every frame a source emits is accounted exactly once when its last reference ends (``Account``). Buffer
leases travel with the frame's reference and go back to their pool at that moment, so pools bound the
memory in flight. A stage's wall and CPU time are its own, wherever it runs: time spent in stages run
inline inside it is taken out.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..errors import FrameError, NodeError, reason
from ..frame import Frame, FrameRef
from ..graph import GraphSpec, NodeSpec
from ..memory import ledger as ledgers
from ..node import AsyncNode, Node, Source
from .account import Account
from .channel import EOS, Channel, Inline, StreamRouter
from .context import NodeContext, RunState, Share
from .stats import NodeStats, frame_list

log = logging.getLogger("flowpipe")
Inbox = Channel | StreamRouter | Inline


class _Nested(threading.local):
    """Time this thread spent in stages run inline, inside the stage that is running now: subtracted from
    that stage's own figures (a stage's wall and CPU time are its own, wherever it runs)."""

    wall: float = 0.0
    cpu: float = 0.0


_nested = _Nested()


class Gate:
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


class Stages:
    """The stages of one run at work. It shares the run's tables (nodes, contexts, inboxes, routes, figures:
    the runner fills them as it wires the graph and as streams come and go) and calls back into the run to
    stop it (a frame limit) or fail it (an error no policy takes)."""

    def __init__(self, spec: GraphSpec, state: RunState, account: Account, share: Share,
                 stop: Callable[[], None], fail: Callable[[BaseException], None]):
        self.spec, self.state, self.account, self.share = spec, state, account, share
        self.stop, self.fail = stop, fail
        self.stop_event = threading.Event()
        self.abort_event = threading.Event()
        self.nodes: dict[str, Node] = {}
        self.contexts: dict[str, NodeContext] = {}
        self.stats = {n.id: NodeStats(n.type) for n in spec.nodes}
        self.routes: dict[str, dict[str, list[tuple[Inbox, str, str]]]] = {}
        self.gates: dict[str, Gate] = {}
        self.eos_due: dict[str, int] = {}  # per node: inputs whose end of stream it waits for (streams added)

    def overflow_drop(self, node_id: str) -> Callable[[Any], None]:
        st = self.stats[node_id]

        def drop(item: Any) -> None:
            with st.lock:
                st.dropped += 1
            item[1].ref.end("dropped")

        return drop

    def emit(self, node_id: str, result: Any, default_port: str | None, held: bool) -> None:
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
                if limit_hit is None:  # the run's frame limit reached by the other sources: not this run's
                    frame.ref.end()  # its buffers go back
                    break
                st.frames += 1
                st.busy_s += t1 - t0
                st.latency.append(t1 - t0)
                st.first = st.first or t0
                st.last = t1
                self.emit(spec.id, frame, port, held=True)
                if limit_hit:
                    self.stop()
        except Exception as e:  # noqa: BLE001
            (on_error or self.fail)(NodeError(spec.id, spec.type, reason(e)))
        finally:
            self.send_eos(spec.id)

    def send_eos(self, node_id: str) -> None:
        for targets in self.routes[node_id].values():
            for ch, _, _ in targets:
                ch.put(EOS, force=True)

    def run_node(self, spec: NodeSpec, node: Node, ch: Channel, workers_left: list[int] | None = None) -> None:
        ledgers.bind(self.state.ledger)
        st = self.stats[spec.id]
        eos = 0
        default_port = next(iter(spec.contract.outputs), None)
        held = node.declared.holds_frames and isinstance(node, AsyncNode)
        gate = self.gates.get(spec.id)
        while True:
            batch = ch.get_batch()
            if batch is None:
                return
            if held and not batch:
                self.poll(spec, st, node)
                continue
            for item in batch:
                if item is EOS:
                    eos += 1
                    if eos >= self.eos_due[spec.id]:  # streams added since the start raised it
                        if workers_left is not None:  # several workers: the last one to finish ends it
                            with st.lock:
                                workers_left[0] -= 1
                                if workers_left[0] > 0:
                                    return
                        self.end(spec, node, st, default_port, held)
                        return
                    continue
                self.item(spec, node, st, item, default_port, held, gate)
            if held:
                self.poll(spec, st, node)

    def end(self, spec: NodeSpec, node: Node, st: NodeStats, default_port: str | None, held: bool) -> None:
        """Every input has ended: what the node still has goes on, then the end of stream."""
        try:
            self.emit(spec.id, node.flush(), default_port, held)
        except Exception as e:  # noqa: BLE001
            self.node_error(spec, st, None, e)
        if held:
            self.drain(spec, st, node)
        self.send_eos(spec.id)

    def inline(self, spec: NodeSpec, node: Node) -> Callable[[Any], None]:
        """What ``Inline.put`` does for ``node``: the frame through it, or an end of stream counted."""
        st = self.stats[spec.id]
        default_port = next(iter(spec.contract.outputs), None)
        eos = [0]

        def handle(item: Any) -> None:
            if item is not EOS:
                self.item(spec, node, st, item, default_port, False, None)
                return
            eos[0] += 1
            if eos[0] >= self.eos_due[spec.id]:  # streams added since the start raised it
                self.end(spec, node, st, default_port, False)

        return handle

    def item(self, spec: NodeSpec, node: Node, st: NodeStats, item: tuple[str, Frame, str],
              default_port: str | None, held: bool, gate: Gate | None) -> None:
        """One frame through ``node``: process, send on, account; the stage's time without that of the stages
        its sending ran inline."""
        in_port, frame, edge = item
        if self.abort_event.is_set():
            frame.end("failed")
            return
        writes = node.declared.writes_input
        passes = False
        t0, c0 = time.perf_counter(), time.thread_time()
        w0, n0 = _nested.wall, _nested.cpu
        if gate is not None:
            gate.enter()
        try:
            with self.state.ledger.on_edge(edge):
                if writes and frame.ref is not None and frame.ref.count > 1 and frame.data is not None:
                    frame = replace(frame, data=ledgers.copy(frame.data), meta=dict(frame.meta))
                result = node.process(frame, in_port)
                # a node that hands its frame on gives the next stage its own reference (as a node that
                # holds frames does): a stage run inline, or on another thread before this one ends its
                # reference, sees the frame with one reader and need not copy it to write into it
                passes = not held and frame.ref is not None and _only(result) is frame
                self.emit(spec.id, result, default_port, held or passes)
            if not held and not passes:
                frame.end("out")
            error = None
        except Exception as e:  # noqa: BLE001
            error = e
        finally:
            if gate is not None:
                gate.leave()
        if error is not None:
            self.node_error(spec, st, None if held or passes else frame, error)
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

    def drain(self, spec: NodeSpec, st: NodeStats, node: Node) -> None:
        """After ``flush``: what an async node still reports through ``poll`` (failed requests whose
        frames are not yet accounted for), until it has nothing left."""
        for _ in range(st.frames + 1):
            if not self.poll(spec, st, node):
                return

    def poll(self, spec: NodeSpec, st: NodeStats, node: Node) -> bool:
        """Collect what an async node has finished (in order) and send it on; False when it had nothing."""
        if not isinstance(node, AsyncNode):
            return False
        try:
            out = node.poll()
            self.emit(spec.id, out, next(iter(spec.contract.outputs), None), True)
            return bool(out)
        except Exception as e:  # noqa: BLE001
            self.node_error(spec, st, None, e)
            return True

    def node_error(self, spec: NodeSpec, st: NodeStats, frame: Frame | None, err: Exception) -> None:
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
                self.reopen(spec)
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
        self.fail(NodeError(spec.id, spec.type, msg, frame.stream if frame else None,
                             frame.index if frame else None))

    def reopen(self, spec: NodeSpec) -> None:
        node = self.nodes[spec.id]

        def reopen() -> None:
            try:
                node.close()
                node.open(self.contexts[spec.id])
            except Exception as e:  # noqa: BLE001
                self.fail(NodeError(spec.id, spec.type, f"restart failed: {type(e).__name__}: {e}"))

        gate = self.gates.get(spec.id)
        if gate is None:
            reopen()
        else:
            gate.exclusive(reopen)

    def hold(self, node_id: str) -> None:
        """A template source's place: its end of stream goes out when the run stops."""
        self.stop_event.wait()
        self.send_eos(node_id)


def _only(result: Any) -> Frame | None:
    """The one frame a node's ``process`` returned (a frame, or a list of one), else None."""
    if isinstance(result, Frame):
        return result
    if isinstance(result, list) and len(result) == 1:
        return result[0] if isinstance(result[0], Frame) else None
    return None

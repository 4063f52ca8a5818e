"""The single-process executor: it makes the nodes, resolves the memory contracts, opens the nodes
(consumers first), wires them with bounded channels and starts their threads, waits, drains, closes.

A stage runs in its producer's thread where nothing needs a queue in between (``Runner._runs_in``); a
source, a stage that holds frames (inference, a tracker's lookahead), one with several workers, inputs or an
overflow policy, and one that asks ``thread: own`` run in threads of their own behind bounded channels.
What each stage does with a frame is ``Stages``' (``runtime/stages.py``); every frame's fate is counted in
the run's ``Account``.

A run owns everything it creates (``RunState``: copy ledger, feeds, collections, memory contracts);
process-wide settings (signal handlers, OpenCV's thread pool) belong to the command line
(``flowpipe.runtime.settings``), never to a run.
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
from ..errors import NodeError, OutputLostError, reason
from ..graph import GraphSpec, NodeSpec
from ..memory import ledger as ledgers
from ..memory.ledger import UNATTRIBUTED, EdgeMemory
from ..node import AsyncNode, Node, Source
from .account import Account
from .channel import EOS, Channel, Inline, StreamRouter
from .context import NodeContext, RunHooks, RunState, Share
from .journal import Journal
from .live import LiveStreams
from .negotiate import resolve
from .process import isolate
from .stages import Gate, Inbox, Stages
from .stats import NodeStats, RunSummary, frame_list

log = logging.getLogger("flowpipe")


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
        self.state = RunState(feeds=dict(feeds or {}), journal=Journal(spec.journal) if spec.journal else None)
        self.account = Account(max_frames, self.hooks.fates, record_times)
        self.state.pending = self.account.pending
        self.stages = stages = Stages(spec, self.state, self.account, self.share, self.stop, self._fail)
        # the tables the stages work from, filled as the graph is wired and as streams come and go
        self.stop_event, self.abort_event = stages.stop_event, stages.abort_event
        self.nodes, self.contexts, self.stats = stages.nodes, stages.contexts, stages.stats
        self.routes, self.gates = stages.routes, stages.gates
        self.channels: dict[str, Inbox] = {}
        self._attaching = threading.Lock()
        self.pids: list[int] = []  # a run in one process starts no other
        self.error: BaseException | None = None
        self.interrupted = False
        self.live = LiveStreams(self)
        self.running = False
        self.started_at = time.time()

    @property
    def per_stream(self) -> dict[str, int]:
        """Frames accounted per stream so far (a copy: fates go on being counted on other threads)."""
        with self.account.lock:
            return dict(self.account.per_stream)

    def _fail(self, err: BaseException) -> None:
        if isinstance(err, NodeError) and err.file is None:
            s = next((n for n in self.spec.nodes if n.id == err.node_id), None)
            err = err.at(self.spec.file, s.line if s is not None else None)
        if self.error is None:
            self.error = err
            # said when it happens once frames flow (the drain's lines come after it); one that stops the run
            # before any frame is the run's result alone, which its caller says (flowpipe run's 'error:' line)
            log.log(logging.ERROR if self.running else logging.DEBUG, "%s", err)
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
            node = self.nodes.get(n)
            held = node.max_held if isinstance(node, AsyncNode) else 0
            total += -(-held * mine // share)
        return total

    # streams added at run time (``LiveStreams``) ------------------------------------------------------
    def run_source(self, spec: NodeSpec, node: Source,
                   on_error: Callable[[BaseException], None] | None = None) -> None:
        """A source's loop in the calling thread (a stream added to the running graph: its failure is its
        own, given to ``on_error``, not the run's)."""
        self.stages.run_source(spec, node, on_error)

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
        with self._attaching:  # streams added at once (the API's threads) each count their end of stream
            for targets in self.routes[stream].values():
                for _, _, edge in targets:
                    self.stages.eos_due[edge.split("->", 1)[1]] += 1
        self.account.open_stream(stream)

    def settle(self, stream: str, timeout: float) -> None:
        """Wait until every frame of ``stream`` that entered has a fate (or ``timeout`` passes); the nodes that
        hold frames let those of ``stream`` go first (its source has stopped: no next frame comes)."""
        for nid, node in list(self.nodes.items()):
            if not isinstance(node, AsyncNode):
                continue
            try:
                node.stream_stopping(stream)
            except Exception as e:  # noqa: BLE001 - the stream's frames still settle, by the node's own time
                log.error("%s", NodeError(nid, self.spec.node(nid).type, f"stream {stream} stopping: {e}"))
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
                    self.channels[s.id] = Inline(self.stages.inline(s, self.nodes[s.id]))
                    self.stats[s.id].extra["thread"] = f"{owner}'s"
                elif s.workers > 1:
                    self.channels[s.id] = StreamRouter(
                        [Channel(s.queue, s.overflow, self.stages.overflow_drop(s.id)) for _ in range(s.workers)])
                    self.gates[s.id] = Gate()
                else:
                    self.channels[s.id] = Channel(s.queue, s.overflow, self.stages.overflow_drop(s.id))
            self.routes[s.id] = {p: [] for p in s.contract.outputs}
            self.stages.eos_due[s.id] = sum(len(v) for v in s.inputs.values())
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
                threads.append(threading.Thread(target=self.stages.hold, args=(s.id,), name=f"flowpipe:{s.id}",
                                                daemon=True))
            elif isinstance(node, Source):
                threads.append(threading.Thread(target=self.stages.run_source, args=(s, node), name=f"flowpipe:{s.id}",
                                                daemon=True))
            elif isinstance(ch, StreamRouter):
                left = [s.workers]
                for i, c in enumerate(ch.channels):
                    threads.append(threading.Thread(target=self.stages.run_node, args=(s, node, c, left),
                                                    name=f"flowpipe:{s.id}:{i}", daemon=True))
            elif isinstance(ch, Channel):
                threads.append(threading.Thread(target=self.stages.run_node, args=(s, node, ch),
                                                name=f"flowpipe:{s.id}", daemon=True))
        return threads

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
            for s in order:  # what a node would not find when it opens, said before any model compiles
                if not s.template and (why := self.nodes[s.id].declared.missing()) is not None:
                    raise NodeError(s.id, s.type, why)
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
                    raise NodeError(s.id, s.type, f"open failed: {reason(e)}") from e
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
                    what = str(e) if isinstance(e, OutputLostError) else f"close failed: {type(e).__name__}: {e}"
                    close_errors.append(NodeError(s.id, s.type, what, file=self.spec.file, line=s.line))
                    log.error("%s", close_errors[-1])
            self.state.contracts.close()
            if self.state.journal is not None:  # (what the nodes wrote is in the file: closing loses nothing)
                self.state.journal.close()
            ledgers.bind(None)
            if close_errors and self.error is None:
                self.error = close_errors[0]
            self.live.keep_events()
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
        flying = runner.account.in_flight()
        if lost > 0:  # named, and in their streams' counts, as every failed frame is
            why = ("on its error" if runner.error is not None else "on a second interrupt" if runner.interrupted
                   else "with a stage that never returned")
            log.error("%d frames in flight when the run stopped %s counted as failed: %s", lost, why,
                      frame_list(flying) or "not named")
            for stream, _ in flying:
                self.per_stream[stream] = self.per_stream.get(stream, 0) + 1
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

"""One graph over several processes: the streams (one per source) are sharded over worker processes.

The process that starts the run is the supervisor. It splits the sources round-robin over N shard
processes; each shard runs the graph's nodes that its sources reach, in its own ``Runner``, so the
Python stages of different streams no longer queue on one interpreter lock. The supervisor:

- starts every shard and waits until each has opened every node, then lets all of them start (an open
  that fails anywhere stops the run before any frame flows, and names the node and the shard);
- keeps one account: each shard reports its frames by fate several times a second; a shard that dies
  (SIGKILL, out of memory) costs only the frames it had in flight, counted as failed and named by stream;
- forwards the first SIGINT/SIGTERM as a drain to every shard and the second as a stop, and kills shards
  that do not finish after that;
- merges the results: frames by fate, per stream, per node (frames, busy time and fates summed; each
  shard's own block under ``shards``), per edge, with the pid of every shard.

Shard processes ignore SIGINT: a Ctrl-C in a terminal reaches the whole process group, and the supervisor
alone decides what it means.
"""
from __future__ import annotations

import copy
import json
import logging
import multiprocessing as mp
import os
import pickle
import shutil
import signal
import tempfile
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

from ..accel.host import usable_cores
from ..errors import GraphError
from ..graph import GraphSpec, NodeSpec
from ..models import compiled_cache
from ..node import Node
from ..registry import import_plugin
from .board import StreamBoard
from .commands import Add, Answer, Command, OnStream, Retune, Route, Routing
from .context import Resume, RunHooks, Share
from .live import LiveStreams, PartlyRetunedError, retune_specs, template_of
from .messages import (
    Begin,
    FromShard,
    Halt,
    RemoteError,
    ShardCrashed,
    ShardOpened,
    ShardProgress,
    ShardResult,
    StreamCall,
    StreamReply,
    ToShard,
)
from .owner import OwnerClient, OwnerLink, OwnerProcess, OwnerStartStoppedError
from .runner import Runner
from .settings import (
    environment_for_children,
    malloc_arenas_limited,
    no_interrupts_inherited,
    open_files_raised,
    share_library_threads,
)
from .stats import RunSummary, frame_list, merge_nodes

log = logging.getLogger("flowpipe.shards")
REPORT_EVERY_S = 0.2


ADDED_ROWS = 256  # streams one process can take at run time with an exact account at its death (1 MB)


def _inference_of_shards(reports: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each inference node's ``--stats`` over the shards that ran it themselves (no device owner): the last
    shard's block, with the requests and images of every shard summed and how many shards ran it
    (``processes``); a node the device owner served has its own block, put over this one."""
    out: dict[str, dict[str, Any]] = {}
    for r in reports:
        for k, v in r.items():
            if not k.startswith("inference."):
                continue
            had = out.get(k)
            out[k] = merged = dict(v, processes=1)
            if had is not None:
                merged["processes"] += had["processes"]
                for key in ("inferences", "images"):
                    if key in v or key in had:
                        merged[key] = v.get(key, 0) + had.get(key, 0)
    return out


def auto_processes(spec: GraphSpec, cores: int | None = None) -> int:
    """``processes: auto``: one process per stream, never more than cores; 1 on small machines (below 8 cores
    a second interpreter costs more than the lock it frees) and for a single stream. Two streams sharing a
    process share its interpreter, and the one that waits for it sets the slowest stream's rate: face blur, 16
    streams on 16 cores of an H200, at its defaults, in one call alternating, 8 processes (one per 2 cores, as
    before) held every stream at 25 fps in 2 runs of 3 (slowest 26.1, 23.3, 28.9; 514 fps on average), 16 in 3
    of 3 (28.1, 27.8, 25.7; 493 fps), at 4.75 GB of PSS against 3.4 (BENCHMARKS.md section 17)."""
    cores = cores or usable_cores()
    streams = len(spec.sources())
    if cores < 8 or streams < 2:
        return 1
    return max(1, min(streams, cores))


def resolve_processes(spec: GraphSpec, wanted: int | str | None = None) -> int:
    """The number of processes a run uses: the command line's, else the graph's; ``auto`` decided here.
    Never more than there are streams."""
    value = wanted if wanted is not None else spec.processes
    n = auto_processes(spec) if value == "auto" else int(value)
    refused = [(s, s.contract.sharding) for s in spec.nodes if s.contract.sharding]
    if n > 1 and refused:
        s, why = refused[0]
        raise GraphError(f"{spec.file}: node '{s.id}' ({s.type}): processes: {n} is not available with "
                         f"{s.type}: {why}; expected processes: 1")
    if spec.templates():  # streams come at run time: every process takes some
        return max(1, n)
    streams = len(spec.sources()) or 1
    if value != "auto" and n > streams:
        log.warning("processes: %d asked for, %d used: a process runs whole streams, and the graph has %d",
                    n, streams, streams)
    return max(1, min(n, streams))


def plan(spec: GraphSpec, processes: int) -> list[list[str]]:
    """Source ids per shard, round-robin in graph order (shard 0 has the graph's first stream)."""
    shards: list[list[str]] = [[] for _ in range(processes)]
    for i, s in enumerate(spec.sources()):
        shards[i % processes].append(s.id)
    if spec.templates():  # every process can take streams added at run time, even with none of its own
        return shards
    return [s for s in shards if s]


def with_model_cache(s: NodeSpec, cache: str | None = None) -> NodeSpec:
    """``s`` with a model cache where its config names none (``files`` kind ``model_cache``): ``cache``, else
    this host's."""
    unset = [key for key, kind in s.contract.files.items() if kind == "model_cache" and getattr(s.config, key) is None]
    if not unset:
        return s
    c = copy.copy(s)
    c.config = s.config.model_copy(update={key: os.path.expanduser(cache or compiled_cache()) for key in unset})
    return c


def owner_leads(spec: GraphSpec, owned: list[NodeSpec]) -> dict[str, NodeSpec]:
    """Per node the device owner serves, the node that may run ahead of it there (``owner_side``): its only
    producer, fed by one input, feeding nothing else."""
    ids = {s.id for s in owned}
    by_id = {s.id: s for s in spec.nodes}
    leads = {}
    for s in owned:
        refs = [r for rs in s.inputs.values() for r in rs]
        if len(refs) != 1:
            continue
        p = by_id[refs[0][0]]
        if p.contract.owner_side is None or p.id in ids or len(p.inputs) != 1 or len(p.contract.outputs) != 1:
            continue
        if all(v == s.id for _, v, _ in spec.consumers(p.id)):
            leads[s.id] = p
    return leads


def subgraph(spec: GraphSpec, sources: list[str]) -> GraphSpec:
    """The part of ``spec`` that ``sources`` reach: those sources and every node downstream of them, with
    edges from other sources removed."""
    import networkx as nx

    keep = set(sources)
    for src in sources:
        keep |= nx.descendants(spec.dag, src)
    nodes = []
    for s in spec.nodes:
        if s.id not in keep:
            continue
        c = copy.copy(s)
        c.inputs = {p: [r for r in refs if r[0] in keep] for p, refs in s.inputs.items()}
        nodes.append(c)
    sub = copy.copy(spec)
    sub.nodes = nodes
    sub.dag = spec.dag.subgraph(keep).copy()
    sub.processes = 1
    sub.whole = spec.whole or spec
    return sub


# -- shard side --------------------------------------------------------------------------------------------
def _shard_main(conn: Connection, payload: bytes, plugins: list[str], plugin_dir: str | None, index: int,
                count: int, sources: list[str], max_frames: int | None, record_times: bool,
                owner: OwnerLink | None = None, resume: Resume | None = None,
                board: StreamBoard | None = None) -> None:
    """A shard process: the part of the graph its ``sources`` (and the templates) reach, run until it ends."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor decides what an interrupt means
    malloc_arenas_limited()
    share_library_threads(count)
    for mod in plugins:
        import_plugin(mod, plugin_dir)
    spec: GraphSpec = pickle.loads(payload)  # noqa: S301 - from the supervisor that started this process
    keep = sources + [t.id for t in spec.templates()]  # every shard can take streams added at run time
    share = Share(index, count, len(spec.sources()), resume or Resume(), alone=False)
    _ShardSide(conn, index, subgraph(spec, keep), share, max_frames, record_times, owner, board).run()


class _ShardSide:
    """A shard process's runner and its side of the pipe to the supervisor: its progress, the word to start,
    and the commands on its streams (``runtime/commands.py``), each applied to the runner's ``LiveControl``."""

    def __init__(self, conn: Connection, index: int, spec: GraphSpec, share: Share, max_frames: int | None,
                 record_times: bool, owner: OwnerLink | None, board: StreamBoard | None):
        self.conn, self.index, self.owner, self.board = conn, index, owner, board
        self.record_times = record_times
        self.lock = threading.Lock()
        self.gone = threading.Event()  # the supervisor: its end of the pipe closed (killed)
        self.runner = Runner(spec, max_frames=max_frames, progress=self.progress, record_times=record_times,
                             share=share, hooks=RunHooks(make_node=self.owned, fates=board, on_opened=self.on_opened))
        self.runner.progress_every = REPORT_EVERY_S

    def run(self) -> None:
        """Runs this shard's part of the graph until it ends; its result (or what ended it) to the supervisor."""
        try:
            res = self.runner.run()
            summary = res.to_json()
            summary["done_times"] = res.done_times if self.record_times else []
            self.send(ShardResult(summary))
        except BaseException as e:  # noqa: BLE001 - whatever ends the shard is reported, one line
            self.send(ShardCrashed(RemoteError.of(e)))
        finally:
            self.conn.close()

    def owned(self, s: NodeSpec) -> Node | None:
        """A node the device owner serves: its client takes its place."""
        owner = self.owner
        return OwnerClient(s, owner) if owner is not None and s.id in owner.placements else None

    def send(self, msg: FromShard) -> None:
        with self.lock:
            if self.gone.is_set():
                return
            try:
                self.conn.send(msg)
            except (BrokenPipeError, EOFError, ConnectionResetError):  # one line, not a traceback per thread
                self.gone.set()
                log.error("shard %d (pid %d): the run's supervisor is gone; this shard stops now", self.index,
                          os.getpid())
                self.runner.abort()

    def progress(self, snap: dict[str, Any]) -> None:
        self.send(ShardProgress({k: snap[k] for k in ("in", "out", "dropped", "failed")},
                                dict(self.runner.per_stream), _sources_now(self.runner)))

    def on_opened(self) -> bool:
        """Every node is open: wait for the supervisor's word, then listen for more."""
        self.send(ShardOpened(os.getpid()))
        match self.conn.recv():
            case Begin(start, changes):
                if changes:  # configs changed since the graph this process was given was written
                    try:
                        self.runner.live.retune(changes, opening=True)
                    except (ValueError, RuntimeError) as e:  # it runs on as it was given, said once
                        log.error("shard %d could not take the changes made while it opened: %s", self.index, e)
            case other:
                raise RuntimeError(f"the supervisor sent {type(other).__name__} before Begin")
        threading.Thread(target=self.listen, name="flowpipe:shard-control", daemon=True).start()
        return start

    def listen(self) -> None:
        """The supervisor's stop and abort, and commands on the streams, after the start."""
        runner = self.runner
        while True:
            try:
                msg: ToShard = self.conn.recv()
            except (EOFError, OSError):
                runner.abort()  # the supervisor is gone: stop at once
                return
            match msg:
                case StreamCall():
                    threading.Thread(target=self.answer, args=(msg,), name="flowpipe:shard-call", daemon=True).start()
                case Halt(now=False):
                    runner.stop()
                case Halt(now=True):
                    runner.interrupted = True
                    runner.abort()
                    return

    def answer(self, call: StreamCall) -> None:
        """``call``'s command applied here, its answer (or the error it raised) back to the supervisor; the
        board follows the streams it starts and frees."""
        runner, board, command = self.runner, self.board, call.command
        until = time.monotonic() + 10  # streams added again, sent at once after Begin, wait for the start
        while command.route is Route.NEW and not runner.running and not runner.stop_event.is_set() \
                and time.monotonic() < until:
            time.sleep(0.01)
        try:
            if board is not None and call.bind is not None:
                board.bind(*call.bind)  # its frames' entries and fates, exact at a death
            value = command.apply(runner.live)
            freed = command.freed(value)
            if board is not None and freed is not None:
                board.slot.pop(freed, None)  # its row goes to the supervisor to give again
            self.send(StreamReply(call.rid, value))
        except Exception as e:  # noqa: BLE001 - the caller gets it
            self.send(StreamReply(call.rid, error=RemoteError(type(e).__name__, str(e.args[0]) if e.args else str(e))))


# -- supervisor side ------------------------------------------------------------------------------------------
@dataclass
class _Pending:
    """A call to a shard waiting for its reply."""

    shard: _Shard
    done: threading.Event = field(default_factory=threading.Event)
    reply: StreamReply | None = None


@dataclass
class _Shard:
    index: int
    sources: list[str]  # node ids of its sources
    proc: Any
    conn: Connection
    board: StreamBoard
    resume: Resume = field(default_factory=Resume)
    pid: int | None = None
    said_open: bool = False  # it sent ShardOpened: its nodes are open, it waits for Begin
    opened: bool = False  # Begin was sent to it: calls may go to it (one sent before Begin would end it)
    sources_seen: dict[str, dict[str, Any]] = field(default_factory=dict)  # its sources' stats, last reported
    counts: dict[str, int] = field(default_factory=lambda: {"in": 0, "out": 0, "dropped": 0, "failed": 0})
    streams: dict[str, int] = field(default_factory=dict)
    result: dict[str, Any] | None = None
    error: str | None = None
    restarted: bool = False  # a new process took its streams over
    gone: bool = False  # no call reaches it now: its process ended (or ends), its waiting calls were failed
    version: int = 0  # the run's configs it was started with (``ShardedRun.configure``)
    again: list[str] = field(default_factory=list)  # streams added to the process it replaced, to add again
    send_lock: threading.Lock = field(default_factory=threading.Lock)  # the supervisor's and callers' sends


class ShardedRun:
    """Runs ``spec`` with its streams sharded over ``processes`` worker processes; ``run()`` returns a
    ``ShardedResult`` with the same fields as a one-process ``RunResult``."""

    def __init__(self, spec: GraphSpec, processes: int, max_frames: int | None = None,
                 record_times: bool = False, drain_timeout: float = 30.0,
                 progress: Any = None, share: Share | None = None, hooks: RunHooks | None = None):
        self.spec, self.processes = spec, processes
        share = share or Share()
        if hooks is not None and (hooks.make_node is not None or hooks.fates is not None):
            raise ValueError("a run over several processes makes its shards' nodes and boards itself: only "
                             "on_opened may be given")
        self.shard_base = share.index  # this host's first shard index in a run over several hosts
        self.resume = share.resume  # where this run's streams pick up (a run re-placed after a host loss)
        # every shard opened: False stops them unstarted (hosts open together)
        self.on_opened = hooks.on_opened if hooks is not None else None
        self.max_frames, self.record_times = max_frames, record_times
        self.drain_timeout = drain_timeout
        self.progress = progress
        self.shards: list[_Shard] = []
        self._stop_at: float | None = None
        self._abort = False
        self.interrupted = False
        self.pids: list[int] = []
        self.owner: OwnerProcess | None = None
        self.error: str | None = None  # the run's own failure (the device owner's), beside the shards'
        self.running = False
        self.started_at = time.time()
        self._calls: dict[int, _Pending] = {}  # calls to shards waiting for their reply
        self._call_lock = threading.Lock()
        self._rid = 0
        self.version = 0  # configs changed while it runs (``configure``): each version's changed fields
        self.tuned: dict[int, dict[str, set[str]]] = {}
        self._config_lock = threading.Lock()
        self.live = ShardedStreams(self)

    # control (thread- and signal-safe: flags, then messages from the supervisor loop) -------------------
    def stop(self) -> None:
        if self._stop_at is None:
            self._stop_at = time.monotonic()

    def abort(self) -> None:
        self.interrupted = True
        self._abort = True
        self.stop()

    def interrupt(self) -> None:
        """First SIGINT/SIGTERM: every shard drains; second: every shard stops now."""
        if self._stop_at is not None:
            log.warning("second interrupt: stopping every shard now")
            self.abort()
            return
        log.warning("interrupt: draining frames in flight in %d shard processes (again to stop now)",
                    len(self.shards))
        self.interrupted = True
        self.stop()

    @property
    def stopping(self) -> bool:
        """A stop or an interrupt was asked for."""
        return self._stop_at is not None

    # run ------------------------------------------------------------------------------------------------
    def run(self) -> ShardedResult:
        t0 = time.perf_counter()
        # every shared buffer is an fd in the shard that made it and in the device owner that maps it: a run over
        # processes holds thousands (as the command line does, for a run started through the API)
        open_files_raised()
        owned = [s for s in self.spec.nodes if s.contract.serves_streams] if self.spec.device_owner else []
        leads = owner_leads(self.spec, owned)
        owned = [with_model_cache(s) for s in owned]  # a restarted owner loads its models, not compiles them
        workdir = tempfile.mkdtemp(prefix="flowpipe-run-")
        try:
            if owned:
                try:
                    self.owner = OwnerProcess(owned, self.spec.plugins, self.spec.plugin_dir,
                                              os.path.join(workdir, "owner.sock"), leads,
                                              restarts_allowed=max(s.restarts for s in owned),
                                              stopping=_stopping(weakref.ref(self)))
                except OwnerStartStoppedError:  # interrupted before any frame: the run ends at once (130)
                    log.warning("stopped while the device owner started: no frame had entered")
                    return ShardedResult(self, time.perf_counter() - t0)
                except RuntimeError as e:
                    self.error = str(e)
                    return ShardedResult(self, time.perf_counter() - t0)
                self.pids.extend(self.owner.pids)
                log.info("device owner (pid %s) serves %s for every shard", self.owner.pid,
                         ", ".join(s.id for s in owned))
            self._run_shards()
        finally:
            for sh in self.shards:
                sh.board.close()
            if self.owner is not None:
                self.owner.close()
            shutil.rmtree(workdir, ignore_errors=True)
        return ShardedResult(self, time.perf_counter() - t0)

    def _run_shards(self) -> None:
        groups = plan(self.spec, self.processes)
        self._payload = pickle.dumps(self.spec)
        for i, sources in enumerate(groups):
            self.shards.append(self._spawn(i, sources, self.resume))
        try:
            if self._open_all() and (self.on_opened is None or self.on_opened()):
                for sh in self.shards:
                    self.begin(sh, True)
                self.running = True
                self._supervise()
            else:
                for sh in self.shards:
                    if sh.said_open and sh.result is None:
                        self._send(sh, Begin(False))
                        if not self._abort:
                            self._drain_messages(sh, timeout=30)
        finally:
            self.running = False
            for sh in self.shards:
                # a second interrupt stops now: a shard still opening (its models compiling) is not waited for
                sh.proc.join(timeout=0.5 if self._abort else 10)
                if sh.proc.is_alive():
                    if not self._abort:
                        log.error("shard %d (pid %s) did not finish; killing it", sh.index, sh.pid)
                    sh.proc.kill()
                    sh.proc.join(timeout=5)
                sh.conn.close()

    def _spawn(self, index: int, sources: list[str], resume: Resume) -> _Shard:
        ctx = mp.get_context("spawn")
        environment_for_children()
        parent, child = ctx.Pipe(duplex=True)
        cap = None
        if self.max_frames is not None:  # the run's frame limit, shared by the streams' weight
            cap = max(1, round(self.max_frames * len(sources) / max(1, len(self.spec.sources()))))
            own = {self.spec.node(s).stream for s in sources}
            cap = max(1, cap - sum(v for k, v in resume.start.items() if k in own))
        link = self.owner.link if self.owner is not None else None
        count = len(plan(self.spec, self.processes))
        board = StreamBoard([self.spec.node(s).stream for s in sources],
                            spare=ADDED_ROWS if self.spec.templates() else 0)
        with self._config_lock:
            payload, version = self._payload, self.version
        proc = ctx.Process(target=_shard_main, name=f"flowpipe:shard-{index}", daemon=True,
                           args=(child, payload, self.spec.plugins, self.spec.plugin_dir,
                                 self.shard_base + index, count,
                                 sources, cap, self.record_times, link, resume, board))
        with no_interrupts_inherited():
            proc.start()
        child.close()
        return _Shard(index, sources, proc, parent, board, resume, version=version)

    def configure(self, configs: dict[str, Any], changed: dict[str, Any], undo: int | None = None) -> int:
        """The graph processes started from now on (replacements) get, with ``configs`` (node id -> config)
        in place; ``changed``: node id -> the fields that changed (a process started before, still opening,
        is given them as it starts). ``undo``: the version whose change this takes back (its fields are no
        more to give). Returns the new version."""
        with self._config_lock:
            self.spec.configure(configs)
            self._payload = pickle.dumps(self.spec)
            self.version += 1
            if undo is not None:
                self.tuned.pop(undo, None)
            else:
                self.tuned[self.version] = {nid: set(f) for nid, f in changed.items()}
            return self.version

    def _catch_up(self, sh: _Shard) -> dict[str, dict[str, Any]]:
        """What shard ``sh`` needs to run the configs as they are now: the fields changed since the graph
        it was started from was written, at their values now (held with ``_config_lock``)."""
        fields: dict[str, set[str]] = {}
        for version, changed in self.tuned.items():
            if version > sh.version:
                for nid, f in changed.items():
                    fields.setdefault(nid, set()).update(f)
        return {nid: self.spec.node(nid).config.model_dump(by_alias=True, include=f) for nid, f in fields.items()}

    def begin(self, sh: _Shard, start: bool) -> None:
        """``Begin`` to shard ``sh``, with the changes made since its graph was written; it counts as open
        (calls go to it) from then on, so a change is either in its ``Begin`` or sent to it after."""
        with self._config_lock:
            self._send(sh, Begin(start, self._catch_up(sh)))
            sh.opened = True

    def _send(self, sh: _Shard, msg: ToShard) -> None:
        try:
            with sh.send_lock:
                sh.conn.send(msg)
        except (OSError, ValueError):
            pass  # a shard that is gone is accounted by _supervise

    def call(self, sh: _Shard, command: Command, bind: tuple[str, int] | None = None,
             timeout: float | None = None) -> Any:
        """``command`` applied in shard ``sh``'s process (from any thread), waiting ``timeout`` (the command's
        own when None) for its answer; its errors raised here. ``bind``: the board row a stream it starts takes."""
        wait_s = command.wait_s if timeout is None else timeout
        with self._call_lock:  # (``_answered`` marks a shard gone under the same lock: no call waits on it after)
            if sh.gone or sh.error is not None or sh.restarted:
                raise RuntimeError(f"shard {sh.index} is gone")
            self._rid += 1
            pending = self._calls[self._rid] = _Pending(sh)
            rid = self._rid
        self._send(sh, StreamCall(rid, command, bind))
        if not pending.done.wait(wait_s):
            self._calls.pop(rid, None)
            raise RuntimeError(f"shard {sh.index} did not answer {command.verb} within {wait_s:.0f}s")
        reply = pending.reply
        assert reply is not None
        if reply.error is not None:
            raise reply.raised()
        return reply.value

    def _answered(self, sh: _Shard, reply: StreamReply | None = None) -> None:
        """A call's reply; with none, every call waiting on ``sh`` fails, and any made later (the shard is gone)."""
        with self._call_lock:
            if reply is None:
                sh.gone = True
            rids = [reply.rid] if reply is not None else [r for r, p in self._calls.items() if p.shard is sh]
            waiting = [p for p in (self._calls.pop(r, None) for r in rids) if p is not None]
        for p in waiting:
            p.reply = reply or StreamReply(-1, error=RemoteError("RuntimeError", f"shard {sh.index} is gone"))
            p.done.set()

    def _open_all(self) -> bool:
        """Every shard opened every node: True. Any failure: the others are told not to start."""
        waiting = {sh.conn: sh for sh in self.shards}
        failed = False
        while waiting:
            if self._abort:
                failed = True
                break
            for ready in wait(list(waiting), timeout=0.2):
                sh = waiting.pop(ready)  # type: ignore[call-overload]
                try:
                    msg = sh.conn.recv()
                except (EOFError, OSError):
                    sh.error = _exited_opening(sh)
                    failed = True
                    continue
                if isinstance(msg, ShardOpened):
                    sh.pid, sh.said_open = msg.pid, True
                    self.pids.append(msg.pid)
                else:
                    self._take(sh, msg)  # an open failure ends that shard with its result
                    failed = True
            for sh in list(waiting.values()):
                if not sh.proc.is_alive() and not sh.conn.poll():
                    waiting.pop(sh.conn)
                    sh.error = _exited_opening(sh)
                    failed = True
        if failed:
            for sh in self.shards:
                if sh.said_open:
                    self._send(sh, Begin(False))
            for sh in self.shards:
                if sh.said_open and sh.result is None and not self._abort:
                    self._drain_messages(sh, timeout=30)
        return not failed

    def _drain_messages(self, sh: _Shard, timeout: float) -> None:
        """Messages of a shard told not to start, until its result (or its end)."""
        end = time.monotonic() + timeout
        while sh.result is None and sh.error is None and time.monotonic() < end:
            if sh.conn.poll(0.2):
                try:
                    self._take(sh, sh.conn.recv())
                except (EOFError, OSError):
                    self._died(sh)
        self._answered(sh)  # it does not start: nothing asked of it is answered

    def _take(self, sh: _Shard, msg: FromShard) -> None:
        match msg:
            case ShardProgress(frames, streams, sources):
                sh.counts, sh.streams = dict(frames), dict(streams)
                sh.sources_seen.update(sources)
            case ShardResult(summary):
                sh.result = summary
                sh.counts = dict(summary["frames"])
            case StreamReply():
                self._answered(sh, msg)
            case ShardCrashed(error):
                sh.error = f"shard {sh.index} (pid {sh.pid}): {error}"
            case ShardOpened(pid):  # a restarted shard: it starts at once, beside the others
                sh.pid = pid
                self.pids.append(pid)
                self.begin(sh, self._stop_at is None)
                if sh.again:  # (calls wait on replies this loop takes: from a thread of their own)
                    threading.Thread(target=self.live.add_again, args=(sh,), name="flowpipe:streams-again",
                                     daemon=True).start()

    def _died(self, sh: _Shard) -> _Shard | None:
        """A shard process ended without its result: its frames in flight are failed, named; under the
        streams' ``on_error: restart`` a new process takes its streams over (returned)."""
        sh.proc.join(timeout=2)
        self._answered(sh)
        code = sh.proc.exitcode
        how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        # the board is exact at the death (progress lags): every frame that entered ended now, the frames
        # still in flight as failed, but for those whose record was written (the process died between its
        # record and its account: it went through, and no record names a frame counted failed)
        for stream, index in recorded(self.spec.files("records"), sh.board.in_flight()):
            sh.board.ended(stream, index, "out")
        sh.counts, sh.streams = sh.board.totals(), sh.board.per_stream()
        in_flight = sh.board.in_flight()
        lost = sh.counts["in"] - sh.counts["out"] - sh.counts["dropped"] - sh.counts["failed"]
        named = frame_list(in_flight)
        added = self.live.on(sh)
        streams = ", ".join([self.spec.node(s).stream for s in sh.sources] + added)  # as the records name them
        sh.error = (f"shard {sh.index} (pid {sh.pid}, streams {streams}) died ({how}); {lost} frames in flight "
                    f"counted as failed" + (f": {named}" if named else ""))
        specs = [self.spec.node(s) for s in sh.sources] + [self.live.template(self.live.recipe[s].like) for s in added]
        generation = sh.resume.generation + 1
        if self._stop_at is not None or not all(
                s.on_error == "restart" and generation <= s.restarts for s in specs):
            log.error("%s", sh.error)
            self.live.lost(added, sh.error, sh.board)
            return None
        log.warning("%s; restarting its streams in a new process (restart %d/%d)", sh.error, generation,
                    min((s.restarts for s in specs), default=generation))
        start = dict(sh.resume.start)
        start.update(sh.board.next_index())  # the streams added to it too: each goes on after its last frame
        sh.restarted = True
        new = self._spawn(sh.index, sh.sources, Resume(generation, start))
        new.again = added
        self.live.moved(added, new)
        self.shards.append(new)
        return new

    def _supervise(self) -> None:
        live = {sh.conn: sh for sh in self.shards if sh.opened}
        told_stop = told_abort = False
        last_progress = 0.0
        while live:
            if self.owner is not None and self.owner.error is None:
                what = self.owner.check()
                if what is not None:
                    log.error("%s", what)
                    self.pids.extend(p for p in self.owner.pids if p not in self.pids)
                    if self.owner.error is not None:
                        self.error = self.owner.error
                        self.abort()
            if self._stop_at is not None and not told_stop:
                told_stop = True
                for sh in live.values():
                    self._send(sh, Halt(now=False))
            if self._stop_at is not None and not told_abort and (
                    self._abort or time.monotonic() - self._stop_at > self.drain_timeout):
                told_abort = True
                for sh in live.values():
                    self._send(sh, Halt(now=True))
            for ready in wait(list(live), timeout=0.2):
                sh = live[ready]  # type: ignore[index]
                try:
                    self._take(sh, sh.conn.recv())
                except (EOFError, OSError):
                    if sh.result is None and sh.error is None:
                        new = self._died(sh)
                        if new is not None:
                            live[new.conn] = new
                    live.pop(sh.conn)
                    continue
                if sh.result is not None or sh.error is not None:
                    live.pop(sh.conn)
                    self._answered(sh)  # its process ends: what was asked of it meanwhile is never answered
            if self.progress is not None and time.monotonic() - last_progress >= 0.5:
                last_progress = time.monotonic()
                self.progress(self.snapshot())

    def snapshot(self) -> dict[str, Any]:
        return {k: sum(sh.counts[k] for sh in self.shards) for k in ("in", "out", "dropped", "failed")}

    @property
    def per_stream(self) -> dict[str, int]:
        """Frames accounted per stream over every shard (each shard's result, else its last report)."""
        out: dict[str, int] = {}
        for sh in self.shards:
            for s, n in ((sh.result or {}).get("streams") or sh.streams).items():
                out[s] = out.get(s, 0) + n
        return out


class ShardedStreams(Routing):
    """Streams added to and removed from a run over several processes, as commands sent to them
    (``ShardedRun.call``): each new stream goes to the process with the fewest streams, and the commands on
    it go there. A process restarted after a crash takes them over with the graph's own (each stream's
    template's ``on_error: restart`` and ``restarts``), every one going on after the last frame that entered
    the process that died."""

    def __init__(self, run: ShardedRun):
        self.run = weakref.proxy(run)  # no cycle: a finished run's pipes and processes go with it
        self.where: dict[str, Any] = {}  # added stream -> its shard
        self.recipe: dict[str, Add] = {}  # added stream -> the command that added it (sent again to a replacement)
        self.failed: deque[dict[str, Any]] = deque(maxlen=LiveStreams.KEEP_ENDED)  # ended with their process
        self._retuning = threading.Lock()  # one change of configs at a time

    def template(self, like: str | None) -> NodeSpec:
        return template_of(self.run.spec, like)

    def _live(self) -> list[Any]:
        return [sh for sh in self.run.shards if sh.opened and sh.result is None and sh.error is None
                and not sh.restarted]

    def to_new(self, command: Add) -> None:
        """The stream goes to the running process with the fewest streams, on a row of its board."""
        run, stream = self.run, command.stream
        if not run.running or run.stopping:
            raise RuntimeError("the graph is not running")
        if stream in self.where or any(n.id == stream for n in run.spec.nodes):
            raise ValueError(f"a stream or node named {stream!r} is already in the graph")
        shards = self._live()
        if not shards:
            raise RuntimeError("no process of the run is running")
        sh: _Shard = min(shards, key=lambda x: len(x.sources) + sum(1 for v in self.where.values() if v is x))
        self.where[stream], self.recipe[stream] = sh, command
        try:
            run.call(sh, command, _bound(sh, stream))
        except BaseException:
            if self.where.get(stream) is sh:
                self._forget(stream)
                sh.board.retire(stream)  # never started: its row is free again
            raise
        log.info("stream %s added in shard %d", stream, sh.index)

    def on(self, sh: _Shard) -> list[str]:
        """The streams added to shard ``sh`` and not removed."""
        return [s for s, x in self.where.items() if x is sh]

    def moved(self, streams: list[str], sh: _Shard) -> None:
        """``streams`` go to shard ``sh`` (a restarted process), added again once it is open."""
        for s in streams:
            self.where[s] = sh

    def lost(self, streams: list[str], why: str | None, board: StreamBoard) -> None:
        """``streams`` ended with their process (not restarted): the run goes on without them; each is listed
        as failed, with its account from that process's board."""
        for s in streams:
            like = self.recipe[s].like
            self._forget(s)
            self.failed.append({"stream": s, "like": like, "state": "failed", "error": why, **board.account(s)})
            log.error("stream %s ended with its process: %s", s, why)

    def _forget(self, stream: str) -> None:
        self.where.pop(stream, None)
        self.recipe.pop(stream, None)

    def add_again(self, sh: _Shard) -> None:
        """Adds the streams of the process ``sh`` replaced to it, each as it was added (until ``sh`` itself
        is gone: then its own replacement, if any, has them)."""
        for stream in sh.again:
            if sh.gone or sh.error is not None or sh.restarted:
                return
            if self.where.get(stream) is not sh:
                continue  # removed meanwhile
            try:
                self.run.call(sh, self.recipe[stream], _bound(sh, stream))
                log.warning("stream %s goes on in shard %d (pid %s)", stream, sh.index, sh.pid)
            except Exception as e:  # noqa: BLE001 - the others go on
                if self.where.get(stream) is sh and not sh.gone and sh.error is None and not sh.restarted:
                    self.lost([stream], f"{type(e).__name__}: {e}", sh.board)

    def to_added(self, command: OnStream) -> Any:
        """The process the stream was added to answers; the stream is its no more (its row free once every
        frame of it ended)."""
        sh = self.where.get(command.stream)
        if sh is None:
            return command.merge([])
        try:
            value = self.run.call(sh, command)
        finally:
            self._forget(command.stream)
        freed = command.freed(value)
        if freed is not None:  # its account leaves the board, its row is free
            sh.board.retire(freed)
        return command.merge([Answer(value, {"shard": sh.index})])

    def to_holder(self, command: OnStream) -> Any:
        """The process running the stream answers (one it was added to, or the one running its source)."""
        stream = command.stream
        sh = self.where.get(stream) or next((x for x in self._live() if stream in x.sources), None)
        return command.merge([] if sh is None else [Answer(self.run.call(sh, command), {"shard": sh.index})])

    def to_each(self, command: Command) -> Any:
        """Every running process answers (one that dies meanwhile is passed over)."""
        answers = []
        for sh in self._live():
            try:
                answers.append(Answer(self.run.call(sh, command), {"shard": sh.index}))
            except RuntimeError:
                if not sh.gone and sh.error is None and not sh.restarted and sh.proc.is_alive():
                    raise
        return command.merge(answers)

    def states(self) -> list[dict[str, Any]]:
        """Every process's streams, and those that ended with their process."""
        return super().states() + [dict(r) for r in self.failed]

    def to_all(self, command: Retune) -> None:
        """Nodes' configs changed in every process (``LiveStreams.retune``), and in the graph that processes
        started from now on (replacements) are given. A refusal (ValueError), or any failure of the first
        process that answers, leaves every one as it was; a later process that fails without dying
        (``PartlyRetunedError``) leaves the change in the others and in the graph."""
        run, changes = self.run, command.changes
        if not run.running or run.stopping:
            raise RuntimeError("the graph is not running")
        with self._retuning:
            new = retune_specs(run.spec, changes)
            old = {nid: run.spec.node(nid).config for nid in new}
            version = run.configure(new, changes)
            took: list[int] = []
            missed: list[str] = []
            for sh in self._live():
                try:
                    run.call(sh, command)
                    took.append(sh.index)
                except Exception as e:  # below: rolled back, or named
                    if sh.gone or sh.error is not None or sh.restarted or not sh.proc.is_alive():
                        continue  # it died: its replacement starts from the graph as changed
                    if not took:
                        run.configure(old, changes, undo=version)
                        raise
                    missed.append(f"process {sh.index}: {e}")
            if missed:
                raise PartlyRetunedError(f"{'; '.join(missed)} (processes {', '.join(map(str, took))} and those "
                                    "started from now on have the change)")


def _bound(sh: _Shard, stream: str) -> tuple[str, int] | None:
    """A row of shard ``sh``'s board for ``stream``, added to it (None: every spare row is held)."""
    row = sh.board.bind(stream)
    return None if row is None else (stream, row)


def _sources_now(runner: Runner) -> dict[str, dict[str, Any]]:
    """This process's sources' stats as they stand (the graph's and those added at run time), each a copy
    (their threads go on changing them)."""
    out = {}
    for s in [*runner.spec.sources(), *(rec.spec for rec in list(runner.live.added.values()))]:
        st = runner.stats.get(s.id)
        if st is None:
            continue
        try:
            with st.lock:
                out[s.id] = copy.deepcopy(st.summary(None))
        except RuntimeError:  # the node changed its own stats while they were copied: the next report has them
            continue
    return out


def _exited_opening(sh: _Shard) -> str:
    return f"shard {sh.index} exited while opening (exit code {sh.proc.exitcode})"


class ShardedResult(RunSummary):
    """What a sharded run did, in the shape of ``RunResult`` (``to_json`` adds ``shards``)."""

    def __init__(self, run: ShardedRun, elapsed: float):
        done: list[tuple[int | str, dict[str, Any]]] = [(sh.index, sh.result) for sh in run.shards
                                                         if sh.result is not None]
        # a shard that died leaves its sources' stats as it last reported them (a camera's outages and
        # reconnects, frames decoded), beside its successor's
        dead: list[tuple[int | str, dict[str, Any]]] = [
            (f"{sh.index}, pid {sh.pid}, died", {"nodes": sh.sources_seen}) for sh in run.shards
            if sh.result is None and sh.sources_seen]
        self.frames = {k: sum(sh.counts[k] for sh in run.shards) for k in ("in", "out", "dropped", "failed")}
        lost = self.frames["in"] - self.frames["out"] - self.frames["dropped"] - self.frames["failed"]
        self.frames["failed"] += max(0, lost)  # frames in flight in shards that died
        self.per_stream = run.per_stream
        self.done_times = sorted(t for _, r in done for t in r.get("done_times", []))
        self.nodes = merge_nodes(done + dead)
        owner = run.owner
        owned = {s.id for s in owner.specs} if owner is not None else set()
        self.edges: dict[str, dict[str, Any]] = {}
        for _, r in done:
            for name, e in r["edges"].items():
                ends = set(name.split("->"))
                m = self.edges.setdefault(name, {"frames": 0, "copies": 0, "bytes_copied": 0,
                                                 "memory": e["memory"], "crosses_process": bool(ends & owned)})
                for k in ("frames", "copies", "bytes_copied"):
                    m[k] += e[k]
        self.contracts = done[0][1].get("memory_contracts", {}) if done else {}
        self.inference = _inference_of_shards([r for _, r in done])
        final = owner.final if owner is not None else None
        if final is not None:  # the owner's own account of the nodes it served (compile, cache, binding)
            self.inference.update({k: dict(v, owner_pid=final["pid"]) for k, v in final["sections"].items()})
            for nid, st in final["nodes"].items():
                if nid in self.nodes:
                    self.nodes[nid]["device_owner"] = st
            for name, e in final.get("edges", {}).items():  # copies the owner made (a frame's upload)
                m = self.edges.setdefault(name, {"frames": 0, "copies": 0, "bytes_copied": 0, "memory": "none",
                                                 "crosses_process": False})
                m["copies"] += e["copies"]
                m["bytes_copied"] += e["bytes_copied"]
        self.owner = None if owner is None else {
            "pids": owner.pids, "restarts": owner.restarts, "nodes": sorted(owned), "error": owner.error,
            "starts_s": owner.starts_s, "took_over": owner.took_over,
            "mapped": (final or {}).get("mapped")}  # the shards' buffers it mapped at the end, and fds for them
        self.collected: dict[str, Any] = {}
        self.elapsed_s = elapsed
        self.interrupted = run.interrupted or any(r["exit"] == 130 for _, r in done)
        errors = ([run.error] if run.error else []) + \
                 [sh.error for sh in run.shards if sh.error and not sh.restarted] + \
                 [f"shard {i}: {r['error']}" for i, r in done if r["error"]]
        self.error: BaseException | None = RuntimeError(errors[0]) if errors else None
        if self.error is not None and len(errors) > 1:
            log.error("%d shards failed; the first: %s", len(errors), errors[0])
        self.exit_code = 1 if self.error else (130 if self.interrupted else 0)
        self.shards = [{"index": sh.index, "pid": sh.pid, "streams": sh.sources, "frames": sh.counts,
                        "generation": sh.resume.generation, "restarted": sh.restarted,
                        "error": sh.error or (sh.result or {}).get("error")} for sh in run.shards]
        self.shard_restarts = sum(sh.restarted for sh in run.shards)

    def _more_json(self) -> dict[str, Any]:
        return {"processes": len({sh["index"] for sh in self.shards}), "shards": self.shards,
                "shard_restarts": self.shard_restarts, "device_owner": self.owner}


def _stopping(run: weakref.ref[ShardedRun]) -> Callable[[], bool]:
    """Whether the run was asked to stop, through a weak reference: the device owner's handle holds this, and a
    cycle back to the run would keep its pipes' fds open until a garbage collection."""
    return lambda: (r := run()) is not None and r.stopping


def recorded(paths: list[str], frames: list[tuple[str, int]], tail: int = 1 << 20) -> list[tuple[str, int]]:
    """Those of ``frames`` ((stream, index), in flight where a process died) whose record is in the JSON Lines
    files ``paths``, read over their last ``tail`` bytes, where the records of frames in flight are (a line the
    death cut short is no record)."""
    want, found = set(frames), set[tuple[str, int]]()
    for path in paths:
        if not want or path == "-" or not os.path.isfile(path):
            continue
        try:
            found.update(k for k in tail_records(path, tail) if k in want)
        except OSError as e:  # unreadable here: its frames in flight stay failed, as before any record was read
            log.warning("records %s not read back after a process died: %s", path, e)
    return sorted(found)


def tail_records(path: str, tail: int = 1 << 20) -> list[tuple[str, int]]:
    """(stream, frame) of the whole records over the last ``tail`` bytes of a JSON Lines file, in file order (a
    line cut short, by the tail's start or by a death mid-write, is no record)."""
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - tail))
        lines = f.read().split(b"\n")
    out = []
    for line in lines[1:] if size > tail else lines:  # the first is cut where the tail starts
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and isinstance(rec.get("stream"), str) and isinstance(rec.get("frame"), int):
            out.append((rec["stream"], rec["frame"]))
    return out

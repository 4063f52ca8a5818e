"""The device owner: in a run over several processes, nodes that serve many streams run once, here.

A node type that declares ``serves_streams`` (inference) would otherwise be opened by every shard: one
compiled model, one set of infer requests and one device context per process (on an NPU, one compiled
copy of the model per process). With a device owner the supervisor starts one more process that opens
those nodes once; in each shard an ``OwnerClient`` takes the node's place and sends it frames:

- the input tensor and the output buffers live in the shard's shared memory (memfd, or DMA-BUF where a
  heap exists): each buffer's fd crosses once (SCM_RIGHTS), then a frame is a header naming buffer,
  offset, shape and dtype. The owner binds the input as it would in one process (a host tensor over the
  pages; a SHARED_BUF remote tensor on the NPU) and the request writes its results straight into the
  shard's output buffers, so nothing is copied either way;
- where the node's device binds device memory, which cannot cross processes (OpenCL buffers in a GPU's
  context), the node that writes its input (a preprocess declaring ``owner_side``) runs here too, ahead
  of it: the shard's instance only decides which frames go and where their entries lie, the frame's
  picture crosses by fd, and the owner uploads it once and writes the tensor on the device, as one
  process would;
- the owner batches across every stream of every shard (``batch: N``), answers in each shard's order,
  and says which frames a failed request took;
- a node that holds no frames past ``process`` (its requests run to their end there, ``requests: inline``:
  second looks, a profile detector) runs on a thread of its own here, so that its requests hold up no other
  node's frames;
- a shard's client counts the frames it sent and has not had back; when the owner dies those are failed
  by the shard's ``on_error`` (named by stream and frame), the supervisor hands the socket to a new owner
  (its model from the OpenVINO cache) and clients reconnect. Where the owned nodes may restart, a standby
  owner waits beside the serving one, its interpreter started, its modules imported and its devices
  listed (nothing opened on them), so a takeover costs only opening the nodes; a new standby follows.
"""
from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import os
import pickle
import queue
import selectors
import signal
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from ..accel import Devices, DeviceService, devices
from ..contracts import Allocation, InputContract, Offer, Request
from ..errors import FrameError
from ..frame import Frame
from ..graph import NodeSpec
from ..memory import BufferPool, SharedBuffer, available_kinds, best_kind, leading
from ..memory import ledger as ledgers
from ..memory.ledger import CopyLedger
from ..node import AsyncNode, Negotiating, Node, RunContext, offer_of, request_of
from ..registry import import_plugin
from .messages import (
    BufferRef,
    Bye,
    Close,
    ObjectRef,
    OwnerClosed,
    OwnerCrashed,
    OwnerDone,
    OwnerFailed,
    OwnerFrame,
    OwnerHello,
    OwnerListening,
    OwnerOpenFailed,
    OwnerReady,
    OwnerStats,
    OwnerTakeOver,
    RemoteError,
    StatsWanted,
)
from .negotiate import allocate
from .process import OutsideContext
from .settings import environment_for_children, no_interrupts_inherited
from .wire import Codec, recv, send

log = logging.getLogger("flowpipe.owner")
CONNECT_TIMEOUT_S = 60.0  # a restarted owner loads its model (from the cache) within this


@dataclass(frozen=True)
class OwnerLink:
    """What a shard needs to reach the owner: its socket and, per owned node, the input placement."""

    path: str
    placements: dict[str, str]


# -- wire: arrays in shared buffers as headers ------------------------------------------------------------
class _Mapped:
    """A buffer the owner mapped from a client's fd, held by a frame so ``Frame.buffer_of`` finds it."""

    __slots__ = ("buffer",)

    def __init__(self, buffer: Any):
        self.buffer = buffer

    def release(self) -> None:
        pass


# -- owner process ------------------------------------------------------------------------------------------
class _OwnerContext(OutsideContext):
    """An owned node's view of the run: the owner's devices, the input contract its clients declared."""

    where = "the device owner"

    def __init__(self, node_id: str, devs: Any, contract: InputContract, in_flight: int, wake: Callable[[], None],
                 output: Allocation | None = None):
        super().__init__(node_id, in_flight, devices_=devs)
        self.wake = wake  # type: ignore[method-assign]
        self._contract = contract
        self._output = output

    def input(self, port: str) -> InputContract | None:
        return self._contract

    def allocation(self, port: str) -> Allocation:
        return self._output or Allocation("host")


@dataclass
class _Client:
    sock: socket.socket
    codec: Codec = field(default_factory=Codec)  # the client's buffers, mapped from the fds it sent
    in_flight: int = 0
    gone: bool = False

    def close_buffers(self) -> None:
        for b in self.codec.buffers.values():
            b.close()
        self.codec.buffers.clear()


@runtime_checkable
class OwnerSide(Protocol):
    """A node whose contract says ``owner_side``, as the device owner runs it ahead of the node it feeds: for
    frames its instance in the shard already passed (which frames go on, and where their entries lie, were
    decided there)."""

    def for_owner(self) -> Node:
        """This node as the device owner runs it: its work on each frame, without deciding which go on."""


@dataclass
class _Lead:
    """A node the owner runs ahead of an owned one (``owner_side``): the frames cross, not what it writes."""

    spec: NodeSpec
    node: Node
    in_port: str
    out_port: str
    edge: str  # its input edge, where the copies it makes count (the frame's upload)
    ctx: _OwnerContext | None = None
    frames: int = 0
    busy_s: float = 0.0
    open_s: float = 0.0

    @classmethod
    def of(cls, spec: NodeSpec) -> _Lead:
        node = spec.make()
        node = node.for_owner() if isinstance(node, OwnerSide) else node
        (in_port, refs), = spec.inputs.items()
        edge = f"{refs[0][0]}->{spec.id}" if len(refs) == 1 else f"{spec.id} (in the device owner)"
        return cls(spec, node, in_port, next(iter(spec.contract.outputs)), edge)

    def takes_over(self, node: Node, devs: Devices) -> bool:
        """Whether it runs here ahead of ``node``: always, or (``device``) where what it writes for ``node``
        on this machine's devices is device memory, which cannot cross processes."""
        side = self.spec.contract.owner_side
        if side != "device":
            return side == "always"
        offer = offer_of(self.node, self.out_port, {}, devs)
        req = replace(request_of(node, next(iter(node.inputs)), offer, {}, devs), batch=1)
        return req.placement == "opencl" and allocate(offer, req, devs, lambda _: 1).placement == "opencl"


@dataclass
class _Owned:
    spec: NodeSpec
    node: Node
    placement: str
    offer: Offer | None = None
    ctx: _OwnerContext | None = None
    lead: _Lead | None = None
    edge: str = ""
    frames: int = 0
    failed: int = 0
    busy_s: float = 0.0
    open_s: float = 0.0  # opening it for the first shard that asked (a model compiled or loaded from a cache)
    lane: _Lane | None = None  # its own thread, where its process() runs each frame to its end


#: what a lane is done with: the node, the frame it was given, what its process returned, or why it failed
_Done = tuple["_Owned", Frame, Any, "FrameError | None"]


class _Lane:
    """A thread of its own for an owned node whose ``process`` runs each frame's work to its end (it holds no
    frames: inline requests, a second look's crops, a profile detector): on the owner's one loop, which every
    shard's frames arrive on, each of its requests would hold up every other node's frames, the first detector's
    included. Frames go to it in the order they came; what it is done with goes back to the loop, which
    answers."""

    JOIN_S = 30.0  # at closing, how long its queued frames may take

    def __init__(self, owner: _Owner, o: _Owned):
        self.owner, self.o = owner, o
        self.frames = 0  # frames it ran
        self.todo: queue.SimpleQueue[tuple[Frame, bool] | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._run, name=f"owner:{o.spec.id}", daemon=True)
        self.thread.start()

    def put(self, frame: Frame, picture: bool) -> None:
        self.todo.put((frame, picture))

    def stop(self) -> None:
        """Its queued frames done (the shards wait for them), then the thread ends; one hung in a request is left
        to the process's end."""
        self.todo.put(None)
        self.thread.join(self.JOIN_S)
        if self.thread.is_alive():
            log.warning("device owner: node '%s' still in a request after %.0f s at closing", self.o.spec.id,
                        self.JOIN_S)

    def _run(self) -> None:
        ledgers.bind(self.owner.ledger)
        while (item := self.todo.get()) is not None:
            frame, picture = item
            self.frames += 1
            try:
                done: _Done = (self.o, frame, self.owner.work(self.o, frame, picture), None)
            except Exception as e:  # noqa: BLE001 - a frame's failure goes back to its shard
                done = (self.o, frame, None, e if isinstance(e, FrameError) else FrameError(frame, e))
            self.owner.done.put(done)
            self.owner.wake()


class _Owner:
    def __init__(self, control: Connection, path: str, specs: list[NodeSpec], leads: dict[str, NodeSpec]):
        self.control, self.path = control, path
        self.devs = devices()  # listed already in a standby
        self.ledger = CopyLedger()  # the copies made here (a frame's upload), added to the run's
        self.owned = {s.id: _Owned(s, s.make(), "host") for s in specs}
        for o in self.owned.values():
            o.placement = owned_placement(o.node, self.devs)
            lead = _Lead.of(leads[o.spec.id]) if o.spec.id in leads and o.placement == "host" else None
            if lead is not None and lead.takes_over(o.node, self.devs):
                o.lead, o.placement = lead, "owner"
        self.routes: dict[int, tuple[_Client, str, int, Frame]] = {}
        self.done: queue.SimpleQueue[_Done] = queue.SimpleQueue()  # what the lanes are done with
        self.sel = selectors.DefaultSelector()
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        self.listener.bind(path)
        self.listener.listen(256)
        self.running = True

    def wake(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.write(self.wake_w, b"x")

    def serve(self) -> None:
        ledgers.bind(self.ledger)
        self.sel.register(self.listener, selectors.EVENT_READ, "accept")
        self.sel.register(self.wake_r, selectors.EVENT_READ, "wake")
        self.sel.register(self.control, selectors.EVENT_READ, "control")
        self.control.send(OwnerListening(os.getpid(), {n: o.placement for n, o in self.owned.items()}))
        while self.running:
            for key, _ in self.sel.select(timeout=0.5):
                what = key.data
                if what == "accept":
                    sock, _ = self.listener.accept()
                    self.sel.register(sock, selectors.EVENT_READ, _Client(sock))
                elif what == "wake":
                    with contextlib.suppress(BlockingIOError):
                        while os.read(self.wake_r, 4096):
                            pass
                    self._lanes_done()
                    self._poll_all()
                elif what == "control":
                    self._control()
                else:
                    self._from_client(what)
        self._close()

    # messages ---------------------------------------------------------------------------------------
    def _control(self) -> None:
        try:
            msg = self.control.recv()
        except (EOFError, OSError):
            msg = Close()  # the supervisor is gone
        match msg:
            case Close():
                self.running = False
            case StatsWanted():
                self.control.send(OwnerStats(self._stats_now()))

    def _from_client(self, c: _Client) -> None:
        try:
            msg, fds = recv(c.sock)
        except (EOFError, OSError):
            self._drop(c)
            return
        match msg:
            case OwnerFrame():
                for (bid, kind), fd in zip(msg.new, fds):
                    c.codec.buffers[bid] = SharedBuffer(os.fstat(fd).st_size, kind, _fd=fd)
                self._frame(c, msg)
            case OwnerHello(nid, offer, in_flight, shards):
                send(c.sock, self._open(nid, offer, in_flight, shards))
            case Bye():
                self._drop(c)

    def _open(self, nid: str, offer: Offer, in_flight: int, shards: int) -> OwnerReady | OwnerOpenFailed:
        o = self.owned.get(nid)
        if o is None:
            return OwnerOpenFailed(RemoteError.of(f"node '{nid}' is not served by this device owner"))
        if o.ctx is None:
            t = time.perf_counter()
            try:
                if o.lead is not None:
                    contract = self._open_lead(o, o.lead, offer, shards)
                else:
                    contract = InputContract(offer, Allocation(o.placement), f"{nid}:in")  # type: ignore[arg-type]
                o.edge = contract.edge
                o.ctx = _OwnerContext(nid, self.devs, contract, in_flight, self.wake)
                o.ctx.serves_processes = shards
                o.node.open(o.ctx)
                o.offer = offer
                o.open_s = time.perf_counter() - t
                if not o.spec.contract.holds_frames:  # its process() runs each frame to its end (inline)
                    o.lane = _Lane(self, o)
            except Exception as e:  # noqa: BLE001 - reported to the shard, which names the node
                o.ctx = None
                if o.lead is not None and o.lead.ctx is not None:
                    o.lead.node.close()
                    o.lead.ctx = None
                return OwnerOpenFailed(RemoteError.of(e, f"in the device owner, pid {os.getpid()}"))
        elif offer != o.offer:
            return OwnerOpenFailed(RemoteError.of(f"shards disagree on what node '{nid}' gets: {offer} vs {o.offer}"))
        return _ready_info(o.node, o.ctx)

    def _open_lead(self, o: _Owned, lead: _Lead, offer: Offer, shards: int) -> InputContract:
        """``lead`` opened to write ``o``'s input as the shards' instances declare it (``offer``), into the
        memory ``o`` binds on this machine's device; the contract ``o`` then opens with."""
        frame = Offer(picture=offer.picture)  # the picture the shards sized the tensor by
        mine = offer_of(lead.node, lead.out_port, {lead.in_port: frame}, self.devs)
        if offer.tensor is None or mine.tensor is None or \
                (mine.tensor.shape, mine.tensor.dtype) != (offer.tensor.shape, offer.tensor.dtype):
            raise RuntimeError(f"node '{lead.spec.id}' would write {mine.tensor} here; the shards declare "
                               f"{offer.tensor}")
        offer = replace(offer, writes=mine.writes)
        req = request_of(o.node, next(iter(o.node.inputs)), offer, {}, self.devs)
        # every shard's frames at once: each keeps up to its window here (the lead's pool never runs dry: its
        # buffers go back as the frames are answered, and no shard has more than its window unanswered)
        held = max(OwnerClient.WINDOW[0] * shards, min(64, OwnerClient.WINDOW[1] * shards))
        alloc = allocate(offer, req, self.devs, lambda _: held)
        alloc.consumers = [o.spec.id]
        lead.ctx = _OwnerContext(lead.spec.id, self.devs, InputContract(frame, Allocation("host"), lead.edge),
                                 held, self.wake, output=alloc)
        t = time.perf_counter()
        lead.node.open(lead.ctx)
        lead.open_s = time.perf_counter() - t
        return InputContract(offer, alloc, f"{lead.spec.id}->{o.spec.id}")

    def _frame(self, c: _Client, msg: OwnerFrame) -> None:
        o = self.owned[msg.node_id]
        data = c.codec.decode(msg.input)
        if msg.picture is not None:
            f = Frame(msg.stream, msg.index, msg.pts, data, msg.picture, msg.meta)
        else:
            f = Frame(msg.stream, msg.index, msg.pts, None, "TENSOR", msg.meta, layout=msg.layout)
            f.tensors["input"] = data
        for bid in msg.bids:
            f.hold(_Mapped(c.codec.buffers[bid]))
        outs = [c.codec.decode(r) for r in msg.outputs]
        if isinstance(o.node, DeviceService):
            o.node.provide_outputs(f, outs)
        self.routes[id(f)] = (c, msg.node_id, msg.key, f)
        c.in_flight += 1
        if o.lane is not None:
            o.lane.put(f, msg.picture is not None)
            return
        try:
            out = self.work(o, f, msg.picture is not None)
            with self.ledger.on_edge(o.edge):
                self._deliver(o, out)
        except Exception as e:  # noqa: BLE001 - a frame's failure goes back to its shard
            self._failed(o, e if isinstance(e, FrameError) else FrameError(f, e))

    def work(self, o: _Owned, f: Frame, picture: bool) -> Any:
        """``o``'s work on one frame (its lead's first, where the picture crossed): what its process returned.
        On the loop, or on the node's lane."""
        t = time.perf_counter()
        try:
            if o.lead is not None and picture:
                with self.ledger.on_edge(o.lead.edge):
                    f = o.lead.node.process(f, o.lead.in_port)
                o.lead.frames += 1
                t_lead = time.perf_counter()
                o.lead.busy_s += t_lead - t
                t = t_lead
            with self.ledger.on_edge(o.edge):
                return o.node.process(f, "tensor")
        finally:
            o.busy_s += time.perf_counter() - t

    def _lanes_done(self) -> None:
        """What the lanes are done with: answered from the loop, as the loop's own work is."""
        while True:
            try:
                o, frame, out, err = self.done.get_nowait()
            except queue.Empty:
                return
            try:
                if err is not None:
                    self._failed(o, err)
                else:
                    with self.ledger.on_edge(o.edge):
                        self._deliver(o, out)
            except Exception as e:  # noqa: BLE001 - answered: the frame failed
                self._failed(o, e if isinstance(e, FrameError) else FrameError(frame, e))

    def _poll_all(self) -> None:
        for o in self.owned.values():
            if o.ctx is None or o.lane is not None or not isinstance(o.node, AsyncNode):
                continue  # (a lane's node holds nothing between frames)
            try:
                with self.ledger.on_edge(o.edge):
                    self._deliver(o, o.node.poll())
            except Exception as e:  # noqa: BLE001
                self._failed(o, e if isinstance(e, FrameError) else FrameError([], e))

    def _deliver(self, o: _Owned, out: Any) -> None:
        frames = _frames_of(out)
        specs = o.node.output_specs() if frames and isinstance(o.node, DeviceService) else []
        cut = {id(f): [tuple(np.shape(f.tensors[n])) for n, _, _ in specs] for f in frames
               if any(n in f.tensors and tuple(np.shape(f.tensors[n])) != tuple(shape) for n, shape, _ in specs)}
        for c, keys, ids in self._settle(frames, "out").values():
            o.frames += len(keys)
            self._reply(c, OwnerDone(o.spec.id, keys, {k: cut[i] for k, i in zip(keys, ids) if i in cut}))

    def _failed(self, o: _Owned, err: FrameError) -> None:
        why = RemoteError.of(err.cause)
        for c, keys, _ in self._settle(err.frames, "failed").values():
            o.failed += len(keys)
            self._reply(c, OwnerFailed(o.spec.id, keys, why))

    def _settle(self, frames: list[Frame], fate: str) -> dict[int, tuple[_Client, list[int], list[int]]]:
        """The clients' keys of ``frames`` (and the frames' ids), per client; each frame's hold on mapped
        memory ends."""
        groups: dict[int, tuple[_Client, list[int], list[int]]] = {}
        for f in frames:
            route = self.routes.pop(id(f), None)
            if route is None:
                continue
            c, _, key, _ = route
            g = groups.setdefault(id(c), (c, [], []))
            g[1].append(key)
            g[2].append(id(f))
            f.end(fate)
            c.in_flight -= 1
            if c.gone and c.in_flight == 0:
                c.close_buffers()  # requests no longer write into its pages
        return groups

    def _reply(self, c: _Client, msg: OwnerDone | OwnerFailed) -> None:
        if c.gone:
            return
        try:
            send(c.sock, msg)
        except OSError:
            self._drop(c)

    def _drop(self, c: _Client) -> None:
        if c.gone:
            return
        c.gone = True
        with contextlib.suppress(KeyError, ValueError):
            self.sel.unregister(c.sock)
        c.sock.close()
        if c.in_flight == 0:
            c.close_buffers()

    def _stats_now(self) -> dict[str, Any]:
        """``_stats`` while lanes run: a lane may add a key to what it reads (a section's first timing, a ledger's
        new edge); read again then."""
        for _ in range(5):
            try:
                return self._stats()
            except RuntimeError:  # a dict changed size while read
                continue
        return self._stats()

    def _stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {"pid": os.getpid(), "nodes": {}, "sections": {}}
        for nid, o in self.owned.items():
            out["nodes"][nid] = {"frames": o.frames, "failed": o.failed, "busy_s": round(o.busy_s, 4),
                                 "placement": o.placement, "open_s": round(o.open_s, 3),
                                 "own_thread": o.lane is not None, "frames_on_own_thread": o.lane.frames if o.lane
                                 else 0}
            if o.ctx is not None:
                out["sections"].update(o.ctx.sections)
            if o.lead is not None:  # the node it runs ahead of this one, for every shard
                out["nodes"][o.lead.spec.id] = {"frames": o.lead.frames, "busy_s": round(o.lead.busy_s, 4),
                                                "ahead_of": nid, "open_s": round(o.lead.open_s, 3),
                                                **(o.lead.ctx.stats if o.lead.ctx is not None else {})}
        out["edges"] = {name: {"copies": e.copies, "bytes_copied": e.bytes_copied}
                        for name, e in self.ledger.edges.items() if e.copies}
        return out

    def _close(self) -> None:
        for o in self.owned.values():
            if o.lane is not None:  # its frames done first, and answered
                o.lane.stop()
        self._lanes_done()
        for o in self.owned.values():
            if o.ctx is not None:
                try:
                    o.node.flush()
                    o.node.close()
                except Exception as e:  # noqa: BLE001
                    log.error("device owner: closing node '%s': %s", o.spec.id, e)
            if o.lead is not None and o.lead.ctx is not None:
                try:
                    o.lead.node.close()
                except Exception as e:  # noqa: BLE001
                    log.error("device owner: closing node '%s': %s", o.lead.spec.id, e)
        with contextlib.suppress(OSError):
            self.control.send(OwnerClosed(self._stats()))
        self.listener.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        os.close(self.wake_r)
        os.close(self.wake_w)


def _frames_of(out: Any) -> list[Frame]:
    if out is None:
        return []
    if isinstance(out, Frame):
        return [out]
    if isinstance(out, list):
        return out
    return [f for v in out.values() for f in (v if isinstance(v, list) else [v])]


def _ready_info(node: Node, ctx: _OwnerContext) -> OwnerReady:
    """What a client needs from an opened node: its outputs (the memory it provides), what it adds to each
    frame's metadata, its ``--stats`` sections."""
    if isinstance(node, DeviceService):
        return OwnerReady(node.output_specs(), os.getpid(), node.frames_at_once(), node.frame_meta(), ctx.sections)
    return OwnerReady([], os.getpid(), 1, {}, ctx.sections)


def owned_placement(node: Node, devs: Devices) -> str:
    """Where a client's shared input must live for ``node`` in the owner: DMA-BUF on an NPU (imported as
    a remote tensor by fd), host shared memory otherwise (OpenCL buffers do not cross processes)."""
    return node.owned_input(devs) if isinstance(node, DeviceService) else "host"


def owner_main(control: Connection, path: str, payload: bytes, plugins: list[str], plugin_dir: str | None,
               standby: bool = False) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor decides what an interrupt means
    for mod in plugins:
        import_plugin(mod, plugin_dir)
    specs, leads = pickle.loads(payload)  # noqa: S301 - from the supervisor that started us
    if standby:  # ready to take over: the nodes' modules imported, the devices listed, nothing opened
        for s in specs:
            s.make()
        with contextlib.suppress(Exception):  # no OpenVINO here: the nodes say so when they open
            devices().openvino.available()
        try:
            msg = control.recv()
        except (EOFError, OSError):  # the supervisor closed us, or is gone
            return
        if not isinstance(msg, OwnerTakeOver):
            return
    try:
        owner = _Owner(control, path, specs, leads)
    except Exception as e:  # noqa: BLE001
        control.send(OwnerCrashed(RemoteError.of(e)))
        return
    owner.serve()


class OwnerStartStoppedError(Exception):
    """The run was asked to stop while the device owner started: nothing ran yet, and nothing is left to drain."""


class OwnerProcess:
    """The supervisor's handle on the device owner: start, watch, restart, close. While a restart is left
    (``restarts_allowed``), a standby owner waits to take over."""

    def __init__(self, specs: list[NodeSpec], plugins: list[str], plugin_dir: str | None, path: str,
                 leads: dict[str, NodeSpec] | None = None, restarts_allowed: int = 0,
                 stopping: Callable[[], bool] | None = None):
        self.specs, self.plugins, self.plugin_dir, self.path = specs, plugins, plugin_dir, path
        #: the run was asked to stop (an interrupt): a start still under way is given up (``OwnerStartStoppedError``)
        self.stopping = stopping or (lambda: False)
        self.leads = leads or {}  # per owned node, the node that may run ahead of it here (``owner_side``)
        self.restarts_allowed = restarts_allowed
        self.restarts = 0
        self.pids: list[int] = []
        self.starts_s: list[float] = []  # each start: from the launch (or takeover) to its socket listening
        self.took_over: list[bool] = []  # each start: by a standby that was ready
        self.final: dict[str, Any] | None = None
        self.error: str | None = None
        self.link: OwnerLink | None = None
        self.proc: Any = None
        self.conn: Connection | None = None
        self._spare: tuple[Any, Connection] | None = None
        try:
            self._start()
        except BaseException:
            self.close()  # a process that did start, or a standby, does not outlive the failure
            raise

    def _launch(self, standby: bool) -> tuple[Any, Connection]:
        ctx = mp.get_context("spawn")
        environment_for_children()
        conn, child = ctx.Pipe(duplex=True)
        proc = ctx.Process(target=owner_main, name="flowpipe:device-owner" + (" (standby)" if standby else ""),
                           daemon=True, args=(child, self.path, pickle.dumps((self.specs, self.leads)),
                                              self.plugins, self.plugin_dir, standby))
        try:
            with no_interrupts_inherited():
                proc.start()
        finally:
            child.close()
        return proc, conn

    def _take_over(self) -> bool:
        """The standby becomes the owner, if it is there to."""
        spare, self._spare = self._spare, None
        if spare is None:
            return False
        try:
            if not spare[0].is_alive():
                raise OSError("the standby owner is gone")
            spare[1].send(OwnerTakeOver())
        except OSError:
            _end(*spare)
            return False
        self.proc, self.conn = spare
        return True

    def _first_word(self) -> Any:
        assert self.conn is not None
        deadline = time.monotonic() + 120
        while not self.conn.poll(0.1):  # a start (a model compiling) is given up at once when the run stops
            if self.stopping():
                raise OwnerStartStoppedError("the run was stopped while the device owner started")
            if time.monotonic() > deadline:
                raise RuntimeError("the device owner did not start within 120 s")
        try:
            return self.conn.recv()
        except EOFError:
            raise RuntimeError(f"the device owner exited while starting (exit code {self.proc.exitcode})") from None

    def _start(self) -> None:
        t0 = time.monotonic()
        took_over = self._take_over()
        if not took_over:
            self.proc, self.conn = self._launch(standby=False)
        try:
            msg = self._first_word()
        except RuntimeError:
            if not took_over:
                raise
            assert self.conn is not None
            _end(self.proc, self.conn)  # the standby failed to take over: a new process instead
            took_over = False
            self.proc, self.conn = self._launch(standby=False)
            msg = self._first_word()
        match msg:
            case OwnerListening(pid, placements):
                self.pids.append(pid)
                self.link = OwnerLink(self.path, placements)
                self.starts_s.append(round(time.monotonic() - t0, 3))
                self.took_over.append(took_over)
                if self.restarts < self.restarts_allowed:  # the next one: it imports while this one serves
                    try:
                        self._spare = self._launch(standby=True)
                    except Exception as e:  # noqa: BLE001 - no standby: a restart starts a new process
                        log.warning("no standby device owner: %s", e)
            case OwnerCrashed(error):
                raise error.exception("the device owner failed to start: ")
            case _:
                raise RuntimeError(f"the device owner failed to start: {msg!r}")

    @property
    def pid(self) -> int | None:
        return self.pids[-1] if self.pids else None

    @property
    def standby_pid(self) -> int | None:
        """The standby owner's process, while one waits."""
        return self._spare[0].pid if self._spare is not None else None

    def check(self) -> str | None:
        """Restart a dead owner (returns what happened, for the log), or None when it is alive."""
        if self.proc.is_alive():
            return None
        code = self.proc.exitcode
        how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        if self.restarts >= self.restarts_allowed:
            self.error = f"device owner (pid {self.pid}) died ({how}); no restarts left"
            return self.error
        self.restarts += 1
        assert self.conn is not None
        self.conn.close()
        try:
            self._start()
        except (RuntimeError, OSError) as e:
            self.error = f"device owner died ({how}) and did not restart: {e}"
            return self.error
        return f"device owner died ({how}); restarted as pid {self.pid} (restart {self.restarts})"

    def close(self) -> None:
        if self._spare is not None:  # the standby ends when its pipe closes
            _end(*self._spare)
            self._spare = None
        if self.proc is None or self.conn is None:
            return
        if self.proc.is_alive():
            try:
                self.conn.send(Close())
                if self.conn.poll(60):
                    match self.conn.recv():
                        case OwnerClosed(stats):
                            self.final = stats
            except (OSError, EOFError):
                pass
        self.proc.join(timeout=10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(timeout=5)
        self.conn.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


def _end(proc: Any, conn: Connection) -> None:
    """An owner process that is not serving (a standby, or one that failed to take over): its pipe closed,
    it ends (killed if it does not)."""
    conn.close()
    proc.join(timeout=5)
    if proc.is_alive():
        proc.kill()
        proc.join(timeout=5)


# -- shard side ----------------------------------------------------------------------------------------------
class OwnerClient(AsyncNode, Negotiating, Node):
    """Takes an owned node's place in a shard: sends frames to the device owner, gets them back in order."""

    WINDOW: ClassVar[tuple[int, int]] = (2, 16)  # frames a shard may have at the owner per node, at least/most

    def __init__(self, spec: NodeSpec, link: OwnerLink):
        super().__init__(spec.id, spec.config)
        self.spec, self.link = spec, link
        self.in_port = next(iter(spec.contract.inputs))
        # the owner writes the node's input itself, from the frame's picture (its producer runs there too)
        self.picture = link.placements.get(spec.id) == "owner"
        self.max_held = self.window = self.WINDOW[1]  # until the owner says what keeps it busy (open)
        # the owned node's contract, holding frames (they are at the owner until they come back): a shard
        # decodes as it would with the node in it (an inference node takes any pixel format, so the sources
        # keep YUV rather than making BGR for nobody)
        self.declared = replace(spec.contract, holds_frames=True)

    def request(self, port: str, offer: Offer, outputs: Any, devices: Any) -> Request:
        placement = self.link.placements.get(self.id, "host")
        return Request(placement, by=self.id)  # type: ignore[arg-type]

    def open(self, ctx: RunContext) -> None:
        self.ctx = ctx
        contract = ctx.input(self.in_port)
        self.in_offer = contract.offer if contract is not None else Offer()
        self.in_flight_cap = ctx.frames_in_flight()
        self.pending: dict[int, Frame] = {}
        self.order: deque[int] = deque()
        self.ready: set[int] = set()
        self.errors: deque[FrameError] = deque()
        self.cond = threading.Condition()
        self.seq = 0
        self.sock: socket.socket | None = None
        self.pools: list[BufferPool] = []
        self._connect(time.monotonic() + CONNECT_TIMEOUT_S)

    def _connect(self, deadline: float) -> None:
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(self.link.path)
                send(sock, OwnerHello(self.id, self.in_offer, self.in_flight_cap, self.ctx.shard[1]))
                msg, _ = recv(sock)
                break
            except (FileNotFoundError, ConnectionError, EOFError):
                # not there yet, or a killed owner's socket that still took the connection while it went
                sock.close()
                if time.monotonic() > deadline:
                    raise RuntimeError(f"device owner not reachable at {self.link.path}") from None
                time.sleep(0.05)
        match msg:
            case OwnerReady():
                info = self.info = msg
            case OwnerOpenFailed(error):
                sock.close()
                raise error.exception()
            case _:
                sock.close()
                raise RuntimeError(f"unexpected answer from the device owner: {msg!r}")
        # this shard's share of what the owner's requests take at once: enough to keep them busy, no more
        # (each frame at the owner holds its decoded picture in the shard)
        lo, hi = self.WINDOW
        self.window = max(lo, min(hi, -(-int(info.at_once) // max(1, self.ctx.shard[1]))))
        # and the frames with nothing to run (an interval's) that wait in their turn behind those
        every = self.in_offer.tensor.every if self.in_offer.tensor is not None else 1
        self.max_held = self.window * every
        if not self.pools:  # output buffers in this shard's memory: the owner's requests write into them
            n = min(self.in_flight_cap, 64) + self.window
            kind = "dma-heap" if self.link.placements.get(self.id) == "dma-buf" else None
            self.pools = [_pool(int(np.prod(shape)) * np.dtype(dt).itemsize, n, kind)
                          for _, shape, dt in info.outputs]
        self.sent: set[int] = set()
        self.kept = 0  # frames with nothing to run, which did not cross
        self.sock = sock
        for name, data in info.sections.items():
            self.ctx.section(name, dict(data, owner_pid=info.pid))
        self.ctx.stats["device_owner"] = {"pid": info.pid}
        self.reader = threading.Thread(target=self._read, args=(sock,), name=f"flowpipe:{self.id}:owner", daemon=True)
        self.reader.start()

    def _read(self, sock: socket.socket) -> None:
        while True:
            try:
                msg, _ = recv(sock)
            except (EOFError, OSError):
                break
            with self.cond:
                match msg:
                    case OwnerDone(_, keys, shapes):
                        for k, cut in shapes.items():  # a dynamic output: only its first part is this frame's
                            f = self.pending.get(k)
                            for (name, _, _), shape in zip(self.info.outputs, cut):
                                if f is not None and name in f.tensors:
                                    f.tensors[name] = leading(f.tensors[name], tuple(shape))
                        self.ready.update(keys)
                    case OwnerFailed(_, keys, error):
                        frames = [self.pending.pop(k) for k in keys if k in self.pending]
                        for k in keys:
                            with contextlib.suppress(ValueError):
                                self.order.remove(k)
                        if frames:
                            self.errors.append(FrameError(frames, error.exception("in the device owner: ")))
                self.cond.notify_all()
            self.ctx.wake()
        with self.cond:  # the owner is gone: what it held failed
            if self.sock is sock:
                self.sock = None
                lost = [self.pending.pop(k) for k in self.order if k not in self.ready]
                self.order = deque(k for k in self.order if k in self.ready)  # done (or never sent): they go on
                if lost:
                    names = ", ".join(f"{f.stream}:{f.index}" for f in lost[:8]) + (" ..." if len(lost) > 8 else "")
                    self.errors.append(FrameError(lost, RuntimeError(
                        f"the device owner (pid {self.info.pid}) died holding {len(lost)} frames ({names})")))
            self.cond.notify_all()
        self.ctx.wake()

    # per frame ----------------------------------------------------------------------------------------
    def process(self, frame: Frame, port: str) -> list[Frame]:
        lay = frame.layout
        if lay is not None and lay.filled == 0:  # nothing to run (no object to look at, an interval's frame):
            with self.cond:  # it does not cross; on in its turn, after the frames sent before it
                key = self.seq = self.seq + 1
                self.pending[key] = frame
                self.order.append(key)
                self.ready.add(key)
                self.kept += 1
                self.ctx.stats["frames_kept_here"] = self.kept  # none to run: never sent to the owner
            return self._take()
        with self.cond:
            # room at the owner, or the oldest is back (this thread hands it on below, after sending)
            self.cond.wait_for(lambda: self._out() < self.window or self.order[0] in self.ready
                               or self.sock is None, timeout=CONNECT_TIMEOUT_S)
        if self.sock is None:
            self._connect(time.monotonic() + CONNECT_TIMEOUT_S)  # the supervisor restarts the owner
        sock = self.sock
        assert sock is not None
        new: list[tuple[int, str]] = []
        fds: list[int] = []
        bids: list[int] = []
        outs = []
        for i, pool in enumerate(self.pools):
            lease = pool.acquire(timeout=30)
            frame.hold(lease)
            name, shape, dt = self.info.outputs[i]
            view = lease.buffer.array(tuple(shape), np.dtype(dt))
            frame.tensors[name] = view
            outs.append(self._ref(frame, view, new, fds, bids))
        if self.picture:  # the owner writes the tensor from the frame's picture
            if frame.data is None:
                raise ValueError("no picture on the frame for the device owner to write the tensor from")
            inp = self._ref(frame, frame.data, new, fds, bids)
        else:
            t = frame.tensors.get("input")
            if t is None:
                raise ValueError("no input tensor on the frame: expected a preprocess node upstream")
            inp = self._ref(frame, t, new, fds, bids)
        meta = {k: frame.meta[k] for k in ("reset_state",) if k in frame.meta}
        lay = frame.layout  # how many entries of an up_to tensor this frame filled (objects); not where they lie
        layout = replace(lay, places=(), objects=None) if lay is not None and lay.filled is not None else None
        with self.cond:
            key = self.seq = self.seq + 1
            self.pending[key] = frame
            self.order.append(key)
        try:
            send(sock, OwnerFrame(self.id, key, new, frame.stream, frame.index, frame.pts, meta, layout, bids, inp,
                                  outs, frame.format if self.picture else None), fds)
        except OSError:
            pass  # the reader sees the owner gone and fails what it held, this frame included
        self.sent.update(b for b, _ in new)
        return self._take()

    def _ref(self, frame: Frame, arr: Any, new: list[tuple[int, str]], fds: list[int],
             bids: list[int]) -> BufferRef | ObjectRef:
        buf = frame.buffer_of(arr) if isinstance(arr, np.ndarray) else None
        if buf is None or buf.handle is None:
            ledgers.record(arr.nbytes if isinstance(arr, np.ndarray) else 0)  # by value: a copy
            return ObjectRef(np.asarray(arr))
        bid = id(buf)
        if bid not in self.sent and all(b != bid for b, _ in new):
            new.append((bid, buf.kind))
            fds.append(buf.handle)
        if bid not in bids:
            bids.append(bid)
        return BufferRef(bid, arr.ctypes.data - buf.address, arr.shape, arr.dtype.str, arr.strides)

    def _out(self) -> int:
        """Frames sent to the owner and not back yet (under ``cond``; those kept here do not count)."""
        return sum(1 for k in self.order if k not in self.ready)

    def _take(self) -> list[Frame]:
        out = []
        with self.cond:
            while self.order and self.order[0] in self.ready:
                key = self.order.popleft()
                self.ready.discard(key)
                f = self.pending.pop(key)
                f.meta.update(self.info.meta)
                out.append(f)
        return out

    def poll(self) -> list[Frame]:
        out = self._take()
        with self.cond:
            err = self.errors.popleft() if self.errors and not out else None
            if self.errors:
                self.ctx.wake()
        if err is not None:
            raise err
        return out

    def flush(self) -> list[Frame]:
        """End of stream: everything at the owner comes back (or fails, through ``poll``)."""
        with self.cond:
            done = self.cond.wait_for(lambda: all(k in self.ready for k in self.order) or self.sock is None,
                                      timeout=CONNECT_TIMEOUT_S)
        out = self._take()
        with self.cond:
            if not done and self.order:
                lost = [self.pending.pop(k) for k in self.order]
                self.order.clear()
                self.errors.append(FrameError(lost, TimeoutError(
                    f"the device owner did not answer for {len(lost)} frames in {CONNECT_TIMEOUT_S:.0f} s")))
        return out

    def close(self) -> None:
        sock, self.sock = getattr(self, "sock", None), None
        if sock is not None:
            with contextlib.suppress(OSError):
                send(sock, Bye())
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
            self.reader.join(timeout=5)
        for p in getattr(self, "pools", []):
            p.close()
        self.pools = []


def _pool(nbytes: int, count: int, kind: str | None) -> BufferPool:
    if kind == "dma-heap" and kind not in available_kinds():
        kind = None
    return BufferPool(nbytes, count, kind or best_kind(shareable=True))

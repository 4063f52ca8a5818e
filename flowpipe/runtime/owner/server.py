"""The device owner's side: one loop that serves every shard's clients (``OwnerClient``) over a Unix socket,
with the owned nodes opened once, and answers its supervisor on the control pipe (``OwnerProcess``)."""
from __future__ import annotations

import contextlib
import logging
import os
import queue
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ...accel import Devices, DeviceService, devices
from ...contracts import Allocation, InputContract, Offer
from ...errors import FrameError
from ...frame import Frame
from ...graph import NodeSpec
from ...memory import SharedBuffer
from ...memory import ledger as ledgers
from ...memory.ledger import CopyLedger
from ...node import AsyncNode, Node, offer_of, request_of
from ..messages import (
    Bye,
    Close,
    OwnerBuffers,
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
    RemoteError,
    StatsWanted,
)
from ..negotiate import allocate
from ..process import OutsideContext
from ..wire import Codec, recv, send
from .client import OwnerClient

log = logging.getLogger("flowpipe.owner")


# -- wire: arrays in shared buffers as headers ------------------------------------------------------------
class _Mapped:
    """A buffer the owner mapped from a client's fd, held by a frame so ``Frame.buffer_of`` finds it."""

    __slots__ = ("buffer",)

    def __init__(self, buffer: Any):
        self.buffer = buffer

    def release(self) -> None:
        pass


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

    def map(self, gone: tuple[int, ...], new: list[tuple[int, str]], fds: list[int]) -> None:
        """The client's buffers as it lets some go and shows new ones: those it let go unmapped (a frame here
        still holding one keeps its pages until it ends), then the new ones mapped; a ``memfd`` buffer keeps
        only its mapping's own fd here (a DMA-BUF keeps the one it came with: a device imports it by fd). What
        is mapped is bounded by what the client's pools hold now."""
        for bid in gone:
            buf = self.codec.buffers.pop(bid, None)
            if buf is not None:
                buf.close()
        for (bid, kind), fd in zip(new, fds):
            buf = self.codec.buffers[bid] = SharedBuffer(os.fstat(fd).st_size, kind, _fd=fd)
            buf.drop_handle()

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
            case OwnerBuffers():
                c.map(msg.gone, msg.new, fds)
            case OwnerFrame():
                c.map(msg.gone, msg.new, fds)
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
        # the shards' buffers mapped here: at most what their pools hold now (each let go with its pool)
        mapped = [b for k in list(self.sel.get_map().values()) if isinstance(k.data, _Client)
                  for b in k.data.codec.buffers.values()]
        out["mapped"] = {"buffers": len(mapped), "mb": round(sum(b.size for b in mapped) / 2**20, 1),
                         "fds": sum(1 for b in mapped if b.handle is not None)}
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


def serve(control: Connection, path: str, specs: list[NodeSpec], leads: dict[str, NodeSpec]) -> None:
    """Opens the owner's nodes (``specs``, with the nodes that may run ahead of them, ``leads``) and serves at
    socket ``path`` until the supervisor closes it; a failure to start goes to the supervisor as one line."""
    try:
        owner = _Owner(control, path, specs, leads)
    except Exception as e:  # noqa: BLE001
        control.send(OwnerCrashed(RemoteError.of(e)))
        return
    owner.serve()

"""A shard's side of the device owner: ``OwnerClient`` takes an owned node's place, sends it frames as headers
over the owner's socket (their buffers' fds cross once) and gets them back in order."""
from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np

from ...contracts import Offer, Request
from ...errors import FrameError
from ...frame import Frame
from ...graph import NodeSpec
from ...memory import BufferPool, available_kinds, best_kind, leading, packed
from ...memory import ledger as ledgers
from ...node import AsyncNode, Negotiating, Node, RunContext
from ..messages import (
    BufferRef,
    Bye,
    ObjectRef,
    OwnerBuffers,
    OwnerDone,
    OwnerFailed,
    OwnerFrame,
    OwnerHello,
    OwnerOpenFailed,
    OwnerReady,
)
from ..wire import MAX_FDS, recv, send

CONNECT_TIMEOUT_S = 60.0  # a restarted owner loads its model (from the cache) within this


@dataclass(frozen=True)
class OwnerLink:
    """What a shard needs to reach the owner: its socket and, per owned node, the input placement."""

    path: str
    placements: dict[str, str]


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
        self.offsets: list[int] = []  # where each output lies in a frame's block of the pool
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
            # a frame's results in one buffer, each output at its offset: one fd and one mapping a frame
            size, self.offsets = packed([(tuple(shape), dt) for _, shape, dt in info.outputs])
            self.pools = [_pool(size, n, kind)] if info.outputs else []
        #: the buffers the owner has mapped, by id: held here until they are closed and the owner told so,
        #: so that no new buffer takes the id of one the owner still maps
        self.sent: dict[int, Any] = {}
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
        gone = tuple(bid for bid, buf in self.sent.items() if getattr(buf, "closed", False))
        for bid in gone:  # a pool let them go (a stream's, closed): the owner unmaps them
            del self.sent[bid]
        new: list[tuple[int, str]] = []
        fds: list[int] = []
        bids: list[int] = []
        outs = []
        held: dict[int, Any] = {}
        if self.pools:
            lease = self.pools[0].acquire(timeout=30)
            frame.hold(lease)
            for (name, shape, dt), at in zip(self.info.outputs, self.offsets):
                view = lease.buffer.array(tuple(shape), np.dtype(dt), offset=at)
                frame.tensors[name] = view
                outs.append(self._ref(frame, view, new, fds, bids, held))
        if self.picture:  # the owner writes the tensor from the frame's picture
            if frame.data is None:
                raise ValueError("no picture on the frame for the device owner to write the tensor from")
            inp = self._ref(frame, frame.data, new, fds, bids, held)
        else:
            t = frame.tensors.get("input")
            if t is None:
                raise ValueError("no input tensor on the frame: expected a preprocess node upstream")
            inp = self._ref(frame, t, new, fds, bids, held)
        meta = {k: frame.meta[k] for k in ("reset_state",) if k in frame.meta}
        lay = frame.layout  # how many entries of an up_to tensor this frame filled (objects); not where they lie
        layout = replace(lay, places=(), objects=None) if lay is not None and lay.filled is not None else None
        with self.cond:
            key = self.seq = self.seq + 1
            self.pending[key] = frame
            self.order.append(key)
        try:
            # a whole pool's fds may exceed what one message carries: all but the last part go ahead
            while len(new) > MAX_FDS:
                send(sock, OwnerBuffers(new[:MAX_FDS], gone), fds[:MAX_FDS])
                new, fds, gone = new[MAX_FDS:], fds[MAX_FDS:], ()
            send(sock, OwnerFrame(self.id, key, new, frame.stream, frame.index, frame.pts, meta, layout, bids, inp,
                                  outs, frame.format if self.picture else None, gone), fds)
        except OSError:
            pass  # the reader sees the owner gone and fails what it held, this frame included
        self.sent.update(held)
        return self._take()

    def _ref(self, frame: Frame, arr: Any, new: list[tuple[int, str]], fds: list[int],
             bids: list[int], held: dict[int, Any]) -> BufferRef | ObjectRef:
        lease = frame.lease_of(arr) if isinstance(arr, np.ndarray) else None
        buf = lease.buffer if lease is not None else None
        if buf is None or getattr(buf, "handle", None) is None:  # (a backend's own memory has none: by value)
            ledgers.record(arr.nbytes if isinstance(arr, np.ndarray) else 0)  # by value: a copy
            return ObjectRef(np.asarray(arr))
        bid = id(buf)
        if bid not in self.sent and bid not in held:
            # the owner maps the buffer's whole pool now, so that what it maps stays that pool's size however
            # deep the queues get later (its pages are still made only where frames write)
            pool = getattr(lease, "pool", None)
            for b in [buf, *(pool.buffers() if pool is not None else ())]:
                if getattr(b, "handle", None) is not None and not getattr(b, "closed", False) \
                        and id(b) not in self.sent and id(b) not in held:
                    new.append((id(b), b.kind))
                    fds.append(b.handle)
                    held[id(b)] = b
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
    # written by the owner's device: a driver may hold the pages it writes pinned, so they stay
    return BufferPool(nbytes, count, kind or best_kind(shareable=True), trim=False)


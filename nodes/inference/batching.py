"""Frames into requests: batches across streams (written in place into batch slots, or assembled by
copying), the partial-batch deadline, and the entries a frame fills of a tensor declared ``up_to``."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeAlias

import numpy as np

from flowpipe.contracts import Offer
from flowpipe.errors import FrameError
from flowpipe.frame import Frame
from flowpipe.memory import BatchSlots, BufferPool, SharedLease, Slot
from flowpipe.memory import ledger as ledgers

#: frames for one request, with their slots of one batch buffer (None: assembled by copying)
Batch: TypeAlias = tuple[list[Frame], list[Slot] | None]


class Entries:
    """The entries (objects, tiles) of one frame's input tensor: ``count`` always, or up to ``count`` with a
    producer that declares ``TensorSpec.up_to``. ``variable``: the model's batch is bounded-dynamic and each
    request runs the entries its frame filled (CPU, GPU over host memory); otherwise all ``count`` run and
    those past the frame's are ignored (static at the bound: the NPU, remote OpenCL inputs)."""

    def __init__(self, count: int = 1, up_to: bool = False, variable: bool = False):
        self.count, self.up_to, self.variable = count, up_to, variable

    @classmethod
    def of(cls, offer: Offer, batch: int, device: str, placement: str) -> Entries:
        count = offer.tensor.shape[0] if offer.tensor is not None else 1
        up_to = offer.tensor is not None and offer.tensor.up_to
        if up_to and batch > 1:
            raise ValueError(f"batch: '{offer.producer}' fills a varying number of entries per frame (objects); "
                             f"expected batch: 1, got {batch}")
        return cls(count, up_to, up_to and device != "NPU" and placement != "opencl")

    def describe(self) -> str:
        return f"up to {self.count} per frame, " + (
            "each request runs the frame's" if self.variable else "all run (static shape), the frame's used")

    def filled(self, frame: Frame) -> int:
        """How many entries of an ``up_to`` tensor ``frame`` filled."""
        layout = frame.layout
        return int(layout.filled) if layout is not None and layout.filled is not None else self.count

    def empty(self, frame: Frame) -> bool:
        """``frame`` has nothing to look at (no object to look at, or the detector's interval passed over
        it): it runs no request."""
        return self.filled(frame) == 0

    def run(self, frame: Frame) -> int:
        """How many entries ``frame``'s request runs: with a bounded-dynamic batch the entries it filled
        rounded up to a power of two (or the bound), so a handful of input shapes ever runs, each prepared at
        open; the ones past those it filled run on stale data and are not read."""
        k = self.filled(frame)
        return min(self.count, 1 << max(0, k - 1).bit_length()) if k else 0

    def sizes(self) -> list[int]:
        """Every number of entries ``run`` gives: the input shapes to prepare before the first frame."""
        out, n = [], 1
        while True:
            out.append(min(n, self.count))
            if out[-1] == self.count:
                return out
            n *= 2

    def view(self, arr: np.ndarray, dynamic_dims: list[int], frame: Frame) -> np.ndarray:
        """The part of an output ``arr`` (its max shape) for the entries ``frame``'s request ran: its
        dynamic dimensions scale with them, from the start of the memory."""
        if not self.variable or not dynamic_dims:
            return arr
        k = self.run(frame)
        shape = tuple(d * k // self.count if j in dynamic_dims else d for j, d in enumerate(arr.shape))
        return arr.reshape(-1)[:int(np.prod(shape))].reshape(shape)


class Batcher:
    """``batch`` frames (of any streams) per request. Frames the producer wrote into slots of one batch
    buffer (``memory.BatchSlots``) go when all of that buffer's frames are here; other frames are gathered
    and copied into a batch tensor. A partial batch goes ``timeout_ms`` after its first frame came
    (``wake`` brings the poll that sends it)."""

    def __init__(self, batch: int, timeout_ms: float, wake: Callable[[], None], entries: int,
                 in_shape: tuple[int, ...] | None, in_type: Any, slots: BatchSlots | None, requests: int,
                 binder: Any, input_name: str):
        if in_shape is None:
            raise ValueError("batch > 1 needs a preprocess node upstream (its size sets the static shape)")
        self.batch, self.timeout_s, self.wake, self.entries = batch, timeout_ms / 1e3, wake, entries
        self.shape, self.in_type, self.requests = in_shape, in_type, requests
        self.binder, self.input_name = binder, input_name
        self._nbytes = int(np.prod(in_shape)) * in_type.size
        self.slots = slots
        if slots is not None:  # requests in flight hold batch buffers too
            slots.pool.grow(slots.pool.count + requests)
        self._groups: dict[int, tuple[Any, list[Frame], list[Slot], float]] = {}
        self._gather: list[Frame] = []
        self._deadline = 0.0
        self._timer_due = 0.0  # when the last wake armed for a partial batch comes
        self.pool: BufferPool | None = None  # made on first use: slots usually make it unneeded

    @property
    def waiting(self) -> bool:
        """Frames here wait for the rest of their batch."""
        return bool(self._gather or self._groups)

    def holds(self, stream: str) -> bool:
        """A frame of ``stream`` waits here for the rest of its batch."""
        return any(f.stream == stream for f in self._gather) or any(
            f.stream == stream for _, group, _, _ in self._groups.values() for f in group)

    def add(self, frame: Frame) -> Batch | None:
        """``frame`` into its batch: the batch, when this frame completes it."""
        slot = self._slot_of(frame)
        if slot is not None:  # written in place into a batch buffer: send it when all its frames are here
            b = slot.batch
            if id(b) not in self._groups:  # its first frame here starts the batch's clock
                self._groups[id(b)] = (b, [], [], self._start_clock())
            _, group, group_slots, _ = self._groups[id(b)]
            group.append(frame)
            group_slots.append(slot)
            if not b.complete(len(group)):
                return None
            del self._groups[id(b)]
            return group, group_slots
        if not self._gather:  # the first frame of a batch starts the clock
            self._deadline = self._start_clock()
        self._gather.append(frame)
        if len(self._gather) < self.batch:
            return None
        frames, self._gather = self._gather, []
        return frames, None

    def due(self, now: float | None = None) -> Iterator[Batch]:
        """Batches whose time is up at ``now`` (all of them with None, at the end) go as they are: a slot
        buffer is sealed first, so frames still on their way to it follow in a batch of their own."""
        for key, (b, frames, slots, deadline) in list(self._groups.items()):
            if now is None or now >= deadline:
                del self._groups[key]
                assert self.slots is not None, "slot groups exist only with batch slots"
                self.slots.seal(b)
                yield frames, slots
        if self._gather and (now is None or now >= self._deadline):
            frames, self._gather = self._gather, []
            yield frames, None

    def rearm(self) -> None:
        """Still waiting to fill: make sure a poll comes when the first batch's time is up."""
        due = [d for _, _, _, d in self._groups.values()] + ([self._deadline] if self._gather else [])
        if due:
            self._wake_at(min(due))

    def check(self, frames: list[Frame]) -> None:
        """Frames to copy into a batch tensor fit their slots of it; one that does not fails alone (raised
        here), the others go out with the next batch."""
        bad = next((f for f in frames if not self._fits(f)), None)
        if bad is None:
            return
        self._gather = [f for f in frames if f is not bad] + self._gather
        self._deadline = 0.0
        self.wake()
        got = list(getattr(bad.tensors.get("input"), "shape", []))
        raise FrameError(bad, ValueError(f"input tensor {got} does not fit a batch slot of "
                                         f"{[self.entries, *self.shape[1:]]}"))

    def bind(self, req: Any, frames: list[Frame], slots: list[Slot] | None) -> str:
        """The batch's input bound to ``req``; says how (``--stats`` ``input_binding``)."""
        return self._bind_slots(req, slots) if slots else self._bind_copies(req, frames)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()  # batch slots belong to the run (their producer keeps writing across a restart)

    def _slot_of(self, frame: Frame) -> Slot | None:
        if self.slots is None or frame.ref is None:
            return None
        return next((s for s in frame.ref.leases if isinstance(s, Slot) and s.batch.owner is self.slots), None)

    def _start_clock(self) -> float:
        deadline = time.monotonic() + self.timeout_s
        self._wake_at(deadline)
        return deadline

    def _wake_at(self, deadline: float) -> None:
        """A ``poll`` once ``deadline`` has passed (a partial batch must go then even if no frame comes:
        a client at its window sends none until it has results back)."""
        if time.monotonic() <= self._timer_due <= deadline:
            return  # a wake comes before then; the poll it brings arms the next one if still needed
        self._timer_due = deadline
        timer = threading.Timer(max(0.0, deadline - time.monotonic()) + 5e-4, self.wake)
        timer.daemon = True
        timer.start()

    def _fits(self, frame: Frame) -> bool:
        src = frame.tensors.get("input")
        return src is not None and tuple(getattr(src, "shape", ())) == (self.entries, *self.shape[1:])

    def _bind_slots(self, req: Any, slots: list[Slot]) -> str:
        """Frames the preprocess wrote into slots of one batch buffer: bind the whole buffer, no copies."""
        b = slots[0].batch
        b.submitted += len(slots)
        buf = b.lease.buffer
        if hasattr(buf, "int_ptr"):  # an OpenCL buffer in OpenVINO's GPU context
            for s in slots:
                s.wait_ready()  # the preprocess kernels may still run on their own queue
            req.set_tensor(self.input_name, self.binder.ocl_buffer(buf))
            return f"remote OCL_BUFFER, batch of {self.batch} written in place"
        req.set_input_tensor(self.binder.host(buf.array(self.shape, self.in_type.to_dtype())))
        return f"host tensor, batch of {self.batch} written in place"

    def _bind_copies(self, req: Any, frames: list[Frame]) -> str:
        """Frames whose tensors are not in batch slots (no preprocess upstream wrote them there): each
        input is copied once into its slot of the batch tensor (counted on the input edge)."""
        if self.pool is None:
            self.pool = BufferPool(self._nbytes, self.requests + 1, trim=False)  # bound to requests
        lease = self.pool.acquire(timeout=30)
        shared = SharedLease(lease, len(frames))
        arr = lease.buffer.array(self.shape, self.in_type.to_dtype())
        per = self.entries
        for k, f in enumerate(frames):
            f.hold(shared)
            ledgers.copy(f.tensors["input"], out=arr[k * per:(k + 1) * per])
        if len(frames) < self.batch:
            arr[len(frames) * per:] = 0  # a partial batch (timeout): empty slots, results ignored
        req.set_input_tensor(self.binder.host(arr))
        return f"host tensor, batch of {self.batch} (one counted copy per frame)"

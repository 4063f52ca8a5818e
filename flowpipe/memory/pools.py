"""Pools of equal buffers, the leases that carry them with a frame, and batch slots.

A lease is released with the frame that holds it (its ``FrameRef`` ends), so a pool bounds the memory in
flight: ``acquire`` blocks when every buffer is out (backpressure).
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from .buffers import SharedBuffer, best_kind

log = logging.getLogger(__name__)


def _wait_ready(holder: Lease | Slot) -> None:
    wait, holder.ready = holder.ready, None
    if wait is not None:
        wait()


class Lease:
    """A buffer taken from a pool; valid until released (the engine releases it with the frame)."""

    __slots__ = ("_pool", "buffer", "ready")

    def __init__(self, buffer: Any, pool: BufferPool | None):
        self.buffer, self._pool = buffer, pool
        #: device work still filling the buffer: a callable that waits for it, None when done
        self.ready: Callable[[], None] | None = None

    def wait_ready(self) -> None:
        """Returns once the device work that fills the buffer has finished."""
        _wait_ready(self)

    @property
    def pool(self) -> BufferPool | None:
        """The pool the buffer came from (None once released, or for a buffer of no pool)."""
        return self._pool

    def release(self) -> None:
        self.ready = None
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.give_back(self.buffer)


class BufferPool:
    """A fixed set of equal buffers, recycled. ``acquire`` blocks when all are leased (backpressure).

    ``factory`` makes buffers of another sort (device memory, e.g. OpenCL buffers in a GPU context, or
    page-locked driver memory); ``kind`` names what it makes.

    The free buffers are a stack: the one given back last is taken first, so a run touches as many buffers as
    its queues hold at once, not the whole pool. A pool sized for the deepest queue would still keep, for the
    rest of the run, the pages of every buffer a burst once reached: so at the end of each window of ``TRIM``
    times its size in acquisitions, the buffers no acquisition reached in that window (the bottom of the
    stack) give their pages back (``SharedBuffer.let_pages_go``), and a later burst makes them again. Counted
    in frames, not seconds: which buffers hold pages is a function of the frames' order, and what a frame
    holds is never touched (its buffer is not free). ``trim=False`` keeps every page: memory placed for a
    device (DMA-BUF, page-locked or device memory, a backend's own, an NPU's import), which a driver may hold
    pinned past the process's own mapping, and which would then read pages no longer the buffer's. Host memory
    a device reads in place (an integrated GPU's host-pointer buffer) follows the process's page tables."""

    #: the window, in acquisitions per buffer of the pool, over which a buffer no frame took lets its pages go
    TRIM = 8

    def __init__(self, nbytes: int, count: int, kind: str | None = None, factory: Callable[[], Any] | None = None,
                 trim: bool = True):
        self.nbytes, self.count = nbytes, count
        self.kind = made = kind or ("device" if factory else best_kind())
        # no reference to self in the factory: a pool in a reference cycle would keep its fds until a GC
        self._make: Callable[[], Any] = factory or (lambda: SharedBuffer(nbytes, made))
        self._free = [self._make() for _ in range(count)]
        self._all = list(self._free)
        self._cond = threading.Condition()
        self.high_water = 0
        #: buffers whose pages went back, until taken again; and the window's count and deepest reach
        self._bare: set[int] = {id(b) for b in self._all}  # none touched yet
        self._taken = 0
        self._least_free = count
        self._trims = trim and factory is None
        self.pages_let_go = 0

    def acquire(self, timeout: float | None = None) -> Lease:
        with self._cond:
            if not self._cond.wait_for(lambda: self._free, timeout):
                raise TimeoutError(f"no free buffer in pool of {self.count} after {timeout}s")
            buf = self._free.pop()
            self._bare.discard(id(buf))
            self.high_water = max(self.high_water, self.count - len(self._free))
            self._least_free = min(self._least_free, len(self._free))
            self._taken += 1
            if self._trims and self._taken >= self.TRIM * self.count:
                self._trim()
            return Lease(buf, self)

    def _trim(self) -> None:
        """End of a window: the free buffers below the deepest point any acquisition reached let their pages
        go (under the pool's lock). Memory the system will not take back stops it for good."""
        try:
            for b in self._free[:self._least_free]:
                if id(b) not in self._bare:
                    let_go = getattr(b, "let_pages_go", None)
                    if let_go is None or not let_go():
                        self._trims = False  # memory of a kind the system does not take back
                        break
                    self._bare.add(id(b))
                    self.pages_let_go += 1
        except OSError as e:  # the pages stay: memory, not frames, is what a failed trim costs
            log.warning("a pool of %d buffers of %d bytes keeps its pages: %s", self.count, self.nbytes, e)
            self._trims = False
        finally:
            self._taken, self._least_free = 0, len(self._free)

    def grow(self, count: int) -> None:
        """At least ``count`` buffers in all (a consumer that holds more than was planned for)."""
        with self._cond:
            while self.count < count:
                buf = self._make()
                self._all.append(buf)
                self._free.insert(0, buf)  # at the bottom of the stack: taken once the others are out
                self._bare.add(id(buf))
                self.count += 1
            self._cond.notify_all()

    def buffers(self) -> list[Any]:
        """Every buffer of the pool, leased or free (a process that maps them maps the pool once)."""
        with self._cond:
            return list(self._all)

    @property
    def in_use(self) -> int:
        with self._cond:
            return self.count - len(self._free)

    def give_back(self, buf: Any) -> None:
        """A leased buffer is free again (``Lease.release``)."""
        with self._cond:
            self._free.append(buf)
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._trims = False
        for b in self._all:
            close = getattr(b, "close", None) or getattr(b, "release", None)  # SharedBuffer / cl.Buffer
            if close is not None:
                close()


class BatchSlots:
    """Places in pooled batch buffers, handed to a producer so it writes each frame's tensor straight into
    the batch its consumer submits (no assembly copy). A buffer fills slot by slot; it is sealed when full,
    or early by the consumer when it sends a partial batch (timeout), and goes back to its pool when the
    last frame holding one of its slots ends."""

    def __init__(self, pool: BufferPool, size: int):
        self.pool, self.size = pool, size
        self._lock = threading.Lock()
        self._filling: _BatchBuffer | None = None

    def take(self, timeout: float | None = 30) -> Slot:
        while True:
            with self._lock:
                b = self._filling
                if b is not None:
                    slot = Slot(b, b.taken)
                    b.taken += 1
                    b.refs += 1
                    if b.taken == self.size:
                        b.sealed, self._filling = True, None
                    return slot
            # a fresh buffer, waited for outside the lock: the frames that give buffers back need it
            lease: Lease | None = self.pool.acquire(timeout=timeout)
            with self._lock:
                if self._filling is None:
                    self._filling, lease = _BatchBuffer(self, lease), None  # type: ignore[arg-type]
            if lease is not None:  # another producer made one meanwhile: fill that one
                lease.release()

    def seal(self, b: _BatchBuffer) -> None:
        """No more slots from ``b``: its next frames go to a fresh buffer."""
        with self._lock:
            if self._filling is b:
                self._filling = None
            last = b.refs == 0 and not b.sealed
            b.sealed = True
        if last:
            b.lease.release()

    def unref(self, b: _BatchBuffer) -> None:
        """A frame holding one of ``b``'s slots ended: ``b`` goes back to its pool with the last, once sealed."""
        with self._lock:
            b.refs -= 1
            last = b.refs == 0 and b.sealed
        if last:
            b.lease.release()

    def close(self) -> None:
        self.pool.close()


class _BatchBuffer:
    __slots__ = ("lease", "owner", "refs", "sealed", "submitted", "taken")

    def __init__(self, owner: BatchSlots, lease: Lease):
        self.owner, self.lease = owner, lease
        self.taken = self.refs = self.submitted = 0
        self.sealed = False

    def complete(self, arrived: int) -> bool:
        """Every slot taken from a sealed buffer has reached the consumer (``arrived`` not yet sent)."""
        return self.sealed and self.submitted + arrived >= self.taken


class Slot:
    """One frame's place in a batch buffer (see ``BatchSlots``); travels as a lease with the frame."""

    __slots__ = ("batch", "index", "ready")

    def __init__(self, batch: _BatchBuffer, index: int):
        self.batch, self.index = batch, index
        self.ready: Callable[[], None] | None = None

    @property
    def buffer(self) -> Any:
        return self.batch.lease.buffer

    @property
    def pool(self) -> BufferPool | None:
        return self.batch.lease.pool

    def wait_ready(self) -> None:
        _wait_ready(self)

    def release(self) -> None:
        b, self.ready = self.batch, None
        b.owner.unref(b)


class SharedLease:
    """One lease serving several frames (a batch's output buffer): released when the last frame ends."""

    __slots__ = ("_lock", "buffer", "lease", "users")

    def __init__(self, lease: Lease, users: int):
        self.lease, self.users = lease, users
        self.buffer = lease.buffer
        self._lock = threading.Lock()

    @property
    def pool(self) -> BufferPool | None:
        return self.lease.pool

    def release(self) -> None:
        with self._lock:
            self.users -= 1
            last = self.users == 0
        if last:
            self.lease.release()

"""Shared frame memory: one buffer type over several backings, pools, leases and copy accounting.

Backings, best first (``best_kind()`` picks at run time):

* ``dma-heap``: Linux DMA-BUF system heap (``/dev/dma_heap/system``). The fd can be imported by the
  NPU (``MEM_TYPE: SHARED_BUF``) and by GPU drivers. CPU access is bracketed with DMA_BUF_IOCTL_SYNC.
* ``memfd``: Linux ``memfd_create`` + ``mmap``. The fd crosses processes (SCM_RIGHTS).
* ``win32``: a pagefile-backed file mapping whose NT handle can be duplicated into another process.
* ``host``: anonymous page-aligned memory; no handle, single process only.
* ``ocl-pinned``: page-locked host memory from an OpenCL driver (``CL_MEM_ALLOC_HOST_PTR``, mapped once),
  asked for by a preprocess node on a discrete GPU so frame uploads are DMA transfers; single process.

Every buffer is page aligned (4096) so OpenCL (``USE_HOST_PTR``) and NPU drivers can use it in place.
"""
from __future__ import annotations

import ctypes
import mmap
import os
import struct
import sys
import threading
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np

PAGE = 4096
KINDS = ("dma-heap", "memfd", "win32", "host", "ocl-pinned")

DMA_HEAP_PATH = "/dev/dma_heap/system"
# _IOWR('H', 0, struct dma_heap_allocation_data{u64 len; u32 fd; u32 fd_flags; u64 heap_flags})
DMA_HEAP_IOCTL_ALLOC = 0xC0184800
# _IOW('b', 0, struct dma_buf_sync{u64 flags})
DMA_BUF_IOCTL_SYNC = 0x40086200
DMA_BUF_SYNC_READ, DMA_BUF_SYNC_WRITE, DMA_BUF_SYNC_START, DMA_BUF_SYNC_END = 1, 2, 0, 4


def page_round(nbytes: int) -> int:
    return max(PAGE, (nbytes + PAGE - 1) // PAGE * PAGE)


def available_kinds() -> list[str]:
    """Shared-memory kinds this machine offers, best first."""
    kinds = []
    if sys.platform.startswith("linux"):
        if os.access(DMA_HEAP_PATH, os.R_OK | os.W_OK):
            kinds.append("dma-heap")
        if hasattr(os, "memfd_create"):
            kinds.append("memfd")
    if sys.platform == "win32":
        kinds.append("win32")
    kinds.append("host")
    return kinds


def best_kind(shareable: bool = False) -> str:
    kinds = available_kinds()
    if shareable:
        kinds = [k for k in kinds if k != "host"] or kinds
    return kinds[0]


class SharedBuffer:
    """Page-aligned memory with a handle and zero-copy views.

    Example:
        >>> buf = SharedBuffer(1920 * 1080 * 3)
        >>> img = buf.array((1080, 1920, 3), np.uint8)   # numpy view, no copy
        >>> buf.handle                                    # fd (Linux) or NT handle (Windows), None for host
    """

    def __init__(self, nbytes: int, kind: str | None = None, *, _fd: int | None = None,
                 _ioctl: Callable[..., Any] | None = None, _kernel32: Any = None, cl_device: Any = None):
        self.kind = kind or best_kind()
        if self.kind not in KINDS:
            raise ValueError(f"unknown shared-memory kind: expected one of {'|'.join(KINDS)}, got {self.kind!r}")
        self.nbytes = nbytes
        self.size = page_round(nbytes)
        self.handle: int | None = None
        self._ioctl = _ioctl
        self._kernel32 = _kernel32
        self._address: int | None = None
        if self.kind == "host":
            self._mmap: Any = mmap.mmap(-1, self.size)
        elif self.kind == "memfd":
            fd = _fd if _fd is not None else os.memfd_create("flowpipe-frame", os.MFD_CLOEXEC)
            if _fd is None:
                os.ftruncate(fd, self.size)
            self.handle = fd
            self._mmap = mmap.mmap(fd, self.size)
        elif self.kind == "ocl-pinned":
            import pyopencl as cl

            self._cl_pinned = cl.Buffer(cl_device.context, cl.mem_flags.READ_WRITE | cl.mem_flags.ALLOC_HOST_PTR,
                                        self.size)
            self._pinned_map, _ = cl.enqueue_map_buffer(cl_device.queue, self._cl_pinned,
                                                        cl.map_flags.READ | cl.map_flags.WRITE, 0, (self.size,),
                                                        np.uint8, is_blocking=True)
            self._address = int(self._pinned_map.ctypes.data)
            self._mmap = None
        elif self.kind == "dma-heap":
            fd = _fd if _fd is not None else dma_heap_alloc(self.size, ioctl=_ioctl)
            self.handle = fd
            self._mmap = mmap.mmap(fd, self.size)
        else:
            self.handle, self._address, self._mmap = _win32_map(self.size, _fd, _kernel32)
        self._closed = False
        self.address = self._address or int(np.frombuffer(self._mmap, np.uint8, count=1).ctypes.data)

    # -- views -------------------------------------------------------------------------------
    def array(self, shape: tuple[int, ...], dtype: Any = np.uint8, offset: int = 0) -> np.ndarray:
        """A numpy view over the buffer (no copy)."""
        dtype = np.dtype(dtype)
        count = int(np.prod(shape))
        if offset + count * dtype.itemsize > self.size:
            raise ValueError(f"view of {count * dtype.itemsize} bytes at offset {offset} exceeds buffer of {self.size}")
        if self._mmap is not None:
            return np.frombuffer(self._mmap, dtype=dtype, count=count, offset=offset).reshape(shape)
        raw = (ctypes.c_uint8 * self.size).from_address(self._address)  # win32 MapViewOfFile address
        return np.frombuffer(raw, dtype=dtype, count=count, offset=offset).reshape(shape)

    def cl_buffer(self, context: Any, shape: tuple[int, ...] | None = None, dtype: Any = np.uint8,
                  offset: int = 0, access: str = "rw") -> Any:
        """An OpenCL buffer over the same memory (CL_MEM_USE_HOST_PTR): zero copy on unified memory."""
        import pyopencl as cl

        flags = {"r": cl.mem_flags.READ_ONLY, "w": cl.mem_flags.WRITE_ONLY, "rw": cl.mem_flags.READ_WRITE}[access]
        view = self.array(shape or (self.nbytes,), dtype, offset)
        return cl.Buffer(context, flags | cl.mem_flags.USE_HOST_PTR, hostbuf=view)

    def ov_tensor(self, shape: tuple[int, ...], dtype: Any = np.float32, offset: int = 0) -> Any:
        """An OpenVINO host tensor sharing this memory (``shared_memory=True``)."""
        import openvino as ov

        return ov.Tensor(self.array(shape, dtype, offset), shared_memory=True)

    def remote_properties(self, device: str) -> dict[str, Any]:
        """The property map for ``RemoteContext.create_tensor`` that imports this buffer's handle."""
        if self.handle is None:
            raise ValueError(f"a '{self.kind}' buffer has no handle to import on {device}")
        dev = device.split(".")[0].upper()
        if dev == "NPU":
            return {"MEM_TYPE": "SHARED_BUF", "MEM_HANDLE": hex(self.handle)}
        if dev == "GPU":  # a DMA-BUF fd on Linux, an NT handle on Windows
            return {"SHARED_MEM_TYPE": "BUFFER_FROM_HANDLE", "OS_HANDLE": int(self.handle)}
        raise ValueError(f"no remote tensor import for device {device!r}: expected NPU or GPU")

    @contextmanager
    def cpu_access(self, write: bool = True) -> Iterator[None]:
        """Bracket CPU access; for DMA-BUF this issues DMA_BUF_IOCTL_SYNC start/end (cache coherency)."""
        if self.kind != "dma-heap":
            yield
            return
        flags = DMA_BUF_SYNC_READ | (DMA_BUF_SYNC_WRITE if write else 0)
        dma_buf_sync(self.handle, DMA_BUF_SYNC_START | flags, ioctl=self._ioctl)
        try:
            yield
        finally:
            dma_buf_sync(self.handle, DMA_BUF_SYNC_END | flags, ioctl=self._ioctl)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._mmap is not None:
                self._mmap.close()
        except BufferError:
            pass  # a numpy view is still alive; the mapping goes when it does
        if self.kind in ("memfd", "dma-heap") and self.handle is not None:
            os.close(self.handle)
        elif self.kind == "ocl-pinned":
            self._pinned_map = None  # unmaps when the mapping object goes
            self._cl_pinned = None
        elif self.kind == "win32" and self.handle is not None:
            k32 = self._kernel32 or ctypes.windll.kernel32  # type: ignore[attr-defined]
            if self._address:
                k32.UnmapViewOfFile(ctypes.c_void_p(self._address))
            k32.CloseHandle(ctypes.c_void_p(self.handle))

    def __repr__(self) -> str:
        return f"SharedBuffer(kind={self.kind!r}, size={self.size}, handle={self.handle})"


def cpu_write(buffer: SharedBuffer | None) -> Any:
    """Context for a CPU write into ``buffer``: DMA_BUF_IOCTL_SYNC on DMA-BUF memory, nothing otherwise."""
    from contextlib import nullcontext

    if buffer is not None and buffer.kind == "dma-heap":
        return buffer.cpu_access(write=True)
    return nullcontext()


def dma_heap_alloc(size: int, heap: str = DMA_HEAP_PATH, *, ioctl: Callable[..., Any] | None = None,
                   opener: Callable[..., int] = os.open, closer: Callable[[int], None] = os.close) -> int:
    """Allocate ``size`` bytes from a DMA-BUF heap; returns the DMA-BUF fd."""
    import fcntl

    ioctl = ioctl or fcntl.ioctl
    heap_fd = opener(heap, os.O_RDWR | os.O_CLOEXEC)
    try:
        req = bytearray(struct.pack("=QIIQ", size, 0, os.O_RDWR | os.O_CLOEXEC, 0))
        ioctl(heap_fd, DMA_HEAP_IOCTL_ALLOC, req, True)
        _, fd, _, _ = struct.unpack("=QIIQ", bytes(req))
        return fd
    finally:
        closer(heap_fd)


def dma_buf_sync(fd: int, flags: int, *, ioctl: Callable[..., Any] | None = None) -> None:
    import fcntl

    (ioctl or fcntl.ioctl)(fd, DMA_BUF_IOCTL_SYNC, struct.pack("=Q", flags))


def _win32_map(size: int, handle: int | None, kernel32: Any) -> tuple[int, int, None]:
    """CreateFileMappingW (pagefile-backed) + MapViewOfFile; returns (NT handle, address, None)."""
    k32 = kernel32 or ctypes.windll.kernel32  # type: ignore[attr-defined]
    INVALID_HANDLE_VALUE, PAGE_READWRITE, FILE_MAP_ALL_ACCESS = -1, 0x04, 0x000F001F
    if handle is None:
        handle = k32.CreateFileMappingW(ctypes.c_void_p(INVALID_HANDLE_VALUE), None, PAGE_READWRITE,
                                        (size >> 32) & 0xFFFFFFFF, size & 0xFFFFFFFF, None)
        if not handle:
            raise OSError("CreateFileMappingW failed")
    address = k32.MapViewOfFile(ctypes.c_void_p(handle), FILE_MAP_ALL_ACCESS, 0, 0, size)
    if not address:
        raise OSError("MapViewOfFile failed")
    return int(handle), int(address), None


# -- pools -----------------------------------------------------------------------------------------
def _wait_ready(holder: Lease | Slot) -> None:
    ev, holder.ready = holder.ready, None
    if ev is not None:
        from flowpipe.devices import wait_event

        wait_event(ev)


class Lease:
    """A buffer taken from a pool; valid until released (the engine releases it with the frame)."""

    __slots__ = ("buffer", "_pool", "ready")

    def __init__(self, buffer: SharedBuffer, pool: BufferPool | None):
        self.buffer, self._pool = buffer, pool
        self.ready: Any = None  # device work still filling the buffer (an OpenCL event), None when done

    def wait_ready(self) -> None:
        """Returns once the device work that fills the buffer has finished (see ``devices.wait_event``)."""
        _wait_ready(self)

    def release(self) -> None:
        self.ready = None
        pool, self._pool = self._pool, None
        if pool is not None:
            pool._give_back(self.buffer)


class BufferPool:
    """A fixed set of equal buffers, recycled. ``acquire`` blocks when all are leased (backpressure).

    ``factory`` makes buffers of another sort (device memory, e.g. OpenCL buffers in a GPU context)."""

    def __init__(self, nbytes: int, count: int, kind: str | None = None, factory: Callable[[], Any] | None = None,
                 **buffer_args: Any):
        self.nbytes, self.count = nbytes, count
        self.kind = "device" if factory else (kind or best_kind())
        make = factory or (lambda: SharedBuffer(nbytes, self.kind, **buffer_args))
        self._free = [make() for _ in range(count)]
        self._all = list(self._free)
        self._cond = threading.Condition()
        self.high_water = 0

    def acquire(self, timeout: float | None = None) -> Lease:
        with self._cond:
            if not self._cond.wait_for(lambda: self._free, timeout):
                raise TimeoutError(f"no free buffer in pool of {self.count} after {timeout}s")
            buf = self._free.pop()
            self.high_water = max(self.high_water, self.count - len(self._free))
            return Lease(buf, self)

    @property
    def in_use(self) -> int:
        with self._cond:
            return self.count - len(self._free)

    def _give_back(self, buf: SharedBuffer) -> None:
        with self._cond:
            self._free.append(buf)
            self._cond.notify()

    def close(self) -> None:
        for b in self._all:
            (getattr(b, "close", None) or getattr(b, "release", None) or (lambda: None))()


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
        with self._lock:
            b = self._filling
            if b is None:
                b = self._filling = _BatchBuffer(self, self.pool.acquire(timeout=timeout))
            slot = Slot(b, b.taken)
            b.taken += 1
            b.refs += 1
            if b.taken == self.size:
                b.sealed, self._filling = True, None
        return slot

    def seal(self, b: _BatchBuffer) -> None:
        """No more slots from ``b``: its next frames go to a fresh buffer."""
        with self._lock:
            if self._filling is b:
                self._filling = None
            last = b.refs == 0 and not b.sealed
            b.sealed = True
        if last:
            b.lease.release()

    def close(self) -> None:
        self.pool.close()


class _BatchBuffer:
    __slots__ = ("owner", "lease", "taken", "refs", "sealed", "submitted")

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
        self.batch, self.index, self.ready = batch, index, None

    @property
    def buffer(self) -> Any:
        return self.batch.lease.buffer

    def wait_ready(self) -> None:
        _wait_ready(self)

    def release(self) -> None:
        b, self.ready = self.batch, None
        owner = b.owner
        with owner._lock:
            b.refs -= 1
            last = b.refs == 0 and b.sealed
        if last:
            b.lease.release()


# -- copy accounting ---------------------------------------------------------------------------------
@dataclass
class EdgeMemory:
    frames: int = 0
    copies: int = 0
    bytes_copied: int = 0
    memory: str = "none"


class CopyLedger:
    """Counts every copy of frame or tensor data flowpipe makes, per edge ("src->dst")."""

    def __init__(self) -> None:
        self.edges: dict[str, EdgeMemory] = defaultdict(EdgeMemory)
        self._local = threading.local()
        self._lock = threading.Lock()

    @contextmanager
    def on_edge(self, edge: str | None) -> Iterator[None]:
        prev = getattr(self._local, "edge", None)
        self._local.edge = edge
        try:
            yield
        finally:
            self._local.edge = prev

    def record(self, nbytes: int, edge: str | None = None) -> None:
        edge = edge or getattr(self._local, "edge", None) or "<unattributed>"
        with self._lock:
            e = self.edges[edge]
            e.copies += 1
            e.bytes_copied += int(nbytes)


ledger = CopyLedger()


def copy(src: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """The one way flowpipe copies frame or tensor data: the copy is counted on the current edge."""
    if out is None:
        out = np.empty_like(src)
    np.copyto(out, src)
    ledger.record(src.nbytes)
    return out

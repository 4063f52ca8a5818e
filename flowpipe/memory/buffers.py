"""Shared frame memory: one buffer type over several backings, with zero-copy views and OS handles.

Backings, best first (``best_kind()`` picks at run time):

* ``dma-heap``: Linux DMA-BUF system heap (``/dev/dma_heap/system``). The fd can be imported by the
  NPU (``MEM_TYPE: SHARED_BUF``) and by GPU drivers. CPU access is bracketed with DMA_BUF_IOCTL_SYNC.
* ``memfd``: Linux ``memfd_create`` + ``mmap``. The fd crosses processes (SCM_RIGHTS).
* ``win32``: a pagefile-backed file mapping whose NT handle can be duplicated into another process.
* ``host``: anonymous page-aligned memory; no handle, single process only.
* ``ocl-pinned``: page-locked host memory from an OpenCL driver (``CL_MEM_ALLOC_HOST_PTR``, mapped once;
  made by ``flowpipe.accel.opencl.ClDevice.pinned``), asked for by a preprocess node on a discrete GPU so
  frame uploads are DMA transfers; single process.

This module knows no OpenCL or OpenVINO: device memory is made by the device wing (``flowpipe.accel``).

Every buffer is page aligned (4096) so OpenCL (``USE_HOST_PTR``) and NPU drivers can use it in place.
"""
from __future__ import annotations

import ctypes
import mmap
import os
import struct
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

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
                 _ioctl: Callable[..., Any] | None = None, _kernel32: Any = None,
                 _external: tuple[int, Any] | None = None):
        self.kind = kind or best_kind()
        if self.kind not in KINDS:
            raise ValueError(f"unknown shared-memory kind: expected one of {'|'.join(KINDS)}, got {self.kind!r}")
        self.nbytes = nbytes
        self.size = page_round(nbytes)
        self.handle: int | None = None
        self._ioctl = _ioctl
        self._kernel32 = _kernel32
        self._address: int | None = None
        self._keep: Any = None  # what keeps external memory alive (a driver mapping)
        self._mmap: Any = None
        self._pages: Any = None  # a mapping made through libc (memfd): unmapped when its last view goes
        if _external is not None:  # memory another owner made (page-locked driver memory)
            self._address, self._keep = _external
        elif self.kind == "host":
            self._mmap = mmap.mmap(-1, self.size)
        elif self.kind == "memfd":
            fd = _fd if _fd is not None else os.memfd_create("flowpipe-frame", os.MFD_CLOEXEC)
            if _fd is None:
                os.ftruncate(fd, self.size)
            self.handle = fd
            # mapped without a second fd (Python's mmap keeps a duplicate of the one it maps); its pages are
            # made when first written (a pool sized for the deepest queue costs what its frames touch)
            self._pages = _map_shared(fd, self.size)
            self._address = ctypes.addressof(self._pages)
        elif self.kind == "dma-heap":
            fd = _fd if _fd is not None else dma_heap_alloc(self.size, ioctl=_ioctl)
            self.handle = fd
            self._mmap = mmap.mmap(fd, self.size)
        elif self.kind == "win32":
            self.handle, self._address, self._mmap = _win32_map(self.size, _fd, _kernel32)
        else:
            raise ValueError(f"'{self.kind}' memory is made by its device owner (flowpipe.accel), not here")
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
        if self._pages is not None:  # each view holds the mapping: it is unmapped when the last one goes
            return np.frombuffer(memoryview(self._pages), dtype=dtype, count=count, offset=offset).reshape(shape)
        raw = (ctypes.c_uint8 * self.size).from_address(self.address)  # MapViewOfFile or driver memory
        return np.frombuffer(memoryview(raw), dtype=dtype, count=count, offset=offset).reshape(shape)

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
        assert self.handle is not None  # a dma-heap buffer always has its fd
        dma_buf_sync(self.handle, DMA_BUF_SYNC_START | flags, ioctl=self._ioctl)
        try:
            yield
        finally:
            dma_buf_sync(self.handle, DMA_BUF_SYNC_END | flags, ioctl=self._ioctl)

    @property
    def closed(self) -> bool:
        """Whether ``close`` was called: its memory is let go (or goes with its last view)."""
        return self._closed

    def let_pages_go(self) -> bool:
        """The buffer's pages given back to the system, its size and handle kept: the next write makes them
        again, as zeros until written (``madvise(MADV_REMOVE)``: both kinds are shared memory, a ``memfd``'s
        and an anonymous shared mapping's, whose pages it frees in every process that maps them). For a pool's
        buffer that no frame holds and none has taken for a while; False where the memory is not the system's
        to take back (a DMA-BUF, driver or Windows memory)."""
        if self._closed or os.name != "posix" or self.kind not in ("memfd", "host") or self._keep is not None:
            return False
        if self._mmap is not None:
            self._mmap.madvise(mmap.MADV_REMOVE)
            return True
        if _lib().madvise(ctypes.c_void_p(self.address), ctypes.c_size_t(self.size), mmap.MADV_REMOVE) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"madvise of a {self.size}-byte {self.kind} buffer failed: {os.strerror(err)}")
        return True

    def drop_handle(self) -> None:
        """Close the fd a mapped buffer was made from, keeping the mapping (a ``memfd`` buffer another process
        made, whose pages stay mapped here): the mapping holds the memory, and the buffer no fd at all."""
        if self.kind == "memfd" and self.handle is not None:
            os.close(self.handle)
            self.handle = None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._mmap is not None:
                self._mmap.close()
        except BufferError:
            pass  # a numpy view is still alive; the mapping goes when it does
        self._pages = None  # unmapped now, or with the last view that holds it
        if self.kind in ("memfd", "dma-heap") and self.handle is not None:
            os.close(self.handle)
        elif self._keep is not None:
            self._keep = None  # driver memory unmaps when its mapping object goes
        elif self.kind == "win32" and self.handle is not None:
            k32 = self._kernel32 or ctypes.windll.kernel32  # type: ignore[attr-defined]
            if self._address:
                k32.UnmapViewOfFile(ctypes.c_void_p(self._address))
            k32.CloseHandle(ctypes.c_void_p(self.handle))

    def __repr__(self) -> str:
        return f"SharedBuffer(kind={self.kind!r}, size={self.size}, handle={self.handle})"


def packed(arrays: list[tuple[tuple[int, ...], Any]], align: int = 64) -> tuple[int, list[int]]:
    """Several arrays (shape, dtype) in one block: its size and each one's offset, each aligned to ``align``
    bytes. A model's outputs for one frame share one buffer of a pool (one fd, one mapping), not one each.

    >>> packed([((1, 4), np.float32), ((3,), np.uint8), ((2,), np.float32)])
    (192, [0, 64, 128])
    """
    offsets, end = [], 0
    for shape, dtype in arrays:
        offsets.append(end)
        end += -(-int(np.prod(shape)) * np.dtype(dtype).itemsize // align) * align
    return max(end, align), offsets


def leading(arr: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The first ``prod(shape)`` elements of ``arr``'s memory as ``shape``: what a request wrote of an output
    bound to memory of its largest shape (a dynamic output), without a copy."""
    return arr.reshape(-1)[:int(np.prod(shape))].reshape(shape)


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


_libc: Any = None


def _lib() -> Any:
    """The C library, with the signatures of the calls made here."""
    global _libc
    if _libc is None:
        lib = ctypes.CDLL(None, use_errno=True)
        lib.mmap.restype = ctypes.c_void_p
        lib.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                             ctypes.c_long)
        lib.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
        lib.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        _libc = lib
    return _libc


def _map_shared(fd: int, size: int) -> Any:
    """``size`` bytes of ``fd`` mapped shared, read and write, through libc's ``mmap``: the mapping holds no fd
    of its own (the file stays while it is mapped), so a process that maps thousands of buffers another made
    holds no fd for them. Returns a ctypes array over the pages whose end unmaps them: every numpy view holds
    it, so they are unmapped only when the last view goes."""
    address = _lib().mmap(None, size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, fd, 0)
    if address in (None, ctypes.c_void_p(-1).value):
        err = ctypes.get_errno()
        raise OSError(err, f"mmap of {size} bytes failed: {os.strerror(err)}")
    return _Pages.of(address, size)


class _Pages(ctypes.Array):  # type: ignore[type-arg]
    """Bytes mapped by ``_map_shared``; unmapped when the object goes (after the last view that holds it)."""

    _type_ = ctypes.c_uint8
    _length_ = 0

    @staticmethod
    def of(address: int, size: int) -> Any:
        kind: Any = _sized.get(size)
        if kind is None:
            kind = _sized[size] = type("_Pages", (_Pages,), {"_type_": ctypes.c_uint8, "_length_": size})
        return kind.from_address(address)

    def __del__(self) -> None:
        _libc.munmap(ctypes.addressof(self), ctypes.sizeof(self))


_sized: dict[int, Any] = {}


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

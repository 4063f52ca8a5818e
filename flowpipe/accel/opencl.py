"""The OpenCL owner: contexts (own or adopted from OpenVINO), their queues and program caches, the
per-frame driver calls made without the GIL, and event waits.

One ``OpenCl`` per process (``flowpipe.accel.devices()``); nodes reach it through ``ctx.devices.opencl``.
A context's compiled programs belong to the context (``ClDevice.program``), so two contexts never share
or confuse each other's kernels, and a program goes when its context does.
"""
from __future__ import annotations

import ctypes
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

from flowpipe.memory import SharedBuffer, page_round

log = logging.getLogger("flowpipe.opencl")
CL_COMPLETE, CL_QUEUED = 0, 3  # CL_EVENT_COMMAND_EXECUTION_STATUS values
_PROBE = "__kernel void probe(__global float *a) { a[get_global_id(0)] = 1.0f; }"
#: the signals whose handlers the process keeps whatever an OpenCL runtime does (see ``signals_kept``)
_KEPT_SIGNALS = ("SIGINT", "SIGTERM")


@contextmanager
def signals_kept() -> Iterator[None]:
    """The process's own handlers of SIGINT and SIGTERM, as they were before the block, put back after it. PoCL's
    LLVM installs its own the first time it compiles (to delete its temporary files, then raise the signal
    again), and from any thread; with it there, Ctrl-C ended ``flowpipe run`` in a segmentation fault (LLVM's
    handler, raising the signal again, in 11 of 12 interrupts on 2 cores). Read and written as the C library
    holds them (``sigaction``), so it works in any thread."""
    if os.name != "posix":
        yield
        return
    import signal

    libc = ctypes.CDLL(None, use_errno=True)
    saved = []
    for name in _KEPT_SIGNALS:
        buf = ctypes.create_string_buffer(512)  # larger than any libc's struct sigaction
        if libc.sigaction(int(getattr(signal, name)), None, buf) == 0:
            saved.append((int(getattr(signal, name)), buf))
    try:
        yield
    finally:
        for sig, buf in saved:
            libc.sigaction(sig, buf, None)


@dataclass
class ClDevice:
    """One OpenCL context on one device, its default queue and the programs built in it."""

    context: Any
    queue: Any
    device: Any
    unified_memory: bool
    origin: str  # "own" or "openvino:GPU"
    ov_context: Any = None  # OpenVINO's remote context when the context was adopted from it
    _programs: dict[Any, Any] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def name(self) -> str:
        return f"{self.device.platform.name.strip()} / {self.device.name.strip()}"

    def program(self, key: Any, build: Callable[[Any], Any]) -> Any:
        """The program built in this context for ``key`` (``build(context)`` runs once per key)."""
        with self._lock:
            prog = self._programs.get(key)
            if prog is None:
                with signals_kept():
                    prog = self._programs[key] = build(self.context)
            return prog

    def pinned(self, nbytes: int) -> SharedBuffer:
        """Page-locked host memory of this context (``CL_MEM_ALLOC_HOST_PTR``, mapped once) as a frame
        buffer: a discrete GPU uploads from it by DMA."""
        import numpy as np
        import pyopencl as cl

        size = page_round(nbytes)
        clbuf = cl.Buffer(self.context, cl.mem_flags.READ_WRITE | cl.mem_flags.ALLOC_HOST_PTR, size)
        flags = cast("cl.map_flags", cl.map_flags.READ | cl.map_flags.WRITE)  # an int at run time
        mapped, _ = cl.enqueue_map_buffer(self.queue, clbuf, flags, 0, (size,), np.dtype(np.uint8), is_blocking=True)
        return SharedBuffer(nbytes, "ocl-pinned", _external=(int(mapped.ctypes.data), (clbuf, mapped)))

    def buffer(self, nbytes: int) -> Any:
        """Device memory in this context (bound by OpenVINO as an OCL_BUFFER remote tensor when adopted)."""
        import pyopencl as cl

        return cl.Buffer(self.context, cl.mem_flags.READ_WRITE, nbytes)


def _kind(device_type: int) -> str:
    """An OpenCL device type bit field as a word: GPU, ACCELERATOR or CPU."""
    import pyopencl as cl

    for bit, word in ((cl.device_type.GPU, "GPU"), (cl.device_type.ACCELERATOR, "ACCELERATOR"),
                      (cl.device_type.CPU, "CPU")):
        if device_type & bit:
            return word
    return "OTHER"


def _builds(device: Any) -> str | None:
    """None when ``device`` compiles a trivial kernel, else why not (a PoCL whose LLVM cannot name the
    host CPU fails every build with "unknown target CPU 'generic'")."""
    import pyopencl as cl

    try:
        cl.Program(cl.Context([device]), _PROBE).build()
        return None
    except Exception as e:  # noqa: BLE001 - any build failure disqualifies the device
        lines = [ln.strip() for ln in str(e).splitlines() if "error" in ln.lower()]
        return lines[-1] if lines else type(e).__name__


class OpenCl:
    """Owns this process's OpenCL contexts: one per selection, adopted ones per OpenVINO device."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._devices: dict[str, ClDevice] = {}
        self._usable: list[tuple[Any, str | None]] | None = None
        self._calls: ClCalls | None = None

    def platforms(self) -> list[dict[str, Any]]:
        """Every OpenCL device, with whether it can build kernels (and why not)."""
        try:
            probed = self._probe()
        except Exception:  # noqa: BLE001 - no ICD loader or no platform
            return []
        out: dict[str, dict[str, Any]] = {}
        for dev, why in probed:
            p = out.setdefault(dev.platform.name.strip(), {"platform": dev.platform.name.strip(), "devices": []})
            p["devices"].append({"name": dev.name.strip(), "type": _kind(dev.type), "usable": why is None,
                                 **({"why": why} if why else {})})
        return list(out.values())

    def _probe(self) -> list[tuple[Any, str | None]]:
        import pyopencl as cl

        with self._lock:
            if self._usable is None:
                with signals_kept():
                    self._usable = [(d, _builds(d)) for p in cl.get_platforms() for d in p.get_devices()]
                for d, why in self._usable:
                    if why:
                        log.warning("OpenCL device %s / %s cannot build kernels (%s): not used",
                                    d.platform.name.strip(), d.name.strip(), why)
            return self._usable

    def device(self, select: str = "auto") -> ClDevice:
        """A context of its own on the selected device: ``auto`` (a GPU first, then any), ``gpu``, ``cpu``,
        or a substring of the platform/device name. Devices that cannot build kernels are skipped."""
        import pyopencl as cl

        key = f"own:{select}"
        with self._lock:
            if key in self._devices:
                return self._devices[key]
        probed = self._probe()
        devices = [d for d, why in probed if why is None]
        if not devices:
            broken = "; ".join(f"{d.name.strip()}: {why}" for d, why in probed)
            raise RuntimeError(f"no usable OpenCL device ({broken or 'no platform'})")
        sel = select.lower()
        if sel == "auto":
            devices.sort(key=lambda d: 0 if d.type & cl.device_type.GPU else 1)
        elif sel in ("gpu", "cpu"):
            want = cl.device_type.GPU if sel == "gpu" else cl.device_type.CPU
            devices = [d for d in devices if d.type & want]
        else:
            devices = [d for d in devices if sel in f"{d.platform.name} {d.name}".lower()]
        if not devices:
            raise RuntimeError(f"no OpenCL device matches {select!r}; have: "
                               f"{', '.join(d.name.strip() for d, _ in probed)}")
        dev = devices[0]
        ctx = cl.Context([dev])
        q = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
        out = ClDevice(ctx, q, dev, bool(dev.host_unified_memory) or bool(dev.type & cl.device_type.CPU), "own")
        with self._lock:
            out = self._devices.setdefault(key, out)
        log.info("OpenCL device: %s (unified memory: %s)", out.name, out.unified_memory)
        return out

    def adopt(self, ov_context: Any, device: str) -> ClDevice:
        """OpenVINO's own OpenCL context for ``device``: buffers made in it are bound by inference as remote
        tensors (handing OpenVINO a foreign context fails on some runtimes)."""
        import pyopencl as cl

        key = f"ov:{device}"
        with self._lock:
            if key in self._devices:
                return self._devices[key]
        raw = ov_context.get_params()["OCL_CONTEXT"]
        ptr = int(raw.astype(str) if hasattr(raw, "astype") else str(raw), 16)
        ctx = cl.Context.from_int_ptr(ptr, retain=True)
        dev = ctx.devices[0]
        q = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
        out = ClDevice(ctx, q, dev, bool(dev.host_unified_memory), f"openvino:{device}", ov_context)
        with self._lock:
            return self._devices.setdefault(key, out)

    def calls(self) -> ClCalls:
        with self._lock:
            if self._calls is None:
                self._calls = ClCalls()
            return self._calls


def wait_event(event: Any) -> None:
    """Waits for an OpenCL event by polling its status with short sleeps instead of ``clWaitForEvents``.

    Some drivers (NVIDIA's) serve a blocking wait by spinning inside the driver, which stalls the other
    threads submitting work to the same device (OpenVINO's inference); polling keeps them moving. A
    failed command (negative status) raises."""
    status = event.command_execution_status
    if status == CL_QUEUED and isinstance(event, RawEvent):
        event.flush()  # its producer may leave the queue unflushed (it flushes once per batch)
    while status > CL_COMPLETE:
        time.sleep(0.00005)
        status = event.command_execution_status
    if status < 0:
        raise RuntimeError(f"OpenCL command failed with status {status}")


class ClCalls:
    """The per-frame OpenCL submissions (write, kernel launch, flush), called through ctypes so the GIL is
    released while the driver works: a driver busy with OpenVINO's own submissions can take a fraction
    of a millisecond per call, and pyopencl holds the GIL during a kernel launch, stalling every other
    stage for that long. The handles are pyopencl's; the library is the OpenCL loader pyopencl loaded."""

    def __init__(self) -> None:
        lib = ctypes.CDLL(_opencl_library())
        vp, sz, u32 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint32
        self._kernel = lib.clEnqueueNDRangeKernel
        self._kernel.argtypes = [vp, vp, u32, vp, ctypes.POINTER(sz), vp, u32, vp, vp]
        self._write = lib.clEnqueueWriteBuffer
        self._write.argtypes = [vp, vp, u32, sz, sz, vp, u32, vp, vp]
        self._flush = lib.clFlush
        self._flush.argtypes = [vp]
        self._info = lib.clGetEventInfo
        self._info.argtypes = [vp, u32, sz, vp, vp]
        self._profiling = lib.clGetEventProfilingInfo
        self._profiling.argtypes = [vp, u32, sz, vp, vp]
        self._release = lib.clReleaseEvent
        self._release.argtypes = [vp]
        for f in (self._kernel, self._write, self._flush, self._info, self._profiling, self._release):
            f.restype = ctypes.c_int32

    def status(self, handle: int) -> int:
        """CL_EVENT_COMMAND_EXECUTION_STATUS: 0 complete, > 0 pending, < 0 failed."""
        out = ctypes.c_int32()
        code = self._info(handle, 0x11D3, 4, ctypes.byref(out), None)
        if code != 0:
            raise RuntimeError(f"clGetEventInfo failed with OpenCL error {code}")
        return out.value

    def elapsed_ns(self, handle: int) -> int:
        """Device time between a finished command's start and end (the queue profiles)."""
        start, end = ctypes.c_uint64(), ctypes.c_uint64()
        if (self._profiling(handle, 0x1282, 8, ctypes.byref(start), None)
                or self._profiling(handle, 0x1283, 8, ctypes.byref(end), None)):
            return 0
        return end.value - start.value

    def launch(self, queue: Any, kernel: Any, global_size: tuple[int, ...], event: bool = True) -> RawEvent | None:
        """Enqueue ``kernel`` (its arguments already set) over ``global_size``; returns its event (None
        with ``event=False``: no event to create and release)."""
        gs = (ctypes.c_size_t * len(global_size))(*global_size)
        ev = ctypes.c_void_p()
        code = self._kernel(queue.int_ptr, kernel.int_ptr, len(global_size), None, gs, None, 0, None,
                            ctypes.byref(ev) if event else None)
        if code != 0:
            raise RuntimeError(f"clEnqueueNDRangeKernel failed with OpenCL error {code}")
        return RawEvent(ev.value, self, queue) if event and ev.value else None

    def write(self, queue: Any, buffer: Any, host: Any) -> None:
        """Non-blocking upload of ``host`` (a contiguous array the caller keeps alive until a later command
        on the same in-order queue has finished). No event: one driver call fewer per frame."""
        code = self._write(queue.int_ptr, buffer.int_ptr, 0, 0, host.nbytes, host.ctypes.data, 0, None, None)
        if code != 0:
            raise RuntimeError(f"clEnqueueWriteBuffer failed with OpenCL error {code}")

    def release(self, handle: int) -> None:
        """An event's handle is no longer needed (``RawEvent`` lets go of its own)."""
        self._release(handle)

    def flush(self, queue: Any) -> None:
        code = self._flush(queue.int_ptr)
        if code != 0:
            raise RuntimeError(f"clFlush failed with OpenCL error {code}")


class RawEvent:
    """An OpenCL event handle from ``ClCalls``: status and profiling read without holding the GIL."""

    __slots__ = ("_calls", "_queue", "handle")

    def __init__(self, handle: int, calls: ClCalls, queue: Any):
        self.handle, self._calls, self._queue = handle, calls, queue

    def flush(self) -> None:
        self._calls.flush(self._queue)

    @property
    def command_execution_status(self) -> int:
        return self._calls.status(self.handle)

    def elapsed_ns(self) -> int:
        return self._calls.elapsed_ns(self.handle)

    def __del__(self) -> None:
        if self.handle:
            self._calls.release(self.handle)
            self.handle = 0


def _opencl_library() -> str:
    """The OpenCL loader this process already uses (pyopencl's bundled one, or the system's)."""
    import ctypes.util
    import sys

    import pyopencl  # noqa: F401  (loads the library)

    if sys.platform.startswith("linux"):
        with open("/proc/self/maps") as f:
            for line in f:
                if "libOpenCL" in line and "/" in line:
                    return line[line.index("/"):].strip()
    return ctypes.util.find_library("OpenCL") or ("OpenCL.dll" if sys.platform == "win32" else "libOpenCL.so.1")

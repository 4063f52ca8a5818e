"""Device owners: one OpenVINO Core and one OpenCL context per device, per process.

Nodes never create their own ``ov.Core`` or ``cl.Context``: they ask here, so every node of a graph
shares the same plugin instances, remote contexts and compiled kernels.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("flowpipe.devices")
_lock = threading.Lock()
_core: Any = None
_compile_locks: dict[str, threading.Lock] = {}

#: Keys the Core accepts for every device although a plugin may not list them in SUPPORTED_PROPERTIES.
CORE_KEYS = {"CACHE_DIR", "CACHE_MODE", "ENABLE_MMAP", "FORCE_TBB_TERMINATE", "LOG_LEVEL", "PERFORMANCE_HINT",
             "PERFORMANCE_HINT_NUM_REQUESTS", "MODEL_PRIORITY", "INFERENCE_PRECISION_HINT", "EXECUTION_MODE_HINT",
             "ALLOW_AUTO_BATCHING"}
DEVICE_ORDER = ("NPU", "GPU", "CPU")


def ov_core() -> Any:
    """The process-wide ``openvino.Core``."""
    global _core
    with _lock:
        if _core is None:
            import openvino as ov

            _core = ov.Core()
        return _core


def compile_lock(device: str) -> threading.Lock:
    """Compilations on one device are serialized: concurrent NPU compiles are known to crash drivers."""
    with _lock:
        return _compile_locks.setdefault(device.split(".")[0].upper(), threading.Lock())


@dataclass
class DeviceChoice:
    device: str
    reason: str
    tried: list[str]


def choose_device(wanted: str | list[str], available: list[str] | None = None) -> DeviceChoice:
    """Pick the first wanted device that exists. ``AUTO`` means NPU -> GPU -> CPU.

    >>> choose_device("AUTO", ["CPU"]).reason
    'NPU not present, GPU not present; CPU is present (available: CPU)'
    """
    if available is None:
        available = list(ov_core().available_devices)
    order: list[str] = []
    for w in [wanted] if isinstance(wanted, str) else wanted:
        for part in str(w).split(","):
            part = part.strip().upper()
            if part in ("AUTO", ""):
                order.extend(DEVICE_ORDER)
            else:
                order.append(part)
    seen: list[str] = []
    base_available = {a.split(".")[0] for a in available}
    skipped = []
    for dev in order:
        if dev in seen:
            continue
        seen.append(dev)
        if dev in available or dev in base_available:
            why = "; ".join(filter(None, [", ".join(skipped)])) if skipped else ""
            reason = (why + "; " if why else "") + f"{dev} is present (available: {', '.join(available)})"
            return DeviceChoice(dev, reason, seen)
        skipped.append(f"{dev} not present")
    raise RuntimeError(f"no wanted device is available: wanted {' -> '.join(seen)}, available: "
                       f"{', '.join(available) or 'none'}")


def supported_properties(device: str) -> set[str]:
    core = ov_core()
    try:
        return set(core.get_property(device, "SUPPORTED_PROPERTIES")) | CORE_KEYS
    except Exception:  # noqa: BLE001 - an absent device raises
        return set(CORE_KEYS)


def device_info(device: str) -> dict[str, Any]:
    core = ov_core()
    info: dict[str, Any] = {"device": device}
    for key in ("FULL_DEVICE_NAME", "DEVICE_ARCHITECTURE", "NPU_DRIVER_VERSION", "NPU_COMPILER_VERSION",
                "OPTIMIZATION_CAPABILITIES"):
        try:
            info[key] = str(core.get_property(device, key))
        except Exception:  # noqa: BLE001 - not every device has every key
            pass
    return info


# -- OpenCL -----------------------------------------------------------------------------------------
_cl: dict[str, Any] = {}


@dataclass
class ClDevice:
    context: Any
    queue: Any
    device: Any
    unified_memory: bool
    origin: str  # "own" or "openvino:GPU"

    @property
    def name(self) -> str:
        return f"{self.device.platform.name.strip()} / {self.device.name.strip()}"


def opencl_platforms() -> list[tuple[str, list[str]]]:
    try:
        import pyopencl as cl

        return [(p.name, [d.name for d in p.get_devices()]) for p in cl.get_platforms()]
    except Exception:  # noqa: BLE001 - no ICD loader or no platform
        return []


def cl_device(select: str = "auto") -> ClDevice:
    """A shared OpenCL context and profiling queue. ``select``: ``auto`` (GPU first, then any),
    ``gpu``, ``cpu``, or a substring of the platform/device name."""
    import pyopencl as cl

    key = f"own:{select}"
    with _lock:
        if key in _cl:
            return _cl[key]
        devices = [d for p in cl.get_platforms() for d in p.get_devices()]
        if not devices:
            raise RuntimeError("no OpenCL device")
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
                               f"{', '.join(n for _, ds in opencl_platforms() for n in ds)}")
        dev = devices[0]
        ctx = cl.Context([dev])
        q = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
        out = ClDevice(ctx, q, dev, bool(dev.host_unified_memory) or bool(dev.type & cl.device_type.CPU), "own")
        _cl[key] = out
        log.info("OpenCL device: %s (unified memory: %s)", out.name, out.unified_memory)
        return out


def cl_device_from_openvino(device: str = "GPU") -> ClDevice:
    """Adopt OpenVINO's own OpenCL context for ``device`` so preprocessing writes buffers inference can
    bind as remote tensors (handing OpenVINO a foreign context fails on some runtimes)."""
    import pyopencl as cl

    key = f"ov:{device}"
    with _lock:
        if key in _cl:
            return _cl[key]
    ov_ctx = ov_core().get_default_context(device)
    params = ov_ctx.get_params()
    raw = params["OCL_CONTEXT"]
    ptr = int(raw.astype(str) if hasattr(raw, "astype") else str(raw), 16)
    ctx = cl.Context.from_int_ptr(ptr, retain=True)
    dev = ctx.devices[0]
    q = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
    out = ClDevice(ctx, q, dev, bool(dev.host_unified_memory), f"openvino:{device}")
    out.ov_context = ov_ctx  # type: ignore[attr-defined]
    with _lock:
        _cl[key] = out
    return out


CL_COMPLETE, CL_QUEUED = 0, 3  # CL_EVENT_COMMAND_EXECUTION_STATUS values


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
        import ctypes

        import pyopencl as cl

        self._cl = cl
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
        self._ct = ctypes

    def _event(self, code: int, name: str, ev: Any, queue: Any) -> RawEvent:
        if code != 0:
            raise RuntimeError(f"{name} failed with OpenCL error {code}")
        return RawEvent(ev.value, self, queue)

    def status(self, handle: int) -> int:
        """CL_EVENT_COMMAND_EXECUTION_STATUS: 0 complete, > 0 pending, < 0 failed."""
        out = self._ct.c_int32()
        code = self._info(handle, 0x11D3, 4, self._ct.byref(out), None)
        if code != 0:
            raise RuntimeError(f"clGetEventInfo failed with OpenCL error {code}")
        return out.value

    def elapsed_ns(self, handle: int) -> int:
        """Device time between a finished command's start and end (the queue profiles)."""
        start, end = self._ct.c_uint64(), self._ct.c_uint64()
        if (self._profiling(handle, 0x1282, 8, self._ct.byref(start), None)
                or self._profiling(handle, 0x1283, 8, self._ct.byref(end), None)):
            return 0
        return end.value - start.value

    def launch(self, queue: Any, kernel: Any, global_size: tuple[int, ...], event: bool = True) -> RawEvent | None:
        """Enqueue ``kernel`` (its arguments already set) over ``global_size``; returns its event (None
        with ``event=False``: no event to create and release)."""
        ct = self._ct
        gs = (ct.c_size_t * len(global_size))(*global_size)
        ev = ct.c_void_p()
        code = self._kernel(queue.int_ptr, kernel.int_ptr, len(global_size), None, gs, None, 0, None,
                            ct.byref(ev) if event else None)
        if not event:
            if code != 0:
                raise RuntimeError(f"clEnqueueNDRangeKernel failed with OpenCL error {code}")
            return None
        return self._event(code, "clEnqueueNDRangeKernel", ev, queue)

    def write(self, queue: Any, buffer: Any, host: Any) -> None:
        """Non-blocking upload of ``host`` (a contiguous array the caller keeps alive until a later command
        on the same in-order queue has finished). No event: one driver call fewer per frame."""
        code = self._write(queue.int_ptr, buffer.int_ptr, 0, 0, host.nbytes, host.ctypes.data, 0, None, None)
        if code != 0:
            raise RuntimeError(f"clEnqueueWriteBuffer failed with OpenCL error {code}")

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
            self._calls._release(self.handle)
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


_cl_calls: ClCalls | None = None


def cl_calls() -> ClCalls:
    global _cl_calls
    with _lock:
        if _cl_calls is None:
            _cl_calls = ClCalls()
        return _cl_calls

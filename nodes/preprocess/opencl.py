"""The OpenCL backend: one fused kernel (``flowpipe/kernels/preprocess.cl``) reads the frame's shared buffer
and writes the tensor in place. On unified-memory devices (PoCL, Intel iGPU) both are host buffers wrapped
with ``CL_MEM_USE_HOST_PTR`` (no copies); a discrete GPU uploads the frame (page-locked where the source
was asked for it) and, for a host consumer, reads the tensor back. When the downstream inference runs on
OpenVINO's GPU plugin, the kernel runs in OpenVINO's own OpenCL context and writes device buffers the
inference binds as remote tensors."""
from __future__ import annotations

import threading
from collections import deque
from functools import partial
from importlib import resources
from typing import Any

import numpy as np

from flowpipe import memory
from flowpipe.accel.opencl import ClDevice, wait_event
from flowpipe.frame import Frame
from flowpipe.memory import Slot

from .config import PreprocessConfig
from .geometry import Geometry
from .tensor import DTYPES, SRC_FMT, TensorMemory

DST_COLOR = {"BGR": 0, "RGB": 1, "GRAY": 2}
PROFILE_EVERY = 8  # kernel time is read from one frame in this many (each read is a driver call)


class OpenClBackend:
    """Writes tensors with the preprocess kernel on ``cl``: into host memory over ``memory``'s buffers, or
    (``remote``) into the device buffers the consumer binds. Kernel times go to ``kernel_ns`` and, at
    ``close``, to ``stats``."""

    def __init__(self, config: PreprocessConfig, cl: ClDevice, memory: TensorMemory, size: tuple[int, int],
                 remote: bool, calls: Any, stats: dict[str, Any]):
        self.config, self.cl, self.memory, self.size = config, cl, memory, size
        self.remote, self.calls, self.stats = remote, calls, stats
        self.kernel_ns: list[int] = []
        self._tls = threading.local()
        self._cl_bufs: dict[tuple[int, int], Any] = {}
        self._dev_src: dict[tuple[int, int], Any] = {}
        self._timed: deque[list[Any]] = deque()
        self._timed_lock = threading.Lock()
        self._frames = 0

    # program, kernel, queue ----------------------------------------------------------------------------
    def _kernel(self, fmt: str) -> _BoundKernel:
        """This thread's kernel object for ``fmt`` (arguments are per kernel object, so threads never
        share one); the program behind it is built once per context and format."""
        import pyopencl as cl

        mine = getattr(self._tls, "kernels", None)
        if mine is None:
            mine = self._tls.kernels = {}
        if fmt not in mine:
            mine[fmt] = _BoundKernel(cl.Kernel(self._program(fmt), "preprocess"))
        return mine[fmt]

    def _queue(self) -> Any:
        """This thread's in-order queue: workers (one per stream) submit side by side instead of
        contending for one queue; the consumer waits on each tensor's own event, not on queue order."""
        q = getattr(self._tls, "queue", None)
        if q is None:
            import pyopencl as cl

            q = self._tls.queue = cl.CommandQueue(self.cl.context,
                                                  properties=cl.command_queue_properties.PROFILING_ENABLE)
        return q

    def _program(self, fmt: str) -> Any:
        """Built once per OpenCL context, source format and output format (the context owns the cache)."""
        import pyopencl as cl

        c = self.config
        dt = DTYPES[c.dtype]
        opts = [f"-DSRC_FMT={SRC_FMT[fmt]}", f"-DDST_COLOR={DST_COLOR[c.color]}",
                f"-DNCHW={int(c.layout == 'NCHW')}", f"-DDST_T={dt[0]}", f"-DDST_TYPE={dt[2]}"]

        def build(context: Any) -> Any:
            src = resources.files("flowpipe").joinpath("kernels/preprocess.cl").read_text()
            try:
                return cl.Program(context, src).build(options=opts)
            except cl.RuntimeError as e:
                first = str(e).strip().splitlines()
                raise RuntimeError(f"OpenCL kernel build failed for {fmt} on {self.cl.name}: "
                                   f"{' | '.join(first[:3])}") from None

        return self.cl.program(("preprocess.cl", *opts), build)

    # buffers -------------------------------------------------------------------------------------------
    def _src_buffer(self, frame: Frame) -> Any:
        import pyopencl as cl

        data = frame.image
        if not data.flags.c_contiguous and not (data.ndim >= 2 and data.strides[-1] == data.itemsize
                                                and (data.ndim == 2 or data.strides[-2] == data.shape[-1])):
            raise ValueError("frame pixels must have contiguous rows")
        if self.cl.unified_memory:
            buf = frame.buffer
            key = (data.ctypes.data, data.nbytes)
            if buf is not None and key in self._cl_bufs:
                return self._cl_bufs[key]
            clb = cl.Buffer(self.cl.context, cl.mem_flags.READ_ONLY | cl.mem_flags.USE_HOST_PTR, hostbuf=data)
            if buf is not None:
                self._cl_bufs[key] = clb  # pooled memory: the same buffers come back
            return clb
        # a discrete GPU cannot read host memory in place: upload once (counted); from page-locked
        # frames (negotiated with the source) the driver does it as an asynchronous DMA transfer
        if frame.buffer is not None and frame.buffer.kind == "ocl-pinned":
            self.stats["frame_memory"] = "ocl-pinned"
        # one device copy of the frame per worker thread (each with its own queue): a shared one would let
        # one stream's upload land between another's upload and kernel
        key = (threading.get_ident(), data.nbytes)
        dev = self._dev_src.get(key)
        if dev is None:
            dev = self._dev_src[key] = cl.Buffer(self.cl.context, cl.mem_flags.READ_ONLY, data.nbytes)
        if data.flags.c_contiguous:
            self.calls.write(self._queue(), dev, data)
        else:
            cl.enqueue_copy(self._queue(), dev, data, is_blocking=False)
        memory.record(data.nbytes)
        return dev

    def _dst_buffer(self, lease: Any, download: bool) -> Any:
        """Where the kernel writes: the consumer's device buffer (remote), this thread's device buffer
        (``download``), or a host-pointer buffer over the lease's whole memory."""
        import pyopencl as cl

        if self.remote:
            return lease.buffer
        nbytes = self.memory.nbytes
        if download:
            # a discrete GPU writing for a host consumer: into this thread's device buffer, then read into
            # the frame's place (never a host-pointer buffer over a whole batch: worker threads fill its
            # slots at once, and syncing one slot's mapping would carry the others' half-written entries)
            key = (threading.get_ident(), -nbytes)
            dst = self._dev_src.get(key)
            if dst is None:
                dst = self._dev_src[key] = cl.Buffer(self.cl.context, cl.mem_flags.WRITE_ONLY, nbytes)
            return dst
        nbytes *= self.memory.batch
        key = (lease.buffer.address, nbytes)
        dst = self._cl_bufs.get(key)
        if dst is None:
            dst = cl.Buffer(self.cl.context, cl.mem_flags.WRITE_ONLY | cl.mem_flags.USE_HOST_PTR,
                            hostbuf=lease.buffer.array((nbytes,)))
            self._cl_bufs[key] = dst
        return dst

    # per frame -----------------------------------------------------------------------------------------
    def write(self, frame: Frame, geos: list[Geometry], lease: Any, base: int) -> Any:
        """The frame's entries for ``geos`` from entry ``base`` of ``lease``'s buffer on: the host array,
        or (remote) the lease itself, ready once its event has completed."""
        import pyopencl as cl

        c = self.config
        k = self._kernel(frame.format)
        src = self._src_buffer(frame)
        download = not self.remote and not self.cl.unified_memory
        dst = self._dst_buffer(lease, download)
        stride = frame.image.strides[0]
        ow, oh = self.size
        inv = [1.0 / s for s in c.scale]
        self._frames += 1
        sampled = self._frames % PROFILE_EVERY == 1 or PROFILE_EVERY == 1  # kernel time of a sample of frames
        events = []
        for i, geo in enumerate(geos):
            rx, ry, rw, rh = geo.roi
            k.bind((src, stride, frame.width, frame.height, rx, ry, rw, rh, dst, ow, oh, (0 if download else base) + i,
                    geo.pad_x, geo.pad_y, geo.new_w, geo.new_h, c.pad_value, *c.mean, *inv))
            last = i == len(geos) - 1
            ev = self.calls.launch(self._queue(), k.kernel, (_round_up(ow, 16), _round_up(oh, 4)),
                                   event=sampled or last)
            if ev is not None:
                events.append(ev)
        if sampled:
            with self._timed_lock:
                self._timed.append(events)
        if self.remote:
            # the tensor stays on the device: the inference waits for this event just before it starts,
            # so this thread goes on to the next frame while the GPU uploads and converts this one. The
            # queue is flushed once per batch (the waiting side flushes a partial one)
            if not isinstance(lease, Slot) or lease.index == lease.batch.owner.size - 1:
                self.calls.flush(self._queue())
            lease.ready = partial(wait_event, events[-1])
            if sampled:  # earlier samples are done by now; reading them costs a driver call each
                self._read_profiles()
            return lease
        out = self.memory.view(lease, base)
        if download:
            cl.enqueue_copy(self._queue(), out, dst, is_blocking=True)  # waits for the kernels (same queue)
            memory.record(out.nbytes)
        else:
            wait_event(events[-1])
        self._read_profiles()
        return out

    def _read_profiles(self, wait: bool = False) -> None:
        """Kernel times from profiling events, read once their commands have finished."""
        while True:
            with self._timed_lock:  # worker threads (one per stream) share the list
                if not self._timed or (not wait and self._timed[0][-1].command_execution_status > 0):
                    return  # empty, or the oldest still queued or running
                events = self._timed.popleft()
            try:
                wait_event(events[-1])
            except RuntimeError:
                continue  # a failed kernel: the frame's consumer reports it
            self.kernel_ns.append(sum(ev.elapsed_ns() for ev in events))

    def close(self) -> None:
        """The kernel times still to read, their percentiles in the stats; the buffers over frames let go."""
        if self._timed:
            self._read_profiles(wait=True)
        ns = self.kernel_ns
        if ns:
            arr = np.asarray(ns) / 1e6
            self.stats["kernel_ms"] = {"p50": round(float(np.median(arr)), 4),
                                       "p95": round(float(np.percentile(arr, 95)), 4)}
        self._cl_bufs.clear()
        self._dev_src.clear()


class _BoundKernel:
    """A kernel object and the argument values last set on it: a frame of the same stream changes only
    its output buffer and batch index, so only those go to the driver (setting all 23 arguments through
    pyopencl costs ~0.1 ms of GIL-held time per frame)."""

    BUFFERS = (0, 8)  # src, dst
    FLOATS = range(16, 23)  # pad value, mean[3], 1/scale[3]

    def __init__(self, kernel: Any):
        self.kernel = kernel
        self.values: list[Any] = [None] * kernel.num_args

    def bind(self, values: tuple[Any, ...]) -> None:
        held = self.values
        for i, v in enumerate(values):
            if held[i] is v or (held[i] is not None and held[i] == v):
                continue
            self.kernel.set_arg(i, v if i in self.BUFFERS else np.float32(v) if i in self.FLOATS else np.int32(v))
            held[i] = v


def _round_up(n: int, m: int) -> int:
    return (n + m - 1) // m * m

"""The model on its device: compiled (or imported) for it (``model.ModelCompiler``), and an ordered pool of
infer requests its frames run on, with their inputs and results bound to the frames' memory.

Requests complete on OpenVINO's threads (a callback marks them done and wakes the node); results are
taken in submission order, and a request's error is re-raised on the caller's thread (``collect``), kept
for ``poll`` to report after the frames that finished alongside."""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import numpy as np

from flowpipe import models
from flowpipe.accel import openvino as ovx
from flowpipe.accel.openvino import DeviceChoice, OpenVino
from flowpipe.contracts import Allocation, Offer
from flowpipe.errors import FrameError
from flowpipe.frame import Frame
from flowpipe.memory import BufferPool, SharedLease, Slot, leading, packed
from flowpipe.memory import ledger as ledgers

from .batching import Entries
from .config import InferenceConfig
from .model import ModelCompiler

log = logging.getLogger("flowpipe.inference")
# what every engine's --stats section counts from load on (the owner pickles a section while requests update it)
COUNTS: dict[str, Any] = {"inferences": 0, "images": 0, "in_flight": None}


class Engine:
    """One node's compiled model and its requests. ``load`` makes them; ``submit`` starts a request for
    frames (``bind`` puts their input on it), ``collect`` takes the finished ones in order (``label`` marks
    each frame that ran), ``close`` lets them go. ``section`` is the node's ``--stats`` block."""

    def __init__(self, node_id: str, config: InferenceConfig, choice: DeviceChoice, wake: Callable[[], None],
                 label: Callable[[Frame], None], t_open: float):
        self.node_id, self.config, self.choice, self.device = node_id, config, choice, choice.device
        self.wake, self._label, self.t_open = wake, label, t_open
        self.batch = config.batch
        self.entries = Entries()
        self.edge: str | None = None  # the input edge, where copies are counted
        self.compiled: Any = None
        self.requests: list[Any] = []
        self.stateful = False
        self.serial = False  # the model runs one entry at a time (its batch cannot change)
        self.whole: set[int] = set()  # outputs that do not depend on the batch: every frame gets them whole
        self.placement = "any"  # where the input's memory lives (the allocation's placement)
        self.out_pools: list[BufferPool] = []
        self.tensors: ovx.TensorBinder | None = None
        self.section: dict[str, Any] = {}
        self._done: list[threading.Event] = []
        self._idle: deque[int] = deque()
        self._pending: deque[tuple[int, list[Frame]]] = deque()  # (request, frames); -1: frames that ran none
        self._errors: deque[FrameError] = deque()  # failed requests, raised by poll() after finished frames
        self._into: dict[int, list[np.ndarray]] = {}  # a client's own memory for a frame's results
        self._first: float | None = None
        self._t_first_submit: float | None = None
        #: on the CPU, the threads its requests take (None: OpenVINO's choice, every core)
        self.cpu_threads: int | None = None
        # the device's busy time: while at least one of its requests runs (requests end on other threads)
        self._busy_lock = threading.Lock()
        self._running = 0
        self._busy_from = 0.0
        self.busy_s = 0.0
        self._request_s = 0.0  # requests x seconds they ran: the mean in flight while busy
        self._changed = 0.0

    # loading ----------------------------------------------------------------------------------------
    def load(self, ov_owner: OpenVino, offer: Offer, alloc: Allocation, entries: Entries, edge: str | None,
             frames_in_flight: int) -> None:
        c = self.config
        self.entries, self.edge = entries, edge
        properties = c.properties
        if self.device == "CPU" and self.cpu_threads and "INFERENCE_NUM_THREADS" not in properties:
            properties = {**properties, "INFERENCE_NUM_THREADS": self.cpu_threads}
        config = ov_owner.build_config(self.device, hint=c.performance_hint, num_requests=c.num_requests,
                                       priority=c.priority, cache_dir=_cache_dir(c.cache_dir),
                                       npu=c.npu.model_dump(), properties=properties)
        if alloc.placement == "opencl":  # remote OCL_BUFFER inputs
            ovx.no_auto_batching(config)
        self.placement = alloc.placement
        compiler = ModelCompiler(c, self.device, entries, alloc.placement)
        comp = compiler.compile(ov_owner, offer, config)
        self.whole, self.serial = compiler.whole, compiler.serial
        self.compiled = comp.model
        port = self.compiled.inputs[0]  # not kept: a port holds its compiled model (close lets that go)
        pshape = port.get_partial_shape()
        self.input_name: str = port.get_any_name()
        self.in_shape = None if pshape.is_dynamic else tuple(pshape.to_shape())
        self.in_type = port.get_element_type()
        self._make_requests()
        self._make_outputs(frames_in_flight)
        remote_ctx = ov_owner.remote_context(self.device) if self.device in ("GPU", "NPU") else None
        self.tensors = ovx.TensorBinder(self.in_type, self.in_shape, remote_ctx)
        self.section = {"backend": "openvino", "device": self.device, "device_reason": self.choice.reason,
                        "requests": len(self.requests),
                        "compile_ms": round(comp.compile_ms, 2), "cache": comp.cache,
                        "input": {"name": self.input_name, "shape": str(pshape),
                                  "type": str(self.in_type)},
                        "input_memory": alloc.placement,
                        "config": {k: str(v) for k, v in config.items()}, "stateful": self.stateful,
                        "input_binding": None, **COUNTS}
        if entries.up_to:
            self.section["entries"] = entries.describe() if not self.serial else \
                f"up to {entries.count} per frame, each run on its own (the model's batch cannot change)"

    def _make_requests(self) -> None:
        c = self.config
        try:
            optimal = int(self.compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))
        except Exception:  # noqa: BLE001
            optimal = 1
        # Python-side dispatch leaves gaps between a completion and the next start: with THROUGHPUT, a
        # second request per device stream keeps the device fed (measured: benchmarks/inference_throughput.py)
        default = optimal * 2 if c.performance_hint != "LATENCY" else optimal
        n_requests = 1 if c.requests == "inline" else c.num_requests or default
        self.requests = [self.compiled.create_infer_request() for _ in range(n_requests)]
        self.stateful = bool(self.requests[0].query_state())
        if self.stateful and len(self.requests) > 1:
            log.info("node '%s': stateful model: one request so state follows frame order", self.node_id)
            self.requests = self.requests[:1]
        self._pool_of(self.requests)

    def _pool_of(self, requests: list[Any]) -> None:
        """``requests`` as this engine's pool: each tells it when it is done, all idle."""
        self.requests = requests
        self._done = [threading.Event() for _ in requests]
        for i, r in enumerate(requests):
            r.set_callback(self._on_done, i)
        self._idle = deque(range(len(requests)))

    def _make_outputs(self, frames_in_flight: int) -> None:
        """Pools for the results of the frames that can be on their way at once (max shapes)."""
        n = min(frames_in_flight, 64) + len(self.requests)
        outputs = self.compiled.outputs
        shapes = [tuple(o.get_partial_shape().get_max_shape()) for o in outputs]
        if self.serial:  # one block of results per entry
            shapes = [(sh[0] * self.entries.count, *sh[1:]) for sh in shapes]
        self.out_names = [_output_name(o) for o in outputs]
        self.out_specs = [(sh, o.get_element_type().to_dtype()) for sh, o in zip(shapes, outputs)]
        # a frame's results in one buffer, each output at its offset (one fd and one mapping, not one each)
        size, self.out_offsets = packed(self.out_specs)
        self.out_pools = [BufferPool(size, n, trim=False)]  # written by the device: its pages stay
        self._dynamic_dims = [[i for i, d in enumerate(o.get_partial_shape()) if d.is_dynamic] for o in outputs]

    def hold_outputs(self, frames: int) -> None:
        """Room in the output pools for ``frames`` results held here besides those on their way downstream
        (planned: one per request): a wrapper that keeps finished frames until an older one on another
        device is done holds more."""
        for pool in self.out_pools:
            pool.grow(pool.count - len(self.requests) + frames)

    @property
    def free(self) -> int:
        """Requests idle now (a finished one is idle again once its frames are collected)."""
        return len(self._idle)

    def warm(self) -> None:
        """Runs each batch size ``Entries.run`` gives once, so no frame waits for a new shape's first run
        (OpenVINO prepares a dynamic model for each input shape the first time it sees it)."""
        import openvino as ov

        if not self.entries.variable:  # one static shape: nothing to prepare
            return
        shape = tuple(self.compiled.inputs[0].get_partial_shape().get_max_shape())
        sizes = self.entries.sizes()
        for k in sizes:
            self.requests[0].set_input_tensor(ov.Tensor(np.zeros((k, *shape[1:]), self.in_type.to_dtype())))
            self.requests[0].infer()
        self.section["shapes_prepared"] = len(sizes)

    # what a client in another process needs -------------------------------------------------------------
    def output_specs(self) -> list[tuple[str, tuple[int, ...], str]]:
        out = []
        for i, (name, (shape, dtype)) in enumerate(zip(self.out_names, self.out_specs)):
            if self.batch > 1 and i not in self.whole:
                shape = ovx.split_batch(np.empty(shape, np.uint8), 0, self.batch).shape
            out.append((name, tuple(shape), np.dtype(dtype).str))
        return out

    def frames_at_once(self) -> int:
        return len(self.requests) * self.batch

    def provide(self, frame: Frame, arrays: list[np.ndarray]) -> None:
        self._into[id(frame)] = arrays

    # binding ----------------------------------------------------------------------------------------
    def bind_input(self, req: Any, frame: Frame) -> str:
        """One frame's input bound to ``req`` without a copy; says how (``--stats`` ``input_binding``)."""
        t = frame.tensors.get("input")
        if t is None:
            raise ValueError("no input tensor on the frame: expected a preprocess node upstream")
        assert self.tensors is not None, "bound after load"
        cl_buffer = getattr(t, "buffer", None)  # a lease on device memory from the preprocess pool
        if self.serial:  # each entry bound on its own when it runs (_run_entries), from host memory
            if tuple(t.shape[1:]) != tuple(self.in_shape or ())[1:]:
                raise ValueError(f"input tensor entries {list(t.shape[1:])} do not match the model's "
                                 f"{list((self.in_shape or ())[1:])}")
            return "host tensor, shared memory, one entry a run"
        if cl_buffer is not None and hasattr(cl_buffer, "int_ptr"):  # OpenCL buffer in OpenVINO's GPU context
            t.wait_ready()  # the preprocess kernel that writes it may still be running on its own queue
            req.set_tensor(self.input_name, self.tensors.ocl_buffer(cl_buffer))
            return "remote OCL_BUFFER"
        arr = t[:self.entries.run(frame)] if self.entries.variable else t
        if self.in_shape is not None and tuple(arr.shape) != self.in_shape:
            raise ValueError(f"input tensor shape {list(arr.shape)} does not match the model's {list(self.in_shape)}")
        buf = frame.buffer_of(arr)
        if self.device == "NPU" and self.tensors.remote_context is not None and buf is not None \
                and buf.kind == "dma-heap":
            req.set_tensor(self.input_name, self.tensors.shared_buf(buf, "NPU"))
            return "remote SHARED_BUF (DMA-BUF)"
        if buf is not None:
            tensor = self.tensors.host(arr)  # pooled memory: the same views come back, made once
        else:
            import openvino as ov

            tensor = ov.Tensor(arr, shared_memory=True)
        req.set_input_tensor(tensor)
        if self.device == "GPU":  # a GPU plugin uploads host memory to its own before it runs: a copy
            ledgers.record(arr.nbytes)
        return "host tensor, shared memory"

    def bind_outputs(self, req: Any, frames: list[Frame], slots: list[Slot] | None = None) -> None:
        """Where ``req`` writes ``frames``' results: pooled shared buffers (each frame's share of a batch in
        ``frame.tensors``), or with ``batch: 1`` a client's own memory."""
        assert self.tensors is not None, "bound after load"
        into = self._into.pop(id(frames[0]), None) if self.batch == 1 else None
        block = None
        if into is None:  # one block of the pool for every output of these frames
            lease = self.out_pools[0].acquire(timeout=30)
            shared = SharedLease(lease, len(frames))
            for f in frames:
                f.hold(shared)
            block = lease.buffer
        for i in range(len(self.out_names)):
            if block is None:  # the client's own shared buffer: results land in place
                assert into is not None
                mine = self.entries.view(into[i], self._dynamic_dims[i], frames[0])
                req.set_output_tensor(i, self.tensors.host(mine[:1] if self.serial else mine))
                frames[0].tensors[self.out_names[i]] = mine
                continue
            view = self.entries.view(block.array(*self.out_specs[i], offset=self.out_offsets[i]),
                                     self._dynamic_dims[i], frames[0])
            req.set_output_tensor(i, self.tensors.host(view[:1] if self.serial else view))
            for k, f in enumerate(frames):
                at = slots[k].index if slots else k
                whole = self.batch == 1 or i in self.whole
                f.tensors[self.out_names[i]] = view if whole else ovx.split_batch(view, at, self.batch)

    # running ----------------------------------------------------------------------------------------
    def submit(self, frames: list[Frame], bind: Callable[[Any], None]) -> list[Frame]:
        """Starts a request for ``frames`` (``bind`` puts them on it); returns frames that finished while
        every request was busy. A failure to bind or start fails these frames (reported by ``poll``)."""
        ready = []
        while not self._idle:  # all requests busy: the oldest finishes first
            self.wait_head()
            ready += self.collect()
        rid = self._idle.popleft()
        req = self.requests[rid]
        started = False
        try:
            bind(req)
            self._done[rid].clear()
            images = self._images(req)  # read before it starts: a running request's tensors are busy
            now = self._began()
            if self._t_first_submit is None:
                self._t_first_submit = now
            started = True
            req.start_async()
            self._ran(images)
        except Exception as e:  # noqa: BLE001 - whatever binding or starting raised fails these frames
            if started:
                self._ended()
            self._idle.appendleft(rid)
            self.fail_later(FrameError(frames, e))
            return ready
        self._pending.append((rid, frames))
        return ready

    def run_inline(self, frame: Frame, bind: Callable[[Any], None]) -> list[Frame]:
        """``requests: inline``: the frame's request runs to completion here, in the calling thread."""
        if self._t_first_submit is None:
            self._t_first_submit = time.perf_counter()
        try:
            bind(self.requests[0])
            self._began()
            try:
                if self.serial:
                    self._run_entries(self.requests[0], frame)
                else:
                    self.requests[0].infer()
                    self._ran(self._images(self.requests[0]))
            finally:
                self._ended()
        except Exception as e:  # whatever binding or running raised fails this frame
            self._into.pop(id(frame), None)
            raise FrameError(frame, e) from e
        self._written(self.requests[0], [frame])
        return self._finished([frame])

    def _run_entries(self, req: Any, frame: Frame) -> None:
        """A serial model (``ModelCompiler``): each entry ``frame`` filled run on its own, its input and
        results slices of the frame's memory (no copy)."""
        import openvino as ov

        t = frame.tensors["input"]
        outs = [frame.tensors[name] for name in self.out_names]
        for k in range(self.entries.filled(frame)):
            req.set_input_tensor(ov.Tensor(t[k:k + 1], shared_memory=True))
            for i, out in enumerate(outs):
                req.set_output_tensor(i, ov.Tensor(out[k:k + 1], shared_memory=True))
            req.infer()
            self._ran(1)

    def pass_through(self, frame: Frame) -> None:
        """A frame that runs no request goes on in its turn, after the frames submitted before it."""
        self.release(frame)
        self._pending.append((-1, [frame]))

    def release(self, frame: Frame) -> None:
        """A frame that runs no request: the memory a client gave for its results is not written, and is not
        kept (a device owner serves frames for hours: every frame with nothing to look at left its output
        views behind)."""
        self._into.pop(id(frame), None)

    def collect(self) -> list[Frame]:
        """Frames of the finished requests at the head of the queue, in submission order (never raises)."""
        out = []
        while self._pending and (self._pending[0][0] < 0 or self._done[self._pending[0][0]].is_set()):
            slot, frames = self._pending.popleft()
            if slot < 0:  # a frame that ran no request, on in its turn
                out += frames
                continue
            self._idle.append(slot)
            try:
                self.requests[slot].wait()  # re-raises an inference error here, on the engine's thread
                self._written(self.requests[slot], frames)
            except Exception as e:  # noqa: BLE001
                self.fail_later(e if isinstance(e, FrameError) else FrameError(frames, e))
                continue
            out += self._finished(frames)
        return out

    def _written(self, req: Any, frames: list[Frame]) -> None:
        """A frame's results cut to what ``req`` wrote, along an output's dynamic dimensions (RetinaFace's
        faces: [N, 16] for the N it found): the memory bound is the output's largest shape, and what lies past
        the request's own shape there is an earlier frame's (its faces found again, a frame later)."""
        if self.batch != 1:
            return
        for i, name in enumerate(self.out_names):
            if not self._dynamic_dims[i]:
                continue
            shape = tuple(req.get_output_tensor(i).shape)
            arr = frames[0].tensors.get(name)
            if isinstance(arr, np.ndarray) and arr.shape != shape:
                n = int(np.prod(shape))
                if n > arr.size:
                    raise FrameError(frames, RuntimeError(
                        f"output '{name}' of shape {list(shape)} is larger than its memory {list(arr.shape)}"))
                frames[0].tensors[name] = leading(arr, shape)

    def drain(self) -> list[Frame]:
        """Every frame in flight, once its request is done."""
        out = []
        while self._pending:
            self.wait_head()
            out += self.collect()
        return out

    def wait_head(self) -> None:
        """Until the oldest pending request is done (a frame that ran none is done already)."""
        if self._pending and self._pending[0][0] >= 0:
            self._done[self._pending[0][0]].wait()

    def fail_later(self, err: FrameError) -> None:
        """A request failed for its frames (all of a batch): frames that finished alongside still go on;
        the runtime gets the error from the next ``poll()`` and applies ``on_error`` to each frame."""
        for f in err.frames:
            self._into.pop(id(f), None)
        self._errors.append(err)
        self.wake()

    def next_error(self) -> FrameError | None:
        return self._errors.popleft() if self._errors else None

    @property
    def failed(self) -> bool:
        return bool(self._errors)

    def _on_done(self, slot: int) -> None:
        self._ended()
        self._done[slot].set()
        self.wake()

    def _images(self, req: Any) -> int:
        """The entries ``req`` runs: its input's first dimension (a batch's frames, a frame's crops or tiles; a
        static batch whole, the entries past a partial one's included: the device runs them); one for an input
        of fewer than four dimensions (no batch in it)."""
        shape = self.in_shape
        if shape is None:  # a bounded-dynamic batch: the shape this request was given
            try:
                shape = tuple(req.get_input_tensor(0).get_shape())
            except Exception:  # noqa: BLE001 - nothing to read: one
                return 1
        return int(shape[0]) if len(shape) >= 4 else 1

    def _ran(self, images: int) -> None:
        """A request started: ``--stats`` ``inferences`` (requests run) and ``images`` (the entries in them),
        what a device's ceiling for a graph is reckoned by (benchmarks/device_ceilings.py)."""
        self.section["inferences"] += 1  # (both from load on)
        self.section["images"] += images

    def _began(self) -> float:
        """A request starts: the device is busy from now, if it was idle. Returns now (read under the lock that
        orders it with the requests that end on other threads)."""
        with self._busy_lock:
            now = time.perf_counter()
            if self._running == 0:
                self._busy_from = now
            self._request_s += self._running * (now - self._changed)
            self._changed = now
            self._running += 1
        return now

    def _ended(self) -> None:
        """A request ended: the time the device was busy, and its share of the time since the first request
        (``--stats`` ``busy_s``, ``busy_share``: how near its ceiling the device ran, as a GPU's utilization
        says the share of time some kernel ran)."""
        with self._busy_lock:  # the figures written under it too: two requests may end at once
            now = time.perf_counter()
            self._request_s += self._running * (now - self._changed)
            self._changed = now
            self._running -= 1
            if self._running == 0:
                self.busy_s += now - self._busy_from
            busy = self.busy_s + (now - self._busy_from if self._running else 0.0)
            since = now - (self._t_first_submit or now)
            self.section["busy_s"] = round(busy, 3)
            self.section["busy_share"] = round(min(1.0, busy / since), 3) if since > 0 else None
            # how many of its requests ran at once while it was busy: a device fed one request at a time runs
            # below its throughput though it is never idle (a GPU's streams want several)
            self.section["in_flight"] = round(self._request_s / busy, 2) if busy > 0 else None

    def _finished(self, frames: list[Frame]) -> list[Frame]:
        """``frames`` with their results: a client's share copied where it wants it, each frame labelled."""
        if frames and self._first is None:
            # FEIL: compile + load + first inference; FIL: load a precompiled model (cache hit or
            # blob) + first inference (the NPU plugin README's definitions)
            now = time.perf_counter()
            self._first = first = (now - self.t_open) * 1e3
            key = "fil_ms" if self.section["cache"] in ("hit", "blob") else "feil_ms"
            submitted = self._t_first_submit if self._t_first_submit is not None else now
            self.section.update({key: round(first, 2), "first_request_ms": round((now - submitted) * 1e3, 2)})
        for frame in frames:
            into = self._into.pop(id(frame), None)
            if into is not None:  # a batch's share, copied to where the client wants it
                with ledgers.on_edge(self.edge):
                    for name, arr in zip(self.out_names, into):
                        ledgers.copy(frame.tensors[name], out=arr)
                        frame.tensors[name] = arr
            self._label(frame)
        return frames

    def close(self) -> None:
        for slot, _frames in list(self._pending):
            if slot >= 0:
                self._done[slot].wait(timeout=10)
        # frames whose client-given output memory is still held (0: none outlived its frame)
        self.section["outputs_held_at_close"] = len(self._into)
        # the requests hold our callback inside OpenVINO (a cycle the garbage collector cannot see):
        # drop them, and everything bound to our buffers, before the pools go
        for r in self.requests:
            r.set_callback(_noop, None)
        self.requests, self.compiled = [], None
        if self.tensors is not None:
            self.tensors.clear()
        for p in self.out_pools:
            p.close()
        self.out_pools = []


def _noop(_userdata: Any) -> None:
    pass


def _cache_dir(p: str | Literal[False] | None) -> str | None:
    """Where compiled models are kept: the node's ``cache_dir``, this host's where it names none, none where
    it says ``false``."""
    if p is False:
        return None
    return str(Path(p).expanduser()) if p else models.compiled_cache()


def _output_name(output: Any) -> str:
    """The name a result goes under in ``frame.tensors``: of an output's names, the longest without a scope
    ('/'): a frozen graph's own alias (``detection_boxes:0``) rather than the op that made it (``add:0``);
    the only one, for most models."""
    return min(output.get_names() or {output.get_any_name()}, key=lambda n: ("/" in n, -len(n), n))

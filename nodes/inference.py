"""OpenVINO inference: owns the compiled model, the device's remote context and a pool of infer requests.

Frames are submitted asynchronously and come out in submission order (so in frame order per stream).
Inputs are bound without copies: host tensors over the preprocess node's shared buffers on CPU (and on
NPU where no DMA-BUF is available), OpenCL buffers wrapped as remote tensors on the GPU, DMA-BUF fds
imported as ``MEM_TYPE: SHARED_BUF`` remote tensors on the NPU. Outputs land in pooled shared buffers
bound per request, so results are never copied out of a request. With ``batch: N`` the node hands the
upstream preprocess slots of its batch buffers (``memory.BatchSlots``; on the GPU OpenCL buffers bound as
one remote tensor) and each frame is written straight into its place in the batch. A producer that fills
a varying number of entries per frame (one per object found: ``TensorSpec.up_to``) gets a model whose batch
is bounded-dynamic on CPU and GPU (each request runs the entries the frame has) and static at the bound on
the NPU (the rest of the entries run and are ignored); a frame without any entries runs no request.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from flowpipe import models
from flowpipe.accel import Devices
from flowpipe.accel import openvino as ovx
from flowpipe.accel.openvino import DeviceChoice
from flowpipe.contracts import Allocation, Offer, Request
from flowpipe.errors import FrameError
from flowpipe.frame import Frame
from flowpipe.memory import BatchSlots, BufferPool, SharedLease, Slot
from flowpipe.memory import ledger as ledgers
from flowpipe.node import PIXELS_ALL, Node, NodeConfig, NodeContract, RunContext
from flowpipe.registry import register

log = logging.getLogger("flowpipe.inference")


class NpuOptions(BaseModel):
    """NPU plugin properties (see the NPU plugin README); ignored unless the chosen device is NPU."""

    model_config = ConfigDict(extra="forbid")
    turbo: bool | None = None
    tiles: int | None = Field(None, ge=1)
    compilation_mode_params: str | None = None
    defer_weights_load: bool | None = None
    bypass_umd_caching: bool | None = None
    qdq_optimization: bool | None = None


@register("inference")
class Inference(Node):
    """Runs an OpenVINO model on NPU, GPU or CPU; outputs land in ``frame.tensors`` by output name.

    YAML:
        - id: detect
          type: inference
          config: {model: blazeface_full, device: "NPU,GPU,CPU", performance_hint: THROUGHPUT,
                   cache_dir: ~/.cache/flowpipe/ov}
          inputs: {tensor: pre.tensor}
    """

    inputs = {"tensor": "tensor"}
    outputs = {"tensors": "tensors"}

    class Config(NodeConfig):
        model: str = Field(description="registry name (flowpipe models list), .xml/.onnx/.tflite path, or an "
                                       "http(s) URL (with model_sha256)")
        model_sha256: str | None = Field(None, description="required for a URL: the model file's sha256")
        device: str | list[str] = Field("AUTO", description="NPU|GPU|CPU|AUTO or a fallback list, e.g. 'NPU,GPU,CPU'")
        performance_hint: Literal["LATENCY", "THROUGHPUT", "CUMULATIVE_THROUGHPUT"] = "THROUGHPUT"
        num_requests: int | None = Field(None, ge=1, le=64, description="default: OPTIMAL_NUMBER_OF_INFER_REQUESTS")
        priority: Literal["LOW", "MEDIUM", "HIGH"] | None = None
        cache_dir: str | None = Field(None, description="OpenVINO model cache (FIL < FEIL on a hit)")
        blob: str | None = Field(None, description="precompiled blob from 'flowpipe compile' (import, no compile)")
        properties: dict[str, Any] = Field(default_factory=dict, description="extra OpenVINO properties")
        npu: NpuOptions = Field(default_factory=NpuOptions)
        batch: int = Field(1, ge=1, le=64, description="frames per inference request (streams batched together)")
        batch_timeout_ms: float = Field(10.0, gt=0, description="send a partial batch after this wait")
        requests: Literal["async", "inline"] = Field(
            "async", description="async: a pool of requests in flight, completions polled on a thread of this "
            "node's own; inline: each frame's request runs to completion in the thread of the stage before (no "
            "thread hop, one request): for a small second model whose frames mostly have nothing to run")
        reset_state: Literal["per_stream", "never"] = Field(
            "per_stream", description="stateful models: one state per stream (saved/restored), reset at frame 0")

    config: Config
    choice: DeviceChoice | None = None  # made in request(), before open

    @classmethod
    def contract(cls, config: NodeConfig) -> NodeContract:
        assert isinstance(config, cls.Config)
        # never reads the pixels; async requests are held past process() (inline ones run to completion in it);
        # one compiled model serves every stream (over processes, in the device owner)
        return cls.declare(pixels=PIXELS_ALL, holds_frames=config.requests == "async", serves_streams=True,
                           files={"cache_dir": "model_cache"},
                           isolation="it holds frames past process() (asynchronous requests)")

    def resources(self) -> list[str]:
        return [f"loads model {self.config.blob or self.config.model}"]

    # memory contract ----------------------------------------------------------------------------------
    def request(self, port: str, offer: Offer, outputs: Mapping[str, Allocation], devices: Devices) -> Request:
        """Chooses the device, then asks for the input memory it binds without copies: OpenCL buffers in
        the GPU's own context (remote tensors), DMA-BUF on the NPU, host memory on the CPU; and batch
        slots of ``batch`` when the producer declares the tensor it writes."""
        self.choice = devices.openvino.choose(self.config.device)
        dev = self.choice.device
        batch = self.config.batch if offer.tensor is not None else 1
        if dev == "GPU" and "opencl" in offer.writes:
            return Request("opencl", device="GPU", batch=batch, by=self.id)
        return Request("dma-buf" if dev == "NPU" else "host", batch=batch, by=self.id)

    # served from the device owner (a run over several processes) ------------------------------------------
    def owned_input(self, devices: Devices) -> str:
        """Where clients in other processes put this node's input: DMA-BUF for the NPU (imported by fd),
        host shared memory otherwise (the GPU plugin uploads it; OpenCL buffers do not cross processes)."""
        self.choice = devices.openvino.choose(self.config.device)
        return "dma-buf" if self.choice.device == "NPU" else "host"

    def output_specs(self) -> list[tuple[str, tuple[int, ...], str]]:
        """One frame's outputs (name, shape, dtype), for a client that provides the memory they land in."""
        out = []
        for name, (shape, dtype) in zip(self.out_names, self.out_specs):
            if self.batch > 1:
                shape = ovx.split_batch(np.empty(shape, np.uint8), 0, self.batch).shape
            out.append((name, tuple(shape), np.dtype(dtype).str))
        return out

    def frames_at_once(self) -> int:
        """Frames this node works on at once when every request is busy: what its clients keep it fed with."""
        return len(self.requests) * self.batch

    def frame_meta(self) -> dict[str, Any]:
        """What this node adds to each frame's metadata."""
        meta: dict[str, Any] = {"inference": {"node": self.id, "device": self.device}}
        if self.labels:
            meta["labels"] = self.labels
        return meta

    def provide_outputs(self, frame: Frame, arrays: list[np.ndarray]) -> None:
        """Where ``frame``'s results go (one array per model output, in order): a client in another process
        passes its own shared buffers. With ``batch: 1`` the request writes into them (no copy); in a batch
        each frame's share is copied out once (counted)."""
        self._into[id(frame)] = arrays

    # open -------------------------------------------------------------------------------------------
    def open(self, ctx: RunContext) -> None:
        t_open = time.perf_counter()
        c = self.config
        ov_owner = ctx.devices.openvino
        self.wake = ctx.wake
        contract = ctx.input("tensor")
        offer = contract.offer if contract is not None else Offer()
        alloc = contract.allocation if contract is not None else Allocation()
        self._edge = contract.edge if contract is not None else None
        choice = self.choice
        if choice is None:
            raise RuntimeError(f"inference '{self.id}' opened before its memory contract was resolved "
                               "(run it in a graph, or open it with flowpipe.testing.Harness)")
        self.device = choice.device
        log.info("node '%s': device %s (%s)", self.id, self.device, choice.reason)
        config = ov_owner.build_config(self.device, hint=c.performance_hint, num_requests=c.num_requests,
                                       priority=c.priority, cache_dir=_expand(c.cache_dir),
                                       npu=c.npu.model_dump(), properties=c.properties)
        if alloc.placement == "opencl":  # remote OCL_BUFFER inputs
            ovx.no_auto_batching(config)
        self.labels = models.entry(c.model).get("labels") if models.is_registry_name(c.model) else None
        self.entries = offer.tensor.shape[0] if offer.tensor is not None else 1
        self.up_to = offer.tensor is not None and offer.tensor.up_to
        if c.requests == "inline" and c.batch > 1:
            raise ValueError(f"batch: an inline request runs one frame at a time; expected batch: 1, got {c.batch}")
        if self.up_to and c.batch > 1:
            raise ValueError(f"batch: '{offer.producer}' fills a varying number of entries per frame (objects); "
                             f"expected batch: 1, got {c.batch}")
        self._variable = self.up_to and self.device != "NPU" and alloc.placement != "opencl"
        if c.blob:
            comp = ov_owner.import_blob(Path(c.blob).expanduser(), self.device, config)
        else:
            path = models.resolve(c.model, sha256=c.model_sha256)
            model = ov_owner.read_model(path)
            batch_before = ovx.static_batch(model)
            model = self._fit_model(model, offer)
            batched = batch_before == 1 and ovx.static_batch(model) not in (None, 1)
            if self._variable:  # each request runs the entries its frame has, up to the producer's bound
                if batched:  # each entry's results a block of their own: checked at the bound (static)
                    static = ov_owner.compile(model, self.device, config)
                    ovx.check_batch_layout(ov_owner, static.model, str(path), self.device, config)
                model = ovx.bounded_batch(model)
            comp = ov_owner.compile(model, self.device, config)
            if batched and not self._variable:
                ovx.check_batch_layout(ov_owner, comp.model, str(path), self.device, config)
        self.compiled = comp.model
        self.input = self.compiled.inputs[0]
        pshape = self.input.get_partial_shape()
        self.in_shape = None if pshape.is_dynamic else tuple(pshape.to_shape())
        self.in_type = self.input.get_element_type()
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
            log.info("node '%s': stateful model: one request so state follows frame order", self.id)
            self.requests = self.requests[:1]
        self._done = [threading.Event() for _ in self.requests]
        for i, r in enumerate(self.requests):
            r.set_callback(self._on_done, i)
        self._idle = deque(range(len(self.requests)))
        self._pending: deque[tuple[int, list[Frame]]] = deque()
        self._errors: deque[FrameError] = deque()  # failed requests, raised by poll() after finished frames
        self.batch = c.batch
        self.slots: BatchSlots | None = None
        self._groups: dict[int, tuple[Any, list[Frame], list[Slot], float]] = {}
        self._gather: list[Frame] = []
        self._deadline = 0.0
        self._timer_due = 0.0  # when the last wake armed for a partial batch comes
        self.batch_pool: BufferPool | None = None  # made on first use: slots usually make it unneeded
        if self.batch > 1:
            if self.stateful:
                raise ValueError("batch > 1 with a stateful model: state follows one stream; expected batch: 1")
            if self.in_shape is None:
                raise ValueError("batch > 1 needs a preprocess node upstream (its size sets the static shape)")
            self._batch_nbytes = int(np.prod(self.in_shape)) * self.in_type.size
            self.slots = alloc.slots
            if self.slots is not None:  # requests in flight hold batch buffers too
                self.slots.pool.grow(self.slots.pool.count + len(self.requests))
        self._into: dict[int, list[np.ndarray]] = {}
        self._last_stream: str | None = None
        self._states: dict[str, list[Any]] = {}
        self.max_held = len(self.requests) if c.requests == "async" else 0
        n = min(ctx.frames_in_flight(), 64) + len(self.requests)
        shapes = [tuple(o.get_partial_shape().get_max_shape()) for o in self.compiled.outputs]
        self.out_pools = [BufferPool(int(np.prod(sh)) * o.get_element_type().size, n)
                          for sh, o in zip(shapes, self.compiled.outputs)]
        self.out_names = [o.get_any_name() for o in self.compiled.outputs]
        self.out_specs = [(sh, o.get_element_type().to_dtype()) for sh, o in zip(shapes, self.compiled.outputs)]
        self._dynamic_dims = [[i for i, d in enumerate(o.get_partial_shape()) if d.is_dynamic]
                              for o in self.compiled.outputs]
        self.passed = 0  # frames without entries (up_to): no request
        remote_ctx = ov_owner.remote_context(self.device) if self.device in ("GPU", "NPU") else None
        self.tensors = ovx.TensorBinder(self.in_type, self.in_shape, remote_ctx)
        self.t_open = t_open
        self._first: float | None = None
        self._t_first_submit: float | None = None
        self.section = {"device": self.device, "device_reason": choice.reason, "requests": len(self.requests),
                        "compile_ms": round(comp.compile_ms, 2), "cache": comp.cache,
                        "input": {"name": self.input.get_any_name(), "shape": str(pshape),
                                  "type": str(self.in_type)},
                        "input_memory": alloc.placement,
                        "config": {k: str(v) for k, v in config.items()}, "stateful": self.stateful,
                        "input_binding": None}
        if self.up_to:
            self.section["entries"] = f"up to {self.entries} per frame, " + (
                "each request runs the frame's" if self._variable else "all run (static shape), the frame's used")
        ctx.section(f"inference.{self.id}", self.section)
        if self._variable:
            self._warm()

    def _fit_model(self, model: Any, offer: Offer) -> Any:
        """Static shapes from the tensor the producer declares (times the batch), or the producer's
        preprocessing folded into the model (PrePostProcessor)."""
        if offer.model_preprocessing is not None:
            return ovx.with_ppp(model, **offer.model_preprocessing)
        want = offer.tensor.shape if offer.tensor is not None else None
        if want is not None and self.config.batch > 1:  # several frames (each one or more entries) per request
            want = (want[0] * self.config.batch, *want[1:])
        c = self.config
        any_size = models.is_registry_name(c.model) and bool(models.entry(c.model)["input"].get("any_size"))
        return ovx.fit_input(model, want, self.device, offer.producer or None, any_size)

    # per frame --------------------------------------------------------------------------------------
    def _on_done(self, slot: int) -> None:
        self._done[slot].set()
        self.wake()

    def _bind_input(self, req: Any, frame: Frame) -> None:
        t = frame.tensors.get("input")
        if t is None:
            raise ValueError("no input tensor on the frame: expected a preprocess node upstream")
        cl_buffer = getattr(t, "buffer", None)  # a lease on device memory from the preprocess pool
        if cl_buffer is not None and hasattr(cl_buffer, "int_ptr"):  # OpenCL buffer in OpenVINO's GPU context
            t.wait_ready()  # the preprocess kernel that writes it may still be running on its own queue
            req.set_tensor(self.input.get_any_name(), self.tensors.ocl_buffer(cl_buffer))
            self.section["input_binding"] = "remote OCL_BUFFER"
            return
        arr = t[:self._run_entries(frame)] if self._variable else t
        if self.in_shape is not None and tuple(arr.shape) != self.in_shape:
            raise ValueError(f"input tensor shape {list(arr.shape)} does not match the model's {list(self.in_shape)}")
        buf = frame.buffer_of(arr)
        if self.device == "NPU" and self.tensors.remote_context is not None and buf is not None \
                and buf.kind == "dma-heap":
            req.set_tensor(self.input.get_any_name(), self.tensors.shared_buf(buf, "NPU"))
            self.section["input_binding"] = "remote SHARED_BUF (DMA-BUF)"
            return
        if buf is not None:
            tensor = self.tensors.host(arr)  # pooled memory: the same views come back, made once
        else:
            import openvino as ov

            tensor = ov.Tensor(arr, shared_memory=True)
        req.set_input_tensor(tensor)
        self.section["input_binding"] = "host tensor, shared memory"

    def _switch_state(self, req: Any, frame: Frame) -> None:
        """Stateful models keep one state per stream: saved when another stream's frame comes, restored
        when the stream returns, reset at its first frame or on demand (``frame.meta['reset_state']``)."""
        import openvino as ov

        if frame.stream != self._last_stream:
            if self._last_stream is not None and self.config.reset_state == "per_stream":
                self._states[self._last_stream] = [st.state.data.copy() for st in req.query_state()]
            saved = self._states.pop(frame.stream, None)
            if saved is not None and frame.index != 0:
                for st, value in zip(req.query_state(), saved):
                    st.state = ov.Tensor(value)
            elif self._last_stream is not None or frame.index == 0:
                req.reset_state()
        elif frame.index == 0 or frame.meta.get("reset_state"):
            req.reset_state()
        self._last_stream = frame.stream

    def _filled(self, frame: Frame) -> int:
        """How many entries of an ``up_to`` tensor ``frame`` filled."""
        return int(frame.meta.get("preprocess", {}).get("entries", self.entries))

    def _run_entries(self, frame: Frame) -> int:
        """How many entries ``frame``'s request runs: with a bounded-dynamic batch the entries it filled
        rounded up to a power of two (or the bound), so a handful of input shapes ever runs, each prepared at
        open; the ones past those it filled run on stale data and are not read."""
        k = self._filled(frame)
        return min(self.entries, 1 << max(0, k - 1).bit_length()) if k else 0

    def _warm(self) -> None:
        """Runs each batch size ``_run_entries`` gives once, so no frame waits for a new shape's first run
        (OpenVINO prepares a dynamic model for each input shape the first time it sees it)."""
        import openvino as ov

        shape = tuple(self.compiled.inputs[0].get_partial_shape().get_max_shape())
        req, n = self.requests[0], 1
        while True:
            k = min(n, self.entries)
            req.set_input_tensor(ov.Tensor(np.zeros((k, *shape[1:]), self.in_type.to_dtype())))
            req.infer()
            if k == self.entries:
                break
            n *= 2
        self.section["shapes_prepared"] = n.bit_length()

    def _output_view(self, arr: np.ndarray, i: int, frame: Frame) -> np.ndarray:
        """Output ``i`` for ``frame``: the whole of ``arr`` (its max shape), or with a bounded-dynamic batch
        the part for the entries the frame filled (its dynamic dimensions scale with them), from the start
        of the memory."""
        if not self._variable or not self._dynamic_dims[i]:
            return arr
        k = self._run_entries(frame)
        shape = tuple(d * k // self.entries if j in self._dynamic_dims[i] else d for j, d in enumerate(arr.shape))
        return arr.reshape(-1)[:int(np.prod(shape))].reshape(shape)

    def process(self, frame: Frame, port: str) -> list[Frame]:
        if self.config.requests == "inline":
            return self._inline(frame)
        if self.up_to and self._filled(frame) == 0:  # nothing to look at: on in its turn, no request
            self._count_passed()
            self._pending.append((-1, [frame]))
            return self._ready()
        if self.batch > 1:
            slot = self._slot_of(frame)
            if slot is not None:  # written in place into a batch buffer: send it when all its frames are here
                b = slot.batch
                if id(b) not in self._groups:  # its first frame here starts the batch's clock
                    self._groups[id(b)] = (b, [], [], self._start_clock())
                _, group, group_slots, _ = self._groups[id(b)]
                group.append(frame)
                group_slots.append(slot)
                if not b.complete(len(group)):
                    return self._ready()
                del self._groups[id(b)]
                return self._submit(group, group_slots) + self._ready()
            if not self._gather:  # the first frame of a batch starts the clock
                self._deadline = self._start_clock()
            self._gather.append(frame)
            if len(self._gather) < self.batch:
                return self._ready()
            frames, self._gather = self._gather, []
            return self._submit(frames) + self._ready()
        return self._submit([frame]) + self._ready()

    def _slot_of(self, frame: Frame) -> Slot | None:
        if self.slots is None or frame.ref is None:
            return None
        return next((s for s in frame.ref.leases if isinstance(s, Slot) and s.batch.owner is self.slots), None)

    def _start_clock(self) -> float:
        deadline = time.monotonic() + self.config.batch_timeout_ms / 1e3
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

    def _send_partial(self, now: float | None = None) -> list[Frame]:
        """Batches whose time is up (all, at the end) go as they are: a slot buffer is sealed first, so
        frames still on their way to it follow in a batch of their own."""
        out: list[Frame] = []
        for key, (b, frames, slots, deadline) in list(self._groups.items()):
            if now is None or now >= deadline:
                del self._groups[key]
                assert self.slots is not None, "slot groups exist only with batch slots"
                self.slots.seal(b)
                out += self._submit(frames, slots)
        if self._gather and (now is None or now >= self._deadline):
            frames, self._gather = self._gather, []
            out += self._submit(frames)
        return out

    @property
    def _batch_shape(self) -> tuple[int, ...]:
        """The model's static input shape (batching needs one; open() checks it)."""
        assert self.in_shape is not None, "batching runs with a static input shape"
        return self.in_shape

    def _fits(self, frame: Frame) -> bool:
        src = frame.tensors.get("input")
        return src is not None and tuple(getattr(src, "shape", ())) == (self.entries, *self._batch_shape[1:])

    def _submit(self, frames: list[Frame], slots: list[Slot] | None = None) -> list[Frame]:
        """Start a request for ``frames``: one frame, frames written into ``slots`` of one batch buffer,
        or a batch assembled by copying."""
        if self.batch > 1 and not slots:
            bad = next((f for f in frames if not self._fits(f)), None)
            if bad is not None:  # fail that frame alone; the others go out with the next batch
                self._gather = [f for f in frames if f is not bad] + self._gather
                self._deadline = 0.0
                self.wake()
                got = list(getattr(bad.tensors.get("input"), "shape", []))
                raise FrameError(bad, ValueError(f"input tensor {got} does not fit a batch slot of "
                                                 f"{[self.entries, *self._batch_shape[1:]]}"))
        ready = []
        while not self._idle:  # all requests busy: the oldest finishes first
            self._wait_head()
            ready += self._collect()
        rid = self._idle.popleft()
        req = self.requests[rid]
        try:
            self._bind(req, frames, slots)
            self._done[rid].clear()
            if self._t_first_submit is None:
                self._t_first_submit = time.perf_counter()
            req.start_async()
        except Exception as e:  # noqa: BLE001 - whatever binding or starting raised fails these frames
            self._idle.appendleft(rid)
            self._fail_later(FrameError(frames, e))
            return ready
        self._pending.append((rid, frames))
        return ready

    def _bind(self, req: Any, frames: list[Frame], slots: list[Slot] | None = None) -> None:
        """``frames``' input and the outputs they get (pooled, or a client's own memory) bound to ``req``."""
        if self.stateful:
            self._switch_state(req, frames[0])
        if slots:
            self._bind_slots(req, slots)
        elif self.batch > 1:
            self._bind_batch(req, frames)
        else:
            self._bind_input(req, frames[0])
        into = self._into.pop(id(frames[0]), None) if self.batch == 1 else None
        for i, pool in enumerate(self.out_pools):
            if into is not None:  # the client's own shared buffer: results land in place
                mine = self._output_view(into[i], i, frames[0])
                req.set_output_tensor(i, self.tensors.host(mine))
                frames[0].tensors[self.out_names[i]] = mine
                continue
            lease = pool.acquire(timeout=30)
            shared = SharedLease(lease, len(frames))
            for f in frames:
                f.hold(shared)
            view = self._output_view(lease.buffer.array(*self.out_specs[i]), i, frames[0])
            req.set_output_tensor(i, self.tensors.host(view))
            for k, f in enumerate(frames):
                at = slots[k].index if slots else k
                f.tensors[self.out_names[i]] = view if self.batch == 1 else ovx.split_batch(view, at, self.batch)

    def _inline(self, frame: Frame) -> list[Frame]:
        """``requests: inline``: the frame's request runs to completion here, in the calling thread."""
        if self.up_to and self._filled(frame) == 0:
            self._count_passed()
            return [frame]
        if self._t_first_submit is None:
            self._t_first_submit = time.perf_counter()
        try:
            self._bind(self.requests[0], [frame])
            self.requests[0].infer()
        except Exception as e:  # whatever binding or running raised fails this frame
            self._into.pop(id(frame), None)
            raise FrameError(frame, e) from e
        return self._finished([frame])

    def _count_passed(self) -> None:
        self.passed += 1
        self.section["frames_without_entries"] = self.passed

    def _fail_later(self, err: FrameError) -> None:
        """A request failed for its frames (all of a batch): frames that finished alongside still go on;
        the engine gets the error from the next ``poll()`` and applies ``on_error`` to each frame."""
        for f in err.frames:
            self._into.pop(id(f), None)
        self._errors.append(err)
        self.wake()

    def _bind_slots(self, req: Any, slots: list[Slot]) -> None:
        """Frames the preprocess wrote into slots of one batch buffer: bind the whole buffer, no copies."""
        b = slots[0].batch
        b.submitted += len(slots)
        buf = b.lease.buffer
        if hasattr(buf, "int_ptr"):  # an OpenCL buffer in OpenVINO's GPU context
            for s in slots:
                s.wait_ready()  # the preprocess kernels may still run on their own queue
            req.set_tensor(self.input.get_any_name(), self.tensors.ocl_buffer(buf))
            self.section["input_binding"] = f"remote OCL_BUFFER, batch of {self.batch} written in place"
            return
        req.set_input_tensor(self.tensors.host(buf.array(self._batch_shape, self.in_type.to_dtype())))
        self.section["input_binding"] = f"host tensor, batch of {self.batch} written in place"

    def _bind_batch(self, req: Any, frames: list[Frame]) -> None:
        """Frames whose tensors are not in batch slots (no preprocess upstream wrote them there): each
        input is copied once into its slot of the batch tensor (counted on the input edge)."""
        if self.batch_pool is None:
            self.batch_pool = BufferPool(self._batch_nbytes, len(self.requests) + 1)
        lease = self.batch_pool.acquire(timeout=30)
        shared = SharedLease(lease, len(frames))
        arr = lease.buffer.array(self._batch_shape, self.in_type.to_dtype())
        per = self.entries
        for k, f in enumerate(frames):
            f.hold(shared)
            ledgers.copy(f.tensors["input"], out=arr[k * per:(k + 1) * per])
        if len(frames) < self.batch:
            arr[len(frames) * per:] = 0  # a partial batch (timeout): empty slots, results ignored
        req.set_input_tensor(self.tensors.host(arr))
        self.section["input_binding"] = f"host tensor, batch of {self.batch} (one counted copy per frame)"

    def poll(self) -> list[Frame]:
        out = self._ready()
        if self._errors:
            self.wake()  # come back for the (rest of the) errors
            if not out:
                raise self._errors.popleft()
        return out

    def _ready(self) -> list[Frame]:
        """Partial batches whose time is up, then finished requests' frames (never raises)."""
        out: list[Frame] = []
        if self._gather or self._groups:
            with ledgers.on_edge(self._edge):
                out += self._send_partial(time.monotonic())
            due = [d for _, _, _, d in self._groups.values()] + ([self._deadline] if self._gather else [])
            if due:  # still waiting to fill: make sure a poll comes when the first one's time is up
                self._wake_at(min(due))
        return out + self._collect()

    def _collect(self) -> list[Frame]:
        out = []
        while self._pending and (self._pending[0][0] < 0 or self._done[self._pending[0][0]].is_set()):
            slot, frames = self._pending.popleft()
            if slot < 0:  # a frame that ran no request, on in its turn
                out += frames
                continue
            self._idle.append(slot)
            try:
                self.requests[slot].wait()  # re-raises an inference error here, on the engine's thread
            except Exception as e:  # noqa: BLE001
                self._fail_later(FrameError(frames, e))
                continue
            out += self._finished(frames)
        return out

    def _finished(self, frames: list[Frame]) -> list[Frame]:
        """``frames`` with their results: a client's share copied where it wants it, the metadata added."""
        out = []
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
                with ledgers.on_edge(self._edge):
                    for name, arr in zip(self.out_names, into):
                        ledgers.copy(frame.tensors[name], out=arr)
                        frame.tensors[name] = arr
            frame.meta["inference"] = {"node": self.id, "device": self.device}
            if self.labels:
                frame.meta["labels"] = self.labels  # the registry's class names, for the decoders
            out.append(frame)
        return out

    def flush(self) -> list[Frame]:
        out = []
        if self._gather or self._groups:
            with ledgers.on_edge(self._edge):
                out += self._send_partial()
        while self._pending:
            self._wait_head()
            out += self._collect()
        return out

    def _wait_head(self) -> None:
        """Until the oldest pending request is done (a frame that ran none is done already)."""
        if self._pending and self._pending[0][0] >= 0:
            self._done[self._pending[0][0]].wait()

    def close(self) -> None:
        for slot, _frames in list(getattr(self, "_pending", [])):
            if slot >= 0:
                self._done[slot].wait(timeout=10)
        # the requests hold our callback inside OpenVINO (a cycle the garbage collector cannot see):
        # drop them, and everything bound to our buffers, before the pools go
        for r in getattr(self, "requests", []):
            r.set_callback(_noop, None)
        self.requests, self.compiled = [], None
        if hasattr(self, "tensors"):
            self.tensors.clear()
        for p in [*getattr(self, "out_pools", []), getattr(self, "batch_pool", None)]:
            if p is not None:
                p.close()  # batch slots belong to the run (their producer keeps writing across a restart)
        self.out_pools = []


def _noop(_userdata: Any) -> None:
    pass


def _expand(p: str | None) -> str | None:
    return str(Path(p).expanduser()) if p else None

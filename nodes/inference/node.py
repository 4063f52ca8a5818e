"""The ``inference`` node: its config, the memory it asks for, and the port glue around its engine
(``engine.Engine``; ``multi.MultiEngine`` on several devices at once), batcher (``batching.Batcher``) and
per-stream model state (``state.StreamStates``)."""
from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from flowpipe import models
from flowpipe.accel import Devices
from flowpipe.accel.host import usable_cores
from flowpipe.accel.openvino import DeviceChoice
from flowpipe.contracts import Allocation, Offer, Request
from flowpipe.frame import Frame
from flowpipe.memory import Slot
from flowpipe.memory import ledger as ledgers
from flowpipe.node import PIXELS_ALL, AsyncNode, Negotiating, Node, NodeConfig, NodeContract, Resource, RunContext
from flowpipe.registry import register

from .batching import Batcher, Entries
from .config import InferenceConfig
from .engine import Engine
from .model import model_input
from .multi import MultiEngine
from .session import SessionEngine
from .state import StreamStates

log = logging.getLogger("flowpipe.inference")


@register("inference")
class Inference(AsyncNode, Negotiating, Node):
    """Runs an OpenVINO model on NPU, GPU or CPU (or several at once: ``device: GPU+CPU``); outputs land in
    ``frame.tensors`` by output name.

    YAML:
        - id: detect
          type: inference
          config: {model: blazeface_full, device: "NPU,GPU,CPU", performance_hint: THROUGHPUT}
          inputs: {tensor: pre.tensor}

    Compiled models are kept in this host's model cache (``cache_dir``: another folder, or ``false``: none).
    ``device: "GPU+CPU"`` runs on both at once (``multi.MultiEngine``); ``,`` is a fallback list.
    """

    inputs = {"tensor": "tensor"}
    outputs = {"tensors": "tensors"}

    Config = InferenceConfig

    config: InferenceConfig
    engine: Engine | MultiEngine | None = None  # made in open
    batcher: Batcher | None = None  # batch > 1
    states: StreamStates | None = None  # a stateful model
    labels: list[str] | None = None  # the registry's class names (set in open)
    score_floor: float | None = None  # a cut model's: what its own postprocessing kept nothing under
    _chosen: list[DeviceChoice] | None = None  # its devices, once chosen (choose_all)

    @classmethod
    def contract(cls, config: NodeConfig) -> NodeContract:
        assert isinstance(config, cls.Config)
        # never reads the pixels; async requests are held past process() (inline ones run to completion in it);
        # one compiled model serves every stream (over processes, in the device owner)
        takes = model_input(config)
        return cls.declare(pixels=PIXELS_ALL, holds_frames=config.requests == "async", serves_streams=True,
                           files={"cache_dir": "model_cache"},
                           isolation="it holds frames past process() (asynchronous requests)",
                           resources=(_model(config),), takes={"tensor": takes} if takes is not None else {})

    def choose(self, devices: Devices) -> DeviceChoice:
        """The device this node runs on (the same answer every time on one machine); of several used
        together, the first."""
        return self.choose_all(devices)[0]

    def choose_all(self, devices: Devices) -> list[DeviceChoice]:
        """The devices this node runs on: one, or every present one of those joined with ``+``; not one the
        registry says the model cannot run on (``refuses``), whose place the next present one takes."""
        if self._chosen is None:  # chosen once, as the run resolves its memory: the same answer at open
            c = self.config
            refused = models.entry(c.model).get("refuses") if c.model and models.is_registry_name(c.model) else None
            self._chosen = devices.backends.choose_all(c.device, refused)
        return self._chosen

    # memory contract ----------------------------------------------------------------------------------
    def request(self, port: str, offer: Offer, outputs: Mapping[str, Allocation], devices: Devices) -> Request:
        """The input memory the chosen device binds without copies: OpenCL buffers in the GPU's own context
        (remote tensors), DMA-BUF on the NPU, host memory on the CPU; and batch slots of ``batch`` when the
        producer declares the tensor it writes. On several devices host memory, which each of them binds (a
        CPU request cannot read an OpenCL buffer)."""
        choices = self.choose_all(devices)
        if choices[0].backend != "openvino":  # another backend's device, one frame a request: the memory it makes
            named = f"{choices[0].backend}:{choices[0].device}"  # where it declares its own (``own``), host
            found = devices.backends.device(named)  # memory otherwise
            if found is not None and "own" in found.memory:
                return Request("backend", device=named, by=self.id)
            return Request("host", by=self.id)
        dev = choices[0].device if len(choices) == 1 else "several"
        batch = self.config.batch if offer.tensor is not None else 1
        if dev == "GPU" and "opencl" in offer.writes:
            return Request("opencl", device="GPU", batch=batch, by=self.id)
        return Request("dma-buf" if dev == "NPU" else "host", batch=batch, by=self.id)

    # served from the device owner (a run over several processes) ------------------------------------------
    def owned_input(self, devices: Devices) -> str:
        """Where clients in other processes put this node's input: DMA-BUF for the NPU (imported by fd),
        host shared memory otherwise (the GPU plugin uploads it; OpenCL buffers do not cross processes; on
        several devices each binds host memory)."""
        choices = self.choose_all(devices)
        return "dma-buf" if [(ch.backend, ch.device) for ch in choices] == [("openvino", "NPU")] else "host"

    def output_specs(self) -> list[tuple[str, tuple[int, ...], str]]:
        """One frame's outputs (name, shape, dtype), for a client that provides the memory they land in."""
        return self._engine.output_specs()

    def frames_at_once(self) -> int:
        """Frames this node works on at once when every request is busy: what its clients keep it fed with."""
        return self._engine.frames_at_once()

    def frame_meta(self, device: str | None = None) -> dict[str, Any]:
        """What this node adds to each frame's metadata (``device``: the one of several that ran it)."""
        meta: dict[str, Any] = {"inference": {"node": self.id, "device": device or self.device}}
        if self.labels:  # the registry's class names, for the decoders
            meta["labels"] = self.labels
        if self.score_floor is not None:
            meta["score_floor"] = self.score_floor
        return meta

    def provide_outputs(self, frame: Frame, arrays: list[np.ndarray]) -> None:
        """Where ``frame``'s results go (one array per model output, in order): a client in another process
        passes its own shared buffers. With ``batch: 1`` the request writes into them (no copy); in a batch
        each frame's share is copied out once (counted)."""
        self._engine.provide(frame, arrays)

    # open -------------------------------------------------------------------------------------------
    def open(self, ctx: RunContext) -> None:
        t_open = time.perf_counter()
        c = self.config
        self.wake = ctx.wake
        contract = ctx.input("tensor")
        offer = contract.offer if contract is not None else Offer()
        alloc = contract.allocation if contract is not None else Allocation()
        choices = self.choose_all(ctx.devices)
        if c.requests == "inline" and len(choices) > 1:  # one request, run in the caller's thread: one device
            log.info("node '%s': requests: inline runs on one device, %s", self.id, choices[0].device)
            choices = choices[:1]
        foreign = choices[0].backend != "openvino"
        self.device = f"{choices[0].backend}:{choices[0].device}" if foreign else "+".join(ch.device for ch in choices)
        log.info("node '%s': device %s (%s)", self.id, self.device, choices[0].reason)
        self.labels = models.entry(c.model).get("labels") if models.is_registry_name(c.model) else None
        part = models.part_of(c.model)
        self.score_floor = part.get("score_floor") if part else None  # what the cut-off postprocessing kept
        if c.requests == "inline" and c.batch > 1:
            raise ValueError(f"batch: an inline request runs one frame at a time; expected batch: 1, got {c.batch}")
        self.engine, self.batcher, self.states = None, None, None
        self.entries = Entries.of(offer, c.batch, choices[0].device, alloc.placement)
        edge = contract.edge if contract else None
        threads = cpu_threads(ctx.serves_processes)
        if foreign:  # a device of another backend, through its session
            session = self.engine = SessionEngine(self.id, c, choices[0], self.wake, self._label, t_open)
            session.load_session(ctx.devices.backends.get(choices[0].backend), offer, alloc, self.entries, edge,
                                 ctx.frames_in_flight())
            self.max_held = len(session.requests) * _every(offer) if c.requests == "async" else 0
            self.passed = 0
            ctx.section(f"inference.{self.id}", session.section)
            return
        if len(choices) > 1:  # every device at once, each frame on the device the split deals it to
            multi = self.engine = MultiEngine(self.id, c, choices, self.wake, self._label, t_open)
            for e in multi.engines:
                e.cpu_threads = threads
            multi.load(ctx.devices.openvino, offer, alloc, self.entries, edge, ctx.frames_in_flight())
            self.entries = multi.entries
            self.max_held = multi.window * _every(offer) if c.requests == "async" else 0
            self.passed = 0
            ctx.section(f"inference.{self.id}", multi.section)
            multi.warm()
            return
        self.engine = engine = Engine(self.id, c, choices[0], self.wake, self._label, t_open)
        engine.cpu_threads = threads
        engine.load(ctx.devices.openvino, offer, alloc, self.entries, edge, ctx.frames_in_flight())
        self.states = StreamStates(c.reset_state) if engine.stateful else None
        if c.batch > 1:
            if engine.stateful:
                raise ValueError("batch > 1 with a stateful model: state follows one stream; expected batch: 1")
            assert engine.tensors is not None
            self.batcher = Batcher(c.batch, c.batch_timeout_ms, self.wake, self.entries.count, engine.in_shape,
                                   engine.in_type, alloc.slots, len(engine.requests), engine.tensors,
                                   engine.input_name)
        # the frames its requests run, and those that run none waiting behind them (an interval's)
        self.max_held = len(engine.requests) * _every(offer) if c.requests == "async" else 0
        self.passed = 0  # frames without entries (up_to): no request
        ctx.section(f"inference.{self.id}", engine.section)
        engine.warm()

    @property
    def _engine(self) -> Engine | MultiEngine:
        assert self.engine is not None, f"inference '{self.id}' used before open"
        return self.engine

    @property
    def requests(self) -> list[Any]:
        """The engine's infer requests (in its pool's order)."""
        return self._engine.requests

    @requests.setter
    def requests(self, value: list[Any]) -> None:
        self._engine.requests = value

    # per frame --------------------------------------------------------------------------------------
    def process(self, frame: Frame, port: str) -> list[Frame]:
        engine = self._engine
        if self.entries.empty(frame):  # nothing to look at: on in its turn, no request
            self._count_passed()
            if self.config.requests == "inline":
                engine.release(frame)
                return [frame]
            out = self._before(frame)
            engine.pass_through(frame)
            return out + self._ready()
        if self.config.requests == "inline":
            return engine.run_inline(frame, lambda req: self._bind(req, [frame]))
        if self.batcher is not None:
            ready = self.batcher.add(frame)
            return (self._submit(*ready) if ready is not None else []) + self._ready()
        return self._submit([frame]) + self._ready()

    def _submit(self, frames: list[Frame], slots: list[Slot] | None = None) -> list[Frame]:
        """Start a request for ``frames``: one frame, frames written into ``slots`` of one batch buffer,
        or a batch assembled by copying (a frame that does not fit fails alone, raised here)."""
        if self.batcher is not None and not slots:
            self.batcher.check(frames)
        return self._engine.submit(frames, lambda req: self._bind(req, frames, slots))

    def _bind(self, req: Any, frames: list[Frame], slots: list[Slot] | None = None) -> None:
        """``frames``' input and the outputs they get (pooled, or a client's own memory) bound to ``req``."""
        engine = self._engine
        if self.states is not None:
            self.states.switch(req, frames[0])
        if self.batcher is not None:
            how = self.batcher.bind(req, frames, slots)
            if engine.device == "GPU" and how.startswith("host tensor"):  # the plugin uploads it: a copy
                ledgers.record(req.get_input_tensor().byte_size)
        else:
            how = engine.bind_input(req, frames[0])
        engine.section["input_binding"] = how
        engine.bind_outputs(req, frames, slots)

    def _label(self, frame: Frame, device: str | None = None) -> None:
        """``frame`` ran here: the node and the device that ran it (one of several used together)."""
        frame.meta.update(self.frame_meta(device))

    def _before(self, frame: Frame) -> list[Frame]:
        """A frame that runs no request goes on after its stream's frames before it: those still waiting for
        the rest of a batch go now, as a partial batch (a stream's frames never overtake one another)."""
        if self.batcher is None or not self.batcher.holds(frame.stream):
            return []
        out: list[Frame] = []
        with ledgers.on_edge(self._engine.edge):
            for frames, slots in self.batcher.due():
                out += self._submit(frames, slots)
        return out

    def _count_passed(self) -> None:
        self.passed += 1
        self._engine.section["frames_without_entries"] = self.passed

    def poll(self) -> list[Frame]:
        out = self._ready()
        if self._engine.failed:
            self.wake()  # come back for the (rest of the) errors
            if not out:
                err = self._engine.next_error()
                assert err is not None
                raise err
        return out

    def _ready(self) -> list[Frame]:
        """Partial batches whose time is up, then finished requests' frames."""
        out: list[Frame] = []
        if self.batcher is not None and self.batcher.waiting:
            with ledgers.on_edge(self._engine.edge):
                for frames, slots in self.batcher.due(time.monotonic()):
                    out += self._submit(frames, slots)
            self.batcher.rearm()
        return out + self._engine.collect()

    def flush(self) -> list[Frame]:
        out = []
        if self.batcher is not None and self.batcher.waiting:
            with ledgers.on_edge(self._engine.edge):
                for frames, slots in self.batcher.due():
                    out += self._submit(frames, slots)
        return out + self._engine.drain()

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
        if self.batcher is not None:
            self.batcher.close()


def _model(c: InferenceConfig) -> Resource:
    """The model it loads: a file it reads from this host, or a registry name or a URL, which it fetches."""
    key, ref = ("blob", c.blob) if c.blob else ("model", c.model)
    local = bool(ref) and not ref.startswith(("http://", "https://")) and not models.is_registry_name(ref)
    return Resource(f"loads model {ref}", reads=ref if local else None, field=key)


def cpu_threads(serves_processes: int) -> int | None:
    """The threads CPU inference takes (``INFERENCE_NUM_THREADS``, where the graph's ``properties`` do not
    say): in a device owner serving several processes, half the cores, the shards' decoders and encoders the
    other half (16 cores, 16 shards, CenterFace on the CPU: 8 threads 446 fps, 12: 371, every core: 369;
    benchmarks/sixteen_cameras.py); elsewhere every core (None: OpenVINO's choice)."""
    return max(1, usable_cores() // 2) if serves_processes > 1 else None


def _every(offer: Offer) -> int:
    """One frame in how many carries a tensor (a detector's interval upstream; 1 without one)."""
    return offer.tensor.every if offer.tensor is not None else 1

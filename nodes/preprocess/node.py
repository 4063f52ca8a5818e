"""The ``preprocess`` node: its config, what it offers and asks for, the backend it takes, and per frame the
entries it writes (one, tiles, or one per object) into pooled tensor memory.

What the node decides from its neighbours (the tensor's size, the backend and its OpenCL device) is
decided by pure functions of its config, what its input offers and what its output got: ``offer`` and
``request`` return what they make of them, and ``open`` makes the same of the run's contracts."""
from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from flowpipe.accel import Devices
from flowpipe.accel.opencl import ClDevice
from flowpipe.contracts import Allocation, Offer, Request, TensorSpec
from flowpipe.frame import Frame, TensorLayout
from flowpipe.memory import BatchSlots, BufferPool, Lease, Slot
from flowpipe.node import PIXELS_ALL, Negotiating, Node, NodeConfig, NodeContract, RunContext
from flowpipe.registry import register

from .config import PreprocessConfig
from .cpu import CpuBackend
from .geometry import Geometry, Objects, fitted, geometry
from .interval import AlongGate, Gate
from .opencl import OpenClBackend
from .tensor import DTYPES, SRC_FMT, TensorMemory

log = logging.getLogger("flowpipe.preprocess")


@register("preprocess")
class Preprocess(Negotiating, Node):
    """Turns frames into the model's input tensor (``frame.tensors['input']``), on OpenCL or the CPU.

    YAML:
        - id: pre
          type: preprocess
          config: {size: [192, 192], color: RGB, layout: NHWC, dtype: f32,
                   mean: [127.5, 127.5, 127.5], scale: [127.5, 127.5, 127.5], resize: letterbox}
          inputs: {frame: decode.frame}
    """

    inputs = {"frame": "frame"}
    outputs = {"tensor": "tensor"}

    @classmethod
    def contract(cls, config: NodeConfig) -> NodeContract:
        # reads every pixel format itself (the kernel converts), but for the model's own preprocessing; its
        # state is per stream; a whole-frame tensor may be written in the device owner, next to the inference
        # on its device
        assert isinstance(config, cls.Config)
        whole = config.objects is None and config.backend != "openvino"
        side = {"auto": "device", "always": "always", "never": None}[config.owner] if whole else None
        follow = config.interval.follow if config.interval is not None and config.interval.every > 1 else None
        refers = {"interval.follow": follow} if follow else {}
        if config.along is not None:
            refers["along.node"] = config.along.node
            followed = config.along.followed() if config.along.every > 1 else []  # (every frame: none to follow)
            refers.update({"along.follow" if isinstance(config.along.follow, str) else f"along.follow[{i}]": name
                           for i, name in enumerate(followed)})
        # backend openvino: OpenVINO's PrePostProcessor in the model takes u8 BGR frames, nothing else
        pixels = frozenset({"BGR"}) if config.backend == "openvino" else PIXELS_ALL
        # the tensor as its config says (sized to the source: its height and width said only as it opens);
        # backend openvino writes none, its consumer folds the preprocessing into the model
        tensors = {} if config.backend == "openvino" else {
            "tensor": tensor_spec(config, (-1, -1) if config.size_to_source else config.size)}
        return cls.declare(pixels=pixels, one_worker=None, owner_side=side, refers=refers, tensors=tensors,
                           isolation="it writes into memory resolved with its consumer in the runner's process "
                                     "(batch slots, device buffers)")

    Config = PreprocessConfig

    config: PreprocessConfig
    # decided in open() from the run's contracts (the same decisions offer() and request() return)
    backend: str | None = None  # opencl, cpu, openvino, or owner (the device owner writes the tensor)
    why: str = ""  # why auto chose the CPU, where it did
    cl: ClDevice | None = None
    size: tuple[int, int] | None = None  # the tensor's width, height: config.size, or fitted to the picture
    _writer: CpuBackend | OpenClBackend | None = None  # None: openvino, the frame itself is the input
    gate: Gate | None = None  # the detector's interval
    along: AlongGate | None = None  # a second detector's share of the frames a first one runs on
    _said_along = False  # (objects along a preprocess whose layout the frames do not carry: said once)

    def for_owner(self) -> Preprocess:
        """As the device owner runs it (``owner_side``): the shard's instance decided which frames the
        detector's interval passes over; the owner writes the tensor of every frame it gets."""
        return Preprocess(self.id, self.config.model_copy(update={"interval": None, "along": None}))

    def tensor_size(self) -> tuple[int, int]:
        """The tensor's width and height: the one it writes once open, before that ``config.size``."""
        return self.size or self.config.size

    def tensor_shape(self) -> tuple[int, ...]:
        return shape_for(self.config, self.tensor_size())

    @property
    def kernel_ns(self) -> list[int]:
        """OpenCL kernel times (ns) of the frames sampled so far; none on the other backends."""
        return self._writer.kernel_ns if isinstance(self._writer, OpenClBackend) else []

    # memory contracts ------------------------------------------------------------------------------
    def offer(self, port: str, inputs: Mapping[str, Offer], devices: Devices) -> Offer:
        c = self.config
        frame = inputs.get("frame")
        if c.backend == "openvino":  # nothing written here: the consumer folds this into its model
            return Offer(self.id, port, model_preprocessing={"color": c.color, "mean": c.mean, "scale": c.scale,
                                                             "layout": c.layout})
        picture = frame.picture if frame is not None else None
        return Offer(self.id, port, tensor_spec(c, size_for(c, picture)), writes(c, devices), picture=picture)

    def request(self, port: str, offer: Offer, outputs: Mapping[str, Allocation], devices: Devices) -> Request:
        """Asks the source for page-locked frames where the backend ``choose`` takes runs on a discrete GPU."""
        choice = choose(self.config, outputs.get("tensor") or Allocation(), devices)
        if choice.cl is not None and not choice.cl.unified_memory:
            return Request("pinned", cl=choice.cl, by=self.id)  # a discrete GPU uploads page-locked frames by DMA
        return Request(by=self.id)

    def open(self, ctx: RunContext) -> None:
        """The tensor's size from the picture its input was offered, the backend from the allocation its
        output got (as ``offer`` and ``request`` made them), then the memory it writes into."""
        c = self.config
        contract = ctx.input("frame")
        frame = (contract.given or contract.offer) if contract is not None else None
        self.size = size_for(c, frame.picture if frame is not None else None)
        alloc = ctx.allocation("tensor")
        choice = choose(c, alloc, ctx.devices)
        if choice.note is not None:
            log.log(choice.note[0], "node '%s': %s", self.id, choice.note[1])
        self.backend, self.cl, self.why = choice.backend, choice.cl, choice.why
        self.stats = stats = ctx.stats
        stats["backend"] = self.backend
        if self.why:
            stats["backend_why"] = self.why
        if self.size != c.size:
            stats["tensor_size"] = f"{self.size[0]}x{self.size[1]} (sized to the source; " \
                                   f"at most {c.size[0]}x{c.size[1]})"
        if self.cl is not None:
            stats["opencl_device"] = self.cl.name
            stats["opencl_memory"] = "unified" if self.cl.unified_memory else "discrete (frames uploaded)"
        self.shape = self.tensor_shape()
        self.slots: BatchSlots | None = alloc.slots if self.backend not in ("openvino", "owner") else None
        self.memory = TensorMemory(self.shape, DTYPES[c.dtype][1], self.slots.size if self.slots else 1)
        stats["writes"] = "in the device owner" if self.backend == "owner" else \
            f"slots of a batch of {self.slots.size}" if self.slots else "own pool"
        self.pool: BufferPool | None = None
        if self.backend in ("opencl", "cpu") and self.slots is None:
            self.pool = alloc.pool(self.memory.nbytes, min(ctx.frames_in_flight(), 64))
        c_int = c.interval
        self.gate = Gate(c_int, ctx.back_edge(c_int.follow) if c_int.follow else None, stats) \
            if c_int is not None and c_int.every > 1 else None
        self.along = AlongGate(c.along, [ctx.back_edge(n) for n in c.along.followed()] if c.along.every > 1
                               else [], stats) if c.along is not None else None
        if c.objects is not None:  # what its looks cost: the frames with an entry, the entries
            stats["objects"] = {"frames": 0, "entries": 0}
            self._objects_lock = threading.Lock()
        self._writer = None
        if self.backend == "opencl":
            assert self.cl is not None, "the opencl backend runs with a device"
            remote = alloc.placement == "opencl"
            self._writer = OpenClBackend(c, self.cl, self.memory, self.size, remote, ctx.devices.opencl.calls(),
                                         stats)
        elif self.backend == "cpu":
            self._writer = CpuBackend(c, self.memory)

    # per frame ---------------------------------------------------------------------------------------
    def process(self, frame: Frame, port: str) -> Frame:
        c = self.config
        data = frame.image
        if frame.format not in SRC_FMT:
            raise ValueError(f"cannot convert format {frame.format!r}: expected one of {', '.join(SRC_FMT)}")
        w, h = frame.width, frame.height
        if frame.format in ("NV12", "I420"):
            rows = data.shape[0]
            if w % 2 or rows % 3 or h % 2:
                raise ValueError(f"{frame.format} needs even width and height (data of height*3/2 rows), "
                                 f"got {w}x{rows} data")
        roi = c.roi
        if roi is not None:
            x, y, rw, rh = roi
            if x < 0 or y < 0 or rw < 1 or rh < 1 or x + rw > w or y + rh > h:
                raise ValueError(f"roi {roi} is outside the {w}x{h} frame")
        tw, th = self.tensor_size()
        if c.objects is not None:
            if self.along is not None and not self._along_filled(frame):  # that one wrote none: nothing to look at
                return self._no_tensor(frame, frame.layout or TensorLayout(self.id, (tw, th), (), filled=0))
            return self._objects(frame, c.objects, tw, th)
        if self.along is not None and not self.along.run(frame):  # the first detector's results stand
            return self._no_tensor(frame, TensorLayout(self.id, (tw, th), (), filled=0))
        if self.gate is not None and not self.gate.run(frame):  # the interval passes over it
            frame.skipped = self.id
            return self._no_tensor(frame, TensorLayout(self.id, (tw, th), (), filled=0))
        if self.along is not None:
            self.along.ran_on(frame)
        rois = c.tiles.rois(w, h) if c.tiles else [roi]
        geos = [geometry(w, h, tw, th, c.resize, r, c.upscale) for r in rois]
        frame.layout = TensorLayout(self.id, (tw, th), tuple(geos))
        return self._write(frame, geos)

    def _along_filled(self, frame: Frame) -> bool:
        """Whether the preprocess this one's ``along`` names wrote a tensor for ``frame`` (its detector ran). Its
        layout must be the frame's: a frame carrying another preprocess's says so, once, and gets no look."""
        assert self.along is not None
        node = self.along.config.node
        layout = frame.layout
        if layout is not None and layout.node != node and not self._said_along:
            self._said_along = True
            log.warning("node '%s': along '%s', but its frames carry the tensor layout of '%s': expected it "
                        "after the decoder of the model '%s' feeds, with no other preprocess between; it looks "
                        "at nothing", self.id, node, layout.node, node)
        return _filled_by(frame, node)

    def _objects(self, frame: Frame, objects: Objects, tw: int, th: int) -> Frame:
        """One entry per object picked (``objects``): its index among the frame's detections and its crop's
        geometry go in the frame's layout; a frame without any gets no tensor memory at all."""
        picked = []
        for i in objects.pick(frame):
            geo = objects.geometry(frame.detections[i].box, frame.width, frame.height, tw, th)
            if geo is not None:
                picked.append((i, geo))
        layout = TensorLayout(self.id, (tw, th), tuple(g for _, g in picked), objects=tuple(i for i, _ in picked),
                              filled=len(picked))
        if not picked:
            return self._no_tensor(frame, layout)
        with self._objects_lock:
            self.stats["objects"]["frames"] += 1
            self.stats["objects"]["entries"] += len(picked)
        frame.layout = layout
        return self._write(frame, [g for _, g in picked])

    def _no_tensor(self, frame: Frame, layout: TensorLayout) -> Frame:
        """``frame`` with no entry of the tensor (``layout`` says none is filled): no memory, no request."""
        frame.layout = layout
        frame.tensors["input"] = np.empty((0, *self.shape[1:]), self.memory.dtype)
        return frame

    def _write(self, frame: Frame, geos: list[Geometry]) -> Frame:
        """The tensor's entries for ``geos`` written into pooled memory (a batch slot or our own buffer)."""
        if self.backend == "owner":  # the device owner writes them, from the frame (its layout goes on here)
            return frame
        if self._writer is None:  # openvino: the model takes the frame itself
            data = frame.image
            frame.tensors["input"] = data[None] if data.ndim == 3 else data
            return frame
        lease: Slot | Lease
        if self.slots is not None:
            slot = lease = self.slots.take()
            base = slot.index * self.shape[0]  # the first batch entry this frame writes
        else:
            assert self.pool is not None, "a pool is made in open() when no batch slots were allocated"
            lease, base = self.pool.acquire(timeout=30), 0
        frame.hold(lease)
        frame.tensors["input"] = self._writer.write(frame, geos, lease, base)
        return frame

    def end_stream(self, stream: str) -> None:
        if self.gate is not None:
            self.gate.forget(stream)
        if self.along is not None:
            self.along.forget(stream)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if self.pool is not None:
            self.pool.close()


# decisions: pure functions of the config and what the neighbours offer and got ----------------------------
def size_for(c: PreprocessConfig, picture: tuple[int, int] | None) -> tuple[int, int]:
    """``size``, or with ``size_to_source`` the letterboxed ``picture`` rounded up to ``align``."""
    if not c.size_to_source or picture is None:
        return c.size
    return fitted(c.size, picture, c.upscale, c.align)


def tensor_spec(c: PreprocessConfig, size: tuple[int, int]) -> TensorSpec:
    """One frame's tensor of ``size`` (width, height) as the config makes it: its shape, element type, entries
    and the frames that carry it."""
    return TensorSpec(shape_for(c, size), np.dtype(DTYPES[c.dtype][1]).name, up_to=c.objects is not None,
                      every=c.interval.every if c.interval is not None else 1)


def shape_for(c: PreprocessConfig, size: tuple[int, int]) -> tuple[int, ...]:
    """One frame's tensor of ``size`` (width, height): its entries first, in the config's layout."""
    w, h = size
    ch = 1 if c.color == "GRAY" else 3
    n = c.tiles.count if c.tiles else c.objects.max if c.objects else 1
    return (n, ch, h, w) if c.layout == "NCHW" else (n, h, w, ch)


def only_the_cpu(c: PreprocessConfig, devices: Devices) -> str | None:
    """With ``backend`` and ``opencl_device`` auto: the OpenCL device when every usable one is the CPU
    itself (PoCL), where OpenCV does the same work on the same cores without the OpenCL runtime's threads
    and launches (measured with PoCL on 2 cores: 12% faster at 720p, 0.4 ms less CPU per 176x144 frame);
    else None."""
    if c.backend != "auto" or c.opencl_device != "auto":
        return None
    usable = [(p["platform"], d) for p in devices.opencl.platforms() for d in p["devices"] if d["usable"]]
    if not usable or any(d["type"] != "CPU" for _, d in usable):
        return None
    return f"{usable[0][0]} / {usable[0][1]['name']}"


def writes(c: PreprocessConfig, devices: Devices) -> frozenset[str]:
    """The memory the node can write its tensor into: host memory, and OpenCL device buffers where it
    may run the kernel."""
    out = {"host"}
    if c.backend == "opencl" or (c.backend == "auto" and only_the_cpu(c, devices) is None and any(
            d["usable"] for p in devices.opencl.platforms() for d in p["devices"])):
        out.add("opencl")
    return frozenset(out)


@dataclass(frozen=True)
class Choice:
    """The backend a node takes, its OpenCL device, why auto took the CPU, and what to log of it."""

    backend: str  # opencl, cpu or openvino
    cl: ClDevice | None = None
    why: str = ""
    note: tuple[int, str] | None = None  # (logging level, message)


def choose(c: PreprocessConfig, alloc: Allocation, devices: Devices) -> Choice:
    """The OpenCL context of the consumer's device when it got device buffers (``alloc``), else one of our
    own; OpenCV where the only OpenCL device is the CPU or none is there (``backend: auto``)."""
    if c.backend == "openvino":
        return Choice("openvino")
    if alloc.placement == "owner":
        return Choice("owner", why="written in the device owner next to the inference it feeds: the frame "
                                   "crosses processes by fd, the tensor does not")
    cpu = only_the_cpu(c, devices)
    if alloc.placement == "opencl" and alloc.cl is not None:
        return Choice("opencl", alloc.cl)
    if cpu is not None:
        why = f"the only OpenCL device is the CPU ({cpu}): OpenCV on the same cores costs less"
        return Choice("cpu", why=why, note=(logging.INFO, f"{why} (backend: opencl to use it)"))
    if c.backend in ("auto", "opencl"):
        try:
            return Choice("opencl", devices.opencl.device(c.opencl_device))
        except Exception as e:
            if c.backend == "opencl":
                raise RuntimeError(f"OpenCL unavailable ({e}); platforms: "
                                   f"{devices.opencl.platforms() or 'none'}") from e
            return Choice("cpu", why=f"no OpenCL device ({e})",
                          note=(logging.WARNING, f"no OpenCL device ({e}); preprocessing on the CPU with OpenCV"))
    return Choice(c.backend)


def _filled_by(frame: Frame, node: str) -> bool:
    """Whether preprocess ``node`` wrote a tensor for ``frame`` (its layout is on the frame, an entry filled): the
    detector it feeds ran, and what that found is on the frame."""
    layout = frame.layout
    return not frame.skipped and layout is not None and layout.node == node and layout.filled != 0

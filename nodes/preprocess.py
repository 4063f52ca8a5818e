"""Preprocessing into the model's input tensor: ROI, resize (stretch/letterbox), colour, normalize, layout.

Backends:
* ``opencl``: one fused kernel (``flowpipe/kernels/preprocess.cl``) reads the frame's shared buffer and
  writes the tensor in place. On unified-memory devices (PoCL, Intel iGPU) both are host buffers wrapped
  with ``CL_MEM_USE_HOST_PTR`` (no copies). When the downstream inference runs on OpenVINO's GPU plugin,
  the kernel runs in OpenVINO's own OpenCL context and writes device buffers the inference binds as
  remote tensors.
* ``cpu``: OpenCV + numpy, writing into the same pooled tensor memory.
* ``openvino``: no work here; the inference node folds resize/colour/normalize into the model with
  OpenVINO's PrePostProcessor and the frame itself is the input tensor.
* ``auto``: ``opencl`` when a platform exists, else ``cpu`` (logged).
"""
from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property, partial
from importlib import resources
from typing import Any, Literal

import cv2
import numpy as np
from pydantic import Field, model_validator

from flowpipe import memory
from flowpipe.accel import Devices
from flowpipe.accel.opencl import ClDevice, wait_event
from flowpipe.contracts import Allocation, Offer, Request, TensorSpec
from flowpipe.frame import Frame
from flowpipe.memory import BatchSlots, Lease, Slot
from flowpipe.node import PIXELS_ALL, Node, NodeConfig, NodeContract, RunContext
from flowpipe.registry import register

log = logging.getLogger("flowpipe.preprocess")
SRC_FMT = {"BGR": 0, "RGB": 1, "GRAY": 2, "NV12": 3, "I420": 4}
DST_COLOR = {"BGR": 0, "RGB": 1, "GRAY": 2}
DTYPES = {"u8": (0, np.uint8, "uchar"), "f16": (1, np.float16, "half"), "f32": (2, np.float32, "float")}
PROFILE_EVERY = 8  # kernel time is read from one frame in this many (each read is a driver call)


#: YUV and BGR/RGB frames straight to the tensor's colour order (one OpenCV call)
_TO_COLOR = {("NV12", "RGB"): cv2.COLOR_YUV2RGB_NV12, ("NV12", "BGR"): cv2.COLOR_YUV2BGR_NV12,
             ("I420", "RGB"): cv2.COLOR_YUV2RGB_I420, ("I420", "BGR"): cv2.COLOR_YUV2BGR_I420,
             ("BGR", "RGB"): cv2.COLOR_BGR2RGB, ("RGB", "BGR"): cv2.COLOR_RGB2BGR, ("GRAY", "BGR"): cv2.COLOR_GRAY2BGR,
             ("GRAY", "RGB"): cv2.COLOR_GRAY2RGB}


def _in_color(frame: Frame, color: str) -> np.ndarray:
    """The frame's pixels (the whole picture) as BGR or RGB, or a gray frame as it is."""
    return frame.image if frame.format == color else cv2.cvtColor(frame.image, _TO_COLOR[frame.format, color])


@dataclass(frozen=True)
class Geometry:
    """Where the (ROI of the) frame lands in the tensor: content size and padding."""

    roi: tuple[int, int, int, int]
    new_w: int
    new_h: int
    pad_x: int
    pad_y: int

    @property
    def scale(self) -> tuple[float, float]:
        return self.new_w / self.roi[2], self.new_h / self.roi[3]

    def to_source(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Tensor pixel coordinates -> source frame pixel coordinates."""
        sx, sy = self.scale
        return (x - self.pad_x) / sx + self.roi[0], (y - self.pad_y) / sy + self.roi[1]

    def as_meta(self) -> dict[str, Any]:
        return {"roi": list(self.roi), "new_w": self.new_w, "new_h": self.new_h, "pad_x": self.pad_x,
                "pad_y": self.pad_y}


def geometry(src_w: int, src_h: int, out_w: int, out_h: int, resize: str,
             roi: tuple[int, int, int, int] | None = None, upscale: bool = True) -> Geometry:
    x, y, w, h = roi if roi else (0, 0, src_w, src_h)
    if resize == "letterbox":
        s = min(out_w / w, out_h / h)
        if not upscale:  # a small picture stays at its own scale, padded (a detector that takes any size)
            s = min(s, 1.0)
        new_w, new_h = max(1, min(out_w, round(w * s))), max(1, min(out_h, round(h * s)))
        return Geometry((x, y, w, h), new_w, new_h, (out_w - new_w) // 2, (out_h - new_h) // 2)
    return Geometry((x, y, w, h), out_w, out_h, 0, 0)


class Tiles(NodeConfig):
    """Cut the frame into a grid of overlapping tiles (plus the whole frame) so small, distant objects
    keep enough pixels after resizing. Each tile is one batch entry of the tensor."""

    grid: tuple[int, int] = Field((2, 2), description="columns, rows")
    overlap: float = Field(0.1, ge=0, lt=1, description="fraction of a tile shared with its neighbour")
    full_frame: bool = Field(True, description="also run on the whole frame (large, close objects)")

    @property
    def count(self) -> int:
        return self.grid[0] * self.grid[1] + int(self.full_frame)

    def rois(self, w: int, h: int) -> list[tuple[int, int, int, int] | None]:
        cols, rows = self.grid
        tw = min(w, int(np.ceil(w / cols * (1 + self.overlap))))
        th = min(h, int(np.ceil(h / rows * (1 + self.overlap))))
        out: list[tuple[int, int, int, int] | None] = [None] if self.full_frame else []
        for r in range(rows):
            for c in range(cols):
                x = 0 if cols == 1 else round(c * (w - tw) / (cols - 1))
                y = 0 if rows == 1 else round(r * (h - th) / (rows - 1))
                out.append((x, y, tw, th))
        return out


class Objects(NodeConfig):
    """One batch entry per object found upstream, for a second model's look at each (DL Streamer's
    gvaclassify, DeepStream's secondary GIE): a square around the object, ``scale`` times its longer side,
    resized to the tensor's size; what lies outside the picture is padding. The tensor has ``max`` entries
    and each frame fills as many as it has objects (``meta["preprocess"]["entries"]``; the inference after
    it runs only those, or none)."""

    scores: tuple[float, float] = Field((0.0, 1.0), description="objects scoring from the first up to (not "
                                        "including) the second: the ones a second look decides about")
    labels: list[str] | None = Field(None, description="only objects with these labels (default: all)")
    attributes: dict[str, tuple[float, float]] | None = Field(None, description="only objects with these "
                                                              "attributes, each from the first value up to (not "
                                                              "including) the second: a cascade, one look at what "
                                                              "an earlier one left in doubt")
    max: int = Field(16, ge=1, le=256, description="entries at most (the highest scores first)")
    scale: float = Field(2.0, gt=0, le=8, description="the square's side, in the object's longer sides "
                                                      "(context around it: a face's look needs its head)")
    inside: bool = Field(False, description="slide the square inside the picture where it fits (an object at "
                                            "the edge is seen with the picture around it, off the middle, "
                                            "instead of with padding; its place in the crop is in the metadata)")

    def pick(self, frame: Frame) -> list[int]:
        """The indices of ``frame.detections`` that get an entry, in entry order."""
        lo, hi = self.scores
        chosen = [i for i, d in enumerate(frame.detections) if lo <= d.score < hi
                  and (self.labels is None or d.label in self.labels)
                  and all(a in d.attributes and v[0] <= d.attributes[a] < v[1]
                          for a, v in (self.attributes or {}).items())]
        return sorted(chosen, key=lambda i: -frame.detections[i].score)[: self.max]

    def geometry(self, box: tuple[float, float, float, float], src_w: int, src_h: int, out_w: int,
                 out_h: int) -> Geometry | None:
        """Where the square around ``box`` lands in an entry: its part inside the picture, scaled, placed
        where it lies in the square; None for a box wholly outside the picture."""
        side = self.scale * max(box[2] - box[0], box[3] - box[1], 1.0)
        sx, sy = (box[0] + box[2] - side) / 2, (box[1] + box[3] - side) / 2
        if self.inside:  # along each axis the picture is wider than the square: slid in
            sx = min(max(sx, 0.0), src_w - side) if side <= src_w else sx
            sy = min(max(sy, 0.0), src_h - side) if side <= src_h else sy
        k = min(out_w, out_h) / side
        x0, y0 = max(0, int(np.floor(sx))), max(0, int(np.floor(sy)))
        x1, y1 = min(src_w, int(np.ceil(sx + side))), min(src_h, int(np.ceil(sy + side)))
        if x1 <= x0 or y1 <= y0:
            return None
        ox, oy = (out_w - side * k) / 2, (out_h - side * k) / 2  # a tensor that is not square: centred
        pad_x = min(out_w - 1, max(0, round(ox + (x0 - sx) * k)))
        pad_y = min(out_h - 1, max(0, round(oy + (y0 - sy) * k)))
        new_w = max(1, min(out_w - pad_x, round((x1 - x0) * k)))
        new_h = max(1, min(out_h - pad_y, round((y1 - y0) * k)))
        return Geometry((x0, y0, x1 - x0, y1 - y0), new_w, new_h, pad_x, pad_y)


@register("preprocess")
class Preprocess(Node):
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
        # reads every pixel format itself (the kernel converts); its state is per stream
        return cls.declare(pixels=PIXELS_ALL, one_worker=None,
                           isolation="it writes into memory resolved with its consumer in the runner's process "
                                     "(batch slots, device buffers)")

    class Config(NodeConfig):
        size: tuple[int, int] = Field((224, 224), description="tensor width, height")
        resize: Literal["stretch", "letterbox"] = "stretch"
        upscale: bool = Field(True, description="letterbox: enlarge pictures smaller than size (false: keep "
                                                "them at their own scale, padded; for fully convolutional "
                                                "detectors, which find faces better unstretched)")
        size_to_source: bool = Field(False, description="letterbox: the tensor only as large as the picture "
                                     "needs when the source says its size before it opens (a video file): "
                                     "the letterboxed picture rounded up to multiples of align, at most size; "
                                     "for models that take any input size (a 176x144 camera is not padded "
                                     "to 960x544)")
        align: int = Field(32, ge=1, le=256, description="size_to_source: tensor sides are multiples of this "
                                                           "(the model's largest stride)")
        pad_value: float = Field(0.0, description="letterbox padding, in pixel units before normalization")
        roi: tuple[int, int, int, int] | None = Field(None, description="crop x, y, w, h before resizing")
        tiles: Tiles | None = Field(None, description="grid tiling; the tensor's batch is one entry per tile")
        objects: Objects | None = Field(None, description="one entry per object found upstream (a crop "
                                        "around each), for a second model that looks at them")
        color: Literal["BGR", "RGB", "GRAY"] = "BGR"
        mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
        scale: tuple[float, float, float] = Field((1.0, 1.0, 1.0), description="divide by this after mean")
        layout: Literal["NHWC", "NCHW"] = "NCHW"
        dtype: Literal["u8", "f16", "f32"] = "f32"
        backend: Literal["auto", "opencl", "cpu", "openvino"] = Field(
            "auto", description="auto: OpenCL on a GPU, or where the consumer takes device buffers; else OpenCV "
            "(an OpenCL device that is the CPU itself, as PoCL, would run the same work on the same cores, with "
            "its own threads and launches on top)")
        opencl_device: str = Field("auto", description="auto, gpu, cpu, or a platform/device name substring")

        @model_validator(mode="after")
        def _check(self) -> Preprocess.Config:
            w, h = self.size
            if not (1 <= w <= 8192 and 1 <= h <= 8192):
                raise ValueError(f"size: expected width and height in 1..8192, got {self.size}")
            if any(s == 0 for s in self.scale):
                raise ValueError(f"scale: expected non-zero values, got {self.scale}")
            if self.backend == "openvino" and (self.resize != "stretch" or self.roi or self.tiles):
                raise ValueError("backend openvino folds preprocessing into the model with PrePostProcessor, "
                                 "which resizes by stretching: expected resize: stretch without roi or tiles")
            if sum(x is not None for x in (self.roi, self.tiles, self.objects)) > 1:
                raise ValueError("roi, tiles and objects exclude each other: expected one of them, got "
                                 + " and ".join(k for k in ("roi", "tiles", "objects") if getattr(self, k)))
            if self.objects is not None and self.backend == "openvino":
                raise ValueError("objects crops the frame on the opencl or cpu backend: expected backend auto, "
                                 "opencl or cpu")
            if self.size_to_source and (self.resize != "letterbox" or self.roi or self.tiles or self.objects
                                        or self.backend == "openvino"):
                raise ValueError("size_to_source sizes the tensor by the letterboxed picture: expected resize: "
                                 "letterbox without roi, tiles or objects, on the opencl or cpu backend")
            return self

    config: Config
    backend: str | None = None  # chosen in request(): opencl, cpu or openvino
    why: str = ""  # why auto chose the CPU, where it did
    cl: ClDevice | None = None
    size: tuple[int, int] | None = None  # the tensor's width, height: config.size, or fitted in offer()

    def tensor_size(self) -> tuple[int, int]:
        return self.size or self.config.size

    def _fitted(self, picture: tuple[int, int] | None) -> tuple[int, int]:
        """``size``, or with ``size_to_source`` the letterboxed ``picture`` rounded up to ``align``."""
        c = self.config
        if not c.size_to_source or picture is None:
            return c.size
        geo = geometry(picture[0], picture[1], c.size[0], c.size[1], "letterbox", None, c.upscale)
        a = c.align
        return min(c.size[0], -(-geo.new_w // a) * a), min(c.size[1], -(-geo.new_h // a) * a)

    def tensor_shape(self) -> tuple[int, ...]:
        w, h = self.tensor_size()
        cfg = self.config
        c = 1 if cfg.color == "GRAY" else 3
        n = cfg.tiles.count if cfg.tiles else cfg.objects.max if cfg.objects else 1
        return (n, c, h, w) if cfg.layout == "NCHW" else (n, h, w, c)

    # memory contracts ------------------------------------------------------------------------------
    def offer(self, port: str, inputs: Mapping[str, Offer], devices: Devices) -> Offer:
        c = self.config
        frame = inputs.get("frame")
        self.size = self._fitted(frame.picture if frame is not None else None)
        if c.backend == "openvino":  # nothing written here: the consumer folds this into its model
            return Offer(self.id, port, model_preprocessing={"color": c.color, "mean": c.mean, "scale": c.scale,
                                                             "layout": c.layout})
        writes = {"host"}
        if c.backend == "opencl" or (c.backend == "auto" and self._only_the_cpu(devices) is None and any(
                d["usable"] for p in devices.opencl.platforms() for d in p["devices"])):
            writes.add("opencl")
        return Offer(self.id, port, TensorSpec(self.tensor_shape(), np.dtype(DTYPES[c.dtype][1]).name,
                                               up_to=c.objects is not None),
                     frozenset(writes))

    def _only_the_cpu(self, devices: Devices) -> str | None:
        """With ``backend`` and ``opencl_device`` auto: the OpenCL device when every usable one is the CPU
        itself (PoCL), where OpenCV does the same work on the same cores without the OpenCL runtime's threads
        and launches (measured with PoCL on 2 cores: 12% faster at 720p, 0.4 ms less CPU per 176x144 frame);
        else None."""
        c = self.config
        if c.backend != "auto" or c.opencl_device != "auto":
            return None
        usable = [(p["platform"], d) for p in devices.opencl.platforms() for d in p["devices"] if d["usable"]]
        if not usable or any(d["type"] != "CPU" for _, d in usable):
            return None
        return f"{usable[0][0]} / {usable[0][1]['name']}"

    def request(self, port: str, offer: Offer, outputs: Mapping[str, Allocation], devices: Devices) -> Request:
        """Chooses the backend: the OpenCL context of the consumer's device when it asked for device
        buffers, else one of our own; asks the source for page-locked frames on a discrete GPU."""
        c = self.config
        alloc = outputs.get("tensor") or Allocation()
        self.backend, self.cl, self.why = c.backend, None, ""
        if c.backend == "openvino":
            return Request(by=self.id)
        cpu = self._only_the_cpu(devices)
        if alloc.placement == "opencl" and alloc.cl is not None:
            self.backend, self.cl = "opencl", alloc.cl
        elif cpu is not None:
            self.backend, self.why = "cpu", f"the only OpenCL device is the CPU ({cpu}): OpenCV on the same cores " \
                                            "costs less"
            log.info("node '%s': %s (backend: opencl to use it)", self.id, self.why)
        elif c.backend in ("auto", "opencl"):
            try:
                self.cl, self.backend = devices.opencl.device(c.opencl_device), "opencl"
            except Exception as e:
                if c.backend == "opencl":
                    raise RuntimeError(f"OpenCL unavailable ({e}); platforms: "
                                       f"{devices.opencl.platforms() or 'none'}") from e
                log.warning("node '%s': no OpenCL device (%s); preprocessing on the CPU with OpenCV", self.id, e)
                self.backend, self.why = "cpu", f"no OpenCL device ({e})"
        if self.cl is not None and not self.cl.unified_memory:
            return Request("pinned", cl=self.cl, by=self.id)  # a discrete GPU uploads page-locked frames by DMA
        return Request(by=self.id)

    def open(self, ctx: RunContext) -> None:
        c = self.config
        self.stats = ctx.stats
        self.kernel_ns: list[int] = []
        if self.backend is None:
            raise RuntimeError(f"preprocess '{self.id}' opened before its memory contract was resolved "
                               "(run it in a graph, or open it with flowpipe.testing.Harness)")
        self.stats["backend"] = self.backend
        if self.why:
            self.stats["backend_why"] = self.why
        if self.tensor_size() != c.size:
            self.stats["tensor_size"] = f"{self.tensor_size()[0]}x{self.tensor_size()[1]} (sized to the source; " \
                                        f"at most {c.size[0]}x{c.size[1]})"
        alloc = ctx.allocation("tensor")
        self.remote = alloc.placement == "opencl" and self.cl is not None
        if self.cl is not None:
            self.stats["opencl_device"] = self.cl.name
            self.stats["opencl_memory"] = "unified" if self.cl.unified_memory else "discrete (frames uploaded)"
            self._tls = threading.local()
            self.calls = ctx.devices.opencl.calls()
        self.shape = self.tensor_shape()
        self.np_dtype = DTYPES[c.dtype][1]
        self.nbytes = int(np.prod(self.shape)) * np.dtype(self.np_dtype).itemsize
        self.slots: BatchSlots | None = alloc.slots if self.backend != "openvino" else None
        self.full_shape = (self.slots.size * self.shape[0], *self.shape[1:]) if self.slots else self.shape
        self.stats["writes"] = f"slots of a batch of {self.slots.size}" if self.slots else "own pool"
        self.pool = None
        if self.backend != "openvino" and self.slots is None:
            self.pool = alloc.pool(self.nbytes, min(ctx.frames_in_flight(), 64))
        self._cl_bufs: dict[tuple[int, int], Any] = {}
        self._dev_src: dict[tuple[int, int], Any] = {}
        self._timed: deque[list[Any]] = deque()
        self._timed_lock = threading.Lock()
        self._frames = 0

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

    @property
    def _cl(self) -> ClDevice:
        """The OpenCL device of the ``opencl`` backend (set by ``offer``)."""
        assert self.cl is not None, "the opencl backend runs with a device"
        return self.cl

    def _queue(self) -> Any:
        """This thread's in-order queue: workers (one per stream) submit side by side instead of
        contending for one queue; the consumer waits on each tensor's own event, not on queue order."""
        q = getattr(self._tls, "queue", None)
        if q is None:
            import pyopencl as cl

            q = self._tls.queue = cl.CommandQueue(self._cl.context,
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
                raise RuntimeError(f"OpenCL kernel build failed for {fmt} on {self._cl.name}: "
                                   f"{' | '.join(first[:3])}") from None

        return self._cl.program(("preprocess.cl", *opts), build)

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
            return self._objects(frame, c.objects, tw, th)
        rois = c.tiles.rois(w, h) if c.tiles else [roi]
        geos = [geometry(w, h, tw, th, c.resize, r, c.upscale) for r in rois]
        frame.meta["preprocess"] = {"node": self.id, "tensor": [tw, th], **geos[0].as_meta()}
        if c.tiles:
            frame.meta["preprocess"]["tiles"] = [g.as_meta() for g in geos]
        return self._write(frame, geos)

    def _objects(self, frame: Frame, objects: Objects, tw: int, th: int) -> Frame:
        """One entry per object picked (``objects``): its index among the frame's detections and its crop's
        geometry go in the metadata; a frame without any gets no tensor memory at all."""
        picked = []
        for i in objects.pick(frame):
            geo = objects.geometry(frame.detections[i].box, frame.width, frame.height, tw, th)
            if geo is not None:
                picked.append((i, geo))
        frame.meta["preprocess"] = {"node": self.id, "tensor": [tw, th], "entries": len(picked),
                                    "objects": [i for i, _ in picked], "crops": [g.as_meta() for _, g in picked]}
        if not picked:
            frame.tensors["input"] = np.empty((0, *self.shape[1:]), self.np_dtype)
            return frame
        return self._write(frame, [g for _, g in picked])

    def _write(self, frame: Frame, geos: list[Geometry]) -> Frame:
        """The tensor's entries for ``geos`` written into pooled memory (a batch slot or our own buffer)."""
        data = frame.image
        if self.backend == "openvino":
            frame.tensors["input"] = data[None] if data.ndim == 3 else data
            return frame
        slots = self.slots
        lease: Slot | Lease
        if slots is not None:
            slot = lease = slots.take()
            base = slot.index * self.shape[0]  # the first batch entry this frame writes
        else:
            assert self.pool is not None, "a pool is made in open() when no batch slots were allocated"
            lease, base = self.pool.acquire(timeout=30), 0
        frame.hold(lease)
        if self.backend == "opencl":
            out = self._run_opencl(frame, geos, lease, base)
        else:
            out = self._host_view(lease, base)
            if len(geos) > 1 and self._canvas_pad is not None:
                self._run_cpu_entries(self._picture(frame), geos, out)
            else:
                picture = self._picture(frame) if len(geos) > 1 else None  # converted once for all entries
                for i, geo in enumerate(geos):
                    self._run_cpu(frame, geo, out[i], picture)
        frame.tensors["input"] = out
        return frame

    def _host_view(self, lease: Any, base: int) -> np.ndarray:
        return lease.buffer.array(self.full_shape, self.np_dtype)[base:base + self.shape[0]]

    def _src_buffer(self, frame: Frame) -> Any:
        import pyopencl as cl

        data = frame.image
        if not data.flags.c_contiguous and not (data.ndim >= 2 and data.strides[-1] == data.itemsize
                                                and (data.ndim == 2 or data.strides[-2] == data.shape[-1])):
            raise ValueError("frame pixels must have contiguous rows")
        if self._cl.unified_memory:
            buf = frame.buffer
            key = (data.ctypes.data, data.nbytes)
            if buf is not None and key in self._cl_bufs:
                return self._cl_bufs[key]
            clb = cl.Buffer(self._cl.context, cl.mem_flags.READ_ONLY | cl.mem_flags.USE_HOST_PTR, hostbuf=data)
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
            dev = self._dev_src[key] = cl.Buffer(self._cl.context, cl.mem_flags.READ_ONLY, data.nbytes)
        if data.flags.c_contiguous:
            self.calls.write(self._queue(), dev, data)
        else:
            cl.enqueue_copy(self._queue(), dev, data, is_blocking=False)
        memory.record(data.nbytes)
        return dev

    def _run_opencl(self, frame: Frame, geos: list[Geometry], lease: Any, base: int) -> Any:
        import pyopencl as cl

        c = self.config
        k = self._kernel(frame.format)
        src = self._src_buffer(frame)
        download = not self.remote and not self._cl.unified_memory
        if self.remote:
            dst = lease.buffer
        elif download:
            # a discrete GPU writing for a host consumer: into this thread's device buffer, then read into
            # the frame's place (never a host-pointer buffer over a whole batch: worker threads fill its
            # slots at once, and syncing one slot's mapping would carry the others' half-written entries)
            key = (threading.get_ident(), -self.nbytes)
            dst = self._dev_src.get(key)
            if dst is None:
                dst = self._dev_src[key] = cl.Buffer(self._cl.context, cl.mem_flags.WRITE_ONLY, self.nbytes)
        else:
            nbytes = self.nbytes * (self.slots.size if self.slots else 1)
            key = (lease.buffer.address, nbytes)
            dst = self._cl_bufs.get(key)
            if dst is None:
                dst = cl.Buffer(self._cl.context, cl.mem_flags.WRITE_ONLY | cl.mem_flags.USE_HOST_PTR,
                                hostbuf=lease.buffer.array((nbytes,)))
                self._cl_bufs[key] = dst
        stride = frame.image.strides[0]
        ow, oh = self.tensor_size()
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
        out = self._host_view(lease, base)
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

    def _picture(self, frame: Frame) -> np.ndarray:
        """The whole picture in the colour ``_run_cpu`` crops from (BGR where the tensor is gray)."""
        c = self.config
        return frame.bgr() if c.color == "GRAY" and frame.format != "GRAY" else _in_color(frame, c.color)

    def _run_cpu(self, frame: Frame, geo: Geometry, out: np.ndarray, picture: np.ndarray | None = None) -> None:
        """One batch entry (``out`` is [C,H,W] or [H,W,C]) with OpenCV: the picture converted straight to the
        tensor's colour order (YUV -> RGB in one call), resized where it must be, and written once into its
        place, mean and scale applied on the way; only the padding around it is filled. The values are the
        same as filling a padded canvas and normalizing it whole (the same float32 operations)."""
        c = self.config
        x, y, w, h = geo.roi
        gray = c.color == "GRAY" and frame.format != "GRAY"  # luma of the resized BGR, as the kernel takes it
        img = (picture if picture is not None else self._picture(frame))[y:y + h, x:x + w]
        if (geo.new_w, geo.new_h) != (w, h):
            img = cv2.resize(img, (geo.new_w, geo.new_h), interpolation=cv2.INTER_LINEAR)
        if gray:
            img = cv2.cvtColor(img, cv2.COLOR_BGR2GRAY)
        if img.ndim == 2:
            img = img[..., None]
        mean, inv, pad = self._host_norm
        nchw = c.layout == "NCHW"
        px, py, nw, nh = geo.pad_x, geo.pad_y, geo.new_w, geo.new_h
        if mean is None:  # 0..255 as they are: the one cast is the one pass
            values: np.ndarray = img
        else:
            values = (img.astype(np.float32) - mean) * inv
            if c.dtype == "u8":
                values = np.clip(np.rint(values), 0, 255)
        if nchw:
            np.copyto(out[:, py:py + nh, px:px + nw], values.transpose(2, 0, 1), casting="unsafe")
        else:
            np.copyto(out[py:py + nh, px:px + nw], values, casting="unsafe")
        oh, ow = (out.shape[1], out.shape[2]) if nchw else (out.shape[0], out.shape[1])
        if px or py or nw != ow or nh != oh:
            view = out.transpose(1, 2, 0) if nchw else out  # HWC either way: one pad value per channel
            view[:py] = pad
            view[py + nh:] = pad
            view[py:py + nh, :px] = pad
            view[py:py + nh, px + nw:] = pad

    @cached_property
    def _canvas_pad(self) -> int | None:
        """The padding as an 8-bit pixel where entries can be put together in 8 bits and normalized at once
        (a float tensor in colour, a whole pad value); else None."""
        c = self.config
        whole = float(c.pad_value).is_integer() and 0 <= c.pad_value <= 255
        return int(c.pad_value) if whole and c.dtype != "u8" and c.color != "GRAY" else None

    def _run_cpu_entries(self, picture: np.ndarray, geos: list[Geometry], out: np.ndarray) -> None:
        """Several entries (tiles, objects) with OpenCV: each resized into its place on an 8-bit canvas of
        them all, then normalized in one pass into ``out`` (per entry the same values as ``_run_cpu``'s, but
        the per-entry work is one resize: 0.04 ms an entry instead of 0.15 at 128x128)."""
        c = self.config
        k = len(geos)
        nchw = c.layout == "NCHW"
        oh, ow = (out.shape[2], out.shape[3]) if nchw else (out.shape[1], out.shape[2])
        canvas = np.full((k, oh, ow, picture.shape[2]), self._canvas_pad, np.uint8)
        for i, geo in enumerate(geos):
            x, y, w, h = geo.roi
            img = picture[y:y + h, x:x + w]
            if (geo.new_w, geo.new_h) != (w, h):
                img = cv2.resize(img, (geo.new_w, geo.new_h), interpolation=cv2.INTER_LINEAR)
            canvas[i, geo.pad_y:geo.pad_y + geo.new_h, geo.pad_x:geo.pad_x + geo.new_w] = img
        dst = out[:k]
        src = canvas.transpose(0, 3, 1, 2) if nchw else canvas
        mean, inv, _ = self._host_norm
        if mean is None:
            np.copyto(dst, src, casting="unsafe")
            return
        offset = mean * inv
        if (inv == inv[0]).all() and (offset == offset[0]).all():  # one scalar for every channel: fast loops
            np.multiply(src, inv[0], out=dst, casting="unsafe")
            np.subtract(dst, offset[0], out=dst, casting="unsafe")
            return
        for ch in range(len(inv)):
            part, into = (src[:, ch], dst[:, ch]) if nchw else (src[..., ch], dst[..., ch])
            np.multiply(part, inv[ch], out=into, casting="unsafe")
            np.subtract(into, offset[ch], out=into, casting="unsafe")

    @cached_property
    def _host_norm(self) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
        """float32 mean (None where mean and scale leave the values as they are) and 1/scale per channel, and
        the padding per channel as the tensor holds it (pad_value normalized like a pixel)."""
        c = self.config
        ch = 1 if c.color == "GRAY" else 3
        mean = np.asarray(c.mean[:ch], np.float32)
        inv = np.asarray([1.0 / s for s in c.scale[:ch]], np.float32)
        pad = (np.full(ch, c.pad_value, np.float32) - mean) * inv
        if c.dtype == "u8":
            pad = np.clip(np.rint(pad), 0, 255)
        plain = not mean.any() and bool((inv == 1).all())
        return None if plain else mean, inv, pad.astype(DTYPES[c.dtype][1])

    def close(self) -> None:
        if self._timed:
            self._read_profiles(wait=True)
        ns = self.kernel_ns
        if ns:
            arr = np.asarray(ns) / 1e6
            self.stats["kernel_ms"] = {"p50": round(float(np.median(arr)), 4),
                                       "p95": round(float(np.percentile(arr, 95)), 4)}
        self._cl_bufs.clear()
        self._dev_src.clear()
        if self.pool is not None:
            self.pool.close()


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

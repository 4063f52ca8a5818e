"""A ``preprocess`` node's settings (read by the node and by both backends)."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from flowpipe import exported, models
from flowpipe.node import NodeConfig

from .geometry import Objects, Tiles
from .interval import Along, Interval


def model_preprocessing(ref: str) -> dict[str, Any]:
    """A model's preprocessing as this node's settings: a registry entry's input, or what a model file says
    (``flowpipe.exported``); nothing for a file not on this host (the inference says so when the run starts)."""
    if models.is_registry_name(ref):
        spec = models.entry(ref)["input"]
        nhwc = spec.get("layout") == "NHWC"
        h, w = (spec["shape"][1], spec["shape"][2]) if nhwc else (spec["shape"][2], spec["shape"][3])
        out = {"size": (w, h), "layout": spec.get("layout", "NCHW"), "color": spec.get("color", "BGR"),
               "resize": spec.get("resize", "stretch")}
        for key in ("mean", "scale"):
            if key in spec:
                out[key] = tuple(float(v) for v in spec[key])
        if "dtype" in spec:
            out["dtype"] = spec["dtype"]
        if "pad_value" in spec:
            out["pad_value"] = float(spec["pad_value"])
        return out
    path = exported.model_file(ref)
    if not path.is_file():
        return {}
    info, shape, _ = exported.read_file(path)
    pre = exported.preprocessing(info, shape)
    return {"size": pre.size, "layout": pre.layout, "resize": pre.resize, "pad_value": float(pre.pad_value),
            "color": pre.color, "mean": _three(pre.mean), "scale": _three(pre.scale)}


def _three(values: list[float]) -> tuple[float, ...]:
    """Per-channel values (one given for all three)."""
    return tuple(float(v) for v in (values * 3 if len(values) == 1 else values))


class PreprocessConfig(NodeConfig):
    """A ``preprocess`` node's settings."""

    size: tuple[int, int] = Field((224, 224), description="tensor width, height")
    resize: Literal["stretch", "letterbox"] = Field(
        "stretch", description="stretch: the picture to size, its aspect ratio lost; letterbox: scaled to fit "
        "inside size, its aspect ratio kept, the rest padded with pad_value")
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
    interval: Interval | None = Field(None, description="the detector's interval: the frames between the ones "
                                      "it runs on go on without a tensor, for a tracker to fill in")
    along: Along | None = Field(None, description="a second detector on the frames a first one runs on: "
                                "{node: its preprocess, every, follow} (or the node id alone); the frames that one "
                                "passes over get no tensor here either")
    color: Literal["BGR", "RGB", "GRAY"] = Field("BGR", description="the tensor's channels, as the model takes them")
    mean: tuple[float, float, float] = Field((0.0, 0.0, 0.0), description="subtracted from each channel, before "
                                             "scale")
    scale: tuple[float, float, float] = Field((1.0, 1.0, 1.0), description="divide by this after mean")
    layout: Literal["NHWC", "NCHW"] = Field("NCHW", description="the tensor's axes: channels last or first")
    dtype: Literal["u8", "f16", "f32"] = Field("f32", description="the tensor's elements: u8 (rounded, clipped to "
                                              "0..255), f16 or f32")
    backend: Literal["auto", "opencl", "cpu", "openvino"] = Field(
        "auto", description="auto: OpenCL on a GPU, or where the consumer takes device buffers; else OpenCV "
        "(an OpenCL device that is the CPU itself, as PoCL, would run the same work on the same cores, with "
        "its own threads and launches on top); openvino: the inference folds it into its model "
        "(PrePostProcessor), which takes BGR frames (the source decodes to BGR for it)")
    opencl_device: str = Field("auto", description="auto, gpu, cpu, or a platform/device name substring")
    owner: Literal["auto", "always", "never"] = Field(
        "auto", description="over several processes, where a device owner serves the inference this node "
        "feeds: auto: the owner writes the tensor, on its device, when that inference binds device memory "
        "(OpenCL buffers on a GPU, which cannot cross processes): the frame crosses by fd and is uploaded "
        "once; always: the owner writes it whatever the device; never: each process writes its own")

    from_model: str | None = Field(None, description="size, resize, pad value, colour order, mean, scale and "
                                   "layout from this model's own metadata (an .onnx, an OpenVINO .xml, the folder "
                                   "ultralytics' OpenVINO export writes, or a registry name; flowpipe models "
                                   "inspect shows them); keys the graph sets win")

    @model_validator(mode="after")
    def _from_model(self) -> PreprocessConfig:
        if self.from_model:
            for key, value in model_preprocessing(self.from_model).items():
                if key not in self.model_fields_set:
                    setattr(self, key, value)
        return self

    @field_validator("along", mode="before")
    @classmethod
    def _along_by_name(cls, v: Any) -> Any:
        return {"node": v} if isinstance(v, str) else v

    @model_validator(mode="after")
    def _check(self) -> PreprocessConfig:
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
        if self.interval is not None and self.along is not None:
            raise ValueError("interval and along exclude each other: expected an interval of its own or "
                             "another preprocess's")
        if (self.interval is not None and self.objects is not None) or \
                ((self.interval is not None or self.along is not None) and self.backend == "openvino"):
            raise ValueError("interval passes over whole frames: expected it without objects, on the opencl or "
                             "cpu backend")
        if self.objects is not None and self.along is not None and (self.along.every != 1 or self.along.follow):
            raise ValueError("along with objects looks at the objects on the frames that preprocess wrote a tensor "
                             "for, each of them: expected along: {node} alone (every 1, no follow)")
        if self.objects is not None and self.backend == "openvino":
            raise ValueError("objects crops the frame on the opencl or cpu backend: expected backend auto, "
                             "opencl or cpu")
        if self.size_to_source and (self.resize != "letterbox" or self.roi or self.tiles or self.objects
                                    or self.backend == "openvino"):
            raise ValueError("size_to_source sizes the tensor by the letterboxed picture: expected resize: "
                             "letterbox without roi, tiles or objects, on the opencl or cpu backend")
        return self

"""``detect_decode``: any exported detector's outputs -> labelled boxes, masks and keypoints in source pixels,
the head and the labels taken from the model's own metadata (``flowpipe.exported``), graph keys over them."""
from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from flowpipe import exported, models
from flowpipe.frame import Detection, Frame
from flowpipe.node import NodeConfig, NodeContract, Resource, RunContext
from flowpipe.registry import lookup, register

from . import heads
from .base import Decoder, DecoderConfig, box_of, to_source


class DetectConfig(DecoderConfig):
    model: str = Field(description="the model the inference runs (a registry name, an .onnx, an OpenVINO .xml "
                       "or the folder ultralytics' OpenVINO export writes): its metadata names the head and labels")
    head: Literal["auto", "anchor_free", "objectness", "end_to_end", "detr", "yolox"] = Field(
        "auto", description="auto: from the output shapes and the model's metadata (flowpipe models inspect "
        "says which and why)")
    labels_file: str | None = Field(None, description="class names, one a line, where the model names none "
                                    "(labels: the list itself)")
    classes: list[str] | None = Field(None, description="labels kept (default: all)")
    masks: Literal["polygon", "none"] = Field("polygon", description="a segmentation head's masks in the "
                                              "records: each object's outline in source pixels, or none")
    score_threshold: float = Field(0.25, ge=0, le=1, description="detections scoring under this are dropped")
    # None (the exporter's own predictor's threshold) where the other decoders hold a number
    iou_threshold: float | None = Field(  # type: ignore[assignment]
        None, ge=0, le=1, description="suppression, per class: a box overlapping a better one this much (IoU) is "
        "dropped (end-to-end heads suppress in the model); default: the exporter's own predictor's (ultralytics: "
        "0.7), else 0.45; the model's own model_info iou_threshold first")
    max_detections: int = Field(300, ge=1, description="detections a frame at most, the best first")

    @model_validator(mode="after")
    def _fits_a_head(self) -> DetectConfig:
        """A model file on this host whose outputs fit no head is refused with the graph (``flowpipe
        validate``), in one line naming its output shapes; one with a dynamic output is decided on its first
        frame."""
        path = model_path(self.model)
        if path is None:
            return self
        info, _, outs = exported.read_file(path)
        if any(d < 0 for shape in outs.values() for d in shape):
            return self
        if self.labels:
            info.labels = list(self.labels)
        exported.choose_head(outs, info, None if self.head == "auto" else self.head)
        return self


def model_path(ref: str) -> Path | None:
    """The model file a reference names on this host (a folder's .xml), or None where it is fetched by name
    or not here."""
    if models.is_registry_name(ref) or ref.startswith(("http://", "https://")):
        return None
    path = exported.model_file(ref)
    return path if path.is_file() else None


@register("detect_decode")
class DetectDecode(Decoder):
    """Decodes any exported detector: YOLOv5/v7, YOLOv8/v9/v11 (with segmentation masks or pose keypoints),
    YOLOv10 and YOLO26 end to end, RT-DETR / RF-DETR / D-FINE, YOLOX. The head comes from the output shapes
    and the model's metadata, the labels from the metadata (or ``labels``, ``labels_file``), so a model
    exported by ultralytics or described by the OpenVINO Model API needs nothing more.

    YAML:
        - id: objects
          type: detect_decode
          config: {model: yolov8n.onnx, score_threshold: 0.3}
          inputs: {tensors: detect.tensors}
    """

    Config = DetectConfig
    config: DetectConfig

    @classmethod
    def contract(cls, config: NodeConfig) -> NodeContract:
        base = super().contract(config)
        assert isinstance(config, cls.Config)
        found = model_path(config.model)
        reads = (Resource(f"reads labels from {config.labels_file}", reads=config.labels_file, field="labels_file"),
                 ) if config.labels_file else ()
        said = (Resource(f"reads the metadata of {found}"),) if found is not None else ()
        return replace(base, resources=(*said, *reads))

    def open(self, ctx: RunContext) -> None:
        c = self.config
        self.inner = self._registry_decoder()
        if self.inner is not None:
            self.inner.open(ctx)
        path = model_path(c.model) or (models.resolve(c.model) if models.is_registry_name(c.model) else None)
        model = ctx.devices.openvino.read_model(path) if path is not None else None
        self.info = exported.read(model, path) if model is not None else exported.ExportedInfo()
        if c.labels_file:
            self.info.labels = [line.strip() for line in Path(c.labels_file).read_text().splitlines() if line.strip()]
        elif c.labels:
            self.info.labels = list(c.labels)
        self.choices: dict[tuple[tuple[str, tuple[int, ...]], ...], exported.HeadChoice] = {}
        self.lock = threading.Lock()
        ctx.stats["labels"] = len(self.info.labels or [])

    def _registry_decoder(self) -> Decoder | None:
        """A registry model's own decoder (its entry's ``postprocess``: SSD's anchors, a face model's), with this
        node's thresholds and classes; None for a model its metadata describes."""
        c = self.config
        if not models.is_registry_name(c.model):
            return None
        post = dict(models.entry(c.model).get("postprocess") or {})
        kind = post.pop("type", None)
        if kind is None or kind == "detect_decode":
            return None
        cls = lookup(kind)
        fields = cls.Config.model_fields
        mine = {k: getattr(c, k) for k in ("score_threshold", "iou_threshold", "max_detections", "labels", "classes")
                if k in fields and (k in c.model_fields_set or k not in post) and getattr(c, k) is not None}
        node = cls(self.id, cls.Config(**{k: v for k, v in post.items() if k in fields} | mine))
        return node if isinstance(node, Decoder) else None

    def _head(self, frame: Frame) -> exported.HeadChoice:
        shapes = tuple((k, tuple(np.shape(v))) for k, v in frame.tensors.items() if k != "input")
        with self.lock:
            choice = self.choices.get(shapes)
            if choice is None:
                head = None if self.config.head == "auto" else self.config.head
                choice = self.choices[shapes] = exported.choose_head(dict(shapes), self.info, head)
        return choice

    def process(self, frame: Frame, port: str) -> Frame:
        if frame.skipped:  # the detector's interval passed over it: nothing was sought
            return frame
        if self.inner is not None:
            out = self.inner.process(frame, port)
            assert isinstance(out, Frame)
            return out
        choice = self._head(frame)
        size = frame.layout.tensor if frame.layout is not None else (1, 1)
        found = self._decode(frame, choice, size)
        kept = self._detections(frame, found, size)
        wanted = self.config.classes
        frame.detections = [d for d in kept if wanted is None or d.label in wanted]
        return frame

    def close(self) -> None:
        inner = getattr(self, "inner", None)
        if inner is not None:
            inner.close()

    def _iou(self) -> float:
        """The suppression threshold: the graph's (retuned as it runs), else the exporter's predictor's."""
        iou = self.config.iou_threshold
        return self.info.iou if iou is None else iou

    def _decode(self, frame: Frame, choice: exported.HeadChoice, size: tuple[int, int]) -> heads.Found:
        c = self.config
        iou = self._iou()
        outs = [np.asarray(frame.tensors[name])[0] for name in choice.outputs]
        protos = next((np.asarray(v)[0] for k, v in frame.tensors.items()
                       if k != "input" and np.ndim(v) == 4 and np.shape(v)[1] == 32), None)
        extra = heads.Extra(choice.extra, choice.extra_count, protos)  # type: ignore[arg-type]
        match choice.kind:
            case "anchor_free":
                return heads.anchor_free(outs[0], choice.classes, size, c.score_threshold, iou,
                                         c.max_detections, extra)
            case "objectness":
                return heads.objectness(outs[0], choice.classes, size, c.score_threshold, iou,
                                        c.max_detections, extra)
            case "end_to_end":
                return heads.end_to_end(outs[0], size, c.score_threshold, c.max_detections, extra)
            case "detr" if len(outs) == 2:
                return heads.detr(outs[0], outs[1], size, c.score_threshold, c.max_detections)
            case "detr":  # one output [Q, 4+C]: boxes and scores (sigmoid applied in the model)
                return heads.detr(outs[0][:, :4], outs[0][:, 4:], size, c.score_threshold, c.max_detections,
                                  sigmoid=False)
            case _:
                return heads.yolox(outs[0], choice.classes, size, c.score_threshold, iou,
                                   c.max_detections)

    def _detections(self, frame: Frame, found: heads.Found, size: tuple[int, int]) -> list[Detection]:
        names = self.info.labels or []
        boxes = to_source(frame, found.boxes.astype(np.float64))
        out = []
        for i in range(len(found)):
            k = int(found.classes[i])
            d = Detection(box_of(boxes[i]), float(found.scores[i]), names[k] if k < len(names) else str(k), k)
            if found.keypoints is not None:
                pts = found.keypoints[i]
                xy = to_source(frame, np.concatenate([pts[:, :2], pts[:, :2]], 1).astype(np.float64))[:, :2]
                d.keypoints = [(float(x), float(y)) for x, y in xy]
                d.keypoint_scores = [float(s) for s in pts[:, 2]]
            if found.masks is not None and self.config.masks == "polygon":
                d.mask = self._outline(frame, found.masks[i])
            out.append(d)
        return out

    @staticmethod
    def _outline(frame: Frame, mask: heads.Mask) -> list[list[float]]:
        """A mask's outline (its largest part's, in tensor pixels) in source pixels."""
        pts = heads.polygon(mask)
        if not pts:
            return []
        xy = np.asarray(pts, np.float64)
        src = to_source(frame, np.concatenate([xy, xy], 1))[:, :2]
        return [[round(float(x), 1), round(float(y), 1)] for x, y in src]

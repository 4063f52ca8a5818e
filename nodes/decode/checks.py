"""Second looks: a model run on crops around faces already found, whose scores confirm, keep or reject
each of them (BlazeFace, CenterFace, an image classifier)."""
from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, field_validator

from flowpipe.frame import Frame
from flowpipe.node import NodeConfig, RunContext
from flowpipe.registry import register

from .base import Decoder, blazeface_anchors, output_of


def _looked_at(frame: Frame) -> list[int]:
    """The detections a preprocess with ``objects`` cut a crop of, in entry order."""
    layout = frame.layout
    if layout is None or layout.objects is None:
        raise ValueError("no objects were cut for this frame: expected a preprocess with objects upstream")
    return list(layout.objects)


def _places(frame: Frame, objects: list[int]) -> np.ndarray:
    """Where each object's centre lies in its entry, (N, 2) as a fraction of the tensor's width and height:
    the middle, unless the crop was slid inside the picture (``objects.inside``)."""
    layout = frame.layout
    if layout is None or not layout.places:
        return np.full((len(objects), 2), 0.5)
    size = layout.tensor
    out = np.empty((len(objects), 2))
    for k, (i, geo) in enumerate(zip(objects, layout.places)):
        x1, y1, x2, y2 = frame.detections[i].box
        rx, ry, rw, rh = geo.roi
        out[k, 0] = (((x1 + x2) / 2 - rx) * geo.new_w / rw + geo.pad_x) / size[0]
        out[k, 1] = (((y1 + y2) / 2 - ry) * geo.new_h / rh + geo.pad_y) / size[1]
    return out


class _CheckConfig(NodeConfig):
    attribute: str = Field("face", description="the attribute the look is written as")


@register("blazeface_check")
class BlazeFaceCheck(Decoder):
    """A second look at objects found before: BlazeFace on the crop around each object a preprocess with
    ``objects`` cut (a square of twice its size), scored by how face-like the object's place in the crop is
    (the best score among the anchors near it), written on the object as ``attributes[attribute]``. A
    tracker's ``checks`` start tracks on it (a face its detector scored low).

    YAML:
        - id: look_pre
          type: preprocess
          config: {size: [128, 128], color: RGB, layout: NHWC, mean: [127.5, 127.5, 127.5],
                   scale: [127.5, 127.5, 127.5], objects: {scores: [0.25, 0.6], max: 32, scale: 2.0}}
          inputs: {frame: faces.detections}
        - {id: look, type: inference, config: {model: blazeface_short}, inputs: {tensor: look_pre.tensor}}
        - {id: checked, type: blazeface_check, inputs: {tensors: look.tensors}}
    """

    class Config(_CheckConfig):
        variant: Literal["short", "full"] = Field("short", description="the BlazeFace model: short range "
                                                  "(128x128) or full range (192x192)")
        centre: float = Field(0.2, gt=0, le=0.5, description="anchors this far from the object's centre at most "
                                                              "(a fraction of the crop's side) count")
        output: str = Field("classificators", description="BlazeFace's score output")

    config: Config

    def open(self, ctx: RunContext) -> None:
        self.anchors = blazeface_anchors(self.config.variant)

    def process(self, frame: Frame, port: str) -> Frame:
        c = self.config
        objects = _looked_at(frame)
        if not objects:
            return frame  # nothing was looked at
        cls = output_of(frame, c.output, 0)
        n = len(self.anchors)
        if cls.size % n:
            raise ValueError(f"expected BlazeFace {c.variant} scores of {n} anchors per crop in "
                             f"{c.output!r}, got {list(cls.shape)}")
        logits = cls.reshape(-1, n)[: len(objects)].astype(np.float64)
        for i, row, place in zip(objects, logits, _places(frame, objects)):
            near = (np.abs(self.anchors - place) < c.centre).all(1)
            look = 1.0 / (1.0 + np.exp(-np.clip(row[near].max(), -80, 80))) if near.any() else 0.0
            frame.detections[i].attributes[c.attribute] = float(look)
        return frame


@register("centerface_check")
class CenterFaceCheck(Decoder):
    """A second, closer look at objects found before: CenterFace on the crop around each object a
    preprocess with ``objects`` cut (a square of twice its size, at 128x128: a 40 px face seen at 64 px),
    scored by its heat map at the object's place in the crop (the best within ``centre`` of the crop's
    side), written on the object as ``attributes[attribute]``. A face keeps its score or gains; what only
    looked like a face in the whole picture (a lamp, a window, a pattern on a wall) loses it: a tracker's
    ``checks`` (a reject over its look) starts no track on it.

    YAML:
        - id: look_pre
          type: preprocess
          config: {size: [128, 128], color: RGB, layout: NCHW, objects: {scores: [0.25, 0.7], max: 64,
                   scale: 2.0, inside: true}}
          inputs: {frame: faces.detections}
        - {id: look, type: inference, config: {model: centerface}, inputs: {tensor: look_pre.tensor}}
        - {id: checked, type: centerface_check, inputs: {tensors: look.tensors}}
    """

    class Config(_CheckConfig):
        centre: float = Field(0.125, gt=0, le=0.5, description="heat-map cells this far from the object's "
                                                               "centre at most (a fraction of the crop's side) "
                                                               "count")

    config: Config

    def process(self, frame: Frame, port: str) -> Frame:
        c = self.config
        objects = _looked_at(frame)
        if not objects:
            return frame  # nothing was looked at
        heat = [np.asarray(v) for k, v in frame.tensors.items() if k != "input" and np.ndim(v) == 4
                and np.shape(v)[1] == 1]
        if len(heat) != 1 or heat[0].shape[0] < len(objects):
            raise ValueError(f"expected CenterFace's heat map [N,1,h,w] for {len(objects)} crops, got "
                             f"{[list(np.shape(v)) for k, v in frame.tensors.items() if k != 'input']}")
        for k, (i, place) in enumerate(zip(objects, _places(frame, objects))):
            h = heat[0][k, 0]
            cy, cx = (np.round(place[::-1] * h.shape)).astype(int)
            ry, rx = max(1, round(c.centre * h.shape[0])), max(1, round(c.centre * h.shape[1]))
            near = h[max(0, cy - ry):cy + ry + 1, max(0, cx - rx):cx + rx + 1]
            frame.detections[i].attributes[c.attribute] = float(near.max()) if near.size else 0.0
        return frame


@register("class_check")
class ClassCheck(Decoder):
    """A classifier's look at objects found before: its scores on the crop around each object a preprocess with
    ``objects`` cut, summed over the classes ``classes`` names (an index range of its output, first and last
    included), written on the object as ``attributes[attribute]``: the share of its belief on them. An ImageNet
    classifier on a face's crop, over ImageNet's animals (classes 0 to 397, tench to puffer), says how much the
    face is an animal's (``animal_faces``' ``kind``).

    YAML:
        - id: kind_pre
          type: preprocess
          config: {size: [280, 280], color: RGB, layout: NHWC, dtype: u8,
                   objects: {labels: [face], not_in: {person: 0.5}, max: 8, scale: 1.5}}
          inputs: {frame: persons.detections}
        - {id: kind, type: inference, config: {model: efficientnet_lite3}, inputs: {tensor: kind_pre.tensor}}
        - {id: kinds, type: class_check, config: {attribute: animal, classes: [0, 397]},
           inputs: {tensors: kind.tensors}}
    """

    class Config(_CheckConfig):
        classes: tuple[int, int] = Field(description="the first and last class (output index) summed, both included")
        softmax: bool = Field(False, description="the output is logits (a softmax is taken); false: scores "
                              "already (a quantized softmax too: each crop's scores are taken over their sum)")
        output: str | None = Field(None, description="the classifier's output (default: the frame's one tensor of "
                                   "two dimensions with more columns than the last class: the models before it "
                                   "left theirs on the frame too)")

        @field_validator("classes")
        @classmethod
        def _range(cls, v: tuple[int, int]) -> tuple[int, int]:
            if not 0 <= v[0] <= v[1]:
                raise ValueError(f"expected the first and last class, 0 <= first <= last, got {list(v)}")
            return v

    config: Config

    def process(self, frame: Frame, port: str) -> Frame:
        c = self.config
        layout = frame.layout
        if layout is not None and layout.objects is None and layout.filled == 0:
            return frame  # its preprocess passed over the frame (``along``: the detector it follows did not run)
        objects = _looked_at(frame)
        if not objects:
            return frame  # nothing was looked at
        out = output_of(frame, c.output, 0) if c.output else self._scores(frame)
        scores = out.reshape(out.shape[0], -1)[: len(objects)].astype(np.float64)
        if scores.shape[0] < len(objects) or scores.shape[1] <= c.classes[1]:
            raise ValueError(f"expected a classifier's scores [N, C] for {len(objects)} crops with C over "
                             f"{c.classes[1]}, got {list(out.shape)}")
        if c.softmax:
            scores = np.exp(scores - scores.max(1, keepdims=True))
        scores /= np.maximum(scores.sum(1, keepdims=True), 1e-12)
        share = scores[:, c.classes[0]:c.classes[1] + 1].sum(1)
        for i, v in zip(objects, share):
            frame.detections[i].attributes[c.attribute] = float(v)
        return frame

    def _scores(self, frame: Frame) -> np.ndarray:
        """The classifier's scores among what the models before it left on the frame: the one [N, C] tensor
        with C over the last class summed."""
        found = [(k, v) for k, v in frame.tensors.items() if k != "input" and np.ndim(v) == 2
                 and np.shape(v)[1] > self.config.classes[1]]
        if len(found) != 1:
            raise ValueError(f"expected one classifier's scores [N, C] with C over {self.config.classes[1]}, got "
                             f"{[(k, list(np.shape(v))) for k, v in found] or 'none'}: name it (output)")
        return np.asarray(found[0][1])



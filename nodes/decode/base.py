"""What every decoder shares: raw model outputs -> ``frame.detections`` with boxes in source-frame pixels.

Boxes are decoded in tensor pixels and mapped back through the layout the preprocess node recorded
(``frame.layout``: ROI, letterbox scale and padding), so they land on the original frame whatever the resize
mode.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Literal

import cv2
import numpy as np
from pydantic import Field

from flowpipe.frame import Detection, Frame, Placement
from flowpipe.node import PIXELS_ALL, Node, NodeConfig, NodeContract


def to_source(frame: Frame, boxes: np.ndarray, tile: int = 0) -> np.ndarray:
    """(N, 4) x1y1x2y2 in tensor pixels (of batch entry ``tile``) -> source-frame pixels, clipped."""
    layout = frame.layout
    if layout is None or not layout.places:
        return boxes
    place = layout.places[tile if len(layout.places) > 1 else 0]
    out = np.empty_like(boxes, dtype=np.float64)
    out[:, [0, 2]], out[:, [1, 3]] = place.to_source(boxes[:, [0, 2]], boxes[:, [1, 3]])
    if frame.data is not None:
        out[:, [0, 2]] = out[:, [0, 2]].clip(0, frame.width)
        out[:, [1, 3]] = out[:, [1, 3]].clip(0, frame.height)
    return out


def nms(boxes: np.ndarray, scores: np.ndarray, iou: float, top_k: int = 0) -> np.ndarray:
    """Indices kept by non-maximum suppression (OpenCV's NMSBoxes), best first."""
    if len(boxes) == 0:
        return np.zeros(0, np.int64)
    xywh = np.column_stack([boxes[:, 0], boxes[:, 1], boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]])
    keep = cv2.dnn.NMSBoxes(xywh.tolist(), scores.astype(float).tolist(), 0.0, iou, top_k=top_k)
    return np.asarray(keep, np.int64).reshape(-1)


def weighted_nms(boxes: np.ndarray, scores: np.ndarray, iou: float, top_k: int = 0,
                 points: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """MediaPipe's weighted suppression: each cluster of boxes overlapping the best remaining one by ``iou``
    or more becomes one box, their score-weighted mean (keypoints alike), with the best score. Where plain
    NMS keeps a shifted duplicate just under the threshold, this blends it in, and the box it gives is
    steadier from frame to frame. Returns boxes, scores and keypoints, best first."""
    order = np.argsort(-scores, kind="stable")
    boxes, scores = boxes[order], scores[order]
    points = points[order] if points is not None else None
    alive = np.ones(len(boxes), bool)
    out_b, out_s, out_p = [], [], []
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    for i in range(len(boxes)):
        if not alive[i]:
            continue
        x1 = np.maximum(boxes[i, 0], boxes[:, 0])
        y1 = np.maximum(boxes[i, 1], boxes[:, 1])
        x2 = np.minimum(boxes[i, 2], boxes[:, 2])
        y2 = np.minimum(boxes[i, 3], boxes[:, 3])
        inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
        over = alive & (inter / np.maximum(area[i] + area - inter, 1e-9) >= iou)
        over[i] = True
        w = scores[over] / scores[over].sum()
        out_b.append((boxes[over] * w[:, None]).sum(0))
        out_s.append(scores[i])
        if points is not None:
            out_p.append((points[over] * w[:, None, None]).sum(0))
        alive &= ~over
        if top_k and len(out_b) >= top_k:
            break
    if not out_b:
        return np.zeros((0, 4)), np.zeros(0), None if points is None else np.zeros((0, *points.shape[1:]))
    return np.array(out_b), np.array(out_s), np.array(out_p) if points is not None else None


def output_of(frame: Frame, name: str | None, index: int, names: list[str] | None = None) -> np.ndarray:
    if name:
        if name not in frame.tensors:
            raise KeyError(f"no output tensor {name!r}; have: {', '.join(k for k in frame.tensors if k != 'input')}")
        return frame.tensors[name]
    outs = [v for k, v in frame.tensors.items() if k != "input"]
    return outs[index]


def box_of(b: np.ndarray) -> tuple[float, float, float, float]:
    return float(b[0]), float(b[1]), float(b[2]), float(b[3])


def cut_by_tile(box: np.ndarray, place: Placement, width: int, height: int, near: float = 0.05) -> bool:
    """Whether ``box`` (source pixels) reaches a side of its entry's part of the frame (``place.roi``) that
    is not the picture's own edge, within ``near`` of the part's shorter side (a detector's box stops short
    of what it cannot see): an object cut there by a tile."""
    x, y, w, h = place.roi
    if (x, y, w, h) == (0, 0, width, height):
        return False
    margin = max(2.0, near * min(w, h))
    return bool((x > 0 and box[0] <= x + margin) or (y > 0 and box[1] <= y + margin)
                or (x + w < width and box[2] >= x + w - margin) or (y + h < height and box[3] >= y + h - margin))


def entries_read(frame: Frame) -> int:
    """How many entries of the frame's tensor hold what its preprocess wrote: those it filled (an ``objects``
    tensor; the rest ran on stale data), else one per placement, at least one."""
    layout = frame.layout
    if layout is None:
        return 1
    return int(layout.filled) if layout.filled is not None else max(1, len(layout.places))


def picture_of(frame: Frame) -> tuple[int, int]:
    """The frame's picture size: from its pixels, else from the parts of it its entries show (tiles cover
    it)."""
    if frame.data is not None:
        return frame.width, frame.height
    places = frame.layout.places if frame.layout is not None else ()
    return (max((p.roi[0] + p.roi[2] for p in places), default=0),
            max((p.roi[1] + p.roi[3] for p in places), default=0))


def halves(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two boxes cut by tiles are parts of one object: they overlap side by side (or one above the
    other) and share most of their extent across."""
    ix = min(a[2], b[2]) - max(a[0], b[0])
    iy = min(a[3], b[3]) - max(a[1], b[1])
    if ix <= 0 or iy <= 0:
        return False
    across_y = iy / max(min(a[3] - a[1], b[3] - b[1]), 1e-9)
    across_x = ix / max(min(a[2] - a[0], b[2] - b[0]), 1e-9)
    return bool(across_y >= 0.7 > across_x or across_x >= 0.7 > across_y)


def detections_of(frame: Frame, boxes: np.ndarray, scores: np.ndarray, class_ids: np.ndarray,
                labels: list[str] | None) -> list[Detection]:
    """Source-pixel boxes -> Detections, named by the config's labels or the model's registry labels (the
    class id as text when neither names it)."""
    names = labels or frame.meta.get("labels") or []
    return [Detection(box_of(b), float(s), names[i] if i < len(names) else str(int(i)), int(i))
            for b, s, i in zip(boxes, scores, class_ids.astype(np.int64))]


@lru_cache(maxsize=8)
def blazeface_anchors(variant: str) -> np.ndarray:
    """MediaPipe SSD anchors (fixed size) for BlazeFace: (N, 2) centres in [0, 1]."""
    if variant == "short":
        size, strides, per_layer = 128, [8, 16, 16, 16], 2
    else:
        size, strides, per_layer = 192, [4], 1
    anchors = []
    i = 0
    while i < len(strides):
        j = i
        while j < len(strides) and strides[j] == strides[i]:
            j += 1
        n = per_layer * (j - i)
        g = int(np.ceil(size / strides[i]))
        ys, xs = np.meshgrid((np.arange(g) + 0.5) / g, (np.arange(g) + 0.5) / g, indexing="ij")
        centres = np.stack([xs.ravel(), ys.ravel()], 1)
        anchors.append(np.repeat(centres, n, axis=0))
        i = j
    return np.concatenate(anchors).astype(np.float32)


#: What a decoder reads afresh each frame, so a running graph may change it.
DECODER_TUNABLE = frozenset({"score_threshold", "iou_threshold", "max_detections"})


class Decoder(Node):
    """Model outputs in, ``frame.detections`` out (written or annotated), one frame at a time."""

    inputs = {"tensors": "tensors"}
    outputs = {"detections": "detections"}

    @classmethod
    def contract(cls, config: NodeConfig) -> NodeContract:
        return cls.declare(pixels=PIXELS_ALL, one_worker=None,  # never reads the pixels; no state across frames
                           tunable=DECODER_TUNABLE & set(type(config).model_fields))


class DecoderConfig(NodeConfig):
    score_threshold: float = Field(0.5, ge=0, le=1, description="detections scoring under this are dropped")
    iou_threshold: float = Field(0.3, ge=0, le=1, description="suppression: a box overlapping a better one this "
                                 "much (IoU) is dropped, or blended into it")
    max_detections: int = Field(100, ge=1, description="detections a frame at most, the best first")
    labels: list[str] | None = Field(None, description="class names by class id (default: the model's, from the "
                                     "registry or its metadata; a face decoder names its faces by the first, 'face')")


class FaceConfig(DecoderConfig):
    keypoints: bool = Field(False, description="each face carries the model's landmarks (eyes, nose, mouth)")
    suppression: Literal["weighted", "nms"] = Field(
        "weighted", description="weighted: overlapping boxes blended into one (MediaPipe's face detection); "
        "nms: the best kept, the others dropped")


def faces_of(boxes: list[np.ndarray], scores: list[np.ndarray], points: list[np.ndarray],
           c: FaceConfig) -> list[Detection]:
    """Face candidates of every batch entry (tile) in source pixels -> one Detection per face, after the
    config's suppression (``weighted`` or ``nms``), best first."""
    if not boxes:
        return []
    b, s = np.concatenate(boxes), np.concatenate(scores).astype(np.float64)
    kps = np.concatenate(points) if points else None
    if c.suppression == "weighted":
        b, s, kps = weighted_nms(b, s, c.iou_threshold, c.max_detections, kps)
        keep = np.arange(len(b))
    else:
        keep = nms(b, s, c.iou_threshold, c.max_detections)
    label = (c.labels or ["face"])[0]
    return [Detection(box_of(b[k]), float(s[k]), label, 0,
                      keypoints=[(float(x), float(y)) for x, y in kps[k]] if kps is not None else None)
            for k in keep]



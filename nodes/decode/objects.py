"""Object detectors' outputs -> labelled boxes in source pixels: YOLOv8 and SSD (the TensorFlow Object
Detection API's outputs, or its box encodings against anchors)."""
from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import Field

from flowpipe.frame import Frame, unknown_labels
from flowpipe.registry import register

from ..track.geometry import share_inside
from .base import (
    Decoder,
    DecoderConfig,
    cut_by_tile,
    detections_of,
    entries_read,
    halves,
    nms,
    output_of,
    picture_of,
    to_source,
)


@register("yolov8_decode")
class YoloV8Decode(Decoder):
    """Decodes YOLOv8-style outputs [1, 4+classes, N] (cx, cy, w, h, class scores) with per-class NMS."""

    class Config(DecoderConfig):
        score_threshold: float = Field(0.25, ge=0, le=1, description="detections scoring under this are dropped")
        iou_threshold: float = Field(0.45, ge=0, le=1, description="suppression, per class: a box overlapping a "
                                     "better one this much (IoU) is dropped")
        output: str | None = Field(None, description="the output tensor's name (default: the model's first)")

    config: Config

    def process(self, frame: Frame, port: str) -> Frame:
        if frame.skipped:  # the detector's interval passed over it: nothing was sought
            return frame
        c = self.config
        out = output_of(frame, c.output, 0)
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
        frame.detections = detections_of(frame, to_source(frame, boxes[keep]), score[keep], cls_id[keep], c.labels)
        return frame


@register("ssd_decode")
class SsdDecode(Decoder):
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

    class Config(DecoderConfig):
        output: str | None = Field(None, description="the output tensor's name where the model has one (default: "
                                   "its first)")
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
        rows = rows[(rows[:, 0] < entries_read(frame)) & (rows[:, 2] >= c.score_threshold)]
        entries = rows[:, 0].astype(np.int64)
        boxes = rows[:, 3:7] * np.array([tw, th, tw, th], np.float32)
        src = np.zeros((len(rows), 4), np.float64)
        for e in np.unique(entries):  # each entry through its own placement (a tile's, or the whole frame's)
            src[entries == e] = to_source(frame, boxes[entries == e], int(e))
        keep = self._across_entries(frame, src, rows[:, 2], rows[:, 1], entries)
        found = detections_of(frame, src[keep], rows[keep, 2], rows[keep, 1], c.labels)
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
        out = output_of(frame, self.config.output, 0)
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
        for e in range(min(len(yx), entries_read(frame))):
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
        size = picture_of(frame)
        cut = [tiles and layout is not None and cut_by_tile(boxes[i], layout.places[int(entries[i])], *size)
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
                            and entries[i] != entries[j] and halves(boxes[i], boxes[j])):
                        boxes[i] = [min(boxes[i][0], boxes[j][0]), min(boxes[i][1], boxes[j][1]),
                                    max(boxes[i][2], boxes[j][2]), max(boxes[i][3], boxes[j][3])]
                        taken.add(j)  # into the better part (idx is best first)
            idx = [i for i in idx if i not in taken]
            chosen = nms(boxes[idx], scores[idx], self.config.tiles_iou)
            keep += [idx[j] for j in chosen]
        return sorted(keep, key=lambda i: -scores[i])



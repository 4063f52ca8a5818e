"""The heads detectors are exported with, decoded as pure functions over arrays: no frame, no node, no model.

Each takes one batch entry's outputs (the batch axis already taken off) and gives ``Found``: boxes
(N, 4) as x1, y1, x2, y2 in tensor pixels, scores, class ids, best first, and where the head has them each
object's instance mask (``Mask``: at the tensor's resolution, inside its box) and keypoints (N, K, 3: x, y
in tensor pixels, score). Suppression is per class (a person never suppresses the
bicycle it rides), as the exporters' own ``predict`` does.

| head | outputs (one entry) | exported by |
|---|---|---|
| ``anchor_free`` | (4+C+E, N): cx, cy, w, h, class scores, E extra | YOLOv8, v9, v11 (ultralytics), YOLO-NAS |
| ``objectness`` | (N, 5+C+E): cx, cy, w, h, objectness, class scores, extra | YOLOv5, YOLOv7 |
| ``end_to_end`` | (N, 6+E): x1, y1, x2, y2, score, class | YOLOv10, YOLO26 (no suppression) |
| ``detr`` | (Q, 4) normalized cx, cy, w, h beside (Q, C) logits, or (Q, 4+C) | RT-DETR, RF-DETR, D-FINE |
| ``yolox`` | (N, 5+C) grid offsets, log sizes, objectness, classes | YOLOX (decode not in the model) |

E extra: 32 mask coefficients of a segmentation head (masks from the prototypes, (32, h, w)), or K*3
keypoint values of a pose head (x, y, visibility).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import cv2
import numpy as np

Head = Literal["anchor_free", "objectness", "end_to_end", "detr", "yolox"]
HEADS: tuple[Head, ...] = ("anchor_free", "objectness", "end_to_end", "detr", "yolox")


@dataclass(frozen=True)
class Mask:
    """One object's mask in tensor pixels: ``bits`` (h, w) bool, its top-left pixel at (``x``, ``y``)."""

    x: int
    y: int
    bits: np.ndarray

    def whole(self, size: tuple[int, int]) -> np.ndarray:
        """The mask over the whole tensor of ``size`` (w, h)."""
        out = np.zeros((size[1], size[0]), bool)
        h, w = self.bits.shape
        out[self.y:self.y + h, self.x:self.x + w] = self.bits
        return out


@dataclass(frozen=True)
class Found:
    """Objects found in one batch entry, best first, in tensor pixels."""

    boxes: np.ndarray  # (N, 4) float32 x1, y1, x2, y2
    scores: np.ndarray  # (N,) float32
    classes: np.ndarray  # (N,) int64
    masks: list[Mask] | None = None  # each object's, at the tensor's resolution inside its box
    keypoints: np.ndarray | None = None  # (N, K, 3) x, y, score

    def __len__(self) -> int:
        return len(self.boxes)


@dataclass(frozen=True)
class Extra:
    """What a head carries after each object's box and classes: ``masks`` coefficients (with the prototypes
    they weigh) or ``keypoints`` (K of them, three values each)."""

    kind: Literal["none", "masks", "keypoints"] = "none"
    count: int = 0  # mask coefficients, or keypoints
    protos: np.ndarray | None = None  # (count, h, w): the segmentation head's prototypes

    @property
    def width(self) -> int:
        return self.count * 3 if self.kind == "keypoints" else self.count


NONE = Extra()


def xywh_to_xyxy(b: np.ndarray) -> np.ndarray:
    return np.stack([b[:, 0] - b[:, 2] / 2, b[:, 1] - b[:, 3] / 2, b[:, 0] + b[:, 2] / 2, b[:, 1] + b[:, 3] / 2], 1)


def suppress(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, iou: float, top_k: int) -> np.ndarray:
    """Indices kept by per-class non-maximum suppression, best first, ``top_k`` at most: boxes moved apart
    by class so that no class suppresses another (one call to OpenCV's NMSBoxes)."""
    if len(boxes) == 0:
        return np.zeros(0, np.int64)
    span = float(np.abs(boxes).max()) + 1.0
    moved = boxes + classes[:, None].astype(np.float64) * span * 2
    xywh = np.column_stack([moved[:, 0], moved[:, 1], moved[:, 2] - moved[:, 0], moved[:, 3] - moved[:, 1]])
    keep = cv2.dnn.NMSBoxes(xywh.tolist(), scores.astype(float).tolist(), 0.0, iou, top_k=top_k)
    return np.asarray(keep, np.int64).reshape(-1)


def _found(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, extra: np.ndarray | None, spec: Extra,
           size: tuple[int, int]) -> Found:
    """``Found`` of the rows kept, with the masks or keypoints of their extra values."""
    masks = keypoints = None
    if spec.kind == "masks" and extra is not None and spec.protos is not None:
        masks = masks_of(extra, spec.protos, boxes, size)
        kept = [i for i, m in enumerate(masks) if m.bits.any()]  # an object with no mask is none (ultralytics)
        boxes, scores, classes, masks = boxes[kept], scores[kept], classes[kept], [masks[i] for i in kept]
    elif spec.kind == "keypoints" and extra is not None:
        keypoints = extra.reshape(len(extra), spec.count, 3).astype(np.float32)
    return Found(boxes.astype(np.float32), scores.astype(np.float32), classes.astype(np.int64), masks, keypoints)


def _kept(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, extra: np.ndarray | None, spec: Extra,
          size: tuple[int, int], threshold: float, iou: float | None, top_k: int) -> Found:
    """Rows from ``threshold`` up, suppressed per class (``iou``; None: the head suppressed them itself)."""
    m = scores >= threshold
    boxes, scores, classes = boxes[m], scores[m], classes[m]
    extra = extra[m] if extra is not None else None
    if iou is None:
        keep = np.argsort(-scores, kind="stable")[:top_k]
    else:
        keep = suppress(boxes, scores, classes, iou, top_k)
    return _found(boxes[keep], scores[keep], classes[keep], extra[keep] if extra is not None else None, spec, size)


def anchor_free(out: np.ndarray, classes: int, size: tuple[int, int], threshold: float, iou: float,
                top_k: int = 300, extra: Extra = NONE) -> Found:
    """YOLOv8, v9, v11: (4+C+E, N), boxes as centre and size in tensor pixels, class scores (no objectness)."""
    pred = np.asarray(out, np.float32)
    if pred.ndim != 2 or pred.shape[0] != 4 + classes + extra.width:
        raise ValueError(f"expected [4+{classes}+{extra.width}, N], got {list(pred.shape)}")
    pred = pred.T
    cls = pred[:, 4:4 + classes]
    ids = cls.argmax(1)
    scores = cls[np.arange(len(pred)), ids]
    rest = pred[:, 4 + classes:] if extra.width else None
    return _kept(xywh_to_xyxy(pred[:, :4]), scores, ids, rest, extra, size, threshold, iou, top_k)


def objectness(out: np.ndarray, classes: int, size: tuple[int, int], threshold: float, iou: float,
               top_k: int = 300, extra: Extra = NONE) -> Found:
    """YOLOv5, v7: (N, 5+C+E), boxes as centre and size in tensor pixels, objectness, class scores; an
    object's score is its objectness times its best class's."""
    pred = np.asarray(out, np.float32)
    if pred.ndim != 2 or pred.shape[1] != 5 + classes + extra.width:
        raise ValueError(f"expected [N, 5+{classes}+{extra.width}], got {list(pred.shape)}")
    cls = pred[:, 5:5 + classes] * pred[:, 4:5]
    ids = cls.argmax(1)
    scores = cls[np.arange(len(pred)), ids]
    rest = pred[:, 5 + classes:] if extra.width else None
    return _kept(xywh_to_xyxy(pred[:, :4]), scores, ids, rest, extra, size, threshold, iou, top_k)


def end_to_end(out: np.ndarray, size: tuple[int, int], threshold: float, top_k: int = 300,
               extra: Extra = NONE) -> Found:
    """YOLOv10, YOLO26 (ultralytics' end-to-end export): (N, 6+E), corners in tensor pixels, score, class;
    one box an object already (no suppression)."""
    pred = np.asarray(out, np.float32)
    if pred.ndim != 2 or pred.shape[1] != 6 + extra.width:
        raise ValueError(f"expected [N, 6+{extra.width}], got {list(pred.shape)}")
    rest = pred[:, 6:] if extra.width else None
    return _kept(pred[:, :4], pred[:, 4], pred[:, 5].astype(np.int64), rest, extra, size, threshold, None, top_k)


def detr(boxes: np.ndarray, logits: np.ndarray, size: tuple[int, int], threshold: float, top_k: int = 300,
         sigmoid: bool = True) -> Found:
    """RT-DETR, RF-DETR, D-FINE: (Q, 4) boxes as centre and size in fractions of the tensor beside (Q, C)
    class logits (``sigmoid``: turned into scores here; False: scores already); one query an object (no
    suppression), each query's best class."""
    b = np.asarray(boxes, np.float32)
    lg = np.asarray(logits, np.float32)
    if b.ndim != 2 or b.shape[1] != 4 or lg.ndim != 2 or lg.shape[0] != b.shape[0]:
        raise ValueError(f"expected boxes [Q, 4] and logits [Q, C], got {list(b.shape)} and {list(lg.shape)}")
    probs = 1.0 / (1.0 + np.exp(-lg)) if sigmoid else lg
    ids = probs.argmax(1)
    scores = probs[np.arange(len(probs)), ids]
    w, h = size
    xyxy = xywh_to_xyxy(b) * np.array([w, h, w, h], np.float32)
    return _kept(xyxy, scores, ids, None, NONE, size, threshold, None, top_k)


def yolox_grid(size: tuple[int, int], strides: tuple[int, ...] = (8, 16, 32)) -> tuple[np.ndarray, np.ndarray]:
    """YOLOX's grid: each output row's cell (x, y) and stride, for a tensor of ``size`` (w, h)."""
    cells, steps = [], []
    for s in strides:
        gw, gh = size[0] // s, size[1] // s
        ys, xs = np.meshgrid(np.arange(gh), np.arange(gw), indexing="ij")
        cells.append(np.stack([xs.ravel(), ys.ravel()], 1))
        steps.append(np.full(gw * gh, s))
    return np.concatenate(cells).astype(np.float32), np.concatenate(steps).astype(np.float32)


def yolox(out: np.ndarray, classes: int, size: tuple[int, int], threshold: float, iou: float, top_k: int = 300,
          strides: tuple[int, ...] = (8, 16, 32)) -> Found:
    """YOLOX exported without its decoding (its default): (N, 5+C), per grid cell the box's offset from the
    cell and its log size in strides, objectness and class scores (sigmoid applied in the model)."""
    pred = np.asarray(out, np.float32)
    cells, steps = yolox_grid(size, strides)
    if pred.ndim != 2 or pred.shape != (len(cells), 5 + classes):
        raise ValueError(f"expected [{len(cells)}, 5+{classes}] (strides {list(strides)} over "
                         f"{size[0]}x{size[1]}), got {list(pred.shape)}")
    xy = (pred[:, :2] + cells) * steps[:, None]
    wh = np.exp(pred[:, 2:4]) * steps[:, None]
    decoded = np.concatenate([xy, wh, pred[:, 4:]], 1)
    return objectness(decoded, classes, size, threshold, iou, top_k)


def masks_of(coefs: np.ndarray, protos: np.ndarray, boxes: np.ndarray, size: tuple[int, int]) -> list[Mask]:
    """A segmentation head's instance masks, as ultralytics' ``process_mask`` makes them for its predictor:
    each object's coefficients weigh the prototypes (K, h, w), the sum scaled bilinearly to the tensor's
    ``size`` (half-pixel centres, edges held), over 0 (a sigmoid over 0.5), and kept in the pixels whose index
    lies in the object's box (x1 <= x < x2). Scaled inside each box alone: the same pixels, without a whole
    tensor's worth of memory per object."""
    k, mh, mw = protos.shape
    w, h = size
    logits = (np.asarray(coefs, np.float32) @ protos.reshape(k, -1)).reshape(-1, mh, mw)
    out = []
    for logit, (x1, y1, x2, y2) in zip(logits, np.asarray(boxes, np.float64)):
        x0, y0 = max(0, int(np.ceil(x1))), max(0, int(np.ceil(y1)))
        xe, ye = min(w, int(np.ceil(x2))), min(h, int(np.ceil(y2)))
        if xe <= x0 or ye <= y0:
            out.append(Mask(x0, y0, np.zeros((0, 0), bool)))
            continue
        us = np.clip((np.arange(x0, xe) + 0.5) * (mw / w) - 0.5, 0, mw - 1).astype(np.float32)
        vs = np.clip((np.arange(y0, ye) + 0.5) * (mh / h) - 0.5, 0, mh - 1).astype(np.float32)
        mx, my = np.meshgrid(us, vs)
        up = cv2.remap(logit, mx, my, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
        out.append(Mask(x0, y0, up > 0.0))
    return out


def polygon(mask: Mask) -> list[list[float]]:
    """The outline of a mask's largest part as points (x, y) in the tensor's pixels: what a record carries of
    a mask. Empty for an empty mask."""
    if mask.bits.size == 0:
        return []
    contours, _ = cv2.findContours(mask.bits.astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    if not contours:
        return []
    biggest = max(contours, key=cv2.contourArea).reshape(-1, 2).astype(np.float64) + np.array([mask.x, mask.y])
    return [[round(float(x), 1), round(float(y), 1)] for x, y in biggest]


def rle(mask: np.ndarray) -> dict[str, list[int]]:
    """COCO's uncompressed run-length encoding of a mask (column by column, starting with a run of 0s)."""
    flat = np.asarray(mask, bool).T.ravel()
    changes = np.flatnonzero(np.diff(flat.astype(np.int8))) + 1
    bounds = np.concatenate([[0], changes, [len(flat)]])
    counts = np.diff(bounds).tolist()
    if len(flat) and flat[0]:
        counts = [0, *counts]
    return {"size": [int(mask.shape[0]), int(mask.shape[1])], "counts": [int(c) for c in counts]}

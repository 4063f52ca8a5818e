"""The face-blur work both baselines do, written the plain way (OpenCV + numpy), shared so the two
loops do exactly the same work: letterbox to 192x192 RGB in [-1, 1], BlazeFace (full range) anchor
decoding with NMS, boxes mapped back to the frame, Gaussian blur of each face, MP4 + JSON lines."""
from __future__ import annotations

import json

import cv2
import numpy as np

SIZE = 192


def anchors() -> np.ndarray:
    """BlazeFace full-range anchors: one per cell of a 48x48 grid, centres in [0, 1]."""
    g = SIZE // 4
    ys, xs = np.meshgrid((np.arange(g) + 0.5) / g, (np.arange(g) + 0.5) / g, indexing="ij")
    return np.stack([xs.ravel(), ys.ravel()], 1).astype(np.float32)


def preprocess(frame: np.ndarray) -> tuple[np.ndarray, tuple[float, float, int, int]]:
    h, w = frame.shape[:2]
    s = min(SIZE / w, SIZE / h)
    nw, nh = round(w * s), round(h * s)
    px, py = (SIZE - nw) // 2, (SIZE - nh) // 2
    small = cv2.cvtColor(cv2.resize(frame, (nw, nh), interpolation=cv2.INTER_LINEAR), cv2.COLOR_BGR2RGB)
    canvas = np.zeros((SIZE, SIZE, 3), np.float32)
    canvas[py:py + nh, px:px + nw] = small
    x = (canvas - 127.5) / 127.5
    return x[None], (nw / w, nh / h, px, py)


def decode(reg: np.ndarray, cls: np.ndarray, geo: tuple, anc: np.ndarray, shape: tuple,
           score_threshold: float = 0.5, iou: float = 0.3) -> list[tuple[list[float], float]]:
    reg, cls = reg.reshape(-1, 16), cls.reshape(-1)
    scores = 1.0 / (1.0 + np.exp(-np.clip(cls.astype(np.float64), -80, 80)))
    idx = np.nonzero(scores >= score_threshold)[0]
    if not idx.size:
        return []
    r, a = reg[idx], anc[idx]
    cx, cy = r[:, 0] / SIZE + a[:, 0], r[:, 1] / SIZE + a[:, 1]
    w, h = r[:, 2] / SIZE, r[:, 3] / SIZE
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], 1) * SIZE
    xywh = np.column_stack([boxes[:, 0], boxes[:, 1], boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]])
    keep = np.asarray(cv2.dnn.NMSBoxes(xywh.tolist(), scores[idx].tolist(), 0.0, iou, top_k=100)).reshape(-1)
    sx, sy, px, py = geo
    out = []
    for k in keep:
        b = boxes[k]
        x1 = np.clip((b[0] - px) / sx, 0, shape[1]); x2 = np.clip((b[2] - px) / sx, 0, shape[1])  # noqa: E702
        y1 = np.clip((b[1] - py) / sy, 0, shape[0]); y2 = np.clip((b[3] - py) / sy, 0, shape[0])  # noqa: E702
        out.append(([float(x1), float(y1), float(x2), float(y2)], float(scores[idx][k])))
    return out


def blur(frame: np.ndarray, faces: list, grow: float = 0.2, strength: int = 8) -> None:
    H, W = frame.shape[:2]
    for (x1, y1, x2, y2), _ in faces:
        gw, gh = (x2 - x1) * grow / 2, (y2 - y1) * grow / 2
        a, b = max(0, int(x1 - gw)), max(0, int(y1 - gh))
        c, d = min(W, int(np.ceil(x2 + gw))), min(H, int(np.ceil(y2 + gh)))
        if c > a and d > b:
            roi = frame[b:d, a:c]
            k = max(3, (max(c - a, d - b) // strength) | 1)
            cv2.GaussianBlur(roi, (k, k), 0, dst=roi)


def record(i: int, faces: list) -> str:
    return json.dumps({"frame": i, "objects": [{"box": [round(v, 1) for v in b], "score": round(s, 4)}
                                               for b, s in faces]})


def outputs(result: dict, compiled) -> tuple[np.ndarray, np.ndarray]:
    outs = [result[o] for o in compiled.outputs]
    reg = next(o for o in outs if o.shape[-1] == 16)
    cls = next(o for o in outs if o.shape[-1] == 1)
    return reg, cls

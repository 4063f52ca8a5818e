"""Multi-object tracking: an IoU tracker with ByteTrack's two-stage association, ids per stream."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from pydantic import Field

from flowpipe.frame import Frame
from flowpipe.node import PIXELS_ALL, Node, NodeConfig, RunContext
from flowpipe.registry import register


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if len(a) == 0 or len(b) == 0:
        return np.zeros((len(a), len(b)))
    x1 = np.maximum(a[:, None, 0], b[None, :, 0])
    y1 = np.maximum(a[:, None, 1], b[None, :, 1])
    x2 = np.minimum(a[:, None, 2], b[None, :, 2])
    y2 = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area = lambda z: (z[:, 2] - z[:, 0]) * (z[:, 3] - z[:, 1])  # noqa: E731
    return inter / np.maximum(area(a)[:, None] + area(b)[None, :] - inter, 1e-9)


def _greedy(iou: np.ndarray, thr: float) -> list[tuple[int, int]]:
    pairs: list[tuple[int, int]] = []
    if iou.size == 0:
        return pairs
    order = np.dstack(np.unravel_index(np.argsort(-iou, axis=None), iou.shape))[0]
    used_r, used_c = set(), set()
    for r, c in order:
        if iou[r, c] < thr:
            break
        if r in used_r or c in used_c:
            continue
        used_r.add(r)
        used_c.add(c)
        pairs.append((int(r), int(c)))
    return pairs


@dataclass
class _Track:
    id: int
    box: np.ndarray
    velocity: np.ndarray = field(default_factory=lambda: np.zeros(4))
    hits: int = 1
    missed: int = 0


@register("tracker")
class Tracker(Node):
    """Assigns track ids: high-score detections match first, low-score ones then keep tracks alive
    (ByteTrack's idea) with IoU and a constant-velocity prediction; one id space per stream.

    YAML:
        - id: track
          type: tracker
          config: {iou_threshold: 0.3, max_age: 15}
          inputs: {detections: faces.detections}
    """

    parallel_streams = True

    inputs = {"detections": "detections"}
    pixels = PIXELS_ALL  # never reads the pixels
    outputs = {"detections": "detections"}

    class Config(NodeConfig):
        iou_threshold: float = Field(0.3, ge=0, le=1)
        high_score: float = Field(0.6, ge=0, le=1, description="first-stage association threshold")
        max_age: int = Field(15, ge=0, description="frames a lost track is kept")
        min_hits: int = Field(1, ge=1, description="frames before an id is reported")

    config: Config

    def open(self, ctx: RunContext) -> None:
        self.tracks: dict[str, list[_Track]] = {}
        self.next_id: dict[str, int] = {}

    def end_stream(self, stream: str) -> None:
        self.tracks.pop(stream, None)
        self.next_id.pop(stream, None)

    def process(self, frame: Frame, port: str) -> Frame:
        c = self.config
        tracks = self.tracks.setdefault(frame.stream, [])
        dets = frame.detections
        boxes = np.array([d.box for d in dets], np.float64).reshape(-1, 4)
        scores = np.array([d.score for d in dets])
        pred = np.array([t.box + t.velocity for t in tracks]).reshape(-1, 4)
        high = np.nonzero(scores >= c.high_score)[0]
        low = np.nonzero(scores < c.high_score)[0]
        matched_t: set[int] = set()
        assign: dict[int, int] = {}
        for group in (high, low):
            free_t = [i for i in range(len(tracks)) if i not in matched_t]
            pairs = _greedy(iou_matrix(pred[free_t], boxes[group]), c.iou_threshold)
            for ti, di in pairs:
                assign[int(group[di])] = free_t[ti]
                matched_t.add(free_t[ti])
        for di, ti in assign.items():
            t = tracks[ti]
            t.velocity = 0.5 * t.velocity + 0.5 * (boxes[di] - t.box)
            t.box, t.hits, t.missed = boxes[di], t.hits + 1, 0
            if t.hits >= c.min_hits:
                dets[di].track_id = t.id
        for h in high.tolist():
            if h not in assign:
                nid = self.next_id.get(frame.stream, 1)
                self.next_id[frame.stream] = nid + 1
                tracks.append(_Track(nid, boxes[h]))
                if c.min_hits <= 1:
                    dets[h].track_id = nid
        for i, t in enumerate(tracks[: len(pred)]):  # tracks that existed before this frame
            if i not in matched_t:
                t.missed += 1
                t.box = t.box + t.velocity
        self.tracks[frame.stream] = [t for t in tracks if t.missed <= c.max_age]
        return frame

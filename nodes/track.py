"""Multi-object tracking: an IoU tracker with ByteTrack's two-stage association, ids per stream."""
from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import Field

from flowpipe.errors import FrameError
from flowpipe.frame import Detection, Frame
from flowpipe.node import PIXELS_ALL, Node, NodeConfig, NodeContract, RunContext
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


def _inside(box: np.ndarray, size: np.ndarray, frame: Frame) -> bool:
    """Whether at least half of a predicted box's face is still in the picture (``size``: the face's width
    and height where it was last seen whole; a face mostly gone is not masked at the edge)."""
    if frame.data is None:
        return True
    w = min(box[2], frame.width) - max(box[0], 0.0)
    h = min(box[3], frame.height) - max(box[1], 0.0)
    return bool(w >= 0.5 * size[0] and h >= 0.5 * size[1] and w > 0 and h > 0)


def _whole(box: np.ndarray, frame: Frame) -> bool:
    """Whether a box is clear of the picture's edges (its size is the face's, not what the edge leaves)."""
    return frame.data is None or bool(box[0] > 1 and box[1] > 1 and box[2] < frame.width - 1
                                      and box[3] < frame.height - 1)


def _leaving(box: np.ndarray, velocity: np.ndarray, frame: Frame) -> bool:
    """Whether a box at the picture's edge moves out through it (detections there are clipped to the
    picture, so the box's far side carries the motion)."""
    if frame.data is None:
        return False
    return bool((box[0] <= 1 and velocity[2] < 0) or (box[1] <= 1 and velocity[3] < 0)
                or (box[2] >= frame.width - 1 and velocity[0] > 0) or (box[3] >= frame.height - 1 and velocity[1] > 0))


def _outward(box: np.ndarray, frame: Frame) -> np.ndarray:
    """Per coordinate, the direction out of the picture through the edges the box touches (0: none)."""
    if frame.data is None:
        return np.zeros(4)
    left, top = float(box[0] <= 1), float(box[1] <= 1)
    right, bottom = float(box[2] >= frame.width - 1), float(box[3] >= frame.height - 1)
    return np.array([right - left, bottom - top, right - left, bottom - top])


def scene_motion(before: np.ndarray, after: np.ndarray, least: int = 4) -> tuple[float, float, float] | None:
    """The camera's zoom and pan between two frames, from boxes found in both (``before[i]`` became
    ``after[i]``): ``(s, tx, ty)`` with ``x' = s x + tx, y' = s y + ty``. A robust first guess (the median
    ratio of the boxes' distances to one another, the median shift), the boxes that agree with it (within
    2 px or a tenth of their size) refitted by least squares. None unless at least ``least`` boxes and three
    quarters of them agree: a still camera with a few people walking gets no scene motion from them."""
    n = len(before)
    if n < least:
        return None
    c0 = (before[:, :2] + before[:, 2:]) / 2
    c1 = (after[:, :2] + after[:, 2:]) / 2
    i, j = np.triu_indices(n, 1)
    d0 = np.hypot(*(c0[i] - c0[j]).T)
    far = d0 > 8.0
    if not far.any():
        return None
    s = float(np.median(np.hypot(*(c1[i] - c1[j]).T)[far] / d0[far]))
    t = np.median(c1 - s * c0, axis=0)
    tol = np.maximum(2.0, 0.1 * (after[:, 2:] - after[:, :2]).max(1))
    keep = np.hypot(*(c1 - s * c0 - t).T) <= tol
    if keep.sum() < max(least, 0.75 * n):
        return None
    a = np.zeros((2 * int(keep.sum()), 3))
    a[0::2, 0], a[0::2, 1] = c0[keep, 0], 1.0
    a[1::2, 0], a[1::2, 2] = c0[keep, 1], 1.0
    p = np.linalg.lstsq(a, c1[keep].reshape(-1), rcond=None)[0]
    return float(p[0]), float(p[1]), float(p[2])


def _moved(box: np.ndarray, m: tuple[float, float, float]) -> np.ndarray:
    s, tx, ty = m
    return box * s + np.array([tx, ty, tx, ty])


@dataclass
class _Track:
    id: int
    box: np.ndarray
    velocity: np.ndarray = field(default_factory=lambda: np.zeros(4))
    own: np.ndarray = field(default_factory=lambda: np.zeros(4))  # its motion in the scene (camera's out)
    size: np.ndarray = field(default_factory=lambda: np.zeros(2))  # width, height where last seen whole
    smoothed: np.ndarray | None = None  # with ``smooth``: the box over time
    hits: int = 1
    missed: int = 0
    confirmed: int = 1  # frames found at a high score or a look that was not a rejection (other candidates
    # keep a track, they do not confirm it)
    since_high: int = 0  # frames since the last high-score detection
    gone: int = 0  # frames its predicted box has been mostly out of the picture
    label: str = "object"
    label_id: int = 0


@dataclass
class _Tentative:
    """An unmatched candidate and how many frames in a row it was found at one place; with a lookahead,
    its detections in the frames still waiting here (a track it starts gets them too)."""
    box: np.ndarray
    run: int
    seen: list[tuple[Frame, Detection]]
    scores: list[float]  # the last start_after frames' scores


@register("tracker")
class Tracker(Node):
    """Assigns track ids: high-score detections match first, low-score ones then keep tracks alive
    (ByteTrack's idea) with IoU and a constant-velocity prediction; one id space per stream.

    Detections under ``high_score`` are candidates: they continue a track they match and are dropped
    otherwise (a low score alone starts nothing, so the decoder may pass scores as low as 0.1 without
    false boxes). With ``coast: N`` a confirmed track the detector misses stays in the frame's detections
    for up to N frames at its predicted box (``source: predicted``): a privacy mask holds through a miss.
    With ``lookahead: N`` each frame waits here for N more of its stream: a track that starts also gets
    the candidates found where it was in the frames before (a face that scores high only after a few
    frames is masked from its first), at N frames of latency.

    YAML:
        - id: track
          type: tracker
          config: {iou_threshold: 0.3, max_age: 15, coast: 10}
          inputs: {detections: faces.detections}
    """

    inputs = {"detections": "detections"}
    outputs = {"detections": "detections"}

    class Config(NodeConfig):
        iou_threshold: float = Field(0.3, ge=0, le=1)
        high_score: float = Field(0.5, ge=0, le=1, description="detections from this score start tracks and "
                                  "match first; lower ones are candidates (the decoders' default threshold is "
                                  "0.5, so by default there are none and every detection goes on)")
        max_age: int = Field(15, ge=0, description="frames a lost track is kept")
        min_hits: int = Field(1, ge=1, description="frames before an id is reported")
        coast: int = Field(0, ge=0, description="frames a confirmed track the detector misses is still put "
                                                "in the frame, at its predicted box (0: never); one leaving "
                                                "through the picture's edge stays until half of it is out "
                                                "(max_age at most)")
        confirm: int = Field(3, ge=1, description="frames a track must have been found in at a high score "
                                                  "(or with a look that passed its reject) before it coasts")
        candidate_iou: float = Field(0.5, ge=0, le=1, description="overlap a candidate needs with a track's "
                                                                   "predicted box to continue it")
        hold: int = Field(30, ge=0, description="frames a track goes on on candidates alone after its last "
                                                "high-score detection")
        start_after: int = Field(0, ge=0, description="a candidate found in this many frames in a row at one "
                                                      "place starts a track too (0: only high scores start "
                                                      "tracks); an occluded face that never scores high")
        start_score: float = Field(0.0, ge=0, le=1, description="start_after: the mean score those frames need "
                                                                "(weak, flickering candidates on a face-like "
                                                                "thing start nothing)")
        lookahead: int = Field(0, ge=0, le=60, description="frames each frame waits here for the next ones of "
                                                           "its stream: a track that starts also gets the "
                                                           "candidates found where it was in the frames before "
                                                           "(latency: this many frames)")
        max_wait: float = Field(0.5, gt=0, description="lookahead: seconds a frame waits at most (a stream that "
                                                       "ends or stalls lets its last frames go)")
        camera_motion: bool = Field(False, description="a track the detector misses moves with the camera's pan "
                                     "and zoom, fitted to the tracks found in this frame and the last (at least "
                                     "4, three quarters agreeing), instead of on its own slowing velocity: a "
                                     "coasting mask stays on its face while a camera pans or zooms")
        checks: dict[str, tuple[float, float]] = Field({}, description="second looks written on detections "
                                                        "(attributes: a centerface_check's 'face'), each with "
                                                        "[reject, sure]: a look at sure or more makes a detection "
                                                        "high-score (starts a track, confirms one); a look from "
                                                        "reject up confirms the track it continues and lets it "
                                                        "start one by persistence; a detection whose every look "
                                                        "(with a reject over 0) is under its reject is no face, "
                                                        "whatever the detector scored: it continues a track and "
                                                        "starts or confirms none")
        offscreen: int = Field(0, ge=0, description="with camera_motion: frames a confirmed face the camera "
                               "took out of the picture is remembered, moving with the camera; when the camera "
                               "brings it back it is masked as it comes in, for coast frames or until found "
                               "(a camera panning to and fro)")
        smooth: float = Field(0.0, ge=0, lt=1, description="how slowly a track's box comes back in after it went "
                                                           "out to cover a detection (0: each detection as it "
                                                           "is): a mask that does not breathe with the "
                                                           "detector's jitter, and never uncovers the face")

    config: Config

    @classmethod
    def contract(cls, config: NodeConfig) -> NodeContract:
        assert isinstance(config, cls.Config)
        if not config.lookahead:  # every frame goes on from process; tracks are per stream
            return cls.declare(pixels=PIXELS_ALL, one_worker=None)
        return cls.declare(pixels=PIXELS_ALL, holds_frames=True,
                           one_worker="a tracker with a lookahead keeps each stream's frames in order on one worker",
                           isolation="a tracker with a lookahead holds frames past process()")

    def open(self, ctx: RunContext) -> None:
        self.tracks: dict[str, list[_Track]] = {}
        self.next_id: dict[str, int] = {}
        self.tentative: dict[str, list[_Tentative]] = {}  # unmatched candidates
        self.waiting: dict[str, deque[tuple[Frame, float]]] = {}  # lookahead: frames and when they came
        self.lock = threading.Lock()
        self.wake = ctx.wake
        self.timer: threading.Timer | None = None
        self.timer_due = 0.0
        self.max_held = self.config.lookahead * max(1, ctx.streams)
        self.stats = ctx.stats
        if self.config.lookahead:
            self.stats["lookahead"] = f"{self.config.lookahead} frames"
            self.stats["backfilled"] = 0  # candidates that became a track's detections in earlier frames

    def end_stream(self, stream: str) -> None:
        self.tracks.pop(stream, None)
        self.next_id.pop(stream, None)
        self.tentative.pop(stream, None)
        with self.lock:
            self.waiting.pop(stream, None)

    def _starts(self, frame: Frame, high: list[int], low: list[int], boxes: np.ndarray,
                dets: list[Detection]) -> list[tuple[int, list[tuple[Frame, Detection]]]]:
        """The unmatched detections that start tracks, each with its detections in the frames before (with a
        lookahead): every high one, and the candidates seen at the same place (IoU >= ``candidate_iou``)
        for ``start_after`` frames in a row at a mean score of ``start_score`` or more. The other
        candidates are kept for the next frame."""
        c = self.config
        if not (c.start_after or c.lookahead):
            return [(h, []) for h in high]
        free = high + low
        before = self.tentative.get(frame.stream, [])
        prev = np.array([t.box for t in before], np.float64).reshape(-1, 4)
        pairs = dict((di, ti) for ti, di in _greedy(iou_matrix(prev, boxes[free]), c.candidate_iou))
        now, starts = [], []
        for k, di in enumerate(free):
            t = before[pairs[k]] if k in pairs else None
            run, seen, scores = (t.run + 1, t.seen, t.scores) if t is not None else (1, [], [])
            scores = [*scores, float(dets[di].score)][-max(1, c.start_after):]
            if k < len(high) or (c.start_after and run >= c.start_after
                                 and sum(scores) >= c.start_score * len(scores)):
                starts.append((di, seen))
            else:
                now.append(_Tentative(boxes[di], run, [*seen, (frame, dets[di])][-c.lookahead:]
                                      if c.lookahead else [], scores))
        self.tentative[frame.stream] = now
        return starts

    def _backfill(self, stream: str, nid: int, seen: list[tuple[Frame, Detection]]) -> None:
        """A track that starts now: its candidates in the frames still waiting here become its detections."""
        with self.lock:
            waiting = {id(f) for f, _ in self.waiting.get(stream, ())}
        for f, d in seen:
            if id(f) in waiting:
                d.track_id = nid
                f.detections.append(d)
                self.stats["backfilled"] += 1

    def process(self, frame: Frame, port: str) -> Any:
        try:
            self._track(frame)
        except Exception as e:  # the frame is held: say which one failed
            raise FrameError(frame, e) from e
        if not self.config.lookahead:
            return frame
        with self.lock:
            q = self.waiting.setdefault(frame.stream, deque())
            q.append((frame, time.monotonic()))
            out = [q.popleft()[0] for _ in range(len(q) - self.config.lookahead)]
        self._arm()
        return out

    def poll(self) -> list[Frame]:
        """Frames that waited ``max_wait`` (their stream ended or stalled) go on."""
        if not self.config.lookahead:
            return []
        now = time.monotonic()
        due, out = now - self.config.max_wait, []
        with self.lock:
            if now >= self.timer_due:
                self.timer = None  # it has woken this poll (or is about to: one more wake is harmless)
            for q in self.waiting.values():
                while q and q[0][1] <= due:
                    out.append(q.popleft()[0])
        self._arm()
        return out

    def flush(self) -> list[Frame]:
        with self.lock:
            out = [f for q in self.waiting.values() for f, _ in q]
            self.waiting.clear()
        return out

    def _arm(self) -> None:
        """A wake when the oldest waiting frame is due (poll lets it go if no frame of its stream came); one
        timer at a time, so a steady stream starts one every ``max_wait``, not one a frame."""
        with self.lock:
            if self.timer is not None or not any(self.waiting.values()):
                return
            self.timer_due = min(q[0][1] for q in self.waiting.values() if q) + self.config.max_wait
            self.timer = threading.Timer(max(0.0, self.timer_due - time.monotonic()) + 1e-3, self.wake)
            self.timer.daemon = True
            self.timer.start()

    def close(self) -> None:
        timer = getattr(self, "timer", None)
        if timer is not None:
            timer.cancel()

    def _smoothed(self, t: _Track, box: np.ndarray) -> tuple[float, float, float, float]:
        """The box the track reports: each side goes out at once to cover ``box`` and comes back in slowly
        (by ``1 - smooth`` of the way a frame), following the face's motion: it never uncovers the detection
        and does not breathe with its jitter."""
        a = self.config.smooth
        if t.smoothed is None:
            t.smoothed = box.astype(np.float64)
        else:
            v = t.velocity
            dx, dy = (v[0] + v[2]) / 2, (v[1] + v[3]) / 2  # the face's motion, not its size's jitter
            inward = a * (t.smoothed + np.array([dx, dy, dx, dy])) + (1 - a) * box
            t.smoothed = np.concatenate([np.minimum(box[:2], inward[:2]), np.maximum(box[2:], inward[2:])])
        s = t.smoothed
        return float(s[0]), float(s[1]), float(s[2]), float(s[3])

    def _track(self, frame: Frame) -> None:
        c = self.config
        tracks = self.tracks.setdefault(frame.stream, [])
        dets = frame.detections
        boxes = np.array([d.box for d in dets], np.float64).reshape(-1, 4)
        scores = np.array([d.score for d in dets])
        pred = np.array([t.box + t.velocity for t in tracks]).reshape(-1, 4)
        sure = scores >= c.high_score  # found in this frame: starts and confirms tracks
        judged, passed = np.zeros(len(dets), bool), np.zeros(len(dets), bool)
        for name, (reject, enough) in c.checks.items():  # what second looks saw
            looks = np.array([d.attributes.get(name, np.nan) for d in dets], np.float64).reshape(-1)
            sure |= looks >= enough
            if reject > 0:
                judged |= ~np.isnan(looks)
                passed |= looks >= reject
        rejected = judged & ~passed  # no look found a face there
        sure &= ~rejected
        likely = sure | passed  # confirms the track it continues
        high = np.nonzero(sure)[0]
        low = np.nonzero(~sure)[0]
        matched_t: set[int] = set()
        assign: dict[int, int] = {}
        for group, thr in ((high, c.iou_threshold), (low, c.candidate_iou)):
            free_t = [i for i in range(len(tracks)) if i not in matched_t
                      and (group is high or tracks[i].since_high < c.hold)]
            pairs = _greedy(iou_matrix(pred[free_t], boxes[group]), thr)
            for ti, di in pairs:
                assign[int(group[di])] = free_t[ti]
                matched_t.add(free_t[ti])
        camera = None
        if c.camera_motion and len(pred):
            both = [(ti, di) for di, ti in assign.items() if not tracks[ti].missed and _whole(tracks[ti].box, frame)
                    and _whole(boxes[di], frame)]  # found in the last frame and this one, whole in both
            camera = scene_motion(np.array([tracks[ti].box for ti, _ in both]).reshape(-1, 4),
                                  boxes[[di for _, di in both]])
        for di, ti in assign.items():
            t = tracks[ti]
            step = boxes[di] - t.box
            # the face's own motion, from its centre (a coasting face keeps its size) while its box is clear
            # of the edges: a box the edge clips moves as the detector sees part of a face, not as the face
            if _whole(t.box, frame) and _whole(boxes[di], frame):
                carried = _moved(t.box, camera) - t.box if camera is not None else np.zeros(4)
                t.own = 0.5 * t.own + 0.5 * np.tile((step - carried).reshape(2, 2).mean(0), 2)
            else:
                t.own = 0.5 * t.own  # no measure: it slows as in a miss
            t.velocity = 0.5 * t.velocity + 0.5 * step
            if c.smooth:
                dets[di].box = self._smoothed(t, boxes[di])
            t.box, t.hits, t.missed, t.gone = boxes[di], t.hits + 1, 0, 0
            if _whole(t.box, frame) or not t.size.any():
                t.size = t.box[2:] - t.box[:2]
            found = bool(sure[di])
            t.confirmed += int(likely[di])
            t.since_high = 0 if found else t.since_high + 1
            if t.hits >= c.min_hits:
                dets[di].track_id = t.id
        starts = self._starts(frame, [h for h in high.tolist() if h not in assign],
                              [i for i in low.tolist() if i not in assign and not rejected[i]], boxes, dets)
        for h, seen in starts:
            nid = self.next_id.get(frame.stream, 1)
            self.next_id[frame.stream] = nid + 1
            # a track started by candidates alone (not sure in this frame) is not confirmed yet
            tracks.append(_Track(nid, boxes[h], size=boxes[h][2:] - boxes[h][:2], confirmed=int(sure[h]),
                                 label=dets[h].label, label_id=dets[h].label_id))
            assign[h] = len(tracks) - 1
            if c.min_hits <= 1:
                dets[h].track_id = nid
                self._backfill(frame.stream, nid, seen)
        candidates = set(low.tolist())
        kept = [d for i, d in enumerate(dets) if i in assign or i not in candidates]  # unmatched candidates go
        shown = np.array([d.box for d in kept], np.float64).reshape(-1, 4)
        coasting = []
        for i, t in enumerate(tracks[: len(pred)]):  # tracks that existed before this frame
            if i not in matched_t:
                t.missed += 1
                t.since_high += 1
                # the camera's motion (with ``camera_motion``, where the tracks found agree on one) and the
                # face's own in the scene (measured while its box was clear of the edges): a face leaving the
                # picture keeps leaving it; otherwise a miss is no time to extrapolate far, its motion slows
                leaving = not t.gone and _leaving(t.box, t.velocity, frame)
                t.own = np.where(_outward(t.box, frame) * t.own > 0, t.own, 0.5 * t.own) if leaving else 0.5 * t.own
                t.velocity = t.own + (_moved(t.box, camera) - t.box if camera is not None else 0.0)
                t.box = t.box + t.velocity
                if camera is not None:
                    t.size = t.size * camera[0]
                inside = _inside(t.box, t.size, frame)
                if t.gone and inside:  # the camera brought it back: it coasts in as after a first miss
                    t.gone, t.missed = 0, 1
                elif not inside:
                    t.gone += 1
                # a face leaving through the picture's edge is masked until half of it is out (the detector
                # loses a face it sees only part of long before that), others for ``coast`` frames
                if ((t.missed <= c.coast or leaving) and t.confirmed >= c.confirm and inside
                        and not (iou_matrix(t.box[None], shown) > 0.1).any()):  # not where a box is already
                    coasting.append(t)
        for t in coasting:
            box = (float(t.box[0]), float(t.box[1]), float(t.box[2]), float(t.box[3]))
            kept.append(Detection(box, 0.0, t.label, t.label_id, track_id=t.id, source="predicted"))
        frame.detections = kept
        self.tracks[frame.stream] = [t for t in tracks if t.missed <= c.max_age or (
            c.camera_motion and 0 < t.gone <= c.offscreen and t.confirmed >= c.confirm)]

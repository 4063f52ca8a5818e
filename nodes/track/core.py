"""The tracker's algorithm, one stream's worth, over plain arrays (no frames, no node): an IoU tracker with
ByteTrack's two-stage association, candidates that only continue tracks or start them by persistence,
second looks that reject or make sure, coasting through misses, the camera's pan and zoom (fitted to the
tracks, or measured on the pictures and carrying every track before it is matched), faces leaving through the
picture's edge or taken out of it by the camera, and boxes smoothed over time.

``TrackerCore.update`` takes one frame's detections (boxes, scores, the looks written on them, the
picture's size) and says which detections go on with which track ids, at which boxes, and which tracks
coast at a predicted box."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import appearance
from .geometry import (
    Picture,
    clear_axes,
    greedy,
    inside,
    iou_matrix,
    moved,
    outward,
    scene_motion,
    touching,
    warped,
    whole,
)

EXIT_SPEED = 0.05  # of its size a frame: the least motion out of the picture a missed face keeps when its
# motion was measured on two frames only (no spread to tell the detector's jitter from a motion by)
REACH_FRAMES = 8  # frames missed over which ``reach`` grows: a track is found again at most 8 * reach heights on
LEAST_SPEED = 0.01  # of its size a frame: slower is not a motion out of the picture (a third of a face at
# the edge would take over 30 frames to leave)
TRAIL = 5  # the last updates a face's own motion is fitted over, along each axis its box was clear of the edges
CAMERA_KEPT = 3  # updates the camera's last measured motion stands in where it cannot be measured and no face
# found contradicts it


@dataclass(frozen=True)
class TrackerSettings:
    """The algorithm's settings; the tracker node's config fields of the same names describe them."""

    iou_threshold: float = 0.3
    high_score: float = 0.5
    max_age: int = 15
    min_hits: int = 1
    coast: int = 0
    confirm: int = 3
    candidate_iou: float = 0.5
    hold: int = 30
    start_after: int = 0
    start_score: float = 0.0
    lookahead: int = 0  # how many earlier frames' candidates a tentative track remembers (to backfill)
    camera_motion: bool = False
    checks: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    offscreen: int = 0
    smooth: float = 0.0
    reach: float = 0.0
    appearance: float = 0.0  # the largest colour distance a detection may be from a track's to continue it (0: none)


@dataclass
class Track:
    id: int
    box: np.ndarray
    velocity: np.ndarray = field(default_factory=lambda: np.zeros(4))
    own: np.ndarray = field(default_factory=lambda: np.zeros(4))  # its motion in the scene a frame (camera's out)
    spread: np.ndarray = field(default_factory=lambda: np.full(2, np.inf))  # the standard error of ``own``
    # along x and y (inf: measured on fewer than three updates)
    trail: list[tuple[float, ...]] = field(default_factory=list)  # per update: frame, centre x, y (NaN along
    # an axis an edge cuts), far side x, y (along an axis one edge cuts, else NaN), where the camera's motion
    # since has carried them
    size: np.ndarray = field(default_factory=lambda: np.zeros(2))  # width, height where last seen whole
    smoothed: np.ndarray | None = None  # with ``smooth``: the box over time
    hits: int = 1
    missed: int = 0
    confirmed: int = 1  # frames found at a high score or a look that was not a rejection (other candidates
    # keep a track, they do not confirm it)
    since_high: int = 0  # frames since the last high-score detection
    gone: int = 0  # frames its predicted box has been mostly out of the picture
    heading: np.ndarray = field(default_factory=lambda: np.zeros(2))  # its centre's motion a frame when last found
    label: str = "object"
    label_id: int = 0
    colours: np.ndarray | None = None  # with ``appearance``: what it looks like (``appearance.colours``)


@dataclass
class Tentative:
    """An unmatched candidate and how many frames in a row it was found at one place; with a lookahead,
    the caller's references to its detections in the frames before (a track it starts gets them too)."""

    box: np.ndarray
    run: int
    seen: list[Any]
    scores: list[float]  # the last start_after frames' scores


@dataclass
class Coasting:
    """A confirmed track the detector missed, reported at its predicted box."""

    track_id: int
    box: np.ndarray
    label: str
    label_id: int


@dataclass
class TrackUpdate:
    """What one frame's detections became, indexed as they came in."""

    ids: np.ndarray  # (n,) the track id of each detection, -1 where it gets none
    boxes: np.ndarray  # (n, 4) the boxes to report (smoothed ones where ``smoothed``)
    smoothed: np.ndarray  # (n,) bool: the box is the track's smoothed one, not the detection's own
    keep: np.ndarray  # (n,) bool: the detection goes on (unmatched candidates do not)
    coasting: list[Coasting] = field(default_factory=list)  # to add after the kept detections
    backfill: list[tuple[int, list[Any]]] = field(default_factory=list)  # a started track's id and the
    # references (``refs``) of its candidates in earlier frames, oldest first


@dataclass
class _Judged:
    """One frame's detections as the scores and the second looks judge them."""

    sure: np.ndarray  # found in this frame: starts and confirms tracks
    likely: np.ndarray  # confirms the track it continues
    rejected: np.ndarray  # no look found a face there

    @property
    def high(self) -> np.ndarray:
        return np.nonzero(self.sure)[0]

    @property
    def low(self) -> np.ndarray:
        return np.nonzero(~self.sure)[0]


class TrackerCore:
    """One stream's tracks: ids from 1, tentative tracks, the camera's motion. High-score detections match
    tracks first, low-score ones (candidates) then keep tracks alive (ByteTrack's second association); a
    confirmed track the detector misses coasts at its predicted box."""

    def __init__(self, settings: TrackerSettings | None = None) -> None:
        self.settings = settings or TrackerSettings()
        self.tracks: list[Track] = []
        self.tentative: list[Tentative] = []  # unmatched candidates
        self.next_id = 1
        self.camera: tuple[float, float, float] | None = None  # the camera's motion last measured
        self.camera_age = 0  # updates since
        self.frame = 0  # the last update's frame number
        self._unlike = np.zeros((0, 0), bool)  # this update's (track, detection) pairs ``appearance`` keeps apart
        self.kept_apart = 0  # pairs that overlapped (or lay ahead within reach) and ``appearance`` kept apart
        self._kept: set[tuple[int, int]] = set()  # this update's such pairs, (track, detection) once each

    def update(self, boxes: np.ndarray, scores: np.ndarray, *, looks: Mapping[str, np.ndarray] | None = None,
               labels: Sequence[tuple[str, int]] | None = None, refs: Sequence[Any] | None = None,
               picture: Picture = None, frame: int | None = None,
               colours: np.ndarray | None = None, warp: np.ndarray | None = None) -> TrackUpdate:
        """One frame: ``boxes`` (n, 4) x1, y1, x2, y2 in pixels, ``scores`` (n,); ``looks``: per check
        name, each detection's second look (NaN: not looked at); ``labels``: each detection's (label,
        label_id), which a track it starts keeps; ``refs``: the caller's handle on each detection, given back
        in ``backfill``; ``picture``: width, height (None: no edges); ``frame``: its number in the stream
        (None: the one after the last update's; a detector interval updates the tracker every few frames, and
        motions are of a frame); ``colours``: with ``appearance``, each detection's colour histogram
        (``appearance.colours``; a NaN row: too small to tell), which gates what continues a track; ``warp``: the
        camera's motion since the last update, measured on the pictures (a 2x3 partial affine from its pixels to
        this frame's, ``motion.measure``), which carries every track before it is predicted and matched."""
        s = self.settings
        now = self.frame + 1 if frame is None else frame
        dt, self.frame = max(1, now - self.frame), now
        if warp is not None:
            self._carry(warp)
        boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
        n = len(boxes)
        judged = self._judge(np.asarray(scores, np.float64).reshape(-1), looks or {}, n)
        out = TrackUpdate(np.full(n, -1, np.int64), boxes.copy(), np.zeros(n, bool), np.ones(n, bool))
        old = len(self.tracks)  # tracks that existed before this frame
        pred = np.array([t.box + t.velocity for t in self.tracks]).reshape(-1, 4)
        self._unlike, self._kept = self._apart(colours, n), set()
        assign, reached = self._associate(pred, boxes, judged,
                                          [lab for lab, _ in labels] if labels is not None else None)
        matched = set(assign.values())
        camera = self._camera(assign, boxes, picture) if s.camera_motion and old else None
        if camera is not None:
            self.camera, self.camera_age = _per_frame(camera, dt), 0
        elif s.camera_motion and self.camera is not None:
            # too few faces to measure it in this frame (they are leaving): a camera does not stop at once; it
            # goes on as long as the faces found whole move with it, for CAMERA_KEPT updates where none is
            agree = self._agree(assign, boxes, picture, _over(self.camera, dt))
            self.camera_age = 0 if agree else self.camera_age + 1
            if agree is False or self.camera_age > CAMERA_KEPT:
                self.camera = None
            else:
                camera = _over(self.camera, dt)
        if camera is not None:
            for t in self.tracks:
                t.trail = [_carried(p, camera) for p in t.trail]
        crowded = iou_matrix(boxes, boxes) > 0.05 if colours is not None else np.zeros((n, n), bool)
        np.fill_diagonal(crowded, False)
        for di, ti in assign.items():
            self._follow(self.tracks[ti], di, boxes, judged, camera, picture, out, dt, di in reached)
            if colours is not None and not crowded[di].any():  # another's box on it: its look stays
                self.tracks[ti].colours = appearance.learnt(self.tracks[ti].colours, colours[di])
        starts = self._starts([h for h in judged.high.tolist() if h not in assign],
                              [i for i in judged.low.tolist() if i not in assign and not judged.rejected[i]],
                              boxes, np.asarray(scores, np.float64).reshape(-1), refs)
        for h, seen in starts:
            label, label_id = labels[h] if labels is not None else ("object", 0)
            # a track started by candidates alone (not sure in this frame) is not confirmed yet
            self.tracks.append(Track(self.next_id, boxes[h], size=boxes[h][2:] - boxes[h][:2],
                                     trail=[_point(now, boxes[h], picture)],
                                     confirmed=int(judged.sure[h]), label=label, label_id=label_id,
                                     colours=None if colours is None else appearance.learnt(None, colours[h])))
            assign[h] = len(self.tracks) - 1
            if s.min_hits <= 1:
                out.ids[h] = self.next_id
                out.backfill.append((self.next_id, seen))
            self.next_id += 1
        out.keep = np.array([i in assign or judged.sure[i] for i in range(n)], bool)  # unmatched candidates go
        shown = out.boxes[out.keep]
        for i, t in enumerate(self.tracks[:old]):
            if i not in matched and self._missed(t, camera, picture, shown, dt):
                out.coasting.append(Coasting(t.id, t.box.copy(), t.label, t.label_id))
        self.tracks = [t for t in self.tracks if t.missed <= s.max_age or (
            s.camera_motion and 0 < t.gone <= s.offscreen and t.confirmed >= s.confirm)]
        return out

    def _carry(self, warp: np.ndarray) -> None:
        """Every track and candidate carried by the camera's motion since the last update, as BoT-SORT warps its
        Kalman states: its box's centre where the motion puts it, its size by the zoom, its velocity turned and
        zoomed with the picture (its trail and smoothed box with it). What moves then is what moves in the
        scene: a still object keeps a still track while the camera pans or shakes."""
        turn = warp[:, :2]
        for t in self.tracks:
            t.box, near = warped(t.box, warp)
            v = t.velocity
            centre, size = turn @ ((v[:2] + v[2:]) / 2), near[0] * (v[2:] - v[:2])
            t.velocity = np.concatenate([centre - size / 2, centre + size / 2])
            t.size = t.size * near[0]
            t.trail = [_carried(p, near) for p in t.trail]
            if t.smoothed is not None:
                t.smoothed = moved(t.smoothed, near)
        for c in self.tentative:
            c.box = warped(c.box, warp)[0]

    def _judge(self, scores: np.ndarray, looks: Mapping[str, np.ndarray], n: int) -> _Judged:
        """Sure: scored ``high_score`` or a look at ``sure`` or more; rejected: every look (with a reject
        over 0) under its reject, whatever the score; likely: sure, or a look that passed its reject."""
        sure = scores >= self.settings.high_score
        judged, passed = np.zeros(n, bool), np.zeros(n, bool)
        for name, (reject, enough) in self.settings.checks.items():  # what second looks saw
            seen = np.asarray(looks.get(name, np.full(n, np.nan)), np.float64).reshape(-1)
            sure |= seen >= enough
            if reject > 0:
                judged |= ~np.isnan(seen)
                passed |= seen >= reject
        rejected = judged & ~passed
        sure &= ~rejected
        return _Judged(sure, sure | passed, rejected)

    def _associate(self, pred: np.ndarray, boxes: np.ndarray, judged: _Judged,
                   labels: list[str] | None) -> tuple[dict[int, int], set[int]]:
        """Detection -> track: the high ones by ``iou_threshold`` first, then the candidates by
        ``candidate_iou`` with the tracks left that had a high one in the last ``hold`` frames; a detection
        continues only a track of its own label (a person does not take over the bicycle under them). With
        ``reach``, the tracks left then take detections ahead of them; those detections come back apart."""
        s = self.settings
        assign: dict[int, int] = {}
        matched: set[int] = set()
        high = judged.high
        low = judged.low[~judged.rejected[judged.low]]  # where every look saw no face, it continues nothing
        for group, thr in ((high, s.iou_threshold), (low, s.candidate_iou)):
            free_t = [i for i in range(len(pred)) if i not in matched
                      and (group is high or self.tracks[i].since_high < s.hold)]
            iou = iou_matrix(pred[free_t], boxes[group])
            if labels is not None:
                iou *= np.array([[self.tracks[t].label == labels[d] for d in group] for t in free_t]).reshape(iou.shape)
            apart = self._unlike[free_t][:, group]  # colours too far apart: not the same object
            self._kept.update((free_t[r], int(group[c])) for r, c in zip(*np.nonzero(apart & (iou >= thr))))
            iou[apart] = 0.0
            for ti, di in greedy(iou, thr):
                assign[int(group[di])] = free_t[ti]
                matched.add(free_t[ti])
        reached: set[int] = set()
        if s.reach > 0:
            left = [int(d) for d in np.concatenate([high, low]) if int(d) not in assign]
            sure = {int(d) for d in high}
            for ti, di in self._reached([i for i in range(len(pred)) if i not in matched], left, sure, boxes,
                                        labels):
                assign[di] = ti
                reached.add(di)
        self.kept_apart += len(self._kept)
        return assign, reached

    def _apart(self, colours: np.ndarray | None, n: int) -> np.ndarray:
        """(tracks, detections) bool: the pairs ``appearance`` keeps apart, their colours further than it (none
        without it, or where either has no look)."""
        a = self.settings.appearance
        if not a or colours is None:
            return np.zeros((len(self.tracks), n), bool)
        mine = np.array([t.colours if t.colours is not None else np.full(appearance.SIZE, np.nan)
                         for t in self.tracks]).reshape(-1, appearance.SIZE)
        return appearance.distances(mine, colours) > a

    def _reached(self, tracks: list[int], dets: list[int], high: set[int], boxes: np.ndarray,
                 labels: list[str] | None) -> list[tuple[int, int]]:
        """Tracks no detection overlapped, found again further along the way they were going (``reach``):
        a confirmed track moving at least a fiftieth of its height a frame takes the nearest detection of its
        label and of its size (within a factor of 1.6) that lies ahead of it, within 60 degrees of its
        heading and ``reach`` of its height per frame since it was last found (for REACH_FRAMES frames at
        most); a candidate (under ``high_score``) only as the candidate stage takes one, within ``hold``
        frames of its last high score. A person crossing fast, whom the detector finds once every few frames,
        keeps one id: overlap alone would start a new one past the gap."""
        s = self.settings
        cost = np.full((len(tracks), len(dets)), np.inf)
        for a, ti in enumerate(tracks):
            t = self.tracks[ti]
            h = float(t.size[1]) or float(t.box[3] - t.box[1])
            speed = float(np.hypot(*t.heading))
            if t.confirmed < s.confirm or h <= 0 or speed < 0.02 * h:
                continue
            centre = (t.box[:2] + t.box[2:]) / 2  # where its box coasted to while it was missed
            for b, di in enumerate(dets):
                if (labels is not None and labels[di] != t.label) or (di not in high and t.since_high >= s.hold):
                    continue
                dh = float(boxes[di][3] - boxes[di][1])
                v = (boxes[di][:2] + boxes[di][2:]) / 2 - centre
                dist = float(np.hypot(*v))
                if not (h / 1.6 <= dh <= h * 1.6) or dist > s.reach * h * min(t.missed + 1, REACH_FRAMES):
                    continue
                if dist > 0 and float(v @ t.heading) < 0.5 * dist * speed:
                    continue
                if self._unlike[ti, di]:  # within reach, but its colours are another's
                    self._kept.add((ti, di))
                    continue
                cost[a, b] = dist / h
        pairs = greedy(-cost, -np.inf) if np.isfinite(cost).any() else []
        return [(tracks[a], dets[b]) for a, b in pairs if np.isfinite(cost[a, b])]

    def _whole(self, assign: dict[int, int], boxes: np.ndarray,
               picture: Picture) -> list[tuple[np.ndarray, np.ndarray]]:
        """The boxes, in the last frame and this one, of the tracks found in both and whole in both."""
        return [(self.tracks[ti].box, boxes[di]) for di, ti in assign.items() if not self.tracks[ti].missed
                and whole(self.tracks[ti].box, picture) and whole(boxes[di], picture)]

    def _camera(self, assign: dict[int, int], boxes: np.ndarray,
                picture: Picture) -> tuple[float, float, float] | None:
        """The camera's motion, from the tracks found in the last frame and this one, whole in both."""
        both = self._whole(assign, boxes, picture)
        return scene_motion(np.array([a for a, _ in both]).reshape(-1, 4),
                            np.array([b for _, b in both]).reshape(-1, 4))

    def _agree(self, assign: dict[int, int], boxes: np.ndarray, picture: Picture,
               camera: tuple[float, float, float]) -> bool | None:
        """Whether the tracks found in the last frame and this one, whole in both, moved as ``camera`` says
        (within 2 px or a tenth of their size, as ``scene_motion`` judges); None where there are none."""
        both = self._whole(assign, boxes, picture)
        if not both:
            return None
        return all(np.abs(moved(a, camera) - b).max() <= max(2.0, 0.1 * float((b[2:] - b[:2]).max()))
                   for a, b in both)

    def _follow(self, t: Track, di: int, boxes: np.ndarray, judged: _Judged,
                camera: tuple[float, float, float] | None, picture: Picture, out: TrackUpdate, dt: int,
                gap: bool = False) -> None:
        """A track found at detection ``di`` (``gap``: by ``reach``, past frames it was missed): its motion,
        box, size and confirmation."""
        s = self.settings
        step = boxes[di] - t.box
        if gap:  # found again past a gap: its motion a frame, not the whole way at once
            step = step / (t.missed + 1)
        # the face's own motion in the scene a frame (a coasting face keeps its size), the camera's taken out,
        # a straight line fitted over the last TRAIL updates (one detection's jitter does not turn a face
        # leaving into a still one): along each axis on which its box is clear of the edges, to its centre;
        # across an edge it keeps the motion it came with, or slows to its box's far side's: a box the edge
        # cuts moves as the detector sees part of a face, not as the face (its centre stays behind, a small
        # face's box shrinks from its far side too), but a face that stops at the edge stops its far side
        t.trail = [*t.trail, _point(self.frame, boxes[di], picture)][-TRAIL:]
        (cx, cy, fx, fy), (ex, ey, gx, gy) = _fit(t.trail)
        centre, far = np.array([cx, cy]), np.array([fx, fy])
        own, spread = t.own[:2], t.spread
        free = clear_axes(boxes[di], picture) & ~np.isnan(centre)
        slower = ~free & np.isfinite([gx, gy]) & (np.abs(np.nan_to_num(far)) < np.abs(own))  # on 3 updates
        t.own = np.tile(np.where(free, centre, np.where(slower, far, own)), 2)
        t.spread = np.where(free, [ex, ey], np.where(slower, [gx, gy], spread))
        t.velocity = 0.5 * t.velocity + 0.5 * step
        t.heading = t.own[:2].copy()
        if s.smooth:
            out.boxes[di] = self._smoothed(t, boxes[di])
            out.smoothed[di] = True
        t.box, t.hits, t.missed, t.gone = boxes[di], t.hits + 1, 0, 0
        if whole(t.box, picture) or not t.size.any():
            t.size = t.box[2:] - t.box[:2]
        t.confirmed += int(judged.likely[di])
        t.since_high = 0 if judged.sure[di] else t.since_high + 1
        if t.hits >= s.min_hits:
            out.ids[di] = t.id

    def _smoothed(self, t: Track, box: np.ndarray) -> np.ndarray:
        """The box the track reports: each side goes out at once to cover ``box`` and comes back in slowly
        (by ``1 - smooth`` of the way a frame), following the face's motion: it never uncovers the detection
        and does not breathe with its jitter."""
        a = self.settings.smooth
        if t.smoothed is None:
            t.smoothed = box.astype(np.float64)
        else:
            v = t.velocity
            dx, dy = (v[0] + v[2]) / 2, (v[1] + v[3]) / 2  # the face's motion, not its size's jitter
            inward = a * (t.smoothed + np.array([dx, dy, dx, dy])) + (1 - a) * box
            t.smoothed = np.concatenate([np.minimum(box[:2], inward[:2]), np.maximum(box[2:], inward[2:])])
        return t.smoothed

    def _starts(self, high: list[int], low: list[int], boxes: np.ndarray, scores: np.ndarray,
                refs: Sequence[Any] | None) -> list[tuple[int, list[Any]]]:
        """The unmatched detections that start tracks, each with its references in the frames before (with a
        lookahead): every high one, and the candidates seen at the same place (IoU >= ``candidate_iou``)
        for ``start_after`` frames in a row at a mean score of ``start_score`` or more. The other
        candidates are kept for the next frame."""
        s = self.settings
        if not (s.start_after or s.lookahead):
            return [(h, []) for h in high]
        free = high + low
        before = self.tentative
        prev = np.array([t.box for t in before], np.float64).reshape(-1, 4)
        pairs = {di: ti for ti, di in greedy(iou_matrix(prev, boxes[free]), s.candidate_iou)}
        now, starts = [], []
        for k, di in enumerate(free):
            t = before[pairs[k]] if k in pairs else None
            run, seen, last = (t.run + 1, t.seen, t.scores) if t is not None else (1, [], [])
            last = [*last, float(scores[di])][-max(1, s.start_after):]
            if k < len(high) or (s.start_after and run >= s.start_after
                                 and sum(last) >= s.start_score * len(last)):
                starts.append((di, seen))
            else:
                ref = refs[di] if refs is not None else di
                now.append(Tentative(boxes[di], run, [*seen, ref][-s.lookahead:] if s.lookahead else [], last))
        self.tentative = now
        return starts

    def _missed(self, t: Track, camera: tuple[float, float, float] | None, picture: Picture,
                shown: np.ndarray, dt: int) -> bool:
        """A track the detector missed in this frame moves on; whether it coasts (is reported at its box)."""
        s = self.settings
        t.missed += 1
        t.since_high += 1
        # the camera's motion (with ``camera_motion``, where the tracks found agree on one) and the face's own
        # in the scene (measured while its box was clear of the edges): a face leaving the picture keeps
        # leaving it; otherwise a miss is no time to extrapolate far, its motion slows (as does a motion out
        # that the detector's jitter could make of a still face: under twice its standard error, or a
        # twentieth of its size a frame where it was measured on two updates only)
        carried = moved(t.box, camera) - t.box if camera is not None else np.zeros(4)
        size = np.tile(t.size, 2)
        least = np.maximum(np.where(np.isinf(t.spread), EXIT_SPEED * t.size, 2 * t.spread), LEAST_SPEED * t.size)
        way = outward(t.box, picture)
        moving = np.abs(t.own) >= np.tile(least, 2)
        going, coming = (way * t.own > 0) & moving, (way * t.own < 0) & moving
        swept = np.abs(carried) >= LEAST_SPEED * size * dt
        out = not t.gone and bool(going.any() or (swept & (way * carried > 0)).any())
        entering = bool(coming.any() or (swept & (way * carried < 0)).any())
        t.own = np.where(going, t.own, 0.5 * t.own)
        t.velocity = t.own * dt + carried
        t.box = t.box + t.velocity
        if camera is not None:
            t.size = t.size * camera[0]
        within = inside(t.box, t.size, picture)
        if t.gone and within:  # the camera brought it back: it coasts in as after a first miss
            t.gone, t.missed = 0, 1
        elif not within:
            t.gone += 1
        # a face leaving through the picture's edge is masked until under a third of it is in, one coming in
        # through it from a third in (the detector finds a face it sees only part of late, and loses it
        # early), others for ``coast`` frames; not where a box already is
        return bool((t.missed <= s.coast or out or entering) and t.confirmed >= s.confirm and within
                    and not (iou_matrix(t.box[None], shown) > 0.1).any())


def _point(frame: int, box: np.ndarray, picture: Picture) -> tuple[float, ...]:
    """A trail's point: the frame, the box's centre along the axes it is clear of the edges on, its far side
    along those one edge cuts (NaN elsewhere)."""
    centre = np.where(clear_axes(box, picture), (box[:2] + box[2:]) / 2, np.nan)
    left, top, right, bottom = touching(box, picture)
    fx = box[2] if left and not right else box[0] if right and not left else np.nan
    fy = box[3] if top and not bottom else box[1] if bottom and not top else np.nan
    return float(frame), float(centre[0]), float(centre[1]), float(fx), float(fy)


def _fit(trail: list[tuple[float, ...]]) -> tuple[np.ndarray, np.ndarray]:
    """Per column after the frame, the slope of a straight line through the trail's points (a frame) and its
    standard error: NaN where the column has fewer than two points (the last run of them: a far side is of
    one edge), inf where two (no spread to measure)."""
    pts = np.array(trail, np.float64).reshape(len(trail), -1)
    slope, err = np.full(pts.shape[1] - 1, np.nan), np.full(pts.shape[1] - 1, np.inf)
    for k in range(len(slope)):
        ok = ~np.isnan(pts[:, k + 1])
        if k >= 2:  # a far side: its last run only (before it, the box was clear or cut by another edge)
            gap = np.nonzero(~ok)[0]
            ok[:gap[-1] + 1 if len(gap) else 0] = False
        f, v = pts[ok, 0], pts[ok, k + 1]
        if len(f) < 2 or np.ptp(f) == 0:
            continue
        fc = f - f.mean()
        slope[k] = float((fc * (v - v.mean())).sum() / (fc * fc).sum())
        if len(f) > 2:
            res = v - v.mean() - slope[k] * fc
            err[k] = float(np.sqrt((res * res).sum() / (len(f) - 2) / (fc * fc).sum()))
    return slope, err


def _per_frame(camera: tuple[float, float, float], dt: int) -> tuple[float, float, float]:
    """The camera's motion over ``dt`` frames as a frame's (its zoom the dt-th root, its pan a dt-th)."""
    s, tx, ty = camera
    return float(s ** (1.0 / dt)), tx / dt, ty / dt


def _over(camera: tuple[float, float, float], dt: int) -> tuple[float, float, float]:
    """A frame's camera motion over ``dt`` frames."""
    s, tx, ty = camera
    return float(s ** dt), tx * dt, ty * dt


def _carried(point: tuple[float, ...], camera: tuple[float, float, float]) -> tuple[float, ...]:
    """A trail's point where the camera's motion carried it."""
    s, tx, ty = camera
    f, *xy = point
    return (f, *(s * v + (tx, ty)[i % 2] for i, v in enumerate(xy)))

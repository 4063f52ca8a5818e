"""Following one face back in time through recorded frames, for redaction: a face first detected on frame t is
followed through frames t-1, t-2, ... until it leaves the picture or is lost, so that it is masked on the frames
before the detector found it too.

The method is Kalal et al.'s median flow: points on a grid in the box are followed by pyramidal Lucas-Kanade
to the earlier frame and back again; those that come back to where they started (the forward-backward error)
and whose patches match best (normalised cross-correlation) move the box by their median displacement and
scale it by the median ratio of their pairwise distances. The grid is laid afresh on each step's box."""
from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np

Box = tuple[float, float, float, float]

GRID = 10  # points a side of the grid laid in the box
SHRINK = 0.1  # of the box's width and height left out on each side of the grid: a face box's rim is background
WINDOW = (15, 15)  # Lucas-Kanade's window, px (11: a third faster, less exact on small faces; 7: lost in the dark)
LEVELS = 3  # pyramid levels above the picture: for motions several times the window's size
LK_STOP = (cv2.TERM_CRITERIA_EPS | cv2.TERM_CRITERIA_COUNT, 20, 0.03)
REACH = 0.25  # of the box's size: the most it moves in a frame (farther is lost); only that near it is searched
PATCH = 9  # side of the patches compared by normalised cross-correlation, pixels
MAX_SCALE = 1.3  # a box growing or shrinking more than this in one frame is a tracking failure, not a motion


def track_back(frames: Sequence[np.ndarray], box: Box, *, max_frames: int | None = None, min_inside: float = 0.33,
               fb_error: float = 2.0, min_points: int = 8) -> list[Box]:
    """``frames``: gray pictures (H, W, uint8), oldest first, the last one the frame ``box`` (x1, y1, x2, y2, in
    its pixels) was found on. The box in each earlier frame, nearest first (``[0]`` in ``frames[-2]``), ending
    where the object is lost or under ``min_inside`` of its box is inside the picture; ``max_frames`` at most.

    A box may reach past the
    picture's edge: it is the whole face's, as far as its part inside says. Lost means: fewer than ``min_points``
    points, or not half of them, came back within ``fb_error`` px, or the box's size jumped by more than 1.3x."""
    steps = len(frames) - 1 if max_frames is None else min(max_frames, len(frames) - 1)
    out: list[Box] = []
    current = box
    for k in range(steps):
        earlier = frames[-2 - k]
        moved = _step(frames[-1 - k], earlier, current, fb_error, min_points)
        if moved is None or _inside(moved, earlier.shape) < min_inside:
            break
        out.append(moved)
        current = moved
    return out


def _step(later: np.ndarray, earlier: np.ndarray, box: Box, fb_error: float, min_points: int) -> Box | None:
    """The box moved from the later frame to the earlier one, or None where its points say it is lost."""
    x0, y0, x1, y1 = _around(box, later.shape)
    later, earlier = later[y0:y1, x0:x1], earlier[y0:y1, x0:x1]  # the pyramids cost by the pixel: only near the box
    pts = _grid(later, (box[0] - x0, box[1] - y0, box[2] - x0, box[3] - y0))
    if len(pts) < min_points:
        return None
    back, ok, _ = cv2.calcOpticalFlowPyrLK(later, earlier, pts, np.empty_like(pts), winSize=WINDOW, maxLevel=LEVELS,
                                           criteria=LK_STOP)
    fb = np.full(len(pts), np.inf)  # a point not followed either way does not come back
    went = ok.ravel() == 1
    if went.any():
        again, ok2, _ = cv2.calcOpticalFlowPyrLK(earlier, later, back[went], np.empty_like(back[went]),
                                                 winSize=WINDOW, maxLevel=LEVELS, criteria=LK_STOP)
        fb[went] = np.where(ok2.ravel() == 1, np.linalg.norm(again - pts[went], axis=2).ravel(), np.inf)
    good = fb < fb_error
    if np.median(fb) >= fb_error or good.sum() < min_points:
        return None  # most points do not come back: the face is hidden or the earlier frame is another scene
    p0, p1, fb = pts[good, 0], back[good, 0], fb[good]
    ncc = _ncc(later, p0, earlier, p1)
    best = (ncc >= np.median(ncc)) & (fb <= np.median(fb))
    if best.sum() >= min_points:  # else too few to halve: every point that came back votes
        p0, p1 = p0[best], p1[best]
    i, j = np.triu_indices(len(p0), 1)
    before = np.linalg.norm(p0[i] - p0[j], axis=1)
    apart = before > 1e-3
    scale = float(np.median(np.linalg.norm(p1[i] - p1[j], axis=1)[apart] / before[apart]))
    if not 1 / MAX_SCALE < scale < MAX_SCALE:
        return None
    dx, dy = np.median(p1 - p0, axis=0)
    cx, cy = (box[0] + box[2]) / 2 + dx, (box[1] + box[3]) / 2 + dy
    hw, hh = (box[2] - box[0]) * scale / 2, (box[3] - box[1]) * scale / 2
    return (float(cx - hw), float(cy - hh), float(cx + hw), float(cy + hh))


def _around(box: Box, shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    """The part of the picture (x0, y0, x1, y1) the box can move into in one frame, with room for the window."""
    h, w = shape[:2]
    m = max(box[2] - box[0], box[3] - box[1]) * REACH + WINDOW[0]
    return (int(max(box[0] - m, 0)), int(max(box[1] - m, 0)), int(min(np.ceil(box[2] + m), w)),
            int(min(np.ceil(box[3] + m), h)))


def _grid(picture: np.ndarray, box: Box) -> np.ndarray:
    """The points to follow, (N, 1, 2) float32: a grid over the box's part inside the picture, in from its rim."""
    h, w = picture.shape[:2]
    x1, y1, x2, y2 = max(box[0], 0.0), max(box[1], 0.0), min(box[2], w - 1.0), min(box[3], h - 1.0)
    if x2 - x1 < 2 or y2 - y1 < 2:
        return np.empty((0, 1, 2), np.float32)
    mx, my = SHRINK * (x2 - x1), SHRINK * (y2 - y1)
    gx, gy = np.meshgrid(np.linspace(x1 + mx, x2 - mx, GRID), np.linspace(y1 + my, y2 - my, GRID))
    return np.stack([gx.ravel(), gy.ravel()], axis=1).astype(np.float32).reshape(-1, 1, 2)


def _ncc(a: np.ndarray, pa: np.ndarray, b: np.ndarray, pb: np.ndarray) -> np.ndarray:
    """Normalised cross-correlation of the patches around each point ``pa`` in ``a`` and ``pb`` in ``b``."""
    off = np.arange(PATCH, dtype=np.float32) - (PATCH - 1) / 2
    ox, oy = (v.ravel() for v in np.meshgrid(off, off))

    def patches(img: np.ndarray, p: np.ndarray) -> np.ndarray:
        """One row per point: its patch, sampled between pixels, less its mean, to unit length."""
        z = cv2.remap(img, p[:, :1] + ox, p[:, 1:] + oy, cv2.INTER_LINEAR,
                      borderMode=cv2.BORDER_REPLICATE).astype(np.float32)
        z -= z.mean(axis=1, keepdims=True)
        return z / np.maximum(np.linalg.norm(z, axis=1, keepdims=True), 1e-6)

    return np.sum(patches(a, pa) * patches(b, pb), axis=1)


def _inside(box: Box, shape: tuple[int, ...]) -> float:
    """The share of the box's area inside a picture of ``shape`` (H, W)."""
    h, w = shape[:2]
    x1, y1, x2, y2 = box
    area = max(x2 - x1, 0.0) * max(y2 - y1, 0.0)
    seen = max(min(x2, w) - max(x1, 0.0), 0.0) * max(min(y2, h) - max(y1, 0.0), 0.0)
    return seen / area if area > 0 else 0.0

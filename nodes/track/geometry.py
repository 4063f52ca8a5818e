"""The tracker's geometry on plain arrays: box overlap, greedy matching, the camera's motion between two
frames (fitted to the tracks' boxes; one measured on the pictures carries a box as ``warped`` does), and where a
box stands against the picture's edges (``picture``: its width and height in pixels, None where the frame
carries no pixels: then no box is at an edge)."""
from __future__ import annotations

import numpy as np

Picture = tuple[float, float] | None


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if len(a) == 0 or len(b) == 0:
        return np.zeros((len(a), len(b)))
    x1 = np.maximum(a[:, None, 0], b[None, :, 0])
    y1 = np.maximum(a[:, None, 1], b[None, :, 1])
    x2 = np.minimum(a[:, None, 2], b[None, :, 2])
    y2 = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    areas = lambda z: (z[:, 2] - z[:, 0]) * (z[:, 3] - z[:, 1])  # noqa: E731
    return inter / np.maximum(areas(a)[:, None] + areas(b)[None, :] - inter, 1e-9)


def area(b: np.ndarray | tuple[float, ...]) -> float:
    """A box's area (x1, y1, x2, y2); none for an empty or inverted one."""
    return float(max(0.0, b[2] - b[0]) * max(0.0, b[3] - b[1]))


def share_inside(a: np.ndarray | tuple[float, ...], b: np.ndarray | tuple[float, ...]) -> float:
    """The share of box ``a`` that lies inside box ``b``."""
    inter = area((max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3])))
    return inter / max(area(a), 1e-9)


def greedy(iou: np.ndarray, thr: float) -> list[tuple[int, int]]:
    """Row, column pairs by falling overlap, each row and column once, down to ``thr``."""
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


INSIDE = 1 / 3  # of a face's width and height in the picture: less is not masked at the edge


def inside(box: np.ndarray, size: np.ndarray, picture: Picture) -> bool:
    """Whether at least a third of a predicted box's face is still in the picture (``size``: the face's width
    and height where it was last seen whole; a face mostly gone is not masked at the edge, a face the edge
    cuts in half still is: its box is no more than the face's own size, so no mask lingers past it)."""
    if picture is None:
        return True
    width, height = picture
    w = min(box[2], width) - max(box[0], 0.0)
    h = min(box[3], height) - max(box[1], 0.0)
    return bool(w >= INSIDE * size[0] and h >= INSIDE * size[1] and w > 0 and h > 0)


def margin(picture: Picture) -> float:
    """How near an edge a box's side is at it: a detection the edge cuts is clipped to the picture, and
    the detector's grid and the letterbox's rounding leave its side a few pixels in (CenterFace's stride of 4
    at 960x544 is 5 px of a 1280x720 picture)."""
    return 2.0 if picture is None else max(2.0, 0.006 * max(picture))


def touching(box: np.ndarray, picture: Picture) -> np.ndarray:
    """Which edges the box is at: left, top, right, bottom (all False where there are no edges)."""
    if picture is None:
        return np.zeros(4, bool)
    width, height = picture
    m = margin(picture)
    return np.array([box[0] <= m, box[1] <= m, box[2] >= width - m, box[3] >= height - m])


def whole(box: np.ndarray, picture: Picture) -> bool:
    """Whether a box is clear of the picture's edges (its size is the face's, not what the edge leaves)."""
    return not touching(box, picture).any()


def clear_axes(box: np.ndarray, picture: Picture) -> np.ndarray:
    """Whether the box is clear of the left and right edges (x) and of the top and bottom ones (y): along
    such an axis its centre moves as the face does."""
    left, top, right, bottom = touching(box, picture)
    return np.array([not (left or right), not (top or bottom)])


def outward(box: np.ndarray, picture: Picture) -> np.ndarray:
    """Per coordinate, the direction out of the picture through the edges the box touches (0: none)."""
    left, top, right, bottom = touching(box, picture).astype(float)
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


def moved(box: np.ndarray, m: tuple[float, float, float]) -> np.ndarray:
    """A box carried by the camera's motion ``(s, tx, ty)``."""
    s, tx, ty = m
    return box * s + np.array([tx, ty, tx, ty])


def warped(box: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, tuple[float, float, float]]:
    """A box carried by the camera's motion ``a`` (a 2x3 partial affine: turn, zoom and pan), as BoT-SORT carries
    a track's state: its centre where the motion puts it, its size by the zoom; and that motion near the box, as
    ``(s, tx, ty)`` (exact at its centre; what ``moved`` takes)."""
    s = float(np.sqrt(abs(np.linalg.det(a[:, :2]))))
    c = (box[:2] + box[2:]) / 2
    t = a[:, :2] @ c + a[:, 2] - s * c
    near = (s, float(t[0]), float(t[1]))
    return moved(box, near), near

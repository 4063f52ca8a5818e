"""The camera's own motion between two frames, measured on the pictures: BoT-SORT's global motion compensation.

Each frame's picture is made small and grey (``WIDTH`` pixels across: a quarter of a 1280x720 picture); the motion
from the last one to it is a partial affine (rotation, zoom, pan: ``x' = A [x, y, 1]``) in the frame's own
pixels. ``sparse``: corners (``goodFeaturesToTrack``) off the objects' boxes in the last picture, followed into
this one by pyramidal Lucas-Kanade, the affine that most of them agree with fitted by RANSAC
(``estimateAffinePartial2D``; OpenCV seeds RANSAC's generator afresh on every call, so the same pictures give the
same motion). ``ecc``: the Euclidean warp (rotation and pan) that best correlates the two pictures (Evangelidis
and Psarakis' enhanced correlation coefficient, ``findTransformECC``), off the objects' boxes too; slower. Where
it cannot be measured (too few corners followed, most of them not agreeing: a cut, a picture with nothing to
hold on to) the motion is unknown (None), not still."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import cv2
import numpy as np

Method = Literal["sparse", "ecc"]
Affine = np.ndarray  # (2, 3) float64: x' = A @ (x, y, 1)

WIDTH = 320  # about the pixels across the small picture the motion is measured on: the frame's made smaller by
# the whole number nearest its width over this
CORNERS = 200  # corners looked for in the last picture
SPACING = 6  # of the small picture's pixels: the least distance between two corners (spread over the picture)
LEAST = 12  # corners followed, and agreeing, that a motion needs
AGREE = 0.5  # of the corners followed, the share that must agree with the motion fitted
RANSAC_PX = 1.0  # of the small picture's pixels: how far a corner may lie from where the motion puts it and agree
LK_WINDOW = (11, 11)
LK_LEVELS = 3  # pyramid levels above the small picture: a pan of up to about 40 of its pixels a frame
LK_STOP = (cv2.TERM_CRITERIA_EPS | cv2.TERM_CRITERIA_COUNT, 20, 0.03)
ECC_STOP = (cv2.TERM_CRITERIA_EPS | cv2.TERM_CRITERIA_COUNT, 50, 1e-4)
ECC_LEAST = 0.8  # the correlation an ECC warp must reach to be the camera's motion
OPEN = 0.25  # of the small picture: the least left open by the objects' boxes for them to be left out of it


def small(gray: np.ndarray) -> tuple[np.ndarray, float]:
    """The picture about ``WIDTH`` pixels across, each of its pixels the mean of a block of the frame's, and how
    many of the frame's pixels across one of its pixels is. A halving is a linear resize to half (at half size it
    samples between four pixels: their mean), a quarter of what an area resize of the whole costs; an odd factor
    left is an area resize."""
    w = gray.shape[1]
    by = max(1, round(w / WIDTH))
    out = gray
    while by % 2 == 0:
        out = cv2.resize(out, (out.shape[1] // 2, out.shape[0] // 2), interpolation=cv2.INTER_LINEAR)
        by //= 2
    if by > 1:
        out = cv2.resize(out, (out.shape[1] // by, out.shape[0] // by), interpolation=cv2.INTER_AREA)
    return np.ascontiguousarray(out), w / out.shape[1]


def open_mask(shape: tuple[int, ...], boxes: np.ndarray, by: float) -> np.ndarray | None:
    """255 off ``boxes`` (x1, y1, x2, y2 in the frame's pixels) in a small picture of ``shape``, 0 on them: what
    moves of its own is left out. None (the whole picture) where the boxes leave under ``OPEN`` of it (a jam of
    cars that fills the picture: the still ones are most of what there is to go by)."""
    if not len(boxes):
        return None
    mask = np.full(shape[:2], 255, np.uint8)
    for x1, y1, x2, y2 in np.asarray(boxes, np.float64) / by:
        mask[max(0, int(y1)):max(0, int(np.ceil(y2))), max(0, int(x1)):max(0, int(np.ceil(x2)))] = 0
    return mask if np.count_nonzero(mask) >= OPEN * mask.size else None


def measure(before: np.ndarray, after: np.ndarray, by: float, method: Method,
            mask: np.ndarray | None = None) -> Affine | None:
    """The camera's motion from small picture ``before`` to ``after`` (``small``'s, ``by`` frame pixels to one of
    theirs) in the frame's pixels; ``mask``: where in ``before`` to look (``open_mask``). None where it cannot be
    measured."""
    a = _sparse(before, after, mask) if method == "sparse" else _ecc(before, after, mask)
    if a is None or not np.isfinite(a).all():
        return None
    a = a.astype(np.float64)
    a[:, 2] *= by  # the small picture's pixels to the frame's (the linear part is the same at any scale)
    return a


def _sparse(before: np.ndarray, after: np.ndarray, mask: np.ndarray | None) -> Affine | None:
    pts = cv2.goodFeaturesToTrack(before, CORNERS, 0.01, SPACING, mask=mask, blockSize=3)
    if (pts is None or len(pts) < LEAST) and mask is not None:  # the boxes left too little: look everywhere
        pts = cv2.goodFeaturesToTrack(before, CORNERS, 0.01, SPACING, blockSize=3)
    if pts is None or len(pts) < LEAST:
        return None
    nxt, ok, _ = cv2.calcOpticalFlowPyrLK(before, after, pts, np.empty_like(pts), winSize=LK_WINDOW,
                                          maxLevel=LK_LEVELS, criteria=LK_STOP)
    went = ok.ravel() == 1
    if went.sum() < LEAST:
        return None
    a, agree = cv2.estimateAffinePartial2D(pts[went], nxt[went], method=cv2.RANSAC,
                                           ransacReprojThreshold=RANSAC_PX)
    if a is None or agree is None or agree.sum() < max(LEAST, AGREE * went.sum()):
        return None
    return np.asarray(a, np.float64)


def _ecc(before: np.ndarray, after: np.ndarray, mask: np.ndarray | None) -> Affine | None:
    where = mask if mask is not None else np.full(before.shape[:2], 255, np.uint8)
    try:
        cc, warp = cv2.findTransformECC(before, after, np.eye(2, 3, dtype=np.float32), cv2.MOTION_EUCLIDEAN,
                                        ECC_STOP, where, 5)
    except cv2.error:  # it did not converge (a cut, a flat picture)
        return None
    return np.asarray(warp, np.float64) if cc >= ECC_LEAST else None


def then(first: Affine | None, second: Affine | None) -> Affine | None:
    """``first``'s motion followed by ``second``'s (unknown where either is)."""
    if first is None or second is None:
        return None
    return second[:, :2] @ first + np.hstack([np.zeros((2, 2)), second[:, 2:]])


def shift(a: Affine, size: tuple[float, float]) -> float:
    """How far the motion moves the picture's farthest point (of its corners: a zoom or a turn moves those most),
    in pixels."""
    w, h = size
    corners = np.array([[0.0, 0.0, 1.0], [w, 0.0, 1.0], [0.0, h, 1.0], [w, h, 1.0]])
    return float(np.hypot(*(corners @ a.T - corners[:, :2]).T).max())


class CameraMotion:
    """One stream's pictures, one after another: each one's motion from the last (``step``)."""

    def __init__(self, method: Method) -> None:
        self.method = method
        self.last: tuple[np.ndarray, float] | None = None  # the last small picture, and its scale
        self.boxes: np.ndarray = np.zeros((0, 4))  # the objects in it, left out of where motion is looked for

    def step(self, gray: np.ndarray) -> Affine | None:
        """The motion from the last picture to ``gray`` (the frame's grey pixels); None for the first, or where it
        cannot be measured."""
        now, by = small(gray)
        last, self.last = self.last, (now, by)
        if last is None or last[0].shape != now.shape:  # the first picture, or the stream's size changed
            return None
        return measure(last[0], now, by, self.method, open_mask(now.shape, self.boxes, by))

    def seen(self, boxes: Sequence[Sequence[float]]) -> None:
        """The objects found in the last picture (``step``'s): left out of the next motion."""
        self.boxes = np.asarray(boxes, np.float64).reshape(-1, 4)

"""What a tracked object looks like, model-free: a colour histogram of the middle of its box (a person's torso,
a car's body), compared by the Bhattacharyya distance. Two people walking past each other, one hidden behind
the other for a few frames, keep their own ids where their clothes differ: a track does not take a detection
whose colours are far from its own (DeepSORT gates its association by appearance the same way, with a learnt
embedding).

A box's middle is its central half across and the band from a fifth to three fifths down (a person's
chest and belly, clear of the background at the sides, the head and the legs that cross other people's).
The histogram is over hue (12 bins) and saturation (4) of the pixels with colour in them, and over
brightness (4) of those without (grey, black and white clothes), normalised to sum 1: lighting changes
brightness more than hue."""
from __future__ import annotations

import numpy as np

HUE_BINS, SAT_BINS, GREY_BINS = 12, 4, 4
SIZE = HUE_BINS * SAT_BINS + GREY_BINS
LEAST_SATURATION = 40  # of 255: under this a pixel's hue is noise (grey, black, white): it counts by brightness
LEAST_PIXELS = 16  # a middle smaller than this (a far object) has no look: it is gated by nothing
SAMPLES = 1024  # pixels a middle is sampled at, at most (every k-th row and column): a near person costs a far one's
LEARN = 0.1  # how much of a track's look each uncrowded detection it continues replaces


def middle(box: np.ndarray, width: int, height: int) -> tuple[int, int, int, int]:
    """The box's middle in whole pixels, clipped to the picture: x1, y1, x2, y2."""
    x1, y1, x2, y2 = (float(v) for v in box)
    w, h = x2 - x1, y2 - y1
    a, b = int(max(0, x1 + 0.25 * w)), int(min(width, x2 - 0.25 * w))
    c, d = int(max(0, y1 + 0.2 * h)), int(min(height, y1 + 0.6 * h))
    return a, c, max(a, b), max(c, d)


def colours(image: np.ndarray, rgb: bool, boxes: np.ndarray) -> np.ndarray:
    """Each box's histogram (n, SIZE), NaN rows where its middle has too few pixels; ``image`` (H, W, 3) BGR,
    or RGB where ``rgb``."""
    import cv2

    out = np.full((len(boxes), SIZE), np.nan)
    height, width = image.shape[:2]
    for i, box in enumerate(np.asarray(boxes, np.float64).reshape(-1, 4)):
        x1, y1, x2, y2 = middle(box, width, height)
        if (x2 - x1) * (y2 - y1) < LEAST_PIXELS:
            continue
        step = max(1, int(np.sqrt((x2 - x1) * (y2 - y1) / SAMPLES)))
        crop = np.ascontiguousarray(image[y1:y2:step, x1:x2:step])
        hsv = cv2.cvtColor(crop, cv2.COLOR_RGB2HSV if rgb else cv2.COLOR_BGR2HSV)
        h, s, v = (hsv[..., c].reshape(-1).astype(np.int64) for c in range(3))
        coloured = s >= LEAST_SATURATION
        hue = np.minimum(h[coloured] * HUE_BINS // 180, HUE_BINS - 1)
        sat = np.minimum((s[coloured] - LEAST_SATURATION) * SAT_BINS // (256 - LEAST_SATURATION), SAT_BINS - 1)
        grey = np.minimum(v[~coloured] * GREY_BINS // 256, GREY_BINS - 1)
        hist = np.concatenate([np.bincount(hue * SAT_BINS + sat, minlength=HUE_BINS * SAT_BINS),
                               np.bincount(grey, minlength=GREY_BINS)]).astype(np.float64)
        out[i] = hist / hist.sum()
    return out


def distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The Bhattacharyya distance (0: the same colours, 1: none in common) of each histogram in ``a`` (m, SIZE)
    to each in ``b`` (n, SIZE): (m, n), 0 where either has no look (nothing to tell them apart by)."""
    a, b = np.asarray(a, np.float64).reshape(-1, SIZE), np.asarray(b, np.float64).reshape(-1, SIZE)
    overlap = np.sqrt(np.nan_to_num(a, nan=0.0)) @ np.sqrt(np.nan_to_num(b, nan=0.0)).T
    d = np.sqrt(np.clip(1.0 - overlap, 0.0, 1.0))
    unknown = np.any(np.isnan(a), axis=1)[:, None] | np.any(np.isnan(b), axis=1)[None, :]
    return np.where(unknown, 0.0, d)


def learnt(old: np.ndarray | None, new: np.ndarray) -> np.ndarray | None:
    """A track's look after a detection it continued: ``new``'s where it had none, else moved ``LEARN`` of the
    way to it (one frame's blur or a passer-by's arm does not replace it)."""
    if np.isnan(new).any():
        return old
    if old is None:
        return new.copy()
    return (1 - LEARN) * old + LEARN * new

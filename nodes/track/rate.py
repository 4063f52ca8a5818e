"""Each stream's frame rate, from its frames' timestamps: what a node whose counts are frames scales them by, so
that a count chosen at one rate means the same seconds at another (as ByteTrack scales its buffer)."""
from __future__ import annotations

from collections import deque

import numpy as np

FRAMES = 16  # timestamps a stream's rate is measured over


class StreamRates:
    """Each stream's frames a second: the median gap of its last ``FRAMES`` timestamps. A stream whose timestamps
    go back (a file looped, a camera reconnected) is measured afresh, at what it was measured at until two of its
    frames are seen again."""

    def __init__(self) -> None:
        self.times: dict[str, deque[float]] = {}
        self.fps: dict[str, float] = {}

    def update(self, stream: str, pts: float) -> float | None:
        """Take the stream's next timestamp: its frames a second (None until two frames)."""
        times = self.times.setdefault(stream, deque(maxlen=FRAMES))
        if times and pts < times[-1]:
            times.clear()
        if not times or pts > times[-1]:
            times.append(float(pts))
        if len(times) >= 2:
            self.fps[stream] = 1.0 / float(np.median(np.diff(np.array(times))))
        return self.fps.get(stream)

    def drop(self, stream: str) -> None:
        self.times.pop(stream, None)
        self.fps.pop(stream, None)


def factor(fps: float | None, rate: float) -> float:
    """How many of a stream's frames make one frame at ``rate`` (bounded to 0.05-20, to two decimals; 1 while
    its rate is unknown)."""
    return 1.0 if fps is None else min(max(round(fps / rate, 2), 0.05), 20.0)


def scale_count(n: int, by: float) -> int:
    """``n`` frames at a rate ``by`` times as high: 0 stays 0 (off), anything else is at least 1."""
    return 0 if n == 0 else max(1, round(n * by))

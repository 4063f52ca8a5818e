"""The frames a detector's interval passed over, filled in by the tracker: each holds the last tracked frame's
objects until the next frame the detector runs on is tracked; then every track is put in the frames between
at its interpolated box."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from flowpipe.frame import Detection, Frame


class Gaps:
    """Per stream, the last frame the detector ran on and the frames after it its interval passed over
    (``frame.skipped``). A passed-over frame holds that frame's objects where they were (``source:
    predicted``); once the next frame the detector ran on is tracked, those of them still waiting in the
    tracker (``waiting``: a stream's frames waiting there) get each track found in both at its interpolated
    box, a track that starts there from its first box back (a face that came in between is masked from where it
    entered), and one that ended at its last box for the first half of the gap (``source: interpolated``)."""

    def __init__(self, waiting: Callable[[str], list[Frame]], stats: dict[str, Any]) -> None:
        self.waiting = waiting
        self.stats = stats
        self.last: dict[str, Frame] = {}  # each stream's last frame the detector ran on
        self.gap: dict[str, list[Frame]] = {}  # and the frames after it its interval passed over

    def passed(self, frame: Frame) -> None:
        """A frame the detector's interval passed over: until the next frame it runs on is tracked, the last
        one's objects where they were (``source: predicted``)."""
        last = self.last.get(frame.stream)
        frame.detections = [] if last is None else [copy_detection(d, d.box, "predicted") for d in last.detections]
        self.gap.setdefault(frame.stream, []).append(frame)

    def fill(self, frame: Frame) -> None:
        """The frames between the stream's last detected frame and ``frame`` (tracked now) that still wait in
        the tracker get every track at its interpolated box."""
        stream = frame.stream
        last, gap = self.last.get(stream), self.gap.pop(stream, [])
        self.last[stream] = frame
        if not gap:
            return
        waiting = {id(f) for f in self.waiting(stream)}
        before = {d.track_id: d for d in last.detections if d.track_id is not None} if last is not None else {}
        for i, g in enumerate(gap, 1):
            if id(g) not in waiting:  # gone on already (a lookahead shorter than the interval)
                self.stats["passed_unfilled"] = self.stats.get("passed_unfilled", 0) + 1
                continue
            a = i / (len(gap) + 1)
            g.detections = [between(before.get(d.track_id) if d.track_id is not None else None, d, a)
                            for d in frame.detections]
            now = {d.track_id for d in frame.detections}
            g.detections += [copy_detection(d, d.box, "interpolated") for t, d in before.items()
                             if t not in now and a <= 0.5]  # ended: where it was, for half the gap
            self.stats["interpolated"] = self.stats.get("interpolated", 0) + 1

    def fill_track(self, stream: str, nid: int) -> None:
        """Track ``nid``, backfilled into earlier frames the detector ran on, into the frames between them its
        interval passed over (still waiting in the tracker): at its interpolated box, and back from its first
        box."""
        frames = self.waiting(stream)
        if not any(f.skipped for f in frames):
            return
        before: Detection | None = None
        passed: list[Frame] = []
        for f in frames:
            if f.skipped:
                passed.append(f)
                continue
            d = next((d for d in f.detections if d.track_id == nid), None)
            if d is not None:
                for i, g in enumerate(passed, 1):
                    if all(x.track_id != nid for x in g.detections):
                        g.detections.append(between(before, d, i / (len(passed) + 1)))
            before, passed = d, []

    def drop(self, stream: str) -> None:
        """A stream that ended: its frames are let go."""
        self.last.pop(stream, None)
        self.gap.pop(stream, None)


def copy_detection(d: Detection, box: Any, source: str) -> Detection:
    """``d`` at ``box``, saying where the box comes from (``source``: predicted, interpolated, tracked_back)."""
    return Detection(tuple(float(v) for v in box), d.score, d.label, d.label_id,  # type: ignore[arg-type]
                     track_id=d.track_id, source=source, attributes=dict(d.attributes))


def between(before: Detection | None, after: Detection, a: float) -> Detection:
    """``after``'s object a fraction ``a`` of the way from where it was in ``before`` (from where it is in
    ``after`` when it was not there: masked back to where it came in)."""
    if before is None:
        return copy_detection(after, after.box, "interpolated")
    box = (1 - a) * np.asarray(before.box, np.float64) + a * np.asarray(after.box, np.float64)
    return copy_detection(after, box, "interpolated")

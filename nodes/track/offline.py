"""A tracker over a recording held whole (``offline``): each stream's frames kept until it ends, their pixels
spilled to disk (``spill``), then each track followed back from its first frame over the frames before
(``backward``)."""
from __future__ import annotations

import threading
from typing import Any

from flowpipe.errors import FrameError
from flowpipe.frame import Detection, Frame

from .backward import track_back
from .gaps import copy_detection
from .spill import Pictures, Spill, spill_folder


class Offline:
    """Each stream's held frames' pixels in a file of the spill folder ``folder`` (the system's temporary folder
    where None or empty; ``spilled_mb`` in ``stats``), the source's buffers given back as the frames come; when
    the stream ends, its pictures back and each track followed back (``follow_back``, at most ``back`` frames;
    0: as far as it goes). ``lock`` guards ``stats``, which the tracker's workers share."""

    def __init__(self, folder: str | None, back: int, stats: dict[str, Any], lock: threading.Lock) -> None:
        self.folder = spill_folder(folder)
        self.back = back
        self.stats = stats
        self.lock = lock
        self.spills: dict[str, Spill] = {}  # each stream's held frames' pixels
        self.spilled = 0  # bytes of pixels spilled, every stream's

    def keep(self, frame: Frame) -> None:
        """``frame``'s pixels in its stream's spill file (a stream that needs more room than the folder has free
        is refused at its first frame)."""
        try:
            spill = self.spills.get(frame.stream)
            if spill is None:
                spill = Spill(self.folder, frame.stream)
                self.spills[frame.stream] = spill
                spill.room(frame, frame.stream)
            kept = spill.keep(frame)
        except Exception as e:  # the frame is held: say which one failed
            raise FrameError(frame, e) from e
        with self.lock:
            self.spilled += kept
            self.stats["spilled_mb"] = round(self.spilled / 1e6, 1)

    def streams(self) -> list[str]:
        """The streams whose frames are held here."""
        return list(self.spills)

    def follow_back(self, stream: str, frames: list[Frame]) -> None:
        """The stream ended: its frames' pictures back, and each track followed back from the first frame it is
        in over the frames before (where it is not already), until it leaves the picture or is lost."""
        spill = self.spills.pop(stream)
        spill.restore(frames)
        if not frames:
            return
        first: dict[int, tuple[int, Detection]] = {}
        for i, f in enumerate(frames):
            for d in f.detections:
                if d.track_id is not None and d.track_id not in first:
                    first[d.track_id] = (i, d)
        pictures = Pictures(frames)
        s = pictures.scale
        added = 0
        for tid, (i, d) in sorted(first.items(), key=lambda kv: kv[1][0]):
            if i == 0:
                continue
            x1, y1, x2, y2 = (v * s for v in d.box)
            got = track_back(pictures[:i + 1], (x1, y1, x2, y2), max_frames=self.back or None)
            for k, b in enumerate(got):
                f = frames[i - 1 - k]
                if any(x.track_id == tid for x in f.detections):
                    continue
                f.detections.append(copy_detection(d, tuple(v / s for v in b), "tracked_back"))
                added += 1
        with self.lock:
            self.stats["tracked_back"] = self.stats.get("tracked_back", 0) + added

    def drop(self, stream: str) -> None:
        """The stream ended: its spill file goes."""
        spill = self.spills.pop(stream, None)
        if spill is not None:
            spill.close()

    def close(self) -> None:
        """Every spill file goes (a run that failed before its streams ended)."""
        for spill in self.spills.values():
            spill.close()

"""One process's account of its frames: each frame's entry and its one fate, in total, per stream and per
stream being watched (latency), under one lock.

Every frame a source emits is accounted exactly once when its last reference ends: delivered ("out"),
"dropped" by a policy, or "failed". A fate observer (a shard's board, which its supervisor reads after a
crash) is told each entry and fate under the same lock, so what it holds is exact at any moment.
"""
from __future__ import annotations

import threading
import time
from typing import Any

from ..frame import FrameRef
from .context import FateObserver

FATES = ("in", "out", "dropped", "failed")


def _zero() -> dict[str, int]:
    return dict.fromkeys(FATES, 0)


class Account:
    """Frames by fate: in total, per stream (``per_stream``: fates only), per stream with its entries and
    smoothed latency (``streams``: the streams the API shows); ``max_frames`` entries end the run."""

    def __init__(self, max_frames: int | None = None, fates: FateObserver | None = None,
                 record_times: bool = False):
        self.max_frames = max_frames
        self.fates = fates
        self.record_times = record_times
        self.lock = threading.Lock()
        self.settled = threading.Condition(self.lock)  # a frame's fate, while streams are being removed
        self.removing = 0  # streams being removed: fates are signalled while > 0
        self.totals = _zero()
        self.per_stream: dict[str, int] = {}
        self.streams: dict[str, dict[str, int]] = {}  # per stream: in, out, dropped, failed
        self.latency_ms: dict[str, float] = {}  # per stream: entry to final fate, smoothed
        self.done_times: list[tuple[float, str]] = []  # with record_times: when each frame got its fate
        self.entries = 0
        self.flying: dict[str, set[int]] = {}  # per stream: frames that entered and have no fate yet

    def entered(self, ref: FrameRef, t_in: float) -> bool | None:
        """A frame entered the graph (its fate comes to ``ended``); True once ``max_frames`` have; None where
        they had already (another source's frame got in first): it does not enter, and is not counted."""
        with self.lock:
            if self.max_frames is not None and self.entries >= self.max_frames:
                return None
            ref.report_to(self.ended)
            ref.t_in = t_in
            self.totals["in"] += 1
            mine = self.streams.get(ref.stream)
            if mine is None:
                mine = self.streams[ref.stream] = _zero()
            mine["in"] += 1
            self.flying.setdefault(ref.stream, set()).add(ref.index)
            if self.fates is not None:
                self.fates.entered(ref.stream, ref.index)
            self.entries += 1
            return self.max_frames is not None and self.entries >= self.max_frames

    def ended(self, ref: FrameRef) -> None:
        """A frame's last reference ended with its fate."""
        now = time.perf_counter()
        with self.lock:
            self.totals[ref.fate] += 1
            self.per_stream[ref.stream] = self.per_stream.get(ref.stream, 0) + 1
            flying = self.flying.get(ref.stream)
            if flying is not None:
                flying.discard(ref.index)
            mine = self.streams.get(ref.stream)
            if mine is not None:
                mine[ref.fate] += 1
                if ref.t_in:
                    ms = (now - ref.t_in) * 1e3
                    last = self.latency_ms.get(ref.stream)
                    self.latency_ms[ref.stream] = ms if last is None else 0.9 * last + 0.1 * ms
            if self.removing:
                self.settled.notify_all()
            if self.fates is not None:
                self.fates.ended(ref.stream, ref.index, ref.fate)
            if self.record_times:
                self.done_times.append((now, ref.stream))

    def open_stream(self, stream: str) -> None:
        """A stream added to the running graph: its account starts at zero."""
        with self.lock:
            self.streams[stream] = _zero()

    def settle(self, stream: str, timeout: float) -> None:
        """Wait until every frame of ``stream`` that entered has a fate (or ``timeout`` passes)."""
        deadline = time.monotonic() + timeout
        with self.lock:
            self.removing += 1
            try:
                counts = self.streams[stream]
                while counts["in"] > counts["out"] + counts["dropped"] + counts["failed"]:
                    if not self.settled.wait(max(0.0, deadline - time.monotonic())) and time.monotonic() > deadline:
                        break
            finally:
                self.removing -= 1

    def close_stream(self, stream: str) -> tuple[dict[str, int], float | None]:
        """A removed stream's account and latency, no longer kept."""
        with self.lock:
            self.flying.pop(stream, None)
            return dict(self.streams.pop(stream)), self.latency_ms.pop(stream, None)

    def now(self) -> tuple[dict[str, dict[str, int]], dict[str, float]]:
        """Every stream's frames by fate so far, and its smoothed latency (ms)."""
        with self.lock:
            return {s: dict(c) for s, c in self.streams.items()}, dict(self.latency_ms)

    def has(self, stream: str) -> bool:
        with self.lock:
            return stream in self.streams

    def in_flight(self) -> list[tuple[str, int]]:
        """The frames (stream, index) that entered and have no fate yet."""
        with self.lock:
            return [(s, i) for s, idx in self.flying.items() for i in sorted(idx)]

    def pending(self, stream: str, after: int, upto: int) -> bool:
        """Whether a frame of ``stream`` with an index in ``(after, upto]`` entered and has no fate yet."""
        with self.lock:
            return any(after < i <= upto for i in self.flying.get(stream, ()))

    def frames(self) -> dict[str, Any]:
        """Frames by fate so far (a copy)."""
        with self.lock:
            return dict(self.totals)

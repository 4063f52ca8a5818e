"""The detector's interval: which frames of each stream the detector runs on (DL Streamer's ``gvadetect
inference-interval``, DeepStream's ``nvinfer interval``), decided where its cost begins, at the
preprocess. The frames between go on without a tensor (``frame.skipped``); a tracker with a lookahead fills
their objects in from the frames the detector ran on before and after them.

Privacy first: the detector runs on every frame of a stream while the tracker it follows says the stream has
young tracks (found, not yet confirmed) or small objects, and on a frame whose picture changed (a cut, a fast
pan), whatever the count.

What the nodes after it say comes back on a back edge (``flowpipe.backedge``) read for a defined frame: the
decision for frame t reads the tracker's word as of frame t - ``delay`` (waiting for it), never whatever it had
said so far, so the frames the detector runs on are a function of the input, as on a quiet machine so under
load, over processes and with any batch."""
from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
from pydantic import Field

from flowpipe.backedge import BackEdge
from flowpipe.frame import Frame
from flowpipe.node import NodeConfig

THUMB = (64, 36)  # the gray thumbnail a picture's change is measured on


class Interval(NodeConfig):
    """``every``: the detector runs on one frame in this many of each stream (1: every frame)."""

    every: int = Field(1, ge=1, le=30, description="the detector runs on one frame in this many of each stream; "
                       "a tracker's lookahead of at least every - 1 frames fills the others in")
    follow: str | None = Field(None, description="the tracker (its node id) whose word counts: every frame is "
                               "detected while it says a stream has young tracks or small objects")
    small: float = Field(0.0, ge=0, description="pixels: every frame is detected while a tracked object of the "
                         "stream is narrower than this (follow)")
    change: float = Field(0.08, ge=0, le=1, description="a frame whose picture differs this much from the last "
                          "one the detector ran on (mean absolute difference of a 64x36 gray thumbnail, 0..1) is "
                          "detected whatever the count: a cut, a fast pan, the lights (0: never measured)")
    delay: int = Field(4, ge=1, le=30, description="follow: the decision for frame t reads the tracker's word as of "
                       "frame t - delay, waiting for it (a back edge): the same frames detected however loaded the "
                       "machine; a stream's frames between this node and the tracker are this many at most on the "
                       "frames the count passes over (more: more of them at once, the word older)")


class Along(NodeConfig):
    """A second detector on the frames a first one runs on: ``node``, the first one's preprocess (the frames
    its interval passes over get no tensor here either); ``every``: one in this many of those; ``follow``:
    the nodes downstream (their ids) whose word counts: on each of those frames while one's last word on the
    stream says it found something the first detector had not made sure of (``found``: a decoder of this
    detector) or asks for it (``ask``: a face not judged yet, a head sought on every frame). A word that names
    the frame it was formed on (``frame``) asks once: it counts only if formed on or after the last frame this
    detector ran on, so that an ask is answered by one run, not by one on every frame the answer takes to come
    back through the graph. A preprocess that cuts ``objects`` looks at them on each frame ``node`` wrote a tensor
    for, and on no other (a classifier on the faces a person detector's boxes leave, on the frames it ran on)."""

    node: str = Field(description="the preprocess (its node id) whose interval this one keeps")
    every: int = Field(1, ge=1, le=30, description="one in this many of the frames that one runs on")
    follow: str | list[str] | None = Field(None, description="the nodes whose word counts (while one says it "
                                           "found or asks: every frame); a node left out of the graph says "
                                           "nothing")
    delay: int = Field(1, ge=1, le=30, description="follow: the decision for frame t reads each one's word as of "
                       "frame t - delay, waiting for it (a back edge: the same frames whatever the load)")

    def followed(self) -> list[str]:
        """The nodes whose word counts."""
        return [] if self.follow is None else [self.follow] if isinstance(self.follow, str) else list(self.follow)


class AlongGate:
    """Per stream: whether a second detector runs on a frame the first one runs on, and why."""

    def __init__(self, config: Along, edges: list[BackEdge], stats: dict[str, Any]):
        self.config, self.edges, self.stats = config, edges, stats
        self.seen: Counter[str] = Counter()  # per stream: frames the first detector ran on
        self.ran: dict[str, int] = {}  # per stream: the last frame this one ran on (``ran_on``)
        self.why: Counter[str] = Counter()
        self.lock = threading.Lock()
        names = " or ".join(f"'{n}'" for n in config.followed())
        stats["along"] = f"on the frames '{config.node}' runs on" + (
            f", one in {config.every}" + (f", each while {names} finds what it alone sees or asks (as of "
                                          f"{config.delay} frame(s) before)" if names else "")
            if config.every > 1 else "")

    def run(self, frame: Frame) -> bool:
        c = self.config
        if frame.skipped == c.node:  # the first one's interval passed over it
            return False
        if c.every <= 1:
            return True
        with self.lock:
            n = self.seen[frame.stream]
            self.seen[frame.stream] += 1
        last = self.ran.get(frame.stream, -1)
        if frame.index < last:  # the stream's frames counted again from a lower index (a source reopened)
            last = -1
        if n == 0 or n % c.every == 0:
            words: list[dict[str, Any] | None] = []
        else:  # each one's word as of a defined frame, however far it had got
            words = [e.read(frame.stream, frame.index - c.delay) for e in self.edges]
            if any(e.stalls for e in self.edges):
                self.stats["back_edge_stalls"] = sum(e.stalls for e in self.edges)
        why = "first" if n == 0 else "count" if n % c.every == 0 else \
            "found" if any(w is not None and w.get("found") for w in words) else \
            "asked" if any(w is not None and w.get("ask") and w.get("frame", last) >= last for w in words) else ""
        with self.lock:
            self.why[why or "skipped"] += 1
            self.stats["detector_runs"] = dict(self.why)
        return bool(why)

    def ran_on(self, frame: Frame) -> None:
        """The detector runs on ``frame`` (its preprocess writes its tensor): words formed before it ask no more."""
        with self.lock:
            self.ran[frame.stream] = frame.index

    def forget(self, stream: str) -> None:
        with self.lock:
            self.seen.pop(stream, None)
            self.ran.pop(stream, None)


@dataclass
class _Stream:
    started: bool = False
    since: int = 0  # frames since the detector last ran
    thumb: np.ndarray | None = None  # the picture it last ran on


def thumbnail(frame: Frame) -> np.ndarray:
    """``frame``'s picture as a small gray image (the luma plane of YUV frames: no conversion)."""
    gray = frame.gray()
    return cv2.resize(gray, THUMB, interpolation=cv2.INTER_AREA).astype(np.int16)


class Gate:
    """Per stream: whether the detector runs on a frame, and why (counted in ``stats``)."""

    def __init__(self, config: Interval, edge: BackEdge | None, stats: dict[str, Any]):
        self.config = config
        self.edge = edge  # the followed tracker's word per stream and frame: {"young": n, "smallest": px}
        self.streams: dict[str, _Stream] = {}
        self.lock = threading.Lock()
        self.why: Counter[str] = Counter()
        self.stats = stats
        stats["interval"] = f"every {config.every}" + (f", every frame while '{config.follow}' has young tracks"
                                                        + (f" or objects under {config.small:g} px"
                                                           if config.small else "")
                                                        + f" (its word as of {config.delay} frames before)"
                                                        if config.follow else "")

    def run(self, frame: Frame) -> bool:
        """Whether the detector runs on ``frame`` (every frame counts toward the interval)."""
        c = self.config
        with self.lock:
            s = self.streams.setdefault(frame.stream, _Stream())
        thumb = thumbnail(frame) if c.change > 0 else None
        why = self._why(frame, s, thumb)
        s.since = 0 if why else s.since + 1
        if why:
            s.thumb = thumb
        with self.lock:
            self.why[why or "skipped"] += 1
            self.stats["detector_runs"] = dict(self.why)
        return bool(why)

    def _why(self, frame: Frame, s: _Stream, thumb: np.ndarray | None) -> str:
        c = self.config
        if not s.started:
            s.started = True
            return "first"
        if s.since + 1 >= c.every:
            return "count"
        # the tracker's word as of frame t - delay (waiting for it): the same whatever the load
        word = self.edge.read(frame.stream, frame.index - c.delay) if self.edge is not None else None
        if self.edge is not None and self.edge.stalls:
            self.stats["back_edge_stalls"] = self.edge.stalls
        if self.edge is not None and self.edge.writer and word is None:
            return "unheard"  # the tracker had not tracked the stream by then (its first frames)
        if word is not None and word.get("young"):
            return "young"
        if word is not None and c.small and word.get("smallest", np.inf) < c.small:
            return "small"
        if thumb is not None and s.thumb is not None and float(np.abs(thumb - s.thumb).mean()) / 255 >= c.change:
            return "change"
        return ""

    def forget(self, stream: str) -> None:
        with self.lock:
            self.streams.pop(stream, None)

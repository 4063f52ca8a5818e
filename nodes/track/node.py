"""The tracker node: adapts each frame's detections to its stream's ``TrackerCore`` (``core.py``) and, with a
lookahead, holds frames so that a track that starts late gets its candidates in the frames before."""
from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import fields, replace
from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator

from flowpipe.errors import FrameError
from flowpipe.frame import Detection, Frame
from flowpipe.node import PIXELS_ALL, AsyncNode, Node, NodeConfig, NodeContract, RunContext
from flowpipe.registry import register

from . import appearance
from .core import TrackerCore, TrackerSettings
from .gaps import Gaps
from .motion import CameraMotion, shift, then
from .offline import Offline
from .rate import StreamRates, factor, scale_count

#: What a tracker that looks at colours reads the pixels as.
COLOUR_PIXELS = frozenset({"BGR", "RGB"})

#: The thresholds a running graph may change: each stream's tracker reads them afresh every frame.
TUNABLE = frozenset({"iou_threshold", "high_score", "max_age", "min_hits", "coast", "confirm", "candidate_iou",
                     "hold", "reach"})


@register("tracker")
class Tracker(AsyncNode, Node):
    """Assigns track ids: high-score detections match first, low-score ones then keep tracks alive
    (ByteTrack's idea) with IoU and a constant-velocity prediction; one id space per stream.

    Detections under ``high_score`` are candidates: they continue a track they match and are dropped
    otherwise (a low score alone starts nothing, so the decoder may pass scores as low as 0.1 without
    false boxes). With ``coast: N`` a confirmed track the detector misses stays in the frame's detections
    for up to N frames at its predicted box (``source: predicted``): a privacy mask holds through a miss.
    With ``lookahead: N`` each frame waits here for N more of its stream: a track that starts also gets
    the candidates found where it was in the frames before (a face that scores high only after a few
    frames is masked from its first), at N frames of latency.

    With a detector interval upstream (a preprocess's ``interval``), the frames the detector passed over
    (``frame.skipped``) wait here too: once the next frame it ran on has been tracked, each track found in both
    is put in the frames between at its interpolated box, a track that starts there from its first box back
    (a face that came in between is masked from where it entered), and one that ended at its last box for
    the first half of the gap (``source: interpolated``). The track counts (``coast``, ``hold``, ``max_age``,
    ``start_after``, ``lookahead``'s memory) are of the frames the detector ran on (with ``rate: R``, those
    that are durations at R of them a second, scaled to a stream's own rate). The tracker tells the
    interval which streams have young tracks (found, not yet confirmed) or candidates, and its smallest
    object, as of each frame (its back edge, read ``delay`` frames later): the detector runs on every frame of
    those.

    With ``gmc`` it measures the camera's own motion from each frame of a stream to the next on the pictures
    (``motion.py``: a small grey picture, the objects' boxes left out) and carries every track by it before
    matching, as BoT-SORT does: a parked car keeps a still track, and its id, while the camera pans or shakes.
    Each frame says how far the camera moved the picture (``meta["camera_motion"]``, pixels at its farthest
    corner; None where it could not be measured), which an analytics node's ``camera_moving`` pauses counting on.

    Frames wait for the next ones of their stream, never for a clock: what a frame's objects are is a function
    of the input. Only a live source's frames (a camera that stalls) go on after ``max_wait`` without them.

    With ``offline`` (a recording) every frame of a stream waits here until the stream ends, its pixels in a
    file of the ``spill`` folder (the source's buffers go back at once); then each track is followed back from
    the first frame it is in, over the frames before, until it leaves the picture or is lost (median flow on
    the pictures, ``backward.track_back``), and put there (``source: tracked_back``): a face is masked from its
    first frame in the picture, however long the detector took to find it. A live source is refused.

    YAML:
        - id: track
          type: tracker
          config: {iou_threshold: 0.3, max_age: 15, coast: 10}
          inputs: {detections: faces.detections}
    """

    inputs = {"detections": "detections"}
    outputs = {"detections": "detections"}

    class Config(NodeConfig):
        iou_threshold: float = Field(0.3, ge=0, le=1)
        high_score: float = Field(0.5, ge=0, le=1, description="detections from this score start tracks and "
                                  "match first; lower ones are candidates (the decoders' default threshold is "
                                  "0.5, so by default there are none and every detection goes on)")
        max_age: int = Field(15, ge=0, description="frames a lost track is kept")
        min_hits: int = Field(1, ge=1, description="frames before an id is reported")
        coast: int = Field(0, ge=0, description="frames a confirmed track the detector misses is still put "
                                                "in the frame, at its predicted box (0: never); one leaving "
                                                "through the picture's edge stays until under a third of it "
                                                "is in "
                                                "(max_age at most)")
        confirm: int = Field(3, ge=1, description="frames a track must have been found in at a high score "
                                                  "(or with a look that passed its reject) before it coasts")
        candidate_iou: float = Field(0.5, ge=0, le=1, description="overlap a candidate needs with a track's "
                                                                   "predicted box to continue it")
        hold: int = Field(30, ge=0, description="frames a track goes on on candidates alone after its last "
                                                "high-score detection")
        start_after: int = Field(0, ge=0, description="a candidate found in this many frames in a row at one "
                                                      "place starts a track too (0: only high scores start "
                                                      "tracks); an occluded face that never scores high")
        start_score: float = Field(0.0, ge=0, le=1, description="start_after: the mean score those frames need "
                                                                "(weak, flickering candidates on a face-like "
                                                                "thing start nothing)")
        lookahead: int = Field(0, ge=0, le=60, description="frames each frame waits here for the next ones of "
                                                           "its stream: a track that starts also gets the "
                                                           "candidates found where it was in the frames before "
                                                           "(latency: this many frames)")
        max_wait: float = Field(0.5, gt=0, description="lookahead: seconds a live source's frame waits at most (a "
                                "camera that stalls lets its last frames go); a file's frames wait for the next "
                                "ones, or the stream's end, however long that takes")
        camera_motion: bool = Field(False, description="a track the detector misses moves with the camera's pan "
                                     "and zoom, fitted to the tracks found in this frame and the last (at least "
                                     "4, three quarters agreeing), instead of on its own slowing velocity: a "
                                     "coasting mask stays on its face while a camera pans or zooms")
        gmc: Literal["off", "sparse", "ecc"] = Field("off", description="the camera's own motion, measured on "
                                                     "the pictures (global motion compensation, as BoT-SORT's): "
                                                     "each frame's from the last, on a small grey picture (about "
                                                     "320 pixels across) with the objects' boxes left out; "
                                                     "sparse: corners followed by optical flow, the turn, zoom "
                                                     "and pan most of them agree on (RANSAC); ecc: the turn and "
                                                     "pan that best correlate the two pictures (slower). Every "
                                                     "track is carried by it before it is matched: a still "
                                                     "object keeps a still track while the camera pans or "
                                                     "shakes. Each frame says how far it moved the picture "
                                                     "(meta camera_motion: pixels at its farthest corner; none "
                                                     "where it could not be measured), which an analytics "
                                                     "node's camera_moving pauses counting on (on: sparse). off: "
                                                     "the pictures are not looked at (camera_motion fits the "
                                                     "camera's motion to the tracks instead, for missed ones)")
        reach: float = Field(0.0, ge=0, description="a confirmed track that no detection overlaps takes one "
                                                    "ahead of it on its way, within this many of its heights "
                                                    "per frame since it was last found (0: overlap only): a "
                                                    "person crossing fast, found once every few frames, keeps "
                                                    "one id")
        appearance: float = Field(0.0, ge=0, le=1, description="the largest colour distance (Bhattacharyya, "
                                  "0-1, of hue-saturation histograms of the middle of the boxes: a person's "
                                  "torso) a detection may be from a track's look to continue it (0: colours "
                                  "are not looked at): two people who walk past each other, or one behind "
                                  "the other, keep their own ids where their clothes differ. The tracker "
                                  "then reads the pixels (BGR or RGB frames)")
        checks: dict[str, tuple[float, float]] = Field({}, description="second looks written on detections "
                                                        "(attributes: a centerface_check's 'face'), each with "
                                                        "[reject, sure]: a look at sure or more makes a detection "
                                                        "high-score (starts a track, confirms one); a look from "
                                                        "reject up confirms the track it continues and lets it "
                                                        "start one by persistence; a detection whose every look "
                                                        "(with a reject over 0) is under its reject is no face, "
                                                        "whatever the detector scored: it starts, continues and "
                                                        "confirms no track")
        offscreen: int = Field(0, ge=0, description="with camera_motion: frames a confirmed face the camera "
                               "took out of the picture is remembered, moving with the camera; when the camera "
                               "brings it back it is masked as it comes in, for coast frames or until found "
                               "(a camera panning to and fro)")
        rate: float | None = Field(None, gt=0, description="tracked frames a second the frame counts above "
                                   "(max_age, coast, hold, offscreen) were chosen at: a stream tracked at another "
                                   "rate (from its timestamps; with a detector interval, the frames it ran on) has "
                                   "them scaled to the same seconds, as ByteTrack scales its buffer (a 10 fps "
                                   "camera keeps a lost track as long as a 25 fps one); none: they are frames at "
                                   "any rate. reach stays a fraction of a height per frame missed")
        smooth: float = Field(0.0, ge=0, lt=1, description="how slowly a track's box comes back in after it went "
                                                           "out to cover a detection (0: each detection as it "
                                                           "is): a mask that does not breathe with the "
                                                           "detector's jitter, and never uncovers the face")
        offline: bool = Field(False, description="a recording: every frame of a stream waits here until it ends "
                              "(its pixels spilled to disk), and each track is followed back from its first frame "
                              "over the frames before, until it leaves the picture or is lost (a live source is "
                              "refused)")
        spill: str | None = Field(None, description="offline: the folder the held frames' pixels go to (the "
                                  "system's temporary folder where none or empty); a stream that needs more room "
                                  "than it has free is refused at its first frame")
        back: int = Field(0, ge=0, description="offline: frames a track is followed back at most (0: as far as "
                          "it goes)")

        @field_validator("gmc", mode="before")
        @classmethod
        def _on_off(cls, v: Any) -> Any:
            return {False: "off", True: "sparse"}.get(v, v) if isinstance(v, bool) else v  # YAML reads off as false

        @field_validator("camera_motion", mode="before")
        @classmethod
        def _fitted(cls, v: Any) -> Any:
            if v in ("sparse", "ecc"):  # BoT-SORT's names for measuring it on the pictures
                raise ValueError(f"expected true or false (the camera's motion fitted to the tracks), got {v!r}; "
                                 f"measured on the pictures it is gmc: {v}")
            return v

    config: Config

    @classmethod
    def contract(cls, config: NodeConfig) -> NodeContract:
        assert isinstance(config, cls.Config)
        # colours: it reads the pixels; gmc reads any format's grey (a YUV picture's luma plane as it is)
        pixels = COLOUR_PIXELS if config.appearance else PIXELS_ALL
        if config.offline:
            return cls.declare(pixels=pixels, holds_frames=True, tunable=TUNABLE,
                               one_worker="a tracker that holds whole streams keeps each one's frames in order",
                               isolation="an offline tracker holds frames past process()",
                               whole_stream="offline: true holds every frame of a stream until it ends")
        if not config.lookahead:  # every frame goes on from process; tracks are per stream
            return cls.declare(pixels=pixels, one_worker=None, tunable=TUNABLE)
        return cls.declare(pixels=pixels, holds_frames=True,
                           one_worker="a tracker with a lookahead keeps each stream's frames in order on one worker",
                           isolation="a tracker with a lookahead holds frames past process()", tunable=TUNABLE)

    def open(self, ctx: RunContext) -> None:
        self.settings = TrackerSettings(**{f.name: getattr(self.config, f.name) for f in fields(TrackerSettings)})
        self.streams: dict[str, TrackerCore] = {}  # each stream's tracks
        self.waiting: dict[str, deque[tuple[Frame, float]]] = {}  # lookahead: frames and when they came
        self.lock = threading.Lock()
        self.wake = ctx.wake
        self.timer: threading.Timer | None = None
        self.timer_due = 0.0
        # (offline: the frames held give their pooled buffers back as they come, so they hold none)
        self.max_held = 0 if self.config.offline else self.config.lookahead * max(1, ctx.streams)
        self.stats = ctx.stats
        c = self.config
        self.offline = Offline(c.spill, c.back, self.stats, self.lock) if c.offline else None  # whole streams held
        self.edge = ctx.back_edge(self.id).open()  # this tracker's word to a detector interval, per frame
        self.stopping: set[str] = set()  # streams being removed: their waiting frames go without waiting
        self.gaps = Gaps(self._waiting, self.stats)  # the frames a detector's interval passed over
        self.rates = StreamRates()  # rate: each stream's tracked frames a second
        self.cameras: dict[str, CameraMotion] = {}  # gmc: each stream's last picture
        self.warps: dict[str, np.ndarray | None] = {}  # gmc: each stream's camera motion since its last tracked
        # frame (None: some frame's could not be measured)
        self.scaled: dict[str, tuple[TrackerSettings, float, TrackerSettings]] = {}  # rate: base, factor, scaled
        if self.config.lookahead:
            self.stats["lookahead"] = f"{self.config.lookahead} frames"
            self.stats["backfilled"] = 0  # candidates that became a track's detections in earlier frames

    def retune(self, config: NodeConfig) -> None:
        """New thresholds for every stream's tracks, each from its next frame (the tracks go on)."""
        assert isinstance(config, self.Config)
        self.config = config
        self.settings = replace(self.settings, **{f: getattr(config, f) for f in TUNABLE})

    def stream_stopping(self, stream: str) -> None:
        """A stream being removed: no next frame of it comes to wait for; its frames go at the next poll."""
        with self.lock:
            self.stopping.add(stream)
        self.wake()

    def end_stream(self, stream: str) -> None:
        with self.lock:
            self.stopping.discard(stream)
        self.streams.pop(stream, None)
        self.gaps.drop(stream)
        self.rates.drop(stream)
        self.scaled.pop(stream, None)
        self.cameras.pop(stream, None)
        self.warps.pop(stream, None)
        self.edge.forget(stream)
        with self.lock:
            self.waiting.pop(stream, None)
        if self.offline is not None:
            self.offline.drop(stream)

    def _waiting(self, stream: str) -> list[Frame]:
        """The stream's frames waiting here (for a lookahead, or the end of an offline stream), in order."""
        with self.lock:
            return [f for f, _ in self.waiting.get(stream, ())]

    def _backfill(self, stream: str, nid: int, seen: list[tuple[Frame, Detection]]) -> None:
        """A track that starts now: its candidates in the frames still waiting here become its detections."""
        waiting = {id(f) for f in self._waiting(stream)}
        for f, d in seen:
            if id(f) in waiting:
                d.track_id = nid
                f.detections.append(d)
                self.stats["backfilled"] += 1
        self.gaps.fill_track(stream, nid)

    def process(self, frame: Frame, port: str) -> Any:
        try:
            if self.config.gmc != "off":
                self._camera(frame)
            if frame.skipped:  # the detector's interval passed over it: filled in once the next is tracked
                self.gaps.passed(frame)
                self.edge.say(frame.stream, frame.index)  # its word as of the last tracked frame holds
            else:
                self._track(frame)
                self.gaps.fill(frame)
                self._say(frame)
            if self.config.gmc != "off":
                self.cameras[frame.stream].seen([d.box for d in frame.detections])
        except Exception as e:  # the frame is held: say which one failed
            raise FrameError(frame, e) from e
        if self.config.offline:
            self._keep(frame)
            return []
        if not self.config.lookahead:
            return frame
        with self.lock:
            q = self.waiting.setdefault(frame.stream, deque())
            # a live source's frame may go on by the clock (max_wait); a file's waits for the frames after it
            q.append((frame, time.monotonic() if frame.meta.get("live") else float("inf")))
            out = [q.popleft()[0] for _ in range(len(q) - self.config.lookahead)]
        self._arm()
        return out

    def poll(self) -> list[Frame]:
        """Frames that waited ``max_wait`` (their stream ended or stalled) go on."""
        if not self.config.lookahead:
            return []
        now = time.monotonic()
        due, out = now - self.config.max_wait, []
        with self.lock:
            if now >= self.timer_due:
                self.timer = None  # it has woken this poll (or is about to: one more wake is harmless)
            for stream, q in self.waiting.items():
                while q and (q[0][1] <= due or stream in self.stopping):  # (a file's never is due)
                    out.append(q.popleft()[0])
        self._arm()
        return out

    def flush(self) -> list[Frame]:
        if self.offline is not None:  # the streams ended: each one's frames back from disk, its tracks followed back
            for stream in self.offline.streams():
                self.offline.follow_back(stream, self._waiting(stream))
        with self.lock:
            out = [f for q in self.waiting.values() for f, _ in q]
            self.waiting.clear()
        return out

    def _keep(self, frame: Frame) -> None:
        """Offline: ``frame`` waits here until its stream ends, its pixels in the stream's spill file."""
        assert self.offline is not None
        self.offline.keep(frame)
        with self.lock:
            self.waiting.setdefault(frame.stream, deque()).append((frame, float("inf")))

    def _camera(self, frame: Frame) -> None:
        """The camera's motion from the stream's last frame to ``frame`` (``gmc``), on its meta (``camera_motion``:
        how far it moved the picture's farthest corner, in pixels; None where it could not be measured) and
        added to the motion the stream's next tracked frame carries its tracks by."""
        cam = self.cameras.get(frame.stream)
        if cam is None:
            cam = self.cameras[frame.stream] = CameraMotion("ecc" if self.config.gmc == "ecc" else "sparse")
        first = cam.last is None
        if frame.data is None:  # no picture: the next motion is measured from the next picture seen
            cam.last = None
        a = cam.step(frame.gray()) if frame.data is not None else None
        frame.meta["camera_motion"] = None if a is None else round(shift(a, (frame.width, frame.height)), 2)
        self.warps[frame.stream] = then(self.warps.get(frame.stream, np.eye(2, 3)), a)
        if a is None and not first:
            with self.lock:
                self.stats["camera_unmeasured"] = self.stats.get("camera_unmeasured", 0) + 1

    def _say(self, frame: Frame) -> None:
        """The tracker's word on ``frame``'s stream to the detector's interval: its young tracks (found, not yet
        confirmed) and candidates, and its smallest object."""
        core = self.streams[frame.stream]
        young = sum(t.confirmed < self.settings.confirm and not t.missed for t in core.tracks) + len(core.tentative)
        sizes = [float(t.box[2] - t.box[0]) for t in core.tracks if not t.missed]
        self.edge.say(frame.stream, frame.index, {"young": young, "smallest": min(sizes, default=float("inf"))})

    def _arm(self) -> None:
        """A wake when the oldest waiting frame is due (poll lets it go if no frame of its stream came); one
        timer at a time, so a steady stream starts one every ``max_wait``, not one a frame."""
        with self.lock:
            oldest = min((q[0][1] for q in self.waiting.values() if q), default=float("inf"))
            if self.timer is not None or oldest == float("inf"):  # none waiting, or only a file's frames
                return
            self.timer_due = oldest + self.config.max_wait
            self.timer = threading.Timer(max(0.0, self.timer_due - time.monotonic()) + 1e-3, self.wake)
            self.timer.daemon = True
            self.timer.start()

    def close(self) -> None:
        timer = getattr(self, "timer", None)
        if timer is not None:
            timer.cancel()
        offline = getattr(self, "offline", None)
        if offline is not None:  # a run that failed before its streams ended
            offline.close()

    def _track(self, frame: Frame) -> None:
        """The frame's detections through its stream's tracker: track ids, smoothed boxes, unmatched
        candidates out, coasting tracks in at their predicted boxes, late starts backfilled."""
        settings = self._settings(frame)
        core = self.streams.get(frame.stream)
        if core is None:
            core = self.streams[frame.stream] = TrackerCore(settings)
        elif core.settings is not settings:  # retuned, or its rate measured: between two of its frames
            core.settings = settings
        dets = frame.detections
        boxes = np.array([d.box for d in dets], np.float64).reshape(-1, 4)
        colours, apart = None, core.kept_apart
        if settings.appearance and frame.data is not None:
            colours = appearance.colours(frame.image, frame.format == "RGB", boxes)
        got = core.update(boxes,
                          np.array([d.score for d in dets], np.float64),
                          looks={name: np.array([d.attributes.get(name, np.nan) for d in dets], np.float64)
                                 for name in self.settings.checks},
                          labels=[(d.label, d.label_id) for d in dets], refs=[(frame, d) for d in dets],
                          picture=None if frame.data is None else (frame.width, frame.height),
                          frame=frame.index, colours=colours, warp=self.warps.pop(frame.stream, None))
        for i, d in enumerate(dets):
            if got.smoothed[i]:
                d.box = (float(got.boxes[i, 0]), float(got.boxes[i, 1]), float(got.boxes[i, 2]),
                         float(got.boxes[i, 3]))
            if got.ids[i] >= 0:
                d.track_id = int(got.ids[i])
        kept = [d for d, keep in zip(dets, got.keep) if keep]
        for c in got.coasting:
            box = (float(c.box[0]), float(c.box[1]), float(c.box[2]), float(c.box[3]))
            kept.append(Detection(box, 0.0, c.label, c.label_id, track_id=c.track_id, source="predicted"))
        frame.detections = kept
        for nid, seen in got.backfill:
            self._backfill(frame.stream, nid, seen)
        if settings.appearance:  # pairs its colours kept apart, every stream's (streams may be on several workers)
            with self.lock:
                self.stats["kept_apart"] = self.stats.get("kept_apart", 0) + core.kept_apart - apart

    def _settings(self, frame: Frame) -> TrackerSettings:
        """The settings ``frame``'s stream is tracked with: the node's, with ``rate`` its frame counts scaled to
        the stream's tracked frames a second (``rate.StreamRates``: with a detector interval upstream, the frames
        the detector ran on; the node's own until two frames are seen)."""
        base, rate = self.settings, self.config.rate  # read once: a retune between two reads mixes them
        if rate is None:
            return base
        fps = self.rates.update(frame.stream, frame.pts)
        if fps is None:
            return base
        by = factor(fps, rate)
        was_base, was, scaled = self.scaled.get(frame.stream, (None, None, None))
        if was_base is base and was == by and scaled is not None:
            return scaled
        scaled = replace(base, max_age=scale_count(base.max_age, by), coast=scale_count(base.coast, by),
                         hold=scale_count(base.hold, by), offscreen=scale_count(base.offscreen, by))
        self.scaled[frame.stream] = (base, by, scaled)
        self.stats["rate"] = f"{fps:.1f} frames/s on stream {frame.stream}: counts x{by}"
        return scaled

"""Recording: each stream written to a video file (fragmented MP4 through PyAV, or OpenCV with a FourCC),
with event clips cut from the recording's own packets."""
from __future__ import annotations

import errno
import logging
import os
import shutil
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, Literal

import cv2
from pydantic import BaseModel, ConfigDict, Field

from flowpipe.accel.host import usable_cores
from flowpipe.frame import Frame
from flowpipe.node import AsyncNode, Node, NodeConfig, NodeContract, Resource, RunContext
from flowpipe.registry import register
from flowpipe_nodes.media.clips import ClipKeeper
from flowpipe_nodes.media.encode import Recorder, available

log = logging.getLogger("flowpipe.video")


class EventClips(BaseModel):
    """Where an event's clip goes and how much of the stream around it (DeepStream's Smart Record)."""

    model_config = ConfigDict(extra="forbid")
    path: str = Field(description="folder; clips are STREAM-FRAME.mp4 (the frame their first event began on)")
    pre_s: float = Field(5.0, ge=0, le=60, description="seconds before the event (from the keyframe before)")
    post_s: float = Field(5.0, ge=0, le=600, description="seconds after it ends")
    keep_s: float | None = Field(None, gt=0, description="clips older than this are deleted")
    keep_mb: float | None = Field(None, gt=0, description="a stream's clips beyond this many MB are deleted, "
                                                           "oldest first")


@register("video_writer")
class VideoWriter(AsyncNode, Node):
    """Writes each stream to a video file: H.264 in fragmented MP4 by default (browsers play it; a crash
    leaves it playable up to its last fragment), H.265 as an option, segments on a schedule, hardware
    encoders when asked. Closed on every exit path. Each frame goes on (output ``frame``) once the encoder
    has it, saying where it was recorded (``meta["recording"]``: file and frame in it), so a metadata sink
    after the writer names the segment and frame of every record.

    YAML:
        - id: out
          type: video_writer
          config: {path: out/{stream}.mp4, codec: h264, crf: 23, segment_seconds: 60}
          inputs: {frame: blur.frame}
    """

    inputs = {"frame": "frame"}
    outputs = {"frame": "any"}  # what came in, detections and all

    class Config(NodeConfig):
        path: str = Field(description="output file; '{stream}' is replaced by the stream id")
        codec: Literal["h264", "h265", "mpeg4"] = Field("h264", description="h264 plays in every browser")
        encoder: str = Field("auto", description="auto (software: libx264/libx265), qsv, nvenc, vaapi, or an "
                                                 "FFmpeg encoder name; one missing here falls back to software")
        crf: int | None = Field(23, ge=0, le=51, description="constant quality (lower: better, larger)")
        bitrate: str | None = Field(None, pattern=r"^\d+(\.\d+)?[kKmM]?$",
                                    description="a bit rate instead of crf, e.g. 2M")
        preset: Literal["ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow", "slower",
                        "veryslow"] = Field("veryfast", description="x264/x265 speed against size: ultrafast "
                                            "costs ~0.4x veryfast's CPU at ~8x its bit rate")
        gop_seconds: float = Field(1.0, gt=0, le=60, description="keyframe interval: a crash loses at most this")
        fragmented: bool = Field(True, description="fragmented MP4: playable up to the last fragment after a crash")
        segment_seconds: float | None = Field(None, gt=0, description="a new file every N seconds of video "
                                                                       "(NAME.00000.mp4, NAME.00001.mp4, ...)")
        fourcc: str | None = Field(None, min_length=4, max_length=4,
                                   description="write through OpenCV with this FourCC instead (e.g. mp4v)")
        fps: float | None = Field(None, gt=0, description="default: 30, or the source's rate when known")
        records: Literal["written", "encoded"] = Field(
            "written", description="written: each frame goes on once the fragment that holds it is in the file "
            "(a record after the writer never names a frame a crash could still lose; up to gop_seconds later, "
            "the frame's memory given back meanwhile); encoded: as soon as the encoder has it "
            "(recording.in_file false)")
        clips: EventClips | None = Field(None, description="event clips: for each event an analytics node "
                                         "upstream raises, a clip of the recording's own packets (no encoding "
                                         "again) from pre_s before it to post_s after, named in the event")
        min_free_mb: float = Field(64.0, ge=0, description="a stream whose file cannot be written for lack of "
                                   "space (the disk, a quota) pauses its recording, its frames going on saying "
                                   "so, and resumes in a new file (NAME.resume1.mp4, ...) once this much is free "
                                   "(or a twentieth of a disk smaller than twenty times it)")

    config: Config

    @classmethod
    def contract(cls, config: NodeConfig) -> NodeContract:
        assert isinstance(config, cls.Config)
        pixels = frozenset({"BGR"}) if config.fourcc else frozenset({"BGR", "NV12", "I420"})
        files = {"path": "video", "clips.path": "folder"} if config.clips is not None else {"path": "video"}
        how = f"fourcc {config.fourcc} (OpenCV)" if config.fourcc else f"{config.codec}, encoder {config.encoder}"
        resources = (Resource(f"writes {config.path} ({how})"),)
        if config.records == "written" and config.fourcc is None and config.fragmented:
            return cls.declare(pixels=pixels, one_worker=None, files=files, final_picture=True,
                               holds_frames=True, resources=resources,
                               isolation="a writer that holds each frame until its file has it keeps frames past "
                                         "process() (records: encoded passes them on at once)")
        return cls.declare(pixels=pixels, one_worker=None,  # its writers are per stream, under a lock
                           files=files, final_picture=True, resources=resources)

    def open(self, ctx: RunContext) -> None:
        self._lock = threading.Lock()  # workers: N writes several streams at once
        self.writers: dict[str, Any] = {}
        self.first_shard = ctx.shard[0] == 0  # the plain path belongs to the first stream of the first shard
        self.generation = ctx.generation  # a restarted shard writes new files beside the earlier ones
        self.journal = ctx.journal  # an event whose clip this names, as it now stands
        self.sizes: dict[str, tuple[int, int]] = {}
        self.paths: dict[str, str] = {}
        self.stats = ctx.stats
        self.written: dict[str, int] = {}
        self.clip_paths: set[str] = set()  # event clips begun
        self.threads = max(1, usable_cores() // max(ctx.streams, 1))  # encoder threads: the stream's share of cores
        self.holding = self.declared.holds_frames  # each frame waits here until its fragment is in the file
        self.held: dict[str, deque[Frame]] = {}  # per stream, in order
        self.since: dict[int, float] = {}  # when each held frame came (id of the frame)
        self.ready: list[Frame] = []  # frames whose file closed (a stream that ended): out at the next poll
        self.wake = ctx.wake
        self.timer: threading.Timer | None = None
        self.timer_due = 0.0  # when the timer wakes the node
        self.stopping: set[str] = set()  # streams being removed: their frames go on at once
        self.paused: dict[str, dict[str, Any]] = {}  # streams whose disk is full: their file and frames missed
        self.resumes: dict[str, int] = {}  # per stream, the files begun again after a full disk
        self.made: dict[str, int] = {}  # per stream, the files begun in this run (a stream removed and added again)
        self.check_at: dict[str, float] = {}  # per paused stream, when free space is looked at next
        # a stream that stalls writes no next fragment: its held frames go on after this long, saying so
        self.max_wait = self.config.gop_seconds + 1.0
        if self.config.fourcc is None and not available():
            raise RuntimeError("video_writer needs PyAV (pip install av) for codec " + self.config.codec +
                               "; or set fourcc to write through OpenCV")
        _writable(self.config.path)

    def _fps(self, frame: Frame) -> float:
        """The configured rate, else the rate the source gave the stream (``meta['fps']``), else 30."""
        return float(self.config.fps or frame.meta.get("fps") or 30.0)

    def process(self, frame: Frame, port: str) -> Any:
        yuv = frame.format in ("NV12", "I420")
        if frame.format != "BGR" and not (yuv and self.config.fourcc is None):
            raise ValueError(f"video_writer takes BGR frames{', or NV12/I420 without fourcc' if not yuv else ''}, "
                             f"got {frame.format}")
        w = self.writers.get(frame.stream)
        size = (frame.width, frame.height)
        if w is None and frame.stream in self.paused and not self._space_again(frame.stream):
            return self._not_recorded(frame)
        if w is None:
            w = self._create(frame, size)
        elif size != self.sizes[frame.stream]:
            if isinstance(w, cv2.VideoWriter):
                raise ValueError(f"frame size changed from {self.sizes[frame.stream]} to {size}; a video file has "
                                 "one size (without fourcc, recording goes on in a new file)")
            w.resize(size)
            self.sizes[frame.stream] = size
        if isinstance(w, cv2.VideoWriter):
            w.write(frame.image)
            where = {"file": self.paths[frame.stream], "frame": self.written[frame.stream]}
        else:
            try:
                file, index = w.write(frame.data, frame.format) if yuv else w.write(frame.image)
            except OSError as e:
                if e.errno not in (errno.ENOSPC, errno.EDQUOT):
                    raise
                return self._out_of_space(frame, w, e)
            where = {"file": file, "frame": index}
        self.written[frame.stream] += 1
        frame.meta["recording"] = where
        if not isinstance(w, cv2.VideoWriter) and w.tap is not None:
            self._clips(w.tap, frame)
        if not self.holding:
            where["in_file"] = False  # the record says its frame may not be in the file yet
            return frame
        if isinstance(w, cv2.VideoWriter) or frame.stream in self.stopping or not frame.release_memory():
            # another packet still reads the frame (a branch beside the writer): it cannot wait here without
            # its memory; it goes on at once, after the stream's held frames (in order), saying it may not
            # be in the file yet
            where["in_file"] = False
            return [*self._written(frame.stream, every=True), frame]
        with self._lock:
            self.held.setdefault(frame.stream, deque()).append(frame)
            self.since[id(frame)] = time.monotonic()
        out = self._written(frame.stream)
        self._arm()
        return out

    def _clips(self, keeper: ClipKeeper, frame: Frame) -> None:
        """The events an analytics node raised on this frame: each begins, extends or ends the stream's clip,
        and names it (``clip``)."""
        n = self.written[frame.stream] - 1  # the stream's frame count, as the keeper counts packets
        for e in frame.meta.get("analytics", {}).get("events", []):
            if e["state"] == "begin":
                clip = keeper.start(e["id"], n)
            elif e["state"] == "instant":
                clip = keeper.start(e["id"], n, until=n)
            else:
                clip = keeper.stop(e["id"], n)
            if clip is not None:
                e["clip"] = clip
                self.journal(dict(e))
                with self._lock:
                    self.clip_paths.add(clip)
                    self.stats["event_clips"] = len(self.clip_paths)

    def _out_of_space(self, frame: Frame, w: Recorder, err: OSError) -> list[Frame]:
        """The stream's file cannot take more (a full disk, a quota): the file is let go as it is (playable
        up to its last whole fragment), the frames held for it go on saying whether they are in it, and the
        stream's recording pauses until ``min_free_mb`` is free again (the other streams go on)."""
        stream, path = frame.stream, self.paths[frame.stream]
        held = self._written(stream, every=True)  # in_file from the fragments written before the failure
        w.abandon()
        with self._lock:
            self.writers.pop(stream, None)
            self.paused[stream] = {"file": path, "from_frame": frame.index, "not_recorded": 0}
            self.check_at[stream] = time.monotonic() + 1.0
            self.stats.setdefault("out_of_space", {}).setdefault(stream, []).append(self.paused[stream])
        log.error("node '%s': %s: %s (stream %s, frame %d): its recording pauses and resumes in a new file once "
                  "%.0f MB are free", self.id, path, os.strerror(err.errno or errno.ENOSPC), stream, frame.index,
                  self.config.min_free_mb)
        return [*held, self._not_recorded(frame)]

    def _not_recorded(self, frame: Frame) -> Frame:
        """A frame of a paused stream: on at once, its record saying it is in no file."""
        info = self.paused[frame.stream]
        info["not_recorded"] += 1
        why = "no space left for " + info["file"]
        frame.meta["recording"] = {"file": None, "in_file": False, "why": why}
        for e in frame.meta.get("analytics", {}).get("events", []):  # an event's clip cannot begin: said so
            if e["state"] in ("begin", "instant"):
                e["clip"], e["no_clip"] = None, why
                self.journal(dict(e))
                with self._lock:
                    self.stats["event_clips_missed"] = self.stats.get("event_clips_missed", 0) + 1
        return frame

    def _space_again(self, stream: str) -> bool:
        """Whether a paused stream records again (free space looked at once a second): its next file begins."""
        info = self.paused[stream]
        now = time.monotonic()
        if now < self.check_at[stream]:
            return False
        self.check_at[stream] = now + 1.0
        disk = shutil.disk_usage(Path(info["file"]).parent)
        if disk.free < min(self.config.min_free_mb * 1e6, disk.total / 20):  # a small disk: a twentieth of it
            return False
        with self._lock:
            self.paused.pop(stream)
            self.resumes[stream] = self.resumes.get(stream, 0) + 1
            info["resumed"] = self.resumes[stream]
        log.warning("node '%s': space again beside %s: stream %s records again (%d frames were not recorded)",
                    self.id, info["file"], stream, info["not_recorded"])
        return True

    def _written(self, stream: str, every: bool = False, before: float | None = None) -> list[Frame]:
        """The stream's held frames that are in their file for good now, in order (``every``: all of them;
        ``before``: also those that came before this time; those not in the file yet saying so)."""
        out: list[Frame] = []
        with self._lock:
            q, w = self.held.get(stream), self.writers.get(stream)
            while q:
                rec = q[0].meta["recording"]
                rec["in_file"] = w is None or rec["frame"] < w.in_file(rec["file"])
                if not (rec["in_file"] or every or (before is not None and self.since[id(q[0])] <= before)):
                    break
                self.since.pop(id(q[0]), None)
                out.append(q.popleft())
        return out

    def poll(self) -> list[Frame]:
        """Frames of streams that ended, and those that waited ``max_wait`` (a stream that stalls: no next
        fragment comes) with ``in_file`` saying whether their fragment is written."""
        now = time.monotonic()
        with self._lock:
            out, self.ready = self.ready, []
            if now >= self.timer_due:  # it has woken this poll (or is about to: one more wake is harmless)
                self.timer = None
        due = now - self.max_wait
        for stream in list(self.held):
            out += self._written(stream, before=due)
        self._arm()
        return out

    def _arm(self) -> None:
        """A wake when the oldest held frame is due: one timer at a time, so a steady stream starts one every
        ``max_wait``, not one a poll (a thread each)."""
        with self._lock:
            if self.timer is not None or not self.since:
                return
            self.timer_due = min(self.since.values()) + self.max_wait
            delay = self.timer_due - time.monotonic()
            self.timer = threading.Timer(max(0.0, delay) + 1e-3, self.wake)
            self.timer.daemon = True
            self.timer.start()

    def flush(self) -> list[Frame]:
        """Every input ended: the files close whole, and every frame held for them goes on."""
        if not self.holding:
            return []
        with self._lock:
            writers = list(self.writers.items())
        for stream, w in writers:
            self._finish(w)
            with self._lock:
                self.writers.pop(stream, None)
        out = self.poll()
        for stream in list(self.held):
            out += self._written(stream)
        return out

    def _create(self, frame: Frame, size: tuple[int, int]) -> Any:
        c = self.config
        with self._lock:
            path = c.path.replace("{stream}", frame.stream)
            others = self.writers or any(s != frame.stream for s in self.made)  # the plain name is taken
            if "{stream}" not in c.path and (others or not self.first_shard):  # its own file
                p = Path(path)
                path = str(p.with_name(f"{p.stem}-{frame.stream}{p.suffix}"))
            if self.generation:
                p = Path(path)
                path = str(p.with_name(f"{p.stem}.restart{self.generation}{p.suffix}"))
            if self.resumes.get(frame.stream):  # begun again after a full disk: beside the file it left
                p = Path(path)
                path = str(p.with_name(f"{p.stem}.resume{self.resumes[frame.stream]}{p.suffix}"))
            again = self.made.get(frame.stream, 0)
            self.made[frame.stream] = again + 1
            if again and not self.resumes.get(frame.stream):  # a stream added again: beside its first file, whose
                p = Path(path)  # records name it
                path = str(p.with_name(f"{p.stem}.{again + 1}{p.suffix}"))
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            if c.fourcc is not None:
                w: Any = cv2.VideoWriter(path, cv2.VideoWriter.fourcc(*c.fourcc), self._fps(frame), size)
                if not w.isOpened():
                    raise RuntimeError(f"cannot write {path} with fourcc {c.fourcc!r}")
            else:
                w = Recorder(path, self._fps(frame), size, c.codec, c.encoder, c.crf, c.bitrate, c.preset,
                             c.gop_seconds, c.fragmented, c.segment_seconds, self.threads)
                if c.clips is not None:
                    k = c.clips
                    w.tap = ClipKeeper(frame.stream, k.path, self._fps(frame), k.pre_s, k.post_s, k.keep_s, k.keep_mb)
            self.sizes[frame.stream] = size
            self.written[frame.stream] = 0
            self.paths[frame.stream] = path
            self.writers[frame.stream] = w
            return w

    def _finish(self, w: Any) -> None:
        if isinstance(w, cv2.VideoWriter):
            w.release()
            return
        w.close()
        with self._lock:
            self.stats.setdefault("encoder", {})[str(w.path)] = w.used
            if len(w.files) > 1:
                self.stats.setdefault("files", {})[str(w.path)] = w.files
            if w.per_segment:
                self.stats.setdefault("segments", {})[str(w.path)] = len(w.files)

    def stream_stopping(self, stream: str) -> None:
        """A stream being removed: no next fragment is sure to come before its file closes, so its held frames
        go on now (saying whether they are in the file yet), and those still on their way pass at once."""
        if not self.holding:
            return
        done = self._written(stream, every=True)
        with self._lock:
            self.stopping.add(stream)
            self.ready += done
        self.wake()

    def end_stream(self, stream: str) -> None:
        with self._lock:
            self.stopping.discard(stream)
            w = self.writers.pop(stream, None)
            self.sizes.pop(stream, None)
            self.paths.pop(stream, None)
            self.paused.pop(stream, None)  # added again, it records afresh (beside its earlier files: made)
            self.resumes.pop(stream, None)
        if w is not None:
            self._finish(w)  # the stream's file is whole now, while the others go on
        self.stats["written"] = dict(self.written)
        if self.holding:
            done = self._written(stream)  # its file closed: every frame held for it is in it
            with self._lock:
                self.held.pop(stream, None)
                self.ready += done
            if done:
                self.wake()

    def close(self) -> None:
        timer = getattr(self, "timer", None)
        if timer is not None:
            timer.cancel()
        errors = []
        for w in list(self.writers.values()):
            try:
                self._finish(w)
            except Exception as e:  # noqa: BLE001 - every other stream's file still closes
                errors.append(e)
        self.stats["written"] = dict(self.written)
        if errors:
            raise errors[0]


def _writable(path: str) -> None:
    """Whether a recording can go to ``path`` (its folder made, and writable; the path no folder), told at
    open before any frame enters, as a record file's is, not on the first frame."""
    target = Path(os.path.expanduser(path.replace("{stream}", "x")))
    if target.is_dir():
        raise RuntimeError(f"{path}: a folder, expected a video file's path (e.g. {Path(path) / 'out.mp4'})")
    folder = target.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise RuntimeError(f"{path}: {next(p for p in [folder, *folder.parents] if p.exists())} is a file, expected "
                           "a folder") from None
    except OSError as e:
        raise RuntimeError(f"{path}: its folder cannot be made: {e.strerror or e}"
                           + (f" ({e.filename})" if e.filename else "")) from None
    probe = folder / f".flowpipe-write-{os.getpid()}"
    try:
        probe.touch()
        probe.unlink()
    except OSError as e:
        raise RuntimeError(f"{path}: cannot write in {folder}: {e.strerror or e}") from None


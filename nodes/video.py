"""Video in and out: files, RTSP/HTTP streams, V4L2 cameras and image folders; MP4 writing.

Decoding writes straight into pooled shared buffers (``VideoCapture.read(image=view)``), so the frame
every later stage sees is the memory the decoder filled.
"""
from __future__ import annotations

import errno
import itertools
import logging
import os
import re
import shutil
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import cv2
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from flowpipe import memory
from flowpipe.accel import Devices
from flowpipe.accel.host import usable_cores
from flowpipe.contracts import Offer
from flowpipe.frame import Frame, FrameRef
from flowpipe.memory import BufferPool
from flowpipe.node import AsyncNode, Negotiating, Node, NodeConfig, NodeContract, Resource, RunContext, Source
from flowpipe.registry import register
from flowpipe.sample import SAMPLES, sample_path
from flowpipe_nodes.media.clips import ClipKeeper
from flowpipe_nodes.media.decode import TURNS, Demuxer, display_turn, turned
from flowpipe_nodes.media.encode import Recorder, available

log = logging.getLogger("flowpipe.video")
IMAGE_EXT = {".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp"}
_NET = re.compile(r"^(rtsp|rtsps|rtmp|http|https|udp|tcp|srt)://", re.I)


def _redact(uri: str) -> str:
    return re.sub(r"//[^/@]*@", "//***@", uri)


class VideoSourceConfig(NodeConfig):
    """A ``video_source`` node's settings."""

    uri: str = Field(description="file path, rtsp:// or http:// URL, /dev/videoN or camera index, image folder, "
                                 "or 'sample' / 'sample-text' (generated clips: moving faces / printed words) / "
                                 "'sample-street' (a real street clip)")
    stream: str | None = Field(None, description="stream id (default: the node id)")
    loop: int = Field(0, ge=-1, description="replay a file this many extra times (-1: forever)")
    max_fps: float | None = Field(None, gt=0, description="limit the output frame rate (sleeps)")
    every: int = Field(1, ge=1, description="emit every Nth decoded frame")
    realtime: bool = Field(False, description="pace file playback at the file's frame rate")
    reconnect_attempts: int = Field(-1, ge=-1, description="network streams: reopen this many times after a loss, or "
                                    "while one that is not up yet is first opened; -1 (the default): for ever, "
                                    "as a camera that reboots comes back; 0: a loss ends the stream")
    reconnect_backoff_s: float = Field(0.5, gt=0, description="first reopen delay; doubles up to 8 s")
    timeout_s: float = Field(5.0, gt=0, description="network streams: open and read timeout")
    rtsp_transport: Literal["tcp", "udp"] = Field("tcp", description="RTSP over TCP survives lossy networks")
    pool: bool = Field(True, description="decode into shared buffers (zero copy downstream)")
    threads: int | None = Field(None, ge=0, le=64, description="decoder threads (FFmpeg); default: the cores "
                                "shared by the run's streams (16 cores, 16 streams: 1); 0: FFmpeg's own choice")
    max_decode_errors: int = Field(10, ge=0, description="files: consecutive undecodable frames skipped "
                                                              "before the stream is taken as ended")
    decoder: Literal["auto", "opencv", "pyav"] = Field(
        "auto", description="pyav: the stream's own timestamps, size changes passed on, damaged packets "
        "counted, YUV output, hardware decoders; auto: pyav when the frames go on in YUV or a hardware decoder "
        "is asked for, else opencv (its BGR costs the least CPU)")
    hwaccel: Literal["none", "auto", "qsv", "vaapi", "cuda", "drm"] = Field(
        "none", description="decoder: pyav: decode on a device (auto: QSV, VA-API, then CUDA, the first that "
        "opens the stream; one asked by name falls back to software with a line in the log)")
    format: Literal["auto", "BGR", "NV12", "I420"] = Field(
        "auto", description="the frames' pixels: auto: YUV planes (I420; NV12 from a hardware decoder) when "
        "every node after the source takes them, so nothing converts to BGR; else BGR")

    rotate: Literal["auto", 0, 90, 180, 270] = Field(
        "auto", description="turn every picture clockwise by this many degrees (a camera mounted on its side or "
        "upside down): every node after the source, the recording and the boxes see it upright; auto: as the file "
        "asks (a video's display matrix, a picture's EXIF orientation), none for a camera or stream")

    @field_validator("rotate", mode="before")
    @classmethod
    def _degrees(cls, v: Any) -> Any:
        if isinstance(v, str) and v.strip().lstrip("-").isdigit():
            v = int(v)
        if isinstance(v, int) and v % 360 not in TURNS:
            raise ValueError(f"expected auto, 0, 90, 180 or 270 (degrees clockwise), got {v}")
        return v % 360 if isinstance(v, int) else v

    @model_validator(mode="after")
    def _nv12_needs_pyav(self) -> VideoSourceConfig:
        if self.format in ("NV12", "I420") and self.decoder == "opencv":
            raise ValueError(f"format {self.format} needs decoder: pyav (or auto)")
        if self.hwaccel != "none" and self.decoder == "opencv":
            raise ValueError(f"hwaccel {self.hwaccel} needs decoder: pyav (or auto)")
        return self

    @field_validator("uri")
    @classmethod
    def _nonempty(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("expected a file, URL, camera or folder; got an empty string")
        return v


class _Timeline:
    """A stream's timestamps, always going forward: a connection made again after an outage starts its
    clock afresh (near 0, or wherever the camera's clock now stands), and its frames go on from the last one
    before the outage plus the time the stream was away; a clock that goes back within one connection (a
    looped file, a camera's restart) goes on one frame after the last. Each such step is counted
    (``timestamp_jumps``): analytics' timers (dwell, occupancy) and events' times read these timestamps."""

    def __init__(self) -> None:
        self.offset = 0.0
        self.first: float | None = 0.0  # the connection's first timestamp (None: the next frame's), taken off
        self.last: float | None = None
        self.jumps = 0

    def stamp(self, seconds: float, step: float) -> float:
        if self.first is None:
            self.first = seconds
        t = self.offset + seconds - self.first
        if self.last is not None and t <= self.last:
            self.jumps += t < self.last  # back (counted); the same again is a clock that does not move
            self.offset += self.last + step - t
            t = self.last + step
        self.last = t
        return t

    def resumed(self, away_s: float) -> None:
        """A new connection after ``away_s`` without frames."""
        if self.last is not None:
            self.offset, self.first = self.last + max(away_s, 0.0), None
            self.jumps += 1


@register("video_source")
class VideoSource(Negotiating, Source):
    """Decodes a video file, RTSP/HTTP stream, V4L2 camera (``/dev/video0`` or ``0``) or image folder.

    YAML:
        - id: cam
          type: video_source
          config: {uri: rtsp://127.0.0.1:8554/door, stream: door, reconnect_attempts: 10}
    """

    outputs = {"frame": "frame"}

    Config = VideoSourceConfig

    config: VideoSourceConfig

    @classmethod
    def contract(cls, config: NodeConfig) -> NodeContract:
        assert isinstance(config, cls.Config)
        uri = config.uri
        kind = ("network stream" if _NET.match(uri) else "camera" if _is_camera(uri) else
                "the built-in clip" if uri in SAMPLES else "file/folder")
        opens = Resource(f"opens {kind} {_redact(uri)}", reads=uri if kind == "file/folder" else None, field="uri")
        return cls.declare(live=is_live(uri), resources=(opens,))

    def offer(self, port: str, inputs: Mapping[str, Offer], devices: Devices) -> Offer:
        """Says the picture size where a file's header tells it (a node after it may size its work by it)."""
        return Offer(self.id, port, picture=self._file_picture())

    def _file_picture(self) -> tuple[int, int] | None:
        uri = self.config.uri
        if uri in SAMPLES:
            uri = str(sample_path(uri))
        path = Path(os.path.expanduser(uri))
        if _NET.match(uri) or _is_camera(uri) or not path.is_file():
            return None  # a camera or stream says it when it opens; a folder may mix sizes
        try:
            import av

            with av.open(str(path)) as container:
                ctx = container.streams.video[0].codec_context
                size = (ctx.width, ctx.height) if ctx.width and ctx.height else None
                turn = display_turn(container) if self.config.rotate == "auto" else self.config.rotate
            return size[::-1] if size and turn in (90, 270) else size
        except Exception:  # noqa: BLE001  (not a video: open() says so in its own words)
            return None

    def open(self, ctx: RunContext) -> None:
        c = self.config
        self.stream = c.stream or self.id
        self.ctx = ctx
        self.stats = ctx.stats
        self.pool: BufferPool | None = None
        self.pool_shape: tuple[int, ...] | None = None
        self._old_pools: list[BufferPool] = []
        self.pool_size = min(ctx.frames_in_flight(), 128)
        self.allocation = ctx.allocation("frame")
        self.is_net = bool(_NET.match(c.uri))
        self.live = self.is_net or _is_camera(c.uri)  # frames in real time: a stalled one says so (meta['live'])
        cores = usable_cores()
        # FFmpeg's default (a thread per core for every decoder) costs ~1.8x the CPU per frame of one
        # thread (1366x768 H.264) and oversubscribes the cores when many streams decode at once
        self.threads = c.threads if c.threads is not None else max(1, cores // max(ctx.streams, 1))
        self.stats["decoder_threads"] = self.threads or "ffmpeg"
        self.folder: list[Path] | None = None
        self.cap: Any = None  # an OpenCV capture, or a PyAV demuxer (decoder: pyav)
        if c.uri in SAMPLES:
            c = self.config = c.model_copy(update={"uri": str(sample_path(c.uri))})
        self.decoded = 0
        self.decode_errors = 0
        self._bad_run = 0
        self.failures = 0
        self.reconnects = 0
        self.t_open = time.monotonic()
        if not self.is_net and not _is_camera(c.uri):
            path = Path(os.path.expanduser(c.uri))
            if path.is_dir():
                self.folder = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_EXT)
                if not self.folder:
                    raise FileNotFoundError(f"no images ({', '.join(sorted(IMAGE_EXT))}) in folder {c.uri}")
                self.format, self.decoder = "BGR", "opencv"  # images are read as BGR
                self.stats["format"] = self.format
                return
            if not path.is_file():
                raise FileNotFoundError(f"video file not found: {c.uri}")
            if path.stat().st_size == 0:
                raise ValueError(f"video file is empty (0 bytes): {c.uri}")
        self.format, self.decoder = self._pixels(self.allocation.pixels, self.allocation.pixels_by)
        self.stats["format"] = self.format
        self.pending = False  # a network stream not up yet: connected in frames()
        self.timeline = _Timeline()
        self.attempt = 0  # the reconnect try under way (0: none)
        self.last_at: float | None = None  # when the last frame was decoded (monotonic)
        self.jumps_before = 0  # timestamp jumps counted by the connections before this one (PyAV)
        self.cap = self._open_capture(first=True)
        self.length = self._length()

    def _length(self) -> int:
        """The frames this source emits, where the file says (0: unknown, looped, or live): what a node that holds
        a whole stream sizes its room by (``meta['frames']``)."""
        c = self.config
        if self.live or self.cap is None or c.loop != 0:
            return 0
        try:
            n = self.cap.container.streams.video[0].frames if self.decoder == "pyav" else \
                self.cap.get(cv2.CAP_PROP_FRAME_COUNT)
        except (AttributeError, IndexError, cv2.error):
            return 0
        return -(-int(n) // c.every) if n and n > 0 else 0

    def _pixels(self, taken: frozenset[str] | None, by: str) -> tuple[str, str]:
        """The frames' format and the decoder: as configured, or YUV when every node after the source takes
        it (the run's memory contracts say which formats they take) and PyAV is here."""
        c = self.config
        if c.format != "auto" and taken is not None and c.format not in taken:
            raise ValueError(f"format {c.format}: a node after this source does not take it ({by}); "
                             "expected format: auto or one of " + ", ".join(sorted(taken)))
        pyav = c.decoder == "pyav" or (c.decoder == "auto" and available())
        fmt = c.format
        if fmt == "auto":
            yuv = [f for f in (("NV12", "I420") if c.hwaccel != "none" else ("I420", "NV12"))
                   if taken is not None and f in taken]
            fmt = yuv[0] if yuv and pyav else "BGR"
        decoder = c.decoder
        if decoder == "auto":
            decoder = "pyav" if pyav and (fmt != "BGR" or c.hwaccel != "none") else "opencv"
        return fmt, decoder

    def _open_capture(self, first: bool = False) -> Any:
        c = self.config
        if self.decoder == "pyav":
            return self._open_demuxer(first)
        src: Any = int(c.uri) if c.uri.isdigit() else c.uri
        threads = [cv2.CAP_PROP_N_THREADS, self.threads] if self.threads else []
        if self.is_net:
            ms = int(c.timeout_s * 1000)
            options = f"rtsp_transport;{c.rtsp_transport}" if c.uri.lower().startswith("rtsp") else None
            with _capture_options(options):
                cap = cv2.VideoCapture(src, cv2.CAP_FFMPEG, [cv2.CAP_PROP_OPEN_TIMEOUT_MSEC, ms,
                                                             cv2.CAP_PROP_READ_TIMEOUT_MSEC, ms, *threads])
        elif c.uri.startswith("/dev/") or isinstance(src, int):
            cap = cv2.VideoCapture(src, cv2.CAP_V4L2 if c.uri.startswith("/dev/") else cv2.CAP_ANY)
        else:
            cap = cv2.VideoCapture(src, cv2.CAP_ANY, threads)
        if not cap.isOpened():
            cap.release()
            # why, in FFmpeg's words: a second connection, so only on the tries the log tells of
            why = self._why_not_opened() if self.is_net and (first or self._telling()) else None
            if self.is_net and not first:
                if self._telling():
                    log.warning("node '%s': cannot open %s%s", self.id, _redact(c.uri), f": {why}" if why else "")
                return None
            if self.is_net and c.reconnect_attempts != 0:
                return self._not_up(why)
            raise RuntimeError(f"cannot open {_redact(c.uri)}: {why or 'not a video OpenCV/FFmpeg can decode'}")
        self.fps = cap.get(cv2.CAP_PROP_FPS) or 30.0
        if not 0 < self.fps < 1000:
            self.fps = 30.0
        if c.rotate == "auto":  # OpenCV turns a file's pictures as its display matrix asks, and reports the size so
            self.turn, turn = 0, int(cap.get(cv2.CAP_PROP_ORIENTATION_META) or 0) % 360 if not self.is_net else 0
        else:
            cap.set(cv2.CAP_PROP_ORIENTATION_AUTO, 0)
            self.turn = turn = c.rotate
        size = [int(cap.get(cv2.CAP_PROP_FRAME_WIDTH)), int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT))]
        size = size[::-1] if self.turn in (90, 270) else size
        self.stats["source"] = {"uri": _redact(c.uri), "fps": round(self.fps, 3), "size": size, "rotate": turn}
        return cap

    def _open_demuxer(self, first: bool) -> Any:
        import av

        c = self.config
        try:
            dem = Demuxer(os.path.expanduser(c.uri), self.format, self.threads, c.timeout_s, c.rtsp_transport,
                          c.hwaccel, c.rotate)
        except Exception as e:  # noqa: BLE001 - FFmpeg's errors: one line, or a reconnect for a network stream
            why = _reason(e)
            if isinstance(e, av.error.InvalidDataError):
                why = f"not a video FFmpeg can decode ({why})"
            if self.is_net and not first:  # why, before the next attempt
                if self._telling():
                    log.warning("node '%s': cannot open %s: %s", self.id, _redact(c.uri), why)
                return None
            if self.is_net and c.reconnect_attempts != 0:
                return self._not_up(why)
            raise RuntimeError(f"cannot open {_redact(c.uri)}: {why}") from None
        self.fps = dem.fps if 0 < dem.fps < 1000 else 30.0
        taken = self.allocation.pixels
        if (c.format == "auto" and self.format != "BGR" and (dem.size[0] % 2 or dem.size[1] % 2)
                and (taken is None or "BGR" in taken)):
            # YUV 4:2:0 planes need an even size: this stream's pictures are BGR (what every node takes)
            log.info("node '%s': %s is %dx%d, an odd size: its frames are BGR, not %s", self.id, _redact(c.uri),
                     *dem.size, self.format)
            self.format = dem.fmt = self.stats["format"] = "BGR"
        self.stats["source"] = {"uri": _redact(c.uri), "fps": round(self.fps, 3), "size": list(dem.size),
                                "decoder": f"pyav ({dem.decoder})", "rotate": dem.turn}
        return dem

    def _pyav_frames(self) -> Iterator[Frame]:
        """Pictures from PyAV, with the stream's timestamps: into pooled buffers as they come (a new pool
        when the size changes), damaged packets skipped and counted; reconnects and loops as with OpenCV."""
        import av

        c = self.config
        dem = self.cap
        plays = 0
        t0 = time.monotonic()
        start = self.ctx.resume_at(self.stream)
        live = self.live
        emitted = base = start if live else 0
        skip = 0 if live else start  # a file resumed by a restarted process: its first frames were done
        while True:
            try:
                for img, seconds in dem.pictures():
                    self.decoded += 1
                    if (self.decoded - 1) % c.every:
                        continue
                    if skip:
                        skip -= 1
                        emitted += 1
                        continue
                    data, ref = self._buffer(img.shape)
                    np.copyto(data, img)  # the decoder's picture lands in the pool: the decode's own write
                    ref.index = emitted
                    fmt = self.format
                    frame = Frame(self.stream, emitted, self.timeline.stamp(seconds, 1.0 / self.fps), data, fmt,
                                  ref=ref, meta={"decoded_index": self.decoded - 1, "fps": self.fps / c.every,
                                        "live": self.live, "frames": self.length})
                    self.last_at = time.monotonic()
                    if dem.damaged != self.decode_errors:
                        self.decode_errors = self.stats["decode_errors"] = dem.damaged
                    jumps = self.jumps_before + dem.discontinuities + self.timeline.jumps
                    if jumps:
                        self.stats["timestamp_jumps"] = jumps
                    self._pace(t0, emitted - base)
                    emitted += 1
                    yield frame
            except (av.error.FFmpegError, OSError) as e:
                if not self.is_net:
                    raise RuntimeError(f"decoding {_redact(c.uri)}: {e}") from None
                log.warning("node '%s': stream %s: %s", self.id, _redact(c.uri), e)
            if self.is_net and not self.ctx.stopping:
                self.jumps_before += dem.discontinuities
                dem.close()
                self.cap = dem = self._reconnect()
                if dem is None:
                    return
                continue
            plays += 1
            if c.loop == -1 or plays <= c.loop:
                dem.seek_start()
                continue
            return

    def _telling(self) -> bool:
        """Whether this try to reconnect is one the log tells of: the first five, then every tenth."""
        return self.attempt <= 5 or self.attempt % 10 == 0

    def _why_not_opened(self) -> str | None:
        """Why a network stream OpenCV could not open cannot be opened, in FFmpeg's words through PyAV
        (OpenCV says none): connection refused, 404, a timeout."""
        if not available():
            return None
        c = self.config
        try:
            Demuxer(c.uri, "BGR", 1, c.timeout_s, c.rtsp_transport, "none").close()
        except Exception as e:  # noqa: BLE001 - FFmpeg's errors, whatever their class: the reason is the text
            return _reason(e)
        return None  # it opens now: a passing fault

    def _not_up(self, why: str | None) -> None:
        """A network stream that cannot be opened when the run starts: the node opens all the same, and its
        stream is connected in its own thread, as after a loss (the other streams start meanwhile)."""
        log.warning("node '%s': cannot open %s%s; the stream starts when it answers", self.id,
                    _redact(self.config.uri), f": {why}" if why else "")
        self.pending = True
        return None

    def _reconnect(self) -> Any:
        c = self.config
        delay = c.reconnect_backoff_s
        lost = time.monotonic()
        # every outage of a camera that comes and goes, from the run's start (the last 100 of them), listed as
        # it begins: one still going on (lasted_s None) shows in the stats a process last reported, had it died
        outage: dict[str, Any] = {"at_s": round(lost - self.t_open, 3), "lasted_s": None,
                                  "after_frame": self.decoded - 1}
        outages = self.stats.setdefault("outages", [])
        outages.append(outage)
        del outages[:-100]
        self.stats["reconnecting"] = True
        try:
            return self._reconnect_loop(delay, lost, outage)
        finally:
            self.stats["reconnecting"] = False

    def _reconnect_loop(self, delay: float, lost: float, outage: dict[str, Any]) -> Any:
        c = self.config
        n = c.reconnect_attempts
        what = "lost" if self.decoded else "not up yet"  # a camera never seen has not been lost
        for attempt in itertools.count(1) if n < 0 else range(1, n + 1):
            if self.ctx.stopping:
                return None
            self.attempt = attempt
            if self._telling():  # a camera down for hours: a line every 10 tries, not each
                log.warning("node '%s': stream %s %s; reconnect %d%s in %.1fs", self.id, _redact(c.uri), what,
                            attempt, f"/{n}" if n >= 0 else "", delay)
            end = time.monotonic() + delay
            while time.monotonic() < end:  # a stream removed meanwhile stops waiting
                if self.ctx.stopping:
                    return None
                time.sleep(min(0.1, end - time.monotonic()))
            cap = self._open_capture()
            if cap is not None:
                took = time.monotonic() - lost
                outage["lasted_s"] = round(took, 3)  # before the count: a report between the two has it ended
                self.reconnects += 1
                self.stats["reconnects"] = self.reconnects
                self.stats["last_outage_s"] = round(took, 3)
                self.stats["outage_total_s"] = round(self.stats.get("outage_total_s", 0.0) + took, 3)
                log.warning("node '%s': stream %s back after %.1fs (outage %d)", self.id, _redact(c.uri), took,
                            self.reconnects)
                self.attempt = 0
                # away since its last frame (the read that found it gone waited its timeout first)
                self.timeline.resumed(time.monotonic() - self.last_at if self.last_at is not None else took)
                return cap
            delay = min(delay * 2, 8.0)
        raise RuntimeError(f"stream {_redact(c.uri)} did not come back after {c.reconnect_attempts} attempts")

    def _buffer(self, shape: tuple[int, ...]) -> tuple[np.ndarray, FrameRef]:
        ref = FrameRef(self.stream, self.decoded)
        if not self.config.pool:
            return np.empty(shape, np.uint8), ref
        if self.pool is None or self.pool_shape != shape:
            if self.pool is not None:
                log.info("node '%s': resolution changed %s -> %s", self.id, self.pool_shape, shape)
                self._old_pools.append(self.pool)
            self.pool = self.allocation.pool(int(np.prod(shape)), self.pool_size)
            self.pool_shape = shape
            self.stats["memory"] = self.pool.kind
        lease = self.pool.acquire()
        ref.leases.append(lease)
        return lease.buffer.array(shape), ref

    def frames(self) -> Iterator[Frame]:
        c = self.config
        if self.folder is not None:
            yield from self._folder_frames(self.folder)
            return
        if self.cap is None and self.pending:  # not up when the run started: connected here, as after a loss
            self.cap = self._reconnect()
        cap = self.cap
        if cap is None:  # the run stopped while the connection was retried
            return
        if self.decoder == "pyav":
            yield from self._pyav_frames()
            return
        plays = 0
        t0 = time.monotonic()
        emitted = base = self._resume(cap)
        while True:
            w = int(cap.get(cv2.CAP_PROP_FRAME_WIDTH))
            h = int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT))
            while True:
                if w <= 0 or h <= 0 or self.turn:  # size unknown up front: decode one frame to learn it (then in
                    ok, img = cap.read()                     # place), or each turned into its buffer
                    if not ok:
                        break
                    img = turned(img, "BGR", self.turn)
                    h, w = img.shape[:2]
                    data, ref = self._buffer(img.shape)
                    memory.copy(img, out=data)
                else:
                    data, ref = self._buffer((h, w, 3))
                    with memory.cpu_write(ref.leases[0].buffer if ref.leases else None):
                        ok, img = cap.read(image=data)
                    if not ok:
                        for lease in ref.leases:
                            lease.release()
                        if not self.is_net and self._skip_corrupt():
                            continue
                        break
                    if self._bad_run:  # frames were skipped and decoding resumed: they were corrupt
                        self.decode_errors += self._bad_run
                        self.stats["decode_errors"] = self.decode_errors
                        self._bad_run = 0
                    if img.ctypes.data != data.ctypes.data:  # the decoder changed size mid-stream
                        for lease in ref.leases:
                            lease.release()
                        h, w = img.shape[:2]
                        data, ref = self._buffer(img.shape)
                        memory.copy(img, out=data)
                pts = self.timeline.stamp(cap.get(cv2.CAP_PROP_POS_MSEC) / 1000.0, 1.0 / self.fps)
                self.last_at = time.monotonic()
                if self.timeline.jumps:
                    self.stats["timestamp_jumps"] = self.timeline.jumps
                self.decoded += 1
                if (self.decoded - 1) % c.every:
                    for lease in ref.leases:
                        lease.release()
                    continue
                ref.index = emitted
                frame = Frame(self.stream, emitted, pts, data, "BGR", ref=ref,
                              meta={"decoded_index": self.decoded - 1, "fps": self.fps / c.every,
                                        "live": self.live, "frames": self.length})
                self._pace(t0, emitted - base)
                emitted += 1
                yield frame
            if self.is_net and not self.ctx.stopping:
                cap.release()
                self.cap = reopened = self._reconnect()
                if reopened is None:
                    return
                cap = reopened
                continue
            plays += 1
            if c.loop == -1 or plays <= c.loop:
                cap.set(cv2.CAP_PROP_POS_FRAMES, 0)
                continue
            return

    def _resume(self, cap: cv2.VideoCapture) -> int:
        """The index of the first frame to emit: 0, or where an earlier process of this run stopped. A live
        source goes on numbering from there; a file skips its frames up to there without converting them
        (a looping file is left to the runner, which discards what entered before)."""
        start = self.ctx.resume_at(self.stream)
        if not start or self.is_net or _is_camera(self.config.uri):
            return start
        if self.config.loop:
            return 0
        emitted = 0
        while emitted < start and cap.grab():
            self.decoded += 1
            if (self.decoded - 1) % self.config.every == 0:
                emitted += 1
        log.info("node '%s': stream '%s' resumes at frame %d", self.id, self.stream, emitted)
        return emitted

    def _skip_corrupt(self) -> bool:
        """A file frame that does not decode: skip it (counted) unless too many fail in a row (the end)."""
        self._bad_run += 1
        return self._bad_run <= self.config.max_decode_errors

    def _pace(self, t0: float, n: int) -> None:
        c = self.config
        rate = c.max_fps or (self.fps / c.every if c.realtime else None)
        if rate:
            delay = t0 + n / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)

    def _folder_frames(self, folder: list[Path]) -> Iterator[Frame]:
        c = self.config
        t0 = time.monotonic()
        plays, n = 0, 0
        while True:
            for p in folder:
                img = cv2.imread(str(p), cv2.IMREAD_COLOR if c.rotate == "auto" else  # auto: its EXIF orientation
                                 cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION)
                if img is not None and c.rotate not in ("auto", 0):
                    img = np.ascontiguousarray(turned(img, "BGR", int(c.rotate)))
                if img is None:
                    log.warning("node '%s': cannot decode image %s; skipped", self.id, p)
                    self.failures += 1
                    self.stats["unreadable"] = self.failures
                    continue
                self.decoded += 1
                self._pace(t0, n)
                yield Frame(self.stream, n, n / (c.max_fps or 30.0), img, "BGR", meta={"path": str(p)},
                            ref=FrameRef(self.stream, n))
                n += 1
            plays += 1
            if not (c.loop == -1 or plays <= c.loop):
                return

    def close(self) -> None:
        if self.cap is not None:
            (self.cap.release if isinstance(self.cap, cv2.VideoCapture) else self.cap.close)()
        self.stats["decoded"] = getattr(self, "decoded", 0)
        for p in [self.pool, *self._old_pools]:
            if p is not None:
                p.close()


def _is_camera(uri: str) -> bool:
    return uri.isdigit() or uri.startswith("/dev/video")


def is_live(uri: str) -> bool:
    """A camera or a network stream: what it sends while nobody reads it is gone."""
    return bool(_NET.match(uri)) or _is_camera(uri)


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


_env_lock = threading.Lock()


@contextmanager
def _capture_options(options: str | None) -> Iterator[None]:
    """FFmpeg options for one capture being opened: OpenCV reads them from OPENCV_FFMPEG_CAPTURE_OPTIONS
    when it opens a capture, so each source sets its own, under a lock, for the length of its open only
    (two cameras with different transports each get theirs). A value the user exported wins."""
    if options is None or "OPENCV_FFMPEG_CAPTURE_OPTIONS" in os.environ:
        yield
        return
    with _env_lock:
        os.environ["OPENCV_FFMPEG_CAPTURE_OPTIONS"] = options
        try:
            yield
        finally:
            del os.environ["OPENCV_FFMPEG_CAPTURE_OPTIONS"]


def _reason(e: BaseException) -> str:
    """Why FFmpeg (through PyAV) could not open a stream, in one line: its own words ("Connection refused")."""
    return getattr(e, "strerror", None) or (str(e).splitlines()[0] if str(e) else repr(e))


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


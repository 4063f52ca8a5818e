"""The video source: files, RTSP/HTTP streams, V4L2 cameras and image folders, decoded through OpenCV or PyAV.

Decoding writes straight into pooled shared buffers (``VideoCapture.read(image=view)``), so the frame
every later stage sees is the memory the decoder filled.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import cv2
import numpy as np
from pydantic import Field, field_validator, model_validator

from flowpipe import memory
from flowpipe.accel import Devices
from flowpipe.accel.host import usable_cores
from flowpipe.contracts import Offer
from flowpipe.frame import Frame, FrameRef
from flowpipe.memory import BufferPool
from flowpipe.node import Negotiating, NodeConfig, NodeContract, Resource, RunContext, Source
from flowpipe.registry import register
from flowpipe.sample import SAMPLES, sample_path
from flowpipe_nodes.media.decode import TURNS, Demuxer, display_turn, turned
from flowpipe_nodes.media.encode import available

from .images import ImageFolder
from .network import NET, Reconnection, Timeline, reason, redact

log = logging.getLogger("flowpipe.video")


class VideoSourceConfig(NodeConfig):
    """A ``video_source`` node's settings."""

    uri: str = Field(description="file path, rtsp:// or http:// URL, /dev/videoN or camera index, image folder, "
                                 "or 'sample' / 'sample-text' (generated clips: moving faces / printed words) / "
                                 "'sample-street' (a real street clip) / 'sample-concourse' (a fixed camera over "
                                 "people) / 'sample-motorway' (a fixed camera over traffic)")
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
        kind = ("network stream" if NET.match(uri) else "camera" if _is_camera(uri) else
                "the built-in clip" if uri in SAMPLES else "file/folder")
        opens = Resource(f"opens {kind} {redact(uri)}", reads=uri if kind == "file/folder" else None, field="uri")
        return cls.declare(live=is_live(uri), resources=(opens,))

    def offer(self, port: str, inputs: Mapping[str, Offer], devices: Devices) -> Offer:
        """Says the picture size where a file's header tells it (a node after it may size its work by it)."""
        return Offer(self.id, port, picture=file_picture(self.config.uri, self.config.rotate))

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
        self.is_net = bool(NET.match(c.uri))
        self.live = self.is_net or _is_camera(c.uri)  # frames in real time: a stalled one says so (meta['live'])
        cores = usable_cores()
        # FFmpeg's default (a thread per core for every decoder) costs ~1.8x the CPU per frame of one
        # thread (1366x768 H.264) and oversubscribes the cores when many streams decode at once
        self.threads = c.threads if c.threads is not None else max(1, cores // max(ctx.streams, 1))
        self.stats["decoder_threads"] = self.threads or "ffmpeg"
        self.folder: ImageFolder | None = None
        self.cap: Any = None  # an OpenCV capture, or a PyAV demuxer (decoder: pyav)
        if c.uri in SAMPLES:
            c = self.config = c.model_copy(update={"uri": str(sample_path(c.uri))})
        self.decoded = 0
        self.decode_errors = 0
        self._bad_run = 0
        if not self.is_net and not _is_camera(c.uri):
            path = Path(os.path.expanduser(c.uri))
            if path.is_dir():
                self.folder = ImageFolder(c.uri, c.rotate, self.id, self.stats)
                self.format, self.decoder = "BGR", "opencv"  # images are read as BGR
                self.stats["format"] = self.format
                return
            if not path.is_file():
                raise FileNotFoundError(f"video file not found: {c.uri}")
            if path.stat().st_size == 0:
                raise ValueError(f"video file is empty (0 bytes): {c.uri}")
        self.format, self.decoder = self._pixels(self.allocation.pixels, self.allocation.pixels_by)
        self.stats["format"] = self.format
        self.timeline = Timeline()
        self.link = Reconnection(self.id, c, ctx, self.timeline)  # a network stream lost, or not up yet
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
            why = self.link.why_not_opened() if self.is_net and (first or self.link.telling()) else None
            return self._not_opened(why, first, "not a video OpenCV/FFmpeg can decode")
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
        self.stats["source"] = {"uri": redact(c.uri), "fps": round(self.fps, 3), "size": size, "rotate": turn}
        return cap

    def _open_demuxer(self, first: bool) -> Any:
        import av

        c = self.config
        try:
            dem = Demuxer(os.path.expanduser(c.uri), self.format, self.threads, c.timeout_s, c.rtsp_transport,
                          c.hwaccel, c.rotate)
        except Exception as e:  # noqa: BLE001 - FFmpeg's errors: one line, or a reconnect for a network stream
            why = reason(e)
            if isinstance(e, av.error.InvalidDataError):
                why = f"not a video FFmpeg can decode ({why})"
            return self._not_opened(why, first)
        self.fps = dem.fps if 0 < dem.fps < 1000 else 30.0
        taken = self.allocation.pixels
        if (c.format == "auto" and self.format != "BGR" and (dem.size[0] % 2 or dem.size[1] % 2)
                and (taken is None or "BGR" in taken)):
            # YUV 4:2:0 planes need an even size: this stream's pictures are BGR (what every node takes)
            log.info("node '%s': %s is %dx%d, an odd size: its frames are BGR, not %s", self.id, redact(c.uri),
                     *dem.size, self.format)
            self.format = dem.fmt = self.stats["format"] = "BGR"
        self.stats["source"] = {"uri": redact(c.uri), "fps": round(self.fps, 3), "size": list(dem.size),
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
                    raise RuntimeError(f"decoding {redact(c.uri)}: {e}") from None
                log.warning("node '%s': stream %s: %s", self.id, redact(c.uri), e)
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

    def _not_opened(self, why: str | None, first: bool, otherwise: str = "") -> None:
        """A stream that did not open: a network stream tries again (told before the next try; one not up
        when the run starts is connected in its own thread, unless ``reconnect_attempts`` is 0); anything
        else cannot run (``why``, or ``otherwise`` where nothing says why)."""
        if self.is_net and not first:
            if self.link.telling():
                log.warning("node '%s': cannot open %s%s", self.id, redact(self.config.uri), f": {why}" if why else "")
            return None
        if self.is_net and self.config.reconnect_attempts != 0:
            return self.link.not_up(why)
        raise RuntimeError(f"cannot open {redact(self.config.uri)}: {why or otherwise}") from None

    def _reconnect(self) -> Any:
        """The network stream connected again (None: the run stopped first)."""
        return self.link.reconnect(self._open_capture, self.decoded, self.last_at)

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
        if self.cap is None and self.link.pending:  # not up when the run started: connected here, as after a loss
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

    def _folder_frames(self, folder: ImageFolder) -> Iterator[Frame]:
        c = self.config
        t0 = time.monotonic()
        plays, n = 0, 0
        while True:
            for p, img in folder.pictures():
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
    return bool(NET.match(uri)) or _is_camera(uri)


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


def file_picture(uri: str, rotate: str | int) -> tuple[int, int] | None:
    """The picture size (width, height, upright after ``rotate``) a video file's header tells; None for a
    camera, a stream or a folder, or where the file says none."""
    if uri in SAMPLES:
        uri = str(sample_path(uri))
    path = Path(os.path.expanduser(uri))
    if NET.match(uri) or _is_camera(uri) or not path.is_file():
        return None  # a camera or stream says it when it opens; a folder may mix sizes
    try:
        import av

        with av.open(str(path)) as container:
            ctx = container.streams.video[0].codec_context
            size = (ctx.width, ctx.height) if ctx.width and ctx.height else None
            turn = display_turn(container) if rotate == "auto" else rotate
        return size[::-1] if size and turn in (90, 270) else size
    except Exception:  # noqa: BLE001  (not a video: open() says so in its own words)
        return None

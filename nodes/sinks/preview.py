"""Pictures of the streams: ``mjpeg_preview``, a live MJPEG preview in any browser (binds 127.0.0.1 unless
configured otherwise: exposing video beyond this machine is an explicit choice), and ``preview``, each
stream's newest picture for ``flowpipe serve``'s console."""
from __future__ import annotations

import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import cv2
from pydantic import Field

from flowpipe.frame import Frame
from flowpipe.node import PIXELS_ALL, NodeConfig, NodeContract, Resource, RunContext, Sink
from flowpipe.registry import register
from flowpipe_nodes.media.live import LiveEncoder

log = logging.getLogger("flowpipe.preview")
PAGE = """<!doctype html><html><head><title>flowpipe preview</title>
<style>body{{margin:0;background:#111;color:#ddd;font:14px sans-serif}} img{{display:block;max-width:100%}}</style>
</head><body>{items}</body></html>"""


class _Latest:
    """The newest JPEG per stream; viewers wait on a condition for the next one."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.jpeg: dict[str, tuple[int, bytes]] = {}
        self.viewers = 0
        self.closed = False

    def put(self, stream: str, data: bytes) -> None:
        with self.cond:
            seq = self.jpeg.get(stream, (0, b""))[0] + 1
            self.jpeg[stream] = (seq, data)
            self.cond.notify_all()

    def next(self, stream: str, after: int, timeout: float = 5.0) -> tuple[int, bytes] | None:
        with self.cond:
            self.cond.wait_for(lambda: self.closed or self.jpeg.get(stream, (0, b""))[0] > after, timeout)
            if self.closed:
                return None
            return self.jpeg.get(stream)


def _handler(latest: _Latest) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt: str, *args: Any) -> None:  # quiet: the run's log is for the pipeline
            log.debug("preview: " + fmt, *args)

        def do_GET(self) -> None:
            path = self.path.split("?")[0]
            if path == "/":
                with latest.cond:
                    streams = sorted(latest.jpeg)
                items = "".join(f'<h3>{s}</h3><img src="/stream/{s}.mjpg" alt="{s}">' for s in streams) \
                    or "<p>waiting for frames</p>"
                body = PAGE.format(items=items).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            if path.startswith("/stream/") and path.endswith(".mjpg"):
                self._stream(path[len("/stream/"):-len(".mjpg")])
                return
            self.send_error(404)

        def _stream(self, stream: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "multipart/x-mixed-replace; boundary=frame")
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            with latest.cond:
                latest.viewers += 1
            seq = 0
            try:
                while True:
                    item = latest.next(stream, seq)
                    if item is None:
                        return
                    seq, data = item
                    if not data:
                        continue
                    self.wfile.write(b"--frame\r\nContent-Type: image/jpeg\r\nContent-Length: "
                                     + str(len(data)).encode() + b"\r\n\r\n" + data + b"\r\n")
            except (BrokenPipeError, ConnectionResetError):
                pass
            finally:
                with latest.cond:
                    latest.viewers -= 1

    return Handler


@register("mjpeg_preview")
class MjpegPreview(Sink):
    """A live preview in any browser: http://HOST:PORT/ shows one MJPEG stream per video stream.

    YAML:
        - id: preview
          type: mjpeg_preview
          config: {port: 8090}          # binds 127.0.0.1 unless host is set
          inputs: {frame: draw.frame}
    """

    inputs = {"frame": "frame"}

    @classmethod
    def contract(cls, config: NodeConfig) -> NodeContract:
        assert isinstance(config, cls.Config)
        return cls.declare(pixels=PIXELS_ALL, final_picture=True,
                           sharding="one port serves every stream, and each shard process would bind its own",
                           resources=(Resource(f"listens on http://{config.host}:{config.port}/ (MJPEG preview)"),))

    class Config(NodeConfig):
        host: str = Field("127.0.0.1", description="bind address; 0.0.0.0 exposes the video to the network")
        port: int = Field(8090, ge=0, le=65535, description="0 picks a free port (see stats)")
        quality: int = Field(80, ge=10, le=100, description="JPEG quality")
        max_fps: float = Field(15.0, gt=0, description="pictures a second a stream sends at most")
        width: int | None = Field(640, ge=16, description="scale frames to this width (None: as is)")

    config: Config

    def open(self, ctx: RunContext) -> None:
        self.latest = _Latest()
        self.server = ThreadingHTTPServer((self.config.host, self.config.port), _handler(self.latest))
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        ctx.stats["url"] = f"http://{self.config.host}:{self.port}/"
        threading.Thread(target=self.server.serve_forever, name=f"flowpipe:{self.id}:http", daemon=True).start()
        log.info("node '%s': preview at http://%s:%d/", self.id, self.config.host, self.port)
        self._last: dict[str, float] = {}

    def write(self, frame: Frame) -> None:
        now = time.monotonic()
        if now - self._last.get(frame.stream, 0.0) < 1.0 / self.config.max_fps:
            return
        if self.latest.viewers == 0 and frame.stream in self.latest.jpeg:
            return  # nobody is watching: keep one picture for the page, skip the encoding
        self._last[frame.stream] = now
        img = frame.bgr()
        if self.config.width and img.shape[1] > self.config.width:
            h = round(img.shape[0] * self.config.width / img.shape[1])
            img = cv2.resize(img, (self.config.width, h), interpolation=cv2.INTER_AREA)
        ok, jpg = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, self.config.quality])
        if ok:
            self.latest.put(frame.stream, jpg.tobytes())

    def end_stream(self, stream: str) -> None:
        self._last.pop(stream, None)
        with self.latest.cond:
            self.latest.jpeg.pop(stream, None)

    def close(self) -> None:
        with self.latest.cond:
            self.latest.closed = True
            self.latest.cond.notify_all()
        self.server.shutdown()
        self.server.server_close()


@register("preview")
class Preview(Sink):
    """Keeps each stream's newest picture as a JPEG for ``flowpipe serve``'s console: encoded at most
    ``max_fps`` times a second for streams someone asked for in the last seconds (one picture otherwise);
    and, for a stream someone watches live, its live view (H.264 in fragmented MP4, ``media/live.py``) at up
    to ``live_fps``, made only while watched (none 10 s after the last viewer asked). Never fails a frame: a
    picture that cannot be encoded is skipped."""

    inputs = {"frame": "frame"}

    @classmethod
    def contract(cls, config: NodeConfig) -> NodeContract:
        return cls.declare(pixels=PIXELS_ALL, one_worker=None,
                           isolation="the service reads its pictures in the process that runs the graph")

    class Config(NodeConfig):
        max_fps: float = Field(5.0, gt=0, le=60, description="JPEG pictures a second of a stream someone asked for, "
                               "at most")
        width: int = Field(640, ge=16, le=4096, description="pictures wider than this are scaled down")
        quality: int = Field(75, ge=10, le=100, description="JPEG quality")
        live_fps: float = Field(30.0, gt=0, le=60, description="the live view's rate at most")

    config: Config

    def open(self, ctx: RunContext) -> None:
        self.latest = _Latest()
        self._last: dict[str, float] = {}
        self._asked: dict[str, float] = {}
        self._lock = threading.Lock()
        self.live: dict[str, LiveEncoder] = {}  # streams watched live
        self._watched: dict[str, float] = {}
        self._live_last: dict[str, float] = {}
        ctx.provide("picture", self.newest_picture)
        ctx.provide("video", self.live_since)

    def live_since(self, stream: str, seq: int) -> tuple[bytes | None, list[tuple[int, bytes]]]:
        """The stream's live view after fragment ``seq`` (asking keeps it made): the run's ``video``."""
        with self._lock:
            self._watched[stream] = time.monotonic()
            enc = self.live.get(stream)
            if enc is None:
                enc = self.live[stream] = LiveEncoder()
        return enc.since(seq)

    def _live(self, stream: str, now: float) -> LiveEncoder | None:
        """The stream's live encoder where someone watches it and a picture is due (one not watched for 10 s
        is closed)."""
        with self._lock:
            enc = self.live.get(stream)
            if enc is not None and now - self._watched.get(stream, -1e9) > 10.0:  # nobody watches
                del self.live[stream]
                enc.close()
                return None
        if enc is None or now - self._live_last.get(stream, -1e9) < 1.0 / self.config.live_fps:
            return None
        self._live_last[stream] = now
        return enc

    def newest_picture(self, stream: str) -> bytes | None:
        """The stream's newest picture (and more of them for a while): the run's ``picture``."""
        self._asked[stream] = time.monotonic()
        with self.latest.cond:
            got = self.latest.jpeg.get(stream)
        return got[1] if got else None

    def write(self, frame: Frame) -> None:
        now = time.monotonic()
        live = self._live(frame.stream, now)
        jpeg = now - self._last.get(frame.stream, 0.0) >= 1.0 / self.config.max_fps and (
            now - self._asked.get(frame.stream, -1e9) <= 5.0 or frame.stream not in self.latest.jpeg)
        if not (live or jpeg):  # nothing due, or nobody looks at it now
            return
        try:  # one picture, scaled once, for both
            img = frame.bgr()
            if img.shape[1] > self.config.width:
                h = round(img.shape[0] * self.config.width / img.shape[1])
                img = cv2.resize(img, (self.config.width, h), interpolation=cv2.INTER_AREA)
        except Exception as e:  # noqa: BLE001 - a preview never fails the frame it looks at
            log.debug("preview of %s skipped: %s", frame.stream, e)
            return
        if live is not None:
            try:
                live.add(img, now)
            except Exception as e:  # noqa: BLE001 - a live view never fails the frame it looks at
                log.debug("live view of %s skipped a picture: %s", frame.stream, e)
        if jpeg:
            self._last[frame.stream] = now
            try:
                ok, jpg = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, self.config.quality])
            except Exception as e:  # noqa: BLE001
                log.debug("preview of %s skipped: %s", frame.stream, e)
                return
            if ok:
                self.latest.put(frame.stream, jpg.tobytes())

    def end_stream(self, stream: str) -> None:
        self._last.pop(stream, None)
        self._asked.pop(stream, None)
        with self._lock:
            enc = self.live.pop(stream, None)
        if enc is not None:
            enc.close()
        with self.latest.cond:
            self.latest.jpeg.pop(stream, None)

    def close(self) -> None:
        with self._lock:
            live, self.live = list(self.live.values()), {}
        for enc in live:
            enc.close()

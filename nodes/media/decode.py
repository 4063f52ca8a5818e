"""Decoding through PyAV (FFmpeg): the stream's own timestamps, size changes passed on, damaged packets
skipped and counted, network timeouts and RTSP transport as FFmpeg options.

``Demuxer`` opens one input and yields its video pictures as (planes or BGR array, seconds, size). What the
source node does with them (pooled buffers, pacing, reconnects) stays in the node.
"""
from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import numpy as np

log = logging.getLogger("flowpipe_nodes.media")
HWACCEL = ("qsv", "vaapi", "cuda")  # ``auto`` tries these in order: Intel first (QSV, then VA-API), then NVIDIA
NET = ("rtsp://", "rtsps://", "rtmp://", "http://", "https://", "udp://", "tcp://", "srt://")


TURNS = (0, 90, 180, 270)


def turned(img: np.ndarray, fmt: str, cw: int) -> np.ndarray:
    """``img`` turned ``cw`` degrees clockwise (0, 90, 180 or 270): BGR ``(H, W, 3)`` as a view (the copy into
    the frame's buffer is the only one), I420 or NV12 planes ``(H * 3 // 2, W)`` plane by plane into a new
    array."""
    if cw == 0:
        return img
    k = -(cw // 90)  # np.rot90 turns counterclockwise
    if fmt == "BGR":
        return np.rot90(img, k)
    h, w = img.shape[0] * 2 // 3, img.shape[1]
    nh, nw = (w, h) if cw in (90, 270) else (h, w)
    out = np.empty((nh * 3 // 2, nw), np.uint8)
    out[:nh] = np.rot90(img[:h], k)
    if fmt == "I420":  # U then V, each (H/2, W/2)
        out[nh:].reshape(2, nh // 2, nw // 2)[:] = np.rot90(img[h:].reshape(2, h // 2, w // 2), k, axes=(1, 2))
    else:  # NV12: U and V interleaved
        out[nh:].reshape(nh // 2, nw // 2, 2)[:] = np.rot90(img[h:].reshape(h // 2, w // 2, 2), k, axes=(0, 1))
    return out


def display_turn(container: Any) -> int:
    """The clockwise turn (0, 90, 180 or 270) an open file's display matrix asks of its pictures (a phone held
    upright, a camera that records its mounting), as players apply it: read from its first picture (decoded: the
    container is read from there on); 0 where it has none."""
    import av

    try:
        for frame in container.decode(video=0):
            return _cw(frame.rotation)
    except (av.error.FFmpegError, OSError, IndexError):
        return 0
    return 0


def _cw(rotation: float) -> int:
    """FFmpeg's display-matrix rotation (counterclockwise degrees) as the clockwise turn that shows it upright."""
    return round(-float(rotation or 0) / 90.0) % 4 * 90


class Demuxer:
    """One input's video stream. ``pictures()`` yields ``(array, seconds)``: BGR ``(H, W, 3)``, or NV12 or
    I420 planes ``(H * 3 // 2, W)`` as ``fmt`` asks (I420: most decoders' own layout, no conversion);
    seconds from the stream's first picture, always increasing. ``turn``: the pictures turned clockwise by
    this many degrees, or ``"auto"``: as the stream's display matrix asks (a file recorded on a phone)."""

    def __init__(self, uri: str, fmt: str = "BGR", threads: int = 0, timeout_s: float = 5.0,
                 rtsp_transport: str = "tcp", hwaccel: str = "none", turn: int | str = 0):
        import av

        self.uri, self.fmt = uri, fmt
        self.hwaccel: str | None = None  # the device that decodes (None: FFmpeg's software decoder)
        self.damaged = 0  # packets the decoder refused (skipped)
        self.discontinuities = 0  # times the stream's timestamps went back
        options: dict[str, str] = {}
        kind = None
        if uri.lower().startswith(("rtsp://", "rtsps://")):
            options["rtsp_transport"] = rtsp_transport
        if uri.startswith("/dev/video") or uri.isdigit():
            kind = "v4l2"
            uri = uri if uri.startswith("/dev/") else f"/dev/video{uri}"
        net = uri.lower().startswith(NET)
        timeout = (timeout_s, timeout_s) if net else None
        self.container: Any = None
        for device in self._devices(hwaccel):
            try:
                self.container = av.open(uri, format=kind, options=options, timeout=timeout,
                                         hwaccel=av.codec.hwaccel.HWAccel(device, allow_software_fallback=False))
                self.hwaccel = device
                break
            except (av.error.FFmpegError, OSError, RuntimeError, ValueError) as e:
                if hwaccel != "auto":  # asked for by name: say why it is not used
                    log.warning("%s: hardware decode on %s unavailable (%s): decoding in software",
                                uri, device, str(e).splitlines()[0] if str(e) else type(e).__name__)
        if self.container is None:
            self.container = av.open(uri, format=kind, options=options, timeout=timeout)
        if not self.container.streams.video:
            self.container.close()
            raise RuntimeError(f"no video stream in {uri}")
        self.stream: Any = self.container.streams.video[0]
        self.stream.thread_type = "AUTO"
        self.stream.codec_context.thread_count = threads
        rate = self.stream.average_rate or self.stream.guessed_rate
        self.fps = float(rate) if rate else 30.0
        w, h = self.stream.codec_context.width, self.stream.codec_context.height
        #: the clockwise turn of every picture (a network stream or camera has no display matrix to ask)
        self.turn = int(turn) if turn != "auto" else 0
        if turn == "auto" and not net and kind is None:
            with av.open(uri) as first:  # a second opening: this one's demuxing starts at its first packet
                self.turn = display_turn(first)
        self.size = (h, w) if self.turn in (90, 270) else (w, h)

    @staticmethod
    def _devices(hwaccel: str) -> list[str]:
        if hwaccel == "none":
            return []
        from av.codec.hwaccel import hwdevices_available

        present = set(hwdevices_available())
        if hwaccel == "auto":
            return [d for d in HWACCEL if d in present]
        if hwaccel not in present:
            log.warning("hardware decode on %s: not in this FFmpeg build (it has: %s): decoding in software",
                        hwaccel, ", ".join(sorted(present)) or "none")
            return []
        return [hwaccel]

    @property
    def decoder(self) -> str:
        """What decodes, for stats: the codec and the device (``h264 on cuda``) or ``software``."""
        return f"{self.stream.codec_context.name} on {self.hwaccel}" if self.hwaccel else \
            f"{self.stream.codec_context.name} in software"

    def pictures(self) -> Iterator[tuple[np.ndarray, float]]:
        import av

        fmt = {"BGR": "bgr24", "NV12": "nv12", "I420": "yuv420p"}[self.fmt]
        t0: float | None = None
        last = -1.0
        step = 1.0 / self.fps
        for packet in self.container.demux(self.stream):
            try:
                decoded = packet.decode()
            except av.error.InvalidDataError:
                self.damaged += 1
                continue
            for frame in decoded:
                if (frame.width % 2 or frame.height % 2) and fmt != "bgr24":
                    raise RuntimeError(f"{self.fmt} needs an even width and height, got {frame.width}x{frame.height}; "
                                       "expected format: BGR for this stream")
                if frame.time is None:
                    seconds = last + step
                else:
                    if t0 is None:
                        t0 = float(frame.time)
                    seconds = float(frame.time) - t0
                    if seconds <= last:  # timestamps went back (a camera restarted, files joined): go on from here
                        self.discontinuities += 1
                        t0 -= last + step - seconds
                        seconds = last + step
                last = seconds
                yield turned(frame.to_ndarray(format=fmt), self.fmt, self.turn), seconds

    def seek_start(self) -> None:
        self.container.seek(0)

    def close(self) -> None:
        self.container.close()


"""Recordings that browsers play and that survive a crash: H.264/H.265 through PyAV (FFmpeg).

One ``Recorder`` per stream. Files are fragmented MP4 (an empty ``moov`` first, then a fragment per
keyframe interval): a process killed at any moment leaves a file that plays up to its last complete
fragment. With ``segment_seconds`` a new file starts on schedule, each one closed whole. Encoders: the
software one of the codec (libx264, libx265), or a hardware one when asked (``qsv``, ``nvenc``, ``vaapi``
or an FFmpeg encoder name); one that does not open here falls back to software with one line in the log.
"""
from __future__ import annotations

import contextlib
import logging
from fractions import Fraction
from pathlib import Path
from typing import Any

import cv2
import numpy as np

log = logging.getLogger("flowpipe_nodes.media")

SOFTWARE = {"h264": "libx264", "h265": "libx265", "mpeg4": "mpeg4"}
HARDWARE = {"qsv": {"h264": "h264_qsv", "h265": "hevc_qsv"}, "nvenc": {"h264": "h264_nvenc", "h265": "hevc_nvenc"},
            "vaapi": {"h264": "h264_vaapi", "h265": "hevc_vaapi"}}
FRAGMENTED = "frag_keyframe+empty_moov+default_base_moof"


def encoder_names(codec: str, encoder: str) -> list[str]:
    """The encoders to try, in order: the one asked for, then the codec's software one."""
    if encoder in ("auto", "software"):
        return [SOFTWARE[codec]]
    asked = HARDWARE.get(encoder, {}).get(codec, encoder)
    return [asked] if asked == SOFTWARE[codec] else [asked, SOFTWARE[codec]]


class Recorder:
    """Encodes one stream's BGR frames into ``path`` (or into its segments ``STEM.00000.mp4``...)."""

    def __init__(self, path: str, fps: float, size: tuple[int, int], codec: str = "h264", encoder: str = "auto",
                 crf: int | None = 23, bitrate: str | None = None, preset: str = "veryfast",
                 gop_seconds: float = 1.0, fragmented: bool = True, segment_seconds: float | None = None,
                 threads: int = 0):
        self.path, self.fps, self.size = Path(path), fps, size
        self.codec, self.encoder, self.crf, self.bitrate, self.preset = codec, encoder, crf, bitrate, preset
        self.gop = max(1, round(gop_seconds * fps))
        self.fragmented, self.threads = fragmented, threads
        self.per_segment = max(1, round(segment_seconds * fps)) if segment_seconds else None
        self.frames = 0  # written to the stream over every segment
        self.files: list[str] = []
        self.used: str | None = None  # the encoder that opened
        self._container: Any = None
        self._stream: Any = None
        self._n = 0  # frames in the open file
        self._muxed = 0  # packets of the open file handed to the muxer
        self._in_file = 0  # frames at the start of the open file that are in it for good (fragments written)
        self._sized = ""  # after a size change: the files' name says the size
        self._abandoned: dict[str, int] = {}  # files let go after a failed write: frames in each for good
        self.tap: Any = None  # a ``ClipKeeper`` (media/clips.py): every packet, before the muxer takes it
        import av

        self._frame = av.VideoFrame.from_ndarray  # looked up once, not per picture

    def _file(self) -> Path:
        stem = self.path.stem + self._sized
        if self.per_segment is None:
            return self.path.with_name(stem + self.path.suffix)
        return self.path.with_name(f"{stem}.{self.frames // self.per_segment:05d}{self.path.suffix}")

    def resize(self, size: tuple[int, int]) -> None:
        """The stream's pictures changed size: the open file closes whole and the next one (NAME.WxH.mp4)
        takes the new size."""
        self._close_file()
        self.size = size
        self._sized = f".{size[0]}x{size[1]}"
        log.info("%s: the stream's size changed to %dx%d: recording goes on in %s", self.path, *size, self._file())

    def _open(self) -> None:
        import av

        path = self._file()
        path.parent.mkdir(parents=True, exist_ok=True)
        if self.size[0] % 2 or self.size[1] % 2:
            log.info("%s: the pictures are %dx%d; H.264/H.265 in 4:2:0 need even sides: recorded at %dx%d (the "
                     "last %s left out; the records' boxes are the whole picture's)", path, *self.size,
                     self.size[0] & ~1, self.size[1] & ~1,
                     "row and column" if self.size[0] % 2 and self.size[1] % 2 else
                     "column" if self.size[0] % 2 else "row")
        options = {"movflags": FRAGMENTED, "flush_packets": "1"} \
            if self.fragmented and path.suffix.lower() in (".mp4", ".mov") else {}
        rate = Fraction(self.fps).limit_denominator(1001)
        failures = []
        for name in encoder_names(self.codec, self.encoder):
            container = av.open(str(path), "w", options=options)
            try:
                stream: Any = container.add_stream(name, rate=rate)
                # 4:2:0 needs even sides: an odd picture (an 800x533 photograph) loses its last row or column
                stream.width, stream.height = self.size[0] & ~1, self.size[1] & ~1
                stream.pix_fmt = "yuv420p" if not name.endswith(("_qsv", "_vaapi")) else "nv12"
                stream.codec_context.gop_size = self.gop
                stream.codec_context.thread_count = self.threads
                opts: dict[str, str] = {}
                if self.bitrate:
                    stream.codec_context.bit_rate = _bits(self.bitrate)
                elif self.crf is not None and name.startswith("lib"):
                    opts["crf"] = str(self.crf)
                if name.startswith("lib"):
                    opts["preset"] = self.preset
                    opts["tune"] = "zerolatency"  # no frames held for lookahead: a crash loses only the open fragment
                    if name == "libx264":
                        opts["profile"] = "high"  # what browsers decode
                if name == "libx265":
                    opts["tag"] = "hvc1"
                stream.codec_context.options = opts
                stream.codec_context.open()
            except Exception as e:  # noqa: BLE001 - an encoder this machine lacks: the next one
                container.close()
                failures.append(f"{name}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
                continue
            if failures and self.used is None:
                log.warning("encoder %s is not available here (%s): using %s", failures[0].split(":")[0],
                            failures[0].split(": ", 1)[-1], name)
            self._container, self._stream, self.used, self._n = container, stream, name, 0
            self._muxed = self._in_file = 0
            self.files.append(str(path))
            if self.tap is not None:
                self.tap.opened(stream)
            return
        raise RuntimeError(f"no encoder for {self.codec} opens here: {'; '.join(failures)}")

    def write(self, image: np.ndarray, fmt: str = "BGR") -> tuple[str, int]:
        """One picture: BGR ``(H, W, 3)``, or NV12/I420 planes ``(H * 3 // 2, W)`` (encoded as they are).
        Returns where it goes: the file and its frame number there."""
        if self._container is None or (self.per_segment and self._n >= self.per_segment):
            self._close_file()
            self._open()
        w, h = self.size
        planes: Any = image
        if fmt in ("NV12", "I420"):  # the decoder's and the encoder's format: no BGR on the way
            frame = self._frame(planes, format="nv12" if fmt == "NV12" else "yuv420p")
        elif (w | h) & 1:  # an odd side: the even part of the picture (the stream's size)
            frame = self._frame(np.ascontiguousarray(image[:h & ~1, :w & ~1]), format="bgr24")
        elif self._stream.pix_fmt == "yuv420p":
            # OpenCV's BGR -> I420 is ~3.5x cheaper than swscale's here (0.5 vs 1.9 ms at 1366x768)
            planes = cv2.cvtColor(image, cv2.COLOR_BGR2YUV_I420)
            frame = self._frame(planes, format="yuv420p")
        else:
            frame = self._frame(image, format="bgr24")
        frame.pts = self._n
        for packet in self._stream.encode(frame):
            self._mux(packet)
        self._n += 1
        self.frames += 1
        return self.files[-1], self._n - 1

    def _close_file(self) -> None:
        if self._container is None:
            return
        try:
            for packet in self._stream.encode(None):  # what the encoder still holds
                self._mux(packet)
        finally:
            self._container.close()
            self._container = self._stream = None

    def _mux(self, packet: Any) -> None:
        """One packet into the file. A fragmented file's muxer writes the fragment before a keyframe's
        packet (``frag_keyframe``) and flushes it to the file (``flush_packets``): the frames before it are
        in the file for good, whatever happens to this process next."""
        flushes = packet.is_keyframe and self.fragmented and self._muxed
        if self.tap is not None:  # an event clip's copy: the muxer takes the packet's data
            self.tap.packet(packet, self.frames)
        self._container.mux(packet)  # a full disk raises here (OSError, ENOSPC): the fragment is not in it
        if flushes:
            self._in_file = self._muxed
        self._muxed += 1

    def in_file(self, path: str) -> int:
        """How many frames at the start of ``path`` (one of ``files``) are in it for good: all of a closed
        file's; the open one's up to its last written fragment (none of an unfragmented one's)."""
        if path in self._abandoned:
            return self._abandoned[path]
        if self._container is None or path != self.files[-1]:
            return 1 << 62
        return self._in_file

    def close(self) -> None:
        self._close_file()
        if self.tap is not None:
            self.tap.close()

    def abandon(self) -> None:
        """After a write failed (a full disk): the open file is let go without writing to it again (what is
        in it stays as it is: every fragment before the failed one, playable)."""
        container, self._container, self._stream = self._container, None, None
        if container is not None:
            self._abandoned[self.files[-1]] = self._in_file
            with contextlib.suppress(Exception):
                container.close()


def _bits(text: str) -> int:
    """'2M', '800k', '1500000' -> bits per second."""
    t = text.strip().lower()
    scale = {"k": 1_000, "m": 1_000_000}.get(t[-1:], 1)
    return int(float(t[:-1] if scale > 1 else t) * scale)


def available() -> bool:
    try:
        import av  # noqa: F401
    except ImportError:
        return False
    return True

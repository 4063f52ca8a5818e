"""A live view of one stream for a browser: H.264 in fragmented MP4, kept in memory as its initialization
segment and its newest fragments, each beginning with a keyframe, so a viewer that joins at any moment starts
with the initialization segment and the newest fragment and then follows (what a ``<video>`` element plays as
a progressive download, without a plugin or a JPEG refresh).

Small and cheap on purpose: the picture as the caller scaled it, x264 ``ultrafast`` with ``zerolatency``, a
keyframe (and so a fragment) every ``fragment_s``.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from fractions import Fraction
from typing import Any

import numpy as np

FRAGMENTS = "+frag_keyframe+empty_moov+default_base_moof"
TIME_BASE = Fraction(1, 90000)


class _Sink:
    """What the muxer writes, split into top-level MP4 boxes as they complete."""

    def __init__(self, on_box: Any):
        self.buf = bytearray()
        self.on_box = on_box
        self.pos = 0

    def write(self, data: bytes) -> int:
        self.buf += data
        self.pos += len(data)
        while len(self.buf) >= 8:
            size = int.from_bytes(self.buf[:4], "big")
            if size < 8 or len(self.buf) < size:  # (size 0/1, to the end or 64-bit: never written here)
                break
            box, self.buf = bytes(self.buf[:size]), self.buf[size:]
            self.on_box(box[4:8].decode("latin-1"), box)
        return len(data)

    def tell(self) -> int:
        return self.pos

    def seek(self, *_: Any) -> int:  # fragmented output never seeks back
        return self.pos

    def flush(self) -> None:
        pass


class LiveEncoder:
    """One stream's live fragmented MP4. ``add`` a picture (BGR) at a time; ``since(seq)`` gives the
    initialization segment and the fragments after ``seq`` (the newest alone for a viewer joining, seq -1)."""

    def __init__(self, fragment_s: float = 0.5, keep: int = 8):
        self.fragment_s = fragment_s
        self.init: bytes | None = None
        self.fragments: deque[tuple[int, bytes]] = deque(maxlen=keep)
        self.seq = 0
        self.lock = threading.Lock()  # the encoder's thread appends fragments, viewers' threads read them
        self._pending = bytearray()  # boxes of the fragment being completed (moof, then mdat)
        self._container: Any = None
        self._stream: Any = None
        self._size: tuple[int, int] | None = None
        self._t0: float | None = None
        self._last_key = -1e9

    def _open(self, size: tuple[int, int]) -> None:
        import av

        self._sink = _Sink(self._box)
        self._container = av.open(self._sink, "w", format="mp4", options={"movflags": FRAGMENTS})
        s: Any = self._container.add_stream("libx264", rate=30)
        s.width, s.height = size
        s.pix_fmt = "yuv420p"
        s.time_base = TIME_BASE
        s.codec_context.time_base = TIME_BASE
        s.codec_context.options = {"preset": "ultrafast", "tune": "zerolatency", "profile": "high"}
        s.codec_context.gop_size = 10_000  # keyframes are asked for, every fragment_s
        self._stream, self._size = s, size

    def _box(self, kind: str, box: bytes) -> None:
        if kind in ("ftyp", "moov"):
            self.init = (self.init or b"") + box
            return
        self._pending += box
        if kind == "mdat":  # a fragment is moof + mdat
            with self.lock:
                self.seq += 1
                self.fragments.append((self.seq, bytes(self._pending)))
            self._pending = bytearray()

    def add(self, image: np.ndarray, now: float | None = None) -> None:
        """One picture (BGR, cropped to even sides), timed by the clock (the viewer sees it at the pace it
        came)."""
        import av

        now = time.monotonic() if now is None else now
        h, w = image.shape[:2]
        image = image[:h - h % 2, :w - w % 2]
        size = (image.shape[1], image.shape[0])
        if self._container is not None and size != self._size:
            self.close()  # a new size: a new initialization segment
            self.init = None
        if self._container is None:
            self._open(size)
            self._t0 = now
        frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="bgr24")
        assert self._t0 is not None
        frame.pts = int((now - self._t0) / TIME_BASE)
        frame.time_base = TIME_BASE
        if now - self._last_key >= self.fragment_s:
            frame.pict_type = av.video.frame.PictureType.I
            self._last_key = now
        for packet in self._stream.encode(frame):
            self._container.mux(packet)

    def since(self, seq: int) -> tuple[bytes | None, list[tuple[int, bytes]]]:
        """The initialization segment and the fragments after ``seq`` (seq < 0: the newest one only)."""
        with self.lock:
            frags = list(self.fragments)
        if seq < 0:
            return self.init, frags[-1:]
        return self.init, [f for f in frags if f[0] > seq]

    def close(self) -> None:
        if self._container is not None:
            try:
                self._container.close()
            except Exception:  # noqa: BLE001, S110 - a live view closing on its way out
                pass
            self._container = self._stream = None

"""Event clips cut from a recording's own packets, without encoding again (Frigate's event clips, DeepStream's
Smart Record): the last seconds of a stream's encoded packets are kept in a ring, so a clip can begin before
its event (pre-roll, from the keyframe before it) and run on after it ends (post-roll).

``ClipKeeper`` is fed every packet a ``Recorder`` muxes (``Recorder.tap``); ``start`` opens a clip (or extends
the one open), ``stop`` says when it may end; clips are fragmented MP4 of the recording's codec, playable in a
browser and up to their last fragment after a crash. Old clips go by age and by the folder's total size.
"""
from __future__ import annotations

import contextlib
import logging
import re
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("flowpipe_nodes.media")

FRAGMENTED = "+frag_keyframe+empty_moov+default_base_moof"


def retain(folder: Path, stream: str, suffix: str, keep_s: float | None, keep_mb: float | None) -> None:
    """A stream's files in ``folder`` (``STREAM-FRAME[.N]SUFFIX``: event clips, snapshots) older than
    ``keep_s`` deleted, then the oldest beyond ``keep_mb`` (all but the newest)."""
    if keep_s is None and keep_mb is None:
        return
    named = re.compile(re.escape(stream) + r"-\d{8,}(\.\d+)?" + re.escape(suffix))  # not door-back's for door's
    mine = sorted((p for p in folder.glob(f"{stream}-*{suffix}") if named.fullmatch(p.name)),
                  key=lambda p: p.stat().st_mtime)
    now = time.time()
    for p in list(mine):
        if keep_s is not None and now - p.stat().st_mtime > keep_s:
            p.unlink(missing_ok=True)
            mine.remove(p)
    if keep_mb is not None:
        total = sum(p.stat().st_size for p in mine)
        while len(mine) > 1 and total > keep_mb * 1e6:  # the newest stays, whatever its size
            p = mine.pop(0)
            total -= p.stat().st_size
            p.unlink(missing_ok=True)


def unused(path: Path) -> Path:
    """``path``, or where a file of an earlier run is there, the first free ``NAME.N.EXT`` beside it: what an
    earlier run's records name is never written over (frame numbers begin at 0 in every run)."""
    first, n = path, 1
    while path.exists():
        n += 1
        path = first.with_name(f"{first.stem}.{n}{first.suffix}")
    return path


@dataclass
class _Packet:
    data: bytes
    pts: int | None
    dts: int | None
    key: bool
    frame: int  # the stream's frame it is of (its count of frames written)
    time_base: Any  # of pts and dts: the encoder's


@dataclass
class _Open:
    path: Path
    container: Any
    stream: Any
    first_pts: int  # the clip's first packet's pts (the clip starts at 0)
    first_dts: int
    until: int | None  # the frame after which it ends (None: an event still on)
    events: set[str]
    frames: int = 0


class ClipKeeper:
    """One stream's ring of packets and its open clip.

    ``pre_s``/``post_s``: seconds before an event's first frame and after its last; ``folder``: where clips go,
    named ``STREAM-FRAME.mp4`` (the frame the clip's event began on); ``keep_s`` / ``keep_mb``: clips older, or
    beyond that many MB in the folder (this stream's), are deleted, oldest first."""

    def __init__(self, stream: str, folder: str | Path, fps: float, pre_s: float, post_s: float,
                 keep_s: float | None = None, keep_mb: float | None = None):
        self.stream, self.folder = stream, Path(folder)
        self.pre = max(0, round(pre_s * fps))
        self.post = max(0, round(post_s * fps))
        self.keep_s, self.keep_mb = keep_s, keep_mb
        # the newest packets, a group of pictures each (from a keyframe to the packet before the next; the first
        # may begin without one): from the last keyframe at or before ``pre`` frames ago on
        self.ring: deque[list[_Packet]] = deque()
        self.template: Any = None  # the recording's stream: codec, its parameters (SPS/PPS), time base
        self.clip: _Open | None = None
        self.written: list[str] = []  # clips closed

    # fed by the recorder ------------------------------------------------------------------------------
    def opened(self, stream: Any) -> None:
        """The recorder opened a file (a segment, a new size): its stream is the template of the next clips;
        packets of another size cannot join them."""
        if self.template is not None and (stream.codec_context.width, stream.codec_context.height) != (
                self.template.codec_context.width, self.template.codec_context.height):
            self.ring.clear()
            self._close()
        self.template = stream

    def packet(self, packet: Any, frame: int) -> None:
        """One encoded packet (before the recording's muxer takes it), of the stream's ``frame``."""
        p = _Packet(bytes(packet), packet.pts, packet.dts, bool(packet.is_keyframe), frame, packet.time_base)
        if p.key or not self.ring:
            self.ring.append([p])
        else:
            self.ring[-1].append(p)
        # keep from the last keyframe at or before ``pre`` frames ago: a clip starting now can begin there
        while len(self.ring) > 1 and self.ring[1][0].frame <= frame - self.pre:
            self.ring.popleft()
        if self.clip is not None:
            self._mux(p)
            if self.clip.until is not None and frame >= self.clip.until:
                self._close()

    # events --------------------------------------------------------------------------------------------
    def start(self, event: str, frame: int, until: int | None = None) -> str | None:
        """An event begins at ``frame`` (``until``: the frame it ends on, for one that is over at once): the
        clip it is in (the open one, extended, or a new one from the keyframe ``pre_s`` before). None where
        no packet came yet."""
        c = self.clip
        end = None if until is None else until + self.post
        if c is not None:
            c.events.add(event)
            if c.until is not None:
                c.until = None if end is None else max(c.until, end)
            return str(c.path)
        gops = [g for g in self.ring if g[0].key]
        if self.template is None or not gops:
            return None
        # from the last keyframe at or before the pre-roll, else the oldest there is
        start = next((i for i in range(len(gops) - 1, -1, -1) if gops[i][0].frame <= frame - self.pre), 0)
        self.folder.mkdir(parents=True, exist_ok=True)
        path = unused(self.folder / f"{self.stream}-{frame:08d}.mp4")
        import av

        container = av.open(str(path), "w", options={"movflags": FRAGMENTED, "flush_packets": "1"})
        stream = container.add_stream_from_template(self.template)
        first = gops[start][0]
        self.clip = _Open(path, container, stream, first.pts or 0, first.dts if first.dts is not None else 0, end,
                          {event})
        for p in (q for g in gops[start:] for q in g):
            if self.clip is None:  # a packet it could not take ended it
                break
            self._mux(p)
        return str(path)

    def stop(self, event: str, frame: int) -> str | None:
        """An event ended at ``frame``: its clip ends ``post_s`` after, unless another event in it goes on."""
        c = self.clip
        if c is None or event not in c.events:
            return None
        c.events.discard(event)
        if not c.events:
            c.until = frame + self.post
        return str(c.path)

    def close(self) -> None:
        self._close()

    # ----------------------------------------------------------------------------------------------------
    def _mux(self, p: _Packet) -> None:
        import av

        c = self.clip
        assert c is not None
        pkt = av.Packet(p.data)
        pkt.pts = None if p.pts is None else p.pts - c.first_pts
        pkt.dts = None if p.dts is None else p.dts - c.first_dts
        pkt.is_keyframe = p.key
        pkt.time_base = p.time_base
        pkt.stream = c.stream
        try:
            c.container.mux(pkt)
            c.frames += 1
        except (OSError, av.error.FFmpegError) as e:
            log.error("event clip %s: %s: the clip ends here", c.path, e)
            self._close()

    def _close(self) -> None:
        c, self.clip = self.clip, None
        if c is None:
            return
        with contextlib.suppress(Exception):
            c.container.close()
        self.written.append(str(c.path))
        self._retain()

    def _retain(self) -> None:
        retain(self.folder, self.stream, ".mp4", self.keep_s, self.keep_mb)

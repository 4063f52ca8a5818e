"""Network streams (RTSP, HTTP, RTMP, UDP, SRT): their addresses told without credentials, why one does not
open, its connection made again after a loss, and the timestamps that go on across it."""
from __future__ import annotations

import itertools
import logging
import re
import time
from collections.abc import Callable
from typing import Any, Protocol

from flowpipe.node import RunContext
from flowpipe_nodes.media.decode import Demuxer
from flowpipe_nodes.media.encode import available

log = logging.getLogger("flowpipe.video")
NET = re.compile(r"^(rtsp|rtsps|rtmp|http|https|udp|tcp|srt)://", re.I)


class StreamSettings(Protocol):
    """The settings of a source that a network stream's connection reads (``VideoSourceConfig``'s)."""

    @property
    def uri(self) -> str: ...
    @property
    def reconnect_attempts(self) -> int: ...
    @property
    def reconnect_backoff_s(self) -> float: ...
    @property
    def timeout_s(self) -> float: ...
    @property
    def rtsp_transport(self) -> str: ...


def redact(uri: str) -> str:
    """``uri`` with its credentials (``//user:password@``) starred out, for the log and the stats."""
    return re.sub(r"//[^/@]*@", "//***@", uri)


def reason(e: BaseException) -> str:
    """Why FFmpeg (through PyAV) could not open a stream, in one line: its own words ("Connection refused")."""
    return getattr(e, "strerror", None) or (str(e).splitlines()[0] if str(e) else repr(e))


class Timeline:
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


class Reconnection:
    """A network stream's connection made again after a loss, or made late where the stream was not up when
    the run started: tries ``reconnect_attempts`` times (-1: for ever) with a delay that doubles from
    ``reconnect_backoff_s`` up to 8 s, stops waiting when the stream is being removed, tells the log of the
    first five tries and then of every tenth, and keeps each outage in the node's stats (``outages``,
    ``reconnects``, ``last_outage_s``, ``outage_total_s``, ``reconnecting`` while one lasts)."""

    def __init__(self, node_id: str, config: StreamSettings, ctx: RunContext, timeline: Timeline) -> None:
        self.id = node_id
        self.config = config
        self.ctx = ctx
        self.stats = ctx.stats
        self.timeline = timeline
        self.t_open = time.monotonic()
        self.pending = False  # not up when the run started: connected in the source's own thread
        self.attempt = 0  # the try under way (0: none)
        self.reconnects = 0

    def telling(self) -> bool:
        """Whether this try to reconnect is one the log tells of: the first five, then every tenth."""
        return self.attempt <= 5 or self.attempt % 10 == 0

    def why_not_opened(self) -> str | None:
        """Why a network stream OpenCV could not open cannot be opened, in FFmpeg's words through PyAV
        (OpenCV says none): connection refused, 404, a timeout."""
        if not available():
            return None
        c = self.config
        try:
            Demuxer(c.uri, "BGR", 1, c.timeout_s, c.rtsp_transport, "none").close()
        except Exception as e:  # noqa: BLE001 - FFmpeg's errors, whatever their class: the reason is the text
            return reason(e)
        return None  # it opens now: a passing fault

    def not_up(self, why: str | None) -> None:
        """A network stream that cannot be opened when the run starts: the node opens all the same, and its
        stream is connected in its own thread, as after a loss (the other streams start meanwhile)."""
        log.warning("node '%s': cannot open %s%s; the stream starts when it answers", self.id,
                    redact(self.config.uri), f": {why}" if why else "")
        self.pending = True
        return None

    def reconnect(self, connect: Callable[[], Any], decoded: int, last_at: float | None) -> Any:
        """The stream connected again by ``connect`` (None: a try that failed), after ``decoded`` frames, the
        last of them decoded at ``last_at`` (monotonic; None: none yet); None where the run stopped first.
        Raises where every try failed."""
        lost = time.monotonic()
        # every outage of a camera that comes and goes, from the run's start (the last 100 of them), listed as
        # it begins: one still going on (lasted_s None) shows in the stats a process last reported, had it died
        outage: dict[str, Any] = {"at_s": round(lost - self.t_open, 3), "lasted_s": None,
                                  "after_frame": decoded - 1}
        outages = self.stats.setdefault("outages", [])
        outages.append(outage)
        del outages[:-100]
        self.stats["reconnecting"] = True
        try:
            return self._tries(connect, decoded, last_at, lost, outage)
        finally:
            self.stats["reconnecting"] = False

    def _tries(self, connect: Callable[[], Any], decoded: int, last_at: float | None, lost: float,
               outage: dict[str, Any]) -> Any:
        c = self.config
        delay = c.reconnect_backoff_s
        n = c.reconnect_attempts
        what = "lost" if decoded else "not up yet"  # a camera never seen has not been lost
        for attempt in itertools.count(1) if n < 0 else range(1, n + 1):
            if self.ctx.stopping:
                return None
            self.attempt = attempt
            if self.telling():  # a camera down for hours: a line every 10 tries, not each
                log.warning("node '%s': stream %s %s; reconnect %d%s in %.1fs", self.id, redact(c.uri), what,
                            attempt, f"/{n}" if n >= 0 else "", delay)
            end = time.monotonic() + delay
            while time.monotonic() < end:  # a stream removed meanwhile stops waiting
                if self.ctx.stopping:
                    return None
                time.sleep(min(0.1, end - time.monotonic()))
            cap = connect()
            if cap is not None:
                took = time.monotonic() - lost
                outage["lasted_s"] = round(took, 3)  # before the count: a report between the two has it ended
                self.reconnects += 1
                self.stats["reconnects"] = self.reconnects
                self.stats["last_outage_s"] = round(took, 3)
                self.stats["outage_total_s"] = round(self.stats.get("outage_total_s", 0.0) + took, 3)
                log.warning("node '%s': stream %s back after %.1fs (outage %d)", self.id, redact(c.uri), took,
                            self.reconnects)
                self.attempt = 0
                # away since its last frame (the read that found it gone waited its timeout first)
                self.timeline.resumed(time.monotonic() - last_at if last_at is not None else took)
                return cap
            delay = min(delay * 2, 8.0)
        raise RuntimeError(f"stream {redact(c.uri)} did not come back after {c.reconnect_attempts} attempts")

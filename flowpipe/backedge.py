"""Back edges: a later node's word to an earlier one, said for a frame and read for a defined frame.

A graph's edges carry frames forward; a few decisions need word from further down (a detector's interval
runs the detector on every frame while the tracker after it has young tracks). Read as "whatever has come back
so far", such a word makes the decision for frame t depend on how far the later node had got, which is a
matter of timing: the same clip masked differently on a quiet machine and a loaded one. A ``BackEdge`` is
MediaPipe's back edge with ``PreviousLoopbackCalculator``: the writer says its word as of each frame it sees
(``say``), and the reader of frame t reads the word as of frame ``t - delay`` (``read``), waiting until the
writer has seen that frame. The word read is then a function of the input alone.

The wait ends when the writer has seen a frame at or after ``t - delay`` of the stream, or when no frame of the
stream up to ``t - delay`` that it has not seen is still in flight (dropped by a policy, failed, or thrown away
by a run stopping at once): frames of one stream reach a node in order, so none of those can come any more. A
run that drains (a first Ctrl-C) lets the frames in flight on, so their words come as in any run. An edge no writer
opened (a node left out of the graph, or one in another process) is read without waiting and says nothing.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

log = logging.getLogger("flowpipe")

#: words kept per stream: a reader ``delay`` frames behind needs the writer's last ``delay + 1`` at most
KEEP = 128
#: seconds a reader waits without the writer moving before it goes on with the newest word (said once): what
#: ends a wait a graph cannot end (a writer that stopped speaking); never reached by a working graph
STALL_S = 30.0


class BackEdge:
    """One node's word per stream and frame, for the nodes before it. ``pending(stream, after, upto)``: whether
    a frame of ``stream`` with an index in ``(after, upto]`` is still in flight (the run's account)."""

    def __init__(self, name: str, pending: Callable[[str, int, int], bool] | None = None):
        self.name = name
        self._pending = pending
        self.first: dict[str, Any] | None = None  # the word before the writer said any (its own default)
        self.writer = False  # a node in this process speaks on it: readers wait for its word
        self._words: dict[str, deque[tuple[int, dict[str, Any]]]] = {}  # per stream: (frame, word), in order
        self._seen: dict[str, int] = {}  # per stream: the last frame the writer saw
        self._cond = threading.Condition()
        self.stalls = 0  # waits that ended by STALL_S (the word read then depended on timing)

    # the writer ---------------------------------------------------------------------------------------
    def open(self, first: dict[str, Any] | None = None) -> BackEdge:
        """The writer's: it speaks on this edge (readers wait for it); ``first``: the word read before it said
        any on a stream (None: nothing)."""
        with self._cond:
            self.writer, self.first = True, first
        return self

    def say(self, stream: str, index: int, word: dict[str, Any] | None = None) -> None:
        """The writer saw frame ``index`` of ``stream``; ``word``: what it says as of that frame (None: what it
        said last still holds). Every frame the writer sees is said, so that readers of it wait no more."""
        with self._cond:
            seen = self._seen.get(stream)
            if seen is not None and index < seen:  # the stream counted again from a lower index (reopened)
                self._words.pop(stream, None)
            self._seen[stream] = index
            if word is not None:
                q = self._words.setdefault(stream, deque(maxlen=KEEP))
                q.append((index, word))
            self._cond.notify_all()

    # the reader ---------------------------------------------------------------------------------------
    def read(self, stream: str, index: int) -> dict[str, Any] | None:
        """The writer's word on ``stream`` as of frame ``index``: the last it said on a frame at or before it
        (``first`` where none; None with no writer). Waits until the writer saw frame ``index``, or no frame it
        has not seen up to ``index`` can come any more."""
        if index < 0 or not self.writer:
            return self.first if index >= 0 or self.writer else None
        with self._cond:
            waited, last = time.monotonic(), self._seen.get(stream, -1)
            while not self._heard(stream, index):
                now = self._seen.get(stream, -1)
                if now != last:  # the writer moves: the stall clock starts again
                    waited, last = time.monotonic(), now
                if time.monotonic() - waited > STALL_S:
                    self.stalls += 1
                    if self.stalls == 1:
                        log.warning("back edge '%s': no word on frame %d of stream '%s' in %.0f s (its writer "
                                    "stopped at frame %d): going on with its newest; what depends on it may "
                                    "differ from run to run", self.name, index, stream, STALL_S, now)
                    break
                self._cond.wait(0.05)  # a frame that ends without reaching the writer wakes no one: look again
            return self._word(stream, index)

    def _heard(self, stream: str, index: int) -> bool:
        seen = self._seen.get(stream, -1)
        if seen >= index:
            return True
        return self._pending is not None and not self._pending(stream, seen, index)

    def _word(self, stream: str, index: int) -> dict[str, Any] | None:
        for at, word in reversed(self._words.get(stream, ())):  # the newest first: a reader is a few frames behind
            if at <= index:
                return word
        return self.first

    def last(self, stream: str) -> dict[str, Any] | None:
        """The newest word said on ``stream`` (``first`` where none), without waiting: what a test or a
        report looks at, never what a decision reads."""
        with self._cond:
            q = self._words.get(stream)
            return q[-1][1] if q else self.first

    def forget(self, stream: str) -> None:
        """A stream's words go (it ended)."""
        with self._cond:
            self._words.pop(stream, None)
            self._seen.pop(stream, None)
            self._cond.notify_all()

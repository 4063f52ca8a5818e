"""A shard's account of its streams in shared memory, exact at the moment the process dies.

Progress messages reach the supervisor a few times a second; a SIGKILL between two of them would leave it
guessing which frames entered and which were finished. The board closes that gap: the shard's runner writes
each frame's entry and fate into pages the supervisor also maps (a store under a lock the runner already
holds), so after any death the supervisor reads, per stream, how many frames entered, how each one ended,
and which were still in flight, and a restarted process resumes each stream exactly after the last frame
that entered.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..memory import SharedBuffer

FATES = ("out", "dropped", "failed")
WINDOW = 4096  # frames of one stream that can be in flight at once (pools hold far fewer)
_ENTERED, _IN = 0, 1  # columns of the counts; the fates follow


class StreamBoard:
    """Per stream: the index after the last frame that entered, frames in and by fate, and a window of
    in-flight flags, in a memfd. Made by the supervisor (who closes it), handed to the shard process at its
    start (spawn passes the fd)."""

    def __init__(self, streams: list[str], spare: int = 0, _buffer: SharedBuffer | None = None):
        self.streams = list(streams)
        self.rows = n = len(self.streams) + spare  # spare rows: streams added while the shard runs (``bind``)
        size = n * (8 * (2 + len(FATES)) + WINDOW)
        self._buf = _buffer or SharedBuffer(max(size, 1), "memfd")
        buf = self._buf.array((size,))
        self.counts = buf[: n * 8 * (2 + len(FATES))].view(np.int64).reshape(n, 2 + len(FATES))
        self.flags = buf[self.counts.nbytes:].reshape(n, WINDOW)
        self.slot = {s: i for i, s in enumerate(self.streams)}
        # the supervisor's account of added streams removed, their rows freed (``retire``)
        self.retired = np.zeros(2 + len(FATES), np.int64)
        self.retired_in: dict[str, int] = {}
        self.retired_next: dict[str, int] = {}

    def __reduce__(self) -> tuple[Any, ...]:
        from multiprocessing import reduction

        assert self._buf.handle is not None  # a memfd always has its fd
        return (_attach, (self.streams, self.rows - len(self.streams), reduction.DupFd(self._buf.handle),  # type: ignore[attr-defined]
                          self._buf.size))

    def bind(self, stream: str, row: int | None = None) -> int | None:
        """A row for a stream added at run time: the supervisor picks a free one (None: all are held by
        streams added and not removed; the stream goes without, its account then as its progress reports tell),
        the shard binds the row it was told."""
        if row is None:
            used = set(self.slot.values())
            row = next((i for i in range(len(self.streams), self.rows) if i not in used), None)
        if row is not None:
            self.slot[stream] = row
        return row

    def retire(self, stream: str) -> None:
        """The supervisor, once an added stream is removed (every frame of it ended) or was never started: its
        account moves off the board, its row is free for another."""
        i = self.slot.pop(stream, None)
        if i is None or i < len(self.streams):
            return
        row = self.counts[i].copy()
        self.retired += row
        self.retired_in[stream] = self.retired_in.get(stream, 0) + int(row[_IN])
        self.retired_next[stream] = max(self.retired_next.get(stream, 0), int(row[_ENTERED]))
        self.counts[i] = 0
        self.flags[i] = 0

    def close(self) -> None:
        self.counts = self.flags = np.zeros((0, 0), np.int64)  # (views go before the mapping)
        self._buf.close()

    # the runner (under its accounting lock) --------------------------------------------------------------
    def entered(self, stream: str, index: int) -> None:
        i = self.slot.get(stream)
        if i is not None:
            row = self.counts[i]
            row[_IN] += 1
            row[_ENTERED] = max(int(row[_ENTERED]), index + 1)
            self.flags[i, index % WINDOW] = 1

    def ended(self, stream: str, index: int, fate: str) -> None:
        i = self.slot.get(stream)
        if i is not None:
            self.counts[i, 2 + FATES.index(fate)] += 1
            self.flags[i, index % WINDOW] = 0

    # the supervisor, once the shard is gone ---------------------------------------------------------------
    def next_index(self) -> dict[str, int]:
        """Per stream that had frames: the index to resume at."""
        out = dict(self.retired_next)
        for s, i in list(self.slot.items()):
            if self.counts[i, _IN]:
                out[s] = max(out.get(s, 0), int(self.counts[i, _ENTERED]))
        return out

    def totals(self) -> dict[str, int]:
        c = self.counts.sum(axis=0) + self.retired
        return {"in": int(c[_IN]), **{f: int(c[2 + k]) for k, f in enumerate(FATES)}}

    def per_stream(self) -> dict[str, int]:
        """Frames per stream, every one of them ended now (those in flight by the process's death)."""
        out = dict(self.retired_in)
        for s, i in list(self.slot.items()):
            if self.counts[i, _IN]:
                out[s] = out.get(s, 0) + int(self.counts[i, _IN])
        return out

    def account(self, stream: str) -> dict[str, int]:
        """One stream's frames by fate, those in flight by the process's death failed (zeros: not on the
        board)."""
        i = self.slot.get(stream)
        if i is None:
            return {"in": 0, "out": 0, "dropped": 0, "failed": 0}
        row = [int(v) for v in self.counts[i]]
        fates = dict(zip(FATES, row[2:]))
        return {"in": row[_IN], **fates, "failed": row[_IN] - fates["out"] - fates["dropped"]}

    def in_flight(self) -> list[tuple[str, int]]:
        """(stream, index) of the frames that entered and had not ended."""
        out = []
        for s, i in list(self.slot.items()):
            end = int(self.counts[i, _ENTERED])
            for index in range(max(0, end - WINDOW), end):
                if self.flags[i, index % WINDOW]:
                    out.append((s, index))
        return out


def _attach(streams: list[str], spare: int, fd: Any, size: int) -> StreamBoard:
    """In the shard process: the supervisor's board, from the fd spawn passed."""
    return StreamBoard(streams, spare, SharedBuffer(size, "memfd", _fd=fd.detach()))

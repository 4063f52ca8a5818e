"""Copy accounting, per run: every copy of frame or tensor data flowpipe makes is counted on its edge.

Each run has its own ``CopyLedger``; the runner binds it to every thread it starts, so ``copy()`` and
``record()`` called from a node count on that run's current edge, and two graphs running in one process
never mix their counts.
"""
from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np

UNATTRIBUTED = "<unattributed>"


@dataclass
class EdgeMemory:
    frames: int = 0
    copies: int = 0
    bytes_copied: int = 0
    memory: str = "none"


class CopyLedger:
    """Counts frames and copies per edge ("src->dst") for one run."""

    def __init__(self) -> None:
        self.edges: dict[str, EdgeMemory] = defaultdict(EdgeMemory)
        self._local = threading.local()
        self._lock = threading.Lock()

    @contextmanager
    def on_edge(self, edge: str | None) -> Iterator[None]:
        """Copies made inside count on ``edge`` (this thread only)."""
        prev = getattr(self._local, "edge", None)
        self._local.edge = edge
        try:
            yield
        finally:
            self._local.edge = prev

    def record(self, nbytes: int, edge: str | None = None) -> None:
        edge = edge or getattr(self._local, "edge", None) or UNATTRIBUTED
        with self._lock:
            e = self.edges[edge]
            e.copies += 1
            e.bytes_copied += int(nbytes)

    def passed(self, edge: str) -> bool:
        """A frame crossed ``edge``; True while the edge's memory kind is not yet named (``name_memory``)."""
        with self._lock:
            e = self.edges[edge]
            e.frames += 1
            return e.memory == "none"

    def name_memory(self, edge: str, memory: str) -> None:
        with self._lock:
            self.edges[edge].memory = memory


_bound = threading.local()


def bind(ledger: CopyLedger | None) -> None:
    """Make ``ledger`` the one this thread's copies count in (the runner does this for its threads)."""
    _bound.ledger = ledger


def current() -> CopyLedger | None:
    return getattr(_bound, "ledger", None)


def on_edge(edge: str | None) -> Any:
    """Copies made inside count on ``edge`` in this thread's run (nothing when no run is bound)."""
    ledger = current()
    return ledger.on_edge(edge) if ledger is not None else nullcontext()


def record(nbytes: int) -> None:
    """Count a copy made some other way (a driver upload, bytes pickled across a process boundary)."""
    ledger = current()
    if ledger is not None:
        ledger.record(nbytes)


def copy(src: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """The one way flowpipe copies frame or tensor data: the copy is counted on the current edge."""
    if out is None:
        out = np.empty_like(src)
    np.copyto(out, src)
    record(src.nbytes)
    return out

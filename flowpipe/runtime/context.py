"""Per-run state and each node's view of it (the ``RunContext`` protocol of ``flowpipe.node``)."""
from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..accel import Devices
from ..contracts import Allocation, InputContract
from ..frame import Frame
from ..memory import CopyLedger
from .negotiate import Contracts

if TYPE_CHECKING:
    from .runner import Runner


@dataclass(frozen=True)
class Resume:
    """Where a restarted part of a run picks up: after ``generation`` restarts (0: the first start), each
    stream's sources begin at frame ``start[stream]`` (the frames before it entered an earlier process)."""

    generation: int = 0
    start: dict[str, int] = field(default_factory=dict)


@dataclass
class RunState:
    """Everything a run creates and nothing outlives it: the copy ledger, in-memory feeds and collections,
    the resolved memory contracts."""

    ledger: CopyLedger = field(default_factory=CopyLedger)
    feeds: dict[str, list[Any]] = field(default_factory=dict)
    collected: dict[str, list[Frame]] = field(default_factory=dict)
    contracts: Contracts = field(default_factory=Contracts)
    sections: dict[str, dict[str, Any]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


class NodeContext:
    """One node's view of the run: its allocations and inputs, its stats, the device owners."""

    def __init__(self, runner: Runner, node_id: str, devices: Devices, stats: dict[str, Any],
                 wake: Callable[[], None], stop: threading.Event | None = None, like: str | None = None):
        self.node_id = node_id
        self.like = like or node_id  # a stream added at run time: the template whose place it takes
        self._stop = stop
        self.shard = runner.shard
        self.streams = runner.streams
        self.generation = runner.resume.generation
        self.devices = devices
        self.stats = stats
        self.wake = wake
        self._runner = runner
        self._state = runner.state

    @property
    def stopping(self) -> bool:
        return self._runner.stop_event.is_set() or (self._stop is not None and self._stop.is_set())

    def resume_at(self, stream: str) -> int:
        return self._runner.resume.start.get(stream, 0)

    def frames_in_flight(self) -> int:
        return self._runner.frames_in_flight(self.like)

    def allocation(self, port: str) -> Allocation:
        return self._state.contracts.allocations.get((self.like, port)) or Allocation()

    def input(self, port: str) -> InputContract | None:
        return self._state.contracts.inputs.get((self.like, port))

    def section(self, name: str, data: dict[str, Any]) -> None:
        with self._state.lock:
            self._state.sections[name] = data

    def feed(self, name: str) -> list[Any]:
        if name not in self._state.feeds:
            known = ", ".join(sorted(self._state.feeds)) or "none"
            raise KeyError(f"no in-memory feed named {name!r} in this run (feeds: {known})")
        return self._state.feeds[name]

    def collector(self, name: str) -> list[Frame]:
        with self._state.lock:
            return self._state.collected.setdefault(name, [])

    def snapshot(self) -> dict[str, Any]:
        return self._runner.snapshot()

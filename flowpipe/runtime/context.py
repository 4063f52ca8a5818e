"""Per-run state and each node's view of it (the ``RunContext`` protocol of ``flowpipe.node``)."""
from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, get_args

from ..accel import Devices
from ..backedge import BackEdge
from ..contracts import Allocation, InputContract
from ..frame import Frame
from ..graph import NodeSpec
from ..memory import CopyLedger
from ..node import Answer, Node
from .journal import Journal
from .negotiate import Contracts


@dataclass(frozen=True)
class Resume:
    """Where a restarted part of a run picks up: after ``generation`` restarts (0: the first start), each
    stream's sources begin at frame ``start[stream]`` (the frames before it entered an earlier process)."""

    generation: int = 0
    start: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Share:
    """This process's part of a run over several processes or hosts: shard ``index`` of ``count``, the
    streams of the whole run (``None``: this graph's own sources), and where its streams pick up."""

    index: int = 0
    count: int = 1
    streams: int | None = None
    resume: Resume = field(default_factory=Resume)
    alone: bool = True  # no other process or host of the run writes what this one writes (not a shard, a host)


class FateObserver(Protocol):
    """Told each frame's entry and fate as they happen (a shard's board, read after a crash)."""

    def entered(self, stream: str, index: int) -> None: ...

    def ended(self, stream: str, index: int, fate: str) -> None: ...


@dataclass(frozen=True)
class RunHooks:
    """What a caller plugs into a single-process run (a shard of a bigger run, a host of a cluster).

    ``make_node``: a node to put in a graph node's place (the device owner's client), or None for the
    graph's own; ``fates``: told every frame's entry and fate; ``on_opened``: called once every node is
    open, before any frame (False stops the run unstarted: another part of the run failed to open)."""

    make_node: Callable[[NodeSpec], Node | None] | None = None
    fates: FateObserver | None = None
    on_opened: Callable[[], bool] | None = None


@dataclass
class RunState:
    """Everything a run creates and nothing outlives it: the copy ledger, in-memory feeds and collections,
    the resolved memory contracts."""

    ledger: CopyLedger = field(default_factory=CopyLedger)
    feeds: dict[str, list[Any]] = field(default_factory=dict)
    collected: dict[str, list[Frame]] = field(default_factory=dict)
    contracts: Contracts = field(default_factory=Contracts)
    sections: dict[str, dict[str, Any]] = field(default_factory=dict)
    edges: dict[str, BackEdge] = field(default_factory=dict)
    #: what nodes answer the run's observers with (``RunContext.provide``): kind -> node id -> answer
    provided: dict[str, dict[str, Callable[..., Any]]] = field(default_factory=dict)
    #: whether a frame of a stream with an index in (after, upto] is still in flight (the run's account)
    pending: Callable[[str, int, int], bool] | None = None
    #: where the nodes' event records go as they happen (``GraphSpec.journal``), None: nowhere
    journal: Journal | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class NodeContext:
    """One node's view of the run: its allocations and inputs, its stats, the device owners. ``stopping``,
    ``in_flight`` and ``snapshot`` are the run's answers (the runner's, passed in: no reference back)."""

    def __init__(self, node_id: str, state: RunState, devices: Devices, stats: dict[str, Any], share: Share,
                 wake: Callable[[], None], stopping: Callable[[], bool], in_flight: Callable[[str], int],
                 snapshot: Callable[[], dict[str, Any]], like: str | None = None):
        self.node_id = node_id
        self.like = like or node_id  # a stream added at run time: the template whose place it takes
        self.shard = (share.index, share.count)
        self.alone = share.alone
        self.streams = share.streams or 1
        self.serves_processes = 0
        self.generation = share.resume.generation
        self.devices = devices
        self.stats = stats
        self.wake = wake
        self._resume = share.resume
        self._state = state
        self._stopping = stopping
        self._in_flight = in_flight
        self._snapshot = snapshot

    @property
    def stopping(self) -> bool:
        return self._stopping()

    def resume_at(self, stream: str) -> int:
        return self._resume.start.get(stream, 0)

    def frames_in_flight(self) -> int:
        return self._in_flight(self.like)

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

    def back_edge(self, name: str) -> BackEdge:
        with self._state.lock:
            edge = self._state.edges.get(name)
            if edge is None:
                edge = self._state.edges[name] = BackEdge(name, self._state.pending)
            return edge

    def snapshot(self) -> dict[str, Any]:
        return self._snapshot()

    def journal(self, record: dict[str, Any]) -> None:
        if self._state.journal is not None:
            self._state.journal.append(record)

    def provide(self, kind: Answer, answer: Callable[..., Any]) -> None:
        if kind not in get_args(Answer):
            raise ValueError(f"node '{self.node_id}': no observer asks for {kind!r} (one of {get_args(Answer)})")
        with self._state.lock:
            self._state.provided.setdefault(kind, {})[self.node_id] = answer

"""Live control as commands: each call on a running graph's streams is a value that says what one process does
with it, where a run over several processes or hosts sends it, and how the answers make one.

``LiveControl`` is what every run offers (``Executor.live``). In one process (``LiveStreams``) its calls act
on the graph. A run over processes (``ShardedStreams``) or hosts (the cluster's controller, and the service
that reaches it) is ``Forwarding``: each call becomes its command (``Add``, ``Remove``, ``States``, ``Picture``,
``Video``, ``Events``, ``Retune``), which the transport carries unread (in a pipe message, a Ray call) to the
places its ``route`` names; there ``command.apply(live)`` makes the same call on that place's own
``LiveControl`` (a host's may forward again, to its processes), and the places' answers come back as one
through ``command.merge``. What a transport does around a route is its own: where a new stream goes (the
least loaded process or host), what it keeps of the stream there (a shard's board row), a change of configs
taken back where the first place refuses it.
"""
from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from ..graph import NodeSpec

#: a stream's live view: its initialization segment and its fragments after the one asked for, by number
LiveView = tuple[bytes | None, list[tuple[int, bytes]]]


class LiveControl(Protocol):
    """Streams added to and removed from a running graph (``flowpipe serve``)."""

    def template(self, like: str | None) -> NodeSpec:
        """The source a new stream copies: ``like``, else the graph's only template or source."""

    def add(self, stream: str, like: str | None = None, config: dict[str, Any] | None = None) -> object:
        """Start stream ``stream`` as a copy of source ``like`` with ``config`` over its settings."""

    def remove(self, stream: str, timeout: float = 30.0) -> dict[str, Any]:
        """Stop a stream added before, once its frames have their fates; its account."""

    def states(self) -> list[dict[str, Any]]:
        """Every stream now, with its account so far."""

    def picture(self, stream: str) -> bytes | None:
        """The stream's newest picture, where the graph keeps them."""

    def video(self, stream: str, seq: int) -> LiveView | None:
        """The stream's live view (fragmented MP4) after fragment ``seq``, where the graph makes one."""

    def events(self) -> list[dict[str, Any]]:
        """The newest events the graph's analytics raised, oldest first."""

    def retune(self, changes: dict[str, dict[str, Any]]) -> None:
        """Nodes' configs changed while the graph runs (node id -> {field: value}, tunable fields only), in
        every process and host of the run, and in those that replace one later."""


class Route(enum.Enum):
    """Where a run over several processes or hosts (its places) sends a command."""

    NEW = "new"  # the place a stream not yet running goes to; it holds the stream from then on
    ADDED = "added"  # the place the stream was added to, which holds it no more after
    HOLDER = "holder"  # the place running the stream, one of the graph's own or one added
    EACH = "each"  # every place running
    ALL = "all"  # every place, as one change of the run's graph (and of the places started later)


@dataclass(frozen=True)
class Answer:
    """One place's answer to a command, and where it came from (``{"shard": 1}``, ``{"host": ADDRESS}``)."""

    value: Any
    where: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Command(ABC):
    """A call on a running graph's streams, as it crosses to the places that answer it."""

    route: ClassVar[Route]

    @property
    def verb(self) -> str:
        """The call's name (``LiveControl``'s), as a caller's messages name it."""
        return type(self).__name__.lower()

    @property
    def wait_s(self) -> float:
        """How long a caller waits for one place's answer."""
        return 60.0

    @abstractmethod
    def apply(self, live: LiveControl) -> Any:
        """The call on one place's streams; its answer (a value that crosses processes)."""

    def merge(self, answers: list[Answer]) -> Any:
        """The run's answer from those of the places the command reached: by default the one place's, None
        where none was reached."""
        return answers[0].value if answers else None

    def freed(self, answer: Any) -> str | None:
        """The stream whose place is free again after ``answer`` (its row of a shard's board), if any."""
        return None


@dataclass(frozen=True)
class OnStream(Command):
    """A command about one stream, which goes to one place."""

    stream: str


@dataclass(frozen=True)
class Add(OnStream):
    """Start stream ``stream`` as a copy of source ``like`` with ``config`` over its settings."""

    route: ClassVar[Route] = Route.NEW
    like: str | None = None
    config: dict[str, Any] | None = None

    def apply(self, live: LiveControl) -> None:
        live.add(self.stream, self.like, self.config)  # (one process's record of it stays there)


@dataclass(frozen=True)
class Remove(OnStream):
    """Stop stream ``stream``, added before, once its frames have their fates; its account, which names the
    process and host it ran in."""

    route: ClassVar[Route] = Route.ADDED
    timeout: float = 30.0

    @property
    def wait_s(self) -> float:
        return self.timeout + 10

    def apply(self, live: LiveControl) -> dict[str, Any]:
        return live.remove(self.stream, self.timeout)

    def merge(self, answers: list[Answer]) -> dict[str, Any]:
        if not answers:
            raise KeyError(f"no stream named {self.stream!r} was added to this graph")
        return dict(answers[0].value, **answers[0].where)

    def freed(self, answer: Any) -> str | None:
        return None if answer.get("in_flight") else self.stream  # every frame of it ended: its account is done


@dataclass(frozen=True)
class States(Command):
    """Every stream now, with its account so far; each row names the process and host it runs in."""

    route: ClassVar[Route] = Route.EACH

    def apply(self, live: LiveControl) -> list[dict[str, Any]]:
        return live.states()

    def merge(self, answers: list[Answer]) -> list[dict[str, Any]]:
        return [dict(row, **a.where) for a in answers for row in a.value]


@dataclass(frozen=True)
class Picture(OnStream):
    """The stream's newest picture, from the place running it (None: none yet, or no such stream)."""

    route: ClassVar[Route] = Route.HOLDER

    def apply(self, live: LiveControl) -> bytes | None:
        return live.picture(self.stream)


@dataclass(frozen=True)
class Video(OnStream):
    """The stream's live view after fragment ``seq``, from the place running it (None: no live view)."""

    route: ClassVar[Route] = Route.HOLDER
    seq: int = -1

    def apply(self, live: LiveControl) -> LiveView | None:
        return live.video(self.stream, self.seq)


@dataclass(frozen=True)
class Events(Command):
    """The newest events of every place, oldest first. Each names the host that raised it (its snapshot and
    clip are files there), not the process: a host's processes share its files."""

    route: ClassVar[Route] = Route.EACH

    def apply(self, live: LiveControl) -> list[dict[str, Any]]:
        return live.events()

    def merge(self, answers: list[Answer]) -> list[dict[str, Any]]:
        got = [dict(e, **{k: v for k, v in a.where.items() if k == "host"}) for a in answers for e in a.value]
        return sorted(got, key=lambda e: e.get("at", 0.0))


@dataclass(frozen=True)
class Retune(Command):
    """Nodes' configs changed while the graph runs (node id -> {field: value}), in every place; a transport
    takes the change back where the first place refuses it, and gives it to the places it starts later."""

    route: ClassVar[Route] = Route.ALL
    changes: dict[str, dict[str, Any]]

    def apply(self, live: LiveControl) -> None:
        live.retune(self.changes)


class Forwarding(ABC):
    """``LiveControl`` over a transport: each call is its command, handed to ``forward`` (``template`` is the
    transport's own: the graph it holds answers it)."""

    @abstractmethod
    def forward(self, command: Command) -> Any:
        """``command`` carried to the places that answer it; the run's answer."""

    def add(self, stream: str, like: str | None = None, config: dict[str, Any] | None = None) -> None:
        self.forward(Add(stream, like, config))

    def remove(self, stream: str, timeout: float = 30.0) -> dict[str, Any]:
        return self.forward(Remove(stream, timeout))  # type: ignore[no-any-return]

    def states(self) -> list[dict[str, Any]]:
        return self.forward(States())  # type: ignore[no-any-return]

    def picture(self, stream: str) -> bytes | None:
        return self.forward(Picture(stream))  # type: ignore[no-any-return]

    def video(self, stream: str, seq: int) -> LiveView | None:
        return self.forward(Video(stream, seq))  # type: ignore[no-any-return]

    def events(self) -> list[dict[str, Any]]:
        return self.forward(Events())  # type: ignore[no-any-return]

    def retune(self, changes: dict[str, dict[str, Any]]) -> None:
        self.forward(Retune(changes))


class Routing(Forwarding):
    """A transport that sends each command to its places itself, by its route: one method per route, each
    knowing the places (processes, hosts) and not the commands."""

    def forward(self, command: Command) -> Any:
        match command:
            case Retune():
                return self.to_all(command)
            case Add():
                return self.to_new(command)
            case OnStream() if command.route is Route.ADDED:
                return self.to_added(command)
            case OnStream():
                return self.to_holder(command)
            case _:
                return self.to_each(command)

    @abstractmethod
    def to_new(self, command: Add) -> Any:
        """``command`` at the place chosen for its new stream, which holds the stream from then on."""

    @abstractmethod
    def to_added(self, command: OnStream) -> Any:
        """``command`` at the place its stream was added to (none: ``command.merge([])``)."""

    @abstractmethod
    def to_holder(self, command: OnStream) -> Any:
        """``command`` at the place running its stream (none: ``command.merge([])``)."""

    @abstractmethod
    def to_each(self, command: Command) -> Any:
        """``command`` at every place running, their answers merged."""

    @abstractmethod
    def to_all(self, command: Retune) -> Any:
        """``command`` at every place, as one change: where the first place refuses it, none keeps it."""


__all__ = ["Add", "Answer", "Command", "Events", "Forwarding", "LiveControl", "LiveView", "OnStream", "Picture",
           "Remove", "Retune", "Route", "Routing", "States", "Video"]

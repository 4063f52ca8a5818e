"""Every message that crosses a process boundary of a run, as a frozen dataclass, grouped by protocol.

Receivers dispatch on the type (``match msg: case FrameIn(...)``). On the wire a message is its tag (its
place in ``_KINDS``) and its field values in order: no field names, and one reference to ``_rebuild`` per
pickle however many messages nest in it (a class per message would cost its lookup on both sides, each
frame). An exception raised on the other side crosses as a ``RemoteError`` value; the receiver turns it
into the exception it raises (``RemoteError.exception``), worded as before.

Protocols:

- worker: the runner's ``ProcessNode`` and its worker process (``isolation: process``, runtime/process.py),
  over a Unix socket, buffer fds beside the messages (runtime/wire.py);
- device owner, control: the supervisor's ``OwnerProcess`` and the owner process, over a pipe;
- device owner, per shard: a shard's ``OwnerClient`` and the owner, over the owner's Unix socket;
- arrays: inside frames of both socket protocols, an array is a reference to a shared buffer or a value.

Every message is a ``@dataclass(frozen=True, slots=True)`` subclass of ``Message``.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any, ClassVar, cast

from .commands import Command

_KINDS: list[type[Message]] = []  # a message's tag on the wire is its place here


def _rebuild(tag: int, values: tuple[Any, ...]) -> Message:
    return _KINDS[tag](*values)


def _one(name: str) -> Callable[[Message], tuple[Any, ...]]:
    get = attrgetter(name)
    return lambda m: (get(m),)


def _none(m: Message) -> tuple[Any, ...]:
    return ()


class Message:
    """Base of every message: pickles as ``_rebuild(tag, field values)``."""

    __slots__: tuple[str, ...] = ()
    _tag: ClassVar[int]
    _values: ClassVar[Callable[[Message], tuple[Any, ...]]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__slots__" not in cls.__dict__:  # the class as written; ``dataclass(slots=True)`` makes the one used
            return
        names = tuple(f.name for f in fields(cast(Any, cls)))  # a subclass's slots are only its own fields
        cls._tag = len(_KINDS)
        _KINDS.append(cls)
        cls._values = attrgetter(*names) if len(names) > 1 else _one(names[0]) if names else _none

    def __reduce__(self) -> tuple[Callable[..., Message], tuple[int, tuple[Any, ...]]]:
        cls = type(self)
        return _rebuild, (cls._tag, cls._values(self))


# -- errors ------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class RemoteError(Message):
    """An exception from another process: its type's name (empty for a plain text), its text, and, where
    the sender names the place itself, where it was raised (shown in parentheses after the text)."""

    kind: str
    message: str
    where: str = ""

    @classmethod
    def of(cls, error: BaseException | str, where: str = "") -> RemoteError:
        if isinstance(error, BaseException):
            return cls(type(error).__name__, str(error), where)
        return cls("", str(error), where)

    def __str__(self) -> str:
        text = f"{self.kind}: {self.message}" if self.kind else self.message
        return f"{text} ({self.where})" if self.where else text

    def exception(self, context: str = "") -> RuntimeError:
        """What the receiver raises: ``context`` (its own words for where) then the remote text."""
        return RuntimeError(f"{context}{self}")


# -- arrays inside frames ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class BufferRef(Message):
    """An array in a shared buffer both sides have mapped (``bid``: the sender's id for the buffer, whose fd
    crossed once): where it starts in the buffer and how to view it."""

    bid: int
    offset: int
    shape: tuple[int, ...]
    dtype: str
    strides: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ObjectRef(Message):
    """A value that crosses pickled (an array outside shared memory: a copy, counted as one)."""

    value: Any


ArrayRef = BufferRef | ObjectRef


# -- worker protocol (runtime/process.py) ----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class FrameHeader(Message):
    """A frame without its pixels and tensors' memory: ``data`` and ``tensors`` are references. The frame
    that goes to the worker and the one that comes back are headers with a field or two more (one message
    each way, not two)."""

    stream: str
    index: int
    pts: Any
    format: str
    meta: dict[str, Any]
    detections: list[Any]
    layout: Any  # how a preprocess laid the picture into the tensor (frame.TensorLayout), or None
    skipped: str | None  # frame.skipped: the preprocess whose detector interval passed over the frame
    data: ArrayRef | None
    tensors: dict[str, ArrayRef]


@dataclass(frozen=True, slots=True)
class WorkerReady(Message):
    """Worker to parent: the node opened; frames may come."""


@dataclass(frozen=True, slots=True)
class WorkerOpenFailed(Message):
    """Worker to parent: the node's ``open`` raised; the worker exits."""

    error: RemoteError


@dataclass(frozen=True, slots=True)
class FrameIn(FrameHeader):
    """Parent to worker: a frame for ``port``. ``new_ids``: buffers the worker has not seen, whose fds ride
    along with this message, in order."""

    port: str
    new_ids: list[int]


@dataclass(frozen=True, slots=True)
class FrameOut(FrameHeader):
    """Worker to parent: ``process`` returned one frame (this header). ``copies``: the arrays that crossed
    by value on the worker's side, as (count, bytes)."""

    copies: tuple[int, int]


@dataclass(frozen=True, slots=True)
class FramesOut(Message):
    """Worker to parent: ``process`` returned nothing, a list of frames, or frames per output port;
    ``copies`` as in ``FrameOut``."""

    result: list[FrameHeader] | dict[str, list[FrameHeader]] | None
    copies: tuple[int, int]


@dataclass(frozen=True, slots=True)
class FrameFailed(Message):
    """Worker to parent: ``process`` raised for the frame just sent."""

    error: RemoteError


@dataclass(frozen=True, slots=True)
class Close(Message):
    """The receiver closes (parent to worker; supervisor to device owner)."""


@dataclass(frozen=True, slots=True)
class Closed(Message):
    """Worker to parent: the node closed; its stats."""

    stats: dict[str, Any]


# -- device owner, control pipe (runtime/owner/process.py, server.py) -------------------------------------------
@dataclass(frozen=True, slots=True)
class OwnerListening(Message):
    """Owner to supervisor: serving at the socket; each owned node's input placement."""

    pid: int
    placements: dict[str, str]


@dataclass(frozen=True, slots=True)
class OwnerTakeOver(Message):
    """Supervisor to the standby device owner: the owner died; open the nodes and serve at the socket."""


@dataclass(frozen=True, slots=True)
class OwnerCrashed(Message):
    """Owner to supervisor: it could not start."""

    error: RemoteError


@dataclass(frozen=True, slots=True)
class StatsWanted(Message):
    """Supervisor to owner: send ``OwnerStats`` now."""


@dataclass(frozen=True, slots=True)
class OwnerStats(Message):
    """Owner to supervisor: its account so far (pid, per node frames/failed/busy, ``--stats`` sections)."""

    stats: dict[str, Any]


@dataclass(frozen=True, slots=True)
class OwnerClosed(Message):
    """Owner to supervisor, after ``Close``: the owned nodes closed; its final account."""

    stats: dict[str, Any]


# -- device owner, per-shard socket (runtime/owner/client.py, server.py) -----------------------------------------
@dataclass(frozen=True, slots=True)
class OwnerHello(Message):
    """Shard to owner: open ``node_id`` for this shard, whose input is ``offer``; ``shards``: how many
    processes feed the owner (what it may hold at once of them all)."""

    node_id: str
    offer: Any
    in_flight: int
    shards: int = 1


@dataclass(frozen=True, slots=True)
class OwnerReady(Message):
    """Owner to shard: the node is open. ``outputs``: (name, shape, dtype) of the buffers the shard provides;
    ``at_once``: frames the node's requests take at once; ``meta``: what it adds to each frame's metadata;
    ``sections``: its ``--stats`` sections."""

    outputs: list[tuple[str, Any, str]]
    pid: int
    at_once: int
    meta: dict[str, Any]
    sections: dict[str, dict[str, Any]]


@dataclass(frozen=True, slots=True)
class OwnerOpenFailed(Message):
    """Owner to shard: the node could not be opened for this shard."""

    error: RemoteError


@dataclass(frozen=True, slots=True)
class OwnerBuffers(Message):
    """Shard to owner, ahead of a frame: (bid, kind) of buffers the owner has not seen, whose fds ride along
    (at most ``wire.MAX_FDS`` a message). A shard shows a pool's buffers all at once, when the first of them
    crosses, so what the owner maps is each pool's size from then on, not what deeper queues reach later.
    ``gone``: as ``OwnerFrame``'s, unmapped first."""

    new: list[tuple[int, str]]
    gone: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class OwnerFrame(Message):
    """Shard to owner: frame ``key`` (the shard's count) for ``node_id``. ``new``: (bid, kind) of buffers
    the owner has not seen, whose fds ride along, in order; ``bids``: every buffer the frame's arrays live
    in; ``meta``: only what the node reads of the frame's metadata; ``picture``: the input is the frame's
    picture in this pixel format (the owner writes the node's tensor from it), None: the tensor itself;
    ``gone``: buffers the shard let go since its last frame (a stream's pool closed), which the owner unmaps
    before it maps ``new`` (a new buffer may take a gone one's id)."""

    node_id: str
    key: int
    new: list[tuple[int, str]]
    stream: str
    index: int
    pts: Any
    meta: dict[str, Any]
    layout: Any  # with an up_to tensor: how many entries the frame filled (frame.TensorLayout without places)
    bids: list[int]
    input: ArrayRef
    outputs: list[ArrayRef]
    picture: str | None = None
    gone: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class OwnerDone(Message):
    """Owner to shard: these frames' results are in the shard's output buffers; ``shapes``: per key, the
    shapes of its outputs where a dynamic dimension came out smaller than their buffers (only that part
    holds this frame's results)."""

    node_id: str
    keys: list[int]
    shapes: dict[int, list[tuple[int, ...]]]


@dataclass(frozen=True, slots=True)
class OwnerFailed(Message):
    """Owner to shard: a request failed and took these frames."""

    node_id: str
    keys: list[int]
    error: RemoteError


@dataclass(frozen=True, slots=True)
class Bye(Message):
    """Shard to owner: this shard's client is closing; the owner forgets it."""


ToWorker = FrameIn | Close
FromWorker = WorkerReady | WorkerOpenFailed | FrameOut | FramesOut | FrameFailed | Closed
ToOwner = Close | StatsWanted
FromOwner = OwnerListening | OwnerCrashed | OwnerStats | OwnerClosed
ShardToOwner = OwnerHello | OwnerBuffers | OwnerFrame | Bye
OwnerToShard = OwnerReady | OwnerOpenFailed | OwnerDone | OwnerFailed


# -- supervisor and shards (runtime/shards.py), over a pipe -----------------------------------------------------
@dataclass(frozen=True, slots=True)
class ShardOpened(Message):
    """Shard to supervisor: every node is open; it waits for ``Begin``."""

    pid: int


@dataclass(frozen=True, slots=True)
class Begin(Message):
    """Supervisor to shard, once every shard opened: start (``start``), or close unstarted (another part of
    the run failed to open, or the run was stopped meanwhile); ``retune``: node configs changed since the
    graph it was started from was written (a replacement spawned while the run was being retuned)."""

    start: bool
    retune: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Halt(Message):
    """Supervisor to shard: drain (sources stop, frames in flight finish), or with ``now`` stop at once."""

    now: bool


@dataclass(frozen=True, slots=True)
class ShardProgress(Message):
    """Shard to supervisor, a few times a second: frames by fate, frames accounted per stream, and the sources'
    own stats as they stand (a camera's outages and reconnects): what is kept of a shard that dies."""

    frames: dict[str, int]
    streams: dict[str, int]
    sources: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ShardResult(Message):
    """Shard to supervisor: its part of the run ended; what it did (``RunResult.to_json()``, with the
    frames' completion times where the run records them)."""

    summary: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ShardCrashed(Message):
    """Shard to supervisor: what ended it, where its runner could not return a result."""

    error: RemoteError


@dataclass(frozen=True, slots=True)
class StreamCall(Message):
    """Supervisor to shard: a command on the shard's running graph's streams (``runtime/commands.py``, applied
    to its ``LiveControl``), answered by a ``StreamReply`` with the same ``rid``. ``bind``: (stream, row), the
    row of the shard's board that a stream the command starts takes (its frames' entries and fates there)."""

    rid: int
    command: Command
    bind: tuple[str, int] | None = None


@dataclass(frozen=True, slots=True)
class StreamReply(Message):
    """Shard to supervisor: a call's value, or the error it raised (``error.kind`` names the exception type:
    the caller raises the same, ``StreamReply.raised``)."""

    rid: int
    value: Any = None
    error: RemoteError | None = None

    def raised(self) -> Exception:
        """The exception the caller raises: KeyError (no such stream), ValueError (a bad request), else
        RuntimeError, with the shard's words."""
        assert self.error is not None
        kind = {"KeyError": KeyError, "ValueError": ValueError}.get(self.error.kind, RuntimeError)
        return kind(self.error.message)


ToShard = Begin | Halt | StreamCall
FromShard = ShardOpened | ShardProgress | ShardResult | ShardCrashed | StreamReply

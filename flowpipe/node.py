"""The node API: typed ports, a pydantic config schema, open/process/close, and the registry.

A node is a class registered under a type name::

    @register("passthrough")
    class Passthrough(Node):
        '''Forwards frames unchanged.

        YAML:
            - id: p
              type: passthrough
              inputs: {in: src.out}
        '''
        inputs = {"in": "frame"}
        outputs = {"out": "frame"}

        def process(self, frame, port):
            return frame

Port kinds describe what a packet carries: ``frame`` (an image), ``tensor`` (a model input tensor),
``tensors`` (raw model outputs), ``detections`` (decoded objects). Every packet is a ``Frame`` that keeps
its image, so any output may feed an input of kind ``frame``; ``any`` accepts everything.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol

from pydantic import BaseModel, ConfigDict

from .accel import Devices
from .backedge import BackEdge
from .contracts import Allocation, InputContract, ModelInput, Offer, Request, TensorSpec
from .frame import Frame

PORT_KINDS = ("frame", "tensor", "tensors", "detections", "any")
#: What a node may answer a running graph's observers with (``RunContext.provide``).
Answer = Literal["picture", "video", "events"]


class RunContext(Protocol):
    """What a node gets in ``open``: its view of the run (one per node; per run, never process-wide)."""

    node_id: str
    devices: Devices  # the device owners of this process (OpenVINO Core, OpenCL contexts)
    shard: tuple[int, int]  # (index, count): this process's share of the run's streams; (0, 1) unsharded
    alone: bool  # this process is the whole run: no other process or host writes what it writes
    streams: int  # streams in the whole run (every process): what shares of the machine are sized by
    generation: int  # 0; n when this part of the run restarted n times (outputs go to new files)
    #: a device owner: the shard processes it serves, whose decoders and encoders share the cores with its
    #: nodes' threads; 0 elsewhere
    serves_processes: int
    stats: dict[str, Any]  # this node's block of ``--stats``

    @property
    def stopping(self) -> bool: ...

    def wake(self) -> None:
        """Make the runner call ``node.poll()`` soon (thread-safe; for async completions)."""

    def resume_at(self, stream: str) -> int:
        """The first frame index of ``stream`` this run emits (0 unless it resumes a stream after a restart:
        a source that can seek starts there; the runner discards earlier frames of the others)."""

    def frames_in_flight(self) -> int:
        """How many frames can be in flight downstream of this node: the size its pools need."""

    def allocation(self, port: str) -> Allocation:
        """Where what this node writes on output ``port`` must live (resolved before any open)."""

    def input(self, port: str) -> InputContract | None:
        """The offer and allocation on input ``port`` (None for an unconnected port)."""

    def section(self, name: str, data: dict[str, Any]) -> None:
        """A top-level block of ``--stats`` (e.g. ``inference.<id>``)."""

    def feed(self, name: str) -> list[Any]:
        """An in-memory feed this run was given (``Runner(feeds=...)``)."""

    def collector(self, name: str) -> list[Frame]:
        """An in-memory collection of this run (``RunResult.collected[name]``)."""

    def back_edge(self, name: str) -> BackEdge:
        """The back edge named ``name`` (a node's id) of this run in this process: a later node's word to an
        earlier one, which the graph's edges cannot carry back (a tracker tells the detector's interval which
        streams have tracks still young), said per stream as of each frame and read for a defined frame
        (``BackEdge.read``: the reader of frame t reads the word as of frame t - delay, waiting for it), so that
        what the earlier node decides is a function of the input, not of how far the later one had got. The
        writer opens it (``BackEdge.open``); another process of the run has its own, with no writer."""

    def snapshot(self) -> dict[str, Any]:
        """This run's statistics so far: frames by fate, per node counts (for metrics endpoints)."""

    def journal(self, record: dict[str, Any]) -> None:
        """Append an event record the node raised, or one it changed (a clip named in it), to the run's event
        journal as it happens (``GraphSpec.journal``: where a server indexes events from; nowhere without one).
        A record is identified by its ``stream``, ``id``, ``state``, ``frame`` and ``at``: a later one of the
        same identity is its newer version."""

    def provide(self, kind: Answer, answer: Callable[..., Any]) -> None:
        """Offer the run's observers (``flowpipe serve``'s console) an answer of ``kind``: ``picture``
        (stream -> its newest picture, JPEG bytes or None), ``video`` ((stream, seq) -> the stream's live
        fragmented MP4 after fragment ``seq``: its initialization segment and fragments) or ``events``
        (() -> the newest events' records, oldest first). Called in ``open``; it holds while the node runs."""


def setting(config: Any, key: str) -> Any:
    """A config's field ``key`` (``a.b``: field b of field a; None where a is None)."""
    for part in key.split("."):
        if config is None:
            return None
        config = getattr(config, part, None)
    return config


def set_setting(config: Any, key: str, value: Any) -> None:
    *path, last = key.split(".")
    for part in path:
        config = getattr(config, part)
    setattr(config, last, value)


class NodeConfig(BaseModel):
    """Base for node config schemas: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")


#: Every pixel format a frame may carry (``Frame.format``).
PIXELS_ALL: frozenset[str] = frozenset({"BGR", "RGB", "GRAY", "NV12", "I420"})
#: What a node that does not say takes: BGR only (a plugin written against ``frame.image`` as BGR).
PIXELS_BGR: frozenset[str] = frozenset({"BGR"})


def default_pixels(inputs: Mapping[str, str]) -> frozenset[str]:
    """What a node that does not say takes: BGR where it gets pictures (an input of kind ``frame`` or ``any``,
    a plugin written against ``frame.image`` as BGR); every format where it gets only tensors or detections,
    whose pixels it never reads."""
    return PIXELS_BGR if any(kind in ("frame", "any") for kind in inputs.values()) else PIXELS_ALL


@dataclass(frozen=True)
class Resource:
    """What a node, as configured, will load, open, write or listen on, in a few words (``flowpipe validate``
    shows it). ``reads``: a path on this host it reads, named by its config field ``field``: a run refuses
    to start before any node opens where it is not there, and validate says so (the graph may be meant for
    another host). Give ``reads`` only for a local path: a registry name, a URL or a camera is no file."""

    what: str
    reads: str | None = None
    field: str = ""

    def missing(self) -> str | None:
        """What is not on this host, in a few words naming the config field; None when it is there."""
        if self.reads is None:
            return None
        path = Path(os.path.expanduser(self.reads))
        if path.exists():
            return None
        return (f"{self.field}: no such file or folder: {self.reads}"  # relative: the command's folder's
                + ("" if path.is_absolute() else f" (looked for {path.resolve()})"))


@dataclass(frozen=True)
class NodeContract:
    """What a node, as configured, tells the validator and the runner before anything opens, as MediaPipe's
    ``UpdateContract(options)``: computed once from its config (``Node.contract``), in one place.

    ``pixels``: the pixel formats ``process`` takes (``PIXELS_ALL``: it never reads the pixels; a source
    with ``format: auto`` decodes into a format every node after it takes). ``holds_frames``: it keeps
    frames past ``process`` and emits them later (``poll``/``flush``). ``writes_input``: ``process`` writes
    the input picture in place (the engine copies on write when the frame is shared). ``one_worker``: why
    it runs on one worker (None: ``workers: N`` may run it for several streams at once: it keeps no state
    shared across streams, or guards it). ``forwards``: output port -> input port for packets passed on
    untouched (memory contracts flow through). ``isolation``/``sharding``: why it cannot run with
    ``isolation: process`` / in a run over several processes (None: it can). ``serves_streams``: one
    instance serves every stream of a run (over several processes it runs once, in the device owner).
    ``live``: a source whose frames come in real time (a camera, a network stream): what it sends while
    nobody reads it is gone. ``files``: config fields that name what it writes, by kind: ``records`` (JSON
    Lines, one record per frame), ``video`` (recordings), ``folder`` (a folder of files it writes: event
    snapshots, event clips), ``state`` (a folder a stream's next run reads back: what it left undelivered),
    ``model_cache`` (a folder of compiled models, where a host may set its own): a service confines them to
    its output folder (``state`` to one per template and parameters, which the instances so started share),
    a cluster reads records back. A field inside another is named with a dot (``clips.path``):
    ``setting``/``set_setting`` reach it.
    ``final_picture``: what it gets on its ``frame`` input is the graph's finished picture (a recording, a
    preview), which a console shows too. ``owner_side``: over several processes, where the device owner
    serves the one node it feeds, it may run in the owner ahead of that node, its frames crossing instead
    of what it writes: ``device`` where that node's input is device memory, which cannot cross processes
    (OpenCL buffers on a GPU); ``always``; None: never. ``refers``: config fields that name another node of
    the graph (field -> node id), which validation finds there. ``resources``: what it will load, open, write or
    listen on (``Resource``), and the files it reads, which a run checks before any node opens. ``tunable``: config
    fields a running graph may change (``flowpipe serve``'s parameters): ``Node.retune`` takes them between frames;
    every other field is fixed while it runs. ``stream_keyed``: config fields keyed by stream id (a camera's own
    settings); where a run's streams are its sources (``flowpipe run``), validation finds each key among them.
    ``whole_stream``: why it holds every frame of a stream until the stream ends (a recording read whole):
    validation refuses it after a live source, whose stream never ends. ``tensors``: output port -> the tensor
    it writes there as far as its config says (-1: a height or width known only as it runs), and ``takes``:
    input port -> the model input it runs what it gets there through (``ModelInput``); validation holds the
    one against the other, as the consumer does when it opens."""

    inputs: Mapping[str, str] = field(default_factory=dict)
    outputs: Mapping[str, str] = field(default_factory=dict)
    pixels: frozenset[str] = PIXELS_BGR
    holds_frames: bool = False
    writes_input: bool = False
    one_worker: str | None = "it keeps state across streams and runs on one worker"
    forwards: Mapping[str, str] = field(default_factory=dict)
    isolation: str | None = None
    sharding: str | None = None
    serves_streams: bool = False
    live: bool = False
    files: Mapping[str, str] = field(default_factory=dict)
    final_picture: bool = False
    owner_side: Literal["device", "always"] | None = None
    refers: Mapping[str, str] = field(default_factory=dict)
    tunable: frozenset[str] = frozenset()
    stream_keyed: frozenset[str] = frozenset()
    whole_stream: str | None = None
    resources: tuple[Resource, ...] = field(default=(), compare=False)  # what it opens, said: not a trait
    tensors: Mapping[str, TensorSpec] = field(default_factory=dict)
    takes: Mapping[str, ModelInput] = field(default_factory=dict, compare=False)  # may read the cache: said

    def missing(self) -> str | None:
        """The first of its files that is not on this host (``Resource.missing``), or None."""
        return next((why for r in self.resources if (why := r.missing()) is not None), None)

    @property
    def retunable(self) -> frozenset[str]:
        """The fields a running graph may change: the tunable ones, never one naming a file it writes."""
        return self.tunable - set(self.files)

    @property
    def isolation_refused(self) -> str | None:
        """Why the node cannot run in a worker process: its own reason, or that it holds frames (its pool of
        asynchronous requests, its lookahead) past ``process``."""
        if self.isolation is None and self.holds_frames:
            return "it holds frames past process() (asynchronous requests)"
        return self.isolation


class Node:
    """Base class of every stage: what every node needs, and nothing more (eight calls). Subclasses declare
    ``inputs``/``outputs``, a ``Config`` and, where they differ from the defaults, their ``contract``; they
    implement ``process`` and, where they hold resources, ``open``/``close``.

    What only some nodes need comes with a mixin: ``AsyncNode`` for a node that holds frames past
    ``process`` (asynchronous requests, a lookahead) and gives them back through ``poll``; ``Negotiating``
    for a node that says what memory it writes and asks for (``offer``/``request``). ``Source``, ``Sink``
    and the decoders' base are the node kinds with a shape of their own.
    """

    type_name: ClassVar[str] = ""
    inputs: ClassVar[dict[str, str]] = {}
    outputs: ClassVar[dict[str, str]] = {}
    Config: ClassVar[type[NodeConfig]] = NodeConfig

    def __init__(self, node_id: str, config: NodeConfig | None = None):
        self.id = node_id
        self.config = config if config is not None else self.Config()
        #: what this instance declares (a stand-in for a node in another process declares the contract of
        #: what it stands in for)
        self.declared: NodeContract = type(self).contract(self.config)
        if self.declared.holds_frames and not isinstance(self, AsyncNode):
            raise TypeError(f"{type(self).__module__}.{type(self).__qualname__}: its contract holds frames "
                            "(holds_frames=True), which a node gives back through poll(): inherit "
                            "flowpipe.AsyncNode (class X(AsyncNode, Node))")

    @classmethod
    def contract(cls, config: NodeConfig) -> NodeContract:
        """What a node of this type with ``config`` declares (override where it differs from the defaults:
        ``cls.declare(...)`` fills in the ports and the defaults)."""
        return cls.declare()

    @classmethod
    def declare(cls, **traits: Any) -> NodeContract:
        """This type's contract: its ports, the pixels its inputs imply (``default_pixels``), one worker
        unless it says otherwise, and ``traits`` over them."""
        base: dict[str, Any] = {"inputs": dict(cls.inputs), "outputs": dict(cls.outputs),
                                "pixels": default_pixels(cls.inputs),
                                "one_worker": f"{cls.type_name or cls.__name__} keeps state across streams and "
                                              "runs on one worker"}
        return NodeContract(**{**base, **traits})

    def open(self, ctx: RunContext) -> None:
        """Acquire resources (files, devices). ``ctx`` is this node's view of the run."""

    def process(self, frame: Frame, port: str) -> Any:
        """Handle one packet. Return None, a Frame, a list of Frames, or {port: Frame | [Frame]}."""
        raise NotImplementedError

    def flush(self) -> Any:
        """End of stream on every input: return what is still held (same forms as ``process``)."""
        return None

    def end_stream(self, stream: str) -> None:
        """A stream removed from a running graph: every frame of it is accounted; close what belongs to it
        (its file, its tracks). Called from another thread than ``process``, never for a stream whose
        frames are still in flight."""

    def retune(self, config: NodeConfig) -> None:
        """A running graph's new config for this node, differing from the old in ``contract.tunable`` fields
        only. Called from another thread than ``process``: the default puts it in place whole, for the next
        frame (``process`` reads ``self.config`` once a frame); a node that derives state from those fields
        overrides it."""
        self.config = config

    def close(self) -> None:
        """Release resources. Called once for every node whose ``open`` succeeded."""


class AsyncNode:
    """Mixin of a node that holds frames past ``process`` and gives them back later (asynchronous inference
    requests, a tracker's lookahead): ``class Detector(AsyncNode, Node)``, with ``holds_frames=True`` in its
    contract. The runner polls it when it is woken (``RunContext.wake``) and after each frame."""

    #: Frames the node holds past ``process`` at most: pools upstream are sized for them.
    max_held: int = 0

    def poll(self) -> Any:
        """What is ready now, without blocking (same forms as ``Node.process``)."""
        return None

    def stream_stopping(self, stream: str) -> None:
        """A stream being removed from a running graph: its source has stopped, no frame of it comes after
        those on their way. Frames held for one to come are let go (the node is polled next). Called from
        another thread than ``process``, before the stream's frames are all accounted."""


class Negotiating:
    """Mixin of a node that takes part in memory negotiation beyond the default (a preprocess that writes
    device memory, an inference node that asks for it, a source that knows its picture size): what it
    writes on each output, and what it asks of the memory on each input. Both are answered before any node
    opens; consumers resolve first."""

    def offer(self, port: str, inputs: Mapping[str, Offer], devices: Devices) -> Offer:
        """What this node writes on output ``port``, given what its inputs offer."""
        return default_offer(getattr(self, "id", ""), port, inputs)

    def request(self, port: str, offer: Offer, outputs: Mapping[str, Allocation], devices: Devices) -> Request:
        """What this node asks of the memory on input ``port``, given the offer there and the allocations
        its own outputs got."""
        return Request(by=getattr(self, "id", ""))


def default_offer(node_id: str, port: str, inputs: Mapping[str, Offer]) -> Offer:
    """What a node writes when it does not say: the frames it reads go on, and their picture size (the
    largest where several inputs feed it, unknown where one does not say) is the picture of what it writes,
    so a preprocess after a decoder sizes its tensor to the source as one after the decode does."""
    pictures = [o.picture for o in inputs.values()]
    known = bool(pictures) and all(p is not None for p in pictures)
    picture = (max(p[0] for p in pictures if p), max(p[1] for p in pictures if p)) if known else None
    return Offer(node_id, port, picture=picture)


def offer_of(node: Node, port: str, inputs: Mapping[str, Offer], devices: Devices) -> Offer:
    """What ``node`` writes on output ``port``: its own offer where it negotiates, else the default."""
    if isinstance(node, Negotiating):
        return node.offer(port, inputs, devices)
    return default_offer(node.id, port, inputs)


def request_of(node: Node, port: str, offer: Offer, outputs: Mapping[str, Allocation], devices: Devices) -> Request:
    """What ``node`` asks of the memory on input ``port``: its own request where it negotiates, else none."""
    if isinstance(node, Negotiating):
        return node.request(port, offer, outputs, devices)
    return Request(by=node.id)


class Source(Node):
    """A node with no inputs that produces frames. Implement ``frames``."""

    @classmethod
    def declare(cls, **traits: Any) -> NodeContract:
        return super().declare(**{"isolation": "a source runs in the runner's process, where its frames are "
                                               "accounted", **traits})

    def frames(self) -> Iterator[Frame]:
        raise NotImplementedError

    def process(self, frame: Frame, port: str) -> Any:  # pragma: no cover - sources have no inputs
        raise RuntimeError("a source has no inputs")


class Sink(Node):
    """A node at the end of the graph (records, messages, a preview, metrics): it writes each packet it
    gets somewhere and sends nothing on. Implement ``write`` (and ``close``, ``flush`` where it buffers)."""

    def write(self, frame: Frame) -> None:
        """Write one packet (whichever input it came on)."""
        raise NotImplementedError

    def process(self, frame: Frame, port: str) -> None:
        self.write(frame)


def kinds_compatible(out_kind: str, in_kind: str) -> bool:
    return in_kind in ("any", "frame") or out_kind == "any" or out_kind == in_kind

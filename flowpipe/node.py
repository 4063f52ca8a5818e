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

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from pydantic import BaseModel, ConfigDict

from .contracts import Allocation, InputContract, Offer, Request
from .frame import Frame

if TYPE_CHECKING:
    from .accel import Devices
    from .graph import GraphSpec, NodeSpec

PORT_KINDS = ("frame", "tensor", "tensors", "detections", "any")


class RunContext(Protocol):
    """What a node gets in ``open``: its view of the run (one per node; per run, never process-wide)."""

    node_id: str
    devices: Devices  # the device owners of this process (OpenVINO Core, OpenCL contexts)
    shard: tuple[int, int]  # (index, count): this process's share of the run's streams; (0, 1) unsharded
    streams: int  # streams in the whole run (every process): what shares of the machine are sized by
    generation: int  # 0; n when this part of the run restarted n times (outputs go to new files)
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

    def snapshot(self) -> dict[str, Any]:
        """This run's statistics so far: frames by fate, per node counts (for metrics endpoints)."""


class NodeConfig(BaseModel):
    """Base for node config schemas: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")


#: Every pixel format a frame may carry (``Frame.format``).
PIXELS_ALL: frozenset[str] = frozenset({"BGR", "RGB", "GRAY", "NV12", "I420"})
#: What a node that does not say takes: BGR only (a plugin written against ``frame.image`` as BGR).
PIXELS_BGR: frozenset[str] = frozenset({"BGR"})


class Node:
    """Base class of every stage. Subclasses declare ``inputs``/``outputs`` and a ``Config``."""

    type_name: ClassVar[str] = ""
    inputs: ClassVar[dict[str, str]] = {}
    outputs: ClassVar[dict[str, str]] = {}
    Config: ClassVar[type[NodeConfig]] = NodeConfig
    #: True if ``process`` writes the input image in place (the engine copies on write when shared).
    writes_input: ClassVar[bool] = False
    #: True if the node keeps frames past ``process`` and emits them later (async pools, batching).
    holds_frames: ClassVar[bool] = False
    #: True if ``process`` may run on several threads at once for different streams (``workers: N``):
    #: the node keeps no state shared across streams, or guards it.
    parallel_streams: ClassVar[bool] = False
    #: Output port -> input port for packets passed on untouched: memory contracts flow through the node.
    forwards: ClassVar[dict[str, str]] = {}
    #: Why this node type cannot run with ``isolation: process`` (``flowpipe validate`` says so), or None.
    isolation_refused: ClassVar[str | None] = None
    #: Why a graph with this node cannot be sharded over several processes (``processes: N``), or None.
    sharding_refused: ClassVar[str | None] = None
    #: True if one instance serves every stream of a run: over several processes it runs once, in the
    #: device owner process, fed by every shard (one compiled model, batches across all streams).
    serves_streams: ClassVar[bool] = False
    #: Frames the node holds past ``process`` at most (async requests): pools upstream are sized for them.
    max_held: int = 0
    #: Pixel formats ``process`` takes on the frames it gets (``PIXELS_ALL`` for nodes that never read the
    #: pixels); a source with ``format: auto`` decodes into a format every node after it takes.
    pixels: ClassVar[frozenset[str]] = PIXELS_BGR

    def __init__(self, node_id: str, config: NodeConfig | None = None):
        self.id = node_id
        self.config = config if config is not None else self.Config()

    # lifecycle -----------------------------------------------------------------------------------
    def open(self, ctx: RunContext) -> None:
        """Acquire resources (files, devices). ``ctx`` is this node's view of the run."""

    def process(self, frame: Frame, port: str) -> Any:
        """Handle one packet. Return None, a Frame, a list of Frames, or {port: Frame | [Frame]}."""
        raise NotImplementedError

    def holding(self) -> bool:
        """Whether this node, as configured, keeps frames past ``process`` (by default its type's
        ``holds_frames``; a type may hold only with some settings)."""
        return self.holds_frames

    def poll(self) -> Any:
        """For ``holds_frames`` nodes: return what is ready now, without blocking."""
        return None

    def flush(self) -> Any:
        """End of stream on every input: return what is still held (same forms as ``process``)."""
        return None

    def end_stream(self, stream: str) -> None:
        """A stream removed from a running graph: every frame of it is accounted; close what belongs to it
        (its file, its tracks). Called from another thread than ``process``, never for a stream whose
        frames are still in flight."""

    def close(self) -> None:
        """Release resources. Called once for every node whose ``open`` succeeded."""

    # declared facts the validator and the runner use ----------------------------------------------
    def resources(self) -> list[str]:
        """What this node will load, open or listen on (shown by ``flowpipe validate``)."""
        return []

    @classmethod
    def check_wiring(cls, spec: NodeSpec, graph: GraphSpec) -> list[str]:
        """Problems with how this node is wired into ``graph`` (one message each); run by validation."""
        return []

    def pixel_formats(self) -> frozenset[str]:
        """The pixel formats this node takes, from its config (by default the class's ``pixels``)."""
        return self.pixels

    def offer(self, port: str, inputs: Mapping[str, Offer], devices: Devices) -> Offer:
        """What this node writes on output ``port``, given what its inputs offer (before any open)."""
        return Offer(self.id, port)

    def request(self, port: str, offer: Offer, outputs: Mapping[str, Allocation], devices: Devices) -> Request:
        """What this node asks of the memory on input ``port``, given the offer there and the allocations
        its own outputs got (consumers resolve first)."""
        return Request(by=self.id)


class Source(Node):
    """A node with no inputs that produces frames. Implement ``frames``."""

    def frames(self) -> Iterator[Frame]:
        raise NotImplementedError

    def process(self, frame: Frame, port: str) -> Any:  # pragma: no cover - sources have no inputs
        raise RuntimeError("a source has no inputs")


def kinds_compatible(out_kind: str, in_kind: str) -> bool:
    return in_kind in ("any", "frame") or out_kind == "any" or out_kind == in_kind


def sharding_refusal(cls: type[Node]) -> str | None:
    """Why a graph with a node of this type cannot run its streams in several processes, or None."""
    return cls.sharding_refused


def isolation_refusal(cls: type[Node]) -> str | None:
    """Why a node type cannot run with ``isolation: process``, or None: sources and nodes that hold frames
    past ``process`` (async pools) run in the runner's process; a node type may declare its own reason."""
    if issubclass(cls, Source):
        return "a source runs in the runner's process, where its frames are accounted"
    if cls.holds_frames:
        return "it holds frames past process() (asynchronous requests)"
    return cls.isolation_refused

"""The graph model: the engine keys every node takes, the ``cluster:`` block, ``NodeSpec`` and ``GraphSpec``."""
from __future__ import annotations

import builtins
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..errors import Diagnostic
from ..node import Node, NodeConfig, NodeContract, Source, kinds_compatible, setting

TOP_KEYS = {"flowpipe", "description", "params", "plugins", "processes", "device_owner", "prefetch", "cluster",
            "nodes"}
OVERFLOW = ("block", "drop_oldest", "drop_newest")
ON_ERROR = ("fail", "drop", "restart")
ISOLATION = ("thread", "process")
THREAD = ("auto", "own")


def _choice(name: str, allowed: tuple[str, ...]) -> Any:
    def check(v: Any) -> Any:
        if v not in allowed:
            raise ValueError(f"expected one of {'|'.join(allowed)}, got {v!r}")
        return v
    return field_validator(name, mode="before")(lambda cls, v: check(v))


def _integer(name: str, lo: int, hi: int) -> Any:
    def check(v: Any) -> Any:
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise ValueError(f"expected an integer {lo}..{hi}, got {v!r}")
        return v
    return field_validator(name, mode="before")(lambda cls, v: check(v))


class EngineKeys(BaseModel):
    """The keys every node takes beside ``id``, ``type``, ``config`` and ``inputs``: how the runner runs it."""

    model_config = ConfigDict(extra="forbid")
    on_error: str = Field("fail", description="fail | drop | restart")
    isolation: str = Field("thread", description="thread | process (a worker process; frames cross as fds)")
    queue: int = Field(8, description="bounded input queue, 1..4096")
    overflow: str = Field("block", description="block | drop_oldest | drop_newest (every drop is counted)")
    workers: int = Field(1, description="threads for stages that keep no cross-stream state, 1..64")
    thread: str = Field("auto", description="auto (in its producer's thread where no queue is needed between "
                                            "them) | own (its own thread behind its queue)")
    restarts: int = Field(3, description="with on_error: restart, how many times, 0..1000")
    template: bool = Field(False, description="a source that is not run: the pattern of the streams added to "
                                              "the running graph (flowpipe serve)")
    enabled: bool = Field(True, description="false: the node is left out and what feeds it feeds its consumers "
                                            "(a node of one input; DeepStream's enable=0); a list: the node runs "
                                            "where any of them is true (a node two features of a graph need), a "
                                            "list in it where all of its are (a feature's part it can do without)")

    _on_error = _choice("on_error", ON_ERROR)
    _isolation = _choice("isolation", ISOLATION)
    _overflow = _choice("overflow", OVERFLOW)
    _queue = _integer("queue", 1, 4096)
    _workers = _integer("workers", 1, 64)
    _thread = _choice("thread", THREAD)
    _restarts = _integer("restarts", 0, 1000)

    @field_validator("enabled", mode="before")
    @classmethod
    def _any_of(cls, v: Any) -> Any:
        def flags(x: Any) -> bool:
            return isinstance(x, list) and bool(x) and all(isinstance(y, bool) for y in x)

        if isinstance(v, list):
            if not v or not all(isinstance(x, bool) or flags(x) for x in v):
                raise ValueError(f"expected true, false or a list of them (any), each maybe a list (all), got {v!r}")
            return any(all(x) if isinstance(x, list) else x for x in v)
        return v


class ClusterKeys(BaseModel):
    """The graph's ``cluster:`` block: the Ray cluster to run on and what each stream needs there."""

    model_config = ConfigDict(extra="forbid")
    address: str | None = Field(None, description="auto (the local Ray cluster) or ray://HOST:PORT; "
                                                  "--cluster overrides it")
    per_stream: dict[str, float] = Field(default_factory=lambda: {"CPU": 1.0},
                                         description="Ray resources one stream takes, e.g. {intel_npu: 0.25}")
    labels: dict[str, str] = Field(default_factory=dict, description="host labels a stream needs (exact)")
    metrics_port: int | None = Field(None, ge=0, le=65535,
                                     description="each host serves its streams' counts for Prometheus at "
                                                 "http://HOST:PORT/metrics on its Ray address (0: a free port)")
    model_cache: str | None = Field(None, description="where each host keeps compiled models of inference nodes "
                                                      "without a cache_dir (default: ~/.cache/flowpipe/ov)")


ENGINE_KEYS = set(EngineKeys.model_fields)
NODE_KEYS = {"id", "type", "config", "inputs"} | ENGINE_KEYS


@dataclass
class NodeSpec:
    id: str
    type: str
    cls: builtins.type[Node]  # (the field ``type`` shadows the builtin here)
    config: NodeConfig
    inputs: dict[str, list[tuple[str, str]]]
    on_error: str = "fail"
    queue: int = 8
    isolation: str = "thread"
    restarts: int = 3
    line: int | None = None
    overflow: str = "block"
    workers: int = 1
    template: bool = False  # a source not run: the pattern of streams added at run time
    thread: str = "auto"  # auto: in its producer's thread where it can (Runner._runs_in); own: its own
    enabled: bool = True  # false: left out of the graph (validation feeds its consumers what fed it)

    def make(self) -> Node:
        return self.cls(self.id, self.config)

    @property
    def stream(self) -> str:
        """The stream a source node emits: its ``stream`` setting, else its id."""
        return getattr(self.config, "stream", None) or self.id

    @functools.cached_property
    def contract(self) -> NodeContract:
        """What this node, as configured, declares (``Node.contract``): read by validation and the runner."""
        return self.cls.contract(self.config)


@dataclass
class GraphSpec:
    file: str
    nodes: list[NodeSpec]
    params: dict[str, Any] = field(default_factory=dict)
    plugins: list[str] = field(default_factory=list)
    plugin_dir: str | None = None  # the graph file's folder, where plugin modules may sit
    dag: nx.MultiDiGraph = field(default_factory=nx.MultiDiGraph)
    processes: int | str = 1  # worker processes the streams are sharded over, or "auto"
    #: over several processes, nodes that serve many streams (inference) run once in a device owner
    device_owner: bool = True
    #: frames waiting in front of each stage worker beyond the one inside: what pools are sized by (more
    #: absorbs jitter between stages, each costs one decoded picture per stage)
    prefetch: int = 1
    #: over several hosts (``--cluster``): where and what each stream needs
    cluster: ClusterKeys | None = None
    #: a shard's part of a graph (``runtime.shards.subgraph``): the whole graph, whose sources every shard
    #: takes into account where they size what it declares (a tensor sized to the largest picture)
    whole: GraphSpec | None = None
    #: what a run of the graph's own sources refuses and a server would not (a per-stream key naming a stream
    #: none of them is: a server may add it); ``load_graph(fixed_streams=True)`` raises them
    run_refuses: list[Diagnostic] = field(default_factory=list)
    #: where the run's nodes append each event they raise or change (``RunContext.journal``), one JSON line
    #: each, as it happens: what a server reads its events from, surviving the run's processes (None: nowhere)
    journal: str | None = None

    def sources(self) -> list[NodeSpec]:
        """The source nodes that run, in graph order: one stream each."""
        return [s for s in self.nodes if issubclass(s.cls, Source) and not s.template]

    def templates(self) -> list[NodeSpec]:
        """Sources that are the pattern of streams added to the running graph."""
        return [s for s in self.nodes if issubclass(s.cls, Source) and s.template]

    def add(self, node: NodeSpec) -> None:
        """One more node, wired to the producers its inputs name (a service's own node beside the graph's:
        the console's preview). Its ports and kinds are checked as a graph file's are."""
        if any(n.id == node.id for n in self.nodes):
            raise ValueError(f"a node named {node.id!r} is already in the graph")
        for port, refs in node.inputs.items():
            kind = node.contract.inputs.get(port)
            if kind is None:
                raise ValueError(f"node {node.id!r} has no input port {port!r}")
            for up, up_port in refs:
                out_kind = self.node(up).contract.outputs.get(up_port)
                if out_kind is None or not kinds_compatible(out_kind, kind):
                    raise ValueError(f"node {node.id!r}: {up}.{up_port} ({out_kind}) cannot feed {port} ({kind})")
        self.nodes.append(node)
        self.dag.add_node(node.id)
        for port, refs in node.inputs.items():
            for up, up_port in refs:
                self.dag.add_edge(up, node.id, src_port=up_port, dst_port=port)

    def files(self, kind: str) -> list[str]:
        """The paths the graph's nodes write of ``kind`` (``NodeContract.files``: records, video, ...)."""
        return [path for s in self.nodes for key, k in s.contract.files.items()
                if k == kind and isinstance(path := setting(s.config, key), str)]

    def outputs(self) -> list[tuple[NodeSpec, str, str, str]]:
        """Every path the graph writes output to, as (node, its config key, kind, path): recordings, records,
        folders and what a stream leaves for its next run (``state``); standard output ('-') and a model cache
        are none."""
        return [(s, key, kind, path) for s in self.nodes for key, kind in s.contract.files.items()
                if kind in ("records", "video", "folder", "state") and isinstance(path := setting(s.config, key), str)
                and path != "-"]

    def node(self, node_id: str) -> NodeSpec:
        return next(n for n in self.nodes if n.id == node_id)

    def configure(self, configs: Mapping[str, Any]) -> None:
        """Nodes' configs replaced (node id -> config), as a running graph changes them."""
        for nid, cfg in configs.items():
            self.node(nid).config = cfg

    def consumers(self, node_id: str) -> list[tuple[str, str, str]]:
        """(out_port, consumer id, in_port) for every edge leaving ``node_id``."""
        return [(d["src_port"], v, d["dst_port"]) for _, v, d in self.dag.out_edges(node_id, data=True)]

    def topo_order(self) -> list[NodeSpec]:
        order = list(nx.topological_sort(self.dag))
        return [self.node(i) for i in order]

"""Helpers to run nodes and graphs in tests and notebooks with in-memory sources and sinks.

A run owns its feeds and collections (``Runner(spec, feeds=...)``, ``RunResult.collected``); these
helpers only keep names for the test that uses them: ``feed(items)`` names a list for the next run whose
graph mentions it, and ``collected(name)`` reads what the latest such run collected.

    >>> from flowpipe.testing import run_node
    >>> out = run_node("type: passthrough", [np.zeros((4, 4, 3), np.uint8)])
    >>> len(out.frames)
    1

``Harness`` opens one node outside a graph, with the same contract steps a run takes (offers, requests,
allocations), for benchmarks and notebooks that call ``process`` themselves.
"""
from __future__ import annotations

import itertools
import re
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from .accel import Devices, devices
from .backedge import BackEdge
from .contracts import Allocation, InputContract, Offer
from .frame import Frame
from .graph import GraphSpec, load_graph
from .node import Node, offer_of, request_of
from .runtime import RunResult, run

_ids = itertools.count()
_feeds: dict[str, list[Any]] = {}
_collected: dict[str, list[Frame]] = {}


def feed(items: list[Any]) -> str:
    """Name ``items`` for a ``list_source`` of the next run that mentions the name; returns the name."""
    name = f"feed{next(_ids)}"
    _feeds[name] = list(items)
    return name


def collected(name: str) -> list[Frame]:
    """What a ``collect`` node named ``into: name`` kept in the latest run that had one."""
    return _collected.get(name, [])


def run_spec(spec: GraphSpec, text: str = "", **run_kwargs: Any) -> RunResult:
    """Run ``spec`` with the named feeds its text mentions; remember what it collected."""
    names = set(re.findall(r"feed\d+", text))
    feeds = {n: _feeds.pop(n) for n in names if n in _feeds}
    feeds.update(run_kwargs.pop("feeds", {}))
    result = run(spec, feeds=feeds, **run_kwargs)
    _collected.update(result.collected)
    return result


@dataclass
class NodeRun:
    result: RunResult
    frames: list[Frame]


def run_node(snippet: str, items: list[Any], port: str | None = None, out_port: str | None = None,
             **run_kwargs: Any) -> NodeRun:
    """Run one node, given as a YAML snippet (``type:`` and ``config:``), between a list source and
    a collector. The node gets the id ``node``."""
    into = f"out{next(_ids)}"
    body = textwrap.indent(textwrap.dedent(snippet).strip(), "    ")
    in_map = f"{{{port}: src.frame}}" if port else "src.frame"
    sink_in = f"node.{out_port}" if out_port else "node"
    text = (f"nodes:\n  - id: src\n    type: list_source\n    config: {{feed: items}}\n"
            f"  - id: node\n{body}\n    inputs: {in_map}\n"
            f"  - id: sink\n    type: collect\n    config: {{into: {into}}}\n    inputs: {sink_in}\n")
    spec = load_graph("<snippet>", text=text)
    result = run(spec, feeds={"items": list(items)}, **run_kwargs)
    return NodeRun(result, result.collected.get(into, []))


def run_yaml(text: str, **run_kwargs: Any) -> RunResult:
    text = textwrap.dedent(text)
    return run_spec(load_graph("<test>", text=text), text, **run_kwargs)


class StandaloneContext:
    """A ``RunContext`` for one node outside a graph: the allocations and input contracts it is given
    (host memory where none is), its own stats, feeds and collections."""

    def __init__(self, node_id: str, devices_: Devices, allocations: Mapping[str, Allocation],
                 inputs: Mapping[str, InputContract], frames_in_flight: int = 4,
                 feeds: Mapping[str, list[Any]] | None = None):
        self.node_id = node_id
        self.shard = (0, 1)
        self.alone = True
        self.streams = 1
        self.generation = 0
        self.serves_processes = 0
        self.devices = devices_
        self.stats: dict[str, Any] = {}
        self.sections: dict[str, dict[str, Any]] = {}
        self.collected: dict[str, list[Frame]] = {}
        self.edges: dict[str, BackEdge] = {}
        self.provided: dict[str, Callable[..., Any]] = {}
        self.journaled: list[dict[str, Any]] = []
        self._allocations, self._inputs = dict(allocations), dict(inputs)
        self._in_flight = frames_in_flight
        self._feeds = dict(feeds or {})
        self.stopped = False

    @property
    def stopping(self) -> bool:
        return self.stopped

    def wake(self) -> None:
        pass  # the caller polls

    def resume_at(self, stream: str) -> int:
        return 0

    def frames_in_flight(self) -> int:
        return self._in_flight

    def allocation(self, port: str) -> Allocation:
        return self._allocations.get(port) or Allocation()

    def input(self, port: str) -> InputContract | None:
        return self._inputs.get(port)

    def section(self, name: str, data: dict[str, Any]) -> None:
        self.sections[name] = data

    def feed(self, name: str) -> list[Any]:
        if name not in self._feeds:
            raise KeyError(f"no in-memory feed named {name!r} (feeds: {', '.join(sorted(self._feeds)) or 'none'})")
        return self._feeds[name]

    def collector(self, name: str) -> list[Frame]:
        return self.collected.setdefault(name, [])

    def back_edge(self, name: str) -> BackEdge:
        # one node at a time: no frame is in flight beyond it, so a read waits for nothing (a test says the
        # words it wants read first)
        return self.edges.setdefault(name, BackEdge(name, lambda stream, after, upto: False))

    def snapshot(self) -> dict[str, Any]:
        return {"node": self.node_id, "stats": self.stats}

    def provide(self, kind: str, answer: Callable[..., Any]) -> None:
        self.provided[kind] = answer  # what a test asks as the console would

    def journal(self, record: dict[str, Any]) -> None:
        self.journaled.append(dict(record))  # what a test reads as a server's event index would


class Harness:
    """One node, opened outside a graph after the contract steps a run takes: ``offer`` on each output
    (given ``inputs``, what its inputs offer), ``request`` on each input, then ``open`` with host memory
    on every output port unless ``allocations`` says otherwise.

        >>> with Harness(Preprocess("pre", Preprocess.Config(size=(128, 128)))) as h:
        ...     out = h.node.process(frame, "frame")
    """

    def __init__(self, node: Node, *, inputs: Mapping[str, Offer] | None = None,
                 allocations: Mapping[str, Allocation] | None = None, devices_: Devices | None = None,
                 frames_in_flight: int = 4, feeds: Mapping[str, list[Any]] | None = None):
        self.node = node
        self.devices = devices_ or devices()
        offers = {port: inputs.get(port, Offer()) if inputs else Offer() for port in type(node).inputs}
        self.offers = {port: offer_of(node, port, offers, self.devices) for port in type(node).outputs}
        allocs = {port: (allocations or {}).get(port) or Allocation() for port in type(node).outputs}
        self.requests = {port: request_of(node, port, offer, allocs, self.devices) for port, offer in offers.items()}
        contracts = {port: InputContract(offer, Allocation(), f"harness->{node.id}") for port, offer in offers.items()}
        self.context = StandaloneContext(node.id, self.devices, allocs, contracts, frames_in_flight, feeds)

    def __enter__(self) -> Harness:
        self.node.open(self.context)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.node.close()

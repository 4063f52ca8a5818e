"""Helpers to run nodes and graphs in tests and notebooks with in-memory sources and sinks.

A run owns its feeds and collections (``Runner(spec, feeds=...)``, ``RunResult.collected``); these
helpers only keep names for the test that uses them: ``feed(items)`` names a list for the next run whose
graph mentions it, and ``collected(name)`` reads what the latest such run collected.

    >>> from flowpipe.testing import run_node
    >>> out = run_node("type: passthrough", [np.zeros((4, 4, 3), np.uint8)])
    >>> len(out.frames)
    1
"""
from __future__ import annotations

import itertools
import re
import textwrap
from dataclasses import dataclass
from typing import Any

from .frame import Frame
from .graph import GraphSpec, load_graph
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

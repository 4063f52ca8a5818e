"""Helpers to run nodes and graphs in tests and notebooks with in-memory sources and sinks.

    >>> from flowpipe.testing import run_node
    >>> out = run_node("type: passthrough", [np.zeros((4, 4, 3), np.uint8)])
    >>> len(out.frames)
    1
"""
from __future__ import annotations

import itertools
import textwrap
from dataclasses import dataclass
from typing import Any

from .engine import RunResult, run
from .frame import Frame
from .graph import load_graph

_ids = itertools.count()


def feed(items: list[Any]) -> str:
    """Register an in-memory feed for ``list_source``; returns its name."""
    from flowpipe.nodes.basic import FEEDS

    name = f"feed{next(_ids)}"
    FEEDS[name] = list(items)
    return name


def collected(name: str) -> list[Frame]:
    from flowpipe.nodes.basic import COLLECTED

    return COLLECTED.get(name, [])


@dataclass
class NodeRun:
    result: RunResult
    frames: list[Frame]


def run_node(snippet: str, items: list[Any], port: str | None = None, out_port: str | None = None,
             **run_kwargs: Any) -> NodeRun:
    """Run one node, given as a YAML snippet (``type:`` and ``config:``), between a list source and
    a collector. The node gets the id ``node``."""
    name = feed(items)
    into = f"out{next(_ids)}"
    body = textwrap.indent(textwrap.dedent(snippet).strip(), "    ")
    in_map = f"{{{port}: src.frame}}" if port else "src.frame"
    sink_in = f"node.{out_port}" if out_port else "node"
    text = (f"nodes:\n  - id: src\n    type: list_source\n    config: {{feed: {name}}}\n"
            f"  - id: node\n{body}\n    inputs: {in_map}\n"
            f"  - id: sink\n    type: collect\n    config: {{into: {into}}}\n    inputs: {sink_in}\n")
    spec = load_graph("<snippet>", text=text)
    run_kwargs.setdefault("handle_signals", False)
    result = run(spec, **run_kwargs)
    return NodeRun(result, collected(into))


def run_yaml(text: str, **run_kwargs: Any) -> RunResult:
    spec = load_graph("<test>", text=textwrap.dedent(text))
    run_kwargs.setdefault("handle_signals", False)
    return run(spec, **run_kwargs)

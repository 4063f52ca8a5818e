"""Graph files: YAML -> validated GraphSpec, in phases that touch no device.

``load`` reads the file (safe loader, line numbers kept, params and ``--set``), ``validate`` runs the phases
(graph keys -> params -> plugins -> node types, engine keys, configs -> wiring and cycles -> engine rules),
``spec`` holds what they produce: ``GraphSpec`` and its ``NodeSpec``s.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .load import MAX_EXPANDED_NODES, MAX_YAML_BYTES, LineDict, LineList, parse_sets, parse_yaml, read_text
from .spec import (
    ENGINE_KEYS,
    ISOLATION,
    NODE_KEYS,
    ON_ERROR,
    OVERFLOW,
    THREAD,
    TOP_KEYS,
    ClusterKeys,
    EngineKeys,
    GraphSpec,
    NodeSpec,
)
from .validate import validate

__all__ = ["ENGINE_KEYS", "ISOLATION", "MAX_EXPANDED_NODES", "MAX_YAML_BYTES", "NODE_KEYS", "ON_ERROR", "OVERFLOW",
           "THREAD", "TOP_KEYS", "ClusterKeys", "EngineKeys", "GraphSpec", "LineDict", "LineList", "NodeSpec",
           "load_graph", "parse_sets", "validate"]


def load_graph(path: str | Path, overrides: dict[str, Any] | None = None,
               text: str | None = None, fixed_streams: bool = False) -> GraphSpec:
    """Read and validate a graph file. Raises GraphError with one Diagnostic per problem. ``fixed_streams``:
    the run's streams are the graph's sources, none added while it runs (``flowpipe run``), so what names a
    stream must name one of them."""
    fname = str(path)
    if text is None:
        text = read_text(path, fname)
    doc = parse_yaml(text, fname)
    return validate(doc, fname, overrides or {}, fixed_streams)

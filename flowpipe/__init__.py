"""flowpipe: zero-copy video-analytics pipelines on OpenVINO and OpenCL.

The names below are imported when first used (``from flowpipe import Frame`` imports the frame module, not the
engine): the command line starts without the engine's import time, so a Ctrl-C in its first second ends it as
one later does."""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .errors import Diagnostic, FrameError, GraphError, NodeError
    from .frame import Detection, Frame, FrameRef, Placement, TensorLayout
    from .graph import GraphSpec, load_graph
    from .node import AsyncNode, Negotiating, Node, NodeConfig, NodeContract, Resource, RunContext, Sink, Source
    from .registry import register, registry
    from .runtime import Runner, RunResult, run

__version__ = "0.1.0"
_WHERE = {"Diagnostic": "errors", "FrameError": "errors", "GraphError": "errors", "NodeError": "errors",
          "Detection": "frame", "Frame": "frame", "FrameRef": "frame", "Placement": "frame", "TensorLayout": "frame",
          "GraphSpec": "graph", "load_graph": "graph", "Node": "node", "NodeConfig": "node",
          "NodeContract": "node", "RunContext": "node", "Source": "node", "AsyncNode": "node", "Negotiating": "node",
          "Resource": "node", "Sink": "node", "register": "registry",
          "registry": "registry", "Runner": "runtime", "RunResult": "runtime", "run": "runtime"}
__all__ = [
    "AsyncNode",
    "Detection",
    "Diagnostic",
    "Frame",
    "FrameError",
    "FrameRef",
    "GraphError",
    "GraphSpec",
    "Negotiating",
    "Node",
    "NodeConfig",
    "NodeContract",
    "NodeError",
    "Placement",
    "Resource",
    "RunContext",
    "RunResult",
    "Runner",
    "Sink",
    "Source",
    "TensorLayout",
    "load_graph",
    "register",
    "registry",
    "run",
]


def __getattr__(name: str) -> Any:
    """A public name from its module, or one of the package's modules, imported on first use."""
    if name in _WHERE:
        value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
        globals()[name] = value
        return value
    try:
        return importlib.import_module(f".{name}", __name__)
    except ModuleNotFoundError:
        raise AttributeError(f"module 'flowpipe' has no attribute {name!r}") from None

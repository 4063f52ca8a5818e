"""flowpipe: zero-copy video-analytics pipelines on OpenVINO and OpenCL."""
from __future__ import annotations

from .errors import Diagnostic, FrameError, GraphError, NodeError
from .frame import Detection, Frame, FrameRef, Placement, TensorLayout
from .graph import GraphSpec, load_graph
from .node import Node, NodeConfig, NodeContract, RunContext, Source
from .registry import register, registry
from .runtime import Runner, RunResult, run

__version__ = "0.1.0"
__all__ = ["Detection", "Diagnostic", "Frame", "FrameError", "FrameRef", "GraphError", "GraphSpec", "Node",
           "NodeConfig", "NodeContract", "NodeError", "Placement", "RunContext", "RunResult", "Runner", "Source",
           "TensorLayout", "load_graph", "register", "registry", "run"]

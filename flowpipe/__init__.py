"""flowpipe: zero-copy video-analytics pipelines on OpenVINO and OpenCL."""
from __future__ import annotations

from .engine import FrameError, RunResult, Runner, run
from .errors import Diagnostic, GraphError, NodeError
from .frame import Detection, Frame, FrameRef
from .graph import GraphSpec, load_graph
from .node import Node, NodeConfig, Source, register, registry

__version__ = "0.1.0"
__all__ = ["Detection", "Diagnostic", "Frame", "FrameError", "FrameRef", "GraphError", "GraphSpec", "Node",
           "NodeConfig", "NodeError", "RunResult", "Runner", "Source", "load_graph", "register", "registry",
           "run"]

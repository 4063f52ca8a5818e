"""Sinks that write nowhere but the run's memory: ``collect`` (packets kept for ``RunResult.collected``) and
``null_sink`` (packets dropped, to end a branch)."""
from __future__ import annotations

import threading

import numpy as np
from pydantic import Field

from flowpipe import memory
from flowpipe.frame import Frame
from flowpipe.node import PIXELS_ALL, NodeConfig, NodeContract, RunContext, Sink
from flowpipe.registry import register


@register("collect")
class Collect(Sink):
    """Sink that appends every packet to an in-memory list of the run (``RunResult.collected[into]``)."""

    inputs = {"in": "any"}

    @classmethod
    def contract(cls, config: NodeConfig) -> NodeContract:
        return cls.declare(pixels=PIXELS_ALL, isolation="it keeps packets in the runner's memory",
                           sharding="it keeps packets in the memory of the process that started the run")

    class Config(NodeConfig):
        into: str = Field(description="the list's name in the run's result (RunResult.collected[into])")
        keep_pixels: bool = Field(False, description="copy pixels out of pooled buffers (counted)")
        keep_tensors: bool = Field(True, description="copy tensors out of pooled buffers (counted)")

    config: Config

    def open(self, ctx: RunContext) -> None:
        self.into = ctx.collector(self.config.into)
        self._lock = threading.Lock()

    def write(self, frame: Frame) -> None:
        # pooled buffers go back to their pool when the frame ends: keep copies, not views
        tensors = {k: memory.copy(v) if isinstance(v, np.ndarray) else v for k, v in frame.tensors.items()} \
            if self.config.keep_tensors else {}
        kept = Frame(frame.stream, frame.index, frame.pts,
                     memory.copy(frame.data) if self.config.keep_pixels and frame.data is not None else None,
                     frame.format, dict(frame.meta), tensors, list(frame.detections), layout=frame.layout)
        with self._lock:
            self.into.append(kept)


@register("null_sink")
class NullSink(Sink):
    """Consumes packets and does nothing (ends a branch)."""

    inputs = {"in": "any"}

    @classmethod
    def contract(cls, config: NodeConfig) -> NodeContract:
        return cls.declare(pixels=PIXELS_ALL, one_worker=None)

    def write(self, frame: Frame) -> None:
        return None

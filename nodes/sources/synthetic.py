"""Frames made up, with no file or camera: a moving gradient, for benchmarks and tests."""
from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from flowpipe import memory
from flowpipe.frame import Frame, FrameRef
from flowpipe.node import NodeConfig, RunContext, Source
from flowpipe.registry import register


@register("synthetic_source")
class SyntheticSource(Source):
    """Generates frames (a moving gradient) without any file; for benchmarks and tests.

    YAML:
        - id: src
          type: synthetic_source
          config: {count: 300, width: 64, height: 48, fps: 30}
    """

    outputs = {"frame": "frame"}

    class Config(NodeConfig):
        count: int = Field(100, ge=0, description="frames to generate")
        width: int = Field(64, ge=1, le=16384, description="frame width in pixels")
        height: int = Field(48, ge=1, le=16384, description="frame height in pixels")
        stream: str | None = Field(None, description="stream id (default: the node id)")
        fps: float = Field(30.0, gt=0, description="timestamps advance at this rate")
        realtime: bool = Field(False, description="sleep to keep the frame rate")
        pool: bool = Field(True, description="allocate frames from a shared buffer pool")
        fill: bool = Field(True, description="write a pattern into every frame (off: measure the engine only)")
        format: Literal["BGR", "NV12"] = Field("BGR", description="NV12: what hardware video decoders hand over")
        memory: Literal["auto", "dma-heap", "memfd", "host"] = Field(
            "auto", description="where frames live: auto (the best this host has: flowpipe devices), a DMA-BUF "
            "heap, memfd, or the process's own memory")

        @model_validator(mode="after")
        def _even(self) -> SyntheticSource.Config:
            if self.format == "NV12" and (self.width % 2 or self.height % 2):
                raise ValueError(f"NV12 needs even width and height, got {self.width}x{self.height}")
            return self

    config: Config

    def open(self, ctx: RunContext) -> None:
        c = self.config
        self.stream = c.stream or self.id
        self.shape = (c.height * 3 // 2, c.width) if c.format == "NV12" else (c.height, c.width, 3)
        self.first = ctx.resume_at(self.stream)  # a stream resumed after a restart goes on from there
        self.pool = None
        if c.pool:
            n = min(ctx.frames_in_flight(), 256)
            self.pool = ctx.allocation("frame").pool(int(np.prod(self.shape)), n,
                                                     None if c.memory == "auto" else c.memory)

    def frames(self) -> Iterator[Frame]:
        c = self.config
        shape = self.shape
        t0 = time.monotonic() - self.first / c.fps
        for i in range(self.first, c.count):
            ref = FrameRef(self.stream, i)
            if self.pool is not None:
                lease = self.pool.acquire()
                ref.leases.append(lease)
                data = lease.buffer.array(shape)
            else:
                data = np.empty(shape, np.uint8)
            if c.fill:
                with memory.cpu_write(ref.leases[0].buffer if ref.leases else None):
                    data[...] = i & 0xFF
            if c.realtime:
                delay = t0 + i / c.fps - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            yield Frame(self.stream, i, i / c.fps, data, c.format, ref=ref)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()

"""Nodes used only by the benchmarks (loaded through a graph's plugins: list)."""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from pydantic import Field

from flowpipe import Frame, FrameRef, Node, NodeConfig, Source, memory, register
from flowpipe.node import RunContext


@register("bench_tensor_source")
class TensorSource(Source):
    """Emits ready model-input tensors from a pool (random data): feeds inference with nothing else."""

    outputs = {"tensor": "tensor"}

    class Config(NodeConfig):
        shape: list[int]
        count: int = 1000

    config: Config

    def open(self, ctx: RunContext) -> None:
        n = int(np.prod(self.config.shape)) * 4
        self.pool = ctx.allocation("tensor").pool(n, min(ctx.frames_in_flight(), 64))
        rng = np.random.default_rng(0)
        leases = [self.pool.acquire() for _ in range(self.pool.count)]
        for lease in leases:
            lease.buffer.array(tuple(self.config.shape), np.float32)[...] = rng.uniform(-1, 1, self.config.shape)
            lease.release()

    def frames(self) -> Iterator[Frame]:
        for i in range(self.config.count):
            ref = FrameRef(self.id, i)
            lease = self.pool.acquire()
            ref.leases.append(lease)
            t = lease.buffer.array(tuple(self.config.shape), np.float32)
            yield Frame(self.id, i, i / 30, None, "TENSOR", tensors={"input": t}, ref=ref)

    def close(self) -> None:
        self.pool.close()


@register("bench_copy")
class CopyStage(Node):
    """What a stage without shared buffers does: takes its own copy of the pixels (counted)."""

    inputs = {"in": "any"}
    outputs = {"out": "any"}

    class Config(NodeConfig):
        times: int = Field(1, ge=1)

    config: Config

    def process(self, frame: Frame, port: str) -> Frame:
        for _ in range(self.config.times):
            frame.data = memory.copy(frame.image)
        return frame

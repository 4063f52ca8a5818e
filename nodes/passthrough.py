"""The pass-through hop: every packet forwarded unchanged (for tests and engine benchmarks)."""
from __future__ import annotations

from flowpipe.frame import Frame
from flowpipe.node import PIXELS_ALL, Node, NodeConfig, NodeContract
from flowpipe.registry import register


@register("passthrough")
class Passthrough(Node):
    """Forwards every packet unchanged (a hop for tests and engine benchmarks)."""

    inputs = {"in": "any"}
    outputs = {"out": "any"}

    @classmethod
    def contract(cls, config: NodeConfig) -> NodeContract:
        return cls.declare(pixels=PIXELS_ALL, one_worker=None, forwards={"out": "in"})

    def process(self, frame: Frame, port: str) -> Frame:
        return frame

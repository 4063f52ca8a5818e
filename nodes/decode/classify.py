"""An image classifier's scores -> the top classes, on the frame."""
from __future__ import annotations

import numpy as np
from pydantic import Field

from flowpipe.frame import Frame
from flowpipe.node import PIXELS_ALL, Node, NodeConfig, NodeContract
from flowpipe.registry import register

from .base import output_of


@register("classify_topk")
class ClassifyTopK(Node):
    """Top-k classes from a classifier output [1, C]; stored in ``frame.meta['classes']``."""

    inputs = {"tensors": "tensors"}

    @classmethod
    def contract(cls, config: NodeConfig) -> NodeContract:
        return cls.declare(pixels=PIXELS_ALL, one_worker=None)  # never reads the pixels; no state across frames
    outputs = {"tensors": "tensors"}

    class Config(NodeConfig):
        k: int = Field(5, ge=1, description="classes kept, the best first")
        softmax: bool = Field(True, description="turn the output into probabilities (false: it holds them already)")
        labels: list[str] | None = Field(None, description="class names by index (default: the index as text)")
        output: str | None = Field(None, description="the output tensor's name (default: the model's first)")

    config: Config

    def process(self, frame: Frame, port: str) -> Frame:
        c = self.config
        logits = output_of(frame, c.output, 0).reshape(-1).astype(np.float64)
        probs = np.exp(logits - logits.max()) if c.softmax else logits
        if c.softmax:
            probs /= probs.sum()
        top = np.argsort(-probs)[: c.k]
        frame.meta["classes"] = [{"label": c.labels[i] if c.labels and i < len(c.labels) else str(int(i)),
                                  "id": int(i), "score": round(float(probs[i]), 5)} for i in top]
        return frame

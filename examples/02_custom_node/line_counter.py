"""A custom flowpipe node: count tracked objects crossing a horizontal line."""
from __future__ import annotations

from typing import Any

from pydantic import Field

from flowpipe import Frame, Node, NodeConfig, register


@register("line_counter")
class LineCounter(Node):
    """Counts track ids whose box centre crosses ``y`` (either direction), per stream.

    YAML:
        - id: count
          type: line_counter
          config: {y: 400}
          inputs: {detections: track.detections}
    """

    inputs = {"detections": "detections"}
    outputs = {"detections": "detections"}

    class Config(NodeConfig):
        y: float = Field(description="the counting line, in source pixels")

    config: Config

    def open(self, ctx: Any) -> None:
        self.last: dict[tuple[str, int], float] = {}
        self.totals: dict[str, int] = {}

    def process(self, frame: Frame, port: str) -> Frame:
        total = self.totals.setdefault(frame.stream, 0)
        for d in frame.detections:
            if d.track_id is None:
                continue
            cy = (d.box[1] + d.box[3]) / 2
            prev = self.last.get((frame.stream, d.track_id))
            if prev is not None and (prev - self.config.y) * (cy - self.config.y) < 0:
                total += 1
            self.last[(frame.stream, d.track_id)] = cy
        self.totals[frame.stream] = total
        frame.meta["line_crossings"] = total
        return frame

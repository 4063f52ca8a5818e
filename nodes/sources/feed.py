"""Frames from the run's memory: the items of a feed a run was given (``Runner(feeds=...)``), for tests and
programs that drive a graph from Python."""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from pydantic import Field

from flowpipe.frame import Frame
from flowpipe.node import NodeConfig, NodeContract, RunContext, Source
from flowpipe.registry import register


@register("list_source")
class ListSource(Source):
    """Emits the items of an in-memory feed the run was given (``Runner(spec, feeds={name: items})``).

    Items may be Frames or numpy images (wrapped as BGR frames).
    """

    outputs = {"frame": "any"}

    @classmethod
    def contract(cls, config: NodeConfig) -> NodeContract:
        return cls.declare(sharding="its feed lives in the memory of the process that started the run")

    class Config(NodeConfig):
        feed: str = Field(description="the feed's name in the run's feeds (Runner(spec, feeds={name: items}))")
        stream: str | None = Field(None, description="stream id of items that are not frames (default: the node id)")
        fps: float = Field(30.0, gt=0, description="timestamps of items that are not frames advance at this rate")

    config: Config

    def open(self, ctx: RunContext) -> None:
        self.items = ctx.feed(self.config.feed)

    def frames(self) -> Iterator[Frame]:
        stream = self.config.stream or self.id
        for i, item in enumerate(self.items):
            if isinstance(item, Frame):
                yield item
            else:
                yield Frame(stream, i, i / self.config.fps, item if isinstance(item, np.ndarray) else None,
                            meta={} if isinstance(item, np.ndarray) else {"value": item})

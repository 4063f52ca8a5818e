"""``prometheus``: the run's counts at http://HOST:PORT/metrics for Prometheus (binds 127.0.0.1 unless
configured otherwise: exposing metrics beyond this machine is an explicit choice)."""
from __future__ import annotations

from pydantic import Field

from flowpipe.frame import Frame
from flowpipe.metrics import Collector, run_metrics
from flowpipe.node import PIXELS_ALL, Node, NodeConfig, NodeContract, RunContext
from flowpipe.registry import register


@register("prometheus")
class Prometheus(Node):
    """Serves the run's per-node statistics at http://HOST:PORT/metrics for Prometheus, and counts
    frames per stream reaching this node.

    YAML:
        - id: metrics
          type: prometheus
          config: {port: 9108}
          inputs: {frame: meta.frame}
    """

    inputs = {"frame": "any"}

    @classmethod
    def contract(cls, config: NodeConfig) -> NodeContract:
        return cls.declare(pixels=PIXELS_ALL,
                           isolation="it serves the statistics of the run in the runner's process",
                           sharding="one endpoint serves the whole run, and each shard process has only its own "
                                    "statistics")

    class Config(NodeConfig):
        host: str = Field("127.0.0.1", description="bind address")
        port: int = Field(9108, ge=0, le=65535, description="0 picks a free port (see stats)")

    config: Config

    def resources(self) -> list[str]:
        return [f"listens on http://{self.config.host}:{self.config.port}/metrics (Prometheus)"]

    def open(self, ctx: RunContext) -> None:
        from prometheus_client import CollectorRegistry, start_http_server

        self.frames: dict[str, int] = {}
        self.registry = CollectorRegistry()
        self.registry.register(Collector(lambda: run_metrics(ctx.snapshot(), self.frames)))
        self.server, self.thread = start_http_server(self.config.port, addr=self.config.host, registry=self.registry)
        self.port = self.server.server_address[1]
        ctx.stats["url"] = f"http://{self.config.host}:{self.port}/metrics"

    def process(self, frame: Frame, port: str) -> None:
        self.frames[frame.stream] = self.frames.get(frame.stream, 0) + 1

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

"""``prometheus``: the run's counts at http://HOST:PORT/metrics for Prometheus (binds 127.0.0.1 unless
configured otherwise: exposing metrics beyond this machine is an explicit choice), and where an analytics
node is upstream, each stream's line crossings and zone counts."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from pydantic import Field

from flowpipe.frame import Frame
from flowpipe.metrics import Collector, run_metrics
from flowpipe.node import PIXELS_ALL, NodeConfig, NodeContract, Resource, RunContext, Sink
from flowpipe.registry import register


@register("prometheus")
class Prometheus(Sink):
    """Serves the run's per-node statistics at http://HOST:PORT/metrics for Prometheus, and counts
    frames per stream reaching this node. Frames an analytics node went through also give each stream's
    crossings per line and direction (``flowpipe_line_crossings_total``, per label
    ``flowpipe_line_crossings_by_label_total``) and the objects in each zone (``flowpipe_zone_occupancy``, per
    label ``flowpipe_zone_objects``), as of the newest frame of the stream here.

    YAML:
        - id: metrics
          type: prometheus
          config: {port: 9108}
          inputs: {frame: meta.frame}
    """

    inputs = {"frame": "any"}

    @classmethod
    def contract(cls, config: NodeConfig) -> NodeContract:
        assert isinstance(config, cls.Config)
        return cls.declare(pixels=PIXELS_ALL,
                           resources=(Resource(f"listens on http://{config.host}:{config.port}/metrics (Prometheus)"),),
                           isolation="it serves the statistics of the run in the runner's process",
                           sharding="one endpoint serves the whole run, and each shard process has only its own "
                                    "statistics")

    class Config(NodeConfig):
        host: str = Field("127.0.0.1", description="bind address")
        port: int = Field(9108, ge=0, le=65535, description="0 picks a free port (see stats)")

    config: Config

    def open(self, ctx: RunContext) -> None:
        from prometheus_client import CollectorRegistry, start_http_server

        self.frames: dict[str, int] = {}
        self.analytics: dict[str, dict[str, Any]] = {}  # stream -> its newest frame's line totals and zones
        self.labels: dict[str, dict[str, set[str]]] = {}  # stream -> zone -> labels seen in it (0 when gone)
        self.registry = CollectorRegistry()
        self.registry.register(Collector(lambda: [*run_metrics(ctx.snapshot(), self.frames),
                                                  *analytics_metrics(self.analytics, self.labels)]))
        self.server, self.thread = start_http_server(self.config.port, addr=self.config.host, registry=self.registry)
        self.port = self.server.server_address[1]
        ctx.stats["url"] = f"http://{self.config.host}:{self.port}/metrics"

    def write(self, frame: Frame) -> None:
        self.frames[frame.stream] = self.frames.get(frame.stream, 0) + 1
        found = frame.meta.get("analytics")
        if isinstance(found, dict):
            seen = self.labels.setdefault(frame.stream, {})
            for zone, z in (found.get("zones") or {}).items():
                seen.setdefault(zone, set()).update(z.get("labels") or ())
            self.analytics[frame.stream] = found  # one reference swapped: a scrape reads one frame's whole

    def end_stream(self, stream: str) -> None:
        """A stream gone: its frames, crossings and zones are no series any more (a server whose cameras come
        and go keeps none of theirs)."""
        self.frames.pop(stream, None)
        self.analytics.pop(stream, None)
        self.labels.pop(stream, None)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def analytics_metrics(streams: Mapping[str, Mapping[str, Any]],
                      labels: Mapping[str, Mapping[str, set[str]]] | None = None) -> list[Metric]:
    """Line crossings (counters: each stream's totals go up only; per line from its first frame, at 0) and
    zone occupancy (gauges) of each stream's newest analytics record (``frame.meta["analytics"]``: ``lines``
    {line: {in, out, labels: {label: {in, out}}}}, ``zones`` {zone: {count, labels: {label: n}}}); ``labels``:
    per stream and zone the labels ever seen in it, at 0 when none is there now."""
    crossings = CounterMetricFamily("flowpipe_line_crossings", "objects that crossed a line, by direction",
                                    labels=["stream", "line", "direction"])
    by_label = CounterMetricFamily("flowpipe_line_crossings_by_label", "objects that crossed a line, by direction "
                                   "and label", labels=["stream", "line", "direction", "label"])
    zones = GaugeMetricFamily("flowpipe_zone_objects", "objects in a zone now, by label",
                              labels=["stream", "zone", "label"])
    occupancy = GaugeMetricFamily("flowpipe_zone_occupancy", "objects in a zone now", labels=["stream", "zone"])
    for stream, a in list(streams.items()):
        for line, t in (a.get("lines") or {}).items():
            for direction in ("in", "out"):
                crossings.add_metric([stream, line, direction], t.get(direction, 0))
            for label, n in (t.get("labels") or {}).items():
                for direction in ("in", "out"):
                    by_label.add_metric([stream, line, direction, label], n.get(direction, 0))
        seen = (labels or {}).get(stream, {})
        for zone, z in (a.get("zones") or {}).items():
            now = z.get("labels") or {}
            for label in sorted(set(now) | set(seen.get(zone, ()))):
                zones.add_metric([stream, zone, label], now.get(label, 0))
            occupancy.add_metric([stream, zone], z.get("count", 0))
    return [crossings, by_label, zones, occupancy]

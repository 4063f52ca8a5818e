"""A run's counts as Prometheus metric families, one set of names and labels for every endpoint that
exports a run (the ``prometheus`` node; each cluster host's ``/metrics``). Depends on prometheus_client
and plain dicts only, so any layer may import it.

Families (Prometheus adds ``_total`` to counters):

- ``flowpipe_node_frames``, ``flowpipe_node_dropped``, ``flowpipe_node_failed``, ``flowpipe_node_busy_seconds``
  (counters) and ``flowpipe_node_queue_max`` (gauge), labels ``node``, ``type``
- ``flowpipe_frames`` (counter), label ``fate``: in, out, dropped, failed
- ``flowpipe_stream_frames`` (counter), label ``stream``: where per-stream counts are given
- ``flowpipe_streams`` (gauge), no label: where the number of streams running is given

``const_labels`` (e.g. ``{"host": name}``) are added to every sample of every family.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

FATES = ("in", "out", "dropped", "failed")


def run_metrics(snap: Mapping[str, Any], streams: Mapping[str, int] | None = None, *,
                const_labels: Mapping[str, str] | None = None, running: int | None = None,
                streams_help: str = "frames per stream at this node") -> list[Metric]:
    """The metric families of a run snapshot (``Runner.snapshot()``: ``in``/``out``/``dropped``/``failed``
    and ``nodes``: {id: {type, frames, dropped, failed, busy_s, queue_max}}; a missing count reads 0).

    ``streams``: frames per stream (``flowpipe_stream_frames``, described by ``streams_help``);
    ``running``: how many streams run now (``flowpipe_streams``); either is left out where None."""
    extra = dict(const_labels or {})
    names, values = list(extra), list(extra.values())

    def counter(name: str, doc: str, labels: list[str]) -> CounterMetricFamily:
        return CounterMetricFamily(name, doc, labels=labels + names)

    by = ["node", "type"]
    frames = counter("flowpipe_node_frames", "frames processed by a node", by)
    dropped = counter("flowpipe_node_dropped", "frames dropped by policy", by)
    failed = counter("flowpipe_node_failed", "frames failed in a node", by)
    busy = counter("flowpipe_node_busy_seconds", "time spent processing", by)
    queue = GaugeMetricFamily("flowpipe_node_queue_max", "deepest input queue seen", labels=by + names)
    for nid, st in (snap.get("nodes") or {}).items():
        lab = [str(nid), str(st.get("type", "")), *values]
        frames.add_metric(lab, st.get("frames", 0))
        dropped.add_metric(lab, st.get("dropped", 0))
        failed.add_metric(lab, st.get("failed", 0))
        busy.add_metric(lab, st.get("busy_s", 0.0))
        queue.add_metric(lab, st.get("queue_max", 0))
    fates = counter("flowpipe_frames", "frames by fate", ["fate"])
    for fate in FATES:
        fates.add_metric([fate, *values], snap.get(fate, 0))
    out: list[Metric] = [frames, dropped, failed, busy, queue, fates]
    if streams is not None:
        per_stream = counter("flowpipe_stream_frames", streams_help, ["stream"])
        for s, n in list(streams.items()):
            per_stream.add_metric([str(s), *values], n)
        out.append(per_stream)
    if running is not None:
        gauge = GaugeMetricFamily("flowpipe_streams", "streams running", labels=names)
        gauge.add_metric(values, running)
        out.append(gauge)
    return out


class Collector:
    """A prometheus_client collector that reports what ``families`` returns at each scrape:
    ``CollectorRegistry().register(Collector(lambda: run_metrics(...)))``."""

    def __init__(self, families: Callable[[], Iterable[Metric]]):
        self.families = families

    def collect(self) -> Iterator[Metric]:
        yield from self.families()

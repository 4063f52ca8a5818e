"""One exporter of a run's counts: the families, names and labels every Prometheus endpoint serves."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from flowpipe.metrics import Collector, run_metrics

SNAP = {"in": 10, "out": 7, "dropped": 2, "failed": 1,
        "nodes": {"hop": {"type": "passthrough", "frames": 9, "dropped": 2, "failed": 1, "busy_s": 1.25,
                          "queue_max": 3}}}


def page(**kw) -> str:
    reg = CollectorRegistry()
    reg.register(Collector(lambda: run_metrics(SNAP, **kw)))
    return generate_latest(reg).decode()


def test_families_and_labels_of_a_snapshot() -> None:
    text = page(streams={"cam": 4})
    assert 'flowpipe_node_frames_total{node="hop",type="passthrough"} 9.0' in text
    assert 'flowpipe_node_busy_seconds_total{node="hop",type="passthrough"} 1.25' in text
    assert 'flowpipe_node_queue_max{node="hop",type="passthrough"} 3.0' in text
    assert 'flowpipe_frames_total{fate="out"} 7.0' in text and 'flowpipe_frames_total{fate="failed"} 1.0' in text
    assert 'flowpipe_stream_frames_total{stream="cam"} 4.0' in text
    assert "flowpipe_streams" not in text


def test_constant_labels_reach_every_sample() -> None:
    text = page(streams={"cam": 4}, const_labels={"host": "h1"}, running=1)
    samples = [x for x in text.splitlines() if x and not x.startswith("#")]
    assert samples and all('host="h1"' in x for x in samples)
    assert 'flowpipe_frames_total{fate="out",host="h1"} 7.0' in text and 'flowpipe_streams{host="h1"} 1.0' in text
    assert 'flowpipe_stream_frames_total{host="h1",stream="cam"} 4.0' in text

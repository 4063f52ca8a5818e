"""The executor: ordering, fan-out/fan-in, policies, accounting and guaranteed close()."""
from __future__ import annotations

import signal
import subprocess
import sys

import numpy as np
import pytest
from waits import lines_in, until

from flowpipe.testing import collected, run_node, run_yaml


def test_run_node_harness_passes_frames_through() -> None:
    out = run_node("type: passthrough", [np.full((4, 4, 3), i, np.uint8) for i in range(5)])
    assert out.result.ok
    assert [f.index for f in out.frames] == list(range(5))
    assert out.result.frames == {"in": 5, "out": 5, "dropped": 0, "failed": 0}


def test_fan_out_and_fan_in_keep_per_stream_order() -> None:
    res = run_yaml("""
        nodes:
          - {id: a, type: synthetic_source, config: {count: 200, stream: cam-a}}
          - {id: b, type: synthetic_source, config: {count: 150, stream: cam-b}}
          - {id: merge, type: passthrough, inputs: {in: [a.frame, b.frame]}}
          - {id: s1, type: collect, config: {into: fan1}, inputs: merge.out}
          - {id: s2, type: collect, config: {into: fan2}, inputs: merge.out}
    """)
    assert res.ok and res.frames == {"in": 350, "out": 350, "dropped": 0, "failed": 0}
    for name in ("fan1", "fan2"):
        got = collected(name)
        assert len(got) == 350
        for stream, n in (("cam-a", 200), ("cam-b", 150)):
            assert [f.index for f in got if f.stream == stream] == list(range(n))
    assert res.edges["merge->s1"]["frames"] == 350 and res.edges["merge->s2"]["frames"] == 350


def test_drop_policy_counts_every_frame(events: list[str]) -> None:
    res = run_yaml("""
        nodes:
          - {id: src, type: synthetic_source, config: {count: 50}}
          - {id: f, type: test_fault, config: {fail_on: [3, 10, 11, 49]}, inputs: src.frame, on_error: drop}
          - {id: s, type: collect, config: {into: drop1}, inputs: f.out}
    """)
    assert res.ok
    assert res.frames == {"in": 50, "out": 46, "dropped": 4, "failed": 0}
    assert res.nodes["f"]["dropped"] == 4
    assert sorted(f.index for f in collected("drop1")) == [i for i in range(50) if i not in (3, 10, 11, 49)]


def test_fail_policy_stops_run_names_node_stream_frame_and_closes_all(events: list[str]) -> None:
    res = run_yaml("""
        nodes:
          - {id: src, type: synthetic_source, config: {count: 1000, stream: door}}
          - {id: f1, type: test_fault, inputs: src.frame}
          - {id: f2, type: test_fault, config: {fail_on: [7]}, inputs: f1.out}
          - {id: f3, type: test_fault, inputs: f2.out}
    """)
    assert res.exit_code == 1
    assert str(res.error) == "<test>:5: node 'f2' (test_fault), stream 'door', frame 7: ValueError: bad frame 7"
    f = res.frames
    assert f["in"] == f["out"] + f["dropped"] + f["failed"] and f["failed"] >= 1
    opens = [e for e in events if e.startswith("open")]
    closes = [e for e in events if e.startswith("close")]
    assert closes == [e.replace("open", "close") for e in reversed(opens)]


def test_open_failure_closes_only_opened_nodes_in_reverse(events: list[str]) -> None:
    res = run_yaml("""
        nodes:
          - {id: src, type: synthetic_source, config: {count: 10}}
          - {id: f1, type: test_fault, inputs: src.frame}
          - {id: f2, type: test_fault, config: {fail_open: true}, inputs: f1.out}
          - {id: f3, type: test_fault, inputs: f2.out}
    """)
    assert res.exit_code == 1 and "node 'f2' (test_fault): open failed: RuntimeError: cannot open" in str(res.error)
    assert events == ["open:f3", "open:f2", "close:f3"]


def test_copy_on_write_only_when_another_reader_holds_the_frame() -> None:
    res = run_yaml("""
        nodes:
          - {id: src, type: synthetic_source, config: {count: 20, width: 16, height: 8}}
          - {id: w, type: test_inplace, inputs: src.frame}
          - {id: keep, type: collect, config: {into: cow_keep, keep_pixels: true}, inputs: src.frame}
          - {id: s, type: collect, config: {into: cow_w, keep_pixels: true}, inputs: w.out}
    """)
    assert res.ok
    # the writer saw its own copy whenever the other branch still held the frame: 'keep' never sees 255
    assert all(int(f.data.max()) == f.index for f in collected("cow_keep"))
    assert all(int(f.data.min()) == 255 for f in collected("cow_w"))
    assert res.edges["src->w"]["copies"] >= 1
    solo = run_yaml("""
        nodes:
          - {id: src, type: synthetic_source, config: {count: 20, width: 16, height: 8}}
          - {id: w, type: test_inplace, inputs: src.frame}
          - {id: s, type: null_sink, inputs: w.out}
    """)
    assert solo.ok and solo.edges["src->w"]["copies"] == 0
    # a stage that hands its frame on (a tracker before a blur) passes its reference with it: the writer
    # after it is the frame's one reader, whether it runs inline or on a thread of its own
    for thread in ("", ", thread: own"):
        chain = run_yaml(f"""
            nodes:
              - {{id: src, type: synthetic_source, config: {{count: 20, width: 16, height: 8}}}}
              - {{id: hop, type: test_fault, inputs: src.frame}}
              - {{id: w, type: test_inplace, inputs: hop.out{thread}}}
              - {{id: s, type: null_sink, inputs: w.out}}
        """)
        assert chain.ok and chain.frames["out"] == 20, chain.error
        assert chain.edges["hop->w"]["copies"] == 0, thread


def test_max_frames_stops_sources_and_drains() -> None:
    res = run_yaml("""
        nodes:
          - {id: src, type: synthetic_source, config: {count: 100000}}
          - {id: s, type: null_sink, inputs: src.frame}
    """, max_frames=123)
    assert res.ok and res.frames == {"in": 123, "out": 123, "dropped": 0, "failed": 0}


def test_max_frames_holds_over_several_sources() -> None:
    """Sources in threads of their own race for the last frames: no more than the limit enter."""
    for _ in range(5):
        res = run_yaml("""
            nodes:
              - {id: a, type: synthetic_source, config: {count: 100000, width: 32, height: 24}}
              - {id: b, type: synthetic_source, config: {count: 100000, width: 32, height: 24}}
              - {id: c, type: synthetic_source, config: {count: 100000, width: 32, height: 24}}
              - {id: s, type: null_sink, inputs: {in: [a.frame, b.frame, c.frame]}}
        """, max_frames=10)
        assert res.ok and res.frames == {"in": 10, "out": 10, "dropped": 0, "failed": 0}, res.frames
        assert sum(res.per_stream.values()) == 10


def test_backpressure_keeps_queues_bounded() -> None:
    res = run_yaml("""
        nodes:
          - {id: src, type: synthetic_source, config: {count: 60}}
          - {id: slow, type: test_fault, config: {delay_s: 0.002}, inputs: src.frame, queue: 4, thread: own}
          - {id: s, type: null_sink, inputs: slow.out}
    """)
    assert res.ok and res.nodes["slow"]["queue_max"] <= 5  # capacity + the end-of-stream marker


def test_a_stage_runs_in_its_producers_thread_unless_it_needs_its_own() -> None:
    """As GStreamer elements up to the next queue: a chain of stages runs in its source's thread; a stage with
    `thread: own` starts a thread behind its queue, and the stages after it run there. A stage's time is its
    own, not that of the stages it runs inside or that run inside it."""
    res = run_yaml("""
        nodes:
          - {id: src, type: synthetic_source, config: {count: 40}}
          - {id: a, type: test_fault, inputs: src.frame}
          - {id: b, type: test_fault, config: {delay_s: 0.005}, inputs: a.out}
          - {id: c, type: test_fault, inputs: b.out, thread: own}
          - {id: d, type: test_fault, inputs: c.out}
          - {id: s, type: collect, config: {into: threads}, inputs: d.out}
    """)
    assert res.ok and res.frames == {"in": 40, "out": 40, "dropped": 0, "failed": 0}
    got = collected("threads")
    where = {n: {f.meta["threads"][n] for f in got} for n in "abcd"}
    assert where == {"a": {"flowpipe:src"}, "b": {"flowpipe:src"}, "c": {"flowpipe:c"}, "d": {"flowpipe:c"}}
    assert [res.nodes[n].get("thread") for n in "abcds"] == ["src's", "src's", None, "c's", "c's"]
    assert res.nodes["b"]["busy_s"] >= 40 * 0.005 > 4 * res.nodes["a"]["busy_s"]  # b runs inside a's call


def test_a_stage_that_needs_a_queue_keeps_its_thread() -> None:
    """Several inputs, several workers, an overflow policy: each needs the queue that an inline stage lacks."""
    res = run_yaml("""
        nodes:
          - {id: a, type: synthetic_source, config: {count: 30, stream: s1}}
          - {id: b, type: synthetic_source, config: {count: 30, stream: s2}}
          - {id: join, type: passthrough, inputs: {in: [a.frame, b.frame]}}
          - {id: spread, type: passthrough, workers: 2, inputs: join.out}
          - {id: after, type: passthrough, inputs: spread.out}
          - {id: live, type: passthrough, overflow: drop_oldest, queue: 64, inputs: after.out}
          - {id: s, type: null_sink, inputs: live.out}
    """)
    assert res.ok and res.frames["in"] == 60 == res.frames["out"] + res.frames["dropped"]
    assert {n: res.nodes[n].get("thread") for n in ("join", "spread", "after", "live", "s")} == {
        "join": None, "spread": None, "after": None, "live": None, "s": "live's"}


SIGINT_GRAPH = """
nodes:
  - {id: src, type: synthetic_source, config: {count: 100000000, realtime: true, fps: 200}}
  - {id: a, type: passthrough, inputs: src.frame}
  - {id: s, type: jsonl, config: {path: m.jsonl}, inputs: a.out}
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_shuts_down_cleanly_with_exit_130(tmp_path, sig) -> None:
    g = tmp_path / "g.yaml"
    g.write_text(SIGINT_GRAPH)
    stats = tmp_path / "stats.json"
    proc = subprocess.Popen([sys.executable, "-m", "flowpipe.cli", "run", str(g), "--stats", str(stats)],
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    until(lambda: lines_in(tmp_path / "m.jsonl") > 0, "frames came out", proc=proc)  # the run has begun
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    import json

    s = json.loads(stats.read_text())
    f = s["frames"]
    assert f["in"] > 0 and f["in"] == f["out"] and f["failed"] == 0 and s["exit"] == 130


def test_workers_split_streams_and_keep_each_streams_order() -> None:
    res = run_yaml("""
        nodes:
          - {id: a, type: synthetic_source, config: {count: 150, stream: s1}}
          - {id: b, type: synthetic_source, config: {count: 150, stream: s2}}
          - {id: c, type: synthetic_source, config: {count: 150, stream: s3}}
          - {id: hop, type: passthrough, workers: 3, inputs: {in: [a.frame, b.frame, c.frame]}}
          - {id: s, type: collect, config: {into: workers3, keep_tensors: false}, inputs: hop.out}
    """)
    assert res.ok and res.frames == {"in": 450, "out": 450, "dropped": 0, "failed": 0}
    got = collected("workers3")
    for stream in ("s1", "s2", "s3"):
        assert [f.index for f in got if f.stream == stream] == list(range(150))
    assert res.nodes["hop"]["frames"] == 450


def test_workers_refused_for_nodes_with_cross_stream_state() -> None:
    from flowpipe import GraphError

    with pytest.raises(GraphError, match=r"workers: jsonl keeps state across streams and runs on one worker; expected 1, got 2"):
        run_yaml("""
            nodes:
              - {id: a, type: synthetic_source}
              - {id: m, type: jsonl, workers: 2, config: {path: /tmp/x.jsonl}, inputs: a.frame}
        """)

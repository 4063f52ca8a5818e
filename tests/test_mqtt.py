"""MQTT sink against a real mosquitto broker on loopback (started here)."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
import time

import numpy as np
import pytest

from flowpipe import Frame
from flowpipe.testing import feed, run_yaml

MOSQUITTO = shutil.which("mosquitto") or (shutil.which("mosquitto", path="/usr/sbin:/usr/local/sbin"))
pytestmark = pytest.mark.skipif(MOSQUITTO is None, reason="mosquitto is not installed (scripts/setup.sh installs it)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    def __init__(self, tmp_path, port: int):
        self.port = port
        self.conf = tmp_path / "mosquitto.conf"
        self.conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n")
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen([MOSQUITTO, "-c", str(self.conf)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("mosquitto did not start")

    def stop(self) -> None:
        if self.proc:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path, _free_port())
    b.start()
    yield b
    b.stop()


class Subscriber:
    def __init__(self, port: int, topic: str):
        import paho.mqtt.client as mqtt

        self.messages: list[dict] = []
        self.ready = threading.Event()
        self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
        self.c.on_connect = lambda c, u, f, rc, p=None: c.subscribe(topic, qos=1)
        self.c.on_subscribe = lambda c, u, mid, rcs, p=None: self.ready.set()
        self.c.on_message = lambda c, u, m: self.messages.append(json.loads(m.payload))
        self.c.reconnect_delay_set(1, 1)
        self.c.connect_async("127.0.0.1", port)
        self.c.loop_start()
        assert self.ready.wait(10)

    def wait_for(self, n: int, timeout: float = 15) -> list[dict]:
        deadline = time.monotonic() + timeout
        while len(self.messages) < n and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.messages

    def close(self) -> None:
        self.c.loop_stop()
        self.c.disconnect()


def _frames(n: int, stream: str = "door") -> list[Frame]:
    from flowpipe import Detection

    return [Frame(stream, i, i / 30, None, meta={}, detections=[Detection((1, 2, 3, 4), 0.9, "face", 0, i % 3)])
            for i in range(n)]


def test_every_frame_arrives_at_the_broker(broker) -> None:
    sub = Subscriber(broker.port, "flowpipe/#")
    res = run_yaml(f"""
        nodes:
          - {{id: src, type: list_source, config: {{feed: {feed(_frames(25))}}}}}
          - {{id: pub, type: mqtt, config: {{port: {broker.port}, topic: "flowpipe/{{stream}}/faces"}}, inputs: src.frame}}
    """)
    assert res.ok, res.error
    msgs = sub.wait_for(25)
    sub.close()
    assert sorted(m["frame"] for m in msgs) == list(range(25))
    assert msgs[0]["stream"] == "door" and msgs[0]["objects"][0]["label"] == "face"
    assert res.nodes["pub"]["published"] == 25


def test_mqtt_runs_in_a_worker_process(broker) -> None:
    """``isolation: process``: the client lives in the worker; every frame still reaches the broker once."""
    sub = Subscriber(broker.port, "iso/#")
    res = run_yaml(f"""
        nodes:
          - {{id: src, type: list_source, config: {{feed: {feed(_frames(20, "yard"))}}}}}
          - {{id: pub, type: mqtt, isolation: process, config: {{port: {broker.port}, topic: "iso/{{stream}}"}},
             inputs: src.frame}}
    """)
    assert res.ok, res.error
    msgs = sub.wait_for(20)
    sub.close()
    assert sorted(m["frame"] for m in msgs) == list(range(20)) and {m["stream"] for m in msgs} == {"yard"}
    assert res.nodes["pub"]["process"]["pid"] != os.getpid() and res.nodes["pub"]["published"] == 20


def test_unreachable_broker_is_a_clear_error() -> None:
    port = _free_port()
    res = run_yaml(f"""
        nodes:
          - {{id: src, type: list_source, config: {{feed: {feed(_frames(3))}}}}}
          - {{id: pub, type: mqtt, config: {{port: {port}, connect_timeout_s: 1}}, inputs: src.frame}}
    """)
    assert res.exit_code == 1
    assert str(res.error) == (f"<test>:4: node 'pub' (mqtt): open failed: RuntimeError: MQTT broker 127.0.0.1:{port} "
                              "not reachable within 1.0s")


def test_no_broker_named_publishes_nothing_and_says_so_once(caplog) -> None:
    """An empty ``host`` (a graph's broker parameter left empty): the run is clean, one INFO line says why
    nothing was published, and validation names no connection."""
    import logging

    with caplog.at_level(logging.INFO, logger="flowpipe"):
        res = run_yaml(f"""
            nodes:
              - {{id: src, type: list_source, config: {{feed: {feed(_frames(5))}}}}}
              - {{id: pub, type: mqtt, config: {{host: ""}}, inputs: src.frame}}
        """)
    assert res.ok, res.error
    assert res.frames["out"] == 5
    said = [r for r in caplog.records if r.name.startswith("flowpipe") and "MQTT" in r.getMessage()]
    assert [(r.levelname, r.getMessage()) for r in said] == [
        ("INFO", "node 'pub': no MQTT broker named (host is empty): nothing is published")]


@pytest.mark.parametrize("qos", [1, 0])
def test_messages_no_broker_got_and_no_outbox_keeps_end_the_run_in_exit_1(qos, caplog) -> None:
    """The broker away for the whole run, no outbox: every frame goes through, then the run fails naming the
    node and the messages lost (QoS 1); at QoS 0 (at most once) the loss is a warning and the run is ok."""
    port = _free_port()
    res = run_yaml(f"""
        nodes:
          - {{id: src, type: list_source, config: {{feed: {feed(_frames(3))}}}}}
          - {{id: pub, type: mqtt, config: {{port: {port}, connect_timeout_s: 0.5, qos: {qos},
              require_connection: false}}, inputs: src.frame}}
    """)
    assert res.frames["out"] == 3
    if qos:
        assert res.exit_code == 1
        assert str(res.error) == (f"<test>:4: node 'pub' (mqtt): MQTT messages lost: 3 not acknowledged by the "
                                  f"broker 127.0.0.1:{port} (an outbox: folder keeps such messages for the next run)")
    else:
        assert res.ok, res.error
        assert [r.getMessage() for r in caplog.records if "lost" in r.getMessage()] == [
            "node 'pub': MQTT messages lost: 3 not sent while the broker was away (an outbox: folder keeps such "
            "messages for the next run)"]


def test_broker_restart_mid_run_reconnects_and_delivers_queued_messages(broker) -> None:
    from flowpipe import Runner, load_graph

    items = _frames(60)
    spec = load_graph("<t>", text=f"""
nodes:
  - {{id: src, type: list_source, config: {{feed: items, fps: 20}}}}
  - {{id: pace, type: test_fault, config: {{delay_s: 0.05}}, inputs: src.frame}}
  - {{id: pub, type: mqtt, config: {{port: {broker.port}, topic: "t/{{stream}}", min_backoff_s: 1, max_backoff_s: 1}}, inputs: pace.out}}
""")
    import fp_testnodes  # noqa: F401  (test_fault)

    runner = Runner(spec, feeds={"items": items})
    t = threading.Thread(target=lambda: setattr(runner, "result", runner.run()))
    t.start()
    time.sleep(0.8)
    broker.stop()
    t_down = time.monotonic()
    time.sleep(1.0)
    broker.start()
    sub = Subscriber(broker.port, "t/#")
    t.join(60)
    res = runner.result
    assert res.ok, res.error
    msgs = sub.wait_for(30, timeout=10)
    sub.close()
    assert res.frames["out"] == 60 and res.nodes["pub"]["reconnects"] >= 1
    # the subscriber joined after the restart: it sees the tail, in order, ending at the last frame
    frames = [m["frame"] for m in msgs]
    assert frames and frames == sorted(frames) and frames[-1] == 59
    assert time.monotonic() - t_down < 60


def test_analytics_events_reach_the_broker_with_their_frame(broker) -> None:
    """A person crossing a line: the frame's MQTT message carries the crossing and its event, as the JSON line
    does (one record per frame, the analytics in it)."""
    from flowpipe import Detection

    frames = []
    for i in range(10):
        x = 100.0 + 15 * i
        frames.append(Frame("door", i, i / 10, np.zeros((240, 320, 3), np.uint8), meta={},
                            detections=[Detection((x - 10, 110, x + 10, 150), 0.9, "person", 0, 7)]))
    sub = Subscriber(broker.port, "flowpipe/#")
    res = run_yaml(f"""
        nodes:
          - {{id: src, type: list_source, config: {{feed: {feed(frames)}}}}}
          - id: an
            type: analytics
            config: {{lines: {{gate: {{points: [[0.5, 0.0], [0.5, 1.0]]}}}}, rules: [{{name: crossed, line: gate}}]}}
            inputs: {{detections: src.frame}}
          - {{id: pub, type: mqtt, config: {{port: {broker.port}, topic: "flowpipe/{{stream}}"}}, inputs: an}}
    """)
    assert res.ok, res.error
    msgs = sub.wait_for(10)
    sub.close()
    events = [(m["frame"], e["rule"], e["direction"], e["tracks"]) for m in msgs for e in m["analytics"]["events"]]
    assert len(events) == 1 and events[0][1:] == ("crossed", "out", [7]), events
    assert max(m["analytics"]["lines"]["gate"]["out"] for m in msgs) == 1


@pytest.mark.parametrize("qos", [1, 0])
def test_an_outbox_keeps_what_the_broker_never_got_and_sends_it_first_next_time(tmp_path, qos) -> None:
    """``outbox``: a run while the broker is away keeps its 25 messages in the stream's file (QoS 1: the
    client's queue dies with the run; QoS 0: the client sends nothing while away, each counted as dropped);
    the next run of the stream, with the broker back, sends those first, in order, then its own, and leaves
    the outbox with nothing undelivered."""
    port = _free_port()
    box = tmp_path / "outbox"

    def run(frames: list[Frame]):
        return run_yaml(f"""
        nodes:
          - {{id: src, type: list_source, config: {{feed: {feed(frames)}}}}}
          - {{id: pub, type: mqtt, config: {{port: {port}, topic: "o/{{stream}}", connect_timeout_s: 0.5, qos: {qos},
              require_connection: false, outbox: {box}}}, inputs: src.frame}}
        """)

    res = run(_frames(25))
    assert res.ok, res.error
    assert res.nodes["pub"]["outbox_left"] == 25
    assert (res.nodes["pub"]["unacknowledged"], res.nodes["pub"]["queue_dropped"]) == ((25, 0) if qos else (0, 25))
    kept = [json.loads(line) for line in (box / "pub.door.jsonl").read_text().splitlines()]
    assert [json.loads(r["p"])["frame"] for r in kept] == list(range(25)) and not any("a" in r for r in kept)
    broker = Broker(tmp_path, port)
    broker.start()
    try:
        sub = Subscriber(port, "o/#")
        later = [Frame("door", 100 + i, (100 + i) / 30, None, meta={}, detections=[]) for i in range(5)]
        res = run(later)
        assert res.ok, res.error
        msgs = sub.wait_for(30)
        sub.close()
    finally:
        broker.stop()
    assert [m["frame"] for m in msgs] == [*range(25), *range(100, 105)]  # the kept ones first, in order
    assert res.nodes["pub"]["outbox_resent"] == 25 and res.nodes["pub"]["outbox_left"] == 0
    left = {}
    for r in map(json.loads, (box / "pub.door.jsonl").read_text().splitlines()):
        left.pop(r["a"], None) if "a" in r else left.setdefault(r["m"], r)
    assert left == {}  # every message in it delivered


def test_messages_a_killed_process_had_queued_are_sent_by_the_next_run_of_the_stream(tmp_path) -> None:
    """The process dies (SIGKILL at frame 40) while the broker is away, messages in its client's queue:
    those that reached the sink were in the outbox, and the next run of the stream, the broker back, sends them
    before its own."""
    import sys
    from pathlib import Path

    port = _free_port()
    graph = f"""
nodes:
  - {{id: cam, type: synthetic_source, config: {{count: 60, width: 32, height: 24}}}}
  - {{id: hop, type: test_crash, config: {{crash_on: [40]}}, inputs: {{in: cam}}}}
  - {{id: pub, type: mqtt, config: {{port: {port}, topic: "k/{{stream}}", connect_timeout_s: 0.5,
      require_connection: false, outbox: {tmp_path / "outbox"}}}, inputs: {{detections: hop.out}}}}
"""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import fp_testnodes; from flowpipe import Runner, load_graph; "
            "Runner(load_graph('<t>', text=sys.argv[2])).run()")
    p = subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent), graph], capture_output=True,
                       timeout=60)
    assert p.returncode == -9, p.stderr[-2000:]
    broker = Broker(tmp_path, port)
    broker.start()
    try:
        sub = Subscriber(port, "k/#")
        res = run_yaml(graph.replace("crash_on: [40]", "crash_on: []"))
        assert res.ok, res.error
        msgs = sub.wait_for(100)
        sub.close()
    finally:
        broker.stop()
    kept = res.nodes["pub"]["outbox_resent"]  # what had reached the sink before the kill (frames 0 to 39 at most)
    assert 0 < kept <= 40 and res.nodes["pub"]["outbox_left"] == 0
    assert [m["frame"] for m in msgs] == [*range(kept), *range(60)]  # the dead run's first, then this one's


def test_an_outbox_on_a_full_disk_keeps_no_half_line_and_keeps_again_when_there_is_room(small_disk) -> None:
    """A message the disk cannot take is sent without being kept (counted, said once), never left half
    written; once there is room, messages are kept again, and the next run reads back every whole one."""
    from flowpipe_nodes.sinks.mqtt import Outbox

    box = Outbox(small_disk / "pub.cam.jsonl")
    assert box.keep("t", "a", 1) == 0
    filler = small_disk / "filler"
    with open(filler, "wb", buffering=0) as f:  # the disk filled by something else
        with pytest.raises(OSError):
            while True:
                f.write(b"x" * 4096)
    assert box.keep("t", "b" * 5000, 1) == -1 and box.not_kept == 1
    filler.unlink()
    assert box.keep("t", "c", 1) == 2  # (number 1 went to the message not kept)
    assert box.close() == 2
    again = Outbox(small_disk / "pub.cam.jsonl")
    assert [p for _, (_, p, _) in again.left()] == ["a", "c"]
    again.close()


def test_an_outbox_is_one_process_s_and_is_written_again_with_what_is_left(tmp_path, monkeypatch) -> None:
    """A second holder of a stream's outbox is refused with one line; past ``COMPACT`` lines the file is
    written again with the undelivered messages alone, which the next holder gets back in order."""
    from flowpipe_nodes.sinks.mqtt import Outbox

    path = tmp_path / "pub.door.jsonl"
    box = Outbox(path)
    with pytest.raises(RuntimeError, match="held by another run"):
        Outbox(path)
    monkeypatch.setattr(Outbox, "COMPACT", 10)
    seqs = [box.keep("t", f"m{i}", 1) for i in range(20)]
    for seq in seqs[:-2]:
        box.delivered(seq)
    assert len(path.read_text().splitlines()) < 20  # written again on the way
    assert box.close() == 2
    again = Outbox(path)
    assert [p for _, (_, p, _) in again.left()] == ["m18", "m19"]
    again.close()


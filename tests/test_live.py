"""Streams added to and removed from a running graph: the others never pause, a removed stream's frames are
all accounted and its files closed, a dead camera ends only its own stream."""
from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import cv2
import pytest

from flowpipe import load_graph
from flowpipe.runtime import Runner

GRAPH = """
nodes:
  - {{id: cam, type: synthetic_source, template: true, config: {{count: 100000, width: 96, height: 64, realtime: true,
      fps: 60}}}}
  - {{id: hop, type: passthrough, inputs: {{in: cam}}}}
  - {{id: meta, type: jsonl, config: {{path: {tmp}/m.jsonl}}, inputs: hop}}
  - {{id: rec, type: video_writer, config: {{path: "{tmp}/{{stream}}.mp4"}}, inputs: {{frame: cam}}}}
"""


def _start(tmp_path: Path, text: str = GRAPH) -> tuple[Runner, threading.Thread, dict]:
    path = tmp_path / "g.yaml"
    path.write_text(text.format(tmp=tmp_path))
    runner = Runner(load_graph(str(path)))
    box: dict = {}
    t = threading.Thread(target=lambda: box.update(res=runner.run()))
    t.start()
    deadline = time.monotonic() + 20
    while not runner.running:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return runner, t, box


def _wait(cond, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline
        time.sleep(0.02)


def _frames_in(path: Path) -> int:
    cap = cv2.VideoCapture(str(path))
    n = 0
    while cap.read()[0]:
        n += 1
    cap.release()
    return n


def test_streams_come_and_go_while_the_graph_runs(tmp_path) -> None:
    runner, t, box = _start(tmp_path)
    live = runner.live
    live.add("lobby", config={"count": 90})
    live.add("door")
    _wait(lambda: runner.account.streams["door"]["out"] >= 30)
    lobby_before = runner.account.streams["lobby"]["out"]
    account = live.remove("door")
    assert account["stream"] == "door" and account["state"] == "removed" and account["in_flight"] == 0
    assert account["in"] == account["out"] > 30 and account["dropped"] == account["failed"] == 0
    assert _frames_in(tmp_path / "door.mp4") == account["out"]  # closed and playable while the graph runs
    _wait(lambda: runner.account.streams["lobby"]["out"] > lobby_before or lobby_before == 90)  # it goes on
    _wait(lambda: live.added["lobby"].state == "ended")  # a file-like stream ends on its own ...
    # ... its last frames out once the writer's wait for a next fragment is over (they say so: in_file false)
    _wait(lambda: runner.account.streams["lobby"]["out"] == 90)
    states = {s["stream"]: s for s in live.states()}
    assert states["lobby"]["state"] == "ended" and states["lobby"]["out"] == 90 and states["lobby"]["latency_ms"] >= 0
    live.add("door2", config={"count": 20})  # the graph keeps serving after streams ended and left
    _wait(lambda: live.added["door2"].state == "ended")
    assert live.remove("lobby")["out"] == 90
    with pytest.raises(ValueError, match=r"^stream 'bad': config\.count: Input should be a valid integer"):
        live.add("bad", config={"count": "lots"})
    with pytest.raises(ValueError, match=r"^a stream or node named 'hop' is already in the graph$"):
        live.add("hop")  # a node's name (a stream that ended, added again, takes its place: test_serve.py)
    with pytest.raises(ValueError, match=r"^no source named 'nope' in the graph$"):
        live.add("x", like="nope")
    with pytest.raises(KeyError, match="no stream named 'door'"):
        live.remove("door")  # removed already
    runner.stop()
    t.join(30)
    res = box["res"]
    assert res.ok, res.error
    assert res.frames["in"] == res.frames["out"] == account["out"] + 90 + 20
    lines = [json.loads(x) for x in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert sorted(r["frame"] for r in lines if r["stream"] == "lobby") == list(range(90))
    assert _frames_in(tmp_path / "door2.mp4") == 20
    assert "door" not in runner.account.streams and [a["stream"] for a in live.ended] == ["door", "lobby"]


def test_a_graph_without_template_takes_streams_like_its_sources(tmp_path) -> None:
    text = GRAPH.replace("template: true, ", "").replace("count: 100000", "count: 40")
    runner, t, box = _start(tmp_path, text)
    with pytest.raises(ValueError, match="already in the graph"):
        runner.live.add("cam")
    runner.live.add("more", like="cam", config={"count": 25, "realtime": False})
    t.join(30)  # both end on their own: the graph ends with its last stream
    res = box["res"]
    assert res.ok, res.error
    assert res.per_stream == {"cam": 40, "more": 25}


def _rtsp(port: int) -> subprocess.Popen:
    from test_sources_sinks import HERE, SYS_PY

    p = subprocess.Popen([SYS_PY, str(HERE / "rtsp_server.py"), str(port)], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    return p


def _have_rtsp_server() -> bool:
    from test_sources_sinks import _have_rtsp_server as have

    return have()


@pytest.mark.skipif(not _have_rtsp_server(), reason="gst-rtsp-server (scripts/setup.sh installs it) is missing")
def test_a_dead_camera_is_its_own_stream_s_end(tmp_path) -> None:
    """A camera that goes away: its stream is 'reconnecting' while the others go on; back, it runs again;
    gone for good, its stream alone fails, with its account, and the graph serves on."""
    from test_sources_sinks import _free_port

    text = """
nodes:
  - {{id: cam, type: video_source, template: true, config: {{uri: "rtsp://127.0.0.1:9/none", reconnect_attempts: 2,
      reconnect_backoff_s: 0.5, timeout_s: 2}}}}
  - {{id: hop, type: passthrough, inputs: {{in: cam}}}}
  - {{id: meta, type: jsonl, config: {{path: {tmp}/m.jsonl}}, inputs: hop}}
"""
    port = _free_port()
    srv = _rtsp(port)
    runner, t, box = _start(tmp_path, text)
    live = runner.live
    try:
        live.add("door", config={"uri": f"rtsp://127.0.0.1:{port}/live"})
        live.add("file", like="cam", config={"uri": "sample", "reconnect_attempts": 0})
        _wait(lambda: runner.account.streams["door"]["out"] > 20)
        srv.kill()
        srv.wait()
        _wait(lambda: {s["stream"]: s["state"] for s in live.states()}["door"] == "reconnecting")
        file_then = runner.account.streams["file"]["out"]
        srv = _rtsp(port)
        _wait(lambda: {s["stream"]: s for s in live.states()}["door"]["reconnects"] == 1)
        assert runner.account.streams["file"]["out"] > file_then  # the other stream never paused
        srv.kill()
        srv.wait()
        _wait(lambda: live.added["door"].state == "failed", timeout=40)
        assert "did not come back after 2 attempts" in (live.added["door"].error or "")
        assert runner.running and not runner.stop_event.is_set()  # the graph serves on
        srv = _rtsp(port)  # the camera is back: added again under its name, in the failed stream's place
        live.add("door", config={"uri": f"rtsp://127.0.0.1:{port}/live"})
        (gone,) = [a for a in live.ended if a["stream"] == "door"]
        assert gone["state"] == "failed" and gone["in_flight"] == 0 and gone["in"] > 20
        _wait(lambda: {s["stream"]: s["state"] for s in live.states()}["door"] == "running")
        account = live.remove("door")
        assert account["state"] == "removed" and account["in_flight"] == 0
    finally:
        srv.kill()
        runner.stop()
        t.join(30)
    res = box["res"]
    assert res.ok, res.error
    f = res.frames
    assert f["in"] == f["out"] + f["dropped"] + f["failed"]


def test_a_stream_removed_from_a_tracker_with_a_lookahead_gets_its_last_frames_out(tmp_path) -> None:
    """A tracker with a lookahead holds each stream's newest frames; a removed stream has no next frame to
    push them out: they go on after ``max_wait`` and the removal completes with every frame accounted."""
    text = GRAPH.replace("  - {{id: hop, type: passthrough, inputs: {{in: cam}}}}",
                         "  - {{id: face, type: test_one_face, inputs: {{frame: cam}}}}\n"
                         "  - {{id: hop, type: tracker, config: {{lookahead: 5, max_wait: 0.2}}, "
                         "inputs: {{detections: face}}}}")
    runner, t, box = _start(tmp_path, text)
    live = runner.live
    live.add("lobby")
    live.add("door")
    _wait(lambda: runner.account.streams["door"]["out"] >= 30)
    t0 = time.monotonic()
    account = live.remove("door")
    assert time.monotonic() - t0 < 5
    assert account["in"] == account["out"] > 30 and account["in_flight"] == 0
    lobby = runner.account.streams["lobby"]["out"]
    _wait(lambda: runner.account.streams["lobby"]["out"] > lobby + 10)  # the other stream goes on
    runner.stop()
    t.join(30)
    res = box["res"]
    assert res.ok, res.error
    assert res.frames["in"] == res.frames["out"]
    lines = [json.loads(x) for x in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert sorted(r["frame"] for r in lines if r["stream"] == "door") == list(range(account["out"]))

"""``flowpipe serve``: the REST API on a real graph (decode of a real clip, frames written), bad input answered
with one line and the service up, streams added and removed many times without leaking."""
from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from flowpipe.serve.api import create_app
from flowpipe.serve.instances import Instances

TEMPLATE = """# Cameras: decode, copy the frames into a video per stream and a JSON line per frame.
params:
  input: sample
  output: cams/{stream}.mp4
  metadata: cams/meta.jsonl
nodes:
  - {id: cam, type: video_source, config: {uri: "${params.input}", max_fps: 60, loop: -1, reconnect_attempts: 1,
      reconnect_backoff_s: 0.2, timeout_s: 2}}
  - {id: hop, type: passthrough, inputs: {in: cam}}
  - {id: meta, type: jsonl, config: {path: "${params.metadata}"}, inputs: hop}
  - {id: rec, type: video_writer, config: {path: "${params.output}"}, inputs: {frame: cam}}
"""


@pytest.fixture
def service(tmp_path):
    graphs = tmp_path / "graphs"
    graphs.mkdir()
    (graphs / "cams.yaml").write_text(TEMPLATE)
    (graphs / "broken.yaml").write_text("nodes: [")  # not a graph: not served
    media = tmp_path / "media"
    media.mkdir()
    from flowpipe.sample import sample_path

    (media / "clip.mp4").symlink_to(sample_path("sample"))
    instances = Instances([graphs], tmp_path / "out", media)
    with TestClient(create_app(instances)) as client:
        yield client, instances, tmp_path
    for inst in list(instances.instances.values()):
        instances.stop(inst)


def _wait(cond, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_start_add_watch_remove_stop(service) -> None:
    client, _instances, tmp = service
    assert [t["name"] for t in client.get("/pipelines").json()] == ["cams"]
    assert client.get("/pipelines/cams").json()["parameters"]["input"] == "sample"
    r = client.post("/pipelines/cams", json={"streams": [{"id": "door", "uri": "clip.mp4"}]})
    assert r.status_code == 201, r.text
    iid = r.json()["id"]
    r = client.post(f"/pipelines/{iid}/streams", json={"id": "yard", "uri": "sample", "options": {"max_fps": 30}})
    assert r.status_code == 201, r.text
    assert r.json()["stream"] == "yard" and r.json()["state"] == "running"

    def streams() -> dict:
        return {s["stream"]: s for s in client.get(f"/pipelines/{iid}/streams").json()}

    _wait(lambda: all(s["out"] > 20 for s in streams().values()))
    _wait(lambda: streams()["door"]["fps"] > 0)  # a rate is shown (how high is the machine's)
    got = streams()
    assert set(got) == {"door", "yard"} and got["door"]["latency_ms"] is not None
    _wait(lambda: client.get(f"/pipelines/{iid}/streams/door/preview.jpg").status_code == 200)
    jpeg = client.get(f"/pipelines/{iid}/streams/door/preview.jpg")
    assert jpeg.headers["content-type"] == "image/jpeg" and jpeg.content[:2] == b"\xff\xd8"
    yard = client.delete(f"/pipelines/{iid}/streams/yard").json()
    assert yard["state"] == "removed" and yard["in"] == yard["out"] > 20 and yard["in_flight"] == 0
    door_before = streams()["door"]["out"]
    _wait(lambda: streams()["door"]["out"] > door_before + 10)  # the other stream never paused
    status = client.get(f"/pipelines/{iid}/status").json()
    assert status["state"] == "RUNNING" and status["frames"]["out"] > 40
    assert [i["id"] for i in client.get("/pipelines/status").json()] == [iid]
    final = client.delete(f"/pipelines/{iid}").json()
    assert final["state"] == "ABORTED" and final["frames"]["in"] == final["frames"]["out"]
    folder = tmp / "out" / iid
    lines = [json.loads(x) for x in (folder / "cams" / "meta.jsonl").read_text().splitlines()]
    assert sum(1 for x in lines if x["stream"] == "yard") == yard["out"]
    import cv2

    cap = cv2.VideoCapture(str(folder / "cams" / "yard.mp4"))  # closed when the stream left: whole
    n = 0
    while cap.read()[0]:
        n += 1
    assert n == yard["out"]
    assert client.get(f"/pipelines/{iid}/status").status_code == 404


def test_a_stream_that_ended_is_added_again_in_its_place(service) -> None:
    """A camera whose stream ended (or failed) keeps its name until it is added again: then the new one takes
    its place, the old one's account kept, with no 409 and no DELETE first; it shows 0 fps while ended."""
    client, _instances, _tmp = service
    iid = client.post("/pipelines/cams", json={}).json()["id"]
    add = {"id": "once", "uri": "sample", "options": {"loop": 0, "max_fps": 200}}
    assert client.post(f"/pipelines/{iid}/streams", json=add).status_code == 201

    def once() -> dict:
        return next(s for s in client.get(f"/pipelines/{iid}/streams").json() if s["stream"] == "once")

    _wait(lambda: once()["state"] == "ended" and once()["out"] == once()["in"] > 0)  # (the writer held the last)
    assert once()["fps"] == 0.0
    r = client.post(f"/pipelines/{iid}/streams", json=add)
    assert r.status_code == 201, r.text
    assert r.json()["state"] == "running"
    _wait(lambda: once()["out"] > 0 and once()["state"] in ("running", "ended"))


def test_bad_input_is_one_line_and_the_service_stays_up(service) -> None:
    client, _instances, _tmp = service

    def err(r, status: int, text: str) -> None:
        assert r.status_code == status, r.text
        body = r.json()
        assert list(body) == ["error"] and "\n" not in body["error"] and text in body["error"], body

    err(client.post("/pipelines/nope", json={}), 404, "no pipeline template 'nope'; templates: cams")
    err(client.post("/pipelines/cams", content=b"{not json", headers={"content-type": "application/json"}), 400,
        "malformed JSON")
    err(client.post("/pipelines/cams", content=b"x" * 70000, headers={"content-type": "application/json"}), 413,
        "request body over 65536 bytes")
    err(client.post("/pipelines/cams", json={"parameters": {"colour": 1}}), 400, "has no parameter 'colour'")
    err(client.post("/pipelines/cams", json={"parameters": {"output": "../../etc/x.mp4"}}), 403,
        "leaves the output folder")
    err(client.post("/pipelines/cams", json={"parameters": {"metadata": "/var/x.jsonl"}}), 403,
        "leaves the output folder")
    err(client.post("/pipelines/cams", json={"surprise": 1}), 422, "surprise: Extra inputs are not permitted")
    r = client.post("/pipelines/cams", json={"parameters": {"output": 5}})  # a bad type, found in the graph
    err(r, 400, "cams.yaml:")
    assert str(_tmp) not in r.json()["error"]  # named by the template's file, never by the server's path
    iid = client.post("/pipelines/cams", json={}).json()["id"]  # the graph's own source runs
    add = f"/pipelines/{iid}/streams"
    err(client.post(add, json={"id": "a b", "uri": "sample"}), 422, "id: String should match pattern")
    err(client.post(add, json={"id": "x", "uri": "ftp://cam/1"}), 400, "URI scheme not served: 'ftp'")
    err(client.post(add, json={"id": "x", "uri": "rtsp://cam/1 2"}), 400, "malformed URI")
    err(client.post(add, json={"id": "x", "uri": "rtsp://"}), 400, "malformed URI 'rtsp://': expected scheme://host")
    err(client.post(add, json={"id": "x", "uri": "rtsp://cam:port/1"}), 400, "malformed URI")
    err(client.post(add, json={"id": "x", "uri": "../../etc/passwd"}), 403, "path outside the media folder")
    err(client.post(add, json={"id": "x", "uri": "missing.mp4"}), 404, "no file 'missing.mp4' in the media folder")
    err(client.post(add, json={"id": "x", "uri": "sample", "options": {"max_fps": "fast"}}), 400,
        "config.max_fps: Input should be a valid number")
    err(client.post(add, json={"id": "x", "uri": "sample", "like": "hop"}), 400, "node 'hop' is not a source")
    err(client.post(add, json={"id": "cam", "uri": "sample"}), 409, "already in the graph")
    err(client.delete(f"/pipelines/{iid}/streams/ghost"), 404, "has no added stream 'ghost'")
    err(client.get("/pipelines/feedface/status"), 404, "no instance 'feedface'")
    err(client.get(f"/pipelines/{iid}/streams/ghost/preview.jpg"), 404, f"instance {iid} has no stream 'ghost'; streams: ")
    err(client.get("/nowhere"), 404, "Not Found")
    assert client.get(f"/pipelines/{iid}/status").json()["state"] == "RUNNING"  # still up, still running
    # a start refused for one of its streams leaves nothing running, nor listed
    err(client.post("/pipelines/cams", json={"streams": [{"id": "d", "uri": "missing.mp4"}]}), 404, "no file")
    err(client.post("/pipelines/cams", json={"streams": [{"id": "d", "uri": "sample", "options": {"lop": 2}}]}),
        400, "config.lop: unknown key (did you mean 'loop'?); expected one of: uri, ")
    assert [i["id"] for i in client.get("/pipelines/status").json()] == [iid]
    assert client.get("/openapi.json").json()["paths"]["/pipelines/{iid}/streams"]["post"]["summary"] == "add a stream"


def test_a_token_guards_every_call_and_other_addresses_need_one(tmp_path) -> None:
    graphs = tmp_path / "g"
    graphs.mkdir()
    (graphs / "cams.yaml").write_text(TEMPLATE)
    with TestClient(create_app(Instances([graphs], tmp_path / "out"), token="s3cret")) as client:  # noqa: S106 - a test token
        assert client.get("/pipelines").status_code == 401
        assert client.get("/pipelines", headers={"Authorization": "Bearer nope"}).json() == {
            "error": "missing or wrong bearer token"}
        assert client.get("/pipelines", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        assert client.get("/").status_code == 200  # the page itself; its calls carry the token
    from flowpipe.cli import main

    env = os.environ.pop("FLOWPIPE_TOKEN", None)
    try:
        assert main(["serve", "--host", "0.0.0.0", "--graphs", str(graphs)]) == 2  # noqa: S104 - refused
    finally:
        if env is not None:
            os.environ["FLOWPIPE_TOKEN"] = env


def _fds() -> dict[str, str]:
    """This process's open fds and what each one is (a file's path, ``socket:[inode]``, ``pipe:[inode]``...)."""
    fds = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the listing's own fd, or one closed meanwhile
            pass
    return fds


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(x.split()[1]) for x in f if x.startswith("VmRSS:")) / 1024


def test_streams_named_in_the_request_each_record_a_file_with_their_name(service) -> None:
    """An output that names no ``{stream}``: with the streams given in the request, every stream's file carries
    its name (the first one's too), none the plain name."""
    client, _instances, tmp = service
    r = client.post("/pipelines/cams", json={"parameters": {"output": "rec.mp4"},
                                            "streams": [{"id": "cam1", "uri": "clip.mp4"},
                                                        {"id": "cam2", "uri": "clip.mp4"}]})
    assert r.status_code == 201, r.text
    iid = r.json()["id"]
    _wait(lambda: [s["out"] > 5 for s in client.get(f"/pipelines/{iid}/streams").json()] == [True, True])
    client.delete(f"/pipelines/{iid}")
    assert sorted(p.name for p in (tmp / "out" / iid).glob("*.mp4")) == ["rec-cam1.mp4", "rec-cam2.mp4"]


@pytest.mark.slow
def test_a_hundred_streams_come_and_go_without_leaking(service) -> None:
    """100 add/remove cycles on one running instance, each stream removed while its first frames are still on
    their way (in its recording's fragment not yet written), each accounted: fds, threads and memory back where
    they were."""
    client, instances, _tmp = service
    iid = client.post("/pipelines/cams", json={"parameters": {"output": "cams/{stream}.mp4"}}).json()["id"]
    inst = instances.get(iid)

    def cycle(i: int) -> None:
        sid = f"s{i}"
        r = client.post(f"/pipelines/{iid}/streams", json={"id": sid, "uri": "clip.mp4"})
        assert r.status_code == 201, r.text
        _wait(lambda: any(row["stream"] == sid and row["in"] >= 2 for row in inst.runner.live.states()))
        acct = client.delete(f"/pipelines/{iid}/streams/{sid}").json()
        assert acct["in"] == acct["out"] >= 2 and acct["in_flight"] == 0

    for i in range(10):  # warm-up: pools, codecs, thread pools reach their size
        cycle(i)
    fds, threads, rss = _fds(), threading.active_count(), _rss_mb()
    for i in range(10, 110):
        cycle(i)
    # threads of the last streams removed may still be on their way out, closing their files and sockets:
    # they go within seconds, or leak
    deadline = time.monotonic() + 10
    while (threading.active_count() > threads + 2 or len(_fds()) > len(fds) + 2) and time.monotonic() < deadline:
        time.sleep(0.1)
    now = _fds()
    assert len(now) <= len(fds) + 2, {fd: what for fd, what in now.items() if fds.get(fd) != what}
    names = sorted(t.name for t in threading.enumerate())
    assert threading.active_count() <= threads + 2, (threads, threading.active_count(), names)
    assert _rss_mb() < rss + 40, (rss, _rss_mb())
    assert not inst.runner.live.added and len(inst.runner.live.states()) == 1  # only the graph's own stream
    assert client.get(f"/pipelines/{iid}/status").json()["state"] == "RUNNING"


def test_an_instance_over_several_processes_takes_and_gives_back_streams(service) -> None:
    """``processes: 2``: streams added go to the process with the fewest, are watched and removed the same way."""
    client, instances, _tmp = service
    r = client.post("/pipelines/cams", json={"processes": 2, "streams": [{"id": "a", "uri": "clip.mp4"}]})
    assert r.status_code == 201, r.text
    iid = r.json()["id"]
    for sid in ("b", "c"):
        assert client.post(f"/pipelines/{iid}/streams", json={"id": sid, "uri": "sample"}).status_code == 201

    def streams() -> dict:
        return {s["stream"]: s for s in client.get(f"/pipelines/{iid}/streams").json()}

    _wait(lambda: len(streams()) == 3 and all(s["out"] > 10 for s in streams().values()))
    got = streams()
    assert sorted(s["shard"] for s in got.values()) == [0, 0, 1] or sorted(s["shard"] for s in got.values()) == [0, 1, 1]
    assert len({p for p in instances.get(iid).runner.pids}) == 2  # two shard processes, this one not among them
    _wait(lambda: client.get(f"/pipelines/{iid}/streams/b/preview.jpg").status_code == 200)
    acct = client.delete(f"/pipelines/{iid}/streams/b").json()
    assert acct["state"] == "removed" and acct["in"] == acct["out"] > 10 and "shard" in acct
    assert client.delete(f"/pipelines/{iid}/streams/b").status_code == 404
    assert client.post(f"/pipelines/{iid}/streams", json={"id": "a", "uri": "sample"}).status_code == 409
    final = client.delete(f"/pipelines/{iid}").json()
    assert final["frames"]["in"] == final["frames"]["out"] > 30


COUNTING = """# A face stand-in walking right, 1 px a frame, over and over: it crosses the line at x = 25 once a lap.
plugins: [fp_testnodes]
params:
  input: sample
nodes:
  - {id: cam, type: video_source, config: {uri: "${params.input}", max_fps: 60, loop: -1}}
  - {id: det, type: test_one_face, inputs: {frame: cam}}
  - {id: track, type: tracker, inputs: {detections: det.detections}}
  - id: an
    type: analytics
    config: {units: pixels, lines: {gate: {points: [[25, 0], [25, 200]]}}, rules: [{name: crossed, line: gate}],
             snapshots: events}
    inputs: {detections: track.detections}
  - id: rec
    type: video_writer
    config: {path: "cams/{stream}.mp4", gop_seconds: 0.2, clips: {path: clips, pre_s: 0.2, post_s: 0.2}}
    inputs: {frame: an.frame}
"""


def test_events_with_their_snapshot_and_clip_are_served_from_the_instance_folder(service) -> None:
    """An instance whose analytics raise an event a lap: ``/events`` lists them newest first, each with its
    snapshot and clip as paths this API serves (the files written inside the instance's folder, where the
    template's relative folders were confined); a path out of the folder is not served."""
    client, instances, tmp = service
    (tmp / "graphs" / "counting.yaml").write_text(COUNTING)
    assert "counting" in [t["name"] for t in client.get("/pipelines").json()]  # templates are read again
    iid = client.post("/pipelines/counting", json={}).json()["id"]
    _wait(lambda: len([e for e in client.get(f"/pipelines/{iid}/events").json() if e.get("clip")]) >= 2)
    events = client.get(f"/pipelines/{iid}/events").json()
    assert [e["rule"] for e in events][:2] == ["crossed", "crossed"] and events[0]["at"] >= events[1]["at"]
    e = next(e for e in events if e.get("clip"))
    assert e["snapshot"].startswith(f"/pipelines/{iid}/files/") and e["clip"].startswith(f"/pipelines/{iid}/files/")
    snap = client.get(e["snapshot"])
    assert snap.status_code == 200 and snap.headers["content-type"] == "image/jpeg" and snap.content[:2] == b"\xff\xd8"
    clip = client.get(e["clip"])
    assert clip.status_code == 200 and clip.headers["content-type"] == "video/mp4" and b"ftyp" in clip.content[:16]
    part = client.get(e["clip"], headers={"Range": "bytes=4-11"})  # as a browser's video element asks
    assert part.status_code == 206 and part.content == clip.content[4:12]
    folder = instances.get(iid).folder
    assert (folder / "events").is_dir() and (folder / "clips").is_dir()
    for bad in ("../../graphs/counting.yaml", "cams/../../x.mp4", "%2e%2e/%2e%2e/etc/passwd"):
        assert client.get(f"/pipelines/{iid}/files/{bad}").status_code == 404


def test_a_finished_instance_still_lists_its_events_and_its_time_stands_still(service) -> None:
    """The counting template over a clip played once: once the instance has completed, ``/events`` lists what
    it raised (its nodes are closed by then), and its status's elapsed time and rate no longer move."""
    client, _instances, tmp = service
    (tmp / "graphs" / "once.yaml").write_text(COUNTING.replace("loop: -1", "loop: 0"))
    assert "once" in [t["name"] for t in client.get("/pipelines").json()]  # templates are read again
    r = client.post("/pipelines/once", json={})
    assert r.status_code == 201, r.text
    iid = r.json()["id"]
    _wait(lambda: client.get(f"/pipelines/{iid}/status").json()["state"] == "COMPLETED")
    events = client.get(f"/pipelines/{iid}/events?limit=200").json()
    assert len(events) >= 2 and {e["rule"] for e in events} == {"crossed"}, events
    first = client.get(f"/pipelines/{iid}/status").json()
    time.sleep(1.2)
    later = client.get(f"/pipelines/{iid}/status").json()
    assert (later["elapsed_s"], later["avg_fps"]) == (first["elapsed_s"], first["avg_fps"]) and first["avg_fps"] > 0
    assert client.get(f"/pipelines/{iid}/events?limit=200").json() == events


RETUNE = """# A face stand-in walking right, 1 px a frame, over and over: it crosses the gate at x = 25 once a lap.
plugins: [fp_testnodes]
params:
  input: sample
  gate: [[25, 0], [25, 200]]
  metadata: cams/{stream}.jsonl
nodes:
  - {id: cam, type: video_source, on_error: restart, config: {uri: "${params.input}", max_fps: 60, loop: -1}}
  - {id: det, type: test_one_face, inputs: {frame: cam}}
  - {id: track, type: tracker, inputs: {detections: det.detections}}
  - id: an
    type: analytics
    config: {units: pixels, lines: {gate: {points: "${params.gate}"}}, rules: [{name: crossed, line: gate}]}
    inputs: {detections: track.detections}
  - {id: meta, type: jsonl, config: {path: "${params.metadata}"}, inputs: an.frame}
"""


def _laps(client, iid: str, since: float = 0.0) -> dict[str, set[int]]:
    """Per stream, where in the walker's lap (its frame modulo 40) each crossing since ``since`` was."""
    got: dict[str, set[int]] = {}
    for e in client.get(f"/pipelines/{iid}/events?limit=200").json():
        if e["at"] > since:
            got.setdefault(e["stream"], set()).add(e["frame"] % 40)
    return got


def test_a_running_instance_s_line_is_moved_in_every_process_and_in_the_one_that_replaces_a_killed_one(
        service) -> None:
    """An instance over two processes counts a crossing a lap on each stream, as the walker passes x = 25
    (frame 18 of each lap of 40). Its gate is moved to x = 40 (PATCH parameters): every crossing after is
    where the walker passes the moved gate (frame 33 of each lap), in either process and in the process that
    replaces one killed after the move (it starts from the graph as changed). A parameter that sets a file,
    an unknown one and a bad value are refused in one line, and nothing changes."""
    import signal

    client, instances, tmp = service
    (tmp / "graphs" / "retune.yaml").write_text(RETUNE)
    client.get("/pipelines")
    r = client.post("/pipelines/retune", json={"processes": 2, "streams": [{"id": "a", "uri": "sample"},
                                                                         {"id": "b", "uri": "sample"}]})
    assert r.status_code == 201, r.text
    iid = r.json()["id"]

    _wait(lambda: set(_laps(client, iid)) == {"a", "b"})
    assert _laps(client, iid) == {"a": {18}, "b": {18}}
    params = {p["name"]: p for p in client.get(f"/pipelines/{iid}/parameters").json()}
    assert params["gate"]["tunable"] and params["gate"]["value"] == [[25, 0], [25, 200]]
    assert not params["metadata"]["tunable"] and "node 'meta' (jsonl) config.path" in params["metadata"]["fixed"]
    assert not params["input"]["tunable"]

    for body, status, words in (({"metadata": "x.jsonl"}, 409, "parameter 'metadata' cannot change while the "
                                  "instance runs: it sets node 'meta' (jsonl) config.path"),
                                 ({"nope": 1}, 400, "has no parameter 'nope'"),
                                 ({"gate": [[25, 0]]}, 400, "lines.gate.points")):
        bad = client.patch(f"/pipelines/{iid}/parameters", json={"parameters": body})
        assert bad.status_code == status and words in bad.json()["error"], bad.text
        assert "\n" not in bad.json()["error"]
    r = client.patch(f"/pipelines/{iid}/parameters", json={"parameters": {"gate": [[40, 0], [40, 200]]}})
    assert r.status_code == 200, r.text
    moved = time.time()
    assert {p["name"]: p["value"] for p in r.json()}["gate"] == [[40, 0], [40, 200]]
    inst = instances.get(iid)
    victim = inst.runner.shards[0]  # type: ignore[attr-defined]
    os.kill(victim.pid, signal.SIGKILL)

    def running_again() -> bool:
        states = {s["stream"]: s for s in client.get(f"/pipelines/{iid}/streams").json()}
        return all(states.get(s, {}).get("state") == "running" for s in ("a", "b"))

    _wait(lambda: len(inst.runner.shards) == 3 and running_again())  # type: ignore[attr-defined]
    out_at_restart = {s["stream"]: s["out"] for s in client.get(f"/pipelines/{iid}/streams").json()}
    _wait(lambda: all(s["out"] > out_at_restart[s["stream"]] + 120
                      for s in client.get(f"/pipelines/{iid}/streams").json()))  # three laps each, at least
    assert _laps(client, iid, since=moved + 0.5) == {"a": {33}, "b": {33}}
    client.delete(f"/pipelines/{iid}")


def test_one_camera_s_own_line_moves_alone(service) -> None:
    """Two cameras in one instance. Camera b's gate is moved for b alone (PATCH parameters with its stream):
    b's crossings are at its own gate (frame 33 of each lap), a's where they were (18). The gate moved for
    every camera after moves a's (to x = 30: frame 23) and leaves b's own; null gives b the instance's again,
    and a camera removed takes its own with it (added again under its id, it counts on the instance's). A
    stream the instance has not, and a malformed line, are refused in one line."""
    client, _, tmp = service
    (tmp / "graphs" / "retune.yaml").write_text(RETUNE)
    client.get("/pipelines")
    r = client.post("/pipelines/retune", json={"streams": [{"id": "a", "uri": "sample"}, {"id": "b", "uri": "sample"}]})
    assert r.status_code == 201, r.text
    iid = r.json()["id"]
    _wait(lambda: set(_laps(client, iid)) == {"a", "b"})
    assert _laps(client, iid) == {"a": {18}, "b": {18}}

    def moved_for(body: dict[str, Any]) -> float:
        r = client.patch(f"/pipelines/{iid}/parameters", json=body)
        assert r.status_code == 200, r.text
        at = time.time()
        _wait(lambda: all(len([e for e in client.get(f"/pipelines/{iid}/events?limit=200").json()
                               if e["at"] > at + 0.5 and e["stream"] == s]) >= 2 for s in ("a", "b")))
        return at

    at = moved_for({"parameters": {"gate": [[40, 0], [40, 200]]}, "stream": "b"})
    assert _laps(client, iid, since=at + 0.5) == {"a": {18}, "b": {33}}
    own = {p["name"]: p for p in client.get(f"/pipelines/{iid}/parameters?stream=b").json()}
    assert own["gate"]["value"] == [[40, 0], [40, 200]] and own["gate"]["own"] and own["gate"]["per_stream"]
    assert not own["metadata"]["per_stream"]
    every = {p["name"]: p for p in client.get(f"/pipelines/{iid}/parameters").json()}
    assert every["gate"]["value"] == [[25, 0], [25, 200]]
    at = moved_for({"parameters": {"gate": [[30, 0], [30, 200]]}})
    assert _laps(client, iid, since=at + 0.5) == {"a": {23}, "b": {33}}
    at = moved_for({"parameters": {"gate": None}, "stream": "b"})  # b counts on the instance's gate again
    assert _laps(client, iid, since=at + 0.5) == {"a": {23}, "b": {23}}
    moved_for({"parameters": {"gate": [[40, 0], [40, 200]]}, "stream": "b"})
    assert client.delete(f"/pipelines/{iid}/streams/b").status_code == 200  # its own gate goes with it
    assert client.post(f"/pipelines/{iid}/streams", json={"id": "b", "uri": "sample"}).status_code == 201
    at = moved_for({"parameters": {"gate": [[30, 0], [30, 200]]}})
    assert _laps(client, iid, since=at + 0.5) == {"a": {23}, "b": {23}}
    for body, status, words in (({"parameters": {"gate": [[40, 0], [40, 200]]}, "stream": "nope"}, 404,
                                 "has no stream 'nope'; streams: a, b"),
                                ({"parameters": {"gate": [[40, 0]]}, "stream": "b"}, 400, "lines.gate.points")):
        bad = client.patch(f"/pipelines/{iid}/parameters", json=body)
        assert bad.status_code == status and words in bad.json()["error"], bad.text
    client.delete(f"/pipelines/{iid}")


def test_what_a_stopped_instance_could_not_publish_waits_for_the_template_s_next_instance(service) -> None:
    """An MQTT outbox is the template's with its parameters, not the instance's: an instance run while the
    broker is away keeps every frame's message under ``state/TEMPLATE/``; the next instance started the same
    way opens the same file and adds its own after them, none sent (the broker still away), so nothing is
    lost between instances. Started on other inputs, two instances run at once, each with its own outbox."""
    import socket

    client, instances, tmp = service
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there: the broker is away
    (tmp / "graphs" / "publish.yaml").write_text(f"""
plugins: [fp_testnodes]
params: {{input: sample}}
nodes:
  - {{id: cam, type: video_source, config: {{uri: "${{params.input}}", every: 10}}}}
  - {{id: det, type: test_one_face, inputs: {{frame: cam}}}}
  - {{id: pub, type: mqtt, config: {{port: {port}, topic: "o/{{stream}}", connect_timeout_s: 0.5,
      require_connection: false, outbox: outbox}}, inputs: {{detections: det.detections}}}}
""")
    client.get("/pipelines")
    box = instances.state_of("publish", {"input": "sample"}) / "outbox" / "pub.cam.jsonl"
    for n in (15, 30):  # the sample's 150 frames, every 10th
        r = client.post("/pipelines/publish", json={})
        assert r.status_code == 201, r.text
        iid = r.json()["id"]
        _wait(lambda: client.get(f"/pipelines/{iid}/status").json()["state"] == "COMPLETED")  # noqa: B023
        kept = [json.loads(line) for line in box.read_text().splitlines()]
        assert len(kept) == n and not any("a" in k for k in kept)  # every message kept, none delivered
        assert not (instances.output_dir / iid / "outbox").exists()
        client.delete(f"/pipelines/{iid}")
    # another input is another pipeline: its outbox is its own, and two such instances run at once
    (tmp / "media" / "other.mp4").symlink_to(tmp / "media" / "clip.mp4")
    started = [client.post("/pipelines/publish", json={"parameters": {"input": clip}}) for clip in
               ("clip.mp4", "other.mp4")]
    assert [r.status_code for r in started] == [201, 201], [r.text for r in started]
    for r in started:
        _wait(lambda: client.get(f"/pipelines/{r.json()['id']}/status").json()["state"] == "COMPLETED")  # noqa: B023
    assert len(box.read_text().splitlines()) == 30
    assert sorted(len(f.read_text().splitlines()) for f in (instances.output_dir / "state" / "publish").glob(
        "*/outbox/pub.cam.jsonl")) == [15, 15, 30]


def test_a_camera_s_values_read_back_as_its_template_gives_them(service) -> None:
    """A template whose own ``streams`` entry gives camera a its gate: read for camera a, the gate parameter
    is that line (``template``), not the instance's, which camera b has; once a's own, it reads as such."""
    client, _, tmp = service
    text = RETUNE.replace('lines: {gate: {points: "${params.gate}"}}', 'lines: {gate: {points: "${params.gate}"}}, '
                          "streams: {a: {lines: {gate: {points: [[40, 0], [40, 200]]}}}}")
    assert "streams: {a:" in text
    (tmp / "graphs" / "by_camera.yaml").write_text(text)
    client.get("/pipelines")
    r = client.post("/pipelines/by_camera", json={"streams": [{"id": "a", "uri": "sample"}, {"id": "b", "uri": "sample"}]})
    assert r.status_code == 201, r.text
    iid = r.json()["id"]

    def gate(stream: str) -> dict[str, Any]:
        got = {p["name"]: p for p in client.get(f"/pipelines/{iid}/parameters?stream={stream}").json()}
        return {k: got["gate"][k] for k in ("value", "own", "template", "per_stream")}

    assert gate("a") == {"value": [[40, 0], [40, 200]], "own": False, "template": True, "per_stream": True}
    assert gate("b") == {"value": [[25, 0], [25, 200]], "own": False, "template": False, "per_stream": True}
    r = client.patch(f"/pipelines/{iid}/parameters", json={"parameters": {"gate": [[30, 0], [30, 200]]}, "stream": "a"})
    assert r.status_code == 200, r.text
    assert gate("a") == {"value": [[30, 0], [30, 200]], "own": True, "template": False, "per_stream": True}
    client.delete(f"/pipelines/{iid}")


def test_a_camera_s_own_line_is_the_node_s_line_with_its_own_points() -> None:
    """The analytics node's ``streams`` as a camera's own values rebuild it: the template's own entry for a
    camera keeps its other lines and each line's count; a parameter that lands on two lines moves both."""
    from flowpipe.graph import load_graph
    from flowpipe.graph.load import parameter_uses, parse_yaml
    from flowpipe.serve.instances import _own_shapes, shapes_of

    text = RETUNE.replace("units: pixels, lines: {gate: {points: \"${params.gate}\"}}", (
        'units: pixels, lines: {gate: {points: "${params.gate}", count: each_way}, exit: {points: "${params.gate}"}}, '
        "streams: {c: {lines: {side: {points: [[0, 5], [60, 5]]}}}}"))
    assert "streams: {c:" in text
    spec = load_graph("t.yaml", {}, text=text)
    uses = parameter_uses(parse_yaml(text, "t.yaml"))
    assert shapes_of(spec, uses, "gate") == [("an", "lines", "gate", "points"), ("an", "lines", "exit", "points")]
    assert isinstance(shapes_of(spec, uses, "metadata"), str)
    got = _own_shapes(spec, "an", uses, {"c": {"gate": [[40, 0], [40, 200]]}, "b": {"gate": [[9, 0], [9, 9]]}})
    assert got["c"]["lines"]["side"]["points"] == ((0.0, 5.0), (60.0, 5.0))  # the template's own line stays
    assert got["c"]["lines"]["gate"] == {"points": [[40, 0], [40, 200]], "count": "each_way", "back": 1.0,
                                         "same": None, "same_within": 1.0}
    assert got["c"]["lines"]["exit"] == {"points": [[40, 0], [40, 200]], "count": "first", "back": 1.0,
                                         "same": None, "same_within": 1.0}
    assert got["b"]["lines"]["gate"]["points"] == [[9, 0], [9, 9]] and "side" not in got["b"]["lines"]


def test_what_can_change_while_a_shipped_graph_runs() -> None:
    """The people counter's zone, line, rules and thresholds can change while it runs, and say which shape
    they draw; its model, device and files cannot, each saying which node's field it sets."""
    from pathlib import Path

    from flowpipe.graph import load_graph
    from flowpipe.serve.instances import find_templates, shape_of, why_fixed

    t = find_templates([Path(__file__).resolve().parents[1] / "graphs"])["people_count"]
    spec = load_graph(str(t.path))
    tunable = {p for p in t.params if why_fixed(spec, t.uses, p) is None}
    assert tunable == {"counted", "score", "candidates", "reach", "line", "count", "same", "zone", "crowd", "crowd_for",
                       "dwell"}
    assert why_fixed(spec, t.uses, "model") == ("it sets node 'detect' (inference) config.model; start a new "
                                                  "instance with it")
    assert why_fixed(spec, t.uses, "analytics") == "it sets 'enabled' of node 'analytics'"
    assert (shape_of(t.params["line"]), shape_of(t.params["zone"]), shape_of(t.params["classes"])) == (
        "line", "polygon", None)


def test_a_change_made_while_a_replacement_process_opens_reaches_it(service) -> None:
    """A process of the instance is killed; while its replacement is still opening (started from the graph
    as it was), the gate is moved: the replacement is given the change as it starts, so its stream's
    crossings are at the moved gate too (frame 33 of each lap, not 18)."""
    import signal

    client, instances, tmp = service
    (tmp / "graphs" / "retune.yaml").write_text(RETUNE.replace(  # a replacement opens 3 s late
        "  - {id: det, type: test_one_face, inputs: {frame: cam}}",
        "  - {id: slow, type: test_slow_restart, inputs: {in: cam}}\n"
        "  - {id: det, type: test_one_face, inputs: {frame: slow}}"))
    client.get("/pipelines")
    r = client.post("/pipelines/retune", json={"processes": 2, "streams": [{"id": "a", "uri": "sample"},
                                                                         {"id": "b", "uri": "sample"}]})
    assert r.status_code == 201, r.text
    iid = r.json()["id"]
    inst = instances.get(iid)
    run = inst.runner
    _wait(lambda: len({e["stream"] for e in client.get(f"/pipelines/{iid}/events").json()}) == 2)
    os.kill(run.shards[0].pid, signal.SIGKILL)  # type: ignore[attr-defined]
    _wait(lambda: len(run.shards) == 3, timeout=30)  # type: ignore[attr-defined]
    replacement = run.shards[2]  # type: ignore[attr-defined]
    r = client.patch(f"/pipelines/{iid}/parameters", json={"parameters": {"gate": [[40, 0], [40, 200]]}})
    assert r.status_code == 200, r.text
    assert not replacement.opened and replacement.version < run.version  # type: ignore[attr-defined]
    moved = time.time()
    def both_running() -> dict[str, int] | None:  # each stream's frames out, once both are listed and running
        listed = client.get(f"/pipelines/{iid}/streams").json()
        ok = {s["stream"] for s in listed if s["state"] == "running"} == {"a", "b"}
        return {s["stream"]: s["out"] for s in listed} if ok else None

    _wait(lambda: replacement.opened and both_running() is not None)  # type: ignore[attr-defined]
    start = both_running()
    assert start is not None
    _wait(lambda: all(s["out"] > start[s["stream"]] + 120 for s in client.get(f"/pipelines/{iid}/streams").json()))
    assert _laps(client, iid, since=moved + 0.5) == {"a": {33}, "b": {33}}
    client.delete(f"/pipelines/{iid}")


def test_template_descriptions_are_whole_sentences_of_the_opening_comment() -> None:
    """``GET /pipelines`` describes each shipped graph by its opening comment's first paragraph, cut after a
    whole sentence, never mid-word."""
    from pathlib import Path

    from flowpipe.serve.instances import find_templates

    found = find_templates([Path(__file__).resolve().parent.parent / "graphs"])
    assert {"face_blur", "people_count", "vehicle_count"} <= set(found)
    for t in found.values():
        assert t.description.endswith(".") and 20 < len(t.description) <= 400, (t.name, t.description)
    assert found["passthrough"].description == ("The smallest useful graph: synthetic frames through one "
                                                "pass-through stage into a sink.")


def test_a_restarted_server_comes_back_with_its_pipelines_and_cameras(service) -> None:
    """What runs is saved as it changes (``OUTPUT_DIR/instances.json``); a server that goes down keeps it, and the
    next one on the folder starts each pipeline again under its id, with its parameters and the cameras added to
    it (their options too), and without the ones removed."""
    client, instances, tmp = service
    r = client.post("/pipelines/cams", json={"parameters": {"metadata": "cams/m.jsonl"},
                                             "streams": [{"id": "door", "uri": "clip.mp4"}]})
    assert r.status_code == 201, r.text
    iid = r.json()["id"]
    for sid, opts in (("yard", {"max_fps": 30}), ("gate", {})):
        r = client.post(f"/pipelines/{iid}/streams", json={"id": sid, "uri": "sample", "options": opts})
        assert r.status_code == 201, r.text
    assert client.delete(f"/pipelines/{iid}/streams/gate").status_code == 200
    saved = json.loads((tmp / "out" / "instances.json").read_text())
    assert [(s["id"], s["template"], sorted(x["id"] for x in s["streams"])) for s in saved] == \
        [(iid, "cams", ["door", "yard"])]
    instances.closing = True  # the server goes down: its pipelines stop, and stay saved
    for inst in list(instances.instances.values()):
        instances.stop(inst)
    assert json.loads((tmp / "out" / "instances.json").read_text()) == saved
    again = Instances(instances.folders, tmp / "out", tmp / "media")
    try:
        (inst,) = again.restore()
        assert inst.id == iid and inst.template == "cams" and inst.parameters["metadata"] == "cams/m.jsonl"
        _wait(lambda: {s["stream"]: s["state"] for s in inst.streams()} == {"door": "running", "yard": "running"})
        assert inst.added["yard"]["options"] == {"max_fps": 30}
    finally:
        for i in list(again.instances.values()):
            again.stop(i)
    assert json.loads((tmp / "out" / "instances.json").read_text()) == []  # stopped by hand: not restored


def _serve_command(tmp_path: Path, graphs: Path | None = None, token: str | None = None) -> tuple[list[str], Any, Any]:
    """The real ``flowpipe serve`` on a free loopback port over ``graphs`` (default: a folder holding TEMPLATE),
    its requests carrying ``token``: its command line, ``call(path, body=None)`` (JSON over HTTP) and
    ``up(process)`` (waits until it answers)."""
    import socket
    import subprocess
    import sys
    import urllib.request

    if graphs is None:
        graphs = tmp_path / "graphs"
        graphs.mkdir(exist_ok=True)
        (graphs / "cams.yaml").write_text(TEMPLATE)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cli = [sys.executable, "-m", "flowpipe.cli", "serve", "--port", str(port), "--graphs", str(graphs),
           "--output-dir", str(tmp_path / "out")]
    base = f"http://127.0.0.1:{port}"
    auth = {"Authorization": f"Bearer {token}"} if token else {}

    def call(path: str, body: Any = None) -> Any:
        req = urllib.request.Request(base + path, data=None if body is None else json.dumps(body).encode(),  # noqa: S310
                                     headers={"Content-Type": "application/json", **auth})
        with urllib.request.urlopen(req, timeout=30) as r:  # noqa: S310 - http on loopback
            return json.loads(r.read())

    def up(srv: subprocess.Popen) -> None:
        def answers() -> bool:
            assert srv.poll() is None, srv.stderr.read() if srv.stderr else ""
            try:
                call("/pipelines")
                return True
            except OSError:
                return False
        _wait(answers, 60)

    return cli, call, up


def test_flowpipe_serve_killed_with_sigterm_and_started_again_runs_its_pipelines_again(tmp_path) -> None:
    """The real command: a pipeline with a camera started over HTTP; SIGTERM (a host shutting down); the same
    command again on the same folder answers with the pipeline, under its id, and its camera running."""
    import signal
    import subprocess

    cli, call, up = _serve_command(tmp_path)

    srv = subprocess.Popen(cli, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        up(srv)
        iid = call("/pipelines/cams", {"streams": [{"id": "door", "uri": "sample"}]})["id"]
    finally:
        srv.send_signal(signal.SIGTERM)
        srv.wait(60)
    srv = subprocess.Popen(cli, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        up(srv)
        _wait(lambda: [(i["id"], i["state"]) for i in call("/pipelines/status")] == [(iid, "RUNNING")], 60)
        _wait(lambda: [(s["stream"], s["state"]) for s in call(f"/pipelines/{iid}/streams")] == [("door", "running")])
    finally:
        srv.send_signal(signal.SIGTERM)
        srv.wait(60)


def test_flowpipe_serve_killed_with_sigkill_restores_both_pipelines_and_their_records_go_on(tmp_path) -> None:
    """Two pipelines, a camera each, and ``kill -9`` (a host that loses power): the same command again brings
    both back under their ids, running, and each camera's records go on after the last frame its file held,
    none written twice. What runs is saved where ``--state`` says, readable by its user alone, and holds no
    secret: not the token, nor a camera's password, whether written into its URI (that camera is saved
    without it and not restored, the log saying why) or given by reference to the server's environment
    (``{FLOWPIPE_CAM_GATE}``: saved as the reference, restored, never shown by the API)."""
    import signal
    import subprocess

    token = "t0ken-s3cret"  # noqa: S105 - a test token
    cli, call, up = _serve_command(tmp_path, token=token)
    state = tmp_path / "conf" / "serve.json"
    cli += ["--state", str(state)]
    env = {**os.environ, "FLOWPIPE_TOKEN": token, "FLOWPIPE_CAM_GATE": "pa55word"}
    gate = "rtsp://admin:{FLOWPIPE_CAM_GATE}@127.0.0.1:9/cam"  # (nothing answers there: the cameras fail)

    def records() -> dict[str, list[tuple[str, int]]]:
        out = {}
        for path in sorted((tmp_path / "out").rglob("meta.jsonl")):
            lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            out[path.relative_to(tmp_path / "out").parts[0]] = [(r["stream"], r["frame"]) for r in lines]
        return out

    srv = subprocess.Popen(cli, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        up(srv)
        door, yard = (call("/pipelines/cams", {"streams": [{"id": cam, "uri": "sample"}]})["id"]
                      for cam in ("door", "yard"))
        ids = sorted((door, yard))
        for sid, uri in (("vault", "rtsp://admin:hunter2@127.0.0.1:9/cam"), ("gate", gate)):
            call(f"/pipelines/{door}/streams", {"id": sid, "uri": uri})
        assert {s["stream"]: s["uri"] for s in call(f"/pipelines/{door}/streams")}["gate"] == gate
        _wait(lambda: len(records()) == 2 and all(len(r) >= 40 for r in records().values()), 60)
    finally:
        srv.send_signal(signal.SIGKILL)
        srv.wait(60)
    saved = state.read_text()
    assert not (tmp_path / "out" / "instances.json").exists() and state.stat().st_mode & 0o777 == 0o600
    assert all(secret not in saved for secret in (token, "hunter2", "pa55word")), saved
    streams = {s["id"]: s for i in json.loads(saved) for s in i["streams"]}
    assert streams["vault"]["uri"] == "rtsp://admin@127.0.0.1:9/cam" and streams["vault"]["unsaved"] is True
    assert streams["gate"]["uri"] == gate
    before = records()
    for path in (tmp_path / "out").rglob("meta.jsonl"):  # the last record marked: a file started again loses it
        last = json.loads(path.read_text().splitlines()[-1])
        with path.open("a") as f:
            f.write(json.dumps(dict(last, kept=True)) + "\n")
    srv = subprocess.Popen(cli, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        up(srv)
        _wait(lambda: sorted((i["id"], i["state"]) for i in call("/pipelines/status")) ==
              [(iid, "RUNNING") for iid in ids], 60)
        assert sorted(s["stream"] for s in call(f"/pipelines/{door}/streams")) == ["door", "gate"]
        _wait(lambda: all(len(records()[iid]) >= len(before[iid]) + 40 for iid in ids), 60)
    finally:
        srv.send_signal(signal.SIGTERM)
        srv.wait(60)
    assert f"instance {door} (cams): stream vault not restored: its URI's password was not saved" in \
        (srv.stderr.read() if srv.stderr else "")
    after = records()
    for iid in ids:
        got = after[iid]
        n = len(before[iid])
        assert got[:n] == before[iid] and got[n] == before[iid][-1], got[n - 2:n + 2]  # kept, with the mark
        rest = got[n + 1:]  # after the restart: on from the frame after the last one recorded, none twice
        assert rest and rest[0][1] == before[iid][-1][1] + 1 and len(set(got[:n] + rest)) == len(got) - 1, rest[:3]
        marked = [json.loads(line) for line in next((tmp_path / "out" / iid).rglob("meta.jsonl")).read_text()
                  .splitlines() if line.strip()]
        assert marked[n].get("kept") is True  # the file went on, not started again


def test_a_state_file_that_is_not_one_serve_wrote_is_refused_in_one_line_and_kept(tmp_path, capsys) -> None:
    """A state file cut short (the end of a document lost), garbage, or JSON of another shape: ``flowpipe
    serve`` does not start (exit 2), says so in one line naming the file and what to do, and leaves the file as
    it was (what serve writes itself is never torn: it goes to a temporary file beside it, synced, and is
    renamed over the last). An event index that is no database is refused alike."""
    from flowpipe.cli import main

    graphs = tmp_path / "graphs"
    graphs.mkdir()
    (graphs / "cams.yaml").write_text(TEMPLATE)
    whole = json.dumps([{"id": "0badcafe", "template": "cams", "parameters": {}, "streams": []}], indent=1)
    for name, text, words in (("torn.json", whole[: len(whole) // 2], "not JSON (Unterminated string"),
                              ("instances.json", "\x00\x17garbage", "not JSON (Expecting value at line 1 column 1)"),
                              ("shape.json", '{"id": "0badcafe"}', "not a list of instances")):
        path = tmp_path / "out" / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        state = [] if name == "instances.json" else ["--state", str(path)]  # (the default: in the output folder)
        cli = ["serve", "--graphs", str(graphs), "--output-dir", str(tmp_path / "out"), *state]
        assert main(cli) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"error: {path}: ") and "\n" not in err, err
        assert words in err and err.endswith("move it away, or --fresh to start with no pipeline (and write it anew)")
        assert path.read_text() == text
    index = tmp_path / "elsewhere" / "events.sqlite"  # the event index: one line too
    index.parent.mkdir()
    index.write_bytes(b"not a database " * 10)
    assert main(["serve", "--graphs", str(graphs), "--output-dir", str(index.parent)]) == 2
    assert capsys.readouterr().err.strip() == (f"error: {index}: file is not a database; expected the event index "
                                               "flowpipe serve makes (move it away: a new one is made)")


def test_serve_on_a_folder_with_no_templates_warns_and_a_body_that_is_not_json_is_400(tmp_path) -> None:
    """The real ``flowpipe serve`` over an empty folder: a WARNING names the folder and ``--graphs DIR``. A body
    that is not JSON gets 400, whatever its content type says or without one (as every HTTP client may send
    it), and a request with no body where one is needed too; JSON of another shape is 422."""
    import http.client
    import signal
    import subprocess

    empty = tmp_path / "nothing_here"
    empty.mkdir()
    cli, call, up = _serve_command(tmp_path, graphs=empty)
    srv = subprocess.Popen(cli, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        up(srv)
        assert call("/pipelines") == []
        port = int(cli[cli.index("--port") + 1])
        for body, headers, status, words in (
                (b"{not json", {}, 400, "malformed JSON: Expecting property name enclosed in double quotes"),
                (b"id=door&uri=sample", {"Content-Type": "application/x-www-form-urlencoded"}, 400, "malformed JSON"),
                (b"\xff\xfe", {"Content-Type": "application/json"}, 400, "malformed JSON"),
                (b"", {}, 400, "no request body; expected a JSON object"),
                (b"[1, 2]", {}, 422, "request body: Input should be a valid dictionary")):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("POST", "/pipelines/cams", body=body, headers=headers)  # no content type unless given
            r = conn.getresponse()
            got = json.loads(r.read())
            conn.close()
            assert r.status == status and list(got) == ["error"] and words in got["error"], (body, r.status, got)
    finally:
        srv.send_signal(signal.SIGTERM)
        srv.wait(60)
    log = srv.stderr.read() if srv.stderr else ""
    assert f"WARNING flowpipe: no graph templates in {empty} (a template is a graph file, NAME.yaml, that flowpipe " \
           "validate passes): --graphs DIR serves those in DIR" in log, log


def test_events_a_shipped_graph_raises_are_indexed_found_by_each_filter_and_kept_after_kill_9(tmp_path) -> None:
    """graphs/people_count.yaml through the real ``flowpipe serve`` over 40 frames of the street clip (a man on
    a bike crosses the line; the zone made the whole picture: occupied, someone staying), two instances, three
    cameras. ``GET /events`` lists every event they raised once, newest first, its snapshot named as the
    instance's own events name it; each filter (instance, stream, kind, rule, after and before in seconds or
    ISO 8601, limit) gives exactly the events that match, fewer than all. After ``kill -9``, the server started
    again (``--fresh``: no pipeline runs) serves the same events, and their snapshots."""
    import signal
    import subprocess
    import urllib.request
    from datetime import datetime, timezone
    from urllib.parse import urlencode

    import cv2

    from flowpipe.sample import sample_path

    media = tmp_path / "media"
    media.mkdir()
    cap, clip = cv2.VideoCapture(str(sample_path("sample-street"))), None
    for i in range(58):
        ok, frame = cap.read()
        assert ok
        if i >= 18:
            clip = clip or cv2.VideoWriter(str(media / "street.mp4"), cv2.VideoWriter_fourcc(*"mp4v"), 25,
                                           (frame.shape[1], frame.shape[0]))
            clip.write(frame)
    assert clip is not None
    clip.release()
    graphs = tmp_path / "graphs"  # the shipped graph alone: the server starts sooner than over every one
    graphs.mkdir()
    (graphs / "people_count.yaml").write_bytes((Path(__file__).resolve().parents[1] / "graphs" / "people_count.yaml")
                                               .read_bytes())
    cli, call, up = _serve_command(tmp_path, graphs=graphs)
    cli += ["--media-dir", str(media)]
    log = (tmp_path / "serve.log").open("w")
    base = f"http://127.0.0.1:{cli[cli.index('--port') + 1]}"

    def jpeg(path: str) -> bytes:
        with urllib.request.urlopen(base + path, timeout=30) as r:  # noqa: S310 - http on loopback
            assert r.headers["content-type"] == "image/jpeg"
            return bytes(r.read())

    def key(iid: str, e: dict[str, Any]) -> tuple[str, str, str, str]:
        return iid, e["stream"], e["id"], e["state"]

    params = {"zone": [[0, 0], [1, 0], [1, 1], [0, 1]], "crowd": 1, "crowd_for": 0.0, "dwell": 0.5, "device": "CPU",
              "line": [[0.5, 0.0], [0.5, 1.0]]}  # down the middle, as the street clip's crossings were marked
    srv = subprocess.Popen(cli, stdout=subprocess.DEVNULL, stderr=log)
    try:
        up(srv)
        x, y = (call("/pipelines/people_count", {"parameters": params, "streams": [
            {"id": cam, "uri": "street.mp4"} for cam in cams]})["id"] for cams in (["a", "b"], ["c"]))
        _wait(lambda: [(s["state"], s["in"], s["out"]) for iid in (x, y) for s in call(f"/pipelines/{iid}/streams")]
              == [("ended", 40, 40)] * 3, 120)
        raised = {key(iid, e): e.get("snapshot") for iid in (x, y) for e in call(f"/pipelines/{iid}/events?limit=200")}
        _wait(lambda: {key(e["instance"], e) for e in call("/events?limit=1000")} == set(raised))
        every = call("/events?limit=1000")
        assert len(every) == len(raised) and {key(e["instance"], e): e["snapshot"] for e in every} == raised
        assert [e["at"] for e in every] == sorted((e["at"] for e in every), reverse=True)
        assert {e["kind"] for e in every} == {"crossing", "occupancy", "dwell"}
        for where in ({"instance": x}, {"instance": y}, {"stream": "c"}, {"kind": "crossing"}, {"rule": "staying"},
                      {"instance": x, "stream": "b", "kind": "occupancy"}):
            got = call(f"/events?{urlencode({**where, 'limit': 1000})}")
            assert got == [e for e in every if all(e[k] == v for k, v in where.items())], where
            assert 0 < len(got) < len(every), where
        ats = sorted({e["at"] for e in every})
        mid = (ats[len(ats) // 2 - 1] + ats[len(ats) // 2]) / 2
        iso = datetime.fromtimestamp(mid, timezone.utc).isoformat()
        assert call(f"/events?after={mid}&limit=1000") == [e for e in every if e["at"] > mid]
        assert call(f"/events?{urlencode({'before': iso, 'limit': 1000})}") == [e for e in every if e["at"] < mid]
        assert call("/events?limit=2") == every[:2]
        shot = next(e["snapshot"] for e in every if e["snapshot"])
        assert jpeg(shot)[:2] == b"\xff\xd8"
    finally:
        srv.send_signal(signal.SIGKILL)
        srv.wait(60)
    srv = subprocess.Popen([*cli, "--fresh"], stdout=subprocess.DEVNULL, stderr=log)
    try:
        up(srv)
        assert call("/pipelines/status") == []
        assert call("/events?limit=1000") == every
        assert call(f"/events?instance={y}&limit=1000") == [e for e in every if e["instance"] == y]
        # an instance's own list, its run gone with the server: what the index kept of it, as it was listed
        mine = call(f"/pipelines/{x}/events?limit=200")
        assert {key(x, e): e.get("snapshot") for e in mine} == {k: v for k, v in raised.items() if k[0] == x}
        assert mine == [{k: v for k, v in e.items() if k not in ("instance", "pipeline")} for e in every
                        if e["instance"] == x]
        assert jpeg(shot)[:2] == b"\xff\xd8"
    finally:
        srv.send_signal(signal.SIGTERM)
        srv.wait(60)
        log.close()


def test_an_event_raised_just_before_kill_9_is_indexed_when_the_server_starts_again(tmp_path) -> None:
    """The run's nodes journal each event as it is raised (``OUTPUT_DIR/ID/events.jsonl``), and the server reads
    the journals into its index: ``kill -9`` as soon as the first events are journaled, before the index's next
    look a second later, loses none of them. Started again (``--fresh``: nothing runs), every event the journal
    holds is in ``GET /events``, under its instance and template."""
    import signal
    import subprocess

    from flowpipe.sample import sample_path

    media = tmp_path / "media"
    media.mkdir()
    (media / "street.mp4").write_bytes(sample_path("sample-street").read_bytes())
    graphs = tmp_path / "graphs"
    graphs.mkdir()
    (graphs / "people_count.yaml").write_bytes((Path(__file__).resolve().parents[1] / "graphs" / "people_count.yaml")
                                               .read_bytes())
    cli, call, up = _serve_command(tmp_path, graphs=graphs)
    cli += ["--media-dir", str(media)]
    params = {"zone": [[0, 0], [1, 0], [1, 1], [0, 1]], "crowd": 1, "crowd_for": 0.0, "dwell": 0.5, "device": "CPU",
              "line": [[0.5, 0.0], [0.5, 1.0]]}
    with (tmp_path / "serve.log").open("w") as log:
        srv = subprocess.Popen(cli, stdout=subprocess.DEVNULL, stderr=log)
        try:
            up(srv)
            iid = call("/pipelines/people_count", {"parameters": params, "streams": [
                {"id": "a", "uri": "street.mp4"}]})["id"]
            path = tmp_path / "out" / iid / "events.jsonl"

            def journaled() -> list[dict[str, Any]]:
                text = path.read_text() if path.exists() else ""
                return [json.loads(line) for line in text.splitlines()[1:]]  # (the first: the server's own)

            _wait(lambda: len(journaled()) >= 1, 120)
        finally:
            srv.send_signal(signal.SIGKILL)
            srv.wait(60)
        got = journaled()
        srv = subprocess.Popen([*cli, "--fresh"], stdout=subprocess.DEVNULL, stderr=log)
        try:
            up(srv)
            assert call("/pipelines/status") == []
            kept = {(e["stream"], e["id"], e["state"], e["frame"], e["at"]): e for e in call("/events?limit=1000")}
            assert got and all(e["state"] in ("begin", "end", "instant") for e in got)
            for e in got:
                row = kept[(e["stream"], e["id"], e["state"], e["frame"], e["at"])]
                assert row["instance"] == iid and row["pipeline"] == "people_count" and row["kind"] == e["kind"]
        finally:
            srv.send_signal(signal.SIGTERM)
            srv.wait(60)


def test_a_run_s_event_journal_goes_once_it_has_ended_and_its_events_are_indexed(tmp_path) -> None:
    """An instance of the people counter on 80 frames of the street clip, run to its end: its events (as its
    records have them, clips named) are in the index, and its journal, read whole, is gone: a journal grows only
    while its run lasts."""
    graphs = tmp_path / "graphs"
    graphs.mkdir()
    (graphs / "people_count.yaml").write_bytes((Path(__file__).resolve().parents[1] / "graphs" / "people_count.yaml")
                                               .read_bytes())
    instances = Instances([graphs], tmp_path / "out")
    inst = instances.start("people_count", {"input": "sample-street", "line": [[0.5, 0.0], [0.5, 1.0]],
                                            "zone": [[0, 0], [1, 0], [1, 1], [0, 1]], "crowd": 1, "crowd_for": 0.0,
                                            "device": "CPU"}, [])
    journal = inst.folder / "events.jsonl"
    _wait(lambda: inst.result is not None, 120)
    assert inst.result is not None and inst.result.ok, inst.result.error if inst.result else None
    records = [json.loads(line) for line in next(inst.folder.rglob("people_count.jsonl")).read_text().splitlines()]
    raised = [e for r in records for e in r["analytics"]["events"]]
    kept = {(e["stream"], e["id"], e["state"], e["frame"]): e for e in instances.events.find(1000, instance=inst.id)}
    assert raised and len(kept) == len(raised)
    for e in raised:
        assert kept[(e["stream"], e["id"], e["state"], e["frame"])]["clip"] == Path(e["clip"]).relative_to(
            inst.folder).as_posix()
    assert not journal.exists() and instances.events.journaled(journal) == 0
    instances.events.close()


def test_the_event_index_keeps_one_row_an_event_and_forgets_rows_by_age_and_count_never_files(tmp_path) -> None:
    """The same record seen twice is one row, its clip named the second time; a restarted run's event of the same
    id is a row of its own. ``keep_days`` forgets events raised longer ago, ``keep`` the oldest beyond it
    (also when the index is opened again with them); a row forgotten deletes no file."""
    from flowpipe.serve.events import EventIndex

    folder = tmp_path / "out" / "0badcafe"
    (folder / "events").mkdir(parents=True)
    shot = folder / "events" / "a-00000010.jpg"
    shot.write_bytes(b"\xff\xd8")
    now = time.time()
    old = {"id": "a-crossed-1", "state": "instant", "stream": "a", "frame": 10, "kind": "crossing",
           "at": round(now - 3 * 86400, 3), "snapshot": str(shot)}
    index = EventIndex(tmp_path / "out" / "events.sqlite")
    index.add("0badcafe", "cams", folder, [old])
    index.add("0badcafe", "cams", folder, [dict(old, clip=str(folder / "clips" / "a-00000010.mp4"))])
    again = dict(old, frame=3, at=round(now - 86400, 3), snapshot=None)  # the run restarted: ids begin again
    index.add("0badcafe", "cams", folder, [again, dict(again, id="a-crossed-2", frame=30, at=round(now, 3))])
    got = index.find(limit=10)
    assert [(e["id"], e["frame"]) for e in got] == [("a-crossed-2", 30), ("a-crossed-1", 3), ("a-crossed-1", 10)]
    assert (got[2]["snapshot"], got[2]["clip"]) == ("events/a-00000010.jpg", "clips/a-00000010.mp4")
    index.close()
    index = EventIndex(tmp_path / "out" / "events.sqlite", keep_days=2)
    assert [e["frame"] for e in index.find(limit=10)] == [30, 3]
    index.close()
    index = EventIndex(tmp_path / "out" / "events.sqlite", keep=1)
    assert [e["frame"] for e in index.find(limit=10)] == [30]
    assert shot.is_file()
    index.close()

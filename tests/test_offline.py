"""A recording masked from each face's first frame in the picture (``offline``): the tracker holds the whole
stream, its pictures spilled to disk, and follows each face back from the first frame it was found in."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from flowpipe import Runner, load_graph
from flowpipe.errors import GraphError
from flowpipe.frame import Detection, Frame

ROOT = Path(__file__).resolve().parent.parent
BLIND = 40  # frames the detector is made to find nothing on


def _graph(tmp_path: Path, clip: Path, name: str, offline: bool) -> Path:
    """The shipped face-blur graph, with its detections taken away on the clip's first ``BLIND`` frames (a face
    the detector cannot find there: dark, cut by the edge), offline or not."""
    g = yaml.safe_load((ROOT / "graphs" / "face_blur.yaml").read_text())
    g["params"].update(input=str(clip), device="CPU", output=str(tmp_path / f"{name}.mp4"),
                       metadata=str(tmp_path / f"{name}.jsonl"), offline=offline, spill=str(tmp_path))
    g["plugins"] = ["fp_testnodes"]
    nodes = g["nodes"]
    at = next(i for i, n in enumerate(nodes) if n["id"] == "track")
    nodes.insert(at, {"id": "blind", "type": "test_blind", "config": {"until": BLIND},
                      "inputs": {"in": nodes[at]["inputs"]["detections"]}})
    nodes[at + 1]["inputs"] = {"detections": "blind.out"}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(g, sort_keys=False))
    return path


def test_a_face_the_detector_finds_late_is_masked_from_its_first_frame_in_a_recording(tmp_path) -> None:
    pytest.importorskip("av")
    from flowpipe_eval.clips import clip
    from flowpipe_eval.score import COVERED, coverage
    from flowpipe_nodes.draw import grow_box

    c = clip("woman_hands")
    src = c.write(tmp_path / "woman.mp4")
    h, w = c.frames[0].shape[:2]
    masked = {}
    for offline in (False, True):
        name = "offline" if offline else "online"
        res = Runner(load_graph(str(_graph(tmp_path, src, name, offline)))).run()
        assert res.ok, res.error
        assert res.frames == {"in": len(c.frames), "out": len(c.frames), "dropped": 0, "failed": 0}
        recs = {r["frame"]: r for r in map(json.loads, (tmp_path / f"{name}.jsonl").read_text().splitlines())}
        masked[name] = [any(coverage(box, [grow_box(o["box"], 0.2, w, h) for o in recs[i]["objects"]]) >= COVERED
                            for box in c.faces[i].values()) for i in range(BLIND)]
        if offline:
            assert res.nodes["track"]["tracked_back"] >= BLIND - 5
            assert {o["source"] for i in range(BLIND) for o in recs[i]["objects"]} == {"tracked_back"}
            # the spill folder (the test's own) holds the run's files alone: the spilled pictures left nothing
            assert {p.name for p in tmp_path.iterdir()} == {
                "woman.mp4", *(f"{n}.{x}" for n in ("online", "offline") for x in ("yaml", "mp4", "jsonl"))}
            assert (tmp_path / "offline.mp4").stat().st_size > 0
    # streaming, the lookahead reaches a few frames back at most; offline, the face is followed back to frame 0
    assert sum(masked["online"]) <= 10
    assert sum(masked["offline"]) >= 0.95 * BLIND, masked["offline"]


def test_offline_on_a_live_source_is_refused_in_one_line_at_validation(tmp_path) -> None:
    with pytest.raises(GraphError) as e:
        load_graph(str(ROOT / "graphs" / "face_blur.yaml"),
                   {"offline": True, "input": "rtsp://user:secret@127.0.0.1:8554/door"})
    msg = str(e.value)
    assert "face_blur.yaml:" in msg and "node 'track' (tracker)" in msg and "source 'decode' is live" in msg
    assert "secret" not in msg and "\n" not in msg.strip()


def test_a_recording_too_large_for_the_spill_folder_is_refused_at_its_first_frame_naming_the_room(tmp_path) -> None:
    from flowpipe.errors import FrameError
    from flowpipe.testing import Harness
    from flowpipe_nodes.track import Tracker

    node = Tracker("track", Tracker.Config(offline=True, spill=str(tmp_path)))
    with Harness(node):
        f = Frame("cam", 0, 0.0, np.zeros((1620, 1920), np.uint8), "I420", meta={"frames": 10 ** 8})
        f.detections = [Detection((10, 10, 50, 50), 0.9, "face")]
        with pytest.raises(FrameError, match=r"offline: stream 'cam' needs 311040\.0 GB in the spill folder .* "
                                             r"\(100000000 frames of 1920x1080 I420\)"):
            node.process(f, "detections")


def test_a_live_camera_added_to_a_running_graph_that_holds_whole_streams_is_refused(tmp_path) -> None:
    """A running graph whose tracker reads recordings whole (``flowpipe serve``'s instance of it) takes a file
    added as a stream and refuses a camera, in one line naming the node and why."""
    import threading
    import time

    path = tmp_path / "g.yaml"
    path.write_text(f"""
plugins: [fp_testnodes]
nodes:
  - {{id: cam, type: video_source, template: true, config: {{uri: sample}}}}
  - {{id: blind, type: test_blind, inputs: {{in: cam}}}}
  - {{id: track, type: tracker, config: {{offline: true, spill: "{tmp_path}"}}, inputs: {{detections: blind.out}}}}
  - {{id: meta, type: jsonl, config: {{path: "{tmp_path}/m.jsonl"}}, inputs: {{detections: track}}}}
""")
    runner = Runner(load_graph(str(path)))
    box: dict = {}
    t = threading.Thread(target=lambda: box.update(res=runner.run()))
    t.start()
    try:
        deadline = time.monotonic() + 30
        while not runner.running:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with pytest.raises(ValueError, match=r"stream 'door': node 'track': offline: true holds every frame of a "
                                             r"stream until it ends, and this stream is live"):
            runner.live.add("door", config={"uri": "rtsp://user:pw@127.0.0.1:9/door"})
        assert runner.live.states() == []
    finally:
        runner.stop()
        t.join(30)
    assert box["res"].ok, box["res"].error

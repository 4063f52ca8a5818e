"""The detector's interval: a preprocess that passes over frames (counted, and every frame while the tracker
it follows says a stream's tracks are young, or the picture changed) and a tracker that fills those frames in
from the frames the detector ran on around them."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from flowpipe.frame import Detection, Frame
from flowpipe.graph import load_graph
from flowpipe.runtime import Runner
from flowpipe.testing import Harness, run_node
from flowpipe_nodes.preprocess import Preprocess

ROOT = Path(__file__).resolve().parent.parent
Box = tuple[float, float, float, float]


def _frames(seq: list[list[tuple[Box, float]] | None]) -> list[Frame]:
    """Frames of stream ``cam``; ``None``: a frame the interval passed over."""
    out = []
    for i, dets in enumerate(seq):
        f = Frame("cam", i, i / 30, np.zeros((240, 320, 3), np.uint8))
        if dets is None:
            f.skipped = "pre"
        else:
            f.detections = [Detection(b, s, "face") for b, s in dets]
        out.append(f)
    return out


def _at(x: float) -> Box:
    return (x, 100.0, x + 40, 150.0)


def test_the_frames_between_two_detections_get_each_track_at_its_interpolated_box() -> None:
    """Detections on frames 0, 3 and 6: face A (track 1) moves 12 px between them and is put 4 px a frame
    along its way in the frames between; face B (track 3), first found on frame 3, is masked back to where it
    came in (frames 1 and 2, at its first box); face C (track 2), found on frame 0 only, stays where it was
    for the first half of the gap. Every frame keeps its place in the stream."""
    seq = [[(_at(100), 0.9), (_at(250), 0.9)], None, None, [(_at(112), 0.9), ((10.0, 10.0, 40.0, 40.0), 0.9)],
           None, None, [(_at(124), 0.9), ((10.0, 10.0, 40.0, 40.0), 0.9)]]
    out = run_node("type: tracker\nconfig: {high_score: 0.5, lookahead: 3, confirm: 3}", _frames(seq),
                   port="detections")
    assert out.result.ok, out.result.error
    assert [f.index for f in out.frames] == list(range(7))
    got = [sorted((d.track_id, round(d.box[0]), d.source[0]) for d in f.detections) for f in out.frames]
    assert got[0] == [(1, 100, "d"), (2, 250, "d")]
    assert got[1] == [(1, 104, "i"), (2, 250, "i"), (3, 10, "i")]  # C ends: still there a third of the way
    assert got[2] == [(1, 108, "i"), (3, 10, "i")]  # ... not two thirds; B back to where it came in
    assert got[3] == [(1, 112, "d"), (3, 10, "d")]
    assert got[4] == [(1, 116, "i"), (3, 10, "i")] and got[5] == [(1, 120, "i"), (3, 10, "i")]
    assert out.frames[1].detections[0].to_json()["source"] == "interpolated"
    assert out.result.nodes["node"]["interpolated"] == 4


def test_a_lookahead_shorter_than_the_interval_lets_frames_go_on_a_prediction_and_says_so() -> None:
    """Without a lookahead the frames the interval passed over cannot wait for the next detection: they go
    on with the last one's objects where they were (``predicted``), counted as ``passed_unfilled``."""
    seq = [[(_at(100), 0.9)], None, None, [(_at(112), 0.9)]]
    out = run_node("type: tracker\nconfig: {high_score: 0.5}", _frames(seq), port="detections")
    got = [[(d.track_id, round(d.box[0]), d.source) for d in f.detections] for f in out.frames]
    assert got == [[(1, 100, "detection")], [(1, 100, "predicted")], [(1, 100, "predicted")],
                   [(1, 112, "detection")]]
    assert out.result.nodes["node"]["passed_unfilled"] == 2


def test_a_track_that_starts_late_is_filled_into_the_passed_frames_before_its_first_detection() -> None:
    """A face found at 0.3 on frames 0 and 3 and at 0.9 on frame 6 (detections every third frame): the
    lookahead backfills it into frames 0 and 3, and the interval's frames between get it too."""
    seq = [[(_at(100), 0.3)], None, None, [(_at(112), 0.3)], None, None, [(_at(124), 0.9)]]
    out = run_node("type: tracker\nconfig: {high_score: 0.5, lookahead: 8, confirm: 1}", _frames(seq),
                   port="detections")
    assert [[round(d.box[0]) for d in f.detections] for f in out.frames] == [[x] for x in range(100, 125, 4)]
    assert out.result.nodes["node"]["backfilled"] == 2


def _gate_run(config: str, pictures: list[np.ndarray], word: dict | None = None, said: int = 0) -> list[bool]:
    """Which frames the interval runs the detector on, with the tracker ``track`` saying ``word`` on frames
    ``said`` on (None: no tracker in the graph)."""
    node = Preprocess("pre", Preprocess.Config.model_validate(
        {"size": [64, 64], "color": "RGB", "layout": "NCHW", "interval": json.loads(config)}))
    with Harness(node) as h:
        if word is not None:
            edge = h.context.back_edge("track").open()
            for i in range(said, len(pictures)):
                edge.say("cam", i, word or None)
        ran = []
        for i, p in enumerate(pictures):
            f = node.process(Frame("cam", i, i / 30, p), "frame")
            ran.append(f.skipped is None)
            assert (f.layout is not None and f.layout.filled == 0) == (f.skipped == "pre")
            assert f.tensors["input"].shape[0] == (1 if f.skipped is None else 0)
            f.release_memory()
        assert h.context.stats["detector_runs"].get("skipped", 0) == ran.count(False)
    return ran


def test_a_second_detector_along_the_first_runs_on_the_frames_it_runs_on() -> None:
    """A preprocess ``along`` another keeps its interval: the frames the first passed over get no tensor from
    the second either (and stay passed over, under the first's name); the others get one each."""
    first = Preprocess("pre", Preprocess.Config.model_validate(
        {"size": [64, 64], "color": "RGB", "interval": {"every": 3, "change": 0}}))
    second = Preprocess("pre_b", Preprocess.Config.model_validate(
        {"size": [32, 32], "color": "RGB", "layout": "NHWC", "along": "pre"}))
    with Harness(first) as h1, Harness(second) as h2:
        ran = []
        for i in range(7):
            f = second.process(first.process(Frame("cam", i, i / 30, np.full((120, 160, 3), 90, np.uint8)),
                                             "frame"), "frame")
            ran.append(f.tensors["input"].shape[0])
            assert f.skipped == (None if i % 3 == 0 else "pre")
        assert ran == [1, 0, 0, 1, 0, 0, 1]
        assert h1.context.stats["detector_runs"]["skipped"] == 4 and "detector_runs" not in h2.context.stats
    assert Preprocess.contract(second.config).refers == {"along.node": "pre"}


def test_a_second_detector_runs_on_one_in_every_of_the_first_s_frames_and_on_each_while_it_finds_faces() -> None:
    """``along: {every: 3, follow: dec}``: of the frames the first detector runs on, one in three get a
    tensor (the first, the fourth ...), and each of them while the decoder it follows says its last run on the
    stream found a face the first had not made sure of; a frame it passes over keeps the first detector's
    results (it is not marked passed over), with an empty tensor no request runs on."""
    second = Preprocess("pre_b", Preprocess.Config.model_validate(
        {"size": [32, 32], "color": "RGB", "layout": "NHWC", "along": {"node": "pre", "every": 3, "follow": "dec"}}))
    with Harness(second) as h:
        edge = h.context.back_edge("dec").open()
        ran = []
        for i in range(8):
            edge.say("cam", i - 1, {"found": 1 if 4 <= i <= 5 else 0})  # its word on the frame before
            f = second.process(Frame("cam", i, i / 30, np.full((120, 160, 3), 90, np.uint8)), "frame")
            assert f.skipped is None
            ran.append(f.tensors["input"].shape[0])
            assert (f.layout is not None and f.layout.filled == 0) == (ran[-1] == 0)
            f.release_memory()
        assert ran == [1, 0, 0, 1, 1, 1, 1, 0]  # 0 first, 3 and 6 by count, 4 and 5 while it found faces
        assert h.context.stats["detector_runs"] == {"first": 1, "count": 2, "found": 2, "skipped": 3}
    assert Preprocess.contract(second.config).refers == {"along.node": "pre", "along.follow": "dec"}


def test_a_word_that_names_its_frame_asks_once_until_a_word_formed_after_the_run_comes_back() -> None:
    """A word formed on frame N (``frame``) counts only if N is at or after the last frame the second detector
    ran on: the answer to an ask takes frames to come back through the graph, and an ask is answered by one run,
    not by one on each of those frames. A word naming no frame counts on every frame, as before."""
    second = Preprocess("pre_b", Preprocess.Config.model_validate(
        {"size": [32, 32], "color": "RGB", "layout": "NHWC",
         "along": {"node": "pre", "every": 30, "follow": "animals"}}))
    with Harness(second) as h:
        edge = h.context.back_edge("animals").open(first={"ask": True, "frame": -1})  # no face judged yet: the
        # stream's first frame asks
        words = {4: {"ask": True, "frame": 3},  # a face unjudged as of frame 3 (the detector last ran on 0): runs
                 # on 4; 5-7 still see the word of frame 3, formed before that run's answer: no run
                 8: {"ask": True, "frame": 4},  # formed on frame 4, with its answer, and still asking: runs
                 9: {"ask": True, "frame": 6},  # formed before frame 8's answer came back: no run
                 10: {"ask": False, "frame": 8}}
        ran = []
        for i in range(12):
            edge.say("cam", i - 1, words.get(i))  # the word read on frame i: as of the frame before
            f = second.process(Frame("cam", i, i / 30, np.full((120, 160, 3), 90, np.uint8)), "frame")
            ran.append(f.tensors["input"].shape[0])
            f.release_memory()
        assert ran == [1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0]
        assert h.context.stats["detector_runs"] == {"first": 1, "asked": 2, "skipped": 9}
        ran = []
        for i in range(12, 15):
            edge.say("cam", i - 1, {"ask": True})  # naming no frame: every frame
            f = second.process(Frame("cam", i, i / 30, np.full((120, 160, 3), 90, np.uint8)), "frame")
            ran.append(f.tensors["input"].shape[0])
            f.release_memory()
        assert ran == [1, 1, 1]
        # the stream counted again from a lower index (its source reopened): a word of the new count asks
        edge.say("cam", 2, {"ask": True, "frame": 2})
        f = second.process(Frame("cam", 3, 0.1, np.full((120, 160, 3), 90, np.uint8)), "frame")
        assert f.tensors["input"].shape[0] == 1
        f.release_memory()


def test_a_second_detector_runs_while_any_node_it_follows_asks_and_takes_a_word_for_every_stream() -> None:
    """``follow: [heads, animals]``: the word of either counts; ``ask`` as ``found`` does; a node's word for
    the streams it has not spoken of (its ``first``) holds for a stream until it speaks of that one; a
    node that never speaks (left out of the graph) asks nothing."""
    second = Preprocess("pre_b", Preprocess.Config.model_validate(
        {"size": [32, 32], "color": "RGB", "layout": "NHWC",
         "along": {"node": "pre", "every": 30, "follow": ["heads", "animals"]}}))
    with Harness(second) as h:
        animals = h.context.back_edge("animals").open(first={"ask": True})
        words = {3: {"ask": False}, 5: {"ask": True, "unjudged": 1}, 6: {"ask": False}}
        ran = []
        for i in range(8):
            animals.say("cam", i - 1, words.get(i))
            f = second.process(Frame("cam", i, i / 30, np.full((120, 160, 3), 90, np.uint8)), "frame")
            ran.append(f.tensors["input"].shape[0])
            f.release_memory()
        assert ran == [1, 1, 1, 0, 0, 1, 0, 0]  # 0 first, 1-2 before it spoke of the stream, 5 while asked
        assert h.context.stats["detector_runs"] == {"first": 1, "asked": 3, "skipped": 4}
    assert Preprocess.contract(second.config).refers == {"along.node": "pre", "along.follow[0]": "heads",
                                                         "along.follow[1]": "animals"}


def test_the_interval_runs_the_detector_every_nth_frame_and_on_a_changed_picture() -> None:
    still = [np.full((120, 160, 3), 90, np.uint8)] * 7
    assert _gate_run('{"every": 3, "change": 0}', still) == [True, False, False, True, False, False, True]
    cut = [*still[:4]] + [np.full((120, 160, 3), 200, np.uint8)] * 3  # a cut on frame 4
    assert _gate_run('{"every": 3}', cut) == [True, False, False, True, True, False, False]


def test_the_interval_runs_on_every_frame_while_the_tracker_it_follows_has_young_tracks() -> None:
    still = [np.full((120, 160, 3), 90, np.uint8)] * 4
    young = {"young": 1, "smallest": 80.0}
    at_once = '{"every": 3, "follow": "track", "delay": 1'  # the word as of the frame before
    assert _gate_run(at_once + "}", still, young) == [True] * 4
    small = {"young": 0, "smallest": 12.0}
    assert _gate_run(at_once + ', "small": 24}', still, small) == [True] * 4
    calm = {"young": 0, "smallest": 80.0}
    assert _gate_run(at_once + ', "small": 24}', still, calm) == [True, False, False, True]
    assert _gate_run(at_once + "}", still, {}) == [True] * 4  # the tracker said nothing yet
    # the word as of frame t - delay: said from frame 2 on, frame 3 reads frame 1's (none yet), frame 4 frame 2's
    six = [np.full((120, 160, 3), 90, np.uint8)] * 7
    assert _gate_run('{"every": 3, "follow": "track", "delay": 2}', six, calm, said=2) == \
        [True, True, True, True, False, False, True]
    # no tracker in this process (one in another, or none): nothing to wait for, the count alone
    assert _gate_run('{"every": 3, "follow": "track"}', still) == [True, False, False, True]


def test_face_blur_with_an_interval_accounts_every_frame_and_masks_the_passed_ones(tmp_path) -> None:
    """The shipped graph with ``interval: 3`` on the sample: every frame out with one JSON line, the detector
    run on fewer frames than there are, and the frames it passed over masked where the faces are in the
    frames it ran on around them."""
    spec = load_graph(str(ROOT / "graphs" / "face_blur.yaml"), {
        "interval": 3, "device": "CPU", "output": str(tmp_path / "o.mp4"), "metadata": str(tmp_path / "o.jsonl")})
    res = Runner(spec, max_frames=60).run()
    assert res.ok, res.error
    assert res.frames == {"in": 60, "out": 60, "dropped": 0, "failed": 0}
    runs = res.nodes["pre"]["detector_runs"]
    assert runs["skipped"] >= 10 and sum(runs.values()) == 60
    lines = [json.loads(x) for x in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert [r["frame"] for r in lines] == list(range(60))
    sources = {o["source"] for r in lines for o in r["objects"]}
    assert "interpolated" in sources and "detection" in sources
    # all but the last frames (the stream ends before the detector runs again: they keep the last objects)
    assert runs["skipped"] - 2 <= res.nodes["track"]["interpolated"] <= runs["skipped"]


def test_an_inference_after_an_interval_holds_the_frames_waiting_behind_its_requests() -> None:
    """The frames an interval passes over wait in their turn behind the ones the detector runs on: a
    consumer in order holds ``every`` times its requests, and the decoder's pool is sized for them."""
    from flowpipe.contracts import Offer, TensorSpec
    from flowpipe_nodes.inference import Inference

    for every in (1, 3):
        spec = TensorSpec((1, 3, 64, 64), "float32", every=every)
        node = Inference("det", Inference.Config(model="centerface", device="CPU", num_requests=2))
        with Harness(node, inputs={"tensor": Offer("pre", "tensor", spec)}):
            assert node.max_held == 2 * every
    pre = Preprocess("pre", Preprocess.Config.model_validate({"size": [64, 64], "interval": {"every": 3}}))
    with Harness(pre) as h:
        assert h.offers["tensor"].tensor is not None and h.offers["tensor"].tensor.every == 3

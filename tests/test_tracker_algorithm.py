"""The tracker's algorithm on plain arrays (no frames, no graph): what starts a track, what keeps it, when it
coasts and when it goes, the second looks, the camera's motion, the picture's edge and smoothed boxes."""
from __future__ import annotations

import numpy as np
import pytest

from flowpipe_nodes.track.core import TrackerCore, TrackerSettings, TrackUpdate

PICTURE = (320.0, 240.0)
FACE = (100.0, 100.0, 140.0, 150.0)


def tracker(**settings: object) -> TrackerCore:
    return TrackerCore(TrackerSettings(**settings))  # type: ignore[arg-type]


def step(t: TrackerCore, *dets: tuple[tuple[float, ...], float], picture: tuple[float, float] | None = PICTURE,
         **kw: object) -> TrackUpdate:
    boxes = np.array([b for b, _ in dets], np.float64).reshape(-1, 4)
    return t.update(boxes, np.array([s for _, s in dets], np.float64), picture=picture, **kw)  # type: ignore[arg-type]


def reported(u: TrackUpdate) -> list[int]:
    """The track ids of the detections that go on (-1: none), then those of the coasting tracks."""
    return u.ids[u.keep].tolist() + [c.track_id for c in u.coasting]


def shifted(box: tuple[float, ...], dx: float = 0.0, dy: float = 0.0) -> tuple[float, ...]:
    return (box[0] + dx, box[1] + dy, box[2] + dx, box[3] + dy)


@pytest.mark.parametrize(("scores", "ids", "keep"), [
    ([0.9], [1], [True]),
    ([0.5], [1], [True]),  # high_score itself starts one
    ([0.3], [-1], [False]),  # a candidate alone starts nothing and does not go on
    ([0.9, 0.3, 0.7], [1, -1, 2], [True, False, True]),  # ids in the detections' order
])
def test_a_track_starts_at_a_high_score_only(scores: list[float], ids: list[int], keep: list[bool]) -> None:
    t = tracker(high_score=0.5)
    u = step(t, *[(shifted(FACE, dx=100 * i), s) for i, s in enumerate(scores)])
    assert u.ids.tolist() == ids
    assert u.keep.tolist() == keep
    assert [tr.id for tr in t.tracks] == [i for i in ids if i > 0]


@pytest.mark.parametrize(("scores", "dx", "ids"), [
    ([0.45, 0.45, 0.45, 0.45], 0.0, [-1, -1, 1, 1]),  # third frame in a row at one place, mean 0.45
    ([0.45, 0.30, 0.30, 0.30], 0.0, [-1, -1, -1, -1]),  # mean 0.35: under start_score
    ([0.54, 0.49, 0.28, 0.45], 0.0, [-1, -1, 1, 1]),  # mean of the last three 0.437
    ([0.45, 0.45, 0.45, 0.45], 30.0, [-1, -1, -1, -1]),  # jumps 30 px a frame: never at one place
])
def test_candidates_found_at_one_place_start_a_track_by_persistence(scores: list[float], dx: float,
                                                                   ids: list[int]) -> None:
    t = tracker(high_score=0.6, start_after=3, start_score=0.4)
    got = [step(t, (shifted(FACE, dx=dx * i), s)).ids.tolist() for i, s in enumerate(scores)]
    assert got == [[i] for i in ids]


@pytest.mark.parametrize(("misses", "back"), [(2, 1), (4, 1), (5, 2)])
def test_a_confirmed_track_coasts_through_misses_then_is_dropped(misses: int, back: int) -> None:
    """``coast: 2``: two missed frames at the predicted box, then none; kept for ``max_age: 4`` misses (the face
    found again gets its id back), dropped after (it gets a new one)."""
    t = tracker(coast=2, confirm=3, max_age=4)
    for _ in range(3):
        assert step(t, (FACE, 0.9), labels=[("face", 2)]).ids.tolist() == [1]
    coasted = [step(t).coasting for _ in range(misses)]
    assert [[(c.track_id, tuple(c.box), c.label, c.label_id) for c in cs] for cs in coasted[:2]] == \
        [[(1, FACE, "face", 2)]] * 2
    assert all(cs == [] for cs in coasted[2:])
    assert step(t, (FACE, 0.9)).ids.tolist() == [back]


def test_a_track_too_young_does_not_coast() -> None:
    t = tracker(coast=5, confirm=3)
    assert [reported(step(t, (FACE, 0.9))) for _ in range(2)] == [[1], [1]]
    assert reported(step(t)) == []


@pytest.mark.parametrize(("dx", "score", "track_id"), [
    (8.0, 0.9, 1),  # IoU 0.67
    (8.0, 0.3, 1),  # a candidate continues the track (ByteTrack's second association)
    (15.0, 0.9, 1),  # IoU 0.45: over iou_threshold
    (15.0, 0.3, -1),  # under candidate_iou: a candidate needs more overlap
    (30.0, 0.9, 2),  # IoU 0.14: a new track
    (30.0, 0.3, -1),
])
def test_a_low_score_detection_continues_a_track_it_overlaps(dx: float, score: float, track_id: int) -> None:
    t = tracker(high_score=0.5, iou_threshold=0.3, candidate_iou=0.5)
    step(t, (FACE, 0.9))
    u = step(t, (shifted(FACE, dx=dx), score), ((10.0, 10.0, 30.0, 30.0), 0.3))  # and a stray candidate
    assert u.ids.tolist() == [track_id, -1]
    assert u.keep.tolist() == [track_id > 0, False]


def test_the_high_score_detection_matches_first() -> None:
    """A candidate right on the track and a high one a little off: the high one takes the track."""
    t = tracker()
    step(t, (FACE, 0.9))
    u = step(t, (FACE, 0.3), (shifted(FACE, dx=6), 0.9))
    assert u.ids.tolist() == [-1, 1] and u.keep.tolist() == [False, True]


def test_candidates_keep_a_track_only_hold_frames_after_its_last_high_score() -> None:
    t = tracker(hold=2)
    assert [step(t, (FACE, s)).ids.tolist() for s in (0.9, 0.3, 0.3, 0.3, 0.9)] == [[1], [1], [1], [-1], [1]]


@pytest.mark.parametrize(("score", "look", "track_id"), [
    (0.9, np.nan, 1),  # not looked at: the score decides
    (0.9, 0.1, -1),  # every look under its reject: no face, whatever the score
    (0.9, 0.3, 1),  # passes the reject
    (0.3, 0.7, 1),  # a look at `sure` makes a weak detection high-score
    (0.3, 0.3, -1),  # passes the reject only: still a candidate
])
def test_second_looks_reject_or_make_sure(score: float, look: float, track_id: int) -> None:
    t = tracker(high_score=0.6, checks={"face": (0.25, 0.6)})
    u = step(t, (FACE, score), looks={"face": np.array([look])})
    assert u.ids.tolist() == [track_id] and u.keep.tolist() == [track_id > 0]


@pytest.mark.parametrize(("look", "ids", "coasting"), [(0.1, [-1], []), (0.3, [1], [1]), (0.7, [1], [1])])
def test_a_rejected_detection_neither_continues_nor_confirms_a_track(look: float, ids: list[int],
                                                                      coasting: list[int]) -> None:
    """Where every look saw no face the detection is not the track's face (a head's hair as it leaves the
    picture, an animal's face a detector took for one): the track goes on as missed, unconfirmed."""
    t = tracker(high_score=0.6, coast=3, confirm=2, checks={"face": (0.25, 0.6)})
    step(t, (FACE, 0.9), looks={"face": np.array([np.nan])})
    assert step(t, (FACE, 0.9), looks={"face": np.array([look])}).ids.tolist() == ids
    assert reported(step(t)) == coasting


def test_a_late_start_gives_back_its_candidates_in_the_frames_before() -> None:
    """With a lookahead the candidates a track started from are handed back (the caller's references), oldest
    first, to be shown in the frames still waiting."""
    t = tracker(lookahead=3)
    for i, s in enumerate((0.3, 0.4, 0.4)):
        assert step(t, (FACE, s), ((10.0, 10.0, 30.0, 30.0), 0.3), refs=[f"face{i}", f"stray{i}"]).backfill == []
    u = step(t, (FACE, 0.9), refs=["face3"])
    assert u.ids.tolist() == [1]
    assert u.backfill == [(1, ["face0", "face1", "face2"])]


GRID = [(40.0 + 80 * (i % 3), 40.0 + 100 * (i // 3)) for i in range(6)]


@pytest.mark.parametrize(("camera_motion", "x1"), [(True, 55.0), (False, 52.5)])
def test_a_missed_track_moves_with_the_camera(camera_motion: bool, x1: float) -> None:
    """Six faces, the camera panning 5 px a frame; face 1 missed in the fourth frame: with ``camera_motion`` its
    box moves 5 px as the five found do, without it moves on its own motion (5 px a frame, fitted over the three
    frames it was found in), halved by the miss."""
    t = tracker(coast=3, confirm=1, camera_motion=camera_motion)
    for f in range(4):
        dets = [((x + 5 * f, y, x + 5 * f + 20, y + 20), 0.9) for x, y in GRID]
        u = step(t, *(dets[1:] if f == 3 else dets))
    assert [c.track_id for c in u.coasting] == [1]
    np.testing.assert_allclose(u.coasting[0].box, [x1, 40.0, x1 + 20, 60.0])


def _camera(dx: float, dy: float, zoom: float = 1.0, turn: float = 0.0) -> np.ndarray:
    """The camera's motion about the picture's centre: ``x' = zoom R(turn) (x - c) + c + (dx, dy)``."""
    cx, cy = PICTURE[0] / 2, PICTURE[1] / 2
    a = zoom * np.array([[np.cos(np.radians(turn)), -np.sin(np.radians(turn))],
                         [np.sin(np.radians(turn)), np.cos(np.radians(turn))]])
    return np.hstack([a, (np.array([cx, cy]) - a @ [cx, cy] + [dx, dy])[:, None]])


@pytest.mark.parametrize("camera", [(15.0, 0.0), (0.0, -12.0, 1.1, 2.0)])
@pytest.mark.parametrize("told", [True, False])
def test_a_still_object_keeps_its_track_while_the_camera_jerks_where_the_tracker_is_told_its_motion(
        camera: tuple[float, ...], told: bool) -> None:
    """A 20 px box still in the scene; from the third frame the camera jerks (the picture moves 15 px right a
    frame; or 12 px up, zooming in 10% and turning 2 degrees): in the picture the box jumps further than it
    overlaps itself. Told the camera's motion (``warp``, as the tracker's ``gmc`` measures it), the tracker
    carries the track with it before matching (BoT-SORT's compensation): one id, its motion in the scene nil;
    not told, each jump starts a new track."""
    a = _camera(*camera)
    box = np.array([150.0, 110.0, 170.0, 130.0])
    t, ids = tracker(confirm=1), []
    for i in range(6):
        moved = i >= 3
        if moved:
            c = (box[:2] + box[2:]) / 2
            half = (box[2:] - box[:2]) / 2 * np.sqrt(abs(np.linalg.det(a[:, :2])))
            box = np.concatenate([a[:, :2] @ c + a[:, 2] - half, a[:, :2] @ c + a[:, 2] + half])
        ids += step(t, (tuple(box), 0.9), warp=a if told and moved else None).ids.tolist()
    assert ids == ([1] * 6 if told else [1, 1, 1, 2, 3, 4])
    if told:
        np.testing.assert_allclose(t.tracks[0].velocity, 0.0, atol=1e-9)


@pytest.mark.parametrize(("picture", "right_sides"), [
    (PICTURE, [30.0, 20.0]),  # 10 px a frame (its speed measured before the edge cut it), not slowing, while at
    # least 13.3 px are inside
    (None, [35.0]),  # no edge: ``coast`` frames, at half its speed
])
def test_a_track_leaving_through_the_edge_coasts_until_under_a_third_is_in(picture: tuple[float, float] | None,
                                                                          right_sides: list[float]) -> None:
    """A face 40 px wide walks out through the left edge at 10 px a frame (its box clipped by the edge) and is
    missed: it keeps moving out at the speed it came with (the centre of a clipped box moves at half the
    face's speed), masked past ``coast: 1`` while at least a third of it is inside; without a picture there is
    no edge and it coasts ``coast`` frames."""
    t = tracker(coast=1, confirm=3)
    for i in range(5):
        u = step(t, ((max(0.0, 40.0 - 10 * i), 100.0, 80.0 - 10 * i, 140.0), 0.9), picture=picture)
        assert u.ids.tolist() == [1]
    boxes = [c.box for _ in range(6) for c in step(t, picture=picture).coasting]
    assert [b[2] for b in boxes] == pytest.approx(right_sides)
    assert [b[2] - b[0] for b in boxes] == pytest.approx([40.0] * len(boxes))  # the face's size, not the clip's


def test_a_face_cut_by_the_edge_leaves_with_its_mask() -> None:
    """A face 150 px wide leaves through the left edge at 24 px a frame; the detector clips its box a few px
    inside the edge (its grid's rounding, not at 0), then loses it. The mask goes on out with the face and
    is gone once under a third of it is inside: it does not stay at the edge (the clipped box's centre moves
    the wrong way, its size shrinks with the clip)."""
    t = tracker(coast=15, confirm=3)
    picture = (1280.0, 720.0)
    for i in range(8):
        x1, x2 = 160.0 - 24 * i, 310.0 - 24 * i
        u = step(t, ((max(3.0, x1), 100.0, x2, 280.0), 0.9), picture=picture)
        assert u.ids.tolist() == [1]
    coasting = [[c.box for c in step(t, picture=picture).coasting] for _ in range(20)]
    right = [b[0][2] for b in coasting if b]
    assert right == sorted(right, reverse=True) and right[0] < 142.0  # going out, at about its speed
    assert len(right) <= 3 and not any(coasting[3:])  # gone once under 75 px of it are inside


def test_a_slow_face_leaving_with_a_jittering_box_is_carried_out() -> None:
    """A face 167 px wide leaves through the left edge at 5.4 px a frame (a twentieth of its size is 8.4 px),
    its box jittering 2 px either way, and is lost once the edge cuts it: the motion fitted over its last
    updates is told from the jitter, and the mask goes on out with the face instead of standing at the edge
    for ``coast`` frames."""
    t = tracker(coast=15, confirm=3, max_age=40)
    picture = (1280.0, 720.0)
    for i in range(12):
        x1 = 40.0 - 5.4 * i + (2.0 if i % 2 else -2.0)
        u = step(t, ((max(3.0, x1), 100.0, x1 + 167.0, 280.0), 0.9), picture=picture)
        assert u.ids.tolist() == [1]
    right = [c.box[2] for _ in range(40) for c in step(t, picture=picture).coasting]
    assert right == sorted(right, reverse=True) and 4.0 < right[0] - right[1] < 7.0, right
    assert 55.0 <= right[-1] < 62.0, right  # a third of 167 px still in, and no further


def test_a_face_that_stops_at_the_edge_coasts_its_coast_frames_only() -> None:
    """A face 40 px wide walks to the left edge at 4 px a frame and stops there, cut by it with 30 px inside,
    for five frames; then it is missed: it coasts ``coast`` frames like any face, not as long as a motion out
    of the picture that halves towards nothing is left."""
    t = tracker(coast=3, confirm=3, max_age=30)
    for x1 in (20.0, 16.0, 12.0, 8.0, 4.0) + (-10.0,) * 5:
        step(t, ((max(0.0, x1), 100.0, x1 + 40.0, 140.0), 0.9))
    assert [len(step(t).coasting) for _ in range(10)] == [1, 1, 1] + [0] * 7


def _panned(f: int, dx: float) -> list[tuple[tuple[float, ...], float]]:
    return [((x + dx, y, x + dx + 20, y + 20), 0.9) for x, y in GRID]


@pytest.mark.parametrize(("stops", "moved"), [(False, 5.0), (True, 0.0)])
def test_the_camera_s_pan_goes_on_while_the_faces_found_move_with_it(stops: bool, moved: float) -> None:
    """Six faces, the camera panning 5 px a frame; then only two are found whole (under the four a pan is
    measured from) for six frames: while they move with the last pan, the others coast with it; where they
    stop, so does the camera, and the others stand."""
    t = tracker(coast=10, confirm=1, camera_motion=True)
    for f in range(4):
        step(t, *_panned(f, 5.0 * f))
    for f in range(4, 10):
        dets = _panned(f, 5.0 * (f if not stops else 3))
        u = step(t, dets[1], dets[2])
    boxes = {c.track_id: c.box for c in u.coasting}
    x = GRID[0][0] + 15.0  # where face 1 was last found, in the fourth frame
    assert boxes[1][0] == pytest.approx(x + 6 * moved)


def test_motions_are_a_frame_s_where_the_detector_runs_every_few_frames() -> None:
    """A face 40 px wide walks out through the left edge at 4 px a frame, found on every third frame (a detector
    interval): missed, it moves 12 px an update (three frames), as it did while found."""
    t = tracker(coast=1, confirm=3)
    for f in range(0, 18, 3):
        x1 = 50.0 - 4.0 * f
        assert step(t, ((max(0.0, x1), 100.0, x1 + 40.0, 140.0), 0.9), frame=f).ids.tolist() == [1]
    right = [c.box[2] for f in (18, 21, 24) for c in step(t, frame=f).coasting]
    assert right == pytest.approx([18.0])  # then under a third of it is in


def test_a_detection_continues_only_a_track_of_its_label() -> None:
    """A bicycle tracked for two frames; then a person is found where it was (its rider, the bicycle missed):
    the person starts a track of its own instead of taking the bicycle's id; the bicycle found again goes on
    with its own."""
    t = tracker()
    bike = (100.0, 100.0, 160.0, 160.0)
    for _ in range(2):
        assert t.update(np.array([bike]), np.array([0.9]), labels=[("bicycle", 2)]).ids.tolist() == [1]
    assert t.update(np.array([bike]), np.array([0.9]), labels=[("person", 1)]).ids.tolist() == [2]
    both = t.update(np.array([bike, bike]), np.array([0.9, 0.9]), labels=[("person", 1), ("bicycle", 2)])
    assert both.ids.tolist() == [2, 1]


@pytest.mark.parametrize(("smooth", "boxes"), [
    (0.5, [(102, 102, 138, 138), (103, 103, 137, 137), (100, 100, 140, 140)]),
    (0.0, [(102, 102, 138, 138), (104, 104, 136, 136), (100, 100, 140, 140)]),
])
def test_smoothed_boxes_go_out_at_once_and_come_in_slowly(smooth: float, boxes: list[tuple[float, ...]]) -> None:
    """A box that shrinks by 2 px a side twice, then grows back: smoothed, it comes in half the way a frame and
    goes out at once (it never uncovers the detection)."""
    t = tracker(smooth=smooth)
    step(t, ((100.0, 100.0, 140.0, 140.0), 0.9))
    got = [step(t, ((100.0 + d, 100.0 + d, 140.0 - d, 140.0 - d), 0.9)) for d in (2.0, 4.0, 0.0)]
    assert [tuple(u.boxes[0]) for u in got] == boxes
    assert [bool(u.smoothed[0]) for u in got] == [smooth > 0] * 3


def test_a_tracker_retuned_while_it_runs_starts_tracks_at_its_new_score_and_keeps_its_tracks() -> None:
    """A face at 0.6 is tracked (high_score 0.5). The tracker is retuned to 0.7 between two frames: that track
    goes on at 0.6 (a candidate continues it), and a second face at 0.6 coming in never starts one."""
    import numpy as np

    from flowpipe.frame import Detection, Frame
    from flowpipe.registry import lookup
    from flowpipe.testing import Harness

    cls = lookup("tracker")
    node = cls("track", cls.Config(high_score=0.5))
    ids: list[dict[str, int | None]] = []
    with Harness(node) as h:
        for i in range(12):
            if i == 4:
                node.retune(cls.Config(high_score=0.7))
            f = Frame("cam", i, i / 25, np.zeros((240, 320, 3), np.uint8))
            f.detections = [Detection((10.0 + i, 10.0, 50.0 + i, 50.0), 0.6, "face")]
            if i >= 5:
                f.detections.append(Detection((200.0, 100.0, 240.0, 140.0), 0.6, "face"))
            out = h.node.process(f, "detections")
            frame = out if isinstance(out, Frame) else out[0]
            ids.append({"a" if d.box[0] < 150 else "b": d.track_id for d in frame.detections})
    assert all(x.get("a") == ids[0]["a"] is not None for x in ids)
    assert all(x.get("b") is None for x in ids[5:])
    with pytest.raises(ValueError, match=r"node 'track' \(tracker\): lookahead cannot change while the graph runs"):
        from flowpipe.graph import load_graph
        from flowpipe.runtime.live import retuned

        spec = load_graph("<t>", text="nodes:\n  - {id: src, type: list_source, config: {feed: x}}\n"
                                      "  - {id: track, type: tracker, inputs: {detections: src.frame}}\n")
        retuned(spec.node("track"), {"lookahead": 3})


PERSON = (20.0, 100.0, 40.0, 160.0)  # 20 x 60: a walker seen from the side


@pytest.mark.parametrize(("reach", "misses", "dx", "size", "same"), [
    (0.5, 5, 70.0, 1.0, True),     # found again 70 px on after 5 frames missed (10 px a frame, 60 px tall): one id
    (0.0, 5, 70.0, 1.0, False),    # overlap only: a new track past the gap
    (0.5, 5, -40.0, 1.0, False),   # behind it, the way it came: someone else
    (0.5, 5, 70.0, 2.0, False),    # twice its height: something else
    (0.5, 5, 250.0, 1.0, False),   # further than 0.5 of its height for each of the 6 frames: someone else
    (0.5, 20, 200.0, 1.0, True),   # after 20 frames missed, within 8 frames' reach (240 px)
    (0.5, 20, 300.0, 1.0, False),  # ... and not past it, however long it was missed
])
def test_a_lost_track_is_found_again_ahead_on_its_way_within_its_reach(reach: float, misses: int, dx: float,
                                                                      size: float, same: bool) -> None:
    """A walker found on 6 frames going right 10 px a frame, missed for ``misses``, then found again ``dx``
    on from where they were last found: the track takes it within ``reach`` of its height a frame missed (8
    frames' worth at most), ahead of it and of its size; otherwise it starts a new track."""
    t = tracker(reach=reach, confirm=3, max_age=30)
    for i in range(6):
        (first,) = step(t, (shifted(PERSON, 10.0 * i), 0.9), picture=(2000.0, 240.0)).ids.tolist()
    for _ in range(misses):
        step(t, picture=(2000.0, 240.0))
    x1, y1, x2, y2 = shifted(PERSON, 50.0 + dx)
    box = (x1, y2 - (y2 - y1) * size, x1 + (x2 - x1) * size, y2)
    (again,) = step(t, (box, 0.9), picture=(2000.0, 240.0)).ids.tolist()
    assert (again == first) is same


@pytest.mark.parametrize(("rate", "fps", "misses", "same"), [
    (25.0, 10.0, 6, False),  # max_age 10 at 25 fps is 4 frames at 10 fps: gone after 6 missed
    (25.0, 10.0, 3, True),   # ... not after 3
    (25.0, 25.0, 6, True),   # at its own rate, 10 frames
    (None, 10.0, 6, True),   # no rate: 10 frames at any rate
])
def test_a_tracker_with_a_rate_keeps_a_lost_track_as_many_seconds_at_any_frame_rate(
        rate: float | None, fps: float, misses: int, same: bool) -> None:
    """``rate``: the frame counts (here max_age 10) are at that many frames a second; a stream tracked at
    another rate (its timestamps) has them scaled to the same seconds."""
    from flowpipe.frame import Detection, Frame
    from flowpipe.registry import lookup
    from flowpipe.testing import Harness

    cls = lookup("tracker")
    node = cls("track", cls.Config(max_age=10, rate=rate))
    ids = []
    with Harness(node) as h:
        for i in range(5 + misses + 1):
            f = Frame("cam", i, i / fps, np.zeros((240, 320, 3), np.uint8))
            f.detections = [] if 5 <= i < 5 + misses else [Detection(FACE, 0.9, "face")]
            out = h.node.process(f, "detections")
            frame = out if isinstance(out, Frame) else out[0]
            ids += [d.track_id for d in frame.detections]
    assert (ids[-1] == ids[0]) is same, ids


def _walk_past(appearance: float, colours: tuple[np.ndarray, np.ndarray]) -> list[list[tuple[int, int]]]:
    """Two people walking past each other, A right and B left, B in front: while they overlap the detector
    finds B only. Per frame, (which person, track id) of each detection."""
    t = tracker(max_age=30, coast=5, reach=0.5, appearance=appearance)
    seen = []
    for i in range(30):
        xa, xb = 40 + 8 * i, 240 - 8 * i
        people = [0, 1] if abs(xa - xb) >= 40 else [1]
        boxes = np.array([[(xa, xb)[p], 50, (xa, xb)[p] + 40, 150] for p in people], np.float64)
        u = t.update(boxes, np.full(len(people), 0.9), picture=PICTURE,
                     colours=np.array([colours[p] for p in people]))
        seen.append(list(zip(people, u.ids.tolist())))
    return seen


def _colour(bin_: int) -> np.ndarray:
    from flowpipe_nodes.track import appearance

    c = np.zeros(appearance.SIZE)
    c[bin_] = 1.0
    return c


@pytest.mark.parametrize(("appearance", "same_colours", "kept"), [
    (0.5, False, True),  # red and blue: the one in front never takes the other's id
    (0.0, False, False),  # colours not looked at: for a frame, B carries A's id
    (0.5, True, False),  # dressed alike: colours tell nothing, overlap decides as without them
])
def test_appearance_keeps_two_people_walking_past_each_other_apart_where_their_colours_differ(
        appearance: float, same_colours: bool, kept: bool) -> None:
    red, blue = _colour(0), _colour(0 if same_colours else 30)
    seen = _walk_past(appearance, (red, blue))
    ids = {p: {i for frame in seen for q, i in frame if q == p} for p in (0, 1)}
    assert seen[0] == [(0, 1), (1, 2)] and seen[-1] == [(0, 1), (1, 2)]  # found again after, either way
    assert (ids == {0: {1}, 1: {2}}) is kept, ids


def test_colours_of_a_box_are_its_middles_and_too_small_a_box_has_none() -> None:
    from flowpipe_nodes.track import appearance

    img = np.zeros((200, 300, 3), np.uint8)
    img[:, :100] = (0, 0, 200)  # red (BGR)
    img[:, 100:200] = (200, 0, 0)  # blue
    img[:, 200:] = (200, 0, 0)
    img[0:40, 200:] = (0, 0, 200)  # a red head over a blue torso: the middle is the torso
    boxes = np.array([[0, 0, 100, 200], [100, 0, 200, 200], [200, 0, 300, 200], [10, 10, 14, 14]], np.float64)
    c = appearance.colours(img, False, boxes)
    assert np.allclose(c, appearance.colours(img[..., ::-1], True, boxes), equal_nan=True)  # RGB reads the same
    d = appearance.distances(c, c)
    assert d[0, 1] > 0.9 and d[1, 2] < 1e-6 and d[0, 2] > 0.9  # red against blue; blue against the torso
    assert np.isnan(c[3]).all() and (d[3] == 0).all()  # a 4x4 box: no look, kept apart from nothing
    assert np.allclose(c[:3].sum(axis=1), 1.0)


def test_a_tracker_node_with_appearance_reads_the_colours_off_the_frame_and_says_it_reads_pixels() -> None:
    """The node takes each box's colours from the frame's pixels (BGR or RGB), so it declares those formats;
    without ``appearance`` it never reads a pixel and takes every format."""
    from flowpipe.frame import Detection, Frame
    from flowpipe.registry import lookup
    from flowpipe.testing import Harness

    cls = lookup("tracker")
    assert cls.contract(cls.Config(appearance=0.5)).pixels == {"BGR", "RGB"}
    assert "NV12" in cls.contract(cls.Config()).pixels
    node = cls("track", cls.Config(max_age=30, coast=5, reach=0.5, appearance=0.5))
    blue_ids, red_ids = set(), set()
    with Harness(node) as h:
        for i in range(30):
            xa, xb = 40 + 8 * i, 240 - 8 * i
            img = np.full((240, 320, 3), 90, np.uint8)
            img[50:150, xa:xa + 40] = (0, 0, 220)  # A in red
            img[50:150, xb:xb + 40] = (220, 0, 0)  # B in blue, in front
            f = Frame("cam", i, i / 25, img)
            f.detections = [Detection((float(x), 50.0, float(x + 40), 150.0), 0.9, "person")
                            for x in ([xa, xb] if abs(xa - xb) >= 40 else [xb])]
            out = h.node.process(f, "detections")
            for d in (out if isinstance(out, Frame) else out[0]).detections:
                if d.source != "predicted":
                    (blue_ids if d.box[0] == xb else red_ids).add(d.track_id)
        assert h.node.stats["kept_apart"] > 0
    assert blue_ids == {2} and red_ids == {1}, (blue_ids, red_ids)


def test_kept_apart_counts_only_pairs_that_would_have_gone_together() -> None:
    """A track that colours keep from a detection is counted only where overlap (or ``reach``) would have
    joined them: a detection of other colours far across the picture is no pair kept apart."""
    red, blue = _colour(0), _colour(30)
    t = tracker(max_age=30, coast=5, reach=0.5, appearance=0.5)
    for i in range(5):  # a red person walking right, confirmed and moving
        step(t, (shifted(FACE, dx=4 * i), 0.9), colours=np.array([red]))
    step(t, ((250.0, 20.0, 290.0, 70.0), 0.9), colours=np.array([blue]))  # red missed; blue far away
    assert t.kept_apart == 0
    step(t, (shifted(FACE, dx=24), 0.9), colours=np.array([blue]))  # blue where red was going
    assert t.kept_apart == 1

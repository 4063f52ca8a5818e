"""The camera's own motion: measured on real pictures (``flowpipe_nodes.track.motion``), carried through the
tracker (``gmc``) and through counting (the analytics node's ``camera_moving``), on a still street photograph
that a camera tilts down and shakes over, and on a fixed traffic camera whose cars cross."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest

from flowpipe.graph import load_graph
from flowpipe.runtime import Runner
from flowpipe_nodes.track.motion import CameraMotion, shift

ROOT = Path(__file__).resolve().parent.parent
SIZE = (640, 360)


def _camera(dx: float, dy: float, zoom: float = 1.0, turn: float = 0.0) -> np.ndarray:
    """A camera's motion about the picture's centre, in its pixels: zoomed by ``zoom``, turned by ``turn`` degrees,
    moved by ``dx``, ``dy``."""
    a = cv2.getRotationMatrix2D((SIZE[0] / 2, SIZE[1] / 2), turn, zoom)
    a[:, 2] += (dx, dy)
    return a


def _seen(photo: np.ndarray, pose: np.ndarray) -> np.ndarray:
    return cv2.warpAffine(photo, pose, SIZE, flags=cv2.INTER_AREA, borderMode=cv2.BORDER_REFLECT)


def _then(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a``'s motion, then ``b``'s."""
    return b[:, :2] @ a + np.hstack([np.zeros((2, 2)), b[:, 2:]])


@pytest.fixture(scope="module")
def astronaut() -> np.ndarray:
    """scikit-image's astronaut photograph (512x512), grey."""
    from skimage import data

    return cv2.cvtColor(data.astronaut(), cv2.COLOR_RGB2GRAY)


@pytest.mark.parametrize(("method", "motion"), [
    ("sparse", (7.0, -3.0, 1.01, 0.3)),  # a pan, a tilt, a zoom and a turn
    ("sparse", (-24.0, 9.0)),  # a fast pan
    ("ecc", (7.0, -3.0, 1.0, 0.3)),  # ECC's Euclidean warp: no zoom
])
def test_the_camera_s_motion_is_measured_on_a_real_photograph(astronaut: np.ndarray, method: str,
                                                              motion: tuple[float, ...]) -> None:
    """The astronaut photograph seen by a 640x360 camera, then seen again after the camera moved: the motion
    measured (on the pictures made 320 pixels across) puts every point of the picture within a third of a pixel
    of where the camera's motion did; the same two pictures give the same motion bit for bit, whatever ran
    between (OpenCV's RANSAC seeds its own generator on each call)."""
    pose = cv2.getRotationMatrix2D((256.0, 256.0), 0.0, 1.6)
    pose[:, 2] += (SIZE[0] / 2 - 256.0, SIZE[1] / 2 - 256.0)
    true = _camera(*motion)
    before, after = _seen(astronaut, pose), _seen(astronaut, _then(pose, true))
    got = []
    for _ in range(2):
        cam = CameraMotion(method)  # type: ignore[arg-type]
        assert cam.step(before) is None  # the first picture: nothing to measure from
        a = cam.step(after)
        assert a is not None
        got.append(a)
        cv2.setRNGSeed(12345)  # another generator state between: the same motion
        cv2.estimateAffinePartial2D(np.random.default_rng(0).random((50, 2), np.float32),
                                    np.random.default_rng(1).random((50, 2), np.float32), method=cv2.RANSAC)
    assert shift(got[0] - true + np.eye(2, 3), SIZE) < 1 / 3, got[0]
    assert got[0].tobytes() == got[1].tobytes()


@pytest.mark.parametrize("told", [True, False])
def test_an_object_moving_before_a_still_camera_is_left_out_of_its_motion(astronaut: np.ndarray, told: bool) -> None:
    """A still camera over the photograph, and a large object before it (a patch of the photograph, over half the
    picture and most of its corners) moving 12 px a frame: told its box as the tracker found it in the last
    frame, the camera's motion measured leaves it out and is nil to half a pixel; not told, the object's motion
    is taken for the camera's."""
    pose = cv2.getRotationMatrix2D((256.0, 256.0), 0.0, 1.6)
    pose[:, 2] += (SIZE[0] / 2 - 256.0, SIZE[1] / 2 - 256.0)
    still = _seen(astronaut, pose)
    patch = np.ascontiguousarray(still[0:300, 200:640])
    cam, measured = CameraMotion("sparse"), []
    for i in range(4):
        frame = still.copy()
        frame[0:300, 12 * i:12 * i + 440] = patch
        measured.append(cam.step(frame))
        if told:
            cam.seen([(12 * i, 0, 12 * i + 440, 300)])
    assert measured[0] is None
    for a in measured[1:]:
        assert a is not None
        assert shift(a, SIZE) < 0.5 if told else abs(a[0, 2] - 12) < 0.5, a


@pytest.mark.parametrize(("config", "message"), [
    ("{gmc: orb}", r"config.gmc: Input should be 'off', 'sparse' or 'ecc', got 'orb'"),
    ("{camera_motion: sparse}", r"config.camera_motion: expected true or false \(the camera's motion fitted to the "
                                r"tracks\), got 'sparse'; measured on the pictures it is gmc: sparse"),
])
def test_a_tracker_measuring_the_camera_s_motion_in_a_way_it_has_not_is_refused_naming_the_ways(
        config: str, message: str) -> None:
    from flowpipe.errors import GraphError

    text = ("nodes:\n  - {id: src, type: list_source, config: {feed: items}}\n"
            f"  - {{id: t, type: tracker, config: {config}, inputs: {{detections: src.frame}}}}\n")
    with pytest.raises(GraphError, match=r"node 't' \(tracker\): " + message):
        load_graph("g.yaml", text=text)


@pytest.mark.parametrize(("value", "gmc"), [("off", "off"), ("on", "sparse"), ("ecc", "ecc"), ("sparse", "sparse")])
def test_a_tracker_s_gmc_takes_off_and_on_as_yaml_reads_them(value: str, gmc: str) -> None:
    """YAML reads ``off`` and ``on`` as false and true: ``gmc: off`` is off, ``gmc: on`` the default way
    (sparse)."""
    text = ("nodes:\n  - {id: src, type: list_source, config: {feed: items}}\n"
            f"  - {{id: t, type: tracker, config: {{gmc: {value}}}, inputs: {{detections: src.frame}}}}\n")
    assert load_graph("g.yaml", text=text).node("t").config.gmc == gmc


def _tilted(path: Path, frames: int = 60, size: tuple[int, int] = (480, 270), shake: float = 2.0) -> Path:
    """A camera tilting down a still street photograph (ultralytics' bus, 810x1080, seen whole across) over
    ``frames`` frames, shaking by up to ``shake`` px either way each frame: the bus, whole at first, rises up
    through the picture and out at its top."""
    from flowpipe_eval.footage import footage_path

    photo = cv2.imread(str(footage_path("bus")))
    (ph, pw), (w, h) = photo.shape[:2], size
    s = w / pw
    rng = np.random.default_rng(1)
    out = cv2.VideoWriter(str(path), cv2.VideoWriter.fourcc(*"mp4v"), 25.0, size)
    for i in range(frames):
        dx, dy = rng.uniform(-shake, shake, 2)
        top = (ph - h / s) * i / (frames - 1)
        out.write(cv2.warpAffine(photo, np.float64([[s, 0, dx], [0, s, -s * top + dy]]), size,
                                 flags=cv2.INTER_AREA, borderMode=cv2.BORDER_REPLICATE))
    out.release()
    return path


def _count(tmp_path: Path, src: Path, max_frames: int | None = None, **params: Any) -> list[dict[str, Any]]:
    """graphs/vehicle_count.yaml on ``src`` with ``params``: its records."""
    out = tmp_path / "vc"
    spec = load_graph(str(ROOT / "graphs" / "vehicle_count.yaml"),
                      {"input": str(src), "output": str(out / "vc.mp4"), "metadata": str(out / "vc.jsonl"),
                       "events": str(out / "ev"), "clips": str(out / "clips"), "device": "CPU", **params})
    res = Runner(spec, max_frames=max_frames).run()
    assert res.ok, res.error
    return [json.loads(line) for line in (out / "vc.jsonl").read_text().splitlines()]


def test_vehicle_count_counts_nothing_while_the_camera_tilts_and_shakes_over_a_still_street(tmp_path: Path) -> None:
    """graphs/vehicle_count.yaml as it ships (the detector on the whole picture alone: ``tiles: null``), on a
    camera tilting down a still street photograph and shaking (60 frames): the parked bus rises over a line across the middle and into a zone along the top of the picture
    (counting on regardless, ``camera_moving: null``: one crossing, near frame 50, and the bus in the zone). The
    tracker measures the camera moving 3-9 px a frame: counting pauses on the second frame, the first it can be
    measured on, and stays paused; no crossing, nobody in the zone, and every record after the first says
    camera_moving."""
    src = _tilted(tmp_path / "tilt.mp4")
    shapes = {"line": [[0, 0.5], [1, 0.5]], "zone": [[0, 0], [1, 0], [1, 0.3], [0, 0.3]], "tiles": None}
    recs = _count(tmp_path, src, **shapes)
    assert len(recs) == 60 and {o["label"] for r in recs for o in r["objects"]} == {"bus"}
    assert [r["analytics"]["camera_moving"] for r in recs] == [False] + [True] * 59
    assert [(r["frame"], r["analytics"]["counting"]) for r in recs if "counting" in r["analytics"]] == [(1, "paused")]
    assert all(r["analytics"]["camera_motion"] is None or r["analytics"]["camera_motion"] > 2 for r in recs)
    assert not [c for r in recs for c in r["analytics"]["crossings"]]
    assert not [t for r in recs for t in r["analytics"]["zones"]["zone"]["tracks"]]
    assert recs[-1]["analytics"]["lines"]["line"] == {"in": 0, "out": 0, "labels": {}}
    counted = _count(tmp_path, src, camera_moving=None, **shapes)  # what the camera's motion alone crosses
    assert [c["label"] for r in counted for c in r["analytics"]["crossings"]] == ["bus"]
    assert [t for r in counted for t in r["analytics"]["zones"]["zone"]["tracks"]]


def test_vehicle_count_counts_cars_crossing_before_a_fixed_camera(tmp_path: Path) -> None:
    """graphs/vehicle_count.yaml as it ships, on the first 40 frames of dvr-scan's motorway seen from a bridge
    (1280x720), with its line across the road: the camera's motion measured stays under 1 px a frame, counting
    never pauses, and the three cars that drive away over the line in those frames are counted (as without
    the camera's motion measured: frames 17, 27 and 34)."""
    from flowpipe_eval.crossings import clip_file, line

    recs = _count(tmp_path, clip_file("motorway"), max_frames=40, line=line("motorway", "vehicles"))
    assert len(recs) == 40
    assert not any(r["analytics"]["camera_moving"] for r in recs)
    assert max(r["analytics"]["camera_motion"] or 0.0 for r in recs) < 1.0
    crossed = [(r["frame"], c["direction"]) for r in recs for c in r["analytics"]["crossings"]]
    assert crossed == [(17, "out"), (27, "out"), (34, "out")], crossed

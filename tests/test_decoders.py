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

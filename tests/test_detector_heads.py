"""The heads detectors are exported with, decoded by pure functions (nodes/decode/heads.py): outputs written
as each exporter lays them out, with objects at known places, decoded back to those places to the pixel."""
from __future__ import annotations

import numpy as np
import pytest

from flowpipe_nodes.decode.heads import (
    Extra,
    anchor_free,
    detr,
    end_to_end,
    masks_of,
    objectness,
    polygon,
    rle,
    suppress,
    yolox,
    yolox_grid,
)

SIZE = (640, 480)  # the tensor's width and height
# three objects: two of class 2 overlapping a little, one of class 0 lying on the first (another class:
# never suppressed by it)
BOXES = np.array([[100, 80, 220, 300], [200, 100, 330, 280], [110, 90, 210, 290]], np.float32)
CLASSES = np.array([2, 2, 0])
SCORES = np.array([0.9, 0.8, 0.7], np.float32)


def _xywh(b: np.ndarray) -> np.ndarray:
    return np.column_stack([(b[:, 0] + b[:, 2]) / 2, (b[:, 1] + b[:, 3]) / 2, b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]])


def _rows(n_classes: int, noise: int = 40, rng: int = 0, classes: np.ndarray = CLASSES) -> tuple[np.ndarray, np.ndarray]:
    """Each object's row, each with a weaker duplicate shifted by 4 px (which suppression removes), and
    ``noise`` rows under every threshold: boxes (cx, cy, w, h) and class scores."""
    r = np.random.default_rng(rng)
    dup = BOXES + 4
    boxes = np.concatenate([_xywh(BOXES), _xywh(dup), r.uniform(0, 400, (noise, 4))])
    scores = np.zeros((len(boxes), n_classes), np.float32)
    scores[np.arange(3), classes] = SCORES
    scores[3 + np.arange(3), classes] = SCORES - 0.1
    scores[6:] = r.uniform(0, 0.2, (noise, n_classes))
    return boxes.astype(np.float32), scores


def _same(found, boxes=BOXES, scores=SCORES, classes=CLASSES) -> None:
    order = np.argsort(-scores)
    np.testing.assert_allclose(found.boxes, boxes[order], atol=0.5)
    np.testing.assert_allclose(found.scores, scores[order], atol=1e-5)
    assert found.classes.tolist() == classes[order].tolist()


def test_anchor_free_yolov8_channels_first_with_per_class_suppression() -> None:
    boxes, scores = _rows(80)
    out = np.concatenate([boxes, scores], 1).T  # [4+C, N], as YOLOv8 writes it (batch axis off)
    found = anchor_free(out, 80, SIZE, threshold=0.25, iou=0.45)
    _same(found)  # the duplicates suppressed, class 0's box on class 2's kept
    assert found.masks is None and found.keypoints is None
    with pytest.raises(ValueError, match=r"expected \[4\+80\+0, N\], got \[85, 46\]"):
        anchor_free(np.zeros((85, 46)), 80, SIZE, 0.25, 0.45)


def test_objectness_yolov5_score_is_objectness_times_class() -> None:
    boxes, scores = _rows(3)
    obj = np.full((len(boxes), 1), 0.5, np.float32)
    obj[:6] = 1.0
    out = np.concatenate([boxes, obj, scores], 1)  # [N, 5+C]
    _same(objectness(out, 3, SIZE, threshold=0.25, iou=0.45))
    obj[0] = 0.5  # the first object's objectness halves its score (0.45): its duplicate (0.8) stands for it
    found = objectness(np.concatenate([boxes, obj, scores], 1), 3, SIZE, threshold=0.25, iou=0.45)
    assert sorted(found.scores.tolist(), reverse=True) == pytest.approx([0.8, 0.8, 0.7], abs=1e-5)
    assert any(np.allclose(b, BOXES[0] + 4, atol=0.5) for b in found.boxes)


def test_end_to_end_takes_rows_as_they_are() -> None:
    rows = np.zeros((300, 6), np.float32)  # [300, 6]: x1, y1, x2, y2, score, class, zero-padded
    rows[:3, :4], rows[:3, 4], rows[:3, 5] = BOXES, SCORES, CLASSES
    rows[3, :4], rows[3, 4] = BOXES[0] + 2, 0.6  # a near-duplicate: an end-to-end head meant it, kept
    found = end_to_end(rows, SIZE, threshold=0.5)
    assert len(found) == 4 and found.scores.tolist() == pytest.approx([0.9, 0.8, 0.7, 0.6])
    _same(end_to_end(rows, SIZE, threshold=0.65))


def test_detr_boxes_are_fractions_and_logits_go_through_a_sigmoid() -> None:
    q = 300
    boxes = np.tile(np.array([[0.5, 0.5, 0.1, 0.1]], np.float32), (q, 1))
    logits = np.full((q, 80), -8.0, np.float32)
    w, h = SIZE
    boxes[:3] = _xywh(BOXES) / np.array([w, h, w, h], np.float32)
    logit = np.log(SCORES / (1 - SCORES))
    logits[np.arange(3), CLASSES] = logit
    _same(detr(boxes, logits, SIZE, threshold=0.5))
    probs = 1 / (1 + np.exp(-logits))
    _same(detr(boxes, probs, SIZE, threshold=0.5, sigmoid=False))  # RT-DETR's export: scores already


def test_yolox_decodes_grid_offsets_and_log_sizes() -> None:
    size = (64, 32)
    cells, steps = yolox_grid(size)
    assert len(cells) == 8 * 4 + 4 * 2 + 2 * 1
    out = np.zeros((len(cells), 5 + 2), np.float32)
    # one object at centre (20, 12), 16x8 px, class 1, in the stride-8 cell (2, 1)
    i = int(np.flatnonzero((cells[:, 0] == 2) & (cells[:, 1] == 1) & (steps == 8))[0])
    out[i, :4] = [20 / 8 - 2, 12 / 8 - 1, np.log(16 / 8), np.log(8 / 8)]
    out[i, 4], out[i, 6] = 0.9, 0.8
    found = yolox(out, 2, size, threshold=0.5, iou=0.45)
    np.testing.assert_allclose(found.boxes, [[12, 8, 28, 16]], atol=1e-4)
    assert found.classes.tolist() == [1] and found.scores.tolist() == pytest.approx([0.72])
    with pytest.raises(ValueError, match=r"expected \[42, 5\+2\] \(strides \[8, 16, 32\] over 64x32\)"):
        yolox(out[:-1], 2, size, 0.5, 0.45)


def test_segmentation_masks_from_prototypes_inside_each_box() -> None:
    protos = np.zeros((32, 120, 160), np.float32)  # a quarter of the tensor's 640x480
    protos[0] = -1.0
    protos[0, 20:75, 25:55] = 1.0  # prototype 0: one blob, at (100..220, 80..300) in tensor pixels
    protos[1] = 1.0  # prototype 1: everywhere
    boxes, scores = _rows(80, noise=0)
    coefs = np.zeros((len(boxes), 32), np.float32)
    coefs[:, 0] = 1.0
    out = np.concatenate([boxes, scores, coefs], 1).T  # [4+C+32, N], as YOLOv8-seg writes it
    found = anchor_free(out, 80, SIZE, 0.25, 0.45, extra=Extra("masks", 32, protos))
    assert found.masks is not None and len(found.masks) == 3
    # scaled to the tensor as ultralytics' predictor scales them (bilinear, half-pixel centres): the blob's
    # edges fall half way between the prototypes' pixels, at x 100..219 and y 80..299
    first = found.masks[0].whole(SIZE)
    assert first[81:299, 101:219].all() and first[80:300, 100:220].sum() == 220 * 120 - 4  # the blob (its
    assert first.sum() == 220 * 120 - 4  # corners rounded off by the scaling), inside its box
    second = found.masks[1].whole(SIZE)  # box (200..330, 100..280): the blob's part inside it only
    assert second.sum() == 180 * 20 and second[100:280, 200:220].all()
    assert found.masks[2].whole(SIZE).sum() == 200 * 100  # box (110..210, 90..290), pixels x1 <= x < x2
    assert masks_of(coefs[:0], protos, boxes[:0], SIZE) == []
    outline = polygon(found.masks[0])
    xs, ys = [p[0] for p in outline], [p[1] for p in outline]
    assert (min(xs), min(ys), max(xs), max(ys)) == (100.0, 80.0, 219.0, 299.0)  # pixel indices, as ultralytics
    code = rle(first)
    assert code["size"] == [480, 640] and sum(code["counts"]) == 480 * 640
    assert sum(code["counts"][1::2]) == 220 * 120 - 4  # the runs of 1s


def test_an_object_whose_mask_is_empty_is_dropped_as_ultralytics_drops_it() -> None:
    protos = np.full((32, 120, 160), -1.0, np.float32)
    protos[0, 20:75, 25:55] = 1.0  # one blob, under the first object's box alone
    boxes, scores = _rows(80, noise=0)
    coefs = np.zeros((len(boxes), 32), np.float32)
    coefs[:, 0] = 1.0
    coefs[1] = 0.0  # the second object's mask: nowhere (every logit 0, under the sigmoid's half)
    out = np.concatenate([boxes, scores, coefs], 1).T
    found = anchor_free(out, 80, SIZE, 0.25, 0.45, extra=Extra("masks", 32, protos))
    assert len(found) == 2 and found.masks is not None and len(found.masks) == 2
    np.testing.assert_allclose(found.boxes, BOXES[[0, 2]])


def test_pose_keypoints_ride_after_the_classes() -> None:
    boxes, scores = _rows(1, noise=5, classes=np.zeros(3, np.int64))  # one class: person
    kpts = np.zeros((len(boxes), 17, 3), np.float32)
    kpts[:3, :, 0] = BOXES[:, :1] + 5  # every keypoint of each object 5 px inside its box's corner
    kpts[:3, :, 1] = BOXES[:, 1:2] + 5
    kpts[:3, :, 2] = 0.9
    out = np.concatenate([boxes, scores, kpts.reshape(len(boxes), -1)], 1).T  # [4+1+51, N]: YOLOv8-pose
    found = anchor_free(out, 1, SIZE, 0.25, 0.45, extra=Extra("keypoints", 17))
    assert found.keypoints is not None and found.keypoints.shape == (2, 17, 3)  # one class: the third suppressed
    np.testing.assert_allclose(found.keypoints[0, 0], [105, 85, 0.9])


def test_suppression_is_per_class_and_best_first() -> None:
    keep = suppress(BOXES.astype(np.float64), SCORES, CLASSES, 0.3, 0)
    assert keep.tolist() == [0, 1, 2]  # 0 and 1 overlap under 0.3; 2 is another class
    keep = suppress(BOXES.astype(np.float64), SCORES, np.zeros(3, np.int64), 0.3, 0)
    assert keep.tolist() == [0, 1]  # one class: the box lying on the first goes

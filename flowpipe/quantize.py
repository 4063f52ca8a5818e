"""INT8 models made with NNCF's post-training quantization (``flowpipe models quantize``).

A registry entry's ``quantize`` (``flowpipe/model_registry.yaml``) is its recipe: the FP32 model it is made
from, what it calibrates on, the input size and NNCF's preset and subset size. Calibration inputs are made the
way the graphs make them: ``frames`` letterboxed into the size (never enlarged, centred, padded with 0), RGB,
0..255 float, NCHW (``graphs/face_blur.yaml``'s ``pre``). They come from the user's footage (``--calib VIDEO
|DIR``: frames spread evenly over it), or, for the registry's own INT8 entries, from the evaluation clips the
recipe names (the ``flowpipe_eval`` package of a checkout, which marks the faces a ``faces`` recipe crops).
The same recipe and footage give the same inputs in the same order, so a model is made the same way each time.

A model of the user's own (``flowpipe models quantize PATH``: an .onnx, an OpenVINO .xml, the folder ultralytics'
OpenVINO export writes) is made by ``quantize_file``: its calibration inputs are the graphs' own preprocess of
pictures of the user's footage, except every ``HOLD_OUT``-th picture (``held_out``), on which ``agreement`` then
compares the INT8 model's detections with the FP32 model's. What the model says about itself (its rt_info, a
``metadata.yaml`` beside it) goes with the INT8 model, so a graph reads the same preprocessing and labels off it.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from . import models
from .frame import Detection

PRESETS = ("mixed", "performance")
IMAGES = (".jpg", ".jpeg", ".png", ".bmp")
#: Every this-many-th picture of the footage (the 5th, 10th, ...) is held out of calibration by default; the
#: INT8 model's detections are compared with the FP32 model's on those.
HOLD_OUT = 5
#: The operations whose weights NNCF quantizes; what comes after the last of them is a model's own decoding.
WEIGHTED = ("Convolution", "GroupConvolution", "ConvolutionBackpropData", "GroupConvolutionBackpropData", "MatMul")


def picks(n: int, k: int) -> list[int]:
    """``k`` indices spread evenly over ``n`` (all of them where ``k >= n``)."""
    return sorted({int(i) for i in np.linspace(0, n - 1, min(k, n)).round()})


def letterboxed(img: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """A BGR picture as the face_blur graph's preprocess writes it: scaled down to fit ``size`` (w, h), never
    up, centred, padded with 0, RGB, 0..255 float32, [1, 3, h, w]."""
    out_w, out_h = size
    h, w = img.shape[:2]
    s = min(out_w / w, out_h / h, 1.0)
    new_w, new_h = max(1, min(out_w, round(w * s))), max(1, min(out_h, round(h * s)))
    if (new_w, new_h) != (w, h):
        img = cv2.resize(img, (new_w, new_h), interpolation=cv2.INTER_LINEAR)
    px, py = (out_w - new_w) // 2, (out_h - new_h) // 2
    out = np.zeros((1, 3, out_h, out_w), np.float32)
    out[0, :, py:py + new_h, px:px + new_w] = cv2.cvtColor(img, cv2.COLOR_BGR2RGB).transpose(2, 0, 1)
    return out


def _pictures(path: Path) -> Iterator[np.ndarray]:
    """Every picture of a video file, or of a folder's images in name order (BGR)."""
    if path.is_dir():
        for f in sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGES):
            img = cv2.imread(str(f))
            if img is not None:
                yield img
        return
    import av

    with av.open(str(path)) as container:
        for frame in container.decode(video=0):
            yield frame.to_ndarray(format="bgr24")


def footage_inputs(name: str, recipe: dict[str, Any], path: Path, count: int) -> list[np.ndarray]:
    """``count`` calibration inputs of ``name``'s ``frames`` recipe from the pictures at ``path`` (a video or a
    folder of images), spread evenly over them."""
    if recipe["calibrate"] != "frames":
        raise ValueError(f"model '{name}': calibrate: {recipe['calibrate']} crops marked faces, which footage of "
                         "your own does not have; --calib takes frames recipes only (calibrate: frames)")
    if not path.exists():
        raise FileNotFoundError(f"--calib: no such file or folder: {path}")
    size = (int(recipe["size"][0]), int(recipe["size"][1]))
    try:
        pictures = list(_pictures(path))
    except Exception as e:
        raise ValueError(f"--calib: {path}: not a video or a folder of images ({type(e).__name__}: {e})") from e
    if not pictures:
        raise ValueError(f"--calib: {path}: no pictures in it (a video, or a folder of {'/'.join(IMAGES)})")
    return [letterboxed(pictures[i], size) for i in picks(len(pictures), count)]


def check_recipe(name: str, recipe: dict[str, Any]) -> None:
    if recipe["calibrate"] not in ("frames", "faces"):
        raise ValueError(f"model '{name}': calibrate: expected frames or faces, got {recipe['calibrate']!r}")
    if recipe["preset"] not in PRESETS:
        raise ValueError(f"model '{name}': preset: expected one of {PRESETS}, got {recipe['preset']!r}")


def quantize(name: str, settings: dict[str, Any], inputs: list[np.ndarray], about: dict[str, Any]) -> dict[str, Any]:
    """Makes the INT8 IR of registry entry ``name`` from ``inputs`` by ``settings`` (``models.quantize_settings``)
    in the model cache, with the JSON ``models.quantized_current`` checks beside it (``about``: what the inputs
    were, recorded in it); returns that JSON's content."""
    import nncf
    import openvino as ov

    recipe = settings["recipe"]
    check_recipe(name, recipe)
    t0 = time.perf_counter()
    source = models.resolve(recipe["from"])
    if len(inputs) > int(recipe["subset_size"]):  # spread over all the footage, not its first inputs
        inputs = [inputs[i] for i in picks(len(inputs), int(recipe["subset_size"]))]
    model = ov.Core().read_model(str(source))
    if models.entry(recipe["from"])["input"].get("any_size"):  # the file holds placeholder dimensions
        model.reshape({model.inputs[0].get_any_name(): list(inputs[0].shape)})
    preset = nncf.QuantizationPreset.MIXED if recipe["preset"] == "mixed" else nncf.QuantizationPreset.PERFORMANCE
    quantized = nncf.quantize(model, nncf.Dataset(inputs), preset=preset, subset_size=len(inputs))
    dest = models.cached_path(name)
    meta_path = models.metadata_path(name)
    meta_path.unlink(missing_ok=True)  # no JSON while the files change: a crash leaves a model made again
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        xml = Path(tmp) / dest.name
        ov.save_model(quantized, str(xml), compress_to_fp16=False)
        os.replace(xml.with_suffix(".bin"), dest.with_suffix(".bin"))
        os.replace(xml, dest)
    meta = settings | {
        "source_file": source.name,
        **about,
        "calibration_inputs": len(inputs),
        "calibration_shape": list(inputs[0].shape),
        "seconds": round(time.perf_counter() - t0, 1),
        "xml_sha256": models.sha256_of(dest),
        "bin_sha256": models.sha256_of(dest.with_suffix(".bin")),
    }
    part = meta_path.with_suffix(".json.part")
    part.write_text(json.dumps(meta, indent=2) + "\n")
    os.replace(part, meta_path)
    return meta


def quantized_ops(model: Any) -> dict[str, int]:
    """How many FakeQuantize ops and 8-bit integer constants an ``openvino.Model`` holds (0 and 0: not
    quantized)."""
    fq = sum(1 for op in model.get_ops() if op.get_type_name() == "FakeQuantize")
    int8 = sum(1 for op in model.get_ops() if op.get_type_name() == "Constant"
               and op.get_output_element_type(0).get_type_name() in ("i8", "u8"))
    return {"FakeQuantize": fq, "int8_constants": int8}


# -- a model of the user's own ---------------------------------------------------------------------------------
def held_out(n: int, every: int = HOLD_OUT) -> tuple[list[int], list[int]]:
    """The pictures of footage of ``n`` split into those calibrated on and those held out: every ``every``-th
    (indices every-1, 2*every-1, ...), which calibration never sees."""
    if every < 2:
        raise ValueError(f"--hold-out: expected 2 or more (every Nth picture held out), got {every}")
    if n < every:
        raise ValueError(f"--calib: {n} pictures; one in {every} is held out to compare the models on: expected "
                         f"{every} or more")
    return [i for i in range(n) if (i + 1) % every], list(range(every - 1, n, every))


def count_pictures(path: Path) -> int:
    """How many pictures a video file (its video packets, read without decoding them), or a folder of images,
    holds."""
    if not path.exists():
        raise FileNotFoundError(f"--calib: no such file or folder: {path}")
    if path.is_dir():
        return sum(1 for p in path.iterdir() if p.suffix.lower() in IMAGES)
    import av

    try:
        with av.open(str(path)) as container:
            return sum(1 for packet in container.demux(video=0) if packet.size)
    except Exception as e:  # whatever PyAV says of a file that is no video, in one line
        raise ValueError(f"--calib: {path}: not a video or a folder of images ({type(e).__name__}: {e})") from e


def pictures_at(path: Path, indices: list[int]) -> dict[int, np.ndarray]:
    """The pictures (BGR) at ``indices`` of a video file or a folder of images (in name order), read once; only
    those are kept."""
    wanted = set(indices)
    return {i: img for i, img in enumerate(_pictures(path)) if i in wanted}


def decode_tail(model: Any) -> list[str]:
    """The operations after a model's last weighted layers (``WEIGHTED``) on the way to its outputs: a detector's
    own decoding (boxes in pixels beside scores from 0 to 1), left in floating point, as ultralytics' INT8 export
    leaves its head's: one 8-bit scale over both would round the scores away."""
    tail: set[str] = set()
    todo = [r.input_value(0).get_node() for r in model.get_results()]
    while todo:
        op = todo.pop()
        name = op.get_friendly_name()
        if op.get_type_name() in (*WEIGHTED, "Parameter", "Constant") or name in tail:
            continue
        tail.add(name)
        todo += [v.get_node() for v in op.input_values()]
    return sorted(tail)


def quantize_file(source: Path, inputs: list[np.ndarray], dest: Path, preset: str = "mixed") -> dict[str, Any]:
    """The INT8 IR of the model file ``source`` calibrated on ``inputs`` (its own preprocessing's tensors), written
    to ``dest`` (.xml and .bin, whole or not at all) with what the model says about itself: its rt_info (NNCF
    keeps it) and the ``metadata.yaml`` beside it, written beside ``dest`` (one there that says otherwise is not
    overwritten). Returns what was made: NNCF's version, the preset, the inputs' count and shape, the time, the
    operations left in floating point and the quantized ones (``quantized_ops``)."""
    import nncf
    import openvino as ov

    if preset not in PRESETS:
        raise ValueError(f"preset: expected one of {PRESETS}, got {preset!r}")
    meta = source.parent / "metadata.yaml"
    meta_dest = dest.parent / "metadata.yaml"
    if meta.is_file() and meta_dest.is_file() and meta_dest.resolve() != meta.resolve() \
            and meta_dest.read_bytes() != meta.read_bytes():
        raise ValueError(f"{meta_dest} says another model's metadata; expected a folder of its own for the INT8 "
                         f"model of {source} (-o)")
    t0 = time.perf_counter()
    model = ov.Core().read_model(str(source))
    tail = decode_tail(model)
    with _nncf_quiet():
        quantized = nncf.quantize(model, nncf.Dataset(inputs), subset_size=len(inputs),
                                  preset=nncf.QuantizationPreset.MIXED if preset == "mixed" else
                                  nncf.QuantizationPreset.PERFORMANCE,
                                  ignored_scope=nncf.IgnoredScope(names=tail, validate=False))
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        xml = Path(tmp) / dest.name
        ov.save_model(quantized, str(xml), compress_to_fp16=False)
        os.replace(xml.with_suffix(".bin"), dest.with_suffix(".bin"))
        os.replace(xml, dest)
    if meta.is_file() and not meta_dest.is_file():
        shutil.copyfile(meta, meta_dest)
    return {"nncf": models.nncf_version(), "preset": preset, "calibration_inputs": len(inputs),
            "calibration_shape": list(inputs[0].shape), "seconds": round(time.perf_counter() - t0, 1),
            "left_in_floating_point": len(tail), **quantized_ops(quantized)}


@contextlib.contextmanager
def _nncf_quiet() -> Iterator[None]:
    """NNCF's notes from warnings up, and its progress on stderr: stdout is the command's own (``--json``)."""
    log = logging.getLogger("nncf")
    level = log.level
    log.setLevel(logging.WARNING)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        log.setLevel(level)


def iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Intersection over union of every box of ``a`` (N, 4) with every box of ``b`` (M, 4), x1 y1 x2 y2."""
    a, b = np.asarray(a, np.float64).reshape(-1, 4), np.asarray(b, np.float64).reshape(-1, 4)
    x1, y1 = np.maximum(a[:, None, 0], b[None, :, 0]), np.maximum(a[:, None, 1], b[None, :, 1])
    x2, y2 = np.minimum(a[:, None, 2], b[None, :, 2]), np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    return inter / np.maximum(area_a[:, None] + area_b[None, :] - inter, 1e-9)


def agreement(fp32: list[list[Detection]], int8: list[list[Detection]], min_iou: float = 0.5) -> dict[str, Any]:
    """How far two models' detections on the same pictures agree: on each picture, each FP32 box matched to the
    INT8 box of the same label it overlaps most (IoU ``min_iou`` or more), best overlaps first, each box once.
    Returns the boxes of each, those matched (their share of FP32's), those FP32 found and INT8 did not
    (missed), those only INT8 found (extra), and over the matches the mean IoU and the mean absolute
    difference of the scores (None where there is none to average)."""
    ious: list[float] = []
    diffs: list[float] = []
    for ones, others in zip(fp32, int8):
        for label in {d.label for d in ones} & {d.label for d in others}:
            a = [d for d in ones if d.label == label]
            b = [d for d in others if d.label == label]
            m = iou(np.array([d.box for d in a]), np.array([d.box for d in b]))
            pairs = sorted(((m[i, j], i, j) for i in range(len(a)) for j in range(len(b)) if m[i, j] >= min_iou),
                           reverse=True)
            used_a: set[int] = set()
            used_b: set[int] = set()
            for v, i, j in pairs:
                if i not in used_a and j not in used_b:
                    used_a.add(i)
                    used_b.add(j)
                    ious.append(float(v))
                    diffs.append(abs(a[i].score - b[j].score))
    n_fp32, n_int8, matched = sum(map(len, fp32)), sum(map(len, int8)), len(ious)
    return {"frames": len(fp32), "min_iou": min_iou, "fp32_boxes": n_fp32, "int8_boxes": n_int8, "matched": matched,
            "matched_share": round(matched / n_fp32, 4) if n_fp32 else None, "missed": n_fp32 - matched,
            "extra": n_int8 - matched, "mean_iou": round(float(np.mean(ious)), 4) if ious else None,
            "mean_score_difference": round(float(np.mean(diffs)), 4) if diffs else None}

"""INT8 models made with NNCF's post-training quantization, calibrated on the evaluation footage.

The recipe is a registry entry's ``quantize`` (``flowpipe/model_registry.yaml``): the FP32 model it is made
from, the clips calibrated on (the others are held out: results on them say how the model does on footage
it never saw), the frames taken of each, the input size and NNCF's preset and subset size. Calibration
inputs are made the way the graphs make them: ``frames`` letterboxed into the size (never enlarged, centred,
padded with 0), RGB, 0..255 float, NCHW (``graphs/face_blur.yaml``'s ``pre``); ``faces`` a square of twice
each true face's longer side around it, at the model's input size, normalized by the entry's mean and scale
(the second looks' crops, ``look_pre`` and ``look_b_pre``). The same recipe gives the same frames in the
same order, so a model is made the same way each time.

    flowpipe models quantize centerface            # -> <cache>/centerface_int8.xml, .bin, .json
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from .. import models
from .clips import CLIPS, clip

PRESETS = ("mixed", "performance")


def held_out(recipe: dict[str, Any]) -> list[str]:
    """The evaluation clips a recipe does not calibrate on."""
    return [name for name in CLIPS if name not in recipe["clips"]]


def _picks(n: int, k: int) -> list[int]:
    """``k`` frame indices spread evenly over ``n`` frames (all of them where ``k >= n``)."""
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


def face_crop(img: np.ndarray, box: tuple[float, float, float, float], size: tuple[int, int]) -> np.ndarray:
    """The square of twice ``box``'s longer side around its centre (padding with 0 outside the picture),
    resized to ``size`` (w, h), RGB, [h, w, 3] uint8: what a second look at a face sees."""
    x1, y1, x2, y2 = box
    side = 2.0 * max(x2 - x1, y2 - y1)
    cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
    sx, sy = size[0] / side, size[1] / side
    m = np.array([[sx, 0, size[0] / 2 - cx * sx], [0, sy, size[1] / 2 - cy * sy]], np.float64)
    crop = cv2.warpAffine(img, m, size, flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT, borderValue=0)
    return cv2.cvtColor(crop, cv2.COLOR_BGR2RGB)


def calibration_inputs(name: str, recipe: dict[str, Any]) -> list[np.ndarray]:
    """The model inputs ``recipe`` calibrates on, in a fixed order (clip by clip, frame by frame, face by face)."""
    e = models.entry(name)
    size = (int(recipe["size"][0]), int(recipe["size"][1]))
    inputs: list[np.ndarray] = []
    for clip_name in recipe["clips"]:
        c = clip(clip_name)
        for i in _picks(len(c.frames), int(recipe["frames_per_clip"])):
            if recipe["calibrate"] == "frames":
                inputs.append(letterboxed(c.frames[i], size))
                continue
            mean = np.asarray(e["input"]["mean"], np.float32)
            scale = np.asarray(e["input"]["scale"], np.float32)
            for fid in sorted(c.faces[i]):
                crop = (face_crop(c.frames[i], c.faces[i][fid], size).astype(np.float32) - mean) / scale
                inputs.append(crop[None] if e["input"]["layout"] == "NHWC" else crop.transpose(2, 0, 1)[None])
    if not inputs:
        raise ValueError(f"model '{name}': the recipe gives no calibration input (clips {recipe['clips']})")
    return inputs


def quantize(name: str, recipe: dict[str, Any] | None = None) -> dict[str, Any]:
    """Makes the INT8 IR of registry entry ``name`` by ``recipe`` (default: the registry's) in the model cache,
    with the JSON ``models.quantized_current`` checks beside it; returns that JSON's content."""
    import nncf
    import openvino as ov

    settings = models.quantize_settings(name, recipe)
    recipe = settings["recipe"]
    if recipe["calibrate"] not in ("frames", "faces"):
        raise ValueError(f"model '{name}': calibrate: expected frames or faces, got {recipe['calibrate']!r}")
    if recipe["preset"] not in PRESETS:
        raise ValueError(f"model '{name}': preset: expected one of {PRESETS}, got {recipe['preset']!r}")
    unknown = [c for c in recipe["clips"] if c not in CLIPS]
    if unknown:
        raise KeyError(f"model '{name}': no evaluation clip {unknown}; expected some of: {', '.join(CLIPS)}")
    t0 = time.perf_counter()
    source = models.resolve(recipe["from"])
    inputs = calibration_inputs(name, recipe)
    if len(inputs) > int(recipe["subset_size"]):  # spread over every clip, not the first clips' inputs
        inputs = [inputs[i] for i in _picks(len(inputs), int(recipe["subset_size"]))]
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
        "calibration_clips": list(recipe["clips"]),
        "held_out_clips": held_out(recipe),
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

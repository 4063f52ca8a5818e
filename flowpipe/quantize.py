"""INT8 models made with NNCF's post-training quantization (``flowpipe models quantize``).

A registry entry's ``quantize`` (``flowpipe/model_registry.yaml``) is its recipe: the FP32 model it is made
from, what it calibrates on, the input size and NNCF's preset and subset size. Calibration inputs are made the
way the graphs make them: ``frames`` letterboxed into the size (never enlarged, centred, padded with 0), RGB,
0..255 float, NCHW (``graphs/face_blur.yaml``'s ``pre``). They come from the user's footage (``--calib VIDEO
|DIR``: frames spread evenly over it), or, for the registry's own INT8 entries, from the evaluation clips the
recipe names (the ``flowpipe_eval`` package of a checkout, which marks the faces a ``faces`` recipe crops).
The same recipe and footage give the same inputs in the same order, so a model is made the same way each time.
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from . import models

PRESETS = ("mixed", "performance")
IMAGES = (".jpg", ".jpeg", ".png", ".bmp")


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

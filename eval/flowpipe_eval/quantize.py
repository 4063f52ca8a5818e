"""The registry's INT8 models calibrated on the evaluation footage (``flowpipe models quantize NAME``).

A recipe's ``clips`` are calibrated on; the other evaluation clips are held out (results on them say how
the model does on footage it never saw). ``frames`` recipes take clips' frames as the graph's preprocess
writes them (``flowpipe.quantize.letterboxed``); ``faces`` recipes a square of twice each true face's longer
side around it, at the model's input size, normalized by the entry's mean and scale (the second looks' crops,
``look_pre`` and ``look_b_pre``).

    flowpipe models quantize centerface            # -> <cache>/centerface_int8.xml, .bin, .json
"""
from __future__ import annotations

from typing import Any

import cv2
import numpy as np

from flowpipe import models
from flowpipe.quantize import check_recipe, letterboxed, picks
from flowpipe.quantize import quantize as make

from .clips import CLIPS, clip


def held_out(recipe: dict[str, Any]) -> list[str]:
    """The evaluation clips a recipe does not calibrate on."""
    return [name for name in CLIPS if name not in recipe["clips"]]


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
        for i in picks(len(c.frames), int(recipe["frames_per_clip"])):
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
    """Makes the INT8 IR of registry entry ``name`` by ``recipe`` (default: the registry's), calibrated on the
    evaluation clips it names, in the model cache; returns the JSON written beside it."""
    settings = models.quantize_settings(name, recipe)
    recipe = settings["recipe"]
    check_recipe(name, recipe)
    unknown = [c for c in recipe["clips"] if c not in CLIPS]
    if unknown:
        raise KeyError(f"model '{name}': no evaluation clip {unknown}; expected some of: {', '.join(CLIPS)}")
    about = {"calibration_clips": list(recipe["clips"]), "held_out_clips": held_out(recipe)}
    return make(name, settings, calibration_inputs(name, recipe), about)

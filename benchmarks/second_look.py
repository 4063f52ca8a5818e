"""Would a second detector tell CenterFace's weak faces from its weak non-faces? Measured on the evaluation
clips (flowpipe/eval), before any graph is built on it.

    python benchmarks/second_look.py --out benchmarks/results/second_look.json

CenterFace (the shipped face-blur graph's model, OpenVINO on the CPU) runs on every frame of the clip as
written (H.264 at its crf) at the graph's input size (the picture scaled to fit 960x544, never up); its
candidates from 0.25 up to the start score (0.6), after weighted suppression, are the ones the tracker
cannot start a track on alone. Each is a face when 30%
of its box lies on a true face (or on a face cut by the picture's edge), else not. BlazeFace short range
(MediaPipe, from the same wheel as the registry's ``blazeface_short``) then looks at a square of twice the
candidate's size around it, at 128x128: its best score among anchors near the middle. Reported per clip and
over all clips: how many candidates of each kind, and the share of each at or above a few second-look
scores. A second look that keeps the faces and drops the rest is worth a cascade stage.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import cv2
import numpy as np

START = 0.6  # graphs/face_blur.yaml: a candidate at this score starts a track by itself
LOW = 0.25  # ... and from this one it is a candidate
LOOKS = (0.4, 0.5, 0.6, 0.7)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(x, -50, 50)))


class Looker:
    def __init__(self) -> None:
        import openvino as ov
        from flowpipe.nodes.detect import blazeface_anchors

        from flowpipe.models import resolve

        self.core = ov.Core()
        self.compiled: dict[tuple[int, int], Any] = {}
        self.centerface = str(resolve("centerface"))
        blaze = self.core.read_model(str(resolve("blazeface_short")))
        self.blaze = self.core.compile_model(blaze, "CPU")
        self.central = (np.abs(blazeface_anchors("short") - 0.5) < 0.2).all(1)

    def candidates(self, rgb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """CenterFace's boxes (source pixels) and scores from LOW up to START."""
        from flowpipe.nodes.detect import weighted_nms

        h, w = rgb.shape[:2]
        s = min(960 / w, 544 / h, 1.0)
        nw, nh = round(w * s), round(h * s)
        tw, th = -(-nw // 32) * 32, -(-nh // 32) * 32
        if (tw, th) not in self.compiled:
            model = self.core.read_model(self.centerface)
            model.reshape([1, 3, th, tw])
            self.compiled[tw, th] = self.core.compile_model(model, "CPU")
        x = np.zeros((th, tw, 3), np.float32)
        x[:nh, :nw] = cv2.resize(rgb, (nw, nh), interpolation=cv2.INTER_AREA)
        by_ch: dict[int, list[np.ndarray]] = {}
        for v in self.compiled[tw, th](x.transpose(2, 0, 1)[None]).values():
            by_ch.setdefault(v.shape[1], []).append(v)
        heat, (scale, off) = by_ch[1][0][0, 0], by_ch[2]
        r, c = np.nonzero(heat > LOW)
        s0, s1 = np.exp(scale[0, 0, r, c]) * 4, np.exp(scale[0, 1, r, c]) * 4
        x1, y1 = (c + off[0, 1, r, c] + 0.5) * 4 - s1 / 2, (r + off[0, 0, r, c] + 0.5) * 4 - s0 / 2
        boxes, scores, _ = weighted_nms(np.stack([x1, y1, x1 + s1, y1 + s0], 1) / s,
                                        heat[r, c].astype(np.float64), 0.3)
        weak = scores < START
        return boxes[weak], scores[weak]

    def look(self, rgb: np.ndarray, box: np.ndarray) -> float:
        """BlazeFace short range on a square of twice the box's size around it."""
        cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
        k = 64.0 / max(box[2] - box[0], box[3] - box[1])  # the box's longer side -> half of 128 px
        m = np.array([[k, 0, 64 - cx * k], [0, k, 64 - cy * k]])
        crop = cv2.warpAffine(rgb, m, (128, 128), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT)
        out = next(v for v in self.blaze(((crop.astype(np.float32) - 127.5) / 127.5)[None]).values()
               if v.shape[-1] == 1)
        return float(_sigmoid(out.reshape(-1)[self.central]).max())


def _on_face(box: np.ndarray, faces: list) -> bool:
    area = max(1e-9, float((box[2] - box[0]) * (box[3] - box[1])))
    for f in faces:
        inter = max(0.0, min(box[2], f[2]) - max(box[0], f[0])) * max(0.0, min(box[3], f[3]) - max(box[1], f[1]))
        if inter >= 0.3 * area:
            return True
    return False


def _summary(looks: list[float]) -> dict[str, Any]:
    a = np.array(looks)
    return {"n": len(a), **({f"p{p}": round(float(np.percentile(a, p)), 3) for p in (10, 50, 90)} if len(a) else {}),
            **{f">={t}": round(float((a >= t).mean()), 3) if len(a) else None for t in LOOKS}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clips", nargs="*", help="default: all")
    ap.add_argument("--out")
    args = ap.parse_args()
    import tempfile

    import av

    from flowpipe.eval.clips import CLIPS, clip

    looker = Looker()
    work = Path(tempfile.mkdtemp(prefix="flowpipe-look-"))
    rows, faces_all, others_all = [], [], []
    for name in args.clips or list(CLIPS):
        c = clip(name)
        faces: list[float] = []
        others: list[float] = []
        with av.open(str(c.write(work / f"{name}.mp4"))) as video:  # as the graph sees it: H.264 at its crf
            pictures = [f.to_ndarray(format="rgb24") for f in video.decode(video=0)]
        for i, rgb in enumerate(pictures):
            truth = [*c.faces[i].values(), *(c.edges[i] if c.edges else [])]
            boxes, _ = looker.candidates(rgb)
            for b in boxes:
                (faces if _on_face(b, truth) else others).append(looker.look(rgb, b))
        row = {"clip": name, "faces": _summary(faces), "not_faces": _summary(others)}
        print(json.dumps(row), file=sys.stderr)
        rows.append(row)
        faces_all += faces
        others_all += others
    result = {"start": START, "candidates": LOW, "rows": rows,
              "all": {"faces": _summary(faces_all), "not_faces": _summary(others_all)}}
    print(json.dumps(result["all"]))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

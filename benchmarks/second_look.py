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
ON_FACE = 0.3  # a candidate with this share of its box on a true face (or one cut by the edge) is a face


class Looker:
    """CenterFace's candidates, and the look at them by the face-blur graph's own stages: the preprocess's
    ``objects`` crops and ``blazeface_check`` (BlazeFace run here one crop per request)."""

    def __init__(self) -> None:
        import openvino as ov
        from flowpipe.nodes.detect import BlazeFaceCheck, CenterFaceDecode
        from flowpipe.nodes.preprocess import Preprocess

        from flowpipe.models import resolve
        from flowpipe.testing import Harness

        self.core = ov.Core()
        self.compiled: dict[tuple[int, int], Any] = {}
        self.centerface = str(resolve("centerface"))
        blaze = self.core.read_model(str(resolve("blazeface_short")))
        self.blaze = self.core.compile_model(blaze, "CPU")
        crops = Preprocess.Config(size=(128, 128), color="RGB", layout="NHWC", mean=(127.5,) * 3,
                                  scale=(127.5,) * 3, objects={"max": 64, "scale": 2.0}, backend="cpu")
        self.crops = Harness(Preprocess("look_pre", crops)).__enter__()
        self.check = Harness(BlazeFaceCheck("checked")).__enter__()
        self.decode = CenterFaceDecode("faces", CenterFaceDecode.Config(score_threshold=LOW, iou_threshold=0.3))

    def candidates(self, rgb: np.ndarray) -> np.ndarray:
        """CenterFace's boxes (source pixels) with scores from LOW up to START: the picture letterboxed as the
        graph's preprocess does it, the outputs through the graph's decoder."""
        from flowpipe.nodes.preprocess import geometry

        from flowpipe.frame import Frame

        h, w = rgb.shape[:2]
        geo = geometry(w, h, 960, 544, "letterbox", upscale=False)
        tw, th = -(-geo.new_w // 32) * 32, -(-geo.new_h // 32) * 32  # size_to_source, align 32
        geo = geometry(w, h, tw, th, "letterbox", upscale=False)
        if (tw, th) not in self.compiled:
            model = self.core.read_model(self.centerface)
            model.reshape([1, 3, th, tw])
            self.compiled[tw, th] = self.core.compile_model(model, "CPU")
        x = np.zeros((th, tw, 3), np.float32)
        x[geo.pad_y:geo.pad_y + geo.new_h, geo.pad_x:geo.pad_x + geo.new_w] = cv2.resize(
            rgb, (geo.new_w, geo.new_h), interpolation=cv2.INTER_LINEAR)
        out = self.compiled[tw, th](x.transpose(2, 0, 1)[None])
        frame = Frame("clip", 0, 0.0, rgb, "RGB", meta={"preprocess": geo.as_meta()},
                      tensors={k.get_any_name(): v for k, v in out.items()})
        self.decode.process(frame, "tensors")
        return np.array([d.box for d in frame.detections if d.score < START], np.float64).reshape(-1, 4)

    def looks(self, rgb: np.ndarray, boxes: np.ndarray) -> list[float]:
        """BlazeFace short range's look at a square of twice each box's size around it."""
        from flowpipe.frame import Detection, Frame

        frame = Frame("clip", 0, 0.0, rgb, "RGB", detections=[Detection(tuple(b), 0.5, "face") for b in boxes])
        self.crops.node.process(frame, "frame")
        entries = frame.meta["preprocess"]["entries"]
        frame.tensors = {"classificators": np.concatenate(
            [self.blaze(frame.tensors["input"][i:i + 1])["classificators"] for i in range(entries)])
            if entries else np.zeros((0, 896, 1), np.float32)}
        self.check.node.process(frame, "tensors")
        frame.end("out")  # the crops' pooled memory goes back
        return [d.attributes["face"] for d in frame.detections]


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
    from flowpipe.eval.score import on_face

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
            boxes = looker.candidates(rgb)
            for b, look in zip(boxes, looker.looks(rgb, boxes)):
                (faces if on_face(b, truth) >= ON_FACE else others).append(look)
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

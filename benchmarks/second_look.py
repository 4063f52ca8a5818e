"""Do the face-blur graph's second looks tell CenterFace's weak faces from its weak non-faces? Measured on the
evaluation clips (eval/flowpipe_eval).

    python benchmarks/second_look.py --out OUT.json   # run_all.py second_look

CenterFace (the shipped face-blur graph's model, OpenVINO on the CPU) runs on every frame of the clip as
written (H.264 at its crf) at the graph's input size (the picture scaled to fit 960x544, never up); its
detections from ``candidates`` (0.25) up to ``sure`` (0.7), after weighted suppression, are the ones the graph
looks at again. Each is a face when 30% of its box lies on a true face (or on a face cut by the picture's
edge), else not. The looks are the graph's own stages, with its parameters (graphs/face_blur.yaml): CenterFace
again on a square of twice the detection's size at 128x128, slid inside the picture (``centerface_check``);
where it scores under ``not_face``, BlazeFace short range on the square (``blazeface_check``). Reported per
clip and over all clips, for faces and not faces: how many, the closer look's percentiles, the share the
looks make sure (CenterFace >= ``look`` or BlazeFace >= 0.7: starts a track) and the share they reject
(CenterFace under ``not_face`` and BlazeFace under ``not_face_b``: starts nothing, whatever the score).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent
PARAMS = yaml.safe_load((ROOT / "graphs" / "face_blur.yaml").read_text())["params"]
LOW, SURE = float(PARAMS["candidates"]), float(PARAMS["sure"])
LOOK, NOT_FACE, NOT_FACE_B, SURE_B = float(PARAMS["look"]), float(PARAMS["not_face"]), float(PARAMS["not_face_b"]), 0.7
ON_FACE = 0.3  # a detection with this share of its box on a true face (or one cut by the edge) is a face


class Looker:
    """CenterFace's detections under ``sure``, and the looks at them by the face-blur graph's own stages."""

    def __init__(self) -> None:
        import openvino as ov

        from flowpipe.models import resolve
        from flowpipe.testing import Harness
        from flowpipe_nodes.decode import BlazeFaceCheck, CenterFaceCheck, CenterFaceDecode
        from flowpipe_nodes.preprocess import Preprocess

        self.core = ov.Core()
        self.compiled: dict[tuple[int, int], Any] = {}
        self.centerface = str(resolve("centerface"))
        close = self.core.read_model(self.centerface)
        close.reshape([1, 3, 128, 128])
        self.close = self.core.compile_model(close, "CPU")
        self.blaze = self.core.compile_model(self.core.read_model(str(resolve("blazeface_short"))), "CPU")
        objects = {"scores": (LOW, SURE), "max": 64, "scale": 2.0}
        self.crops = Harness(Preprocess("look_pre", Preprocess.Config(
            size=(128, 128), color="RGB", layout="NCHW", objects={**objects, "inside": True},
            backend="cpu"))).__enter__()
        self.crops_b = Harness(Preprocess("look_b_pre", Preprocess.Config(
            size=(128, 128), color="RGB", layout="NHWC", mean=(127.5,) * 3, scale=(127.5,) * 3,
            objects={**objects, "attributes": {"face": (0.0, NOT_FACE)}}, backend="cpu"))).__enter__()
        self.check = Harness(CenterFaceCheck("checked")).__enter__()
        self.check_b = Harness(BlazeFaceCheck("checked_b", BlazeFaceCheck.Config(attribute="face_b"))).__enter__()
        self.decode = CenterFaceDecode("faces", CenterFaceDecode.Config(score_threshold=LOW, iou_threshold=0.3))

    def candidates(self, rgb: np.ndarray) -> np.ndarray:
        """CenterFace's boxes (source pixels) with scores from LOW up to SURE: the picture letterboxed as the
        graph's preprocess does it, the outputs through the graph's decoder."""
        from flowpipe.frame import Frame, TensorLayout
        from flowpipe_nodes.preprocess import geometry

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
        frame = Frame("clip", 0, 0.0, rgb, "RGB", layout=TensorLayout("pre", (tw, th), (geo,)),
                      tensors={k.get_any_name(): v for k, v in out.items()})
        self.decode.process(frame, "tensors")
        return np.array([d.box for d in frame.detections if d.score < SURE], np.float64).reshape(-1, 4)

    def looks(self, rgb: np.ndarray, boxes: np.ndarray) -> list[dict[str, float]]:
        """Each box's looks as the graph takes them: CenterFace's closer one, then BlazeFace's where it saw
        no face (run here one crop per request)."""
        from flowpipe.frame import Detection, Frame

        dets = [Detection(tuple(b), LOW, "face") for b in boxes]
        for crops, model, check in ((self.crops, self.close, self.check), (self.crops_b, self.blaze, self.check_b)):
            frame = Frame("clip", 0, 0.0, rgb, "RGB", detections=dets)  # one per stage: each ends once
            crops.node.process(frame, "frame")
            assert frame.layout is not None and frame.layout.filled is not None
            n = frame.layout.filled
            runs = [model(frame.tensors["input"][i:i + 1]) for i in range(n)]
            frame.tensors = {o.get_any_name(): np.concatenate([r[o] for r in runs]) if runs else
                             np.zeros((0, *o.get_shape()[1:]), np.float32) for o in model.outputs}
            check.node.process(frame, "tensors")
            frame.end("out")  # the crops' pooled memory goes back
        return [dict(d.attributes) for d in dets]


def _summary(looks: list[dict[str, float]]) -> dict[str, Any]:
    close = np.array([x["face"] for x in looks])
    sure = [x["face"] >= LOOK or x.get("face_b", 0.0) >= SURE_B for x in looks]
    rejected = [x["face"] < NOT_FACE and x.get("face_b", 0.0) < NOT_FACE_B for x in looks]
    return {"n": len(looks), **({f"p{p}": round(float(np.percentile(close, p)), 3) for p in (1, 10, 50, 90)}
                                if len(looks) else {}),
            "sure": round(float(np.mean(sure)), 4) if looks else None,
            "rejected": round(float(np.mean(rejected)), 4) if looks else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clips", nargs="*", help="default: all")
    ap.add_argument("--out")
    args = ap.parse_args()
    import tempfile

    import av

    from flowpipe_eval.clips import CLIPS, clip
    from flowpipe_eval.score import on_face

    looker = Looker()
    work = Path(tempfile.mkdtemp(prefix="flowpipe-look-"))
    rows, faces_all, others_all = [], [], []
    for name in args.clips or list(CLIPS):
        c = clip(name)
        faces: list[dict[str, float]] = []
        others: list[dict[str, float]] = []
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
    result = {"candidates": LOW, "sure": SURE, "look": LOOK, "not_face": NOT_FACE, "not_face_b": NOT_FACE_B,
              "rows": rows, "all": {"faces": _summary(faces_all), "not_faces": _summary(others_all)}}
    print(json.dumps(result["all"]))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

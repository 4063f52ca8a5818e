"""The loop most users write: read, preprocess, infer, decode boxes, blur, write, one frame at a time.

    python benchmarks/baselines/sync_loop.py VIDEO MODEL OUT.mp4 OUT.jsonl [--frames N]
"""
from __future__ import annotations

import argparse
import time

import common
import cv2
import openvino as ov


def main(video: str, model: str, out_mp4: str, out_jsonl: str, frames: int | None = None, device: str = "CPU") -> dict:
    compiled = ov.Core().compile_model(model, device, {"PERFORMANCE_HINT": "LATENCY"})
    request = compiled.create_infer_request()
    anc = common.anchors()
    cap = cv2.VideoCapture(video)
    fps = cap.get(cv2.CAP_PROP_FPS) or 30.0
    writer: cv2.VideoWriter | None = None
    n = 0
    times: list[float] = []
    t0 = time.perf_counter()
    with open(out_jsonl, "w") as meta:
        while frames is None or n < frames:
            ok, frame = cap.read()
            if not ok:
                break
            x, geo = common.preprocess(frame)
            result = request.infer({0: x})
            faces = common.decode(*common.outputs(result, compiled), geo, anc, frame.shape)
            common.blur(frame, faces)
            if writer is None:
                size = (frame.shape[1], frame.shape[0])
                writer = cv2.VideoWriter(out_mp4, cv2.VideoWriter.fourcc(*"mp4v"), fps, size)
            writer.write(frame)
            meta.write(common.record(n, faces) + "\n")
            times.append(time.perf_counter())
            n += 1
    if writer is not None:
        writer.release()
    cap.release()
    wall = time.perf_counter() - t0
    return {"frames": n, "seconds": wall, "fps": n / wall, "times": times}


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("video"), ap.add_argument("model"), ap.add_argument("out_mp4"), ap.add_argument("out_jsonl")
    ap.add_argument("--frames", type=int)
    a = ap.parse_args()
    r = main(a.video, a.model, a.out_mp4, a.out_jsonl, a.frames)
    print({k: v for k, v in r.items() if k != "times"})

"""What an expert writes by hand: a decode thread, AsyncInferQueue for inference, results handled in
frame order on the main thread (decode boxes, blur, write).

    python benchmarks/baselines/expert_loop.py VIDEO MODEL OUT.mp4 OUT.jsonl [--frames N]
"""
from __future__ import annotations

import argparse
import queue
import threading
import time

import common
import cv2
import openvino as ov


def main(video: str, model: str, out_mp4: str, out_jsonl: str, frames: int | None = None, device: str = "CPU") -> dict:
    compiled = ov.Core().compile_model(model, device, {"PERFORMANCE_HINT": "THROUGHPUT"})
    infer_queue = ov.AsyncInferQueue(compiled)  # sized by OPTIMAL_NUMBER_OF_INFER_REQUESTS
    anc = common.anchors()
    cap = cv2.VideoCapture(video)
    fps = cap.get(cv2.CAP_PROP_FPS) or 30.0
    decoded: queue.Queue = queue.Queue(maxsize=16)

    def reader() -> None:  # decode (and preprocess) off the main thread; OpenCV releases the GIL
        i = 0
        while frames is None or i < frames:
            ok, frame = cap.read()
            if not ok:
                break
            x, geo = common.preprocess(frame)
            decoded.put((i, frame, x, geo))
            i += 1
        decoded.put(None)

    done: dict[int, tuple] = {}
    cond = threading.Condition()

    def on_done(request: ov.InferRequest, item: tuple) -> None:
        i, frame, geo = item
        reg, cls = (request.get_tensor(o).data.copy() for o in _order(compiled))
        with cond:
            done[i] = (frame, geo, reg, cls)
            cond.notify()

    infer_queue.set_callback(on_done)
    threading.Thread(target=reader, daemon=True).start()
    writer: cv2.VideoWriter | None = None
    n_in, n_out = 0, 0
    times: list[float] = []
    t0 = time.perf_counter()
    meta = open(out_jsonl, "w")

    def drain(block: bool) -> None:
        nonlocal writer, n_out
        while True:
            with cond:
                if n_out not in done:
                    if not block or n_out >= n_in:
                        return
                    cond.wait()
                    continue
                frame, geo, reg, cls = done.pop(n_out)
            faces = common.decode(reg, cls, geo, anc, frame.shape)
            common.blur(frame, faces)
            if writer is None:
                size = (frame.shape[1], frame.shape[0])
                writer = cv2.VideoWriter(out_mp4, cv2.VideoWriter.fourcc(*"mp4v"), fps, size)
            writer.write(frame)
            meta.write(common.record(n_out, faces) + "\n")
            times.append(time.perf_counter())
            n_out += 1

    while True:
        item = decoded.get()
        if item is None:
            break
        i, frame, x, geo = item
        infer_queue.start_async({0: x}, (i, frame, geo))
        n_in += 1
        drain(block=False)
    infer_queue.wait_all()
    drain(block=True)
    meta.close()
    if writer is not None:
        writer.release()
    wall = time.perf_counter() - t0
    return {"frames": n_out, "seconds": wall, "fps": n_out / wall, "times": times}


def _order(compiled: ov.CompiledModel) -> list:
    outs = list(compiled.outputs)
    return sorted(outs, key=lambda o: 0 if o.get_partial_shape()[-1].get_length() == 16 else 1)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("video"), ap.add_argument("model"), ap.add_argument("out_mp4"), ap.add_argument("out_jsonl")
    ap.add_argument("--frames", type=int)
    a = ap.parse_args()
    r = main(a.video, a.model, a.out_mp4, a.out_jsonl, a.frames)
    print({k: v for k, v in r.items() if k != "times"})

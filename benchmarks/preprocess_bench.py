"""OpenCL preprocessing vs the usual cv2.resize + cvtColor + numpy normalize, side by side in one run.

A 1080p BGR frame into a 128x128 (NHWC, [-1, 1]) and a 640x640 (NCHW, /255) f32 tensor. The OpenCL
path is the flowpipe kernel on the chosen device (PoCL on a CPU machine; NVIDIA's OpenCL on the GPU
machine, where the frame upload is included in the time).

    python benchmarks/preprocess_bench.py [--device cpu|gpu|NAME] [--iters 200] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from flowpipe.accel import devices
from flowpipe.frame import Frame, FrameRef
from flowpipe.memory import Lease, SharedBuffer
from flowpipe.testing import Harness
from flowpipe_nodes.preprocess import Preprocess, geometry

CASES = {
    "1080p->128x128 NHWC [-1,1]": dict(size=(128, 128), color="RGB", layout="NHWC", mean=(127.5,) * 3,
                                       scale=(127.5,) * 3, resize="letterbox"),
    "1080p->640x640 NCHW /255": dict(size=(640, 640), color="RGB", layout="NCHW", scale=(255.0,) * 3,
                                     resize="letterbox"),
}


def opencv_numpy(img: np.ndarray, cfg: dict[str, Any]) -> np.ndarray:
    """What a hand-written loop does."""
    ow, oh = cfg["size"]
    geo = geometry(img.shape[1], img.shape[0], ow, oh, cfg["resize"])
    small = cv2.resize(img, (geo.new_w, geo.new_h), interpolation=cv2.INTER_LINEAR)
    small = cv2.cvtColor(small, cv2.COLOR_BGR2RGB)
    canvas = np.zeros((oh, ow, 3), np.float32)
    canvas[geo.pad_y:geo.pad_y + geo.new_h, geo.pad_x:geo.pad_x + geo.new_w] = small
    canvas = (canvas - np.array(cfg.get("mean", (0, 0, 0)), np.float32)) / np.array(cfg["scale"], np.float32)
    if cfg["layout"] == "NCHW":
        canvas = np.ascontiguousarray(canvas.transpose(2, 0, 1))
    return canvas[None]


def time_it(fn: Callable[[], object], iters: int) -> list[float]:
    for _ in range(5):
        fn()
    out = []
    for _ in range(iters):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1e3)
    return out


def measure(cfg: dict[str, Any], img_buf: SharedBuffer, img: np.ndarray, device: str, iters: int) -> dict[str, Any]:
    node = Preprocess("pre", Preprocess.Config(**cfg, backend="opencl", opencl_device=device))
    frame_lease = Lease(img_buf, None)  # the frame as a pooled source hands it over (never released)

    def run_ocl() -> np.ndarray:
        ref = FrameRef("s", 0)
        ref.leases.append(frame_lease)
        f = Frame("s", 0, 0.0, img, "BGR", ref=ref)
        out = node.process(f, "frame").tensors["input"]
        for extra in ref.leases[1:]:  # the tensor's lease, as the engine releases it with the frame
            extra.release()
        return np.asarray(out)

    with Harness(node):
        ocl = time_it(run_ocl, iters)
        cpu = time_it(lambda: opencv_numpy(img, cfg), iters)
        diff = float(np.abs(np.asarray(run_ocl(), np.float32) - opencv_numpy(img, cfg)).max())
        kernel = node.kernel_ns[-iters:]
    return {
        "opencl_ms_median": round(statistics.median(ocl), 3),
        "opencv_numpy_ms_median": round(statistics.median(cpu), 3),
        "opencl_ms_min_max": [round(min(ocl), 3), round(max(ocl), 3)],
        "opencv_numpy_ms_min_max": [round(min(cpu), 3), round(max(cpu), 3)],
        "kernel_ms_median": round(statistics.median(kernel) / 1e6, 3),
        "speedup": round(statistics.median(cpu) / statistics.median(ocl), 2), "max_abs_diff": round(diff, 5)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="auto")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--json")
    a = ap.parse_args()
    dev = devices().opencl.device(a.device)
    img_buf = SharedBuffer(1920 * 1080 * 3)
    img = img_buf.array((1080, 1920, 3))
    img[...] = cv2.GaussianBlur(np.random.default_rng(0).integers(0, 255, (1080, 1920, 3), np.uint8), (5, 5), 2)
    cases: dict[str, dict[str, object]] = {}
    report = {"opencl_device": dev.name, "unified_memory": dev.unified_memory, "cases": cases}
    for name, cfg in CASES.items():
        cases[name] = measure(cfg, img_buf, img, a.device, a.iters)
    print(json.dumps(report, indent=2))
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

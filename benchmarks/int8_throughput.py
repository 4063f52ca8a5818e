"""CenterFace (and BlazeFace short) FP32 against the INT8 models NNCF made of them (flowpipe models quantize):
raw OpenVINO throughput on one device, random input, an async queue of the compiled model's optimal number
of requests (THROUGHPUT hint), as benchmark_app runs it; the models one after the other, in turns. The FP32
model runs twice: as the graphs run it (the device's default precision: bf16 on a CPU with AVX512_BF16 or
AMX) and held to f32 (INFERENCE_PRECISION_HINT f32).

    python benchmarks/int8_throughput.py [--device CPU] [--seconds 10] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np
import openvino as ov

from flowpipe import models

CASES = [("centerface", [1, 3, 544, 960]), ("centerface", [1, 3, 736, 1280]), ("blazeface_short", [1, 128, 128, 3])]


def async_rate(compiled: Any, data: np.ndarray, seconds: float, warmup_rounds: int = 1) -> tuple[int, int, float]:
    """benchmark_app's measure of a compiled model: an async queue of its optimal number of requests kept busy
    with ``data`` for ``seconds``, after ``warmup_rounds`` runs of each request. Returns (requests, requests
    done, seconds elapsed)."""
    n = int(compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))
    queue = ov.AsyncInferQueue(compiled, n)
    for _ in range(warmup_rounds * n):
        queue.start_async({0: data})
    queue.wait_all()
    done = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        queue.start_async({0: data})
        done += 1
    queue.wait_all()
    return n, done, time.perf_counter() - t0


def throughput(name: str, shape: list[int], device: str, seconds: float, f32: bool = False) -> dict[str, Any]:
    """Frames per second of ``name`` at ``shape`` over ``seconds`` (after a warm-up run of each request);
    ``f32``: held to f32 where the device would run it at a lower precision."""
    core = ov.Core()
    model = core.read_model(str(models.resolve(name)))
    model.reshape({model.inputs[0].get_any_name(): shape})
    config = {"PERFORMANCE_HINT": "THROUGHPUT"} | ({"INFERENCE_PRECISION_HINT": "f32"} if f32 else {})
    compiled = core.compile_model(model, device, config)
    data = np.random.default_rng(0).uniform(0, 255, shape).astype(np.float32)
    n, done, elapsed = async_rate(compiled, data, seconds)
    precision = compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()
    return {"model": name, "shape": shape, "device": device, "requests": n, "frames": done,
            "fps": round(done / elapsed, 1), "precision": precision}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="CPU")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=2, help="turns of FP32 then INT8; the best of each is kept")
    ap.add_argument("--json")
    args = ap.parse_args()
    rows = []
    for name, shape in CASES:
        int8 = models.quantized_names(name)[0]
        best: dict[str, dict[str, Any]] = {}
        for _ in range(args.rounds):
            for key, m, f32 in (("fp32", name, False), ("fp32_f32", name, True), ("int8", int8, False)):
                r = throughput(m, shape, args.device, args.seconds, f32)
                if key not in best or r["fps"] > best[key]["fps"]:
                    best[key] = r
        row = {"model": name, "shape": shape, "fp32_fps": best["fp32"]["fps"],
               "fp32_runs_at": best["fp32"]["precision"], "fp32_f32_fps": best["fp32_f32"]["fps"],
               "int8_fps": best["int8"]["fps"], "int8_vs_fp32": round(best["int8"]["fps"] / best["fp32"]["fps"], 2),
               "int8_vs_f32": round(best["int8"]["fps"] / best["fp32_f32"]["fps"], 2),
               "requests": best["fp32"]["requests"]}
        rows.append(row)
        print(row, flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

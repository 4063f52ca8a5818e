"""The GPU zero-copy path vs the host path, side by side in one run (run it where OpenVINO has a GPU).

A: frames -> OpenCL preprocess in OpenVINO's GPU context -> remote-tensor (OCL_BUFFER) GPU inference
B: frames -> OpenCV/numpy preprocess on the host -> host-tensor GPU inference
Both read the same 1080p frames from shared host memory and run the same model: BlazeFace full range
(192x192 input) or PP-OCRv4 text detection (640x640 NCHW, `--model ppocr_det` or a path to its IR); the
ratio is end-to-end frames per second, A over B. Each pair is measured back to back, repeated.

    python benchmarks/gpu_path.py [--model blazeface_full|ppocr_det|PATH.xml] [--frames 600] [--repeats 3]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from flowpipe import load_graph
from flowpipe.cli.bench import bench_graph

GRAPH = """
nodes:
  - id: src
    type: synthetic_source
    config: {{count: 100000, width: 1920, height: 1080, fill: {fill}, format: {fmt}}}
  - id: pre
    type: preprocess
    workers: {workers}
    config: {{{pre}, backend: {backend}}}
    inputs: src.frame
  - id: detect
    type: inference
    config: {{model: "{model}", device: {device}, performance_hint: {hint}, num_requests: {nreq}{batch}}}
    inputs: pre.tensor
  - {{id: post, type: {decoder}, inputs: detect.tensors}}
"""
PRE = {
    "blazeface": ("size: [192, 192], resize: letterbox, color: RGB, layout: NHWC, mean: [127.5, 127.5, 127.5], "
                  "scale: [127.5, 127.5, 127.5]", "blazeface_decode"),
    "ppocr": ("size: [640, 640], resize: letterbox, color: BGR, layout: NCHW, mean: [123.675, 116.28, 103.53], "
              "scale: [58.395, 57.12, 57.375]", "db_decode"),
}


def one(backend: str, device: str, frames: int, model: str, hint: str, nreq: int, fill: bool = True,
        fmt: str = "BGR", batch: int = 1, streams: int = 1, workers: int | None = None) -> dict:
    pre, decoder = PRE["ppocr" if "ppocr" in model else "blazeface"]
    text = GRAPH.format(backend=backend, device=device, pre=pre, decoder=decoder, model=model, hint=hint, nreq=nreq,
                        fill=str(fill).lower(), fmt=fmt,
                       batch=f", batch: {batch}, batch_timeout_ms: 20" if batch > 1 else "",
                       workers=workers or streams)
    return bench_graph("<gpu>", spec=load_graph("<gpu>", text=text), frames=frames, warmup=50, streams=streams)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=600)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="GPU")
    ap.add_argument("--model", default="blazeface_full")
    ap.add_argument("--hint", default="THROUGHPUT")
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--format", default="BGR", choices=["BGR", "NV12"],
                    help="frames as software decode gives them (BGR) or as hardware decoders do (NV12)")
    ap.add_argument("--batch", type=int, default=8, help="frames per inference request (both sides)")
    ap.add_argument("--streams", type=int, default=1, help="cameras, each its own source thread; the "
                    "preprocess runs one worker per stream")
    ap.add_argument("--pre-workers", type=int, help="preprocess threads (default: one per stream)")
    ap.add_argument("--only", choices=["opencl+remote", "host+host"], help="run one side only (diagnostics)")
    ap.add_argument("--no-fill", action="store_true", help="the source does not write its frames (isolates the rest)")
    ap.add_argument("--switch-interval", type=float, help="sys.setswitchinterval in ms (GIL hand-over; diagnostics)")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.switch_interval:
        sys.setswitchinterval(a.switch_interval / 1e3)
    fps: dict[str, list[float]] = {"opencl+remote": [], "host+host": []}
    # process CPU time per frame: what the path leaves free
    cpu: dict[str, list[float]] = {"opencl+remote": [], "host+host": []}
    detail = {}
    for _ in range(a.repeats):
        for name, backend in (("opencl+remote", "opencl"), ("host+host", "cpu")):
            if a.only and name != a.only:
                continue
            r = one(backend, a.device, a.frames, a.model, a.hint, a.requests, fill=not a.no_fill, fmt=a.format,
                  batch=a.batch, streams=a.streams, workers=a.pre_workers)
            assert r["exit"] == 0, r["error"]
            fps[name].append(r["fps"])
            if r["cpu_ms_per_frame"] is not None:
                cpu[name].append(r["cpu_ms_per_frame"])
            detail[name] = {"inference": r["inference"], "bytes_copied_per_frame": r["bytes_copied_per_frame"],
                            "busy_ms_per_frame": {k: round(v["busy_s"] / max(v["frames"], 1) * 1e3, 3)
                                                  for k, v in r["nodes"].items()},
                            "nodes": {k: v["latency_ms"] for k, v in r["nodes"].items()}}
    ratios = [x / y for x, y in zip(fps["opencl+remote"], fps["host+host"])]
    out = {"device": a.device, "batch": a.batch, "streams": a.streams,
           "pre_workers": a.pre_workers or a.streams,
           "model": Path(a.model).stem if a.model.endswith(".xml") else a.model,
           "hint": a.hint, "requests": a.requests,
           "source": "frames not written (--no-fill)" if a.no_fill else "every 1080p frame written by the source",
           "switch_interval_ms": a.switch_interval,
           "frame_format": a.format,
           "fps": {k: {"median": round(statistics.median(v), 1), "min": round(min(v), 1), "max": round(max(v), 1)}
                   for k, v in fps.items() if v},
           "cpu_ms_per_frame": {k: round(statistics.median(v), 3) for k, v in cpu.items() if v},
           "ratio_opencl_remote_over_host": {"median": round(statistics.median(ratios), 3),
                                             "min": round(min(ratios), 3), "max": round(max(ratios), 3)}
           if ratios else None,
           "detail": detail}
    print(json.dumps(out, indent=2))
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

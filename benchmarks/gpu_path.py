"""The GPU zero-copy path vs the host path, side by side in one run (run it where OpenVINO has a GPU).

A: frames -> OpenCL preprocess in OpenVINO's GPU context -> remote-tensor (OCL_BUFFER) GPU inference
B: frames -> OpenCV/numpy preprocess on the host -> host-tensor GPU inference
Both read the same 1080p frames from shared host memory and run BlazeFace (full range); the ratio is
end-to-end frames per second, A over B. Each pair is measured back to back, repeated.

    python benchmarks/gpu_path.py [--frames 600] [--repeats 3] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from flowpipe import load_graph
from flowpipe.bench import bench_graph

GRAPH = """
nodes:
  - {{id: src, type: synthetic_source, config: {{count: 100000, width: 1920, height: 1080, fill: {fill}}}}}
  - id: pre
    type: preprocess
    config: {{size: [{size}, {size}], resize: letterbox, color: RGB, layout: NHWC, mean: [127.5, 127.5, 127.5],
             scale: [127.5, 127.5, 127.5], backend: {backend}}}
    inputs: src.frame
  - {{id: detect, type: inference, config: {{model: {model}, device: {device}, performance_hint: {hint}, num_requests: {nreq}}},
     inputs: pre.tensor}}
  - {{id: faces, type: blazeface_decode, config: {{variant: {variant}}}, inputs: detect.tensors}}
"""


def one(backend: str, device: str, frames: int, model: str, hint: str, nreq: int, fill: bool = True) -> dict:
    size, variant = (192, "full") if model == "blazeface_full" else (128, "short")
    text = GRAPH.format(backend=backend, device=device, size=size, model=model, variant=variant, hint=hint, nreq=nreq,
                        fill=str(fill).lower())
    return bench_graph("<gpu>", spec=load_graph("<gpu>", text=text), frames=frames, warmup=50)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=600)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="GPU")
    ap.add_argument("--model", default="blazeface_full")
    ap.add_argument("--hint", default="THROUGHPUT")
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--no-fill", action="store_true", help="the source does not write its frames (isolates the rest)")
    ap.add_argument("--json")
    a = ap.parse_args()
    fps = {"opencl+remote": [], "host+host": []}
    detail = {}
    for _ in range(a.repeats):
        for name, backend in (("opencl+remote", "opencl"), ("host+host", "cpu")):
            r = one(backend, a.device, a.frames, a.model, a.hint, a.requests, fill=not a.no_fill)
            assert r["exit"] == 0, r["error"]
            fps[name].append(r["fps"])
            detail[name] = {"inference": r["inference"], "bytes_copied_per_frame": r["bytes_copied_per_frame"],
                            "nodes": {k: v["latency_ms"] for k, v in r["nodes"].items()}}
    ratios = [x / y for x, y in zip(fps["opencl+remote"], fps["host+host"])]
    out = {"device": a.device, "model": a.model, "hint": a.hint, "requests": a.requests,
           "source": "frames not written (--no-fill)" if a.no_fill else "every 1080p frame written by the source",
           "fps": {k: {"median": round(statistics.median(v), 1), "min": round(min(v), 1), "max": round(max(v), 1)}
                   for k, v in fps.items()},
           "ratio_opencl_remote_over_host": {"median": round(statistics.median(ratios), 3),
                                             "min": round(min(ratios), 3), "max": round(max(ratios), 3)},
           "detail": detail}
    print(json.dumps(out, indent=2))
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

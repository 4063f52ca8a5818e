"""The inference node's throughput against benchmark_app -hint throughput, same model and device,
measured one after the other in one run. The node is fed ready tensors from a pool (nothing else runs).

    python benchmarks/inference_throughput.py [--model blazeface_full] [--device CPU] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from flowpipe import load_graph, models
from flowpipe.cli.bench import bench_graph

SHAPES = {"blazeface_full": [1, 192, 192, 3], "blazeface_short": [1, 128, 128, 3]}


def benchmark_app(model: str, device: str, seconds: int) -> float:
    exe = shutil.which("benchmark_app")
    cmd = [exe] if exe else [sys.executable, "-m", "openvino.tools.benchmark.main"]
    cmd += ["-m", str(models.resolve(model)), "-d", device, "-hint", "throughput", "-t", str(seconds)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    m = re.search(r"Throughput:\s+([\d.]+)\s+FPS", out)
    if not m:
        raise RuntimeError("benchmark_app printed no throughput:\n" + out[-2000:])
    return float(m.group(1))


def node_fps(model: str, device: str, frames: int, requests: int | None) -> dict:
    nreq = f", num_requests: {requests}" if requests else ""
    text = f"""
plugins: [bench_nodes]
nodes:
  - {{id: src, type: bench_tensor_source, config: {{shape: {SHAPES[model]}, count: 10000000}}}}
  - {{id: detect, type: inference, config: {{model: {model}, device: {device}, performance_hint: THROUGHPUT{nreq}}},
     inputs: src.tensor, queue: 32}}
  - {{id: sink, type: null_sink, inputs: detect.tensors, queue: 32}}
"""
    return bench_graph("<infer>", spec=load_graph("<infer>", text=text), frames=frames, warmup=200)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="blazeface_full")
    ap.add_argument("--device", default="CPU")
    ap.add_argument("--frames", type=int, default=3000)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--requests", type=int, default=None)
    ap.add_argument("--json")
    a = ap.parse_args()
    ratios, app, node = [], [], []
    last = {}
    for _ in range(a.repeats):
        b = benchmark_app(a.model, a.device, a.seconds)
        last = node_fps(a.model, a.device, a.frames, a.requests)
        app.append(b)
        node.append(last["fps"])
        ratios.append(last["fps"] / b)
    out = {"model": a.model, "device": a.device,
           "benchmark_app_fps": {"median": round(statistics.median(app), 1), "min": min(app), "max": max(app)},
           "node_fps": {"median": round(statistics.median(node), 1), "min": min(node), "max": max(node)},
           "ratio_node_over_benchmark_app": {"median": round(statistics.median(ratios), 3),
                                             "min": round(min(ratios), 3), "max": round(max(ratios), 3)},
           "node_requests": last["inference"]["inference.detect"]["requests"], "cpu_util_cores": last["cpu_util_cores"],
           "machine": last["machine"]}
    print(json.dumps(out, indent=2))
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

"""Each device's own ceiling for a graph, and how near a run of the graph comes to the sum of them.

    python benchmarks/device_ceilings.py --out OUT.json --streams 16 --processes 16 --frames 240 \\
        --config gpu:device=GPU --config gpu_cpu:device=GPU+CPU

For each configuration (``NAME[:PARAM=VALUE,...]``, graph parameters):

1. **The run.** ``flowpipe bench`` of the graph (graphs/face_blur.yaml by default) with its file sources
   looping. Its report gives, for each inference node, the requests it ran (``inferences``) and the images
   in them (``images``: a batch's frames, a frame's crops) over the run's frames, the warm-up included.
2. **A device's own ceiling.** The frames a second the device could take if it did all of the graph's inference
   and nothing else: ``1 / sum over inference nodes of (images a frame / images a second)``. Images a frame come
   from the run (they are a function of the input, not of the device). Images a second are the device's
   throughput on that node's model at that node's input shape, measured alone as benchmark_app measures it
   (OpenVINO's THROUGHPUT hint, its optimal number of requests kept busy, random input, ``--seconds`` after a
   warm-up); a node whose input takes a varying number of entries is measured at its requests' mean, rounded.
3. **The figure.** The run's fps over the sum of the ceilings of the devices it used (``of_ceilings``). Each
   device's ceiling is measured with the whole machine to itself: the cores the run decodes, draws and encodes
   with are not taken off the CPU's.

The runs come first, one process after another, and the measures after them, in this process. On the GPU
machine a run started after this process had compiled a model for the GPU saw no GPU ("GPU not present;
available: CPU"): an OpenCL loader changes the C environment a child inherits once platforms are listed
(``flowpipe.runtime.settings.environment_for_children``, which restores it before each run here too). Every model
and shape is measured once per device and reused across configurations. ``python
benchmarks/run_all.py device_ceilings`` records a run in the result schema.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from density import CLI, ROOT, config_arg, looping
from int8_throughput import async_rate

from flowpipe import load_graph, models
from flowpipe.accel import openvino as ovx
from flowpipe.accel.openvino import OpenVino
from flowpipe.runtime.settings import environment_for_children


def run_graph(args: argparse.Namespace, graph: str, name: str, sets: list[str], scratch: Path) -> dict[str, Any]:
    """One ``flowpipe bench`` of the looping graph: its JSON report."""
    out = scratch / f"{name}.json"
    cmd = [sys.executable, "-c", CLI, "bench", graph, "--streams", str(args.streams), "--frames",
           str(args.frames), "--warmup", str(args.warmup), "--json", str(out),
           "--set", f"output={scratch}/{name}.mp4", "--set", f"metadata={scratch}/{name}.jsonl"]
    for s in sets:
        cmd += ["--set", s]
    if args.processes:
        cmd += ["--processes", str(args.processes)]
    environment_for_children()  # what OpenCL's loaders set behind Python's back once a device was opened here
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, check=False)
    if not out.exists():
        raise SystemExit(f"{name}: flowpipe bench wrote no report (exit {proc.returncode}): "
                         + (proc.stderr.strip().splitlines() or ["-"])[-1])
    report = json.loads(out.read_text())
    if report.get("fps") is None or report.get("error"):
        raise SystemExit(f"{name}: the run measured no rate: {report.get('error') or proc.stderr.strip()[-500:]}")
    return report


def node_loads(report: dict[str, Any], spec: Any) -> list[dict[str, Any]]:
    """Per inference node: its model, input, devices, and images and requests a frame of the run."""
    frames = report["frames"]["in"]
    configs = {n.id: n.config for n in spec.nodes if n.type == "inference"}
    out = []
    for key, sec in report.get("inference", {}).items():
        node = key.split(".", 1)[1]
        if report.get("processes", 1) > 1 and "owner_pid" not in sec and "processes" not in sec:
            raise SystemExit(f"node '{node}' ran in each of {report['processes']} processes and its --stats are "
                             "one process's: run with a device owner (the default), or in one process")
        parts = _per_device(sec)
        images = sum(p.get("images", 0) for p in parts.values())
        inferences = sum(p.get("inferences", 0) for p in parts.values())
        if not inferences:
            continue
        c = configs[node]
        out.append({"node": node, "model": c.model, "model_sha256": c.model_sha256, "input": sec["input"]["name"],
                    "shape": sec["input"]["shape"], "devices": sorted({p.get("device", d) for d, p in parts.items()}),
                    "images_per_frame": images / frames, "inferences_per_frame": inferences / frames,
                    "batch": max(1, round(images / inferences))})
    return out


def static_shape(shape: str, batch: int) -> list[int]:
    """``[1..64,3,128,128]`` at ``batch``: its first dimension, the entries, set; the others as they are. A node
    whose other dimensions vary (the preprocessing folded into the model takes any picture) is refused."""
    dims = shape.strip("[]").split(",")
    try:
        return [batch] + [int(d) for d in dims[1:]]
    except ValueError:
        raise SystemExit(f"an input of {shape}: its size varies with the picture; measure a graph whose "
                         "preprocess node writes the model's input") from None


def throughput(ov_owner: OpenVino, model: str, sha256: str | None, shape: list[int], device: str,
               seconds: float) -> dict:
    """Images a second of ``model`` at ``shape`` on ``device`` alone: benchmark_app's measure (THROUGHPUT hint,
    the device's optimal number of requests kept busy, random input)."""
    import openvino as ov

    part = models.part_of(model)
    m = ov_owner.read_model(models.resolve(model, sha256=sha256), part)
    # as the node fits it: the batch unfolded where the file has one picture, a cut model's anchors constants
    m = ovx.fit_input(m, tuple(shape), device, None, models.takes_any_size(model))
    if part:
        m = ovx.fold(m)
    t0 = time.perf_counter()
    compiled = ov_owner.core.compile_model(m, device, {"PERFORMANCE_HINT": "THROUGHPUT"})
    compile_s = time.perf_counter() - t0
    dtype = np.uint8 if compiled.inputs[0].get_element_type() == ov.Type.u8 else np.float32
    x = (np.random.default_rng(0).random(shape) * 255).astype(dtype)
    nreq, n, dt = async_rate(compiled, x, seconds, warmup_rounds=2)
    return {"model": model, "shape": shape, "device": device, "requests": nreq, "compile_s": round(compile_s, 1),
            "images_per_s": n * shape[0] / dt}


def ceilings(loads: list[dict[str, Any]], rates: dict[tuple, dict], devices: list[str]) -> dict[str, float]:
    """Each device's frames a second doing all of the graph's inference alone."""
    out = {}
    for d in devices:
        s_per_frame = sum(n["images_per_frame"] / rates[(n["model"], tuple(static_shape(n["shape"], n["batch"])), d)]
                          ["images_per_s"] for n in loads)
        out[d] = round(1 / s_per_frame, 1) if s_per_frame else float("inf")
    return out


def _per_device(sec: dict[str, Any]) -> dict[str, Any]:
    """An inference node's --stats block of each device it ran on (its own, on one device)."""
    return sec.get("devices") or {sec["device"]: sec}


def _device_stats(sec: dict[str, Any]) -> dict[str, Any]:
    """What each device of an inference node did in the run: its share of the time busy, requests at once,
    requests and images."""
    keys = ("busy_share", "in_flight", "inferences", "images", "requests", "device_reason")
    return {dev: {k: part.get(k) for k in keys} for dev, part in _per_device(sec).items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graph", default=str(ROOT / "graphs" / "face_blur.yaml"))
    ap.add_argument("--config", type=config_arg, action="append", default=None,
                    help="NAME[:PARAM=VALUE,...] (default: gpu:device=GPU)")
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--processes", type=int, default=None)
    ap.add_argument("--frames", type=int, default=240)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--seconds", type=float, default=5.0, help="each device's measure of each model")
    ap.add_argument("--timeout", type=float, default=540)
    ap.add_argument("--out", help="write the JSON here")
    args = ap.parse_args()
    configs = args.config or [("gpu", ["device=GPU"])]
    rates: dict[tuple, dict] = {}
    result: dict[str, Any] = {"graph": str(Path(args.graph).relative_to(ROOT)) if Path(args.graph).is_relative_to(ROOT)
                              else args.graph, "streams": args.streams, "processes": args.processes,
                              "frames": args.frames, "seconds": args.seconds, "configs": []}
    runs = []
    with tempfile.TemporaryDirectory(prefix="flowpipe-ceilings-") as tmp:
        scratch = Path(tmp)
        graph = looping(args.graph, scratch / "graph.yaml")
        for name, sets in configs:  # every run first, then the measures
            spec = load_graph(args.graph, overrides=dict(s.split("=", 1) for s in sets))
            report = run_graph(args, graph, name, sets, scratch)
            print(f"{name}: {report['fps']} fps", file=sys.stderr)
            runs.append((name, sets, report, node_loads(report, spec)))
    ov_owner = OpenVino()
    for name, sets, report, loads in runs:
        devices = sorted({d for n in loads for d in n["devices"]})
        for n in loads:
            for d in devices:
                shape = static_shape(n["shape"], n["batch"])
                key = (n["model"], tuple(shape), d)
                if key not in rates:
                    rates[key] = throughput(ov_owner, n["model"], n["model_sha256"], shape, d, args.seconds)
                    print(f"  {n['model']} {shape} on {d}: {rates[key]['images_per_s']:.1f} images/s", file=sys.stderr)
        ceil = ceilings(loads, rates, devices)
        total = sum(ceil.values())
        per = report.get("per_stream_fps_together") or {}
        row = {"name": name, "set": sets, "devices": devices, "fps": report["fps"],
               "slowest_stream": min(per.values()) if per else None, "ceilings": ceil,
               "of_ceilings": round(report["fps"] / total, 3) if total else None, "nodes": loads,
               "inference": {k.split(".", 1)[1]: _device_stats(v) for k, v in report["inference"].items()},
               "cpu_util_cores": report.get("cpu_util_cores"), "frames": report["frames"]}
        result["configs"].append(row)
        print(f"{name}: {report['fps']} fps, ceilings {ceil}, {row['of_ceilings']} of their sum", file=sys.stderr)
    result["throughputs"] = [dict(t, images_per_s=round(t["images_per_s"], 1)) for t in rates.values()]
    text = json.dumps(result, indent=1)
    if args.out:
        Path(args.out).write_text(text)
    print(text if not args.out else re.sub(r"\s+", " ", json.dumps({c["name"]: c["of_ceilings"]
                                                                     for c in result["configs"]})))


if __name__ == "__main__":
    main()

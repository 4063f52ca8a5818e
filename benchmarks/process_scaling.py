"""Streams over processes, side by side in one run on one machine: one process, shards with one device
owner, shards that each open their own inference, N independent ``flowpipe`` processes, and the CPU-work
ceiling (the stage costs of a one-stream run, times the cores).

    python benchmarks/process_scaling.py --out OUT.json \\
        --runs GPU:16:1:8 GPU:16:8:2 GPU:16:8:2:own --independent GPU:16 --ceiling GPU

A run is ``DEVICE:STREAMS:PROCESSES:WORKERS[:own][:PARAM=VALUE...]`` (``own``: every shard opens its own
inference, the ``--no-device-owner`` of ``flowpipe bench``; ``batch=8``: a graph parameter for this run;
``prefetch=2``: the graph's own key).
Every run is a fresh ``flowpipe bench`` process on graphs/face_blur_near.yaml with ``tiles: null`` unless
``--graph``/``--set`` say otherwise. ``python benchmarks/run_all.py process_scaling`` records a run in the
result schema, and ``python benchmarks/report.py`` renders it (BENCHMARKS.md section 8) and the plot.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CLI = "import sys; from flowpipe.cli import main; sys.exit(main())"


def _single_threaded(graph: str, scratch: Path) -> tuple[str, dict[str, str]]:
    """The graph with one decoder thread per stream, and the environment for a one-thread OpenCV pool:
    every stage's CPU then runs on the thread the runner times."""
    import yaml

    doc = yaml.safe_load(Path(graph).read_text())
    for n in doc["nodes"]:
        if n.get("type") == "video_source":
            n.setdefault("config", {})["threads"] = 1
    path = scratch / "single_threaded.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path), dict(os.environ, OPENCV_FOR_THREADS_NUM="1")


GRAPH_KEYS = {"prefetch"}  # run options that are the graph's own keys, not its parameters


def _with_keys(graph: str, path: Path, keys: dict[str, Any]) -> str:
    """A copy of the graph with top-level keys set (``prefetch=2``)."""
    import yaml

    doc = yaml.safe_load(Path(graph).read_text())
    doc.update(keys)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


def _bench(args: argparse.Namespace, device: str, streams: int, processes: int, workers: int, own: bool,
           tag: str, scratch: Path, graph: str | None = None, env: dict[str, str] | None = None,
           sets: list[str] | None = None) -> dict[str, Any]:
    out = scratch / f"{tag}.json"
    cmd = [sys.executable, "-c", CLI, "bench", graph or str(args.graph), "--streams", str(streams),
           "--processes", str(processes), "--frames", str(args.frames), "--warmup", str(args.warmup),
           "--json", str(out), "--set", f"device={device}", "--set", f"workers={workers}",
           "--set", f"output={scratch}/{tag}.mp4", "--set", f"metadata={scratch}/{tag}.jsonl"]
    for s in [*args.set, *(sets or [])]:
        cmd += ["--set", s]
    if own:
        cmd.append("--no-device-owner")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, check=False, env=env)
    if not out.exists():
        return {"tag": tag, "error": (proc.stderr or proc.stdout).strip().splitlines()[-1:]}
    d = json.loads(out.read_text())
    per = [v for v in (d.get("per_stream_fps_together") or d["per_stream_fps"]).values() if v]
    return {"tag": tag, "device": device, "streams": streams, "processes": d["processes"], "workers": workers,
            "device_owner": d.get("device_owner"), "fps": d["fps"],
            "per_stream_min": min(per) if per else None, "per_stream_max": max(per) if per else None,
            "cpu_ms_per_frame": d["cpu_ms_per_frame"], "cpu_util_cores": d["cpu_util_cores"],
            "peak_rss_mb": d["peak_rss_mb"], "peak_pss_mb": d.get("peak_pss_mb"), "frames": d["frames"],
            "copies_per_frame": d["copies_per_frame"],
            "nodes": d["nodes"], "wall_s": round(time.perf_counter() - t0, 1), "error": d["error"]}


def _independent(args: argparse.Namespace, device: str, n: int, scratch: Path) -> dict[str, Any]:
    """N separate one-stream ``flowpipe bench`` processes at once: the sum of their rates."""
    procs = []
    for i in range(n):
        out = scratch / f"ind_{device}_{i}.json"
        cmd = [sys.executable, "-c", CLI, "bench", str(args.graph), "--frames", str(args.frames),
               "--warmup", str(args.warmup), "--json", str(out), "--set", f"device={device}",
               "--set", f"output={scratch}/ind{i}.mp4", "--set", f"metadata={scratch}/ind{i}.jsonl"]
        for s in args.set:
            cmd += ["--set", s]
        procs.append((out, subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)))
    for _, p in procs:
        p.wait(timeout=args.timeout)
    runs = [json.loads(o.read_text()) for o, _ in procs if o.exists()]
    fps = [r["fps"] for r in runs if r.get("fps")]
    return {"tag": f"independent_{device}_{n}", "device": device, "streams": n, "processes": n,
            "fps": round(sum(fps), 1), "per_stream_min": min(fps, default=None),
            "per_stream_max": max(fps, default=None), "completed": len(runs),
            "cpu_ms_per_frame": round(sum(r["cpu_ms_per_frame"] or 0 for r in runs) / max(len(runs), 1), 2),
            "peak_rss_mb": round(sum(r["peak_rss_mb"] for r in runs), 1),
            "peak_pss_mb": round(sum(r.get("peak_pss_mb") or 0 for r in runs), 1)}


def _ceiling(row: dict[str, Any], cores: int) -> dict[str, Any]:
    """Stage costs (CPU ms per frame of each node's own thread in a one-stream, one-process run: the
    inference node's is its dispatch) and what the cores could do were that the only work: cores * 1000 / sum."""
    nodes = row["nodes"]
    costs = {k: v["cpu_ms_per_frame"] for k, v in nodes.items() if v.get("cpu_ms_per_frame") is not None}
    total = sum(costs.values())
    return {"tag": f"ceiling_{row['device']}", "device": row["device"], "stage_ms": costs,
            "sum_ms": round(total, 2), "fps": round(cores * 1e3 / total, 1) if total else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graph", default=str(ROOT / "graphs" / "face_blur_near.yaml"))
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--runs", nargs="*", default=[])
    ap.add_argument("--independent", nargs="*", default=[], metavar="DEVICE:N")
    ap.add_argument("--ceiling", nargs="*", default=[], metavar="DEVICE")
    ap.add_argument("--frames", type=int, default=150)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--timeout", type=float, default=180)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if not any(s.startswith("tiles=") for s in args.set):
        args.set.append("tiles=null")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    rows: list[dict[str, Any]] = []
    result = {"machine": {"cores": cores, "cpu": platform.processor() or platform.machine(),
                          "python": platform.python_version()},
              "date": time.strftime("%Y-%m-%d"), "command": " ".join(sys.argv), "rows": rows}
    with tempfile.TemporaryDirectory(prefix="flowpipe-scaling-") as tmp:
        scratch = Path(tmp)
        for dev in args.ceiling:
            graph, env = _single_threaded(args.graph, scratch)
            one = _bench(args, dev, 1, 1, 1, False, f"one_{dev}", scratch, graph, env)
            rows += [one, _ceiling(one, cores)] if "nodes" in one else [one]
            print(json.dumps(rows[-1]), flush=True)
        for spec in args.runs:
            parts = spec.split(":")
            dev, streams, procs, workers = parts[0], int(parts[1]), int(parts[2]), int(parts[3])
            own = "own" in parts[4:]
            sets = [p for p in parts[4:] if "=" in p]
            tag = f"{dev}_s{streams}_p{procs}_w{workers}" + ("_own" if own else "") + "".join(f"_{s}" for s in sets)
            keys = {k: int(v) for k, v in (p.split("=", 1) for p in sets) if k in GRAPH_KEYS}
            keyed = _with_keys(args.graph, scratch / f"{tag}.yaml", keys) if keys else None
            params = [p for p in sets if p.split("=", 1)[0] not in GRAPH_KEYS]
            rows.append(_bench(args, dev, streams, procs, workers, own, tag, scratch, keyed, sets=params))
            rows[-1]["sets"] = sets
            print(json.dumps({k: v for k, v in rows[-1].items() if k != "nodes"}), flush=True)
            Path(args.out).write_text(json.dumps(result, indent=1))
        for spec in args.independent:
            dev, n = spec.split(":")
            rows.append(_independent(args, dev, int(n), scratch))
            print(json.dumps(rows[-1]), flush=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

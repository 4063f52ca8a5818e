"""Two versions of a graph side by side on one machine: ``flowpipe bench`` on each in turns, on an evaluation
clip played forth and back (a steady rate, not a start), the median run's frames per second and CPU per frame.

    git show 3fb9422:graphs/face_blur.yaml > /tmp/face_blur_before.yaml
    python benchmarks/graph_ab.py /tmp/face_blur_before.yaml graphs/face_blur.yaml --clip table \\
        --json OUT.json   # run_all.py graph_ab BEFORE AFTER ...

The clip: an evaluation clip (eval/flowpipe_eval) written as H.264, its frames played forward and back three times
(540 frames of the 720p clips); both graphs run with ``device`` as given (CPU by default), ``--rounds`` turns.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench_results import publish


def bench(graph: str, clip: Path, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    out = work / "bench.json"
    cmd = [sys.executable, "-m", "flowpipe.cli", "bench", graph, "--frames", str(args.frames), "--warmup",
           str(args.warmup), "--json", str(out), "--set", f"input={clip}", "--set", f"device={args.device}",
           "--set", f"output={work / 'o.mp4'}", "--set", f"metadata={work / 'o.jsonl'}"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"{graph}: {(p.stderr or p.stdout).strip().splitlines()[-1:]}")
    d = json.loads(out.read_text())
    return {"fps": d["fps"], "cpu_ms_per_frame": d["cpu_ms_per_frame"], "cores_busy": d["cpu_util_cores"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--clip", default="table")
    ap.add_argument("--device", default="CPU")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--frames", type=int, default=400)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--json")
    args = ap.parse_args()
    from flowpipe_eval.clips import clip

    c = clip(args.clip)
    looped = replace(c, frames=(c.frames + c.frames[::-1]) * 3, faces=(c.faces + c.faces[::-1]) * 3)
    runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory(prefix="flowpipe-ab-") as tmp:
        work = Path(tmp)
        src = looped.write(work / f"{args.clip}_looped.mp4")
        for _ in range(args.rounds):
            for side in ("before", "after"):
                runs[side].append(bench(getattr(args, side), src, args, work))
                print(side, runs[side][-1], flush=True)
    med = {side: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for side, rs in runs.items()}
    h, w = c.frames[0].shape[:2]
    publish({"benchmark": "graph_ab", "before": args.before, "after": args.after, "clip": args.clip,
             "picture": f"{w}x{h}", "device": args.device, "rounds": args.rounds, "runs": runs, "median": med,
             "fps_ratio": round(med["after"]["fps"] / med["before"]["fps"], 2),
             "cpu_ratio": round(med["after"]["cpu_ms_per_frame"] / med["before"]["cpu_ms_per_frame"], 2)}, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())

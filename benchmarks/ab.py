"""One graph under two versions of flowpipe, alternating in one run: what a change did to speed and memory.

The other version is an installed copy (``pip install --no-deps --target DIR <checkout>``) put first on
``PYTHONPATH``; each repeat runs both sides back to back so that drift on the machine hits both.

    git worktree add /tmp/before <rev> && pip install --no-deps --target /tmp/before-site /tmp/before
    python benchmarks/ab.py --before /tmp/before-site --before-graphs /tmp/before/graphs \\
        --graph face_blur_near.yaml --set input=clip_720p.mp4 --frames 300 --repeats 3 --json out.json
    python benchmarks/ab.py ... --graph face_blur.yaml --clip carphone --loop 10 --frames 1100  # an evaluation clip
    python benchmarks/ab.py ... --graph face_blur.yaml --streams 16 --processes 16 --frames 240 --warmup 40 \
        --set device=GPU --after-set profile=false --repeats 2   # sixteen cameras; a setting only the new graph has
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def bench(site: str | None, graph: Path, frames: int, sets: list[str], work: Path, tag: str,
          extra: list[str] | None = None) -> dict[str, Any]:
    out = work / f"{tag}.json"
    cmd = [sys.executable, "-c", "import sys; from flowpipe.cli import main; sys.exit(main())", "bench", str(graph),
           "--frames", str(frames), "--json", str(out), *(extra or ["--warmup", "30"]),
           "--set", f"output={work / tag}.mp4", "--set", f"metadata={work / tag}.jsonl"]
    for s in sets:
        cmd += ["--set", s]
    env = dict(os.environ)
    if site:
        env["PYTHONPATH"] = site
    # run outside the checkout: Python puts the working directory first on the path, and the checkout's
    # flowpipe/ there would stand in for the other version
    subprocess.run(cmd, env=env, check=True, capture_output=True, text=True, cwd=work)
    return json.loads(out.read_text())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True, help="site-packages folder holding the other version")
    ap.add_argument("--before-graphs", required=True, help="that version's graphs/ folder")
    ap.add_argument("--graph", default="face_blur_near.yaml")
    ap.add_argument("--set", action="append", default=[], dest="sets")
    ap.add_argument("--after-set", action="append", default=[], dest="after_sets",
                    help="a graph parameter for this version only (one the other graph does not have)")
    ap.add_argument("--streams", type=int, help="flowpipe bench --streams (default: the graph's)")
    ap.add_argument("--processes", help="flowpipe bench --processes")
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--clip", help="input: an evaluation clip (eval/flowpipe_eval/clips.py), e.g. carphone")
    ap.add_argument("--loop", type=int, default=1, help="with --clip: the clip played this many times over")
    ap.add_argument("--frames", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json")
    ap.add_argument("--title", help="the row's name in BENCHMARKS.md section 7, e.g. 'what changed (rev -> rev)'")
    a = ap.parse_args()
    rows: dict[str, dict[str, list[float]]] = {"before": {}, "after": {}}
    with tempfile.TemporaryDirectory() as tmp:
        sets = list(a.sets)
        if a.clip:
            from flowpipe_eval.clips import clip

            sets.append(f"input={clip(a.clip).looped(a.loop).write(Path(tmp) / 'clip.mp4')}")
            a.sets.insert(0, f"input=<clip {a.clip}{f' x{a.loop}' if a.loop > 1 else ''}>")
        extra = ["--warmup", str(a.warmup)] + (["--streams", str(a.streams)] if a.streams else []) + \
            (["--processes", a.processes] if a.processes else [])
        for r in range(a.repeats):
            for side, site, graphs in (("before", a.before, Path(a.before_graphs)), ("after", None, ROOT / "graphs")):
                d = bench(site, graphs / a.graph, a.frames, sets + (a.after_sets if side == "after" else []),
                          Path(tmp), f"{side}{r}", extra)
                for key in ("fps", "cpu_ms_per_frame", "peak_rss_mb", "copies_per_frame"):
                    rows[side].setdefault(key, []).append(float(d[key]))
                per = d.get("per_stream_fps_together") or d.get("per_stream_fps") or {}
                if per and all(v is not None for v in per.values()):  # every stream's rate while all ran
                    rows[side].setdefault("slowest_stream_fps", []).append(float(min(per.values())))
    med = {side: {k: statistics.median(v) for k, v in m.items()} for side, m in rows.items()}
    report = {"title": a.title, "graph": a.graph, "sets": a.sets, "after_sets": a.after_sets, "streams": a.streams,
              "processes": a.processes, "frames": a.frames, "repeats": a.repeats,
              "cores": len(os.sched_getaffinity(0)), "runs": rows,
              "median": med, "ratio_after_over_before": {k: round(med["after"][k] / med["before"][k], 3)
                                                         for k in med["after"] if med["before"][k]}}
    print(json.dumps(report, indent=2))
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

"""Stream density: the most streams of a graph whose slowest stream holds a frame rate, per configuration, as
DL Streamer's and DeepStream's density benchmarks report it.

    python benchmarks/density.py --out OUT.json --fps 25 --frames 300 \\
        --config cpu:device=CPU --config cpu_batch4:device=CPU,batch=4

Each configuration (``NAME[:PARAM=VALUE,...]``, graph parameters) is one ``flowpipe bench --density`` process on
graphs/face_blur.yaml (``--graph``): from one stream, doubling while the slowest stream holds ``--fps``, then
bisecting between the last count that held and the first that fell. Its file sources loop, so a stream never runs
out of frames before ``--frames`` after its warm-up; they decode as fast as the graph takes their frames, so each
stream's rate is the pipeline's. ``python benchmarks/run_all.py density`` records a run in the result schema.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
CLI = "import sys; from flowpipe.cli import main; sys.exit(main())"


def looping(graph: str, path: Path) -> str:
    """A copy of the graph whose video sources replay their file for as long as the run asks."""
    doc = yaml.safe_load(Path(graph).read_text())
    for n in doc["nodes"]:
        if n.get("type") == "video_source":
            n.setdefault("config", {})["loop"] = -1
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


def config_arg(text: str) -> tuple[str, list[str]]:
    name, _, sets = text.partition(":")
    if not name:
        raise argparse.ArgumentTypeError(f"expected NAME[:PARAM=VALUE,...], got {text!r}")
    return name, [s for s in sets.split(",") if s]


def search(args: argparse.Namespace, graph: str, name: str, sets: list[str], scratch: Path) -> dict[str, Any]:
    out = scratch / f"{name}.json"
    cmd = [sys.executable, "-c", CLI, "bench", graph, "--density", "--fps", str(args.fps), "--frames",
           str(args.frames), "--warmup", str(args.warmup), "--max-streams", str(args.max_streams), "--json", str(out),
           "--set", f"output={scratch}/{name}.mp4", "--set", f"metadata={scratch}/{name}.jsonl"]
    for s in sets:
        cmd += ["--set", s]
    if args.processes:
        cmd += ["--processes", args.processes]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, check=False)
    wall = round(time.perf_counter() - t0, 1)
    steps = [line for line in proc.stderr.splitlines() if line.startswith("density: ")]
    print(f"{name}: " + (steps[-1] if steps else "no step ended") + f" ({wall} s)", file=sys.stderr)
    if not out.exists():
        return {"name": name, "sets": sets, "error": (proc.stderr or proc.stdout).strip().splitlines()[-1:]}
    r = json.loads(out.read_text())
    d = r["density"]
    held = {k: r.get(k) for k in ("processes", "fps", "per_stream_fps_together", "cpu_ms_per_frame",
                                  "cpu_util_cores", "peak_pss_mb", "frames")} if d["streams"] else None
    return {"name": name, "sets": sets, "streams": d["streams"], "fps": d["fps"], "max_streams": d["max_streams"],
            "steps": d["steps"], "held_run": held, "wall_s": wall, "exit": proc.returncode}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graph", default=str(ROOT / "graphs" / "face_blur.yaml"))
    ap.add_argument("--config", type=config_arg, action="append", metavar="NAME[:PARAM=VALUE,...]",
                    help="a configuration searched on its own (default: cpu:device=CPU)")
    ap.add_argument("--fps", type=float, default=25.0)
    ap.add_argument("--frames", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--max-streams", type=int, default=64)
    ap.add_argument("--processes", help="N or auto (default: the graph's)")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds one configuration's search may take")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    configs = args.config or [("cpu", ["device=CPU"])]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="flowpipe-density-") as tmp:
        scratch = Path(tmp)
        graph = looping(args.graph, scratch / Path(args.graph).name)
        for name, sets in configs:
            rows.append(search(args, graph, name, sets, scratch))
    graph_path = Path(args.graph).resolve()
    shown = graph_path.relative_to(ROOT) if graph_path.is_relative_to(ROOT) else graph_path
    result = {"graph": str(shown), "fps": args.fps, "frames": args.frames,
              "warmup": args.warmup, "date": time.strftime("%Y-%m-%d"), "command": " ".join(sys.argv),
              "configs": rows}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

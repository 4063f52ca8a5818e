"""Counting on real footage: graphs/people_count.yaml's (or graphs/vehicle_count.yaml's) line crossings against
crossings checked by eye (eval/flowpipe_eval/crossings.json), and what the zones, lines and events cost beside the plain
detect-and-track graph (the same graph with ``analytics=false``), run side by side in turns.

    python benchmarks/run_all.py counting            # analytics_eval.py, recorded in the result schema
    python benchmarks/run_all.py counting_vehicles   # --what vehicles on the motorway's clips
    python benchmarks/analytics_eval.py [--what vehicles] [--clips ...] --out OUT.json

The clips are in two parts, reported apart: the ones seen while the graph was made, and held-out ones added after
it and its line's margin were fixed. Per clip: true crossings, found (reported once, in their frames and
direction), missed, false, twice; FPS with and without the analytics node (median of ``--repeats`` runs, from the
first frame decoded to the last written); the analytics node's CPU time a frame over the frame time (its thread's
CPU time: a thread preempted on a busy machine costs nothing it did not spend), and its share of the graph's busy
time (wall time inside its calls, preemption in). Targets: every true
crossing counted once, no false crossing, analytics under 5% of the frame time.

A graph that pauses counting while its camera moves (vehicle_count.yaml's ``camera_moving``) counts on over the
photographs panned across (``camera_moving=null``): there a pan stands in for objects passing a still camera.
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

import yaml
from bench_results import publish

ROOT = Path(__file__).resolve().parent.parent
GRAPHS = {"people": ROOT / "graphs" / "people_count.yaml", "vehicles": ROOT / "graphs" / "vehicle_count.yaml"}


def run_once(graph: Path, src: Path, analytics: bool, work: Path, sets: dict[str, Any]) -> dict[str, Any]:
    from flowpipe.graph import load_graph
    from flowpipe_eval.score import run_timed

    tag = "with" if analytics else "without"
    spec = load_graph(str(graph), {"input": str(src), "output": str(work / f"{tag}.mp4"),
                                   "metadata": str(work / f"{tag}.jsonl"), "events": str(work / f"{tag}_events"),
                                   "clips": str(work / f"{tag}_clips"), "analytics": analytics, **sets})
    res, seconds = run_timed(spec, f"{graph.stem} on {src}")
    frames = res.frames["out"]
    busy = {k: float(v.get("busy_s", 0.0)) for k, v in res.nodes.items()}
    cpu_ms = float(res.nodes.get("analytics", {}).get("cpu_ms_per_frame") or 0.0)
    crossings = []
    if analytics:
        for line in (work / f"{tag}.jsonl").read_text().splitlines():
            r = json.loads(line)
            crossings += [{"frame": r["frame"], **c} for c in r["analytics"]["crossings"]]
    # the analytics node's CPU time a frame (its thread's, waits and preemption left out) over the frame time
    return {"fps": frames / seconds, "frames": frames, "busy": busy, "crossings": crossings,
            "cpu_share": cpu_ms * frames / (1e3 * seconds)}


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"clips": len(rows), "true": sum(r["true"] for r in rows), "found": sum(r["found"] for r in rows),
            "false": sum(r["false"] for r in rows), "twice": sum(r["twice"] for r in rows),
            "every_true_crossing_once": all(r["found"] == r["true"] and not r["twice"] for r in rows),
            "no_false_crossing": all(r["false"] == 0 for r in rows),
            "analytics_busy_share_max": max(r["analytics_busy_share"] for r in rows),
            "analytics_cpu_share_max": max(r["analytics_cpu_share"] for r in rows),
            "fps_ratio_median": round(statistics.median(r["fps_ratio"] for r in rows), 3)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--what", choices=sorted(GRAPHS), default="people", help="what is counted, and so the graph")
    ap.add_argument("--clips", nargs="*", help="default: all that have crossings of --what")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="CPU")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a parameter of the graph (YAML value), as flowpipe run --set")
    ap.add_argument("--tiles-band", action="store_true", help="the detector's tiles over the band round each "
                    "clip's line alone (crossings.py's rule for tiles on traffic, its way C)")
    ap.add_argument("--out")
    args = ap.parse_args()
    from flowpipe.graph import parse_sets
    from flowpipe_eval.crossings import PANS, band, clip_file, line, part, score, truth

    sets = {"device": args.device, **parse_sets(args.set)}

    rows = []
    graph = GRAPHS[args.what]
    pauses = "camera_moving" in yaml.safe_load(graph.read_text())["params"]  # counting pauses while a camera moves
    for name in args.clips or list(truth(args.what)):
        work = Path(tempfile.mkdtemp(prefix=f"flowpipe-count-{name}-"))
        src = clip_file(name, work)
        runs: dict[bool, list[dict[str, Any]]] = {True: [], False: []}
        own: dict[str, Any] = {"line": line(name, args.what)}  # its camera's own, or the graph's
        if pauses and name in PANS:  # a photograph panned stands in for objects passing a still camera
            own["camera_moving"] = None
        if args.tiles_band:
            import av

            with av.open(str(src)) as c:
                size = c.streams.video[0].codec_context.width, c.streams.video[0].codec_context.height
            own["tiles"] = band(own["line"], size)
        for _ in range(args.repeats):  # side by side, in turns
            for analytics in (True, False):
                runs[analytics].append(run_once(graph, src, analytics, work, own | sets))
        with_ = runs[True]
        s = score(name, with_[0]["crossings"], args.what)
        counts = [score(name, r["crossings"], args.what).row() for r in with_]
        share = statistics.median(r["busy"].get("analytics", 0.0) / max(sum(r["busy"].values()), 1e-9) for r in with_)
        cpu_share = statistics.median(r["cpu_share"] for r in with_)
        fps_with = statistics.median(r["fps"] for r in with_)
        fps_without = statistics.median(r["fps"] for r in runs[False])
        row = s.row() | {"same_in_every_run": all(c == counts[0] for c in counts), "frames": with_[0]["frames"],
                         "fps_with": round(fps_with, 1), "fps_without": round(fps_without, 1),
                         "fps_ratio": round(fps_with / fps_without, 3), "analytics_busy_share": round(share, 4),
                         "analytics_cpu_share": round(cpu_share, 4),
                         "about": truth(args.what)[name]["about"], "part": part(name)}
        if args.tiles_band:
            row["tiles"] = own["tiles"]
        rows.append(row)
        print(row, flush=True)
    summary = {which: _summary([r for r in rows if r["part"] == which]) for which in ("seen", "held_out", "default")
               if any(r["part"] == which for r in rows)}
    publish({"graph": str(graph.relative_to(ROOT)), "what": args.what, "device": sets["device"], "set": args.set,
             "tiles_band": args.tiles_band, "repeats": args.repeats, "rows": rows, "summary": summary}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

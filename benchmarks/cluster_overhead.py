"""What Ray costs a run: the same graph, streams and processes run here directly and through a one-host Ray
cluster (controller, host agent actor, polling), alternating in one process, on this machine.

    python benchmarks/cluster_overhead.py --streams 2 --repeats 3 --out benchmarks/results/cluster_overhead.json

The rate of each run is its frames over the runner's own elapsed time (node opening included, Ray's
start-up not: that is reported apart, once). Face blur on the sample clip, played ``--loops`` extra times.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _spec(args: argparse.Namespace, tmp: Path):
    from flowpipe.cli.bench import replicate_sources
    from flowpipe.graph import load_graph, parse_sets

    sets = [f"output={tmp}/o.mp4", f"metadata={tmp}/m.jsonl", "tiles=null", "device=CPU", *args.set]
    spec = replicate_sources(load_graph(str(ROOT / "graphs" / "face_blur.yaml"), parse_sets(sets)), args.streams)
    for s in spec.sources():
        s.config.loop = args.loops  # type: ignore[attr-defined]
    spec.processes = args.processes
    return spec


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=2)
    ap.add_argument("--processes", type=int, default=1)
    ap.add_argument("--loops", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--out")
    args = ap.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import tempfile

    from flowpipe.cluster.controller import ClusterRun, connect
    from flowpipe.runtime import Runner
    from flowpipe.runtime.shards import ShardedRun

    tmp = Path(tempfile.mkdtemp(prefix="flowpipe-cluster-"))
    t0 = time.perf_counter()
    connect("local")
    ray_start = time.perf_counter() - t0
    local, cluster = [], []
    for _ in range(args.repeats):
        spec = _spec(args, tmp)
        res = (ShardedRun(spec, args.processes) if args.processes > 1 else Runner(spec)).run()
        local.append(res.frames["out"] / res.elapsed_s)
        t = time.perf_counter()
        cres = ClusterRun(_spec(args, tmp)).run()
        assert cres.ok, cres.error
        agent = cres.hosts[0]
        wall = time.perf_counter() - t
        # the agents' own run time (what their runners measured), not Ray's calls around it
        inner = max(h["elapsed_s"] for h in cres.hosts)
        cluster.append(sum(h["frames"]["out"] for h in cres.hosts) / inner)
        print(json.dumps({"local_fps": round(local[-1], 1), "cluster_fps": round(cluster[-1], 1),
                          "cluster_wall_s": round(wall, 2), "host": agent["host"]}), flush=True)
    result = {"streams": args.streams, "processes": args.processes, "frames_per_stream": 150 * (args.loops + 1),
              "repeats": args.repeats, "local_fps": [round(x, 1) for x in local],
              "cluster_fps": [round(x, 1) for x in cluster],
              "ratio_cluster_over_local": round(statistics.median(cluster) / statistics.median(local), 3),
              "ray_start_s": round(ray_start, 2), "cores": len(os.sched_getaffinity(0)),
              "date": time.strftime("%Y-%m-%d")}
    print(json.dumps(result))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

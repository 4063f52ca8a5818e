"""What Ray costs a run: the same graph, streams and processes run here directly and through a one-host Ray
cluster (controller, host agent actor, polling), alternating in one process, on this machine.

    python benchmarks/cluster_overhead.py --streams 2 --repeats 3 --out OUT.json   # run_all.py cluster_overhead

The rate of each run is its frames over the runner's own elapsed time (node opening included, Ray's
start-up not: that is reported apart, once). Face blur on the sample clip, played ``--loops`` extra times.
The two kinds alternate in ABBA order (drift of a shared machine falls on both); the ratio is the median of
the pairs' ratios. Beside each rate: the CPU time per frame of the processes that ran the graph (the
runner's process and its children; the host agent's, measured by itself over its run) and of the whole
machine (/proc/stat: Ray's own daemons and the agent's start-up included).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from bench_results import publish

ROOT = Path(__file__).resolve().parent.parent


def _spec(args: argparse.Namespace, tmp: Path):
    from flowpipe.cli.bench import replicate_sources
    from flowpipe.graph import load_graph, parse_sets

    sets = [f"output={tmp}/o.mp4", f"metadata={tmp}/m.jsonl", "tiles=null", "device=CPU", *args.set]
    spec = replicate_sources(load_graph(str(ROOT / "graphs" / "face_blur_near.yaml"), parse_sets(sets)), args.streams)
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
    from flowpipe.runtime import executor

    tmp = Path(tempfile.mkdtemp(prefix="flowpipe-cluster-"))
    t0 = time.perf_counter()
    connect("local")
    ray_start = time.perf_counter() - t0
    local, cluster, local_cpu, cluster_cpu, local_run_cpu, cluster_run_cpu = [], [], [], [], [], []
    import resource

    def own() -> float:
        me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime

    def busy() -> float:
        with open("/proc/stat") as f:
            user, nice, system, _idle, _iowait, irq, softirq = map(int, f.readline().split()[1:8])
        return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")

    def run_local() -> None:
        spec = _spec(args, tmp)
        b, c = busy(), own()
        res = executor(spec, args.processes).run()
        local_cpu.append((busy() - b) * 1e3 / res.frames["out"])
        local_run_cpu.append((own() - c) * 1e3 / res.frames["out"])
        local.append(res.frames["out"] / res.elapsed_s)

    def run_cluster() -> None:
        b = busy()
        cres = ClusterRun(_spec(args, tmp)).run()
        assert cres.ok, cres.error
        out = sum(h["frames"]["out"] for h in cres.hosts)
        cluster_cpu.append((busy() - b) * 1e3 / out)
        cluster_run_cpu.append(sum(h["cpu_s"] for h in cres.hosts) * 1e3 / out)
        # the agents' own run time (what their runners measured), not Ray's calls around it
        cluster.append(out / max(h["elapsed_s"] for h in cres.hosts))

    for i in range(args.repeats):
        for kind in ((run_local, run_cluster) if i % 2 == 0 else (run_cluster, run_local)):
            kind()
        print(json.dumps({"local_fps": round(local[-1], 1), "cluster_fps": round(cluster[-1], 1),
                          "local_run_cpu_ms": round(local_run_cpu[-1], 2),
                          "cluster_run_cpu_ms": round(cluster_run_cpu[-1], 2),
                          "local_machine_cpu_ms": round(local_cpu[-1], 2),
                          "cluster_machine_cpu_ms": round(cluster_cpu[-1], 2)}),
              flush=True)
    result = {"streams": args.streams, "processes": args.processes, "frames_per_stream": 150 * (args.loops + 1),
              "repeats": args.repeats, "local_fps": [round(x, 1) for x in local],
              "cluster_fps": [round(x, 1) for x in cluster],
              "ratio_of_medians": round(statistics.median(cluster) / statistics.median(local), 3),
              "pair_ratios": [round(c / x, 3) for c, x in zip(cluster, local)],
              "median_pair_ratio": round(statistics.median(c / x for c, x in zip(cluster, local)), 3),
              "local_run_cpu_ms_per_frame": round(statistics.median(local_run_cpu), 2),
              "cluster_run_cpu_ms_per_frame": round(statistics.median(cluster_run_cpu), 2),
              "local_machine_cpu_ms_per_frame": round(statistics.median(local_cpu), 2),
              "cluster_machine_cpu_ms_per_frame": round(statistics.median(cluster_cpu), 2),
              "ray_start_s": round(ray_start, 2)}
    publish(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

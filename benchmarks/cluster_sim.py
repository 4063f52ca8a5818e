"""Control-plane simulation: placing thousands of streams over hundreds of simulated hosts, and re-placing
the streams of lost hosts, with the placement the cluster controller uses (``flowpipe.cluster.placement``).
No Ray and no frames: what is measured is the controller's own work and memory.

    python benchmarks/cluster_sim.py --streams 2000 --hosts 200 --out OUT.json   # run_all.py cluster_sim

Hosts are a mix: a third with an NPU (``intel_npu: 1``, 8 CPUs; NPU streams take 0.05), a third with an
Intel GPU (``intel_gpu: 1``, 16 CPUs; GPU streams take 0.05), a third CPU-only (16 CPUs; CPU streams take 1);
NPU hosts carry a generation label (``npu: mtl|lnl``) that a tenth of the NPU streams ask for.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
import tracemalloc
from pathlib import Path

from flowpipe.cluster.placement import Host, StreamNeed, place


def _hosts(n: int, rng: random.Random) -> list[Host]:
    out = []
    for i in range(n):
        kind = i % 3
        if kind == 0:
            out.append(Host(f"h{i}", {"CPU": 8, "intel_npu": 1}, {"npu": rng.choice(["mtl", "lnl"])},
                            f"10.0.{i // 250}.{i % 250}"))
        elif kind == 1:
            out.append(Host(f"h{i}", {"CPU": 16, "intel_gpu": 1}, {}, f"10.0.{i // 250}.{i % 250}"))
        else:
            out.append(Host(f"h{i}", {"CPU": 16}, {}, f"10.0.{i // 250}.{i % 250}"))
    return out


def _needs(n: int, rng: random.Random) -> list[StreamNeed]:
    out = []
    for i in range(n):
        kind = i % 3
        if kind == 0:
            labels = {"npu": "lnl"} if rng.random() < 0.1 else {}
            out.append(StreamNeed(f"cam{i}", {"intel_npu": 0.05}, labels))
        elif kind == 1:
            out.append(StreamNeed(f"cam{i}", {"intel_gpu": 0.05}))
        else:
            out.append(StreamNeed(f"cam{i}", {"CPU": 1}))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=2000)
    ap.add_argument("--hosts", type=int, default=200)
    ap.add_argument("--lose", type=float, default=0.1, help="share of hosts lost at once")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out")
    args = ap.parse_args()
    result = _simulate(args, measure_memory=False)
    result["controller_peak_mb"] = _simulate(args, measure_memory=True)["controller_peak_mb"]
    print(json.dumps(result))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return 0 if result["error"] is None else 1


def _simulate(args: argparse.Namespace, measure_memory: bool) -> dict:
    """One placement and one re-placement; with ``measure_memory`` under tracemalloc (slower: timings from
    the other run)."""
    rng = random.Random(args.seed)  # noqa: S311 - a seeded simulation, not a secret
    if measure_memory:
        tracemalloc.start()
    hosts = _hosts(args.hosts, rng)
    needs = _needs(args.streams, rng)
    t0 = time.perf_counter()
    where = place(needs, hosts)
    t_place = time.perf_counter() - t0

    # lose a share of the hosts: their streams go to the others (what they hold is freed with them)
    lost = set(rng.sample([h.host_id for h in hosts], int(args.hosts * args.lose)))
    survivors = [h for h in hosts if h.host_id not in lost]
    moved = [n for n in needs if where[n.stream] in lost]
    t0 = time.perf_counter()
    try:
        again = place(moved, survivors)
        error = None
    except ValueError as e:
        again, error = {}, str(e)
    t_replace = time.perf_counter() - t0
    peak = 0
    if measure_memory:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return {"streams": args.streams, "hosts": args.hosts, "lost_hosts": len(lost), "moved_streams": len(moved),
              "place_all_s": round(t_place, 4), "replace_s": round(t_replace, 4), "replaced": len(again),
              "error": error, "controller_peak_mb": round(peak / 2**20, 2), "python": sys.version.split()[0],
              "date": time.strftime("%Y-%m-%d")}


if __name__ == "__main__":
    sys.exit(main())

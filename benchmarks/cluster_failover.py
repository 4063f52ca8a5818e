"""How fast a lost host's streams run again elsewhere: a local multi-node Ray cluster (loopback), three live
paced streams over the hosts, one host with streams removed mid-run (its raylet and workers killed).

    python benchmarks/cluster_failover.py --repeats 3 --out OUT.json   # run_all.py cluster_failover

Per loss: ``noticed_s`` (host removed -> the controller knows), ``replaced_in_s`` (placing and starting the
agents), ``first_frame_s`` (host removed -> the first frame of its streams on their new host), and whether
every frame of every stream was written once.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench_results import publish


def one(cluster, tmp: Path, fps: float, frames: int) -> dict:
    from flowpipe.cluster.controller import ClusterRun
    from flowpipe.graph import load_graph

    victim = cluster.add_node(num_cpus=1, resources={"spare": 1})
    cluster.wait_for_nodes()
    out = tmp / f"m{time.monotonic_ns()}.jsonl"
    g = tmp / "g.yaml"
    g.write_text("cluster: {per_stream: {CPU: 0.3}}\nnodes:\n" + "".join(
        f"  - {{id: s{i}, type: synthetic_source, config: {{count: {frames}, width: 64, height: 48, realtime: true, "
        f"fps: {fps}}}}}\n" for i in range(3)) +
        "  - {id: hop, type: passthrough, inputs: {in: [s0, s1, s2]}}\n"
        f"  - {{id: meta, type: jsonl, config: {{path: {out}}}, inputs: hop}}\n")
    run = ClusterRun(load_graph(str(g)), poll_s=0.2)
    box: dict = {}
    t = threading.Thread(target=lambda: box.update(res=run.run()))
    t.start()
    while not any(a.host_id == victim.node_id and a.progress.get("out", 0) > 2 * fps for a in run.agents):
        time.sleep(0.02)
    moved = next(a.sources for a in run.agents if a.host_id == victim.node_id)
    removed = time.time()
    cluster.remove_node(victim)
    first = None
    while first is None and t.is_alive():
        later = [a for a in run.agents if a.generation > 0]
        if any((a.progress.get("streams") or {}).get(s, 0) for a in later for s in moved):
            first = time.time()
        time.sleep(0.01)
    t.join()
    res = box["res"]
    (rep,) = res.replacements
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    exact = all(sorted(r["frame"] for r in lines if r["stream"] == f"s{i}") == list(range(frames)) for i in range(3))
    return {"streams_moved": len(moved), "noticed_s": round(rep["noticed_at"] - removed, 3),
            "replaced_in_s": rep["replaced_in_s"], "first_frame_s": round(first - removed, 3) if first else None,
            "every_frame_once": exact, "frames": res.frames}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--fps", type=float, default=30.0)
    ap.add_argument("--frames", type=int, default=300)
    ap.add_argument("--out")
    args = ap.parse_args()
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    import ray
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    c.add_node(num_cpus=1)
    c.wait_for_nodes()
    ray.init(address=c.address, logging_level=logging.ERROR)
    tmp = Path(tempfile.mkdtemp(prefix="flowpipe-failover-"))
    runs = []
    try:
        for _ in range(args.repeats):
            runs.append(one(c, tmp, args.fps, args.frames))
            print(json.dumps(runs[-1]), flush=True)
    finally:
        ray.shutdown()
        c.shutdown()
    keys = ("noticed_s", "replaced_in_s", "first_frame_s")
    result = {"repeats": args.repeats, "streams": 3, "fps": args.fps, "frames_per_stream": args.frames,
              "runs": runs, **{f"median_{k}": statistics.median(r[k] for r in runs if r[k] is not None) for k in keys},
              "every_frame_once": all(r["every_frame_once"] for r in runs)}
    publish(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

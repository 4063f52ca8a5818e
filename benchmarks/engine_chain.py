"""Engine throughput: a chain of N pass-through nodes moving small frames.

    python benchmarks/engine_chain.py --hops 10 --frames 50000

Reports frames/s through the whole chain and the per-hop engine overhead in µs
(wall time per frame divided by hops: what one queue hop + dispatch costs).
"""
from __future__ import annotations

import argparse
import json
import statistics

from flowpipe import load_graph, run


def chain_yaml(hops: int, frames: int, pool: bool) -> str:
    lines = ["nodes:",
             f"  - {{id: src, type: synthetic_source, config: {{count: {frames}, width: 8, height: 8, "
             f"pool: {str(pool).lower()}}}}}"]
    prev = "src.frame"
    for i in range(hops):
        lines.append(f"  - {{id: p{i}, type: passthrough, inputs: {{in: {prev}}}, queue: 64}}")
        prev = f"p{i}.out"
    lines.append(f"  - {{id: sink, type: null_sink, inputs: {{in: {prev}}}, queue: 64}}")
    return "\n".join(lines) + "\n"


def measure(hops: int, frames: int, repeats: int, pool: bool = True) -> dict:
    fps = []
    for _ in range(repeats):
        spec = load_graph("<chain>", text=chain_yaml(hops, frames, pool))
        res = run(spec)
        assert res.ok and res.frames["out"] == frames, res.frames
        fps.append(frames / res.elapsed_s)
    med = statistics.median(fps)
    return {"hops": hops, "frames": frames, "fps_median": round(med), "fps_min": round(min(fps)),
            "fps_max": round(max(fps)), "per_hop_us": round(1e6 / med / (hops + 1), 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hops", type=int, default=10)
    ap.add_argument("--frames", type=int, default=50_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    out = measure(a.hops, a.frames, a.repeats)
    print(json.dumps(out))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()

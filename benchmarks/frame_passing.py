"""Per-frame cost of passing a 1080p BGR frame between two stages, side by side in one run:

* thread mode: the next stage gets a view of the same shared buffer (no copy);
* process mode: the buffer's fd crosses once, then only a small header per frame;
* a stage that copies the frame instead (what a pipeline without shared buffers does);
* a plain numpy copy of the frame, for scale.

    python benchmarks/frame_passing.py [--frames 300] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from flowpipe import (
    Runner,
    load_graph,
)

W, H = 1920, 1080
SRC = f"{{id: src, type: synthetic_source, config: {{count: COUNT, width: {W}, height: {H}, fill: false}}}}"


def per_frame_us(frames: int, hop: str | None, warmup: int = 20) -> tuple[float, dict]:
    """Steady-state wall time per frame (completion-to-completion, after a warm-up)."""
    src = SRC.replace("COUNT", str(frames))
    if hop is None:
        text = f"nodes:\n  - {src}\n  - {{id: sink, type: null_sink, inputs: src.frame}}\n"
    else:
        text = (f"plugins: [bench_nodes]\nnodes:\n  - {src}\n  - {hop}\n"
                "  - {id: sink, type: null_sink, inputs: hop.out}\n")
    r = Runner(load_graph("<bench>", text=text), record_times=True)
    res = r.run()
    assert res.ok, res.error
    t = sorted(x for x, _ in res.done_times)
    return (t[-1] - t[warmup]) / (len(t) - 1 - warmup) * 1e6, res.edges


def numpy_copy_us(n: int = 200) -> float:
    a = np.random.default_rng(0).integers(0, 255, (H, W, 3), np.uint8)
    b = np.empty_like(a)
    t = time.perf_counter()
    for _ in range(n):
        np.copyto(b, a)
    return (time.perf_counter() - t) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    hops = {
        "direct (source -> sink, no hop)": None,
        "thread hop (shared view)": "{id: hop, type: passthrough, inputs: src.frame}",
        "process hop (fd once, header per frame)":
            "{id: hop, type: passthrough, isolation: process, inputs: src.frame}",
        "thread hop that copies the frame": "{id: hop, type: bench_copy, inputs: src.frame}",
    }
    rows: dict[str, list[float]] = {k: [] for k in hops}
    rows["numpy copy of one 1080p frame"] = []
    edges_seen: dict[str, dict] = {}
    for _ in range(a.repeats):
        base, _ = per_frame_us(a.frames, None)
        rows["direct (source -> sink, no hop)"].append(base)
        for name, hop in hops.items():
            if hop is None:
                continue
            us, edges = per_frame_us(a.frames, hop)
            rows[name].append(us - base)  # what the hop adds per frame
            edges_seen[name] = edges
        rows["numpy copy of one 1080p frame"].append(numpy_copy_us())
    out: dict[str, Any] = {
        k: {"median_us": round(statistics.median(v), 1), "min_us": round(min(v), 1), "max_us": round(max(v), 1)}
        for k, v in rows.items()}
    out["bytes_copied_per_frame"] = {k: e.get("src->hop", {}).get("bytes_copied", 0) // a.frames
                                     for k, e in edges_seen.items()}
    t = out["thread hop (shared view)"]["median_us"]
    c = out["numpy copy of one 1080p frame"]["median_us"]
    out["ratio_numpy_copy_over_thread_hop"] = round(c / max(t, 1e-9), 1)
    print(json.dumps(out, indent=2))
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

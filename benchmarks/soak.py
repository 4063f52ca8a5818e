"""Soak: hours of looping video with source churn; RSS and open file descriptors over time.

Each cycle builds the face-blur graph anew (sources, pools, OpenCL buffers, infer requests and files
are opened and closed: churn), runs it for --frames frames of a looping clip, and samples the process's
RSS and open fds. A leak shows up as a trend across cycles. Not part of CI.

    python benchmarks/soak.py --minutes 60 --json soak.json
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main() -> None:
    from flowpipe import load_graph, run

    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=60)
    ap.add_argument("--frames", type=int, default=300)
    ap.add_argument("--json")
    a = ap.parse_args()
    out_dir = Path(tempfile.mkdtemp(prefix="flowpipe-soak-"))
    samples = []
    t0 = time.monotonic()
    cycle = 0
    while time.monotonic() - t0 < a.minutes * 60:
        spec = load_graph(ROOT / "graphs" / "face_blur_near.yaml",
                          {"output": str(out_dir / "soak.mp4"), "metadata": str(out_dir / "soak.jsonl"), "tiles": None})
        spec.node("decode").config = spec.node("decode").config.model_copy(update={"loop": -1})
        res = run(spec, max_frames=a.frames)
        f = res.frames
        assert f["in"] == f["out"] + f["dropped"] + f["failed"]
        if not res.ok:
            raise SystemExit(f"cycle {cycle + 1} failed: {res.error}")
        cycle += 1
        samples.append({"t_s": round(time.monotonic() - t0, 1), "cycle": cycle, "rss_mb": round(rss_mb(), 1),
                        "open_fds": len(os.listdir("/proc/self/fd")), "frames": f, "ok": res.ok})
        print(json.dumps(samples[-1]), flush=True)
    first, last = samples[min(2, len(samples) - 1)], samples[-1]  # after warm-up
    report = {"minutes": a.minutes, "cycles": cycle, "frames_per_cycle": a.frames,
              "rss_mb": {"after_warmup": first["rss_mb"], "end": last["rss_mb"],
                         "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024},
              "open_fds": {"after_warmup": first["open_fds"], "end": last["open_fds"]},
              "all_ok": all(s["ok"] for s in samples), "samples": samples}
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=2))
    print(json.dumps({k: v for k, v in report.items() if k != "samples"}, indent=2))


if __name__ == "__main__":
    main()

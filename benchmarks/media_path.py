"""The face-blur job's CPU per frame, side by side in one run: yesterday's path (OpenCV decode to BGR,
MPEG-4 Part 2 through OpenCV), OpenCV BGR with the H.264 writer, and PyAV in I420 from decode to the
H.264 encoder. Inputs: the sample clip scaled to 720p and 1080p as H.264 (what cameras send).

    python benchmarks/media_path.py --frames 150 --repeats 2 --out OUT.json   # run_all.py media_path

Runs alternate (ABC CBA ...) so drift of a shared machine falls on every path; process CPU by getrusage
(inference, decoder and encoder threads included) in the steady state (sampled every 10 ms from the 30th
frame out to the last: start-up and close left out), FPS over the same span. ``ultrafast``: the x264
preset that costs about what MPEG-4 Part 2 did, at ~8x the bit rate of ``veryfast``
(benchmarks/media_codecs.py). The same boxes on every path: tests/test_media.py.
"""
from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench_results import publish

ROOT = Path(__file__).resolve().parent.parent
PATHS = {  # name -> (decoder, pixels, writer fourcc or None for H.264, x264 preset)
    "opencv_bgr_mp4v": ("opencv", "BGR", "mp4v", None),
    "opencv_bgr_h264": ("opencv", "BGR", None, "veryfast"),
    "pyav_i420_h264": ("pyav", "I420", None, "veryfast"),
    "pyav_i420_h264_ultrafast": ("pyav", "I420", None, "ultrafast"),
}


def clip(tmp: Path, height: int) -> Path:
    from flowpipe.sample import sample_path

    out = tmp / f"faces_{height}p.mp4"
    ffmpeg = shutil.which("ffmpeg") or "/usr/bin/ffmpeg"
    subprocess.run([ffmpeg, "-v", "error", "-y", "-i", str(sample_path("sample")), "-vf", f"scale=-2:{height}",
                    "-c:v", "libx264", "-preset", "fast", "-crf", "20", "-pix_fmt", "yuv420p", str(out)], check=True)
    return out


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run(src: Path, path: str, frames: int, tmp: Path, tiles: bool, warm: int = 30) -> tuple[float, float]:
    """CPU ms per frame in the steady state (process CPU between the ``warm``-th frame out and the last,
    sampled every 10 ms: model compile, pools, encoder start and close left out) and FPS over the same span."""
    from flowpipe import load_graph
    from flowpipe.runtime import Runner

    decoder, pixels, fourcc, preset = PATHS[path]
    sets: dict[str, Any] = {"input": str(src), "decoder": decoder, "pixels": pixels, "output": str(tmp / f"{path}.mp4"),
            "metadata": str(tmp / f"{path}.jsonl"), "device": "CPU", "preset": preset or "veryfast"}
    if not tiles:
        sets["tiles"] = None
    spec = load_graph(str(ROOT / "graphs" / "face_blur_near.yaml"), sets)
    for node in spec.nodes:
        if node.type == "video_source":
            node.config.loop = -1  # type: ignore[attr-defined]
        if node.type == "video_writer":
            node.config.fourcc = fourcc  # type: ignore[attr-defined]
    runner = Runner(spec, max_frames=frames + warm)
    samples: list[tuple[int, float, float]] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.01):
            samples.append((runner.snapshot()["out"], _cpu(), time.perf_counter()))

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    res = runner.run()
    done.set()
    watcher.join()
    assert res.ok and res.frames["out"] == frames + warm, (res.error, res.frames)
    first = next(s for s in samples if s[0] >= warm)
    last = max(samples, key=lambda s: (s[0], -s[1]))  # the first sample that saw the last frame out
    n = last[0] - first[0]
    return (last[1] - first[1]) * 1e3 / n, n / (last[2] - first[2])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=150)
    ap.add_argument("--repeats", type=int, default=2, help="rounds of every path, alternating in order")
    ap.add_argument("--heights", type=int, nargs="+", default=[720, 1080])
    ap.add_argument("--tiles", action="store_true", help="the shipped 2x2 tiles (default: whole frame only)")
    ap.add_argument("--out")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="flowpipe-media-"))
    rows = []
    for height in args.heights:
        src = clip(tmp, height)
        cpu: dict[str, list[float]] = {p: [] for p in PATHS}
        fps: dict[str, list[float]] = {p: [] for p in PATHS}
        run(src, "opencv_bgr_mp4v", 30, tmp, args.tiles)  # warm-up: model compiled, kernels built, caches
        for i in range(args.repeats):
            for path in (list(PATHS) if i % 2 == 0 else list(reversed(PATHS))):
                c, f = run(src, path, args.frames, tmp, args.tiles)
                cpu[path].append(c)
                fps[path].append(f)
                print(height, path, round(c, 2), "ms CPU/frame", round(f, 1), "fps", flush=True)
        base = statistics.median(cpu["opencv_bgr_mp4v"])
        for path in PATHS:
            rows.append({"height": height, "path": path, "cpu_ms_per_frame": round(statistics.median(cpu[path]), 2),
                         "fps": round(statistics.median(fps[path]), 1),
                         "cpu_vs_opencv_mp4v": round(statistics.median(cpu[path]) / base, 3)})
    publish({"frames": args.frames, "repeats": args.repeats, "tiles": args.tiles, "rows": rows,
             "python": sys.version.split()[0]}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

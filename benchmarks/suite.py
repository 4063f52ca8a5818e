"""The side-by-side suite: one run, every comparison on the same videos, model and device (BENCHMARKS.md sections
1-5; with ``--section scaling``, the stream scaling of section 6 on the GPU machine's cores).

    python benchmarks/run_all.py [--repeats 3] [--frames 320] [--streams 1,2,4,8]   # the suite, then the report
    python benchmarks/suite.py [...] --out suite.json                               # the suite alone

Sections: 1 face blur against the hand-written loops (720p, 1080p) with detections checked equal; 2 ceilings
(decode-only, benchmark_app, CPU-work); 3 stream scaling; 4 engine overhead and zero copy (engine_chain.py,
frame_passing.py); 5 preprocessing OpenCL against OpenCV (preprocess_bench.py).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(HERE / "baselines")]

import common  # noqa: E402
import expert_loop  # noqa: E402
import sync_loop  # noqa: E402

from flowpipe import load_graph, models  # noqa: E402
from flowpipe.cli.bench import bench_graph  # noqa: E402
from flowpipe.sample import make_sample  # noqa: E402

WARMUP = 10


def med(xs: list[float]) -> dict:
    return {"median": round(statistics.median(xs), 2), "min": round(min(xs), 2), "max": round(max(xs), 2), "n": len(xs)}


def window_fps(times: list[float]) -> float:
    t = sorted(times)
    return (len(t) - 1 - WARMUP) / (t[-1] - t[WARMUP])


def flowpipe_face_blur(video: Path, out: Path, frames: int, streams: int = 1, device: str = "CPU") -> dict:
    workers = max(1, min(streams, len(os.sched_getaffinity(0)) // 2))  # per-stream stages spread over threads
    spec = load_graph(ROOT / "graphs" / "face_blur_near.yaml",
                      {"input": str(video), "output": str(out / "fp.mp4"), "metadata": str(out / "fp.jsonl"),
                       "tiles": None, "device": device, "workers": workers})
    return bench_graph("face_blur", spec=spec, frames=frames, warmup=WARMUP, streams=streams)


def same_detections(a_jsonl: Path, b_jsonl: Path) -> dict:
    """Frame by frame: every face of one run matched in the other at IoU >= 0.9 (and the counts)."""
    from flowpipe_nodes.track import iou_matrix

    a = [json.loads(x) for x in a_jsonl.read_text().splitlines()]
    b = [json.loads(x) for x in b_jsonl.read_text().splitlines()]
    n = min(len(a), len(b))
    total = matched = 0
    for ra, rb in zip(a[:n], b[:n]):
        ba = np.array([o["box"] for o in ra["objects"]]).reshape(-1, 4)
        bb = np.array([o["box"] for o in rb["objects"]]).reshape(-1, 4)
        total += max(len(ba), len(bb))
        if len(ba) and len(bb):
            matched += int((iou_matrix(ba, bb).max(1) >= 0.9).sum())
    return {"frames_compared": n, "faces": total, "matched": matched,
            "agreement": round(matched / total, 4) if total else 1.0}


def stage_costs(video: Path, model: str, frames: int) -> dict:
    """Standalone CPU seconds per frame of each stage, measured one stage at a time, OpenCV single-threaded
    (the stage's own work, without thread-pool overhead; inference uses OpenVINO's THROUGHPUT streams)."""
    import openvino as ov

    previous = cv2.getNumThreads()
    cv2.setNumThreads(1)
    try:
        return _stage_costs(video, model, frames, ov)
    finally:
        cv2.setNumThreads(previous)


def _stage_costs(video: Path, model: str, frames: int, ov) -> dict:
    cap = cv2.VideoCapture(str(video))
    _, buf = cap.read()
    c0 = time.process_time()
    n_dec = 0
    while n_dec < frames and cap.read(image=buf)[0]:  # decode into one buffer, as the pipelines do
        n_dec += 1
    cost = {"decode": (time.process_time() - c0) / n_dec}
    cap = cv2.VideoCapture(str(video))
    imgs = [cap.read()[1] for _ in range(min(frames, 60))]  # the other stages work on kept frames
    n = len(imgs)
    common.preprocess(imgs[0])  # first calls initialize OpenCV's code paths: not part of the per-frame cost
    c0 = time.process_time()
    pre = [common.preprocess(f) for f in imgs]
    cost["preprocess"] = (time.process_time() - c0) / n
    compiled = ov.Core().compile_model(model, "CPU", {"PERFORMANCE_HINT": "THROUGHPUT"})
    q = ov.AsyncInferQueue(compiled)
    res: list[tuple[np.ndarray, ...]] = [()] * n
    q.set_callback(lambda r, i: res.__setitem__(i, tuple(r.get_tensor(o).data.copy() for o in compiled.outputs)))
    for i, (x, _) in enumerate(pre[:20]):
        q.start_async({0: x}, i)
    q.wait_all()
    c0 = time.process_time()
    for i, (x, _) in enumerate(pre):
        q.start_async({0: x}, i)
    q.wait_all()
    cost["inference"] = (time.process_time() - c0) / n
    anc = common.anchors()
    c0 = time.process_time()
    faces = []
    for (_, geo), r, f in zip(pre, res, imgs):
        reg = next(o for o in r if o.shape[-1] == 16)
        cls = next(o for o in r if o.shape[-1] == 1)
        faces.append(common.decode(reg, cls, geo, anc, f.shape))
    cost["postprocess"] = (time.process_time() - c0) / n
    common.blur(imgs[0].copy(), faces[0])
    c0 = time.process_time()
    for f, fc in zip(imgs, faces):
        common.blur(f, fc)
    cost["blur"] = (time.process_time() - c0) / n
    tmp = Path(tempfile.mkdtemp()) / "w.mp4"
    w = cv2.VideoWriter(str(tmp), cv2.VideoWriter.fourcc(*"mp4v"), 30, (imgs[0].shape[1], imgs[0].shape[0]))
    c0 = time.process_time()
    for f in imgs:
        w.write(f)
    w.release()
    cost["write"] = (time.process_time() - c0) / n
    cores = len(os.sched_getaffinity(0))
    total = sum(cost.values())
    return {"cpu_ms_per_frame": {k: round(v * 1e3, 3) for k, v in cost.items()},
            "sum_cpu_ms": round(total * 1e3, 3), "cores": cores,
            "cpu_work_ceiling_fps": round(cores / total, 1),
            "slowest_stage": max(cost, key=lambda k: cost[k]),
            "slowest_stage_ceiling_fps": round(1 / max(cost.values()), 1)}


def benchmark_app_fps(model: str, seconds: int = 8) -> float:
    from inference_throughput import benchmark_app

    return benchmark_app(model, "CPU", seconds)


def decode_only_fps(video: Path, frames: int) -> float:
    cap = cv2.VideoCapture(str(video))
    t0 = time.perf_counter()
    n = 0
    while n < frames and cap.read()[0]:
        n += 1
    return n / (time.perf_counter() - t0)


def section_face_blur(videos: dict, model: str, frames: int, repeats: int, work: Path) -> dict:
    out = {}
    for label, video in videos.items():
        rows: dict[str, list[float]] = {"flowpipe": [], "sync_loop": [], "expert_loop": []}
        ratios: dict[str, list[float]] = {"flowpipe/sync": [], "flowpipe/expert": []}
        copies = []
        for _ in range(repeats):
            fp = flowpipe_face_blur(video, work, frames)
            assert fp["exit"] == 0, fp["error"]
            s = sync_loop.main(str(video), model, str(work / "sync.mp4"), str(work / "sync.jsonl"), frames + WARMUP)
            e = expert_loop.main(str(video), model, str(work / "exp.mp4"), str(work / "exp.jsonl"), frames + WARMUP)
            f_fps, s_fps, e_fps = fp["fps"], window_fps(s["times"]), window_fps(e["times"])
            rows["flowpipe"].append(f_fps)
            rows["sync_loop"].append(s_fps)
            rows["expert_loop"].append(e_fps)
            ratios["flowpipe/sync"].append(f_fps / s_fps)
            ratios["flowpipe/expert"].append(f_fps / e_fps)
            copies.append(fp["bytes_copied_per_frame"])
        out[label] = {"fps": {k: med(v) for k, v in rows.items()}, "ratios": {k: med(v) for k, v in ratios.items()},
                      "flowpipe_bytes_copied_per_frame": max(copies),
                      "detections_vs_sync": same_detections(work / "fp.jsonl", work / "sync.jsonl"),
                      "detections_vs_expert": same_detections(work / "fp.jsonl", work / "exp.jsonl"),
                      "flowpipe_nodes": {k: v["latency_ms"] for k, v in fp["nodes"].items()},
                      "flowpipe_cpu_util_cores": fp["cpu_util_cores"], "flowpipe_peak_rss_mb": fp["peak_rss_mb"]}
    return out


def section_scaling(video: Path, frames: int, streams: list[int], work: Path, device: str = "CPU") -> dict:
    out = {}
    for n in streams:
        r = flowpipe_face_blur(video, work, frames, streams=n, device=device)
        assert r["exit"] == 0, r["error"]
        per = [v for v in r["per_stream_fps"].values() if v]
        out[str(n)] = {"aggregate_fps": r["fps"], "per_stream_fps": r["per_stream_fps"],
                       "per_stream_min": round(min(per), 2), "per_stream_max": round(max(per), 2),
                       "per_stream_spread": round((max(per) - min(per)) / max(per), 3),
                       "cpu_util_cores": r["cpu_util_cores"]}
    return out


def section_overhead(repeats: int) -> dict:
    import engine_chain

    chain = engine_chain.measure(10, 30000, repeats)
    cmd = [sys.executable, str(HERE / "frame_passing.py"), "--frames", "400", "--repeats", str(repeats)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return {"chain_10_hops": chain, "frame_passing_1080p": json.loads(proc.stdout)}


def section_preprocess(iters: int) -> dict:
    proc = subprocess.run([sys.executable, str(HERE / "preprocess_bench.py"), "--iters", str(iters)],
                          capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--frames", type=int, default=320)
    ap.add_argument("--streams", default="1,2,4,8")
    ap.add_argument("--section", default="all", choices=["all", "scaling"])
    ap.add_argument("--device", default="CPU")
    ap.add_argument("--video", help="an existing 720p clip for --section scaling (no sample generation)")
    ap.add_argument("--out", help="where to write the result (JSON); run_all.py records it in the result schema")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="flowpipe-bench-"))
    model = str(models.resolve("blazeface_full"))
    videos = {}
    for label, size in (("720p", (1280, 720)), ("1080p", (1920, 1080))):
        if a.video and label == "720p":
            videos[label] = Path(a.video)
            continue
        if a.section == "scaling":
            continue
        v = work / f"faces_{label}.mp4"
        make_sample(v, frames=a.frames + WARMUP + 5, size=size)
        videos[label] = v
    import openvino as ov

    if "720p" not in videos:
        v = work / "faces_720p.mp4"
        make_sample(v, frames=a.frames + WARMUP + 5, size=(1280, 720))
        videos["720p"] = v
    suite: dict = {"machine": {"cpu": platform.processor() or platform.machine(), "cores": len(os.sched_getaffinity(0)),
                               "python": platform.python_version(), "openvino": ov.get_version(),
                               "opencv": cv2.__version__, "numpy": np.__version__},
                   "settings": {"model": "blazeface_full (192x192)", "device": a.device, "frames": a.frames,
                                "warmup": WARMUP, "repeats": a.repeats,
                                "graph": "graphs/face_blur_near.yaml, tiles: null"}}
    streams = [int(x) for x in a.streams.split(",")]
    if a.section == "scaling":
        suite["ceilings"] = {"720p": stage_costs(videos["720p"], model, 200)}
        suite["scaling"] = section_scaling(videos["720p"], a.frames, streams, work, a.device)
        _publish(suite, a.out)
        return
    suite["face_blur"] = section_face_blur(videos, model, a.frames, a.repeats, work)
    suite["ceilings"] = {}
    app = benchmark_app_fps("blazeface_full")
    for label, v in videos.items():
        c = stage_costs(v, model, 200)
        c["decode_only_fps"] = round(decode_only_fps(v, 300), 1)
        c["benchmark_app_throughput_fps"] = app
        c["flowpipe_fraction_of_cpu_work_ceiling"] = round(
            suite["face_blur"][label]["fps"]["flowpipe"]["median"] / c["cpu_work_ceiling_fps"], 3)
        c["flowpipe_fraction_of_slowest_stage_ceiling"] = round(
            suite["face_blur"][label]["fps"]["flowpipe"]["median"] / c["slowest_stage_ceiling_fps"], 3)
        suite["ceilings"][label] = c
    suite["scaling"] = section_scaling(videos["720p"], a.frames, streams, work)
    suite["overhead"] = section_overhead(a.repeats)
    suite["preprocess"] = section_preprocess(100)
    _publish(suite, a.out)


def _publish(suite: dict, out: str | None) -> None:
    print(json.dumps(suite, indent=2))
    if out:
        Path(out).write_text(json.dumps(suite, indent=2))


if __name__ == "__main__":
    main()

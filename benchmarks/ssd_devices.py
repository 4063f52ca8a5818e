"""SSD MobileNet v2 (the registry's, cut to static shapes) on the GPU and on the CPU, side by side.

    python benchmarks/ssd_devices.py CLIP.mp4 --out OUT.json   # run_all.py ssd_devices CLIP.mp4

preprocess -> inference -> ssd_decode (from 0.3; people and vehicles) on the clip, with and without tiles, on
GPU, CPU and AUTO; each graph run twice and the second timed (the compiled model then comes from the cache).
The GPU's detections against the CPU's: matched at IoU 0.5 or more with the same label, box differences over
the matched ones, and the best score of those only one device found (they should sit near the threshold)."""
from __future__ import annotations

import argparse
import datetime
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from flowpipe.testing import collected, run_yaml

GRAPH = """
nodes:
  - {{id: src, type: video_source, config: {{uri: "{src}", decoder: opencv}}}}
  - {{id: pre, type: preprocess, config: {{size: [300, 300], resize: stretch, color: RGB, layout: NHWC, dtype: u8,
      backend: cpu, tiles: {tiles}}}, inputs: {{frame: src}}}}
  - {{id: det, type: inference, config: {{model: ssd_mobilenet_v2_coco, device: {dev}, performance_hint: THROUGHPUT}},
      inputs: {{tensor: pre.tensor}}}}
  - {{id: objs, type: ssd_decode, config: {{score_threshold: 0.3,
      classes: [person, bicycle, car, bus, truck, motorcycle]}}, inputs: {{tensors: det.tensors}}}}
  - {{id: out, type: collect, config: {{into: {name}}}, inputs: objs}}
"""
RUNS = (("gpu", "GPU", "null"), ("cpu", "CPU", "null"), ("gpu_tiles", "GPU", "{grid: [3, 1]}"),
        ("cpu_tiles", "CPU", "{grid: [3, 1]}"), ("auto", "AUTO", "null"))


def _iou(a: list[float], b: list[float]) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - ix * iy
    return ix * iy / union if union > 0 else 0.0


def compare(a: list[list[Any]], b: list[list[Any]]) -> dict[str, Any]:
    """Detections per frame (label, score, box) of two runs: matched, their box differences, the rest's best."""
    matched, diffs, only_a, only_b = 0, [], [], []
    for fa, fb in zip(a, b):
        used: set[int] = set()
        for label, score, *box in sorted(fa, key=lambda t: -t[1]):
            best = max(((_iou(box, x[2:]), j) for j, x in enumerate(fb) if j not in used and x[0] == label),
                       default=(0.0, -1))
            if best[0] >= 0.5:
                used.add(best[1])
                matched += 1
                diffs.append(float(np.abs(np.array(fb[best[1]][2:]) - box).max()))
            else:
                only_a.append(score)
        only_b += [x[1] for j, x in enumerate(fb) if j not in used]
    return {"detections": [sum(map(len, a)), sum(map(len, b))], "matched_iou_0.5_same_label": matched,
            "matched_box_px_diff": {"median": round(float(np.median(diffs)), 2) if diffs else None,
                                    "p99": round(float(np.percentile(diffs, 99)), 2) if diffs else None},
            "unmatched_best_score": [round(max(only_a, default=0.0), 3), round(max(only_b, default=0.0), 3)]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("clip")
    ap.add_argument("--out", default="ssd_devices.json")
    args = ap.parse_args()
    runs, dets = {}, {}
    for name, dev, tiles in RUNS:
        for _ in range(2):
            t = time.time()
            r = run_yaml(GRAPH.format(src=args.clip, tiles=tiles, dev=dev, name=name))
            wall = time.time() - t
        st = r.to_json()
        sec = st.get("inference.det", {})
        runs[name] = {"device": sec.get("device"), "reason": sec.get("device_reason"), "frames": r.frames,
                      "error": str(r.error)[:300] if r.error else None, "wall_s": round(wall, 2),
                      "detector_fps": st.get("nodes", {}).get("det", {}).get("fps")}
        dets[name] = ([[(d.label, float(d.score), *map(float, d.box)) for d in f.detections] for f in collected(name)]
                      if r.ok else [])
    import openvino as ov

    core = ov.Core()
    gpu = core.get_property("GPU", "FULL_DEVICE_NAME") if "GPU" in core.available_devices else "no GPU"
    out = {"machine": f"{gpu}, {os.cpu_count()} cores", "openvino": ov.__version__,
           "date": datetime.date.today().isoformat(), "clip": Path(args.clip).name, "runs": runs,
           "gpu_vs_cpu": compare(dets["gpu"], dets["cpu"]) if dets["gpu"] and dets["cpu"] else None,
           "gpu_tiles_vs_cpu_tiles": (compare(dets["gpu_tiles"], dets["cpu_tiles"])
                                      if dets["gpu_tiles"] and dets["cpu_tiles"] else None)}
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

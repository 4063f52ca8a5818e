"""Where the tracker's colour gate (``appearance``) comes from: how far apart the colours of one track's
detections are, frame to frame, against those of other tracks in the same frame, on the counting clips seen while
the graph was made. The gate is set above the largest same-track distance there, so that on those clips it cuts
no track the tracker kept without it.

    python benchmarks/appearance_gate.py --out OUT.json   # or: python benchmarks/run_all.py appearance_gate

Per clip, graphs/people_count.yaml runs with ``appearance=0`` (colours not looked at); each person detection with
a track id then gets its colours (``nodes/track/appearance.py``) from the decoded frame, and its distance
to its own track's look so far (same track) and to every other track's in that frame (other tracks); and what the
colours cost, a detection (the median frame's time over its detections). A track's look learns as the tracker's
does: from each of its detections that no other box in the frame overlaps. "Same track" is the tracker's word, so
it includes the ids that passed between people; "other tracks" includes people walking together.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from bench_results import publish

ROOT = Path(__file__).resolve().parent.parent
GRAPH = ROOT / "graphs" / "people_count.yaml"
SEEN = ("street", "street_low", "bus_pan", "bus_pan_dark")
PCTS = (50, 90, 95, 99, 100)


def distances(name: str) -> tuple[list[float], list[float], list[float]]:
    import av

    from flowpipe.graph import load_graph
    from flowpipe_eval.crossings import clip_file
    from flowpipe_eval.score import run_timed
    from flowpipe_nodes.track import appearance
    from flowpipe_nodes.track.geometry import iou_matrix

    work = Path(tempfile.mkdtemp(prefix=f"flowpipe-gate-{name}-"))
    src = clip_file(name, work)
    spec = load_graph(str(GRAPH), {"input": str(src), "output": str(work / "o.mp4"), "metadata": str(work / "o.jsonl"),
                                   "events": str(work / "events"), "clips": str(work / "clips"), "device": "CPU",
                                   "appearance": 0.0})
    run_timed(spec, f"{GRAPH.stem} on {src}")
    records = {r["frame"]: r for r in map(json.loads, (work / "o.jsonl").read_text().splitlines())}
    looks: dict[int, Any] = {}
    same: list[float] = []
    other: list[float] = []
    cost: list[float] = []  # seconds a detection's colours took
    with av.open(str(src)) as c:
        for i, picture in enumerate(c.decode(video=0)):
            objs = [o for o in records.get(i, {}).get("objects", [])
                    if o.get("track_id") is not None and o["label"] == "person" and o.get("source") == "detection"]
            if not objs:
                continue
            image = picture.to_ndarray(format="bgr24")
            start = time.perf_counter()
            colours = appearance.colours(image, False, np.array([o["box"] for o in objs], np.float64))
            cost.append((time.perf_counter() - start) / len(objs))
            for k, o in enumerate(objs):
                if np.isnan(colours[k]).any():
                    continue
                for p in objs:
                    look = looks.get(p["track_id"])
                    if look is not None:
                        d = float(appearance.distances(look, colours[k])[0, 0])
                        (same if p["track_id"] == o["track_id"] else other).append(d)
            found = [o["box"] for o in records[i]["objects"] if o.get("source") == "detection"]
            crowded = iou_matrix(np.array([o["box"] for o in objs], np.float64), np.array(found, np.float64)) > 0.05
            for k, o in enumerate(objs):
                if crowded[k].sum() <= 1:  # only its own box on it (another's: its look stays)
                    looks[o["track_id"]] = appearance.learnt(looks.get(o["track_id"]), colours[k])
    return same, other, cost


def _pcts(v: list[float]) -> dict[str, float] | None:
    return {f"p{p}": round(float(np.percentile(v, p)), 3) for p in PCTS} if v else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clips", nargs="*", default=list(SEEN), help="default: the counting clips seen while the "
                    "graph was made")
    ap.add_argument("--out")
    args = ap.parse_args()
    rows, same_all, other_all = [], [], []
    for name in args.clips:
        same, other, cost = distances(name)
        same_all += same
        other_all += other
        rows.append({"clip": name, "same": len(same), "other": len(other), "same_pcts": _pcts(same),
                     "other_pcts": _pcts(other), "us_per_detection": round(1e6 * float(np.median(cost)), 1)})
        print(rows[-1], flush=True)
    largest = max(same_all) if same_all else None
    publish({"clips": args.clips, "rows": rows, "same_pcts": _pcts(same_all), "other_pcts": _pcts(other_all),
             "largest_same": None if largest is None else round(largest, 3),
             "gate": None if largest is None else float(np.ceil(largest * 10) / 10)}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

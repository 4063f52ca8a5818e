"""How far past a line a track goes before it comes back over it: what ``count: every``'s ``back`` is chosen on.

graphs/people_count.yaml runs once on each counting clip (its tracks do not depend on how the line counts); its
tracked people, frame by frame, are then replayed through the analytics node alone with ``count: every`` at each
``back`` below (and with ``count: first``), and the crossings scored against ``eval/flowpipe_eval/crossings.json``.
Every crossing back (a track crossing the other way from the way it was last counted) is listed with how far
past the line the track had gone since (in its box's heights) and whether it is a true crossing, a false one or
one counted twice.

    python benchmarks/count_back.py --out OUT.json   # run_all.py count_back

``--clips`` chooses the clips (default: every clip but those added after the rule was chosen, ``after:
fifth_plaza_look``, which are kept to prove it).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_results import publish

ROOT = Path(__file__).resolve().parent.parent
BACKS = [0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 4.0]


def replay(records: list[dict[str, Any]], size: tuple[int, int], line: list[list[float]],
           back: float | None, extra: str = "") -> list[dict[str, Any]]:
    """The crossings the analytics node reports over a run's tracked people with ``count: every`` and ``back``
    (None: ``count: first``); ``extra``: more of the line's settings (``, same: 0.7``)."""
    from flowpipe.frame import Detection, Frame
    from flowpipe.testing import run_node

    w, h = size
    pixels = [[x * w, y * h] for x, y in line]
    frames = []
    for r in records:
        f = Frame("cam", r["frame"], float(r["pts"]), np.zeros((1, 1, 3), np.uint8))
        f.detections = [Detection(tuple(o["box"]), o["score"], o["label"], track_id=o["track_id"])
                        for o in r["objects"] if o.get("track_id") is not None]
        frames.append(f)
    count = "first" if back is None else f"every, back: {back}"
    snippet = (f"type: analytics\nconfig: {{labels: [person], units: pixels, rate: 25, lines: {{line: "
               f"{{points: {json.dumps(pixels)}, count: {count}{extra}}}}}}}")
    out = run_node(snippet, frames, port="detections")
    return [{"frame": f.index, **c} for f in out.frames for c in f.meta["analytics"]["crossings"]]


def tracked(name: str, **params: Any) -> tuple[list[dict[str, Any]], tuple[int, int]]:
    """graphs/people_count.yaml run once on clip ``name`` (its own line; ``params``: more of the graph's): its
    records, frame by frame, and the picture's size."""
    from flowpipe.graph import load_graph
    from flowpipe_eval.crossings import clip_file, line
    from flowpipe_eval.score import run_timed

    work = Path(tempfile.mkdtemp(prefix=f"flowpipe-tracked-{name}-"))
    src = clip_file(name, work)
    spec = load_graph(str(ROOT / "graphs" / "people_count.yaml"), {
        "input": str(src), "output": str(work / "out.mp4"), "metadata": str(work / "out.jsonl"),
        "events": str(work / "events"), "clips": str(work / "clips"), "device": "CPU", "line": line(name), **params})
    run_timed(spec, f"people_count on {src}")
    records = [json.loads(x) for x in (work / "out.jsonl").read_text().splitlines()]
    cap = cv2.VideoCapture(str(src))
    size = (int(cap.get(cv2.CAP_PROP_FRAME_WIDTH)), int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT)))
    cap.release()
    return records, size


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clips", nargs="*")
    ap.add_argument("--out")
    args = ap.parse_args()
    from flowpipe_eval.crossings import line, score, truth

    t = truth()
    names = args.clips or [n for n, c in t.items() if c.get("after") != "fifth_plaza_look"]
    rows, backs = [], []
    for name in names:
        records, size = tracked(name)
        own = line(name)
        replayed = {back: replay(records, size, own, back) for back in [None, *BACKS]}
        per_back = {}
        for back, got in replayed.items():
            s = score(name, got).row()
            per_back["first" if back is None else str(back)] = {k: s[k] for k in ("true", "found", "false", "twice")}
        # each crossing back with no threshold: how far the track had gone, and what it was
        crossings = replayed[0.0]
        depth = _depths(records, size, own)
        after = score(name, crossings).row()
        for c in crossings:
            d = depth.get((c["track"], c["frame"]))
            if d is None:
                continue
            before = score(name, [x for x in crossings if x is not c]).row()
            what = "false" if after["false"] > before["false"] else "twice" if after["twice"] > before["twice"] \
                else "true"
            backs.append({"clip": name, "frame": c["frame"], "track": c["track"], "direction": c["direction"],
                          "went_heights": round(d, 2), "is": what})
        rows.append({"clip": name, "part": t[name].get("part", "seen"), "by_back": per_back})
        print(rows[-1], flush=True)
    totals = {b: {k: sum(r["by_back"][b][k] for r in rows) for k in ("true", "found", "false", "twice")}
              for b in ["first", *map(str, BACKS)]}
    publish({"clips": names, "backs": BACKS, "rows": rows, "crossings_back": backs, "totals": totals}, args.out)
    return 0


def _depths(records: list[dict[str, Any]], size: tuple[int, int], line: list[list[float]]) -> dict[tuple[int, int],
                                                                                                  float]:
    """(track, frame) of each crossing back the analytics node counts with ``back`` 0 -> how far past the line
    (its box's heights) the track had gone since its last counted crossing: the node's geometry (its feet, its
    default margin), for lines across the whole picture (the node's check that a crossing passes between the
    line's ends always holds) and runs in which no track is forgotten and comes back. Measured with ``back`` 0:
    at a larger ``back`` a crossing back left uncounted changes which later one is a crossing back at all."""
    from flowpipe_nodes.analytics import Analytics

    margin = Analytics.Config.model_fields["margin"].default
    w, h = size
    a, b = np.array(line[0]) * (w, h), np.array(line[1]) * (w, h)
    ab = b - a
    side: dict[int, int] = {}
    last: dict[int, tuple[int, float]] = {}  # track -> (side counted to, heights gone since)
    out = {}
    for r in records:
        for o in r["objects"]:
            tid = o.get("track_id")
            if tid is None or o["label"] != "person":
                continue
            x1, y1, x2, y2 = o["box"]
            height = max(y2 - y1, 1e-9)
            p = np.array([(x1 + x2) / 2, y2])
            off = float(ab[0] * (p[1] - a[1]) - ab[1] * (p[0] - a[0])) / float(np.hypot(*ab))
            if tid in last:
                last[tid] = (last[tid][0], max(last[tid][1], off / height * last[tid][0]))
            s = 1 if off > margin * height else -1 if off < -margin * height else 0
            if s == 0:
                continue
            was, side[tid] = side.get(tid), s
            if was is None or was == s:
                continue
            if tid in last and last[tid][0] != s:
                out[(tid, r["frame"])] = last[tid][1]
            if tid not in last or last[tid][0] != s:
                last[tid] = (s, off / height * s)
    return out


if __name__ == "__main__":
    raise SystemExit(main())

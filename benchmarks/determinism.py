"""Outputs as a function of the input: the shipped face-blur graph on real clips, run alone, again, beside busy
loops, with batch 8, and over two processes (the clip as two streams, each compared with the run alone), side by
side in one run; with ``--against REV``, the same runs of an earlier revision (installed apart from this tree)
and what the back edges cost against it.

    python benchmarks/determinism.py --against ffb1ad4 --json OUT.json   # run_all.py determinism

Per run: frames whose records (every box to 0.5 px, track id, label, how it was found) differ from the first
run alone, the largest difference of one face's box (px) where they differ, face-frames masked, false masks a
frame, the longest leak (frames one face stays unmasked), the seconds from the first frame decoded to the last
written (model loading left out) and the frames the detector ran on. Busy loops: one spinning process per core
and one more, started before the run and stopped after it.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml
from bench_results import publish

ROOT = Path(__file__).resolve().parent.parent
CLIPS = ["woman_hands", "group_pan", "bus_street", "cast_low"]

#: what each run does, in a process of its own (this tree's flowpipe, or the earlier revision's)
CHILD = """
import json, sys, time
from flowpipe import load_graph
a = json.loads(sys.argv[1])
spec = load_graph(a["graph"], a["sets"])
if a["processes"] > 1:
    from flowpipe.runtime.executor import executor
    res = executor(spec, a["processes"]).run()
    seconds = res.elapsed_s
else:
    from flowpipe_eval.score import run_timed
    res, seconds = run_timed(spec, a["graph"])
if not res.ok:
    raise SystemExit(f"run failed: {res.error}")
print(json.dumps({"seconds": seconds, "frames": res.frames, "runs": res.nodes.get("pre", {}).get("detector_runs")}))
"""

Records = dict[tuple[str, int], list[tuple[Any, ...]]]


def _spin(stop: Any) -> None:
    while not stop.is_set():
        pass


class Load:
    """Busy loops on every core, and one more, while in the ``with``."""

    def __enter__(self) -> Load:
        ctx = mp.get_context("spawn")
        self.stop = ctx.Event()
        self.loops = [ctx.Process(target=_spin, args=(self.stop,), daemon=True)
                      for _ in range(len(os.sched_getaffinity(0)) + 1)]
        for p in self.loops:
            p.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for p in self.loops:
            p.join(5)


def _records(path: Path) -> Records:
    out: Records = {}
    for r in map(json.loads, path.read_text().splitlines()):
        out[(r["stream"], r["frame"])] = sorted(
            (tuple(round(v * 2) / 2 for v in o["box"]), o.get("track_id"), o["label"], o.get("source"))
            for o in r["objects"])
    return out


def _two_streams(graph: Path, work: Path) -> Path:
    """The face-blur graph with a second source of the same clip (stream ``b``): two streams to shard."""
    g = yaml.safe_load(graph.read_text())
    nodes = g["nodes"]
    src = next(n for n in nodes if n["id"] == "decode")
    nodes.insert(1, {**src, "id": "decode_b", "config": {**src["config"], "stream": "b"}})
    pre = next(n for n in nodes if n["id"] == "pre")
    pre["inputs"] = {"frame": ["decode.frame", "decode_b.frame"]}
    out = work / "face_blur_two.yaml"
    out.write_text(yaml.safe_dump(g, sort_keys=False))
    return out


def _run(python_path: str | None, graph: Path, clip: Path, work: Path, tag: str, processes: int = 1,
         sets: dict[str, Any] | None = None, loaded: bool = False) -> dict[str, Any]:
    meta = work / f"{tag}.jsonl"
    args = {"graph": str(graph), "processes": processes,
            "sets": {"input": str(clip), "device": "CPU", "output": str(work / f"{tag}.mp4"), "metadata": str(meta),
                     **(sets or {})}}
    env = dict(os.environ)
    if python_path:
        env["PYTHONPATH"] = python_path
    cwd = work  # never the tree's root: its flowpipe/ would shadow the revision installed apart
    if loaded:
        with Load():
            done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(args)], capture_output=True, text=True,
                                  env=env, cwd=cwd)
    else:
        done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(args)], capture_output=True, text=True, env=env,
                              cwd=cwd)
    if done.returncode:
        raise SystemExit(f"{tag}: {done.stderr[-2000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["records"] = _records(meta)
    return out


def _compare(ref: Records, got: Records, stream: str = "decode") -> dict[str, Any]:
    """Frames of ``got``'s ``stream`` whose records differ from ``ref``'s (stream ``decode``), and the largest
    difference of one track's box where both have it."""
    mine = {i: objs for (s, i), objs in got.items() if s == stream}
    base = {i: objs for (s, i), objs in ref.items() if s == "decode"}
    differ = [i for i in sorted(set(base) | set(mine)) if base.get(i) != mine.get(i)]
    px = 0.0
    for i in differ:
        a = {o[1]: o[0] for o in base.get(i, [])}
        b = {o[1]: o[0] for o in mine.get(i, [])}
        for t in set(a) & set(b):
            px = max(px, max(abs(x - y) for x, y in zip(a[t], b[t], strict=True)))
    return {"frames_differing": len(differ), "frames": len(base), "max_box_px": px}


def _score(name: str, rec: Records, stream: str = "decode") -> dict[str, Any]:
    from flowpipe_eval.clips import clip
    from flowpipe_eval.score import score
    from flowpipe_nodes.draw import grow_box

    c = clip(name)
    h, w = c.frames[0].shape[:2]
    masks: list[list[tuple[float, ...]]] = [[] for _ in c.frames]
    for (s, i), objs in rec.items():
        if s == stream and i < len(masks):
            masks[i] = [grow_box(o[0], 0.2, w, h) for o in objs]  # the graph's blur grows boxes by 0.2
    sc = score(c, masks, 1.0, "flowpipe")
    return {"masked": sc.masked, "false_per_frame": sc.false_per_frame, "longest_leak": sc.longest_leak}


def _install(rev: str, work: Path) -> tuple[str, Path]:
    """The revision ``rev`` of this repository, installed apart (its own flowpipe and node library), and its own
    face-blur graph."""
    tree, target = work / f"tree-{rev}", work / f"site-{rev}"
    graph = work / f"face_blur-{rev}.yaml"
    git = shutil.which("git") or "git"
    subprocess.run([git, "-C", str(ROOT), "worktree", "add", "--detach", str(tree), rev], check=True,
                   capture_output=True)
    try:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                        "--target", str(target), str(tree)], check=True, capture_output=True)
        shutil.copy(tree / "graphs" / "face_blur.yaml", graph)
    finally:
        subprocess.run([git, "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], capture_output=True)
    return str(target), graph


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clips", default=",".join(CLIPS))
    ap.add_argument("--against", help="an earlier revision run side by side (git rev)")
    ap.add_argument("--json")
    args = ap.parse_args()
    from flowpipe_eval.clips import clip

    graph = ROOT / "graphs" / "face_blur.yaml"
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="flowpipe-determinism-") as tmp:
        work = Path(tmp)
        two = _two_streams(graph, work)
        before, graph_before = _install(args.against, work) if args.against else (None, graph)
        for name in args.clips.split(","):
            src = clip(name).write(work / f"{name}.mp4")
            runs: dict[str, dict[str, Any]] = {}
            now: list[tuple[str, dict[str, Any]]] = [("alone", {}), ("again", {}), ("loaded", {"loaded": True}),
                                                     ("batch 8", {"sets": {"batch": 8}}),
                                                     ("2 processes", {"processes": 2})]
            for tag, kw in now:
                g = two if tag == "2 processes" else graph
                runs[tag] = _run(None, g, src, work, f"{name}-{tag.replace(' ', '_')}", **kw)
                print(f"{name} {tag}: {runs[tag]['seconds']:.2f} s", file=sys.stderr)
            if before:
                then: list[tuple[str, dict[str, Any]]] = [("before, alone", {}), ("before, again", {}),
                                                          ("before, loaded", {"loaded": True})]
                for tag, kw in then:
                    runs[tag] = _run(before, graph_before, src, work, f"{name}-{tag.replace(', ', '_')}", **kw)
                    print(f"{name} {tag}: {runs[tag]['seconds']:.2f} s", file=sys.stderr)
            ref = runs["alone"]["records"]
            for tag, r in runs.items():
                streams = ["decode", "b"] if tag == "2 processes" else ["decode"]
                base = runs["before, alone"]["records"] if tag.startswith("before") else ref
                for s in streams:
                    rows.append({"clip": name, "run": tag + (f", stream {s}" if len(streams) > 1 else ""),
                                 **_compare(base, r["records"], s), **_score(name, r["records"], s),
                                 "seconds": round(r["seconds"], 3), "frames_out": r["frames"]["out"],
                                 "detector_runs": r["runs"]})
    result: dict[str, Any] = {"benchmark": "determinism", "graph": "graphs/face_blur.yaml", "device": "CPU",
                              "against": args.against, "rows": rows}
    if args.against:  # what the back edges cost: seconds now over seconds before, quiet and loaded, per clip
        cost = {}
        for name in args.clips.split(","):
            by = {r["run"]: r for r in rows if r["clip"] == name}
            cost[name] = {
                "alone": round(min(by["alone"]["seconds"], by["again"]["seconds"])
                               / min(by["before, alone"]["seconds"], by["before, again"]["seconds"]), 3),
                "loaded": round(by["loaded"]["seconds"] / by["before, loaded"]["seconds"], 3)}
        result["seconds_now_over_before"] = cost
    publish(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())

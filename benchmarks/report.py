"""Renders the tables and plots of BENCHMARKS.md from the result files in benchmarks/results/ (harness.py), and
nothing else: the text round them is written by hand in BENCHMARKS.md, which marks where each table goes:

    <!-- table NAME [NAME ...] -->
    ...replaced by TABLES[NAME] (each named, in turn) on every run...
    <!-- /table -->

    python benchmarks/report.py           # BENCHMARKS.md's tables and benchmarks/plots/*.png
    python benchmarks/report.py --check   # exit 1 where BENCHMARKS.md's tables are not what the results render

Every table opens with the command that produced it, its machine, its date and its result file. It runs offline,
from the result files alone (and the evaluation's truth files, installed with flowpipe).
"""
from __future__ import annotations

import re
import statistics
import sys
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PLOTS = HERE / "plots"
sys.path.insert(0, str(HERE))

from harness import BY_NAME, latest, load  # noqa: E402

BLOCK = re.compile(r"(<!-- table ([^>]+?) -->\n)(.*?)(<!-- /table -->)", re.S)
Rows = list[str]


def _target(ok: bool) -> str:
    return "met" if ok else "**missed**"


def _fmt(m: dict[str, Any]) -> str:
    return f"{m['median']} ({m['min']}–{m['max']})"


def _result(name: str, kind: str | None = None) -> tuple[dict[str, Any], Path] | None:
    path = latest(BY_NAME[name], kind)
    return None if path is None else (load(path), path)


def _results(name: str, kinds: tuple[str, ...]) -> list[tuple[dict[str, Any], Path]]:
    """The newest result of ``name`` on each machine of ``kinds`` that has one, in that order."""
    return [got for kind in kinds if (got := _result(name, kind)) is not None]


def _source(doc: dict[str, Any], path: Path) -> str:
    m = doc["machine"]
    where = ", ".join(x for x in (f"{m.get('cores', '?')} cores", m.get("gpu") or "", f"Python {m['python']}"
                                  if m.get("python") else "") if x)
    return f"`{doc['command']}`; {where}; {doc['date']}; `{path.relative_to(ROOT)}`."


def _table(header: list[str], rows: list[list[Any]]) -> Rows:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(str(c) for c in r) + " |" for r in rows)]


def _with(name: str, render: Callable[[dict[str, Any]], Rows], kind: str | None = None) -> Rows:
    got = _result(name, kind)
    if got is None:
        return [f"No result of `{name}` in benchmarks/results/ (`python benchmarks/run_all.py {name}`)."]
    doc, path = got
    rows = render(doc["figures"])
    if len(rows) > 1 and rows[0] and not rows[0].startswith(("|", "-", "!")) and rows[1] == "":
        return [f"{_source(doc, path)} {rows[0]}", *rows[1:]]  # the table's own note joins its source line
    return [_source(doc, path), "", *rows]


# sections 1-5: the suite


def suite_face_blur(s: dict[str, Any]) -> Rows:
    fb, c720 = s["face_blur"], s["ceilings"]["720p"]
    r720 = fb["720p"]
    rows = [[v, _fmt(r["fps"]["sync_loop"]), _fmt(r["fps"]["expert_loop"]), _fmt(r["fps"]["flowpipe"]),
             _fmt(r["ratios"]["flowpipe/sync"]), _fmt(r["ratios"]["flowpipe/expert"]),
             r["flowpipe_bytes_copied_per_frame"],
             f"{r['detections_vs_sync']['agreement']}, {r['detections_vs_expert']['agreement']}"]
            for v, r in fb.items()]
    sync, expert = r720["ratios"]["flowpipe/sync"]["median"], r720["ratios"]["flowpipe/expert"]["median"]
    ceiling, copied = c720["flowpipe_fraction_of_cpu_work_ceiling"], r720["flowpipe_bytes_copied_per_frame"]
    return [*_table(["video", "sync loop fps", "expert loop fps", "flowpipe fps", "flowpipe / sync",
                     "flowpipe / expert", "bytes copied per frame", "detections agree (vs sync, vs expert)"], rows),
            "", "![face blur fps](benchmarks/plots/face_blur_fps.png)", "",
            f"Targets (720p): flowpipe >= 1.5x the synchronous loop: {sync}x, {_target(sync >= 1.5)}; >= 1.0x the "
            f"expert loop: {expert}x, {_target(expert >= 1.0)}; >= 0.85 of the CPU-work ceiling: {ceiling}, "
            f"{_target(ceiling >= 0.85)}; 0 bytes copied per frame between decode and sinks: {copied}, "
            f"{_target(copied == 0)}."]


def suite_ceilings(s: dict[str, Any]) -> Rows:
    stages = list(s["ceilings"]["720p"]["cpu_ms_per_frame"])
    return _table(["video", *stages, "sum ms", "CPU-work ceiling fps", "decode-only fps", "benchmark_app fps",
                   "flowpipe / CPU-work ceiling", "flowpipe / slowest stage"],
                  [[v, *c["cpu_ms_per_frame"].values(), c["sum_cpu_ms"], c["cpu_work_ceiling_fps"],
                    c.get("decode_only_fps"), c.get("benchmark_app_throughput_fps"),
                    c.get("flowpipe_fraction_of_cpu_work_ceiling"), c.get("flowpipe_fraction_of_slowest_stage_ceiling")]
                   for v, c in s["ceilings"].items()])


def suite_scaling(s: dict[str, Any]) -> Rows:
    return [*_table(["streams", "aggregate fps", "slowest stream", "fastest stream", "spread", "CPU cores busy"],
                    [[n, r["aggregate_fps"], r["per_stream_min"], r["per_stream_max"], r["per_stream_spread"],
                      r["cpu_util_cores"]] for n, r in s["scaling"].items()]),
            "", "![stream scaling](benchmarks/plots/stream_scaling.png)"]


def suite_overhead(s: dict[str, Any]) -> Rows:
    chain, hops = s["overhead"]["chain_10_hops"], s["overhead"]["frame_passing_1080p"]
    rows = [[k, v["median_us"], f"{v['min_us']}–{v['max_us']}", hops["bytes_copied_per_frame"].get(k, "-")]
            for k, v in hops.items() if isinstance(v, dict) and "median_us" in v]
    return [f"- 10-hop pass-through chain: {chain['fps_median']} frames/s ({chain['fps_min']}–{chain['fps_max']}), "
            f"{chain['per_hop_us']} µs per hop.",
            f"- A numpy copy of one 1080p frame over a thread hop: {hops['ratio_numpy_copy_over_thread_hop']}x.", "",
            *_table(["hop (1080p BGR frame)", "median µs", "min–max", "bytes copied per frame"], rows)]


def _preprocess(p: dict[str, Any]) -> Rows:
    return [f"OpenCL device: {p['opencl_device']}.", "",
            *_table(["case", "OpenCL ms", "OpenCV+numpy ms", "speed-up", "kernel ms", "max abs diff"],
                    [[k, v["opencl_ms_median"], v["opencv_numpy_ms_median"], v["speedup"], v["kernel_ms_median"],
                      v.get("max_abs_diff", "-")] for k, v in p["cases"].items()])]


def suite_preprocess(s: dict[str, Any]) -> Rows:
    return _preprocess(s["preprocess"])


def _suite(render: Callable[[dict[str, Any]], Rows]) -> Callable[[], Rows]:
    def rows() -> Rows:
        got = _result("suite")
        return [] if got is None else render(got[0]["figures"])
    return rows


def suite_source() -> Rows:
    got = _result("suite")
    if got is None:
        return ["No result of `suite` in benchmarks/results/ (`python benchmarks/run_all.py`)."]
    doc, path = got
    m = doc["figures"]["machine"]
    return [_source(doc, path) + f" OpenVINO {m['openvino'].split('-')[0]}, OpenCV {m['opencv']}, numpy "
            f"{m['numpy']}; {doc['figures']['settings']['frames']} frames after {doc['figures']['settings']['warmup']}"
            f" of warm-up, {doc['figures']['settings']['repeats']} repeats."]


# section 6: the GPU machine


def gpu_path(r: dict[str, Any]) -> Rows:
    cpu = r.get("cpu_ms_per_frame") or {}
    ratio = r["ratio_opencl_remote_over_host"]
    return _table(["model", "batch", "streams", "preprocess threads", "frames", "OpenCL + remote tensor fps",
                   "host + host tensor fps", "ratio", "CPU ms a frame (OpenCL / host)", "target >= 1.3"],
                  [[r["model"], r.get("batch", 1), r.get("streams", 1), r.get("pre_workers", 1),
                    f"{r.get('frame_format', 'BGR')}, {r.get('source', '')}", _fmt(r["fps"]["opencl+remote"]),
                    _fmt(r["fps"]["host+host"]), _fmt(ratio),
                    f"{cpu.get('opencl+remote', '-')} / {cpu.get('host+host', '-')}", _target(ratio["median"] >= 1.3)]])


def scaling(r: dict[str, Any]) -> Rows:
    ceil = r["ceilings"]["720p"]["cpu_work_ceiling_fps"]
    eight = r["scaling"].get("8")
    rows = [[n, x["aggregate_fps"], round(x["aggregate_fps"] / ceil, 3), x["per_stream_min"], x["per_stream_max"],
             x["per_stream_spread"]] for n, x in r["scaling"].items()]
    out = [f"CPU-work ceiling {ceil} fps ({r['machine']['cores']} cores).", "",
           *_table(["streams", "aggregate fps", "of the ceiling", "slowest", "fastest", "spread"], rows)]
    if eight:
        share = eight["aggregate_fps"] / ceil
        out += ["", f"Target: 8 streams >= 0.8 of the ceiling, every stream at the same rate (spread < 0.1): "
                f"{share:.3f}, spread {eight['per_stream_spread']}, "
                f"{_target(share >= 0.8 and eight['per_stream_spread'] < 0.1)}."]
    return out


def model_cache(r: dict[str, Any]) -> Rows:
    return _table(["model", "first start ms", "next start ms", "next loaded from the cache", "outputs equal"],
                  [[m, x["first_start"]["compile_ms"], x["second_start"]["compile_ms"],
                    x["second_start"]["loaded_from_cache"], x["outputs_equal"]] for m, x in r["runs"].items()])


# section 7


def changes() -> Rows:
    out: Rows = []
    rows = []
    for kind in ("2cores", "h200"):
        got = _result("ab", kind)
        if got is None:
            continue
        doc, path = got
        r = doc["figures"]
        b, a = r["median"]["before"], r["median"]["after"]
        out.append(f"- {doc['machine']['name']}: {_source(doc, path)}")
        rows.append([r["title"], f"{r['graph']} {' '.join(r['sets'])}, {r['frames']} frames x {r['repeats']}",
                     r["cores"], round(b["fps"], 1), round(a["fps"], 1), r["ratio_after_over_before"]["fps"],
                     f"{round(b['cpu_ms_per_frame'], 2)} -> {round(a['cpu_ms_per_frame'], 2)}"])
        v = r.get("variant")
        if v:  # a third side, run in the same turns
            out[-1] += (f" In the same turns, {v['about']}: {round(v['median']['fps'], 1)} fps, "
                        f"{v['ratio_over_before']['fps']} of before, {round(v['median']['cpu_ms_per_frame'], 2)} CPU "
                        f"ms/frame.")
    return [*out, "", *_table(["change (before -> after)", "graph, settings", "cores", "fps before", "fps after",
                               "ratio", "CPU ms/frame"], rows)]


# section 8


def _memory_per_stream(rows: list[dict[str, Any]]) -> str:
    """Peak PSS per added stream, between runs that differ only in streams (same device, processes, settings)."""
    by: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for x in rows:
        if x.get("peak_pss_mb") and not x.get("error") and x.get("device_owner") is not None:
            by.setdefault((x["device"], x["processes"], x["device_owner"], tuple(x.get("sets", []))), []).append(x)
    out = []
    for (dev, procs, _, sets), xs in sorted(by.items(), key=lambda kv: str(kv[0])):
        xs.sort(key=lambda x: x["streams"])
        for a, b in pairwise(xs):
            if b["streams"] > a["streams"]:
                per = (b["peak_pss_mb"] - a["peak_pss_mb"]) / (b["streams"] - a["streams"])
                out.append(f"{dev}, {procs} process{'es' if procs > 1 else ''} {' '.join(sets)}: "
                           f"{a['streams']} -> {b['streams']} streams, {round(per)} MB")
    return "Peak PSS per added stream: " + "; ".join(out) + "." if out else ""


def process_scaling(r: dict[str, Any]) -> Rows:
    rows = r["rows"]
    ceiling = next((x for x in rows if x["tag"].startswith("ceiling")), None)
    single = {(x["device"], x["streams"], tuple(x.get("sets", []))): x["fps"] for x in rows
              if x.get("processes") == 1 and x.get("fps") and not x["tag"].startswith("one_")}
    out = []
    if ceiling is not None:
        stages = ", ".join(f"{k} {v}" for k, v in ceiling["stage_ms"].items())
        out += [f"CPU-work ceiling: {ceiling['sum_ms']} ms of stage work per frame ({stages}) -> {ceiling['fps']} fps "
                f"on {r['machine']['cores']} cores.", ""]
    table = []
    for x in rows:
        if x["tag"].startswith(("ceiling", "one_")):
            continue
        if x.get("error") or not x.get("fps"):
            table.append([x["tag"], x.get("device", ""), x.get("streams", ""), x.get("processes", ""), "", "failed",
                          "", "", "", "", "", f"{x.get('frames', '')}: {x.get('error')}"])
            continue
        one = single.get((x["device"], x["streams"], tuple(x.get("sets", []))))
        fr = x.get("frames") or {}
        table.append([x["tag"], x["device"], x["streams"], x["processes"],
                      {True: "yes", False: "no"}.get(x.get("device_owner"), "independent"), x["fps"],
                      round(x["fps"] / one, 2) if one and x.get("processes", 1) > 1 else "",
                      round(x["fps"] / ceiling["fps"], 2) if ceiling and ceiling.get("fps") else "",
                      f"{x.get('per_stream_min')} / {x.get('per_stream_max')}", x.get("cpu_ms_per_frame"),
                      x.get("peak_pss_mb") or "", f"{fr.get('in', '')} / {fr.get('out', '')} / {fr.get('failed', '')}"])
    out += _table(["run", "inference", "streams", "processes", "device owner", "fps", "x one process", "of ceiling",
                   "slowest / fastest stream", "CPU ms/frame", "peak PSS MB", "frames in / out / failed"], table)
    pss = _memory_per_stream(rows)
    return [*out, *(["", pss] if pss else []), "", "![streams over processes](benchmarks/plots/process_scaling.png)"]


# sections 9-11


def cluster_sim(r: dict[str, Any]) -> Rows:
    return _table(["streams", "hosts", "place all (target: under 5 s)", "hosts lost", "streams moved",
                   "re-place them (target: under 5 s)", "controller peak memory"],
                  [[r["streams"], r["hosts"], f"{r['place_all_s']} s ({_target(r['place_all_s'] < 5)})",
                    r["lost_hosts"], r["moved_streams"], f"{r['replace_s']} s ({_target(r['replace_s'] < 5)})",
                    f"{r['controller_peak_mb']} MB"]])


def cluster_overhead(r: dict[str, Any]) -> Rows:
    ratio = r["median_pair_ratio"]
    return _table(["", "local", "one-host Ray cluster"],
                  [["fps, each pair's runs", ", ".join(map(str, r["local_fps"])),
                    ", ".join(map(str, r["cluster_fps"]))],
                   ["CPU ms a frame, processes that ran the graph", r["local_run_cpu_ms_per_frame"],
                    r["cluster_run_cpu_ms_per_frame"]],
                   ["CPU ms a frame, whole machine", r["local_machine_cpu_ms_per_frame"],
                    r["cluster_machine_cpu_ms_per_frame"]],
                   ["median of the pairs' ratios (target >= 0.95)", "", f"{ratio} ({_target(ratio >= 0.95)})"],
                   ["ratio of the medians; Ray's start, once", "", f"{r['ratio_of_medians']}; {r['ray_start_s']} s"]])


def cluster_failover(r: dict[str, Any]) -> Rows:
    return _table(["run", "streams moved", "noticed", "placed and started", "first frame on the new host",
                   "every frame once"],
                  [[i, x["streams_moved"], f"{x['noticed_s']} s", f"{x['replaced_in_s']} s", f"{x['first_frame_s']} s",
                    "yes" if x["every_frame_once"] else "no"] for i, x in enumerate(r["runs"], 1)])


def serve_load(r: dict[str, Any]) -> Rows:
    ratio = r["ratio_under_load"]
    return _table(["window", "median per-stream FPS"],
                  [["quiet", r["fps_quiet_before"]], [f"{r['clients']} clients polling", r["fps_under_load"]],
                   ["quiet again", r["fps_quiet_after"]],
                   ["rate kept under load (target: unchanged within noise)", f"{ratio:.1%} ({_target(ratio >= 0.95)})"],
                   ["status calls answered a second (p50 / p99 ms)",
                    f"{r['status_calls_per_s']} ({r['status_p50_ms']} / {r['status_p99_ms']})"]])


MEDIA_PATHS = {"opencv_bgr_mp4v": "OpenCV decode to BGR, MPEG-4 Part 2 via OpenCV",
               "opencv_bgr_h264": "OpenCV decode to BGR, H.264 (x264 veryfast) via PyAV",
               "pyav_i420_h264": "PyAV decode in I420, YUV to H.264 (x264 veryfast)",
               "pyav_i420_h264_ultrafast": "PyAV decode in I420, YUV to H.264 (x264 ultrafast)"}


def media_path(r: dict[str, Any]) -> Rows:
    cpu = {(x["height"], x["path"]): x["cpu_ms_per_frame"] for x in r["rows"]}
    yuv, bgr = cpu.get((720, "pyav_i420_h264")), cpu.get((720, "opencv_bgr_mp4v"))
    return [*_table(["height", "path", "CPU ms/frame", "vs OpenCV BGR + mp4v", "FPS"],
                    [[f"{x['height']}p", MEDIA_PATHS.get(x["path"], x["path"]), x["cpu_ms_per_frame"],
                      x["cpu_vs_opencv_mp4v"], x["fps"]] for x in r["rows"]]), "",
            "Target: the YUV path at 720p spends >= 25% less CPU a frame than OpenCV BGR + mp4v: "
            + (f"{yuv / bgr:.2f}x, " if yuv and bgr else "") + f"{_target(bool(yuv and bgr and yuv <= 0.75 * bgr))}."]


def media_codecs() -> Rows:
    got = [g for kind in ("2cores", "h200") if (g := _result("media_codecs", kind))]
    if not got:
        return ["No result of `media_codecs` in benchmarks/results/."]
    names = [doc["machine"]["name"] for doc, _ in got]
    seen = list(dict.fromkeys((x["height"], x["op"], x["codec"]) for doc, _ in got for x in doc["figures"]["rows"]))
    keys = sorted(seen, key=lambda k: (k[0], seen.index(k)))
    by = {(doc["machine"]["name"], x["height"], x["op"], x["codec"]): x
          for doc, _ in got for x in doc["figures"]["rows"]}

    def cell(x: dict[str, Any] | None) -> str:
        return "-" if x is None else f"{x['cpu_ms_per_frame']} / {x['fps']}"
    rows = []
    for h, op, codec in keys:
        xs = [by.get((n, h, op, codec)) for n in names]
        first = next(x for x in xs if x)
        flag = next((x["same_pictures"] for x in xs if x and "same_pictures" in x), None)
        same = "" if flag is None else "yes" if flag else "NO"
        rows.append([f"{h}p", op, codec, *(cell(x) for x in xs), first.get("kbit_s", ""), same])
    out = [f"- {doc['machine']['name']}: {_source(doc, path)} PyAV {doc['figures']['av']}." for doc, path in got]
    absent = [f"on {doc['machine']['name']}, " + "; ".join(f"{k} ({v})" for k, v in sorted(doc["figures"]["absent"]
                                                                                          .items()))
              for doc, _ in got if doc["figures"].get("absent")]
    out += ["- did not open: " + "; ".join(absent) + "."] if absent else []
    return [*out, "", *_table(["height", "op", "codec", *(f"{n}: CPU ms/frame / FPS" for n in names),
                               f"kbit/s at 30 fps ({names[0]})", "same pictures as software"], rows)]


# section 12: privacy masking


def _held(r: dict[str, Any]) -> bool:
    """The four masking targets on one clip."""
    return (r["masked"] >= 0.99 or not r["face_frames"]) and r["false_per_frame"] <= 0.02 \
        and r["longest_leak"] <= 2 and r.get("longest_false", 0) <= 2


def _summaries(summary: dict[str, dict[str, dict[str, Any]]]) -> Rows:
    rows = []
    for masker, parts in summary.items():
        for part, m in parts.items():
            fps = "-" if m.get("fps_vs_deface_median") is None else (
                f"{m['fps_vs_deface_median']}x / {m['fps_vs_deface_least']}x "
                f"({_target(m['fps_vs_deface_least'] >= 2)})")
            rows.append([masker, part, f"{m['held_on']} of {m['clips']}", ", ".join(m["not_held_on"]) or "-",
                         "-" if m["min_masked"] is None else m["min_masked"], m["max_false_per_frame"], m["max_leak"],
                         m["max_false_run"], fps])
    return _table(["masker", "part", "targets held", "not on", "least masked", "most false a frame", "longest leak",
                   "longest false", "FPS vs deface: median / least (>= 2x)"], rows)


def privacy_shipped(r: dict[str, Any]) -> Rows:
    parts: dict[str, list[dict[str, Any]]] = {}
    for x in r["rows"]:
        parts.setdefault(x.get("part", "?"), []).append(x)
    rows = []
    for part, xs in parts.items():
        faces = [x for x in xs if x["face_frames"]]
        rows.append([part, len(xs), sum(map(_held, xs)), f"{min(x['masked'] for x in faces):.3f}" if faces else "-",
                     f"{max(x['false_per_frame'] for x in xs):.3f}", max(x["longest_leak"] for x in xs),
                     "; ".join(f"{x['clip']} ({x['masked']:.3f} masked, {x['false_per_frame']:.3f} false, leak "
                               f"{x['longest_leak']})" for x in xs if not _held(x)) or "-"])
    return _table(["part", "clips", "targets held", "least masked", "most false a frame", "longest leak",
                   "not held on"], rows)


def privacy(r: dict[str, Any]) -> Rows:
    return _summaries(r["summary"])


def privacy_batch(r: dict[str, Any]) -> Rows:
    from flowpipe_eval.clips import KINDS

    by: dict[str, dict[str, dict[str, Any]]] = {}
    for x in r["rows"]:
        by.setdefault(x["clip"], {})[x["masker"]] = x

    def cell(x: dict[str, Any] | None) -> str:
        if x is None:
            return "-"
        masked = f"{x['masked']:.1%}" if x["face_frames"] else "(no face)"
        return f"{masked}, {x['false_per_frame']:.3f} false/frame, leak {x['longest_leak']}"
    rows = []
    for clip, got in by.items():
        upright = next((v for k, v in got.items() if ":rotate=" in k), None)
        rows.append([KINDS.get(clip, "?"), clip, cell(got.get("flowpipe face_blur.yaml")),
                     cell(upright) + ("" if upright is None else f" ({upright['masker'].split(':', 1)[1]})"),
                     cell(got.get("deface (opencv)"))])
    summary = {k: v for k, v in r["summary"].items() if ":rotate=" not in k}  # the upright runs: in the table
    return [*_table(["kind", "clip", "flowpipe, shipped graph", "the camera turned upright (`rotate`)", "deface"],
                    rows), "", *_summaries(summary)]


def privacy_heads(r: dict[str, Any]) -> Rows:
    heads, shipped = r["graphs"][:2]
    by = {(x["clip"], x["masker"]): x for x in r["rows"]}
    clips = list(dict.fromkeys(x["clip"] for x in r["rows"]))
    rows, under = [], []
    for c in clips:
        d, h, s = by[(c, "deface (opencv)")]["fps"], by[(c, heads)], by[(c, shipped)]
        rows.append([c, f"{h['masked']:.3f}", h["longest_leak"], f"{h['false_per_frame']:.3f}", f"{h['fps'] / d:.2f}x",
                     f"{s['fps'] / d:.2f}x", f"{h['fps'] / s['fps']:.2f}x"])
        if h["fps"] < 2 * d:
            under.append(f"{c} ({h['fps'] / d:.2f}x)")
    cost = statistics.median(by[(c, heads)]["fps"] / by[(c, shipped)]["fps"] for c in clips)
    return [*_table(["clip", "masked (heads)", "longest leak (heads)", "false/frame (heads)", "heads vs deface",
                     "shipped vs deface", "heads vs shipped"], rows), "",
            f"Heads against the shipped graph's frame rate, median: {cost:.2f}x. Under 2x deface's with heads: "
            f"{', '.join(under) or 'none'}."]


def second_look(s: dict[str, Any]) -> Rows:
    part = {x["clip"]: x for x in s["rows"]}

    def row(label: str, d: dict[str, Any]) -> list[Any]:
        if not d["n"]:
            return [label, 0, "", "", "", "", ""]
        return [label, d["n"], f"{d['p1']:.2f}", f"{d['p10']:.2f}", f"{d['p50']:.2f}", f"{d['sure']:.1%}",
                f"{d['rejected']:.1%}"]
    return [f"Candidates from {s['candidates']} up to {s['sure']}; made sure: CenterFace's look >= {s['look']} or "
            f"BlazeFace's >= 0.7; rejected: CenterFace's under {s['not_face']} and BlazeFace's under "
            f"{s['not_face_b']}.", "",
            *_table(["detections", "n", "closer look p1", "p10", "p50", "made sure", "rejected"],
                    [row("faces, every clip", s["all"]["faces"]), row("not faces, every clip", s["all"]["not_faces"]),
                     row("faces behind surgical masks", part["table_masked"]["faces"]),
                     row("not faces, empty street compressed", part["street_empty_h264_low"]["not_faces"])])]


# section 13


def soak_streams() -> Rows:
    out, rows = [], []
    for doc, path in _results("soak_streams", ("2cores", "h200")):
        r = doc["figures"]
        pss, last, fds = r["pss_mb"], r["pss_mb_last_half"], r["fds_last_half"]
        out.append(f"- {path.stem}: {_source(doc, path)}")
        rows.append([path.stem, f"{r['streams']} / {r['processes']} + owner", r["device"], r["minutes"], r["fps"],
                     f"{r['frames']['out']} / {r['frames']['failed']}", f"{pss['start']} -> {pss['end']}",
                     f"{pss['per_hour']} MB/h ({100 * pss['share_per_hour']:.2f}%/h) / {last['per_hour']} MB/h "
                     f"({100 * last['share_per_hour']:.2f}%/h)", f"{r['fds']['start']:.0f} -> {r['fds']['end']:.0f}",
                     f"{fds['per_hour']}/h"])
        parts = _parts_grown(r)
        if parts:
            out[-1] += f" PSS by part, change after the warm-up (MB): {parts}."
        g = r.get("before")
        if g:  # the same soak before a change, kept beside it
            out[-1] += (f" {g['about']}: {g['fps']} fps, PSS "
                        f"{g['pss_mb']['start']} -> {g['pss_mb']['end']} MB, "
                        f"{100 * g['pss_mb']['share_per_hour']:.2f}%/h whole, "
                        f"{100 * g['pss_mb_last_half']['share_per_hour']:.2f}%/h last half; by part: "
                        f"{_parts_grown(g)}.")
        grew = r.get("fds_changed_after_warmup")
        if grew:
            out[-1] += " Fds that grew after the warm-up: " + "; ".join(
                f"pid {pid}{' (device owner)' if str(pid) == str(r.get('device_owner_pid')) else ''}: "
                + ", ".join(f"{k} +{v}" for k, v in kinds.items()) for pid, kinds in grew.items()) + "."
    return [*out, "", *_table(["run", "streams / processes", "device", "minutes", "fps", "frames out / failed",
                               "PSS MB after warm-up -> end", "PSS slope, whole / last half", "open fds -> end",
                               "fds slope, last half"], rows)]


def _parts_grown(r: dict[str, Any]) -> str:
    """The device owner's PSS change after the warm-up by part (heap, anon, frames ...) and the shards' summed."""
    owner: dict[str, float] = {}
    shards: dict[str, float] = {}
    for pid, v in r["per_process"].items():
        into = owner if str(pid) == str(r.get("device_owner_pid")) else shards
        for part, x in (v.get("pss_parts_mb") or {}).items():
            into[part] = into.get(part, 0.0) + x["change"]

    def said(d: dict[str, float]) -> str:
        return ", ".join(f"{k} {v:+.1f}" for k, v in sorted(d.items()) if abs(v) >= 0.5) or "none over 0.5"

    return f"device owner {said(owner)}; the other processes {said(shards)}" if owner or shards else ""


def soak_chaos(r: dict[str, Any]) -> Rows:
    c, fr = r["chaos"], r["frames"]
    owner = r.get("device_owner") or {}
    return [*_table(["frames in / out / failed", "accounted", "records / twice / against out",
                     "recordings / unplayable", "faults: seconds until the rate is back to 80%"],
                    [[f"{fr['in']} / {fr['out']} / {fr['failed']}", c["accounted"],
                      f"{c['records']} / {c['records_twice']} / {c['records_vs_out']:+d}",
                      f"{c['recordings']} / {len(c['unplayable'])}",
                      ", ".join(f"{x.get('killed') or x.get('away')} {x['recovery_s']}" for x in c["faults"])]]),
            "", f"Device owner starts (s): {owner.get('starts_s')}; a standby took over: {owner.get('took_over')}. "
            f"PSS {r['pss_mb']['start']} -> {r['pss_mb']['end']} MB, last half {r['pss_mb_last_half']['per_hour']} "
            f"MB/h; open fds, last half {r['fds_last_half']['per_hour']}/h."]


def soak(r: dict[str, Any]) -> Rows:
    xs = r["samples"]
    rss = [x["rss_mb"] for x in xs]
    fds = sorted({x["open_fds"] for x in xs})
    return [f"{round(xs[-1]['t_s'] / 60, 1)} minutes, {xs[-1]['cycle']} graph rebuilds, frames out / failed "
            f"{sum(x['frames']['out'] for x in xs)} / {sum(x['frames']['failed'] for x in xs)}; RSS {rss[0]} MB at "
            f"first, {min(rss)}–{max(rss)}, {rss[-1]} at the end; open fds {', '.join(map(str, fds))}."]


def interrupts(r: dict[str, Any]) -> Rows:
    rows = []
    for way in dict.fromkeys(x["way"] for x in r["runs"]):
        xs = [x for x in r["runs"] if x["way"] == way]
        rows.append([way, len(xs), sum(x["rc"] in (0, 130) and not x["traceback"] and not x["crash"] for x in xs),
                     sum(x["twice"] for x in xs), sum(x["traceback"] or x["crash"] for x in xs),
                     sum(x["plays"] is False for x in xs), max(x["ended_s"] for x in xs)])
    return _table(["way of running", "interrupts", "ended in 130 or 0, no traceback", "with a second Ctrl-C",
                   "traceback or crash", "recordings that do not play", "longest end after the last Ctrl-C (s)"], rows)


# section 14


def sixteen_cameras(r: dict[str, Any]) -> Rows:
    rows = []
    for x in r["rows"]:
        if x.get("error"):
            rows.append([x["config"], x["device"], "failed: " + " ".join(x["error"])[:80], "", "", "", "", "", "", ""])
            continue
        runs = x.get("detector_runs") or {}
        rows.append([x["config"], x["device"], x["fps"], x["slowest_stream_fps"], x["cpu_ms_per_frame"],
                     x.get("cpu_vs_one_stream", "-"), x["cores_busy"], f"{x['bytes_copied_per_frame']:.0f}",
                     x["kbit_s_per_stream_at_25fps"],
                     f"{runs.get('skipped', 0) / max(1, sum(runs.values())):.0%}" if runs else "-"])
    return [f"{r['streams']} streams of the 1366x768 sample, {r['frames_per_stream']} frames each after the "
            "warm-up.", "",
            *_table(["configuration", "device", "fps, all streams", "slowest stream", "CPU ms / frame",
                     "vs one stream", "cores busy", "bytes copied / frame", "kbit/s per stream",
                     "detector passed over"], rows),
            "", "![16 cameras](benchmarks/plots/sixteen_cameras.png)"]


# section 15: counting


def _crossings(rows: list[dict[str, Any]]) -> Rows:
    """A line per clip where a crossing was missed, false or counted twice; the clips counted right, named."""
    right = [x["clip"] for x in rows if x["found"] == x["true"] and not x["false"] and not x["twice"]]
    rows = [x for x in rows if x["clip"] not in right]
    table = _table(["part", "clip", "true", "found once", "missed", "false", "twice", "same in every run",
                    "FPS with / without analytics", "analytics' CPU over the frame time"],
                   [[x.get("part", "seen"), x["clip"], x["true"], x["found"], len(x["missed"]), x["false"], x["twice"],
                     "yes" if x["same_in_every_run"] else "no", f"{x['fps_with']} / {x['fps_without']}",
                     f"{100 * x['analytics_cpu_share']:.1f}%" if "analytics_cpu_share" in x else "-"] for x in rows])
    return ([f"Every crossing counted once, none false: {', '.join(right)}.", ""] if right else []) + table


def _crossing_targets(groups: dict[str, dict[str, Any]]) -> Rows:
    rows = []
    for name, sm in groups.items():
        share = sm.get("analytics_cpu_share_max", sm["analytics_busy_share_max"])
        rows.append([name, sm["clips"], f"{sm['found']} of {sm['true']}, {sm['false']} false, {sm['twice']} twice",
                     _target(sm["every_true_crossing_once"]), _target(sm["no_false_crossing"]),
                     f"{100 * share:.1f}% ({_target(share < 0.05)})"])
    return _table(["clips", "n", "found", "every true crossing once", "no false crossing",
                   "analytics' CPU, most (under 5%)"], rows)


LATER = {"count_first": "held out since the count rule",
         "eighth_look": "held out since the eighth look (a fixed camera)",
         "fifth_plaza_look": "held out since the fixed camera's fifth look (a concourse)"}


def counting(r: dict[str, Any]) -> Rows:
    from analytics_eval import _summary

    from flowpipe_eval.crossings import truth

    t = truth()
    groups = {k.replace("_", "-"): v for k, v in r["summary"].items()}
    for after, name in LATER.items():
        got = [x for x in r["rows"] if t.get(x["clip"], {}).get("after") == after]
        if got:
            groups[name] = _summary(got)
    return [*_crossings(r["rows"]), "", *_crossing_targets(groups)]


def counting_vehicles(r: dict[str, Any]) -> Rows:
    return [*_crossings(r["rows"]), "", *_crossing_targets({k.replace("_", "-"): v for k, v in r["summary"].items()})]


def count_back(r: dict[str, Any]) -> Rows:
    keys = list(r["totals"])
    return _table(["count", *(k if k == "first" else f"every, back {k}" for k in keys)],
                  [[what, *(r["totals"][k][what] for k in keys)] for what in ("found", "false", "twice")]
                  + [["true", *(r["totals"][k]["true"] for k in keys)]])


def count_same(r: dict[str, Any]) -> Rows:
    tot = r["totals"]
    withins = sorted({k.split(":")[1] for k in tot if ":" in k}, key=float)
    sames = sorted({k.split(":")[0] for k in tot if ":" in k}, key=float, reverse=True)

    def cell(x: dict[str, Any]) -> str:
        return f"{x['found']} / {x['false']} / {x['twice']} ({x['errors']})"
    return [f"Found / false / twice (errors) of {tot['none']['true']} true crossings; without `same`: "
            f"{cell(tot['none'])}.", "",
            *_table(["same", *(f"within {w} s" for w in withins)],
                    [[s, *(cell(tot[f"{s}:{w}"]) for w in withins)] for s in sames])]


def appearance_gate(r: dict[str, Any]) -> Rows:
    pct = ["p50", "p90", "p95", "p99", "p100"]
    return [f"Distance to a track's look at {' / '.join(pct)}: its own track's detections "
            f"{' / '.join(str(r['same_pcts'][p]) for p in pct)}; other tracks' in the frame "
            f"{' / '.join(str(r['other_pcts'][p]) for p in pct)}. Largest same-track distance {r['largest_same']}; the "
            f"gate {r['gate']}. A detection's colours cost "
            + ", ".join(f"{x['clip']} {x['us_per_detection']} µs" for x in r["rows"]) + "."]


def zone_eval(z: dict[str, Any]) -> Rows:
    sm = z["summary"]
    return [*_table(["clip", "sampled frames", "exact", "off (people a frame)", "bias", "people by eye (least-most)",
                     "counted"],
                    [[x["clip"], x["frames"], f"{x['exact']} ({x['exact_share']:.0%})", f"{x['off']:.2f}",
                      f"{x['bias']:+.2f}", f"{x['people'][0]}-{x['people'][1]}", x["reported"]] for x in z["rows"]]),
            "", f"Over the {sm['frames']} sampled frames: {sm['exact']} exact "
            f"({sm['exact'] / max(sm['frames'], 1):.0%}), off by {sm['off']:.2f} people a frame, bias "
            f"{sm['bias']:+.2f}."]


def ssd_devices(r: dict[str, Any]) -> Rows:
    runs = r["runs"]
    cmp = [(label, r[key]) for label, key in (("whole picture", "gpu_vs_cpu"), ("tiles", "gpu_tiles_vs_cpu_tiles"))]
    return ["Detector fps: " + ", ".join(f"{k} {x['detector_fps']} ({x['device']}, {x['frames']['out']} of "
                                         f"{x['frames']['in']} frames)" for k, x in runs.items()) + ".", "",
            *_table(["GPU against CPU", "detections (GPU, CPU)", "matched (IoU 0.5, same label)",
                     "box difference px, median / p99", "best unmatched score (GPU, CPU)"],
                    [[label, ", ".join(map(str, c["detections"])), c["matched_iou_0.5_same_label"],
                      f"{c['matched_box_px_diff']['median']} / {c['matched_box_px_diff']['p99']}",
                      ", ".join(map(str, c["unmatched_best_score"]))] for label, c in cmp])]


# section 16


def determinism(r: dict[str, Any]) -> Rows:
    runs = list(dict.fromkeys(x["run"] for x in r["rows"] if x["run"] != "alone"))
    by = {(x["clip"], x["run"]): x for x in r["rows"]}
    clips = list(dict.fromkeys(x["clip"] for x in r["rows"]))

    def cell(x: dict[str, Any] | None) -> str:
        if x is None:
            return "-"
        return str(x["frames_differing"]) + (f" ({x['max_box_px']:g} px)" if x["frames_differing"] else "")
    cost = r.get("seconds_now_over_before") or {}
    rows = []
    for c in clips:
        alone = by[(c, "alone")]
        rows.append([c, alone["frames"], *(cell(by.get((c, k))) for k in runs), f"{alone['masked']:.1%}",
                     alone["false_per_frame"], alone["longest_leak"],
                     f"{cost[c]['alone']} / {cost[c]['loaded']}" if c in cost else "-"])
    return [f"Frames whose records differ from the first run alone (the largest box difference); `before`: "
            f"{r['against']}.", "",
            *_table(["clip", "frames", *runs, "masked", "false a frame", "longest leak",
                     "seconds now / before, alone / loaded"], rows)]


def determinism_gpu(g: dict[str, Any]) -> Rows:
    alone = [x for x in g["runs"] if "fps" not in x]
    rows = [[x["code"], x["what"], x["fps"], x.get("slowest", ""), x.get("cpu_ms_per_frame", ""),
             f"{x['streams_identical']} of {x['streams']}" if "streams" in x else "",
             x.get("frames_differing_max", ""), x.get("max_box_px", "")] for x in g["runs"] if "fps" in x]
    twice = "; ".join(f"{x['code']}, {x['what']}: {x['frames_differing']} of {x['frames']} frames differing"
                      for x in alone)
    out = [f"Clip: {g['clip']}; {g['device']}. {twice}.", "",
           *_table(["code", "run", "fps", "slowest stream", "CPU ms a frame", "streams equal to the run alone",
                    "frames differing (most in a stream)", "largest box difference (px)"], rows)]
    gc = g.get("gpu_against_cpu")
    if gc:
        out += ["", f"GPU against CPU, the clip alone: the same tracks on {gc['frames_with_the_same_tracks']} of "
                f"{gc['frames']} frames; boxes {gc['box_px_median']:.1f} px apart (median), {gc['box_px_p95']:.1f} "
                f"(95th percentile), {gc['box_px_max']:.1f} at most; scores {gc['score_max']:.4f} at most."]
    return out


def offline_cost(o: dict[str, Any]) -> Rows:
    return [f"Clip: {o['clip']}.", "",
            *_table(["run", "seconds", "peak RSS MB", "spilled MB", "boxes tracked back"],
                    [[k, v["seconds"], v["peak_rss_mb"], v.get("spilled_mb", 0), v.get("tracked_back", 0)]
                     for k, v in o["runs"].items()]), "",
            f"Offline over streaming: {o['offline_over_streaming_seconds']}x the seconds. A 10-minute 1080p file at "
            f"30 fps: {o['ten_minutes']}."]


def density() -> Rows:
    """Streams held per configuration, each machine's result (the GPU machine's first), every step."""
    out, rows = [], []
    for doc, path in _results("density", ("h200", "2cores")):
        r = doc["figures"]
        out.append(f"- {path.stem}: {_source(doc, path)}")
        for c in r["configs"]:
            held = c.get("held_run") or {}
            steps = " · ".join(f"{x['streams']}: {x['slowest']}{'' if x['held'] else ' no'}" for x in c["steps"])
            rows.append([path.stem.removeprefix("density_"), c["name"], ", ".join(c["sets"]) or "defaults",
                         held.get("processes", "-"), f"{r['fps']:g}", f"**{c['streams']}**", held.get("fps", "-"),
                         steps])
    return [*out, "", *_table(["machine", "configuration", "set", "processes", "rate", "streams held",
                               "fps, all streams", "steps (streams: slowest stream's fps; no: under the rate)"],
                              rows), "", "![stream density](benchmarks/plots/density.png)"]


def device_ceilings(d: dict[str, Any]) -> Rows:
    """Each configuration's fps against the sum of its devices' own ceilings, and what each device did."""
    rates = "; ".join(f"{t['model']} {'x'.join(map(str, t['shape']))} on {t['device']}: {t['images_per_s']:g}/s"
                      for t in d["throughputs"])
    rows = []
    for c in d["configs"]:
        loads = ", ".join(f"{n['node']} {n['images_per_frame']:.3f}" for n in c["nodes"])
        did = "; ".join(f"{node} {dev}: busy {100 * x['busy_share']:.0f}%, {x['in_flight']:.1f} at once, "
                        f"{x['images']} images" for node, per in c["inference"].items() for dev, x in per.items()
                        if x.get("images"))
        rows.append([c["name"], ", ".join(c["set"]), c["fps"], c["slowest_stream"],
                     " + ".join(f"{k} {v:g}" for k, v in c["ceilings"].items()), f"**{c['of_ceilings']}**", loads,
                     did])
    return [f"{d['streams']} streams over {d['processes']} processes, {d['frames']} frames each after the warm-up. "
            f"Each device alone, {d['seconds']:g} s a model: {rates}.", "",
            *_table(["configuration", "set", "fps", "slowest stream", "ceilings (fps of the graph)",
                     "fps / sum of ceilings", "images a frame", "what each device did"], rows)]


def _one(name: str, render: Callable[[dict[str, Any]], Rows], kind: str | None = None) -> Callable[[], Rows]:
    return lambda: _with(name, render, kind)


TABLES: dict[str, Callable[[], Rows]] = {
    "suite": suite_source, "suite_face_blur": _suite(suite_face_blur), "suite_ceilings": _suite(suite_ceilings),
    "suite_scaling": _suite(suite_scaling), "suite_overhead": _suite(suite_overhead),
    "suite_preprocess": _suite(suite_preprocess),
    "gpu_path": _one("gpu_path", gpu_path), "preprocess": _one("preprocess", _preprocess),
    "scaling": _one("scaling", scaling), "model_cache": _one("model_cache", model_cache),
    "ab": changes, "process_scaling": _one("process_scaling", process_scaling),
    "cluster_sim": _one("cluster_sim", cluster_sim), "cluster_overhead": _one("cluster_overhead", cluster_overhead),
    "cluster_failover": _one("cluster_failover", cluster_failover), "serve_load": _one("serve_load", serve_load),
    "media_path": _one("media_path", media_path), "media_codecs": media_codecs,
    "privacy_shipped": _one("privacy_shipped", privacy_shipped), "privacy": _one("privacy", privacy),
    "privacy_batch": _one("privacy_batch", privacy_batch), "privacy_heads": _one("privacy_heads", privacy_heads),
    "second_look": _one("second_look", second_look),
    "soak_streams": soak_streams, "soak_chaos": _one("soak_chaos", soak_chaos), "soak": _one("soak", soak),
    "interrupts": _one("interrupts", interrupts), "sixteen_cameras": _one("sixteen_cameras", sixteen_cameras),
    "counting": _one("counting", counting), "counting_vehicles": _one("counting_vehicles", counting_vehicles),
    "count_back": _one("count_back", count_back), "count_same": _one("count_same", count_same),
    "appearance_gate": _one("appearance_gate", appearance_gate), "zone_eval": _one("zone_eval", zone_eval),
    "ssd_devices": _one("ssd_devices", ssd_devices), "determinism": _one("determinism", determinism),
    "determinism_gpu": _one("determinism_gpu", determinism_gpu), "offline_cost": _one("offline_cost", offline_cost),
    "density": density, "device_ceilings": _one("device_ceilings", device_ceilings),
}


def render(text: str) -> str:
    """BENCHMARKS.md with every marked table rendered from the results (an unknown table's name is an error)."""
    names = [n for m in BLOCK.finditer(text) for n in m.group(2).split()]
    unknown = sorted(set(names) - set(TABLES))
    if unknown:
        raise SystemExit(f"BENCHMARKS.md marks tables report.py does not render: {', '.join(unknown)}")

    def block(m: re.Match[str]) -> str:
        rows = [row for i, name in enumerate(m.group(2).split()) for row in ([""] if i else []) + TABLES[name]()]
        return m.group(1) + "\n".join(rows) + "\n" + m.group(4)
    return BLOCK.sub(block, text)


# plots


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_suite(plt: Any) -> None:
    got = _result("suite")
    if got is None:
        return
    s = got[0]["figures"]
    fb = s["face_blur"]
    labels = list(fb)
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, impl in enumerate(["sync_loop", "expert_loop", "flowpipe"]):
        m = [fb[v]["fps"][impl]["median"] for v in labels]
        lo = [fb[v]["fps"][impl]["median"] - fb[v]["fps"][impl]["min"] for v in labels]
        hi = [fb[v]["fps"][impl]["max"] - fb[v]["fps"][impl]["median"] for v in labels]
        ax.bar([j + i * 0.27 for j in range(len(labels))], m, 0.27, yerr=[lo, hi], capsize=3, label=impl)
    for v in labels:
        ax.axhline(s["ceilings"][v]["cpu_work_ceiling_fps"], color="gray", ls=":", lw=1)
    ax.set_xticks([j + 0.27 for j in range(len(labels))], labels)
    ax.set_ylabel("frames per second (median, min-max)")
    ax.set_title("face blur, BlazeFace full range, CPU (dotted: CPU-work ceiling)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(PLOTS / "face_blur_fps.png", dpi=110)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(7, 4))
    ns = [int(k) for k in s["scaling"]]
    ax.plot(ns, [s["scaling"][str(n)]["aggregate_fps"] for n in ns], "o-", label="aggregate")
    ax.plot(ns, [s["scaling"][str(n)]["per_stream_min"] for n in ns], "s--", label="slowest stream")
    ax.plot(ns, [s["scaling"][str(n)]["per_stream_max"] for n in ns], "^--", label="fastest stream")
    ax.set_xlabel("streams sharing one inference node")
    ax.set_ylabel("fps")
    ax.legend()
    fig.tight_layout()
    fig.savefig(PLOTS / "stream_scaling.png", dpi=110)
    plt.close(fig)


def plot_processes(plt: Any) -> None:
    got = _result("process_scaling")
    if got is None:
        return
    doc = got[0]
    rows = doc["figures"]["rows"]
    ceiling = next((x["fps"] for x in rows if x["tag"].startswith("ceiling")), None)
    bars = [(x["tag"].replace("GPU_s16_", ""), x["fps"]) for x in rows if x.get("streams") == 16 and x.get("fps")
            and not x.get("error") and x.get("device") == "GPU" and not x["tag"].startswith("ceiling")]
    fig, ax = plt.subplots(figsize=(9, 4))
    ax.bar(range(len(bars)), [v for _, v in bars], color="#4c72b0")
    ax.set_xticks(range(len(bars)), [k for k, _ in bars], rotation=35, ha="right", fontsize=8)
    if ceiling:
        ax.axhline(ceiling, color="#c44e52", linestyle="--", label=f"CPU-work ceiling {ceiling} fps")
        ax.legend()
    ax.set_ylabel("aggregate fps, 16 streams")
    ax.set_title(f"Face blur, 16 streams, GPU inference ({doc['machine'].get('gpu') or doc['machine']['name']})")
    fig.tight_layout()
    fig.savefig(PLOTS / "process_scaling.png", dpi=110)
    plt.close(fig)


def plot_density(plt: Any) -> None:
    got = _result("density", "h200") or _result("density")
    if got is None:
        return
    doc = got[0]
    r = doc["figures"]
    fig, ax = plt.subplots(figsize=(7, 4))
    for c in r["configs"]:
        steps = sorted(c["steps"], key=lambda x: x["streams"])
        ax.plot([x["streams"] for x in steps], [x["slowest"] for x in steps], "o-",
                label=f"{c['name']}: {c['streams']} streams held")
    ax.axhline(r["fps"], color="#c44e52", linestyle="--", label=f"{r['fps']:g} fps")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("streams")
    ax.set_ylabel("slowest stream, fps")
    ax.set_title(f"Stream density, face blur ({doc['machine'].get('gpu') or doc['machine']['name']})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(PLOTS / "density.png", dpi=110)
    plt.close(fig)


def plot_sixteen(plt: Any) -> None:
    got = _result("sixteen_cameras")
    if got is None:
        return
    doc, path = got
    rows = [x for x in doc["figures"]["rows"] if x.get("fps") and x["streams"] > 1]
    fig, ax = plt.subplots(figsize=(9, 4))
    ax.bar(range(len(rows)), [x["fps"] for x in rows], color="#4c72b0")
    ax.set_xticks(range(len(rows)), [x["config"] for x in rows], rotation=30, ha="right", fontsize=8)
    ax.axhline(400, color="#c44e52", linestyle="--", label="16 cameras at 25 fps")
    ax.legend()
    ax.set_ylabel("fps, all streams")
    ax.set_title(f"Face blur, {rows[0]['streams'] if rows else 16} streams ({path.stem})")
    fig.tight_layout()
    fig.savefig(PLOTS / "sixteen_cameras.png", dpi=110)
    plt.close(fig)


def plots() -> None:
    try:
        plt = _pyplot()
    except ImportError:
        print("matplotlib is not installed (pip install -e '.[bench]'): plots left as they are")
        return
    PLOTS.mkdir(exist_ok=True)
    for plot in (plot_suite, plot_processes, plot_sixteen, plot_density):
        plot(plt)


def main(argv: list[str]) -> int:
    if {"-h", "--help"} & set(argv):
        print(__doc__)
        return 0
    path = ROOT / "BENCHMARKS.md"
    text = path.read_text()
    new = render(text)
    if "--check" in argv:
        if new != text:
            print("BENCHMARKS.md's tables are not what benchmarks/results/ renders: python benchmarks/report.py")
            return 1
        return 0
    path.write_text(new)
    plots()
    print(f"wrote {path} and {PLOTS}/*.png")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

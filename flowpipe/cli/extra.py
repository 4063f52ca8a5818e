"""Commands that reach devices, models and benchmarks (kept apart so the core CLI stays small)."""
from __future__ import annotations

import argparse
import importlib
import io
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import exported, models
from .. import quantize as quantizer
from ..accel import devices
from ..accel import openvino as ovx
from ..accel.host import device_report
from ..cluster.controller import cluster_devices
from ..graph import parse_sets
from .args import positive_arg, processes_arg
from .bench import STEADY_BURSTS, bench_graph, density
from .quantize import CHECKED, is_model_path, quantize_path


def cmd_devices(args: argparse.Namespace) -> int:
    if args.cluster:
        hosts = cluster_devices(args.cluster)
        if args.json:
            print(json.dumps(hosts, indent=2))
            return 0
        for h in hosts:
            print(f"== host {h['address']} ({h['host']}): Ray resources " + ", ".join(
                f"{k} {v:g}" for k, v in sorted(h["resources"].items())))
            _print_devices(h["devices"])
        return 0

    report = device_report()
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    _print_devices(report)
    return 0


def _print_devices(report: dict[str, Any]) -> None:
    print("shared memory: " + ", ".join(report["shared_memory"]) + f"  (using {report['shared_memory_default']})")
    for kind in ("dma-heap", "memfd", "win32"):
        if kind not in report["shared_memory"]:
            print(f"  {kind}: not available here")
    print("OpenVINO devices:")
    for d, info in (report["openvino"] or {}).items():
        print(f"  {d}: {info.get('FULL_DEVICE_NAME', info) if isinstance(info, dict) else info}")
    inf = report.get("inference_default", {})
    print(f"inference device for AUTO: {inf.get('device')} ({inf.get('reason')})")
    print("OpenCL: " + ("; ".join(f"{p['platform']}: " + ", ".join(
        d["name"] + ("" if d["usable"] else f" (not usable: {d['why']})") for d in p["devices"])
        for p in report["opencl"]) or "no platform (preprocessing falls back to OpenCV on the CPU)"))
    print("backends (a graph names another backend's device as BACKEND:DEVICE):")
    for name, b in (report.get("backends") or {}).items():
        if "error" in b:
            print(f"  {name}: {b['error']}")
            continue
        print(f"  {name}: " + ("; ".join(f"{d['name']} ({d['kind']}; binds {', '.join(d['memory'])})"
                                         for d in b["devices"]) or "no device"))


def cmd_models(args: argparse.Namespace) -> int:

    if args.action == "list":
        for name, e in models.registry().items():
            cached = models.cached_path(name)
            state = "cached" if cached.exists() else "not fetched"
            if "quantize" in e:
                state = "quantized" if models.metadata_path(name).exists() else "not made"
            if "path" in e.get("source", {}):  # this host's own (flowpipe models add)
                state = "added" if cached.exists() else "gone"
            print(f"{name:20s} {e['input']['shape']!s:18s} {state:12s} {e['description']}")
        return 0
    if not args.name:
        print(f"error: models {args.action} NAME: expected a model name", file=sys.stderr)
        return 2
    if args.action == "quantize":
        return _quantize(args)
    if args.action == "inspect":
        return _inspect(args.name)
    if args.action == "add":
        return _add(args.name)
    try:
        for name in args.name:
            path = models.pull(name)
            print(f"{name}: {path} (sha256 verified)")
    except KeyError as e:
        print(f"error: {e.args[0]}", file=sys.stderr)
        return 2
    return 0


def _add(words: list[str]) -> int:
    """``models add NAME PATH``: a model file (or the folder ultralytics' OpenVINO export writes) in this host's
    registry under NAME, with the input and labels it says it has; graphs name it as a built-in model."""
    if len(words) != 2:
        print("error: models add NAME PATH: expected a name and a model file", file=sys.stderr)
        return 2
    name, ref = words
    path = exported.model_file(ref)
    if not path.is_file():
        print(f"error: {ref}: no such model file (an .onnx, an OpenVINO .xml, or a folder holding one)",
              file=sys.stderr)
        return 2
    info, shape, outs = exported.read_file(path)
    try:
        head = exported.choose_head(outs, info)
        pre = exported.preprocessing(info, shape)
        w, h = pre.size
        spec = {"shape": [1, h, w, 3] if pre.layout == "NHWC" else [1, 3, h, w], "layout": pre.layout,
                "color": pre.color, "mean": pre.mean * (3 if len(pre.mean) == 1 else 1),
                "scale": pre.scale * (3 if len(pre.scale) == 1 else 1), "resize": pre.resize,
                "pad_value": pre.pad_value}
        reg = models.add(name, path, spec, info.labels, f"{path.name}: {head.kind} head, {head.classes} classes "
                         "(flowpipe models add)")
    except ValueError as e:
        print(f"error: {ref}: {e}", file=sys.stderr)
        return 2
    print(f"{name}: {path} ({head.kind}, {head.classes} classes, {w}x{h} {pre.layout} {pre.color} {pre.resize}) "
          f"in {reg}")
    return 0


def _inspect(paths: list[str]) -> int:
    """``models inspect PATH``: inputs, outputs, what the model says about itself, and the preprocessing and
    head flowpipe picks for it, each with why; exit 2 with one line for outputs that fit no head."""
    code = 0
    for ref in paths:
        path = models.resolve(ref) if models.is_registry_name(ref) else exported.model_file(ref)
        if not path.is_file():
            print(f"error: {ref}: no such model file (an .onnx, an OpenVINO .xml, or a folder holding one)",
                  file=sys.stderr)
            return 2
        model = devices().openvino.read_model(path)
        ins = {p.get_any_name(): tuple(p.get_partial_shape().get_min_shape()) for p in model.inputs}
        outs = {p.get_any_name(): tuple(p.get_partial_shape().get_min_shape()) for p in model.outputs}
        info = exported.read(model, path)
        print(f"{ref}:")
        for what, ports in (("input", model.inputs), ("output", model.outputs)):
            for p in ports:
                print(f"  {what} {p.get_any_name()}: {p.get_partial_shape()} {p.get_element_type().get_type_name()}")
        print(f"  says: {json.dumps(info.as_dict())}")
        pre = exported.preprocessing(info, next(iter(ins.values())))
        print(f"  preprocessing: {pre.size[0]}x{pre.size[1]} {pre.layout}, {pre.resize} (pad {pre.pad_value}), "
              f"{pre.color}, mean {pre.mean}, scale {pre.scale}")
        for k, v in pre.why.items():
            print(f"    {k}: {v}")
        try:
            head = exported.choose_head(outs, info)
        except ValueError as e:
            print(f"error: {ref}: {e}", file=sys.stderr)
            code = 2
            continue
        extra = f", {head.extra} ({head.extra_count})" if head.extra != "none" else ""
        print(f"  head: {head.kind} over {', '.join(head.outputs)}, {head.classes} classes{extra}: {head.why}")
        if head.kind in ("anchor_free", "objectness", "yolox"):
            iou, whose = info.suppression
            print(f"  suppression: IoU {iou} ({whose}; detect_decode's iou_threshold overrides it)")
    return code


def _quantize(args: argparse.Namespace) -> int:
    """``models quantize NAME``: a quantized entry, or the source model all entries quantized from it name;
    calibrated on ``--calib`` footage, else on the evaluation clips the recipe names (a checkout's
    ``flowpipe_eval``). ``models quantize PATH``: a model of the user's own (``quantize.quantize_path``)."""
    if not models.is_registry_name(args.name[0]) and is_model_path(args.name[0]):
        return quantize_path(args)
    own = models.registry().get(args.name[0]) if args.name[0] not in models.builtin_registry() else None
    if own is not None and len(args.name) == 1 and (own.get("source") or {}).get("path"):
        args.name = [own["source"]["path"]]  # a model this host added (models add): quantized as the file it is
        return quantize_path(args)
    names: list[str] = []
    for name in args.name:
        if not models.is_registry_name(name):
            print(f"error: unknown model '{name}': expected a registry name, or a model file of your own (an .onnx, "
                  "an OpenVINO .xml, or a folder holding one)", file=sys.stderr)
            return 2
        made = [name] if "quantize" in models.entry(name) else models.quantized_names(name)
        if not made:
            print(f"error: no quantized model is made from '{name}' (registry entries with 'quantize')",
                  file=sys.stderr)
            return 2
        names += made
    recipe = json.loads(args.recipe) if args.recipe else None
    if args.calib:
        recipe = {**(recipe or models.entry(names[0])["quantize"]), "calib": str(Path(args.calib).resolve())}
        recipe.pop("clips", None)
    for name in names:
        if not args.force and models.quantized_current(name, recipe):
            print(f"{name}: {models.cached_path(name)} (current: made from today's source by today's settings)")
            continue
        try:
            meta = _make_quantized(name, recipe, args.calib)
        except (ValueError, FileNotFoundError, ModuleNotFoundError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        print(f"{name}: {models.cached_path(name)} (INT8 by NNCF {meta['nncf']}, preset {meta['recipe']['preset']}, "
              f"{meta['calibration_inputs']} calibration inputs {meta['calibration_shape']} from "
              f"{meta.get('calibration_footage') or ', '.join(meta['calibration_clips'])}"
              + (f"; held out: {', '.join(meta['held_out_clips'])}" if meta.get("held_out_clips") else "")
              + f"; {meta['seconds']} s)")
    return 0


def _make_quantized(name: str, recipe: dict[str, Any] | None, calib: str | None) -> dict[str, Any]:
    if calib:
        settings = models.quantize_settings(name, recipe)
        count = int(settings["recipe"].get("subset_size", 300))
        inputs = quantizer.footage_inputs(name, settings["recipe"], Path(calib), count)
        return quantizer.quantize(name, settings, inputs, {"calibration_footage": str(Path(calib).resolve())})
    try:
        evaluation = importlib.import_module("flowpipe_eval.quantize")  # above the product: by name, as a plugin
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            f"model '{name}' is calibrated on the evaluation clips, which a checkout of flowpipe installs "
            "(pip install -e ./eval); or calibrate it on your own footage: --calib VIDEO|DIR") from None
    return evaluation.quantize(name, recipe)  # type: ignore[no-any-return]


def cmd_compile(args: argparse.Namespace) -> int:

    owner = devices().openvino
    props = parse_sets(args.set)
    device = owner.choose(args.device).device
    path = models.resolve(args.model)
    config = owner.build_config(device, hint=args.hint, properties=props)
    part = models.part_of(args.model)
    model = owner.read_model(path, part)
    shape = [int(x) for x in args.shape.split(",")] if args.shape else None
    if shape is None and part:  # a cut model's batch is free: a blob is of one shape, the registry's
        shape = list(models.entry(args.model)["input"]["shape"])
    if shape:
        model.reshape({model.inputs[0].get_any_name(): shape})
    if part:  # as the inference node folds a cut model: its anchors become constants
        ovx.fold(model)
    comp = owner.compile(model, device, config)
    header = owner.blob_key(device, ovx.model_hash(path), config)
    header["model"] = str(args.model)
    header["whole_outputs"] = sorted(ovx.batch_free_outputs(model))  # an importer gives these to every frame
    buf = io.BytesIO()
    comp.model.export_model(buf)
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)  # as run makes its outputs' folders
    ovx.write_blob(args.output, header, buf.getvalue())
    print(f"wrote {args.output}: {device}, compiled in {comp.compile_ms:.0f} ms, "
          f"{Path(args.output).stat().st_size} bytes")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    if args.density:
        return _bench_density(args)
    report = bench_graph(args.graph, sets=args.set, frames=args.frames, warmup=args.warmup, streams=args.streams,
                         processes=args.processes, device_owner=not args.no_device_owner)
    _write_report(report, args.json)
    if args.json != "-":
        print(bench_summary(report))
    if report.get("fps") is not None and report.get("bursts", STEADY_BURSTS) < STEADY_BURSTS:
        print(f"warning: frames ended at {report['bursts']} times after the warm-up (a writer passes them on a "
              "second of video at a time): fps is too coarse to read; run more --frames", file=sys.stderr)
    return 0 if report["exit"] == 0 else 1


def _bench_density(args: argparse.Namespace) -> int:
    """--density: bench runs at more and more streams; the report of the most that held, with every step."""
    def run(n: int) -> dict[str, Any]:
        return bench_graph(args.graph, sets=args.set, frames=args.frames, warmup=args.warmup, streams=n,
                           processes=args.processes, device_owner=not args.no_device_owner)

    def step_done(s: dict[str, Any]) -> None:  # a search of many steps says where it is as it goes
        print(f"density: {s['streams']} stream(s), {s['processes']} process(es): fps {_num(s['fps'])}, slowest "
              f"{_num(s['slowest'])}: {'held' if s['held'] else 'fell'} (>= {args.fps:g})", file=sys.stderr)

    result, report = density(run, args.fps, start=args.streams, cap=args.max_streams, step_done=step_done)
    report = dict(report or {"graph": str(args.graph), "streams": 0}, density=result)
    _write_report(report, args.json)
    if args.json != "-":
        if result["streams"]:
            print(bench_summary(report))
        print(density_line(result))
    return 0 if all("error" not in s for s in result["steps"]) else 1


def _write_report(report: dict[str, Any], where: str | None) -> None:
    """``--json``: the whole report to stdout (``-``) or a file."""
    text = json.dumps(report, indent=2)
    if where == "-":
        print(text)
    elif where:
        Path(where).write_text(text)


def density_line(d: dict[str, Any]) -> str:
    """density: 6 streams held >= 25 fps (steps: 1 ok 2 ok 4 ok 8 no 6 ok 7 no)"""
    steps = " ".join(f"{s['streams']} {'ok' if s['held'] else 'no'}" for s in d["steps"])
    n = d["streams"]
    what = f"{n} stream{'s' if n != 1 else ''} held" if n else "no stream held"
    cap = f", the most tried (--max-streams {d['max_streams']})" if n == d["max_streams"] else ""
    return f"density: {what} >= {d['fps']:g} fps{cap} (steps: {steps})"


def _num(v: Any, fmt: str = ".1f") -> str:
    return "-" if v is None else format(v, fmt)


def bench_summary(r: dict[str, Any]) -> str:
    """A bench report in a few lines: the rate, the slowest stream, the CPU a frame costs, what was copied."""
    def num(v: Any, fmt: str = ".1f") -> str:
        return "-" if v is None else format(v, fmt)

    per = {k: v for k, v in (r.get("per_stream_fps_together") or r.get("per_stream_fps") or {}).items()
           if v is not None}
    slow = min(per.items(), key=lambda kv: kv[1]) if per else None
    f = r.get("frames") or {}
    lines = [f"{r['graph']}: {r['streams']} stream(s), {r['processes']} process(es)"
             + (" + device owner" if r.get("device_owner") else ""),
             f"  fps (all streams)     {num(r.get('fps'))}",
             f"  slowest stream        {f'{slow[0]} {slow[1]:.1f} fps' if slow else '-'}",
             f"  CPU per frame         {num(r.get('cpu_ms_per_frame'), '.2f')} ms "
             f"({num(r.get('cpu_util_cores'), '.2f')} cores busy)",
             f"  copied per frame      {num(r.get('bytes_copied_per_frame'), ',.0f')} bytes "
             f"({num(r.get('copies_per_frame'), '.2f')} copies)",
             f"  peak memory           {num(r.get('peak_pss_mb') or r.get('peak_rss_mb'))} MB",
             f"  frames                in {f.get('in', '-')}, out {f.get('out', '-')}, "
             f"dropped {f.get('dropped', '-')}, failed {f.get('failed', '-')}"]
    for name, sec in (r.get("inference") or {}).items():
        node = name.removeprefix("inference.")
        parts = sec.get("devices") or {sec.get("device", "?"): sec}  # several devices together: each its own
        for dev, d in parts.items():
            lines.append(f"  {node:<21} {sec.get('backend', 'openvino')}:{dev} busy "
                         + (f"{100 * d['busy_share']:.0f}% of the run" if d.get("busy_share") is not None else "-")
                         + (f" ({d['in_flight']:.1f} requests at once)" if d.get("in_flight") else "")
                         + (f", {d['frames']} frames ({100 * d['share']:.0f}%)" if "share" in d else ""))
        listed = str(sec.get("device", "")).split("+")
        matching = speed_shares(sec.get("devices") or {}) if len(set(listed)) == len(listed) else None
        if matching and matching != (sec.get("split") or {}).get("shares"):  # (a device listed twice: split
            # cannot tell its two apart)
            said = ", ".join(f"{k}: {v}" for k, v in matching.items())
            lines.append(f"  {node:<21} shares that match these devices' speeds in this run: split: {{{said}}}")
    if r.get("error"):
        lines.insert(0, f"error: {r['error']}")
    return "\n".join(lines) + "\n  (every figure: --json PATH, or --json - for stdout)"


def speed_shares(per_device: dict[str, dict[str, Any]]) -> dict[str, int] | None:
    """Whole-number shares of the frames in proportion to each device's speed in a run (its frames over the
    time it was busy), the smallest within a tenth of it; None unless every device of several ran frames."""
    speed = {k: d["frames"] / d["busy_s"] for k, d in per_device.items() if d.get("frames") and d.get("busy_s")}
    if len(speed) < 2 or len(speed) != len(per_device):
        return None
    low = min(speed.values())
    ratio = {k: v / low for k, v in speed.items()}
    for scale in range(1, 9):
        shares = {k: max(1, round(r * scale)) for k, r in ratio.items()}
        if all(abs(shares[k] / scale - r) <= 0.1 * r for k, r in ratio.items()):
            break
    g = math.gcd(*shares.values())
    return {k: v // g for k, v in shares.items()}


def add_commands(sub: Any, with_set: Callable[..., None]) -> None:

    d = sub.add_parser("devices", help="shared-memory kinds, OpenVINO devices and OpenCL platforms here")
    d.add_argument("--json", action="store_true")
    d.add_argument("--cluster", metavar="auto|ray://HOST:PORT", help="every host of a Ray cluster, as flowpipe sees it")
    d.set_defaults(func=cmd_devices)

    m = sub.add_parser("models", help="list or fetch registry models (sha256-verified), quantize one (or a model "
                       "file of your own) to INT8, inspect a model (what it says about itself and how flowpipe reads "
                       "it), or add NAME PATH to this host's registry",
                       description="quantize PATH --calib VIDEO|DIR: a detector of your own (an .onnx, an OpenVINO "
                       ".xml, or the folder ultralytics' OpenVINO export writes) to INT8 with NNCF, calibrated on "
                       "your footage through the preprocessing its metadata says (as graphs/detect.yaml runs it); "
                       "its metadata goes with it. Every Nth picture of the footage (--hold-out, the 5th, 10th, "
                       "...) is held out: never calibrated on, the INT8 model's detections are compared with the "
                       f"FP32 model's on them (at most {CHECKED}, spread evenly; boxes of the same label at IoU 0.5 "
                       "or more). Calibration takes --frames pictures spread evenly over the others.")
    m.add_argument("action", choices=["list", "pull", "quantize", "inspect", "add"])
    m.add_argument("name", nargs="*")
    m.add_argument("--calib", metavar="VIDEO|DIR", help="quantize: calibrate on this video or folder of images "
                   "(frames spread evenly over it), not on the evaluation clips")
    m.add_argument("--force", action="store_true", help="quantize NAME: make it again even where the cached one is "
                   "current")
    m.add_argument("--recipe", metavar="JSON", help="quantize NAME: these settings instead of the registry's "
                   "(the registry's 'quantize' keys: from, calibrate, clips, frames_per_clip, size, subset_size, "
                   "preset)")
    m.add_argument("-o", "--output", metavar="PATH", help="quantize PATH: the INT8 IR's .xml, or a folder for it "
                   "(default: beside the model: NAME_int8.xml, or NAME_int8_openvino_model/ for an export folder)")
    m.add_argument("--frames", type=positive_arg, default=100, metavar="N",
                   help="quantize PATH: calibration pictures, spread evenly over those not held out (default: 100)")
    m.add_argument("--hold-out", type=positive_arg, default=quantizer.HOLD_OUT, metavar="N",
                   help="quantize PATH: every Nth picture of the footage is held out of calibration and the models "
                   f"are compared on it (default: {quantizer.HOLD_OUT})")
    m.add_argument("--score", type=float, default=0.25, help="quantize PATH: the score from which detections are "
                   "compared (default: 0.25, detect_decode's)")
    m.add_argument("--json", action="store_true", help="quantize PATH: what was made and the agreement, as JSON")
    m.set_defaults(func=cmd_models)

    c = sub.add_parser("compile", help="compile a model for a device and export a blob")
    c.add_argument("model", help="registry name or model path")
    c.add_argument("--device", default="AUTO", help="NPU, GPU, CPU or AUTO (the first present) (default: AUTO)")
    c.add_argument("--hint", choices=["LATENCY", "THROUGHPUT"], default=None, help="OpenVINO's performance hint")
    c.add_argument("--shape", help="static input shape, e.g. 1,3,640,640")
    c.add_argument("-o", "--output", required=True, help="the blob's path (an inference node's 'blob')")
    with_set(c, "an OpenVINO property of the compile, e.g. NPU_COMPILER_TYPE=DRIVER")
    c.set_defaults(func=cmd_compile)

    b = sub.add_parser("bench", help="run a graph with warm-up and report FPS, latency, CPU, memory, copies")
    b.add_argument("graph", help="the graph's YAML file")
    b.add_argument("--frames", type=int, default=300, help="frames timed per stream, after the warm-up (default: 300)")
    b.add_argument("--warmup", type=int, default=30, help="frames per stream left out of the figures (default: 30)")
    b.add_argument("--streams", type=int, default=1, help="copies of the graph's sources run at once (default: 1; "
                   "with --density, the first count tried)")
    b.add_argument("--processes", type=processes_arg, metavar="N|auto",
                   help="shard the streams over N worker processes (default: the graph's 'processes', 1)")
    b.add_argument("--no-device-owner", action="store_true",
                   help="over several processes, every shard opens its own inference (default: one device owner)")
    b.add_argument("--json", metavar="PATH", help="write every figure as JSON to PATH ('-': to stdout, instead of "
                   "the summary)")
    b.add_argument("--density", action="store_true",
                   help="stream density: the most streams whose slowest stream holds --fps. From --streams, the "
                   "streams double while the slowest holds, then the gap between the last count that held and the "
                   "first that fell is halved until they are one apart; every step is a whole bench run of --frames "
                   "frames a stream. A stream's rate is its frames a second while every stream ran, after each "
                   "one's warm-up (frames leaving the graph: the summary's 'slowest stream'). File sources decode as "
                   "fast as the graph takes their frames, so the rate is the pipeline's, not the file's (a source "
                   "paced by realtime or max_fps caps it)")
    b.add_argument("--fps", type=float, default=25.0, help="--density: the rate every stream must hold (default: 25)")
    b.add_argument("--max-streams", type=positive_arg, default=64, metavar="N",
                   help="--density: the most streams tried (default: 64)")
    with_set(b)
    b.set_defaults(func=cmd_bench)

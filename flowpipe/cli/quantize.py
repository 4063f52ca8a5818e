"""``flowpipe models quantize PATH``: a detector of the user's own (an .onnx, an OpenVINO .xml, or the folder
ultralytics' OpenVINO export writes) to INT8 with NNCF, and how far the INT8 model's detections agree with the
FP32 model's.

Both steps run the graphs' own nodes, as ``graphs/detect.yaml`` runs the model: calibration inputs are the
``preprocess`` node's tensors (``from_model``: the size, resize, colour order and scale the model's metadata
says) of pictures of the user's footage; the comparison runs both models by ``inference`` nodes and decodes
both by ``detect_decode`` (the head flowpipe picks from the outputs and the metadata), on pictures of the same
footage that calibration never saw: every ``--hold-out``-th one.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from .. import exported
from .. import quantize as quantizer
from ..frame import Detection
from ..graph import load_graph
from ..runtime import run

#: Held-out pictures compared at most (spread evenly over them): enough to judge, quick on 2 cores.
CHECKED = 50


def is_model_path(ref: str) -> bool:
    """Whether ``ref`` names a model file here (or a folder holding one), not a registry name."""
    return exported.model_file(ref).is_file()


def int8_path(source: Path, ref: str, output: str | None) -> Path:
    """Where the INT8 IR of ``source`` (named ``ref`` by the user) goes: ``output`` (a .xml, or a folder the .xml
    goes in under the source's name), else beside the source: ``NAME_int8.xml`` for a file,
    ``NAME_int8_openvino_model/`` for an export folder (ultralytics' own name for its INT8 export)."""
    if output:
        out = Path(output).expanduser()
        if out.suffix == ".xml":
            return out
        if out.exists() and not out.is_dir():
            raise ValueError(f"-o {output}: a file that is no .xml; expected an IR's .xml or a folder")
        return out / f"{source.stem}.xml"
    folder = Path(ref).expanduser()
    if folder.is_dir():
        name = folder.name.removesuffix("_openvino_model")
        return folder.with_name(f"{name}_int8_openvino_model") / f"{source.stem}.xml"
    return source.with_name(f"{source.stem}_int8.xml")


def _run_graph(nodes: list[dict[str, Any]], pictures: list[np.ndarray]) -> dict[str, list[Any]]:
    """``nodes`` after a source of ``pictures``, run in this process; what its ``collect`` nodes kept."""
    text = yaml.safe_dump({"nodes": [{"id": "src", "type": "list_source", "config": {"feed": "pictures"}}, *nodes]},
                          sort_keys=False)
    result = run(load_graph("<models quantize>", text=text), feeds={"pictures": pictures})
    if not result.ok:
        raise RuntimeError(str(result.error))
    return result.collected


def calibration_inputs(model: Path, pictures: list[np.ndarray]) -> list[np.ndarray]:
    """The model's input tensor for each picture, made by the preprocess node from what the model says of itself
    (``from_model``), as the graphs make it."""
    got = _run_graph([{"id": "pre", "type": "preprocess", "config": {"from_model": str(model)}, "inputs": "src.frame"},
                      {"id": "keep", "type": "collect", "config": {"into": "inputs"}, "inputs": "pre.tensor"}],
                     pictures)
    frames = sorted(got.get("inputs", []), key=lambda f: f.index)
    return [np.ascontiguousarray(f.tensors["input"]) for f in frames]


def detections(fp32: Path, int8: Path, pictures: list[np.ndarray], score: float) -> tuple[list[list[Detection]],
                                                                                          list[list[Detection]]]:
    """Each model's detections on each picture: one preprocess (the FP32 model's), each model run on the CPU and
    decoded by the head flowpipe picks for it from its own outputs and metadata."""
    nodes: list[dict[str, Any]] = [{"id": "pre", "type": "preprocess", "config": {"from_model": str(fp32)},
                                    "inputs": "src.frame"}]
    for name, path in (("fp32", fp32), ("int8", int8)):
        nodes += [{"id": f"{name}_infer", "type": "inference", "config": {"model": str(path), "device": "CPU"},
                   "inputs": "pre.tensor"},
                  {"id": f"{name}_decode", "type": "detect_decode",
                   "config": {"model": str(path), "score_threshold": score}, "inputs": f"{name}_infer.tensors"},
                  {"id": f"{name}_keep", "type": "collect", "config": {"into": name, "keep_tensors": False},
                   "inputs": f"{name}_decode.detections"}]
    got = _run_graph(nodes, pictures)

    def each(name: str) -> list[list[Detection]]:
        by_index = {f.index: list(f.detections) for f in got.get(name, [])}
        return [by_index.get(i, []) for i in range(len(pictures))]

    return each("fp32"), each("int8")


def quantize_path(args: argparse.Namespace) -> int:
    """``models quantize PATH --calib VIDEO|DIR``: the INT8 IR, then the agreement table (or all as JSON)."""
    if len(args.name) != 1:
        print("error: models quantize PATH: expected one model file", file=sys.stderr)
        return 2
    ref = args.name[0]
    source = exported.model_file(ref)
    if not args.calib:
        print(f"error: {ref}: a model of your own is calibrated on your footage: expected --calib VIDEO|DIR",
              file=sys.stderr)
        return 2
    if args.recipe:
        print(f"error: {ref}: --recipe is a registry entry's; a model of your own takes --frames and --hold-out",
              file=sys.stderr)
        return 2
    calib = Path(args.calib).expanduser()
    try:
        dest = int8_path(source, ref, args.output)
        if dest.resolve() == source.resolve():
            raise ValueError(f"-o {args.output}: that is the model itself; expected another file")
        info, _, outs = exported.read_file(source)
        if all(d >= 0 for shape in outs.values() for d in shape):  # a dynamic output: decided on its first frame
            exported.choose_head(outs, info)
        n = quantizer.count_pictures(calib)
        rest, held = quantizer.held_out(n, args.hold_out)
        calibrated = [rest[i] for i in quantizer.picks(len(rest), args.frames)]
        checked = [held[i] for i in quantizer.picks(len(held), CHECKED)]
        pictures = quantizer.pictures_at(calib, calibrated + checked)
        inputs = calibration_inputs(source, [pictures[i] for i in calibrated if i in pictures])
        made = quantizer.quantize_file(source, inputs, dest)
        said = _said(source), _said(dest)
        if said[0] != said[1]:
            raise ValueError(f"{dest} says {said[1]}, where {source} says {said[0]}: expected the same")
        fp32, int8 = detections(source, dest, [pictures[i] for i in checked if i in pictures], args.score)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {ref}: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:  # a graph that ran and failed: what it said, in one line
        print(f"error: {ref}: {e}", file=sys.stderr)
        return 1
    report = {"model": str(source), "int8": str(dest), **made,
              "calibration": {"footage": str(calib.resolve()), "pictures": n, "calibrated_on": len(inputs)},
              "held_out": {"every": args.hold_out, "pictures": len(held), "compared": len(fp32)},
              "score_threshold": args.score, "agreement": quantizer.agreement(fp32, int8)}
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{dest}: INT8 by NNCF {made['nncf']} (preset {made['preset']}) from {source.name}, "
          f"{made['calibration_inputs']} calibration inputs {made['calibration_shape']} from {calib.name}; "
          f"{made['seconds']} s")
    print(agreement_table(report))
    print(f"  (flowpipe models add NAME {dest}: graphs name it by NAME, as a built-in model)")
    return 0


def _said(path: Path) -> tuple[Any, ...]:
    """What a graph reads off the model file: its preprocessing and its labels."""
    info, shape, _ = exported.read_file(path)
    pre = exported.preprocessing(info, shape)
    return pre.size, pre.layout, pre.resize, pre.pad_value, pre.color, pre.mean, pre.scale, info.labels


def agreement_table(report: dict[str, Any]) -> str:
    """The agreement of a ``quantize_path`` report as a short table."""
    a, held = report["agreement"], report["held_out"]

    def num(v: Any, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)

    share = f"  ({num(a['matched_share'], '.1%')})" if a["matched_share"] is not None else ""
    k = held["every"]
    return "\n".join([
        f"INT8 against FP32 on {held['compared']} held-out pictures (pictures {k}, {2 * k}, {3 * k}, ... of the "
        f"footage, never calibrated on), scores from {report['score_threshold']}, boxes matched at IoU >= "
        f"{a['min_iou']} with the same label:",
        f"  FP32 boxes               {a['fp32_boxes']}",
        f"  matched by INT8          {a['matched']}{share}",
        f"  missed by INT8           {a['missed']}",
        f"  extra in INT8            {a['extra']}",
        f"  mean IoU of matches      {num(a['mean_iou'], '.3f')}",
        f"  mean |score difference|  {num(a['mean_score_difference'], '.3f')}"])

"""What an exported detector says about itself, and the head flowpipe decodes it with.

Exporters write a model's labels and preprocessing into it, each in its own place; OpenVINO reads them all
into the model's ``rt_info``:

* ultralytics' ONNX export: ``metadata_props`` (``names``, ``imgsz``, ``stride``, ``task``, ``end2end``,
  ``kpt_shape``), which OpenVINO's ONNX reader puts under ``rt_info["framework"]``;
* ultralytics' OpenVINO export: the same in ``metadata.yaml`` beside the IR, and ``rt_info["model_info"]``;
* the OpenVINO Model API (what DL Streamer's gvadetect reads): ``rt_info["model_info"]`` with ``labels``,
  ``model_type``, ``resize_type``, ``pad_value``, ``reverse_input_channels``, ``scale_values``, ``mean_values``.

``read(path)`` gathers them (``ExportedInfo``, each value with where it came from); ``choose_head`` names the
head (``flowpipe_nodes.decode.heads``) the model's output shapes and what it says fit, and why, or refuses in
one line naming the shapes and what each head expects.
"""
from __future__ import annotations

import ast
import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

#: The heads flowpipe decodes, and the output shapes each expects (one batch entry: N objects, C classes, E
#: extra values: 32 mask coefficients or K*3 keypoint values).
EXPECTS = {
    "anchor_free": "[1, 4+C+E, N] (YOLOv8, v9, v11)",
    "objectness": "[1, N, 5+C+E] (YOLOv5, v7)",
    "end_to_end": "[1, N, 6+E] (YOLOv10, YOLO26)",
    "detr": "[1, Q, 4] beside [1, Q, C], or [1, Q, 4+C] (RT-DETR, RF-DETR, D-FINE)",
    "yolox": "[1, N, 5+C] over YOLOX's grid (strides 8, 16, 32)",
}


@dataclass
class ExportedInfo:
    """What a model says about itself. ``said``: each field's source (``framework``: ONNX metadata;
    ``model_info``: OpenVINO's rt_info; ``metadata.yaml``)."""

    labels: list[str] | None = None
    size: tuple[int, int] | None = None  # the input's width and height the model was exported at
    task: str | None = None  # detect, segment, pose
    end2end: bool | None = None
    keypoints: int | None = None  # a pose head's keypoints
    model_type: str | None = None  # the Model API's (YOLOv8, YOLOX, DETR, SSD, ...)
    resize: str | None = None  # letterbox, stretch (the Model API's resize_type, mapped)
    pad_value: int | None = None
    reverse_channels: bool | None = None  # True: the model takes RGB where the picture is BGR
    mean: list[float] | None = None
    scale: list[float] | None = None
    exporter: str | None = None  # "ultralytics" where its metadata is found
    iou_threshold: float | None = None  # the suppression the model was exported with (model_info)
    said: dict[str, str] = field(default_factory=dict)

    @property
    def iou(self) -> float:
        """The suppression threshold (``suppression``'s)."""
        return self.suppression[0]

    @property
    def suppression(self) -> tuple[float, str]:
        """The suppression threshold and where it comes from: the one the model was exported with
        (``model_info``'s ``iou_threshold``: the Model API's, ultralytics' OpenVINO export's), else the one its
        exporter's own predictor uses (ultralytics' ``predict``: 0.7), else 0.45 (YOLOv5's)."""
        if self.iou_threshold is not None:
            return self.iou_threshold, "model_info's iou_threshold"
        if self.exporter == "ultralytics":
            return 0.7, "ultralytics' predict"
        return 0.45, "no exporter's metadata: YOLOv5's"

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None and k != "said"} | {"said": self.said}


@dataclass(frozen=True)
class HeadChoice:
    """The head a model's outputs are decoded with: its kind, the outputs it reads (by name, in order), the
    class count, the extra values after each object's classes, and why."""

    kind: str
    outputs: tuple[str, ...]
    classes: int
    extra: str = "none"  # none, masks, keypoints
    extra_count: int = 0
    why: str = ""


def _value(raw: Any) -> Any:
    """A metadata value as written: ONNX metadata holds Python literals as text (``{0: 'person'}``)."""
    if hasattr(raw, "astype"):
        raw = raw.astype(str)
    if not isinstance(raw, str):
        return raw
    for parse in (json.loads, ast.literal_eval):
        try:
            return parse(raw)
        except (ValueError, SyntaxError, TypeError):
            continue
    return raw


def _labels(names: Any) -> list[str] | None:
    if isinstance(names, dict):
        return [str(names[k]) for k in sorted(names, key=lambda k: int(k))]
    if isinstance(names, (list, tuple)):
        return [str(n) for n in names]
    if isinstance(names, str) and names.strip():
        return names.split()  # the Model API's labels: one string, space separated
    return None


def _size(imgsz: Any) -> tuple[int, int] | None:
    if isinstance(imgsz, int):
        return (imgsz, imgsz)
    if isinstance(imgsz, (list, tuple)) and len(imgsz) == 2:
        h, w = int(imgsz[0]), int(imgsz[1])  # ultralytics: (height, width)
        return (w, h)
    return None


def _from_ultralytics(info: ExportedInfo, meta: dict[str, Any], where: str) -> None:
    if "Ultralytics" in str(meta.get("author", "")) or {"names", "imgsz"} <= meta.keys():
        info.exporter = info.exporter or "ultralytics"
        info.said.setdefault("exporter", where)
    for key, put in (("names", lambda v: setattr(info, "labels", _labels(v))),
                     ("imgsz", lambda v: setattr(info, "size", _size(v))),
                     ("task", lambda v: setattr(info, "task", str(v))),
                     ("end2end", lambda v: setattr(info, "end2end", bool(v))),
                     ("kpt_shape", lambda v: setattr(info, "keypoints", int(v[0])))):
        attr = {"names": "labels", "imgsz": "size", "kpt_shape": "keypoints"}.get(key, key)
        if key in meta and getattr(info, attr) is None:
            put(_value(meta[key]))
            info.said[key] = where


_RESIZE = {"fit_to_window_letterbox": "letterbox", "fit_to_window": "letterbox", "standard": "stretch"}


def _from_model_api(info: ExportedInfo, meta: dict[str, Any]) -> None:
    def put(key: str, attr: str, convert: Any) -> None:
        if key in meta and getattr(info, attr) is None:
            setattr(info, attr, convert(_value(meta[key])))
            info.said[attr] = "model_info"

    put("labels", "labels", _labels)
    put("model_type", "model_type", str)
    put("resize_type", "resize", lambda v: _RESIZE.get(str(v), str(v)))
    put("pad_value", "pad_value", int)
    put("reverse_input_channels", "reverse_channels", lambda v: str(v).lower() in ("true", "1", "yes"))
    put("iou_threshold", "iou_threshold", float)
    put("mean_values", "mean", _floats)
    put("scale_values", "scale", _floats)


def _floats(v: Any) -> list[float]:
    """Per-channel values as written: space separated, a list, or one number (ultralytics' [255.0] is read back
    from the IR as 255)."""
    if isinstance(v, str):
        return [float(x) for x in v.split()]
    return [float(x) for x in v] if isinstance(v, (list, tuple)) else [float(v)]


def _rt(model: Any, section: str) -> dict[str, Any]:
    rt = model.get_rt_info()
    if section not in list(rt.keys()):
        return {}
    got = rt[section]
    got = got.astype(dict) if hasattr(got, "astype") else got
    return dict(got) if isinstance(got, dict) else {}


@dataclass(frozen=True)
class Preprocessing:
    """How a picture becomes the model's input, as the model says (``why`` for each choice)."""

    size: tuple[int, int]  # width, height
    layout: str  # NCHW, NHWC
    resize: str  # letterbox, stretch
    pad_value: int
    color: str  # RGB, BGR
    mean: list[float]
    scale: list[float]
    why: dict[str, str]


def preprocessing(info: ExportedInfo, input_shape: tuple[int, ...]) -> Preprocessing:
    """The preprocessing ``info`` and the input's shape ([1, 3, H, W] or [1, H, W, 3]) call for."""
    why: dict[str, str] = {}
    nhwc = len(input_shape) == 4 and input_shape[3] == 3 and input_shape[1] != 3
    layout = "NHWC" if nhwc else "NCHW"
    why["layout"] = f"input {list(input_shape)}"
    dims = (input_shape[2], input_shape[1]) if nhwc else (input_shape[3], input_shape[2])
    if all(d > 0 for d in dims):
        size, why["size"] = (int(dims[0]), int(dims[1])), f"input {list(input_shape)}"
    elif info.size is not None:
        size, why["size"] = info.size, f"imgsz ({info.said.get('imgsz', 'metadata')})"
    else:
        size, why["size"] = (640, 640), "a dynamic input and no imgsz: 640x640"
    resize = info.resize or "stretch"
    why["resize"] = info.said.get("resize", "said by nothing: stretch")
    ultra = any(v in ("framework", "metadata.yaml") for v in info.said.values())
    if info.reverse_channels is not None:
        color, why["color"] = ("RGB" if info.reverse_channels else "BGR"), "reverse_input_channels (model_info)"
    else:
        color, why["color"] = ("RGB", "ultralytics models take RGB") if ultra else ("BGR", "said by nothing: BGR")
    if info.scale is not None or info.mean is not None:
        mean, scale, why["scale"] = info.mean or [0.0], info.scale or [1.0], "mean_values, scale_values (model_info)"
    elif ultra:
        mean, scale, why["scale"] = [0.0], [255.0], "ultralytics models take 0..1"
    else:
        mean, scale, why["scale"] = [0.0], [1.0], "said by nothing: 0..255"
    return Preprocessing(size, layout, resize, 114 if info.pad_value is None else info.pad_value, color, mean, scale,
                         why)


def read(model: Any, path: Path | None = None) -> ExportedInfo:
    """What ``model`` (an ``openvino.Model``, read from ``path``) says about itself."""
    info = ExportedInfo()
    beside = path.parent / "metadata.yaml" if path is not None else None
    if beside is not None and beside.is_file():
        meta = yaml.safe_load(beside.read_text()) or {}
        if isinstance(meta, dict):
            _from_ultralytics(info, meta, "metadata.yaml")
    _from_ultralytics(info, _rt(model, "framework"), "framework")
    _from_model_api(info, _rt(model, "model_info"))
    if info.resize is None and (info.said.get("imgsz") or info.task):  # ultralytics letterboxes, pads with 114
        info.resize, info.pad_value = "letterbox", 114 if info.pad_value is None else info.pad_value
        info.said["resize"] = "ultralytics (letterbox, pad 114)"
    return info


def model_file(ref: str | Path) -> Path:
    """The file a local model reference names: the file itself, or the .xml in a folder (the folder
    ultralytics' OpenVINO export writes)."""
    path = Path(ref).expanduser()
    if path.is_dir():
        path = next(iter(sorted(path.glob("*.xml"))), path)
    return path


def named(model: Any) -> Any:
    """Every input and output of ``model`` given a name where its file gives none (``input0``, ``output1``:
    by its place, as exporters name them; one another port has already gets a suffix), so that each is found
    by name. ultralytics' OpenVINO export leaves its outputs unnamed."""
    taken = {n for port in (*model.inputs, *model.outputs) for n in port.get_names()}
    for kind, ports in (("input", model.inputs), ("output", model.outputs)):
        for i, port in enumerate(ports):
            if not port.get_names():
                name = f"{kind}{i}"
                while name in taken:
                    name += "_"
                taken.add(name)
                port.get_tensor().set_names({name})
    return model


@functools.lru_cache(maxsize=16)
def _read_file(path: str, mtime: float) -> tuple[ExportedInfo, tuple[int, ...], dict[str, tuple[int, ...]]]:
    import openvino as ov

    model = named(ov.Core().read_model(path))
    ins = [tuple(int(d) for d in p.get_partial_shape().get_min_shape()) for p in model.inputs]
    outs = {p.get_any_name(): tuple(d.get_length() if d.is_static else -1 for d in p.get_partial_shape())
            for p in model.outputs}
    return read(model, Path(path)), ins[0], outs


def read_file(path: Path) -> tuple[ExportedInfo, tuple[int, ...], dict[str, tuple[int, ...]]]:
    """What the model file at ``path`` says about itself, its first input's shape and its outputs' (-1 for a
    dynamic dimension; read once per file and change)."""
    info, shape, outs = _read_file(str(path), path.stat().st_mtime)
    return ExportedInfo(**{**info.__dict__, "said": dict(info.said)}), shape, outs


def choose_head(outputs: dict[str, tuple[int, ...]], info: ExportedInfo, head: str | None = None) -> HeadChoice:
    """The head ``outputs`` (name -> shape, in the model's order) are decoded with: ``head`` where the graph
    names one, else from the shapes and what the model says (its labels give the class count, ``end2end``,
    ``task``, ``model_type``). Refuses, in one line naming the shapes and what each head expects, outputs
    that fit none."""
    shapes = {k: tuple(int(d) for d in v) for k, v in outputs.items()}
    protos = [k for k, s in shapes.items() if len(s) == 4 and s[1] == 32]
    dets = [k for k in shapes if k not in protos and len(shapes[k]) == 3 and shapes[k][0] == 1]
    classes = len(info.labels) if info.labels else None
    said = f"labels: {classes} classes" if classes else "no labels"
    if protos:
        extra, count = "masks", 32
    elif info.task == "pose":
        extra, count = "keypoints", info.keypoints or 17
    else:
        extra, count = "none", 0
    width = count * 3 if extra == "keypoints" else count
    kind = head or (info.model_type or "").lower().replace("-", "")
    if kind == "yolo":  # ultralytics' OpenVINO export says this of every YOLO it writes: the shapes decide
        kind = ""
    if len(dets) == 2 and kind in ("", "detr", "rtdetr"):  # DETR: boxes [1,Q,4] beside logits [1,Q,C]
        box, logit = sorted(dets, key=lambda k: shapes[k][2] != 4)
        if shapes[box][2] == 4 and shapes[box][1] == shapes[logit][1]:
            return HeadChoice("detr", (box, logit), shapes[logit][2], why=f"[1, Q, 4] beside [1, Q, C] ({said})")
    if len(dets) == 1 and len(shapes) == 1 + len(protos):
        name = dets[0]
        picked = _one_output(shapes[name][1], shapes[name][2], classes, width, kind, bool(info.end2end))
        if picked is not None:
            found, n_classes, why = picked
            return HeadChoice(found, (name,), n_classes, extra, count, f"{why} ({said})")
    got = ", ".join(f"{k} {list(s)}" for k, s in shapes.items())
    raise ValueError(f"outputs {got} fit no head flowpipe decodes ({said}); expected one of: "
                     + "; ".join(f"{k} {v}" for k, v in EXPECTS.items()))


def _one_output(a: int, b: int, classes: int | None, width: int, kind: str,
                end2end: bool) -> tuple[str, int, str] | None:
    """The head of a model with one detection output [1, a, b]: (kind, classes, why), or None."""
    if kind in ("detr", "rtdetr") and b > 4:
        return "detr", b - 4, "[1, Q, 4+C] and the model says DETR"
    if kind == "yolox" and b > 5:
        return "yolox", b - 5, "[1, N, 5+C] and the model says YOLOX"
    if (end2end or kind == "end_to_end") and b == 6 + width:
        return "end_to_end", classes or 0, "[1, N, 6+E] and the model says end to end"
    if classes is not None:
        if a == 4 + classes + width and kind in ("", "yolov8", "anchor_free"):
            return "anchor_free", classes, f"[1, 4+C+E, N] with C={classes}"
        if b == 5 + classes + width and kind in ("", "yolov5", "objectness"):
            return "objectness", classes, f"[1, N, 5+C+E] with C={classes}"
        if b == 6 + width and kind == "":
            return "end_to_end", classes, "[1, N, 6+E]"
        return None
    if kind == "anchor_free" or (kind == "" and 4 + width < a < b):  # few rows, many columns: channels first
        return "anchor_free", a - 4 - width, "[1, 4+C+E, N]: more columns than rows"
    if kind == "objectness" or (kind == "" and b > 5 + width):
        return "objectness", b - 5 - width, "[1, N, 5+C+E]: more rows than columns"
    return None

"""Makes this folder's models with ultralytics itself, and what ultralytics' own predictor reports on its pictures.

Not run by the suite (ultralytics needs torch): run it again in an environment with ultralytics, onnx,
onnxruntime and openvino installed, from the repository's root, when ultralytics changes its exports:

    python tests/data/ultralytics/make.py

Each model is built from ultralytics' own model file at a small width (so that it is a few hundred KB, not
weights anyone trained) with three classes named in it, then exported as ultralytics exports: ONNX (its
metadata in ``metadata_props``) and OpenVINO (the folder with ``metadata.yaml``). Random weights find nothing
at ultralytics' initial class bias (about 0.0001 a box), so batch norm's statistics are taken from the pictures and each class
bias raised until the picture that finds least has a few boxes over 0.3: what ultralytics then reports is as much its own as on a trained model. The
predictor runs on each export and picture at its defaults (conf 0.25, iou 0.7, letterbox to the export's size;
OpenVINO in f32, as ONNX Runtime runs),
and ``expected.json`` keeps every box, score, class and, for the segmentation and pose models, each mask's
largest part (its outline's area and extent, and how many parts it has) and each keypoint, as ultralytics reports them. ``tests/test_exported.py`` runs the same files through
flowpipe and compares.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import cv2
import numpy as np
import torch
import ultralytics
import yaml
from ultralytics import YOLO
from ultralytics.utils import ROOT as UROOT
from ultralytics.utils import ops

HERE = Path(__file__).resolve().parent
NAMES = {0: "person", 1: "bicycle", 2: "car"}
SIZE = 320
#: (name, ultralytics' model file, its formats): one of each head flowpipe decodes from an ultralytics export
MODELS = [
    ("yolo11", "11/yolo11.yaml", ("onnx", "openvino")),  # anchor-free [1, 4+C, N] (YOLOv8, v9, 11)
    ("yolo26", "26/yolo26.yaml", ("onnx", "openvino")),  # end to end [1, 300, 6]
    ("yolov10", "v10/yolov10n.yaml", ("onnx",)),
    ("yolov8-seg", "v8/yolov8-seg.yaml", ("onnx",)),  # + prototypes: masks
    ("yolov8-pose", "v8/yolov8-pose.yaml", ("onnx",)),  # + keypoints
]


def tiny_model_file(name: str, rel: str) -> Path:
    """Ultralytics' own model file, its smallest scale made narrower still."""
    cfg = yaml.safe_load((UROOT / "cfg" / "models" / rel).read_text())
    scales = cfg.get("scales") or {}
    depth = scales.get("n", [0.33, 0.25, 1024])[0]
    cfg["scales"] = {"n": [depth, 0.0625, 256]}
    cfg["scale"] = "n"
    cfg["nc"] = 1 if "pose" in name else len(NAMES)
    cfg["reg_max"] = 1  # boxes as distances, not as distributions (DFL): a quarter of the weights, same outputs
    path = HERE / "build" / f"{name}n.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def calibrate(model: YOLO, pictures: list[Path]) -> None:
    """Batch norm's statistics taken from the pictures (random weights otherwise give features that hardly
    depend on the picture), then each class's bias raised so that, on the picture that finds least, about 0.05% of
    the boxes score over 0.3."""
    net = model.model
    x = torch.stack([torch.from_numpy(letterboxed(p)) for p in pictures])
    for m in net.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.reset_running_stats()
            m.momentum = None  # a plain average over the passes
    net.train()
    with torch.no_grad():
        net(x)
    net.eval()
    head = net.model[-1]
    logits = []

    def keep(_m, _i, out):
        logits.append(out.flatten())

    hooks = [branch[-1].register_forward_hook(keep) for name in ("cv3", "one2one_cv3")
             for branch in getattr(head, name, None) or []]
    tops = []
    with torch.no_grad():
        for picture in x:  # each picture's own: a busy one must not leave the others with nothing
            logits.clear()
            net(picture[None])
            tops.append(float(torch.quantile(torch.cat(logits).float(), 0.9995)))
    for h in hooks:
        h.remove()
    shift = float(np.log(0.3 / 0.7) - min(tops))
    for name in ("cv3", "one2one_cv3"):
        for branch in getattr(head, name, None) or []:
            branch[-1].bias.data += shift


def letterboxed(path: Path) -> np.ndarray:
    """A picture as the model's input for the bias search (the predictor letterboxes on its own later)."""
    img = cv2.imread(str(path))
    h, w = img.shape[:2]
    r = min(SIZE / h, SIZE / w)
    img = cv2.resize(img, (round(w * r), round(h * r)))
    out = np.full((SIZE, SIZE, 3), 114, np.uint8)
    out[:img.shape[0], :img.shape[1]] = img
    return np.ascontiguousarray(out[..., ::-1].transpose(2, 0, 1), np.float32) / 255


def report(result) -> list[dict]:
    rows = []
    boxes = result.boxes
    for i in range(len(boxes)):
        row = {"box": [round(float(v), 4) for v in boxes.xyxy[i].tolist()], "score": round(float(boxes.conf[i]), 6),
               "label": result.names[int(boxes.cls[i])]}
        if result.masks is not None:  # its largest part's outline (ultralytics' own functions), by area and extent
            bits = result.masks.data[i].cpu().numpy().astype(np.uint8)
            parts = cv2.findContours(bits, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)[0]
            xy = ops.scale_coords(bits.shape, ops.masks2segments(bits[None], strategy="largest")[0],
                                  result.orig_shape, normalize=False).astype(np.float64)
            area = 0.5 * abs(float(np.dot(xy[:, 0], np.roll(xy[:, 1], 1)) - np.dot(xy[:, 1], np.roll(xy[:, 0], 1))))
            row["mask_parts"] = len(parts)
            row["mask_area"] = round(area, 1)
            row["mask_box"] = [round(float(v), 2) for v in (*xy.min(0), *xy.max(0))] if len(xy) else []
        if result.keypoints is not None:
            row["keypoints"] = [[round(float(a), 3), round(float(b), 3)] for a, b in result.keypoints.xy[i].tolist()]
            row["keypoint_scores"] = [round(float(s), 5) for s in result.keypoints.conf[i].tolist()]
        rows.append(row)
    return rows


def full_precision() -> None:
    """OpenVINO compiles every model in f32: on a CPU with bf16 (AMX) its default is bf16, so a reference made
    at the default would hold on such CPUs alone. The predictor is otherwise ultralytics' own."""
    import openvino as ov

    compile_model = ov.Core.compile_model

    def f32(self, model, device_name=None, config=None):
        return compile_model(self, model, device_name, {**(config or {}), "INFERENCE_PRECISION_HINT": "f32"})

    ov.Core.compile_model = f32


def main() -> None:
    full_precision()
    torch.manual_seed(0)
    pictures = sorted(HERE.glob("*.jpg"))
    expected: dict = {"ultralytics": ultralytics.__version__, "imgsz": SIZE, "pictures": [p.name for p in pictures],
                      "models": {}}
    for name, rel, formats in MODELS:
        model = YOLO(str(tiny_model_file(name, rel)))
        model.model.names = {0: "person"} if "pose" in name else dict(NAMES)
        calibrate(model, pictures)
        pt = HERE / "build" / f"{name}.pt"
        model.save(str(pt))
        for fmt in formats:
            made = Path(YOLO(str(pt)).export(format=fmt, imgsz=SIZE, half=False, dynamic=False, simplify=True))
            target = HERE / (f"{name}.onnx" if fmt == "onnx" else f"{name}_openvino_model")
            if target.is_dir():
                shutil.rmtree(target)
            shutil.move(str(made), str(target))
            predictor = YOLO(str(target), task=model.task)
            found = {p.name: report(predictor.predict(str(p), imgsz=SIZE, verbose=False)[0]) for p in pictures}
            expected["models"][target.name] = {"task": model.task, "found": found}
            print(target.name, {k: len(v) for k, v in found.items()})
    shutil.rmtree(HERE / "build")
    (HERE / "expected.json").write_text(json.dumps(expected, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()

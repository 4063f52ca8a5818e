"""Models as exporters write them (ONNX with ultralytics' metadata, OpenVINO IR with the Model API's
rt_info), inspected: what each says about itself, the preprocessing and the head flowpipe picks, and a model
whose outputs fit no head refused in one line (``flowpipe models inspect``)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import openvino as ov
import pytest

from flowpipe import exported
from flowpipe.cli import main

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _onnx(path: Path, outputs: dict[str, list[int]], meta: dict[str, str], size: int = 64) -> Path:
    """A model with one input [1, 3, size, size] and constant outputs of the given shapes (each plus the
    input's mean, so the input is used), with ``meta`` as its metadata_props (ultralytics writes Python
    literals as text)."""
    nodes, inits, outs = [helper.make_node("ReduceMean", ["images"], ["m"], keepdims=1)], [], []
    for i, (name, shape) in enumerate(outputs.items()):
        inits += [numpy_helper.from_array(np.zeros(shape, np.float32), f"c{i}"),
                  numpy_helper.from_array(np.ones(len(shape), np.int64), f"s{i}")]
        nodes += [helper.make_node("Reshape", ["m", f"s{i}"], [f"m{i}"]), helper.make_node("Add", [f"c{i}", f"m{i}"], [name])]
        outs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, shape))
    graph = helper.make_graph(nodes, "exported", [helper.make_tensor_value_info("images", TensorProto.FLOAT,
                                                                               [1, 3, size, size])], outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    for k, v in meta.items():
        model.metadata_props.append(onnx.StringStringEntryProto(key=k, value=v))
    onnx.save(model, str(path))
    return path


ULTRA = {"names": "{0: 'person', 1: 'car'}", "imgsz": "[64, 64]", "stride": "32", "task": "detect"}


def _read(path: Path) -> tuple[exported.ExportedInfo, dict[str, tuple[int, ...]]]:
    model = ov.Core().read_model(str(path))
    return exported.read(model, path), {p.get_any_name(): tuple(p.get_shape()) for p in model.outputs}


def test_ultralytics_onnx_metadata_gives_labels_preprocessing_and_head(tmp_path: Path) -> None:
    info, outs = _read(_onnx(tmp_path / "yolov8n.onnx", {"output0": [1, 6, 84]}, ULTRA))
    assert info.labels == ["person", "car"] and info.size == (64, 64) and info.task == "detect"
    assert info.said["names"] == "framework"
    pre = exported.preprocessing(info, (1, 3, 64, 64))
    assert (pre.size, pre.layout, pre.resize, pre.pad_value, pre.color, pre.scale) == (
        (64, 64), "NCHW", "letterbox", 114, "RGB", [255.0])
    head = exported.choose_head(outs, info)
    assert (head.kind, head.classes, head.outputs) == ("anchor_free", 2, ("output0",))


@pytest.mark.parametrize(("outputs", "meta", "kind", "extra"), [
    ({"output0": [1, 300, 6]}, ULTRA | {"end2end": "True"}, "end_to_end", "none"),  # YOLOv10, YOLO26
    ({"output0": [1, 84, 7]}, ULTRA, "objectness", "none"),  # YOLOv5: 5+2 columns
    ({"output0": [1, 38, 84], "output1": [1, 32, 16, 16]}, ULTRA | {"task": "segment"}, "anchor_free", "masks"),
    ({"output0": [1, 4 + 1 + 51, 84]}, ULTRA | {"task": "pose", "names": "{0: 'person'}", "kpt_shape": "[17, 3]"},
     "anchor_free", "keypoints"),
    ({"pred_boxes": [1, 300, 4], "pred_logits": [1, 300, 91]}, {}, "detr", "none"),  # RF-DETR, D-FINE
])
def test_each_exported_head_is_recognised(tmp_path: Path, outputs: dict[str, list[int]], meta: dict[str, str],
                                          kind: str, extra: str) -> None:
    info, outs = _read(_onnx(tmp_path / "m.onnx", outputs, meta))
    head = exported.choose_head(outs, info)
    assert (head.kind, head.extra) == (kind, extra), head


def test_the_model_api_rt_info_of_an_openvino_ir(tmp_path: Path) -> None:
    """An IR as the OpenVINO Model API describes it (what DL Streamer reads): labels, type, resize, colour."""
    from openvino import opset13 as ops

    x = ops.parameter([1, 416, 416, 3], np.float32, name="image")
    y = ops.reshape(ops.reduce_mean(x, [1, 2, 3], True), [1, 1, 1], False)
    out = ops.add(ops.constant(np.zeros((1, 3549, 85), np.float32)), y)
    model = ov.Model([out], [x], "yolox")
    for k, v in {"labels": "person bicycle car", "model_type": "YOLOX", "resize_type": "fit_to_window_letterbox",
                 "pad_value": "114", "reverse_input_channels": "True", "scale_values": "1 1 1"}.items():
        model.set_rt_info(v, ["model_info", k])
    ov.save_model(model, str(tmp_path / "yolox.xml"))
    info, outs = _read(tmp_path / "yolox.xml")
    assert info.labels == ["person", "bicycle", "car"] and info.said["labels"] == "model_info"
    pre = exported.preprocessing(info, (1, 416, 416, 3))
    assert (pre.layout, pre.resize, pre.color, pre.scale) == ("NHWC", "letterbox", "RGB", [1.0, 1.0, 1.0])
    assert exported.choose_head(outs, info).kind == "yolox"


def test_the_folder_ultralytics_openvino_export_writes_is_read_as_written(tmp_path: Path) -> None:
    """ultralytics' OpenVINO export says model_type YOLO of every model and scale_values [255.0] (which the IR
    gives back as 255), with metadata.yaml beside the IR: the head comes from the shapes, the scale is read, and
    a graph naming the folder runs the .xml in it."""
    from openvino import opset13 as ops

    from flowpipe import models

    x = ops.parameter([1, 3, 64, 64], np.float32, name="images")
    y = ops.reshape(ops.reduce_mean(x, [1, 2, 3], True), [1, 1, 1], False)
    model = ov.Model([ops.add(ops.constant(np.zeros((1, 6, 84), np.float32)), y)], [x], "yolo11n")
    for k, v in {"model_type": "YOLO", "reverse_input_channels": True, "pad_value": 114, "scale_values": [255.0],
                 "labels": ["person", "car"], "resize_type": "fit_to_window_letterbox"}.items():
        model.set_rt_info(v, ["model_info", k])
    folder = tmp_path / "yolo11n_openvino_model"
    folder.mkdir()
    ov.save_model(model, str(folder / "yolo11n.xml"))
    (folder / "metadata.yaml").write_text("names: {0: person, 1: car}\nimgsz: [64, 64]\ntask: detect\n")
    info, outs = _read(exported.model_file(folder))
    pre = exported.preprocessing(info, (1, 3, 64, 64))
    assert (pre.scale, pre.color, pre.resize, pre.pad_value) == ([255.0], "RGB", "letterbox", 114)
    assert exported.choose_head(outs, info).kind == "anchor_free"
    assert models.resolve(str(folder)) == folder / "yolo11n.xml"


def test_inspect_says_what_it_found_and_refuses_an_unknown_head_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = _onnx(tmp_path / "yolov8n.onnx", {"output0": [1, 6, 84]}, ULTRA)
    assert main(["models", "inspect", str(good)]) == 0
    said = capsys.readouterr().out
    assert "head: anchor_free over output0, 2 classes: [1, 4+C+E, N] with C=2 (labels: 2 classes)" in said, said
    assert "preprocessing: 64x64 NCHW, letterbox (pad 114), RGB, mean [0.0], scale [255.0]" in said, said
    odd = _onnx(tmp_path / "odd.onnx", {"scores": [1, 7], "boxes": [1, 7, 4]}, {})
    assert main(["models", "inspect", str(odd)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {odd}: outputs scores [1, 7], boxes [1, 7, 4] fit no head "
                                               "flowpipe decodes (no labels); expected one of: anchor_free "), err


def _run_detect(tmp_path: Path, model: Path | str, frames: int = 8) -> list[dict]:
    import json

    from flowpipe import load_graph, run
    from flowpipe.sample import sample_path

    root = Path(__file__).resolve().parent.parent
    spec = load_graph(root / "graphs" / "detect.yaml", {
        "input": str(sample_path("sample")), "model": str(model), "device": "CPU",
        "output": str(tmp_path / "out.mp4"), "metadata": str(tmp_path / "out.jsonl")})
    res = run(spec, max_frames=frames)
    assert res.ok, res.error
    return [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]


def _constant(path: Path, value: np.ndarray, meta: dict[str, str], size: int = 64) -> Path:
    """An ONNX model whose one output is ``value`` whatever the picture (plus 0 times the input's mean)."""
    nodes = [helper.make_node("ReduceMean", ["images"], ["m"], keepdims=1),
             helper.make_node("Mul", ["m", "zero"], ["z"]),
             helper.make_node("Reshape", ["z", "s"], ["z3"]),
             helper.make_node("Add", ["c", "z3"], ["output0"])]
    inits = [numpy_helper.from_array(value.astype(np.float32), "c"), numpy_helper.from_array(np.zeros(1, np.float32), "zero"),
             numpy_helper.from_array(np.ones(value.ndim, np.int64), "s")]
    graph = helper.make_graph(nodes, "constant", [helper.make_tensor_value_info("images", TensorProto.FLOAT,
                                                                               [1, 3, size, size])],
                              [helper.make_tensor_value_info("output0", TensorProto.FLOAT, list(value.shape))], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    for k, v in meta.items():
        model.metadata_props.append(onnx.StringStringEntryProto(key=k, value=v))
    onnx.save(model, str(path))
    return path


def test_a_brought_yolov8_runs_through_the_detect_graph_with_its_own_labels_and_letterbox(tmp_path: Path) -> None:
    """ultralytics' ONNX export as it writes it (letterbox 64x64, labels in its metadata): one object at
    (16, 20)-(48, 40) in the tensor lands on the 1366x768 picture through the letterbox's inverse, to the pixel,
    named by the model's own label."""
    out = np.zeros((1, 6, 84), np.float32)
    out[0, :4, 0] = [32, 30, 32, 20]  # cx, cy, w, h: (16, 20)-(48, 40)
    out[0, 5, 0] = 0.9  # class 1
    model = _constant(tmp_path / "yolov8n.onnx", out, ULTRA | {"names": "{0: 'pedestrian', 1: 'cart'}"})
    rows = _run_detect(tmp_path, model)
    s = 64 / 1366  # letterboxed: 64x36, 14 rows of padding above
    want = [16 / s, (20 - 14) / (36 / 768), 48 / s, (40 - 14) / (36 / 768)]
    seen = [o for r in rows for o in r["objects"]]
    assert seen and {o["label"] for o in seen} == {"cart"}, rows[-1]
    np.testing.assert_allclose(seen[-1]["box"], want, atol=1.0)


def test_a_brought_detr_stretches_and_reads_normalized_boxes(tmp_path: Path) -> None:
    """An RT-DETR-style export (one output [1, Q, 4+C], boxes in fractions, scores), stretched as the Model API
    says (resize_type standard): a box at the tensor's middle half lands on the picture's middle half."""
    from openvino import opset13 as ops

    out = np.zeros((1, 300, 4 + 3), np.float32)
    out[0, 0] = [0.5, 0.5, 0.5, 0.5, 0.0, 0.0, 0.95]  # cx, cy, w, h as fractions; class 2
    x = ops.parameter([1, 3, 64, 64], np.float32, name="images")
    y = ops.multiply(ops.reshape(ops.reduce_mean(x, [1, 2, 3], True), [1, 1, 1], False), ops.constant(np.float32(0)))
    model = ov.Model([ops.add(ops.constant(out), y)], [x], "rtdetr")
    for k, v in {"labels": "person bicycle car", "model_type": "DETR", "resize_type": "standard"}.items():
        model.set_rt_info(v, ["model_info", k])
    ov.save_model(model, str(tmp_path / "rtdetr.xml"))
    rows = _run_detect(tmp_path, tmp_path / "rtdetr.xml")
    seen = [o for r in rows for o in r["objects"]]
    assert seen and {o["label"] for o in seen} == {"car"}
    np.testing.assert_allclose(seen[-1]["box"], [1366 * 0.25, 768 * 0.25, 1366 * 0.75, 768 * 0.75], atol=1.0)


def test_the_overlay_draws_a_mask_outline_and_keypoints() -> None:
    from flowpipe.frame import Detection, Frame
    from flowpipe_nodes.draw import Overlay

    node = Overlay("draw", Overlay.Config(show_fps=False, show_scores=False, thickness=2))
    node.open(None)  # type: ignore[arg-type]
    img = np.zeros((120, 160, 3), np.uint8)
    d = Detection((10, 10, 150, 110), 0.9, "cart", 1, keypoints=[(80.0, 60.0), (20.0, 100.0)],
                  keypoint_scores=[0.9, 0.1], mask=[[40.0, 30.0], [120.0, 30.0], [120.0, 90.0], [40.0, 90.0]])
    node.process(Frame("s", 0, 0.0, img, "BGR", detections=[d]), "detections")
    assert img[30, 80].any() and img[90, 60].any()  # the outline's top and bottom edges
    assert img[60, 80].any() and not img[100, 20].any()  # the keypoint scored 0.9 drawn, the one at 0.1 not
    assert not img[60, 60].any()  # inside the outline, away from the point: untouched


def test_validate_refuses_a_model_whose_outputs_fit_no_head_in_one_line(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    odd = _onnx(tmp_path / "odd.onnx", {"scores": [1, 7], "boxes": [1, 7, 4]}, {})
    graph = Path(__file__).resolve().parent.parent / "graphs" / "detect.yaml"
    assert main(["validate", str(graph), "--set", f"model={odd}"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "node 'objects' (detect_decode): config: " in err[0], err
    assert "outputs scores [1, 7], boxes [1, 7, 4] fit no head flowpipe decodes" in err[0], err
    good = _onnx(tmp_path / "yolov8n.onnx", {"output0": [1, 6, 84]}, ULTRA)
    assert main(["validate", str(graph), "--set", f"model={good}"]) == 0


def test_a_model_added_to_this_hosts_registry_is_named_like_a_built_in_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``flowpipe models add NAME PATH``: the model's input and labels from what it says; a graph names it by
    NAME (preprocessing and decoder as from the file); a file changed since is refused by name."""
    from flowpipe import models

    monkeypatch.setenv("FLOWPIPE_CACHE", str(tmp_path / "cache"))
    out = np.zeros((1, 6, 84), np.float32)
    out[0, :4, 0] = [32, 30, 32, 20]
    out[0, 5, 0] = 0.9
    model = _constant(tmp_path / "carts.onnx", out, ULTRA | {"names": "{0: 'pedestrian', 1: 'cart'}"})
    assert main(["models", "add", "carts", str(model)]) == 0
    assert "carts: " in capsys.readouterr().out
    e = models.entry("carts")
    assert e["input"]["shape"] == [1, 3, 64, 64] and e["input"]["resize"] == "letterbox" and e["labels"] == [
        "pedestrian", "cart"]
    assert main(["models", "list"]) == 0 and "added" in next(
        line for line in capsys.readouterr().out.splitlines() if line.startswith("carts "))
    rows = _run_detect(tmp_path, "carts")
    seen = [o for r in rows for o in r["objects"]]
    assert seen and {o["label"] for o in seen} == {"cart"}
    s = 64 / 1366
    np.testing.assert_allclose(seen[-1]["box"], [16 / s, 6 / (36 / 768), 48 / s, 26 / (36 / 768)], atol=1.0)
    assert main(["models", "add", "centerface", str(model)]) == 2  # a built-in name is not taken
    assert "'centerface' is a built-in model's name" in capsys.readouterr().err
    model.write_bytes(model.read_bytes() + b"\0")
    with pytest.raises(RuntimeError, match=r"model 'carts': .* changed since it was added"):
        models.resolve("carts")


def test_unnamed_ports_are_named_by_their_place_and_never_as_another_port() -> None:
    """ultralytics' OpenVINO export names no output; a name given must not be one another port has."""
    from openvino import opset13 as ops

    x = ops.parameter([1, 3, 8, 8], np.float32, name="images")
    a, b = ops.relu(x), ops.sigmoid(x)
    model = ov.Model([a, b], [x], "m")
    model.outputs[0].get_tensor().set_names({"output1"})
    model.outputs[1].get_tensor().set_names(set())
    exported.named(model)
    names = [next(iter(p.get_names())) for p in model.outputs]
    assert names[0] == "output1" and names[1] != "output1" and names[1].startswith("output1")


ULTRALYTICS = Path(__file__).resolve().parent / "data" / "ultralytics"


def _near(a: dict, b: dict) -> float:
    return float(np.abs(np.subtract(a["box"], b["box"])).max()) + abs(a["score"] - b["score"])


def _pairs(want: list[dict], got: list[dict]) -> list[tuple[int, int]]:
    """Each of ultralytics' detections with flowpipe's of its label nearest in box and score, one to one."""
    near = sorted((_near(w, g), i, j) for i, w in enumerate(want) for j, g in enumerate(got) if w["label"] == g["label"])
    seen_w, seen_g, out = set(), set(), []
    for d, i, j in near:
        if d <= 1.0 and i not in seen_w and j not in seen_g:
            seen_w.add(i)
            seen_g.add(j)
            out.append((i, j))
    return out


def _area(xy: list[list[float]]) -> float:
    p = np.asarray(xy, np.float64).reshape(-1, 2)
    return 0.5 * abs(float(np.dot(p[:, 0], np.roll(p[:, 1], 1)) - np.dot(p[:, 1], np.roll(p[:, 0], 1))))


@pytest.mark.parametrize("export", ["yolo11.onnx", "yolo11_openvino_model", "yolo26.onnx", "yolo26_openvino_model",
                                    "yolov10.onnx", "yolov8-seg.onnx", "yolov8-pose.onnx"])
def test_ultralytics_own_exports_report_what_its_own_predictor_reports(tmp_path: Path, export: str) -> None:
    """Models ultralytics built and exported itself (tests/data/ultralytics/make.py: its model files at a small
    width, ONNX and its OpenVINO folder), on real pictures letterboxed both ways: every box, score and label
    its own predictor reported, and no other; each mask's largest part and each keypoint. Through the nodes
    graphs/detect.yaml detects with (the preprocessing and the decoder from the model's metadata alone), in f32
    as the reference was made. Left out on both sides: boxes inside out (x2 < x1: random weights regress
    negative sizes, which no trained model does), whose suppression OpenCV and torchvision do not agree on,
    and boxes of no area once clipped to the picture (some of them inside out before; under the records'
    0.1 px)."""
    import json

    from flowpipe.testing import run_yaml

    expected = json.loads((ULTRALYTICS / "expected.json").read_text())
    model = ULTRALYTICS / export
    out = tmp_path / "found.jsonl"
    res = run_yaml(f"""
        nodes:
          - {{id: decode, type: video_source, config: {{uri: "{ULTRALYTICS}"}}}}
          - {{id: pre, type: preprocess, config: {{from_model: "{model}"}}, inputs: {{frame: decode.frame}}}}
          - {{id: detect, type: inference, inputs: {{tensor: pre.tensor}},
              config: {{model: "{model}", device: CPU, properties: {{INFERENCE_PRECISION_HINT: f32}}}}}}
          - {{id: objects, type: detect_decode, inputs: {{tensors: detect.tensors}},
              config: {{model: "{model}", score_threshold: 0.25}}}}
          - {{id: meta, type: jsonl, config: {{path: "{out}"}}, inputs: {{detections: objects.detections}}}}
    """)
    assert res.ok, res.error
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == len(expected["pictures"]) == 4
    total = 0
    def upright(found: list[dict]) -> list[dict]:
        return [d for d in found if d["box"][2] - d["box"][0] > 0.1 and d["box"][3] - d["box"][1] > 0.1]

    for row, picture in zip(rows, expected["pictures"]):
        want, got = upright(expected["models"][export]["found"][picture]), upright(row["objects"])
        pairs = _pairs(want, got)
        assert len(pairs) == len(want) == len(got), (picture, len(pairs), len(want), len(got))
        total += len(pairs)
        for i, j in pairs:
            w, g = want[i], got[j]
            np.testing.assert_allclose(g["box"], w["box"], atol=0.1)  # the records round to 0.1 px
            assert abs(g["score"] - w["score"]) < 1e-3
            if "keypoints" in w:  # x, y, score each
                kp = np.asarray(g["keypoints"], np.float64)
                np.testing.assert_allclose(kp[:, :2], w["keypoints"], atol=0.1)
                np.testing.assert_allclose(kp[:, 2], w["keypoint_scores"], atol=1e-3)
            if "mask_area" in w:
                assert g.get("mask"), (picture, w)
                if w["mask_parts"] == 1:  # one part: the same outline
                    assert abs(_area(g["mask"]) - w["mask_area"]) <= 0.01 * w["mask_area"] + 1, (picture, w)
                    p = np.asarray(g["mask"])
                    np.testing.assert_allclose([*p.min(0), *p.max(0)], w["mask_box"], atol=0.1)
    assert total >= 100  # the pictures hold objects enough to say something

"""INT8 CenterFace made by NNCF from the registry's FP32 model (flowpipe_eval.quantize): quantized ops in the
IR, the same faces as FP32 on a held-out clip, a stale model made again, and a graph that names it."""
from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import openvino as ov
import pytest

from flowpipe import load_graph, models, run
from flowpipe.quantize import letterboxed, quantized_ops
from flowpipe_eval.clips import clip
from flowpipe_eval.quantize import quantize
from flowpipe_nodes.decode import nms
from flowpipe_nodes.track import iou_matrix

ROOT = Path(__file__).resolve().parent.parent
# a few frames of one clip at a small size: seconds, not the registry's 60 frames at 960x544
SMALL = {"from": "centerface", "calibrate": "frames", "clips": ["table"], "frames_per_clip": 4, "size": [480, 288],
         "subset_size": 4, "preset": "mixed"}


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh model cache holding the FP32 CenterFace (copied from the user's cache, fetched there once)
    and the INT8 one made from it by ``SMALL``, which the registry entry asks for while the tests run."""
    fp32 = models.resolve("centerface")
    root = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FLOWPIPE_CACHE", str(root))
        shutil.copy(fp32, models.cached_path("centerface"))
        mp.setitem(models.entry("centerface_int8"), "quantize", dict(SMALL))
        quantize("centerface_int8")
        yield root / "models"


def _faces(model_path: Path, tensor: np.ndarray, threshold: float = 0.6) -> np.ndarray:
    """CenterFace's faces at ``threshold`` or more in ``tensor`` ([1,3,H,W]), in tensor pixels, after NMS."""
    core = ov.Core()
    model = core.read_model(str(model_path))
    model.reshape({model.inputs[0].get_any_name(): list(tensor.shape)})
    out = core.compile_model(model, "CPU")(tensor)
    by_ch: dict[int, list[np.ndarray]] = {}
    for o in out.values():
        by_ch.setdefault(o.shape[1], []).append(o)
    heat, (scale, offset) = by_ch[1][0][0, 0], (by_ch[2][0][0], by_ch[2][1][0])
    r, c = np.nonzero(heat >= threshold)
    s0, s1 = np.exp(scale[0, r, c]) * 4, np.exp(scale[1, r, c]) * 4
    x1, y1 = (c + offset[1, r, c] + 0.5) * 4 - s1 / 2, (r + offset[0, r, c] + 0.5) * 4 - s0 / 2
    boxes = np.stack([x1, y1, x1 + s1, y1 + s0], 1)
    return boxes[nms(boxes, heat[r, c].astype(np.float64), 0.3)]


def test_the_ir_is_quantized_and_says_what_it_was_made_from(cache: Path) -> None:
    xml = cache / "centerface_int8.xml"
    ops = quantized_ops(ov.Core().read_model(str(xml)))
    assert ops["FakeQuantize"] >= 20 and ops["int8_constants"] >= 20, ops
    assert quantized_ops(ov.Core().read_model(str(cache / "centerface.onnx"))) == {"FakeQuantize": 0,
                                                                                  "int8_constants": 0}
    meta = json.loads((cache / "centerface_int8.json").read_text())
    assert meta["source_sha256"] == models.entry("centerface")["sha256"]
    assert meta["recipe"] == SMALL and meta["calibration_inputs"] == 4 and meta["calibration_shape"] == [1, 3, 288, 480]
    assert "table" not in meta["held_out_clips"] and "table_tilt" in meta["held_out_clips"]


@pytest.mark.parametrize(("clip_name", "size", "at_least"), [("table_tilt", (960, 544), 4), ("carphone", (192, 160), 1)])
def test_int8_finds_the_faces_fp32_finds_on_held_out_clips(cache: Path, clip_name: str, size: tuple[int, int],
                                                          at_least: int) -> None:
    """Held out from calibration, at sizes it was not calibrated at (the graph reshapes it per run)."""
    c = clip(clip_name)
    for i in (0, len(c.frames) // 2):
        tensor = letterboxed(c.frames[i], size)
        fp32, int8 = _faces(cache / "centerface.onnx", tensor), _faces(cache / "centerface_int8.xml", tensor)
        assert len(fp32) >= at_least, (clip_name, i, len(fp32))
        iou = iou_matrix(fp32, int8)
        assert iou.shape == (len(fp32), len(int8))
        assert (iou.max(1) >= 0.5).all() and (iou.max(0) >= 0.5).all(), (clip_name, i, fp32, int8)


def test_a_stale_model_is_made_again(cache: Path, monkeypatch: pytest.MonkeyPatch,
                                     caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("FLOWPIPE_CACHE", str(cache.parent))
    monkeypatch.setitem(models.entry("centerface_int8"), "quantize", dict(SMALL))
    meta_path = cache / "centerface_int8.json"
    assert models.quantized_current("centerface_int8")
    assert not models.quantized_current("centerface_int8", SMALL | {"subset_size": 8})  # other settings
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps(meta | {"source_sha256": "0" * 64}))  # made from other bytes
    assert not models.quantized_current("centerface_int8")
    with pytest.raises(FileNotFoundError, match="flowpipe models quantize centerface_int8"):
        models.resolve("centerface_int8", fetch=False)
    with caplog.at_level(logging.INFO, logger="flowpipe.models"):
        path = models.resolve("centerface_int8")  # the quantizer, in a child process
    assert path == cache / "centerface_int8.xml" and models.quantized_current("centerface_int8")
    made = json.loads(meta_path.read_text())
    assert made["source_sha256"] == models.entry("centerface")["sha256"] and made["recipe"] == SMALL
    lines = [r.getMessage() for r in caplog.records if "quantized centerface" in r.getMessage()]
    assert len(lines) == 1 and " s (flowpipe models quantize centerface_int8)" in lines[0], lines
    (cache / "centerface_int8.bin").write_bytes(b"not the weights")  # the files the JSON records, or made again
    assert not models.quantized_current("centerface_int8")
    models.resolve("centerface_int8")
    assert models.quantized_current("centerface_int8")


def test_a_graph_names_the_int8_model(cache: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FLOWPIPE_CACHE", str(cache.parent))
    monkeypatch.setitem(models.entry("centerface_int8"), "quantize", dict(SMALL))
    c = clip("table_tilt")
    c.frames, c.faces = c.frames[:8], c.faces[:8]
    video = c.write(tmp_path / "table.mp4")
    spec = load_graph(ROOT / "graphs" / "face_blur.yaml", {
        "input": str(video), "output": str(tmp_path / "blur.mp4"), "metadata": str(tmp_path / "faces.jsonl"),
        "device": "CPU", "model": "centerface_int8", "look_model": "centerface_int8"})
    res = run(spec)
    assert res.ok, res.error
    assert res.frames == {"in": 8, "out": 8, "dropped": 0, "failed": 0}
    lines = [json.loads(line) for line in (tmp_path / "faces.jsonl").read_text().splitlines()]
    for rec, truth in zip(lines, c.faces):
        found = np.array([o["box"] for o in rec["objects"]]).reshape(-1, 4)
        iou = iou_matrix(np.array(list(truth.values())), found)
        assert (iou.max(1) >= 0.3).sum() >= len(truth) - 1, (rec["frame"], len(truth), len(found))


def test_calibrated_on_the_users_footage_and_kept_as_made(cache: Path, monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--calib VIDEO`` calibrates on the user's own video (no evaluation clip); the model made so is the one
    the registry name gives from then on, not made again from the evaluation clips; a recipe that crops marked
    faces is refused with ``--calib`` in one line."""
    from flowpipe.cli import main
    from flowpipe.sample import sample_path

    mine = tmp_path / "cache"
    shutil.copytree(cache.parent, mine)
    monkeypatch.setenv("FLOWPIPE_CACHE", str(mine))
    monkeypatch.setitem(models.entry("centerface_int8"), "quantize", dict(SMALL))
    video = sample_path("sample")
    assert main(["models", "quantize", "centerface_int8", "--calib", str(video), "--force"]) == 0
    said = capsys.readouterr().out
    assert f"4 calibration inputs [1, 3, 288, 480] from {video.resolve()}" in said, said
    meta = json.loads(models.metadata_path("centerface_int8").read_text())
    assert meta["recipe"]["calib"] == str(video.resolve()) and "clips" not in meta["recipe"]
    assert "held_out_clips" not in meta and meta["calibration_footage"] == str(video.resolve())
    assert quantized_ops(ov.Core().read_model(str(models.cached_path("centerface_int8"))))["FakeQuantize"] >= 20
    assert models.quantized_current("centerface_int8")  # what a graph naming it gets, as made
    assert models.resolve("centerface_int8", fetch=False) == models.cached_path("centerface_int8")
    faces = dict(SMALL, calibrate="faces")
    assert main(["models", "quantize", "centerface_int8", "--calib", str(video), "--recipe", json.dumps(faces)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: model 'centerface_int8': calibrate: faces crops marked faces, which footage of your own "
                   "does not have; --calib takes frames recipes only (calibrate: frames)"], err


def _tiny_yolo_export(folder: Path, size: int = 64) -> Path:
    """A tiny YOLOv8-style detector as ultralytics' OpenVINO export writes it: a two-convolution net (an 8x8 grid
    at stride 8) built with the ONNX helper, [1, 3, 64, 64] in, [1, 4+2, 64] out (centre and size in pixels,
    two class scores), saved as an IR with the Model API's model_info ultralytics sets and metadata.yaml beside
    it. Seeded weights: the same boxes every time."""
    import onnx
    import yaml
    from onnx import TensorProto, helper, numpy_helper

    r, g, classes = np.random.default_rng(0), size // 8, 2
    ys, xs = np.mgrid[0:g, 0:g].astype(np.float32)
    consts = {"w1": r.normal(0, 0.3, (8, 3, 8, 8)), "b1": np.zeros(8), "w2": r.normal(0, 1.0, (4 + classes, 8, 1, 1)),
              "b2": np.array([0, 0, 0, 0, -2.5, -2.5]), "grid": np.stack([(xs + 0.5) * 8, (ys + 0.5) * 8])[None],
              "eight": [8.0], "span": [24.0], "least": [8.0]}
    inits = [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in consts.items()]
    inits += [numpy_helper.from_array(np.array([2, 2, classes]), "split"),
              numpy_helper.from_array(np.array([1, 4 + classes, g * g]), "shape")]
    steps = [("Conv", ["images", "w1", "b1"], "c1", {"strides": [8, 8]}), ("Relu", ["c1"], "f", {}),
             ("Conv", ["f", "w2", "b2"], "h", {}), ("Tanh", ["xy"], "t", {}), ("Mul", ["t", "eight"], "off", {}),
             ("Add", ["grid", "off"], "cxy", {}), ("Sigmoid", ["wh"], "s", {}), ("Mul", ["s", "span"], "s2", {}),
             ("Add", ["s2", "least"], "bwh", {}), ("Sigmoid", ["cls"], "p", {}),
             ("Concat", ["cxy", "bwh", "p"], "all", {"axis": 1}), ("Reshape", ["all", "shape"], "output0", {})]
    nodes = [helper.make_node(op, ins, [out], **kw) for op, ins, out, kw in steps]
    nodes.insert(3, helper.make_node("Split", ["h", "split"], ["xy", "wh", "cls"], axis=1))
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("images", TensorProto.FLOAT,
                                                                           [1, 3, size, size])],
                              [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 4 + classes, g * g])],
                              inits)
    folder.mkdir(parents=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(folder / "tiny.onnx"))
    model = ov.Core().read_model(str(folder / "tiny.onnx"))
    for key, value in {"model_type": "YOLO", "reverse_input_channels": True, "pad_value": 114, "scale_values": [255.0],
                       "iou_threshold": 0.7, "labels": ["person", "car"],
                       "resize_type": "fit_to_window_letterbox"}.items():
        model.set_rt_info(value, ["model_info", key])
    ov.save_model(model, str(folder / "tiny.xml"), compress_to_fp16=False)
    (folder / "tiny.onnx").unlink()
    (folder / "metadata.yaml").write_text(yaml.safe_dump({
        "description": "tiny", "stride": 8, "task": "detect", "batch": 1, "imgsz": [size, size],
        "names": {0: "person", 1: "car"}}))
    return folder


def test_a_model_of_ones_own_is_quantized_with_its_own_preprocessing_and_compared_on_held_out_frames(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``flowpipe models quantize PATH --calib VIDEO``: a YOLOv8-style export folder of one's own (a tiny conv net)
    calibrated on the sample clip through the preprocessing its metadata says, every 5th picture held out; the
    INT8 IR (quantized convolutions) goes to the export folder ultralytics would name, with the model_info and
    metadata.yaml of the source, so graphs/detect.yaml runs it with no more keys; its detections are compared
    with FP32's on the held-out pictures, and the figures are in range."""
    from flowpipe import exported, load_graph, run
    from flowpipe.cli import main
    from flowpipe.cli.quantize import agreement_table
    from flowpipe.quantize import held_out
    from flowpipe.sample import sample_path

    rest, held = held_out(150)
    assert held[:3] == [4, 9, 14] and len(held) == 30 and not set(rest) & set(held) and len(rest) + len(held) == 150
    source = _tiny_yolo_export(tmp_path / "tiny_openvino_model")
    video = sample_path("sample")
    assert main(["models", "quantize", str(source), "--calib", str(video), "--frames", "8", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    int8 = tmp_path / "tiny_int8_openvino_model" / "tiny.xml"
    assert report["int8"] == str(int8) and int8.is_file() and int8.with_suffix(".bin").is_file()
    ops = quantized_ops(ov.Core().read_model(str(int8)))
    assert ops["FakeQuantize"] >= 2 and ops["int8_constants"] >= 2, ops  # both convolutions
    assert quantized_ops(ov.Core().read_model(str(source / "tiny.xml"))) == {"FakeQuantize": 0, "int8_constants": 0}

    def model_info(path: Path) -> dict:
        return {k: v.astype(str) for k, v in ov.Core().read_model(str(path)).get_rt_info()["model_info"].items()}

    assert model_info(int8) == model_info(source / "tiny.xml") and model_info(int8)["labels"] == "person car"
    assert (int8.parent / "metadata.yaml").read_text() == (source / "metadata.yaml").read_text()
    info, shape, _ = exported.read_file(int8)
    assert info.labels == ["person", "car"] and exported.preprocessing(info, shape).size == (64, 64)
    assert report["calibration"] == {"footage": str(video.resolve()), "pictures": 150, "calibrated_on": 8}
    assert report["calibration_shape"] == [1, 3, 64, 64]
    assert report["held_out"] == {"every": 5, "pictures": 30, "compared": 30}
    a = report["agreement"]
    assert a["frames"] == 30 and a["fp32_boxes"] >= 30 and a["matched"] + a["missed"] == a["fp32_boxes"], a
    assert a["matched"] + a["extra"] == a["int8_boxes"] and 0.8 <= a["matched_share"] <= 1, a
    assert 0.5 <= a["mean_iou"] <= 1 and 0 <= a["mean_score_difference"] < 0.1, a
    table = agreement_table(report).splitlines()
    assert table[0].startswith("INT8 against FP32 on 30 held-out pictures (pictures 5, 10, 15, ... of the footage, "
                               "never calibrated on)") and len(table) == 7, table
    assert table[2] == f"  matched by INT8          {a['matched']}  ({a['matched_share']:.1%})", table

    spec = load_graph(ROOT / "graphs" / "detect.yaml", {
        "input": str(video), "model": str(int8.parent), "device": "CPU", "output": str(tmp_path / "out.mp4"),
        "metadata": str(tmp_path / "out.jsonl")})
    res = run(spec, max_frames=6)
    assert res.ok, res.error
    seen = [o for line in (tmp_path / "out.jsonl").read_text().splitlines() for o in json.loads(line)["objects"]]
    assert seen and {o["label"] for o in seen} <= {"person", "car"}, seen


def test_a_model_added_to_this_host_is_quantized_by_its_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """``flowpipe models add NAME PATH`` then ``flowpipe models quantize NAME --calib VIDEO``: the added model is
    quantized as its file is (its own preprocessing, the held-out comparison), not refused as a registry entry
    with no recipe."""
    from flowpipe.cli import main
    from flowpipe.sample import sample_path

    monkeypatch.setenv("FLOWPIPE_CACHE", str(tmp_path / "cache"))
    source = _tiny_yolo_export(tmp_path / "mine_openvino_model")
    assert main(["models", "add", "mine", str(source)]) == 0
    capsys.readouterr()
    assert main(["models", "quantize", "mine", "--calib", str(sample_path("sample")), "--frames", "4",
                 "--hold-out", "15", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    # beside the file the registry names (the export folder's .xml)
    assert report["int8"] == str(source / "tiny_int8.xml") and Path(report["int8"]).is_file(), report
    assert report["held_out"]["every"] == 15 and report["agreement"]["fp32_boxes"] > 0

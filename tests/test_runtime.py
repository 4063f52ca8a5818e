"""The restructured runtime: memory contracts resolved before open, per-run state, isolation per node type,
and the defects the old single-process runtime had (each reproduced before it was fixed)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

from flowpipe import Frame, GraphError, Runner, load_graph
from flowpipe.accel import devices
from flowpipe.frame import Detection, Placement, TensorLayout
from flowpipe.registry import registry
from flowpipe.testing import feed, run_yaml

HAS_OPENCL = any(d["usable"] for p in devices().opencl.platforms() for d in p["devices"])


def _graph(text: str):
    return load_graph("<test>", text=textwrap.dedent(text))


# -- memory contracts --------------------------------------------------------------------------------------
def test_a_passthrough_between_preprocess_and_inference_keeps_batch_slots_and_zero_copy() -> None:
    """The contract flows through a node that forwards packets: the preprocess still writes each frame
    into its slot of the inference's batch buffer, and the model is reshaped to the declared tensor."""
    text = """
        nodes:
          - {id: src, type: synthetic_source, config: {count: 24, width: 320, height: 240}}
          - {id: pre, type: preprocess, inputs: src.frame,
             config: {size: [192, 192], color: RGB, layout: NHWC, backend: cpu}}
          - {id: hop, type: passthrough, inputs: pre.tensor}
          - {id: det, type: inference, inputs: hop.out, config: {model: blazeface_full, device: CPU, batch: 4}}
          - {id: out, type: null_sink, inputs: det.tensors}
    """
    res = Runner(_graph(text)).run()
    assert res.ok, res.error
    assert res.frames == {"in": 24, "out": 24, "dropped": 0, "failed": 0}
    assert res.contracts["pre.tensor"]["batch_slots"] == 4 and res.contracts["pre.tensor"]["consumers"] == ["hop"]
    assert res.inference["inference.det"]["input_binding"] == "host tensor, batch of 4 written in place"
    assert res.nodes["pre"]["writes"] == "slots of a batch of 4"
    assert sum(e["copies"] for e in res.edges.values()) == 0


def test_consumers_that_disagree_get_host_memory_and_the_run_says_why() -> None:
    text = """
        nodes:
          - {id: src, type: synthetic_source, config: {count: 6, width: 160, height: 120}}
          - {id: pre, type: preprocess, inputs: src.frame, config: {size: [192, 192], layout: NHWC, backend: cpu}}
          - {id: a, type: inference, inputs: pre.tensor, config: {model: blazeface_full, device: CPU, batch: 2}}
          - {id: b, type: inference, inputs: pre.tensor, config: {model: blazeface_full, device: CPU}}
          - {id: sa, type: null_sink, inputs: a.tensors}
          - {id: sb, type: null_sink, inputs: b.tensors}
    """
    res = Runner(_graph(text)).run()
    assert res.ok, res.error
    c = res.contracts["pre.tensor"]
    assert c["placement"] == "host" and "batch_slots" not in c and sorted(c["consumers"]) == ["a", "b"]
    assert res.frames["out"] == 6


def test_a_node_whose_contract_fails_is_named() -> None:
    text = """
        nodes:
          - {id: src, type: synthetic_source, config: {count: 2}}
          - {id: pre, type: preprocess, inputs: src.frame, config: {backend: opencl, opencl_device: no-such-device}}
          - {id: out, type: null_sink, inputs: pre.tensor}
    """
    res = Runner(_graph(text)).run()
    assert res.exit_code == 1 and re.match(r"<test>:\d+: " + re.escape("node 'pre' (preprocess): memory contract:"), str(res.error))
    assert res.frames["in"] == 0


# -- defect 1: OpenCL preprocessing of frames that do not come from a pool -----------------------------------
@pytest.mark.skipif(not HAS_OPENCL, reason="no usable OpenCL device")
def test_opencl_preprocess_of_unpooled_frames_does_not_grow_memory() -> None:
    """``Frame.buffer`` used to mean "the first lease", which for an unpooled frame is its tensor's lease:
    a USE_HOST_PTR buffer was cached per frame address forever (~6 MB per 1080p frame). Peak RSS of a
    child process running 150 unpooled 1080p frames stays within 350 MB of one running 10."""
    code = textwrap.dedent("""
        import resource, sys
        from flowpipe import Runner, load_graph
        n = int(sys.argv[1])
        spec = load_graph("<t>", text=f'''
        nodes:
          - {{id: src, type: synthetic_source, config: {{count: {n}, width: 1920, height: 1080, pool: false}}}}
          - {{id: pre, type: preprocess, inputs: src.frame, config: {{size: [256, 256], backend: opencl}}}}
          - {{id: out, type: null_sink, inputs: pre.tensor}}
        ''')
        res = Runner(spec).run()
        assert res.ok and res.frames["out"] == n, res.error
        print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
    """)
    peak = {n: int(subprocess.run([sys.executable, "-c", code, str(n)], capture_output=True, text=True,
                                  check=True, timeout=300).stdout.split()[-1]) for n in (10, 150)}
    assert peak[150] - peak[10] < 350, peak  # the leak: ~6 MB x 140 frames = 840 MB more


# -- defect 3: two graphs in one process ---------------------------------------------------------------------
def test_two_graphs_in_one_process_keep_their_own_counts() -> None:
    text = """
        nodes:
          - {id: src, type: synthetic_source, config: {count: 400, width: 32, height: 24, stream: STREAM}}
          - {id: a, type: passthrough, workers: 3, inputs: src.frame}
          - {id: b, type: passthrough, inputs: a.out}
          - {id: out, type: null_sink, inputs: b.out}
    """
    results = {}

    def go(name: str) -> None:
        results[name] = Runner(_graph(text.replace("STREAM", name))).run()

    threads = [threading.Thread(target=go, args=(n,)) for n in ("x", "y")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for res in results.values():
        assert res.ok
        assert res.frames == {"in": 400, "out": 400, "dropped": 0, "failed": 0}
        assert {e: v["frames"] for e, v in res.edges.items()} == {"src->a": 400, "a->b": 400, "b->out": 400}


def test_feeds_and_collections_belong_to_the_run() -> None:
    text = """
        nodes:
          - {id: src, type: list_source, config: {feed: items}}
          - {id: keep, type: collect, config: {into: kept}, inputs: src.frame}
    """
    spec = _graph(text)
    a = Runner(spec, feeds={"items": [np.zeros((2, 2, 3), np.uint8)] * 3}).run()
    b = Runner(spec, feeds={"items": [np.zeros((2, 2, 3), np.uint8)] * 5}).run()
    assert len(a.collected["kept"]) == 3 and len(b.collected["kept"]) == 5
    missing = Runner(spec).run()
    assert "no in-memory feed named 'items' in this run" in str(missing.error)


# -- defect 4: restart with several workers --------------------------------------------------------------------
def test_restart_waits_until_no_other_worker_is_inside_the_node() -> None:
    """``on_error: restart`` closes and reopens the one instance every worker shares; the node fails any
    frame that reaches it while it is closed or half-open, so a restart racing other workers shows up as
    extra failures (the node counts what it saw)."""
    res = run_yaml("""
        plugins: [fp_testnodes]
        nodes:
          - {id: src, type: synthetic_source, config: {count: 120, width: 16, height: 16}}
          - {id: fan, type: test_streams, config: {streams: 4}, inputs: src.frame}
          - {id: w, type: test_reopen, config: {fail_on: [10, 40, 70]}, workers: 4, on_error: restart,
             restarts: 10, inputs: fan.out}
          - {id: out, type: null_sink, inputs: w.out}
    """)
    assert res.ok, res.error
    assert res.frames == {"in": 120, "out": 117, "dropped": 0, "failed": 3}
    assert res.nodes["w"]["restarts"] == 3 and res.nodes["w"]["closed_hits"] == 0


# -- isolation: process, per node type ---------------------------------------------------------------------------
ISOLATED = {  # the node under test (id n) with isolation: process, after src -> pre -> det -> faces (None: not run)
    "blazeface_decode": "{id: n, type: blazeface_decode, isolation: process, inputs: det.tensors}",
    # decoders of models no wheel ships: hand-made tensors, in test_decoders_run_in_a_worker_process
    "classify_topk": None, "db_decode": None, "ssd_decode": None, "yolov8_decode": None, "detect_decode": None,
    "centerface_decode": None, "blazeface_check": None, "centerface_check": None,  # the same, hand-made maps
    "class_check": None,
    "retinaface_decode": None, "movenet_heads": None,
    "blur": "{id: n, type: blur, isolation: process, inputs: faces.detections}",
    "overlay": "{id: n, type: overlay, isolation: process, inputs: faces.detections}",
    "tracker": "{id: n, type: tracker, isolation: process, inputs: faces.detections}",
    "animal_faces": "{id: n, type: animal_faces, isolation: process, inputs: faces.detections}",
    "analytics": "{id: n, type: analytics, isolation: process, config: {zones: {z: {polygon: [[0, 0], [1, 0], [1, 1]]}}}, "
                 "inputs: faces.detections}",
    "passthrough": "{id: n, type: passthrough, isolation: process, inputs: src.frame}",
    "null_sink": "{id: n, type: null_sink, isolation: process, inputs: src.frame}",
    "jsonl": "{id: n, type: jsonl, isolation: process, config: {path: OUT/m.jsonl}, inputs: faces.detections}",
    "video_writer": "{id: n, type: video_writer, isolation: process, config: {path: OUT/v.mp4, records: encoded}, "
                    "inputs: src.frame}",
    "mjpeg_preview": "{id: n, type: mjpeg_preview, isolation: process, config: {port: 0}, inputs: src.frame}",
    "mqtt": None,  # needs a broker: tests/test_mqtt.py::test_mqtt_runs_in_a_worker_process
}
REFUSED = {"synthetic_source", "list_source", "video_source", "inference", "preprocess", "collect", "prometheus",
           "preview"}


def test_every_builtin_node_type_has_an_isolation_case() -> None:
    builtin = {n for n, cls in registry().items() if cls.__module__.startswith("flowpipe_nodes.")}
    assert builtin == set(ISOLATED) | REFUSED


@pytest.mark.parametrize("ntype", sorted(REFUSED))
def test_isolation_is_refused_by_validation_with_a_reason(ntype: str) -> None:
    cls = registry()[ntype]
    inputs = "" if not cls.inputs else f", inputs: {{{next(iter(cls.inputs))}: src.frame}}"
    config = {"video_source": "{uri: sample}", "list_source": "{feed: x}", "collect": "{into: x}",
              "inference": "{model: blazeface_short}"}.get(ntype, "{}")
    text = f"""
        nodes:
          - {{id: src, type: synthetic_source, config: {{count: 1}}}}
          - {{id: n, type: {ntype}, isolation: process, config: {config}{inputs}}}
    """
    with pytest.raises(GraphError, match=rf"node 'n' \({ntype}\): isolation: process is not available for "
                                         rf"{ntype}: .+; expected isolation: thread"):
        _graph(text)


@pytest.mark.parametrize("ntype", sorted(k for k, v in ISOLATED.items() if v))
def test_isolation_runs_in_a_worker_process(ntype: str, tmp_path) -> None:
    node = ISOLATED[ntype].replace("OUT", str(tmp_path))  # type: ignore[union-attr]
    text = f"""
        nodes:
          - {{id: src, type: synthetic_source, config: {{count: 12, width: 64, height: 48}}}}
          - {{id: pre, type: preprocess, config: {{size: [192, 192], color: RGB, layout: NHWC, backend: cpu,
                                                   mean: [127.5, 127.5, 127.5], scale: [127.5, 127.5, 127.5]}},
             inputs: src}}
          - {{id: det, type: inference, config: {{model: blazeface_full, device: CPU}}, inputs: pre}}
          - {{id: faces, type: blazeface_decode, inputs: det.tensors}}
          - {node}
    """
    res = Runner(_graph(text)).run()
    assert res.ok, res.error
    assert res.frames == {"in": 12, "out": 12, "dropped": 0, "failed": 0}
    assert res.nodes["n"]["process"]["pid"] != os.getpid()


def _decoder_cases() -> dict[str, tuple[dict[str, np.ndarray], TensorLayout | None, str]]:
    """Hand-made outputs of models no wheel ships, with what each decoder must find in them."""
    letterbox = TensorLayout("pre", (100, 100), (Placement((0, 0, 200, 100), 100, 50, 0, 25),))
    ssd = np.array([[[[0, 1, 0.9, 0.1, 0.2, 0.5, 0.6], [-1, 0, 0, 0, 0, 0, 0]]]], np.float32)
    yolo = np.zeros((1, 6, 3), np.float32)  # 3 candidates, 2 classes: one above the threshold
    yolo[0, :, 1] = [50, 50, 20, 10, 0.1, 0.8]
    prob = np.zeros((1, 1, 100, 100), np.float32)
    prob[0, 0, 40:60, 10:90] = 0.9  # one text line
    heat, size = np.zeros((1, 1, 25, 25), np.float32), np.full((1, 2, 25, 25), np.log(5.0), np.float32)
    heat[0, 0, 12, 12] = 0.9  # one face of 20x20 tensor pixels centred at (50, 50)
    centerface = {"heat": heat, "scale": size, "offset": np.zeros((1, 2, 25, 25), np.float32),
                  "marks": np.zeros((1, 10, 25, 25), np.float32)}
    looks = np.full((2, 896, 1), -4.0, np.float32)  # two crops: a face in the middle of the second only
    looks[1, 300, 0] = 3.0  # anchor 300 (stride 8: cell 150 of 16x16, near the middle)
    # two crops at 128x128 (heat 32x32): the first around a face at the picture's corner, slid inside (its
    # centre a quarter of the way in), the second around one in the open (in the middle)
    heat2 = np.full((2, 1, 32, 32), 0.05, np.float32)
    heat2[0, 0, 8, 8], heat2[0, 0, 16, 16] = 0.9, 0.3
    crops = (Placement((0, 0, 40, 40), 128, 128, 0, 0), Placement((40, 0, 40, 40), 128, 128, 0, 0))
    pose = np.zeros((1, 1, 17, 3), np.float32)  # one person's crop: nose, eyes and ears near its top middle
    pose[0, 0, :5] = [[0.3, 0.5, 0.8], [0.25, 0.45, 0.8], [0.25, 0.55, 0.8], [0.27, 0.4, 0.8], [0.27, 0.6, 0.8]]
    return {
        "movenet_heads": ({"kp": pose}, TensorLayout("pose_pre", (192, 192), (Placement((30, 0, 100, 100), 192, 192,
                                                                                            0, 0),), (0,), 1), "{}"),
        # no crops recorded: each object's place is the middle of its entry
        "blazeface_check": ({"classificators": looks}, TensorLayout("look", (128, 128), (), (1, 0), 2), "{}"),
        "centerface_check": ({"heat": heat2}, TensorLayout("look", (128, 128), crops, (1, 0), 2), "{}"),
        # two crops' quantized scores over 6 classes, the first three animals: the second crop's is 3 of 4
        "class_check": ({"heat": heat2, "scores": np.array([[0, 0, 64, 64, 64, 64], [128, 32, 32, 64, 0, 0],
                                                            [0, 0, 0, 0, 0, 0]], np.uint8)},
                        TensorLayout("kind", (28, 28), (), (1, 0), 2), "{attribute: animal, classes: [0, 2]}"),
        "centerface_decode": (centerface, letterbox, "{}"),
        # one face, nose at the right of its box (turned: widened on the left), one under the threshold
        "retinaface_decode": ({"out": np.array([[0.1, 0.2, 0.5, 0.6, 0.2, 0.3, 0.4, 0.3, 0.45, 0.4, 0.25, 0.5,
                                                 0.4, 0.5, 1.0, 0.95], [0.6, 0.6, 0.7, 0.7, *[0.65] * 10, 1.0, 0.1]],
                                               np.float32)}, letterbox, "{}"),
        "ssd_decode": ({"out": ssd}, letterbox, "{labels: [bg, person]}"),
        "yolov8_decode": ({"out": yolo}, letterbox, "{labels: [car, bus]}"),
        # a model not on this host: the head from the shape and the labels given
        "detect_decode": ({"out": yolo}, letterbox, "{model: gone.onnx, labels: [car, bus]}"),
        "db_decode": ({"out": prob}, letterbox, "{}"),
        "classify_topk": ({"logits": np.array([[0.1, 3.0, -1.0]], np.float32)}, None, "{k: 1, labels: [a, b, c]}"),
    }


@pytest.mark.parametrize("ntype", ["blazeface_check", "centerface_check", "class_check", "centerface_decode",
                                   "classify_topk",
                                   "db_decode", "ssd_decode", "yolov8_decode", "detect_decode", "retinaface_decode",
                                   "movenet_heads"])
def test_decoders_run_in_a_worker_process(ntype: str) -> None:
    """The same hand-made tensors decode to the same result in a worker process as in a thread."""
    tensors, layout, config = _decoder_cases()[ntype]
    got = {}
    for isolation in ("thread", "process"):
        frames = [Frame("s", i, i / 30, np.zeros((100, 200, 3), np.uint8), tensors=dict(tensors), layout=layout,
                        detections=[Detection((10, 10, 30, 30), 0.4, "face"), Detection((50, 10, 70, 30), 0.3, "face")]
                        if ntype == "blazeface_check" else
                        [Detection((50, 10, 70, 30), 0.4, "face"), Detection((0, 0, 20, 20), 0.3, "face")]
                        if ntype in ("centerface_check", "class_check") else
                        [Detection((40, 0, 120, 100), 0.9, "person")]
                        if ntype == "movenet_heads" else [])
                  for i in range(6)]
        res = run_yaml(f"""
            nodes:
              - {{id: src, type: list_source, config: {{feed: {feed(frames)}}}}}
              - {{id: n, type: {ntype}, isolation: {isolation}, config: {config}, inputs: {{tensors: src.frame}}}}
              - {{id: sink, type: collect, config: {{into: dec_{isolation}}}, inputs: n}}
        """)
        assert res.ok, res.error
        assert res.frames == {"in": 6, "out": 6, "dropped": 0, "failed": 0}
        out = res.collected[f"dec_{isolation}"]
        got[isolation] = [([(d.label, [round(v, 3) for v in d.box], d.attributes) for d in f.detections],
                           f.meta.get("classes")) for f in out]
        if isolation == "process":
            assert res.nodes["n"]["process"]["pid"] != os.getpid()
    assert got["process"] == got["thread"]
    assert got["thread"][0][0] or got["thread"][0][1]  # each case finds something
    if ntype == "centerface_check":  # the heat at each face's place in its crop, not at the crop's middle
        assert [round(d[2]["face"], 3) for d in got["thread"][0][0]] == [0.05, 0.9]
    if ntype == "class_check":  # the first detection was the second crop: 3 of its 4 on the animals; a quarter
        assert [round(d[2]["animal"], 3) for d in got["thread"][0][0]] == [0.75, 0.25]
    if ntype == "blazeface_check":  # the first detection was the second crop (objects [1, 0])
        assert [round(d[2]["face"], 3) for d in got["thread"][0][0]] == [round(1 / (1 + np.exp(-3.0)), 3),
                                                                          round(1 / (1 + np.exp(4.0)), 3)]


def test_processes_of_a_run_get_the_environment_python_has_not_what_libraries_set_behind_it() -> None:
    """PoCL sets OCL_ICD_FILENAMES to itself when OpenCL platforms are listed (in the C environment, behind
    os.environ): a shard or device owner started after must not inherit it, or it sees no GPU."""
    import ctypes
    import subprocess

    from flowpipe.runtime.settings import environment_for_children

    libc = ctypes.CDLL(None)
    libc.setenv(b"FLOWPIPE_TEST_SET_BEHIND", b"pocl", 1)
    home = os.environ.get("HOME", "")
    libc.setenv(b"HOME", b"/elsewhere", 1)

    def seen() -> str:
        return subprocess.run(["/bin/sh", "-c", 'echo "$FLOWPIPE_TEST_SET_BEHIND|$HOME"'], capture_output=True,
                              text=True, check=True).stdout.strip()

    assert seen() == "pocl|/elsewhere"  # what a child inherited before
    environment_for_children()
    assert seen() == f"|{home}"


def test_frames_still_in_a_stage_at_a_second_interrupt_are_named_failed_and_counted_in_their_stream(caplog) -> None:
    """Ctrl-C twice: the run stops at once; a frame still inside a stage that does not return in time is
    failed, named (stream and index) in the log, and counted in its stream, so the streams' counts add up to
    the frames that entered."""
    import time

    runner = Runner(_graph("""
        plugins: [fp_testnodes]
        nodes:
          - {id: src, type: synthetic_source, config: {count: 1000, width: 64, height: 48}}
          - {id: slow, type: test_fault, inputs: src.frame, config: {delay_s: 7}}
          - {id: out, type: null_sink, inputs: slow.out}
    """))
    done: list = []
    t = threading.Thread(target=lambda: done.append(runner.run()))
    with caplog.at_level("ERROR", logger="flowpipe"):
        t.start()
        deadline = time.monotonic() + 30
        while runner.account.frames()["in"] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        runner.interrupt()
        runner.interrupt()
        t.join(60)
    (res,) = done
    f = res.frames
    assert res.exit_code == 130 and f["in"] == f["out"] + f["dropped"] + f["failed"] and f["failed"] >= 1, f
    assert sum(res.per_stream.values()) == f["in"], (res.per_stream, f)
    said = [r.getMessage() for r in caplog.records if "in flight when the run stopped" in r.getMessage()]
    assert len(said) == 1 and said[0].endswith("counted as failed: src 0"), said

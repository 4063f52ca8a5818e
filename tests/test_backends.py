"""Accelerator backends (``flowpipe.accel.backends``): a package adds one through the ``flowpipe.backends``
entry-point group with no edit of flowpipe (examples/03_onnxruntime_backend: ONNX Runtime's CPU provider), a
graph names its device as ``BACKEND:DEVICE``, and what goes wrong is one line."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "03_onnxruntime_backend" / "face_blur_onnxruntime.yaml"


def _flowpipe(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "flowpipe.cli", *args], capture_output=True, text=True, timeout=240,
                          env={**os.environ, **(env or {})}, cwd=cwd)


def _package(site: Path, dist: str, entry: str, module: tuple[str, str] | None = None) -> Path:
    """A package installed in ``site`` as pip leaves one: its dist-info naming ``entry`` (``name = module:attr``)
    in the ``flowpipe.backends`` group, and ``module`` (file name, text) beside it where given."""
    info = site / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[flowpipe.backends]\n{entry}\n")
    if module is not None:
        (site / module[0]).write_text(module[1])
    return site


def _installed_here(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``site``'s packages importable in this process, and its backends found again."""
    import importlib

    from flowpipe.accel import devices

    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    monkeypatch.setattr(devices().backends, "_scanned", False)


def _boxes(path: Path) -> list[list[list[float]]]:
    return [[o["box"] for o in json.loads(line)["objects"]] for line in path.read_text().splitlines()]


def _iou(a: list[float], b: list[float]) -> float:
    w, h = min(a[2], b[2]) - max(a[0], b[0]), min(a[3], b[3]) - max(a[1], b[1])
    inter = max(0.0, w) * max(0.0, h)
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def test_a_backend_package_runs_the_detector_and_finds_the_faces_openvino_finds(tmp_path) -> None:
    """CenterFace on ONNX Runtime through the example package, against the same graph on OpenVINO's CPU: the
    same faces in every frame (boxes within float rounding), and --stats names the backend, its device and why."""
    pytest.importorskip("flowpipe_onnxruntime", reason="the example backend (bash scripts/setup.sh --test)")
    runs = {}
    for name, device in (("ort", "onnxruntime:CPU"), ("ov", "CPU")):
        p = _flowpipe("run", str(EXAMPLE), "--max-frames", "40", "--set", f"device={device}",
                      "--set", f"output={tmp_path}/{name}.mp4", "--set", f"metadata={tmp_path}/{name}.jsonl",
                      "--stats", str(tmp_path / f"{name}.json"))
        assert p.returncode == 0, p.stderr[-2000:]
        runs[name] = _boxes(tmp_path / f"{name}.jsonl")
    assert len(runs["ort"]) == len(runs["ov"]) == 40
    assert sum(len(f) for f in runs["ov"]) >= 40  # faces in the sample: something to agree on
    for ort, ov in zip(runs["ort"], runs["ov"]):
        assert len(ort) == len(ov)
        assert all(max(_iou(a, b) for b in ov) > 0.9 for a in ort), (ort, ov)
    section = json.loads((tmp_path / "ort.json").read_text())["inference.detect"]
    assert (section["backend"], section["device"]) == ("onnxruntime", "CPU"), section
    assert "onnxruntime:CPU asked for and present" in section["device_reason"]
    assert json.loads((tmp_path / "ov.json").read_text())["inference.detect"]["backend"] == "openvino"


def test_flowpipe_devices_lists_each_backend_and_an_unknown_device_lists_those_there_are(tmp_path) -> None:
    pytest.importorskip("flowpipe_onnxruntime", reason="the example backend (bash scripts/setup.sh --test)")
    p = _flowpipe("devices", "--json")
    assert p.returncode == 0, p.stderr
    found = json.loads(p.stdout)["backends"]
    assert {"openvino", "opencl", "onnxruntime"} <= set(found)
    assert [d["name"] for d in found["onnxruntime"]["devices"]] == ["CPU"]
    assert found["openvino"]["devices"][0]["memory"][:2] == ["host", "fd-host"]
    p = _flowpipe("run", str(EXAMPLE), "--max-frames", "5", "--set", "device=onnxruntime:GPU",
                  "--set", f"output={tmp_path}/o.mp4", "--set", f"metadata={tmp_path}/o.jsonl")
    assert p.returncode == 1
    assert p.stderr.strip().splitlines()[-1].endswith(
        "face_blur_onnxruntime.yaml:22: node 'detect' (inference): device: backend 'onnxruntime' has no device 'GPU': "
        "its devices: CPU"), p.stderr[-1000:]


def test_a_backend_that_fails_to_load_is_one_line_naming_it_and_why(tmp_path) -> None:
    """A package whose entry point names a module that cannot import: ``flowpipe devices`` lists it with why,
    a graph that names its device fails in one line naming the node and the backend, and a misspelt backend
    is caught at validate with the ones installed."""
    site = _package(tmp_path / "site", "broken-backend", "broken = broken_backend:Broken",
                    ("broken_backend.py", "import a_driver_not_installed  # noqa\n"))
    env = {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    p = _flowpipe("devices", env=env)
    assert p.returncode == 0, p.stderr
    assert ("  broken: backend 'broken' (broken_backend:Broken) failed to load: ModuleNotFoundError: No module named "
            "'a_driver_not_installed'") in p.stdout.splitlines(), p.stdout
    graph = tmp_path / "g.yaml"
    graph.write_text(textwrap.dedent(f"""\
        nodes:
          - {{id: decode, type: video_source, config: {{uri: sample}}}}
          - id: pre
            type: preprocess
            config: {{size: [640, 384], resize: letterbox, color: RGB, layout: NCHW, dtype: f32}}
            inputs: {{frame: decode.frame}}
          - id: detect
            type: inference
            config: {{model: centerface, device: "broken:CPU"}}
            inputs: {{tensor: pre.tensor}}
          - {{id: faces, type: centerface_decode, inputs: {{tensors: detect.tensors}}}}
          - {{id: meta, type: jsonl, config: {{path: {tmp_path}/m.jsonl}}, inputs: {{detections: faces.detections}}}}
        """))
    p = _flowpipe("run", str(graph), "--max-frames", "3", env=env)
    assert p.returncode == 1
    assert p.stderr.strip().splitlines()[-1].endswith(
        "g.yaml:7: node 'detect' (inference): device: backend 'broken' (broken_backend:Broken) failed to load: "
        "ModuleNotFoundError: No module named 'a_driver_not_installed'"), p.stderr[-1000:]
    graph.write_text(graph.read_text().replace("broken:CPU", "brokn:CPU"))
    p = _flowpipe("validate", str(graph), env=env)
    assert p.returncode == 2
    assert "config.device: 'brokn:CPU': expected BACKEND:DEVICE with a backend installed here (did you mean " \
           "'broken'? installed: broken, " in p.stderr, p.stderr


_OWN_BACKEND = '''
import ctypes, mmap, threading
import numpy as np
from flowpipe.accel.backends import BackendDevice, PortSpec

MADE = []  # (address, size) of every buffer this backend made
SEEN = []  # per request: whether its input lay in one of them, and the input's mean


class Block:
    def __init__(self, nbytes):
        self._map = mmap.mmap(-1, nbytes)
        self.size = nbytes
        self.address = ctypes.addressof(ctypes.c_char.from_buffer(self._map))
        MADE.append((self.address, nbytes))

    def array(self, shape, dtype=np.uint8, offset=0):
        dtype = np.dtype(dtype)
        return np.frombuffer(self._map, dtype=dtype, count=int(np.prod(shape)), offset=offset).reshape(shape)

    def close(self):
        pass  # views may outlive the pool in a test; the map goes with the process


class Session:
    def __init__(self, shape):
        self.inputs = [PortSpec("x", tuple(shape), "float32")]
        self.outputs = [PortSpec("mean", (1,), "float32")]
        self.requests = 2

    def start(self, slot, inputs, outputs, done):
        x = inputs["x"]
        at = x.__array_interface__["data"][0]
        SEEN.append((any(a <= at < a + n for a, n in MADE), float(x.mean())))
        outputs["mean"][0] = x.mean()
        threading.Thread(target=done, args=(None,)).start()

    def close(self):
        pass


class OwnMemory:
    name = "ownmem"

    def devices(self):
        return [BackendDevice("CPU", "cpu", ("host", "own"), "memory of its own making")]

    def allocate(self, device, nbytes):
        return Block(nbytes)

    def compile(self, model, device, *, cache_dir, requests, input_shape):
        return Session(input_shape)
'''


def test_a_backend_that_makes_its_own_memory_gets_its_input_written_there(tmp_path, monkeypatch) -> None:
    """A device that declares memory of its backend's own making (``own``) and a backend that allocates it: the
    preprocess writes each frame's tensor into buffers the backend made, and the session is started on views of
    them, no copy between (``--stats``: input memory ``backend``); its results are what the preprocess wrote."""
    import numpy as np

    from flowpipe.testing import collected, feed, run_yaml

    _installed_here(_package(tmp_path / "site", "ownmem-backend", "ownmem = ownmem_backend:OwnMemory",
                             ("ownmem_backend.py", _OWN_BACKEND)), monkeypatch)
    model = tmp_path / "any.onnx"
    model.write_bytes(b"the backend reads no file")
    rng = np.random.default_rng(3)
    frames = [rng.integers(0, 255, (96, 128, 3), np.uint8) for _ in range(6)]
    res = run_yaml(f"""
    nodes:
      - {{id: src, type: list_source, config: {{feed: {feed(frames)}}}}}
      - {{id: pre, type: preprocess, config: {{size: [64, 48], color: RGB, layout: NHWC, dtype: f32, resize: stretch,
          backend: cpu}}, inputs: src.frame}}
      - {{id: det, type: inference, config: {{model: "{model}", device: "ownmem:CPU"}}, inputs: pre.tensor}}
      - {{id: out, type: collect, config: {{into: ownmem}}, inputs: det.tensors}}
    """)
    assert res.ok, res.error
    sec = res.inference["inference.det"]
    assert (sec["backend"], sec["device"], sec["input_memory"]) == ("ownmem", "CPU", "backend")
    assert sec["input_binding"] == "the backend's own memory, in place (the preprocess wrote it there)"
    assert res.edges["pre->det"]["copies"] == 0
    import ownmem_backend  # the module the entry point loaded

    assert [inside for inside, _ in ownmem_backend.SEEN] == [True] * 6
    got = collected("ownmem")
    assert [f.index for f in got] == list(range(6))
    for f, (_, mean) in zip(got, ownmem_backend.SEEN):
        assert float(f.tensors["mean"][0]) == pytest.approx(mean, rel=1e-6)


def test_openvino_is_a_backend_like_any_other_its_session_runs_in_a_graph(tmp_path, monkeypatch) -> None:
    """OpenVINO's backend compiles a model into a ``Session`` (host arrays in, results written into the caller's
    arrays, done from its callback); named through the entry-point group under another name, a graph runs
    BlazeFace through that session and the engine that drives any backend, and gets what the inference node's
    own OpenVINO engine gets."""
    import threading

    import numpy as np

    from flowpipe import models
    from flowpipe.accel.backends import OpenVinoBackend, Session
    from flowpipe.testing import collected, feed, run_yaml

    s = OpenVinoBackend().compile(str(models.resolve("blazeface_short")), "CPU", cache_dir=None, requests=2,
                                  input_shape=None)
    assert isinstance(s, Session) and s.requests == 2
    assert [(p.name, p.shape) for p in s.inputs] == [("input", (1, 128, 128, 3))]
    x = np.random.default_rng(1).random((1, 128, 128, 3), np.float32)
    outs = [{p.name: np.zeros(p.shape, np.dtype(p.dtype)) for p in s.outputs} for _ in range(2)]
    ended = [threading.Event() for _ in range(2)]
    errors: list[BaseException | None] = []
    for slot in (0, 1):
        s.start(slot, {"input": x}, outs[slot], lambda e, slot=slot: (errors.append(e), ended[slot].set()))
    assert all(ev.wait(30) for ev in ended) and errors == [None, None]
    for name in outs[0]:
        assert np.abs(outs[0][name]).sum() > 0 and np.array_equal(outs[0][name], outs[1][name]), name
    s.close()

    _installed_here(_package(tmp_path / "site", "ovsession", "ovsession = flowpipe.accel.backends:OpenVinoBackend"),
                    monkeypatch)
    rng = np.random.default_rng(5)
    frames = [rng.integers(0, 255, (96, 128, 3), np.uint8) for _ in range(5)]
    graph = """
    nodes:
      - {{id: src, type: list_source, config: {{feed: {feed}}}}}
      - {{id: pre, type: preprocess, config: {{size: [128, 128], color: RGB, layout: NHWC, mean: [127.5, 127.5, 127.5],
          scale: [127.5, 127.5, 127.5], resize: letterbox, backend: cpu}}, inputs: src.frame}}
      - {{id: det, type: inference, config: {{model: blazeface_short, device: "{device}"}}, inputs: pre.tensor}}
      - {{id: out, type: collect, config: {{into: {into}}}, inputs: det.tensors}}
    """
    via = run_yaml(graph.format(feed=feed(frames), device="ovsession:CPU", into="ov_session"))
    own = run_yaml(graph.format(feed=feed(frames), device="CPU", into="ov_engine"))
    assert via.ok and own.ok, (via.error, own.error)
    assert (via.inference["inference.det"]["backend"], via.inference["inference.det"]["device"]) == ("openvino", "CPU")
    a, b = collected("ov_session"), collected("ov_engine")
    assert [f.index for f in a] == [f.index for f in b] == list(range(5))
    for fa, fb in zip(a, b):
        for name in ("regressors", "classificators"):
            np.testing.assert_allclose(fa.tensors[name], fb.tensors[name], atol=2e-2)

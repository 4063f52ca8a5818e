"""benchmarks/device_ceilings.py: each device's own ceiling for a graph, reckoned from what a real run of it
inferred a frame and from its models measured alone."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_a_devices_ceiling_is_reckoned_from_the_images_a_frame_the_run_inferred(tmp_path) -> None:
    """face_blur_near.yaml runs BlazeFace on 2x2 tiles and the whole frame: five images a request, a request a
    frame. The run's --stats count them, the model is measured alone at the node's shape of five, and the
    ceiling and the figure are what those numbers give."""
    out = tmp_path / "ceilings.json"
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "device_ceilings.py"), "--graph",
                        str(ROOT / "graphs" / "face_blur_near.yaml"), "--streams", "1", "--frames", "40", "--warmup",
                        "10", "--seconds", "0.5", "--config", "cpu:device=CPU", "--out", str(out)],
                       capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads(out.read_text())
    (c,) = r["configs"]
    assert c["devices"] == ["CPU"] and c["frames"]["in"] == c["frames"]["out"] == 50, c
    (node,) = c["nodes"]
    did = c["inference"]["detect"]["CPU"]
    assert (node["node"], node["model"], node["batch"]) == ("detect", "blazeface_full", 5), node
    assert did["inferences"] == 50 and did["images"] == 250, did  # every frame, five images each
    assert node["images_per_frame"] == pytest.approx(5.0) and node["inferences_per_frame"] == pytest.approx(1.0)
    (rate,) = r["throughputs"]
    assert (rate["model"], rate["shape"], rate["device"]) == ("blazeface_full", [5, 192, 192, 3], "CPU"), rate
    assert rate["images_per_s"] > 0
    ceiling = 1 / (node["images_per_frame"] / rate["images_per_s"])
    assert c["ceilings"]["CPU"] == pytest.approx(ceiling, abs=0.1)
    assert c["of_ceilings"] == pytest.approx(c["fps"] / c["ceilings"]["CPU"], abs=0.001)
    assert 1 <= did["in_flight"] <= did["requests"], did


def _ceilings_module():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import device_ceilings

    return device_ceilings


def test_each_device_a_node_ran_on_is_measured_by_its_own_name_and_the_images_are_summed() -> None:
    """A node over GPU.1 and the CPU counts the images both ran, at the mean shape of its requests; a second
    node on the CPU alone adds to the CPU's ceiling only; each device's ceiling sums every node's cost on it."""
    from types import SimpleNamespace as Ns

    dc = _ceilings_module()
    spec = Ns(nodes=[Ns(id="det", type="inference", config=Ns(model="centerface", model_sha256=None)),
                     Ns(id="look", type="inference", config=Ns(model="blazeface_short", model_sha256=None)),
                     Ns(id="pre", type="preprocess", config=Ns())])
    report = {"processes": 2, "frames": {"in": 100},
              "inference": {
                  "inference.det": {"device": "GPU.1+CPU", "owner_pid": 7, "input": {"name": "x", "shape": "[1,3,64,64]"},
                                    "devices": {"GPU.1": {"device": "GPU.1", "inferences": 30, "images": 30},
                                                "CPU": {"device": "CPU", "inferences": 10, "images": 10}}},
                  "inference.look": {"device": "CPU", "owner_pid": 7, "input": {"name": "y", "shape": "[1..64,128,128,3]"},
                                     "inferences": 20, "images": 70},
                  "inference.idle": {"device": "CPU", "owner_pid": 7, "input": {"name": "z", "shape": "[1,8]"},
                                     "inferences": 0, "images": 0}}}
    det, look = dc.node_loads(report, spec)
    assert (det["devices"], det["images_per_frame"], det["batch"]) == (["CPU", "GPU.1"], 0.4, 1)
    assert (look["devices"], look["images_per_frame"], look["batch"]) == (["CPU"], 0.7, 4)  # 70 / 20, rounded
    assert dc.static_shape(look["shape"], look["batch"]) == [4, 128, 128, 3]
    rates = {("centerface", (1, 3, 64, 64), "GPU.1"): {"images_per_s": 200.0},
             ("centerface", (1, 3, 64, 64), "CPU"): {"images_per_s": 40.0},
             ("blazeface_short", (4, 128, 128, 3), "CPU"): {"images_per_s": 700.0}}
    ceil = dc.ceilings([det], rates, ["CPU", "GPU.1"])
    assert ceil == {"CPU": 100.0, "GPU.1": 500.0}  # 1 / (0.4 / 40), 1 / (0.4 / 200)
    rates[("blazeface_short", (4, 128, 128, 3), "GPU.1")] = {"images_per_s": 700.0}
    both = dc.ceilings([det, look], rates, ["CPU"])
    assert both == {"CPU": pytest.approx(1 / (0.4 / 40 + 0.7 / 700), abs=0.1)}


def test_what_cannot_be_reckoned_is_refused_in_a_line() -> None:
    """A node whose input size follows the picture (preprocessing folded into the model), and a report over
    processes whose node's --stats are one process's (neither the device owner's nor summed over the shards)."""
    from types import SimpleNamespace as Ns

    dc = _ceilings_module()
    with pytest.raises(SystemExit, match=r"an input of \[1,\?,\?,3\]: its size varies with the picture"):
        dc.static_shape("[1,?,?,3]", 1)
    spec = Ns(nodes=[Ns(id="det", type="inference", config=Ns(model="centerface", model_sha256=None))])
    shards = {"processes": 2, "frames": {"in": 10}, "inference": {"inference.det": {
        "device": "CPU", "input": {"name": "x", "shape": "[1,3,64,64]"}, "inferences": 5, "images": 5}}}
    with pytest.raises(SystemExit, match="node 'det' ran in each of 2 processes"):
        dc.node_loads(shards, spec)

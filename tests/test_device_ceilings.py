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

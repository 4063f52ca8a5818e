"""The GPU remote-tensor path, for real: needs OpenVINO's GPU plugin and an OpenCL GPU (the GPU machine).

Run there with: pytest -m gpu tests/test_gpu.py
"""
from __future__ import annotations

import numpy as np
import pytest

from flowpipe import load_graph
from flowpipe.testing import collected, run_spec
from flowpipe_nodes.track import iou_matrix


def _has_gpu() -> bool:
    try:
        from flowpipe.accel import devices

        return "GPU" in devices().openvino.available()
    except Exception:  # noqa: BLE001
        return False


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _has_gpu(), reason="no OpenVINO GPU device here")]

GRAPH = """
nodes:
  - {{id: decode, type: video_source, config: {{uri: sample}}}}
  - id: pre
    type: preprocess
    config: {{size: [192, 192], resize: letterbox, color: RGB, layout: NHWC, mean: [127.5, 127.5, 127.5],
             scale: [127.5, 127.5, 127.5], backend: {backend}}}
    inputs: decode.frame
  - {{id: detect, type: inference, config: {{model: blazeface_full, device: {device}, batch: {batch}}},
     inputs: pre.tensor}}
  - {{id: faces, type: blazeface_decode, config: {{variant: full}}, inputs: detect.tensors}}
  - {{id: out, type: collect, config: {{into: {into}, keep_tensors: false}}, inputs: faces.detections}}
"""


def _run(backend: str, device: str, into: str, batch: int = 1):

    text = GRAPH.format(backend=backend, device=device, into=into, batch=batch)
    res = run_spec(load_graph("<gpu>", text=text), text)
    assert res.ok, res.error
    return res, collected(into)


def _assert_same_faces(pairs) -> None:
    """GPU detections against the CPU reference, frame by frame: >= 95 % of faces at IoU >= 0.8."""
    matched = total = 0
    for g, c in pairs:
        gb = np.array([d.box for d in g.detections]).reshape(-1, 4)
        cb = np.array([d.box for d in c.detections]).reshape(-1, 4)
        total += len(cb)
        if len(gb) and len(cb):
            matched += int((iou_matrix(cb, gb).max(1) >= 0.8).sum())
    assert total > 0 and matched >= 0.95 * total, (matched, total)


@pytest.mark.parametrize("batch", [1, 4])
def test_opencl_preprocess_feeds_gpu_inference_through_remote_tensors(batch: int) -> None:
    res, frames = _run("opencl", "GPU", f"gpu_remote{batch}", batch)
    sec = res.inference["inference.detect"]
    binding = "remote OCL_BUFFER" + (f", batch of {batch} written in place" if batch > 1 else "")
    assert sec["device"] == "GPU" and sec["input_binding"] == binding
    assert sec["config"]["ALLOW_AUTO_BATCHING"] == "NO"  # automatic batching cannot read remote inputs
    assert sum(e["copies"] for e in res.edges.values()) == res.frames["in"]  # the frame upload, counted
    assert res.nodes["pre"]["backend"] == "opencl" and "NVIDIA" in res.nodes["pre"]["opencl_device"]
    _, ref = _run("cpu", "CPU", f"cpu_ref{batch}")
    assert len(frames) == len(ref) == res.frames["in"]
    _assert_same_faces(zip(frames, ref))


def test_host_path_on_gpu_reports_host_binding() -> None:
    res, _ = _run("cpu", "GPU", "gpu_host")
    assert res.inference["inference.detect"]["input_binding"] == "host tensor, shared memory"
    res, _ = _run("cpu", "GPU", "gpu_host4", batch=4)
    assert res.inference["inference.detect"]["input_binding"] == "host tensor, batch of 4 written in place"
    # nothing copied on the host; the plugin uploads each batch to the GPU, counted on the input edge
    assert {n for n, e in res.edges.items() if e["copies"]} == {"pre->detect"}


def test_two_streams_with_a_worker_each_keep_their_own_frames() -> None:
    """Two cameras, one preprocess worker each, sharing one OpenCL queue and batch buffers: every frame's
    detections must be those of its own picture (the CPU reference at the same index)."""

    text = """
nodes:
  - {id: cam_a, type: video_source, config: {uri: sample, stream: a}}
  - {id: cam_b, type: video_source, config: {uri: sample, stream: b, every: 2}}
  - id: pre
    type: preprocess
    workers: 2
    config: {size: [192, 192], resize: letterbox, color: RGB, layout: NHWC, mean: [127.5, 127.5, 127.5],
             scale: [127.5, 127.5, 127.5], backend: opencl}
    inputs: {frame: [cam_a.frame, cam_b.frame]}
  - {id: detect, type: inference, config: {model: blazeface_full, device: GPU, batch: 4}, inputs: pre.tensor}
  - {id: faces, type: blazeface_decode, config: {variant: full}, inputs: detect.tensors}
  - {id: out, type: collect, config: {into: gpu_two, keep_tensors: false}, inputs: faces.detections}
"""
    res = run_spec(load_graph("<gpu>", text=text), text)
    assert res.ok, res.error
    _, ref = _run("cpu", "CPU", "cpu_ref_two")
    by_index = {f.index: f for f in ref}
    frames = collected("gpu_two")
    assert {f.stream for f in frames} == {"a", "b"}
    _assert_same_faces((g, by_index[g.meta["decoded_index"]]) for g in frames)  # 'b' keeps every second


def test_over_processes_the_frame_crosses_and_is_uploaded_once(tmp_path) -> None:
    """Two shards and the device owner: the owner writes the tensor into the GPU's own OpenCL buffers from
    the frame that crossed by fd (the shards' OpenCL buffers cannot cross), so each frame costs one counted
    copy (its upload), as in one process, and the detector binds remote tensors."""
    text = f"""
processes: 2
nodes:
  - {{id: s0, type: video_source, config: {{uri: sample}}}}
  - {{id: s1, type: video_source, config: {{uri: sample, every: 2}}}}
  - id: pre
    type: preprocess
    config: {{size: [192, 192], resize: letterbox, color: RGB, layout: NHWC, mean: [127.5, 127.5, 127.5],
             scale: [127.5, 127.5, 127.5]}}
    inputs: {{frame: [s0.frame, s1.frame]}}
  - {{id: detect, type: inference, config: {{model: blazeface_full, device: GPU}}, inputs: pre.tensor}}
  - {{id: faces, type: blazeface_decode, config: {{variant: full}}, inputs: detect.tensors}}
  - {{id: meta, type: jsonl, config: {{path: {tmp_path}/gpu.jsonl}}, inputs: faces.detections}}
"""
    from flowpipe.runtime.shards import ShardedRun

    # this process opened the GPU for the tests above, through PoCL's listing too (which sets
    # OCL_ICD_FILENAMES behind Python's back): the owner it starts must still see the GPU
    res = ShardedRun(load_graph("<gpu>", text=text), 2).run()
    assert res.ok, res.error
    stats = res.to_json()
    out = res.frames["out"]
    assert out == res.frames["in"] > 0
    assert stats["memory_contracts"]["pre.tensor"]["placement"] == "owner"
    assert stats["inference.detect"]["input_binding"] == "remote OCL_BUFFER"
    owner_pre = stats["nodes"]["pre"]["device_owner"]
    assert owner_pre["backend"] == "opencl" and owner_pre["frames"] == out
    copied = sum(e["bytes_copied"] for e in stats["edges"].values())
    assert copied / out in (1366 * 768 * 3 // 2, 1366 * 768 * 3), stats["edges"]  # I420 or BGR

"""OpenCL preprocessing checked against an OpenCV reference, on PoCL here.

On the GPU machine the same file runs against NVIDIA's OpenCL: FLOWPIPE_TEST_OPENCL=NVIDIA.
"""
from __future__ import annotations

import itertools
import os

import cv2
import numpy as np
import pytest

from flowpipe import Frame
from flowpipe.accel import devices
from flowpipe.testing import run_node

OCL = os.environ.get("FLOWPIPE_TEST_OPENCL", "cpu")
BACKENDS = ["opencl", "cpu"] if any(d["usable"] for p in devices().opencl.platforms() for d in p["devices"]) \
    else ["cpu"]


def _image(w: int, h: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    return cv2.GaussianBlur(img, (5, 5), 2)  # natural-ish content: interpolation errors stay small


def _as(fmt: str, bgr: np.ndarray) -> np.ndarray:
    if fmt == "BGR":
        return bgr
    if fmt == "RGB":
        return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    if fmt == "GRAY":
        return cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY)
    if fmt == "I420":
        return cv2.cvtColor(bgr, cv2.COLOR_BGR2YUV_I420)
    i420 = cv2.cvtColor(bgr, cv2.COLOR_BGR2YUV_I420)  # NV12 = Y plane + interleaved UV
    h, w = bgr.shape[:2]
    u = i420[h:h + h // 4].reshape(-1)
    v = i420[h + h // 4:].reshape(-1)
    uv = np.stack([u, v], 1).reshape(h // 2, w)
    return np.concatenate([i420[:h], uv])


def reference(src: np.ndarray, fmt: str, cfg: dict, backend: str = "cpu") -> np.ndarray:
    """What users write by hand with OpenCV + numpy; YUV for the OpenCL kernel: FFmpeg's own YUV -> BGR (what
    a decoder asked for BGR gives), which the kernel matches to the bit; the host path uses OpenCV's."""
    if fmt in ("NV12", "I420") and backend == "opencl":
        from flowpipe_nodes.media.color import yuv_to_bgr

        return reference(yuv_to_bgr(src, fmt), "BGR", cfg)
    bgr = {"BGR": lambda a: a, "RGB": lambda a: cv2.cvtColor(a, cv2.COLOR_RGB2BGR),
           "GRAY": lambda a: cv2.cvtColor(a, cv2.COLOR_GRAY2BGR),
           "NV12": lambda a: cv2.cvtColor(a, cv2.COLOR_YUV2BGR_NV12),
           "I420": lambda a: cv2.cvtColor(a, cv2.COLOR_YUV2BGR_I420)}[fmt](src)
    h, w = bgr.shape[:2]
    x, y, rw, rh = cfg.get("roi") or (0, 0, w, h)
    bgr = bgr[y:y + rh, x:x + rw]
    ow, oh = cfg["size"]
    if cfg.get("resize") == "letterbox":
        s = min(ow / rw, oh / rh)
        nw, nh = round(rw * s), round(rh * s)
    else:
        nw, nh = ow, oh
    small = cv2.resize(bgr, (nw, nh), interpolation=cv2.INTER_LINEAR)
    color = cfg.get("color", "BGR")
    if color == "RGB":
        small = cv2.cvtColor(small, cv2.COLOR_BGR2RGB)
    elif color == "GRAY":
        small = cv2.cvtColor(small, cv2.COLOR_BGR2GRAY)
    small = small.reshape(nh, nw, -1).astype(np.float32)
    canvas = np.full((oh, ow, small.shape[2]), cfg.get("pad_value", 0.0), np.float32)
    px, py = (ow - nw) // 2, (oh - nh) // 2
    canvas[py:py + nh, px:px + nw] = small
    c = small.shape[2]
    canvas = (canvas - np.array(cfg.get("mean", [0, 0, 0])[:c], np.float32)) / np.array(cfg.get("scale", [1, 1, 1])[:c], np.float32)
    if cfg.get("layout", "NCHW") == "NCHW":
        canvas = canvas.transpose(2, 0, 1)
    return canvas[None]


def run_pre(cfg: dict, frames: list, backend: str):
    body = ", ".join(f"{k}: {v!r}".replace("'", '"').replace("(", "[").replace(")", "]") for k, v in cfg.items())
    return run_node(f"type: preprocess\nconfig: {{{body}, backend: {backend}, opencl_device: {OCL}}}", frames,
                    port="frame")


CASES = [
    # (id, source format, width, height, config, tolerance in output units)
    ("bgr-stretch-nchw-f32", "BGR", 1920, 1080, dict(size=(640, 640), color="RGB", scale=[255, 255, 255]), 1.01 / 255),
    ("bgr-letterbox-nhwc-f32-128", "BGR", 1920, 1080,
     dict(size=(128, 128), resize="letterbox", color="RGB", layout="NHWC", mean=[127.5] * 3, scale=[127.5] * 3), 1.01 / 127.5),
    ("odd-1366x769-letterbox-pad", "BGR", 1366, 769, dict(size=(192, 192), resize="letterbox", pad_value=114), 1.01),
    ("rgb-to-bgr-u8-nhwc", "RGB", 333, 211, dict(size=(97, 61), color="BGR", layout="NHWC", dtype="u8"), 1),
    ("gray-out", "BGR", 640, 480, dict(size=(64, 48), color="GRAY"), 1.01),
    ("gray-in", "GRAY", 641, 479, dict(size=(64, 48), color="RGB"), 1.01),
    ("nv12-to-rgb", "NV12", 1920, 1080, dict(size=(300, 300), color="RGB", layout="NHWC"), 2.01),
    ("i420-to-bgr-f16", "I420", 1280, 720, dict(size=(320, 320), dtype="f16", scale=[255] * 3), 2.01 / 255 + 1e-3),
    ("roi-crop", "BGR", 1280, 720, dict(size=(100, 50), roi=(101, 53, 400, 301), resize="letterbox"), 1.01),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_conversion_matches_opencv_reference(case, backend) -> None:
    _, fmt, w, h, cfg, tol = case
    src = _as(fmt, _image(w, h))
    frame = Frame("s", 0, 0.0, src, fmt)
    out = run_pre(cfg, [frame], backend)
    assert out.result.ok, out.result.error
    got = out.frames[0].tensors["input"].astype(np.float32)
    ref = reference(src, fmt, cfg, backend)
    assert got.shape == ref.shape
    err = np.abs(got - ref)
    if fmt in ("NV12", "I420") and backend == "opencl":  # FFmpeg's conversion to the bit: resampling error only
        tol /= 2
    assert float(err.max()) <= tol, f"max error {err.max()} > {tol}"
    if backend == "opencl":
        assert out.result.nodes["node"]["backend"] == "opencl"
    else:  # OpenCV's own conversion and resampling: the hand-written path's values, to float rounding
        assert float(err.max()) <= (1e-5 if cfg.get("dtype") != "f16" else 2e-3) * max(1.0, float(np.abs(ref).max()))


def test_auto_takes_opencl_on_a_gpu_and_opencv_where_opencl_is_the_cpu() -> None:
    """``backend: auto``: OpenCL where a GPU runs it; where the only OpenCL device is the CPU itself (PoCL),
    OpenCV does the same work on the same cores without OpenCL's runtime threads, and the stats say why."""
    frame = Frame("s", 0, 0.0, _image(320, 240), "BGR")
    out = run_node("type: preprocess\nconfig: {size: [64, 64], resize: letterbox}", [frame], port="frame")
    assert out.result.ok, out.result.error
    stats = out.result.nodes["node"]
    kinds = {d["type"] for p in devices().opencl.platforms() for d in p["devices"] if d["usable"]}
    if kinds - {"CPU"}:
        assert stats["backend"] == "opencl" and "backend_why" not in stats
    elif kinds:
        assert stats["backend"] == "cpu" and stats["backend_why"].startswith("the only OpenCL device is the CPU")
    else:
        assert stats["backend"] == "cpu" and stats["backend_why"].startswith("no OpenCL device")
    # asked for by name, the CPU's OpenCL runs it
    if kinds:
        named = run_node(f"type: preprocess\nconfig: {{size: [64, 64], resize: letterbox, opencl_device: {OCL}}}",
                         [Frame("s", 0, 0.0, _image(320, 240), "BGR")], port="frame")
        assert named.result.ok and named.result.nodes["node"]["backend"] == "opencl"


@pytest.mark.parametrize("backend", BACKENDS)
def test_frames_that_change_size_and_format_midstream(backend) -> None:
    """One node, one thread: each frame's geometry and format differ from the last (a camera renegotiating,
    a playlist). The OpenCL path keeps the kernel arguments it set and re-sends only what changed."""
    cfg = dict(size=(160, 128), resize="letterbox", color="RGB", layout="NHWC", pad_value=7)
    shapes = [("BGR", 1920, 1080), ("NV12", 1280, 720), ("BGR", 640, 480), ("BGR", 1366, 769), ("NV12", 640, 480)]
    srcs = [_as(fmt, _image(w, h, seed=i)) for i, (fmt, w, h) in enumerate(shapes)]
    out = run_pre(cfg, [Frame("s", i, i / 30, s, fmt) for i, (s, (fmt, _, _)) in enumerate(zip(srcs, shapes))], backend)
    assert out.result.ok, out.result.error
    assert len(out.frames) == len(shapes)
    for f, src, (fmt, _, _) in zip(out.frames, srcs, shapes):
        err = np.abs(f.tensors["input"].astype(np.float32) - reference(src, fmt, cfg, backend))
        assert float(err.max()) <= 2.01, f"frame {f.index} ({fmt}): max error {err.max()}"


def test_letterbox_geometry_recorded_for_box_mapping() -> None:
    out = run_pre(dict(size=(192, 192), resize="letterbox"), [_image(1366, 768)], BACKENDS[0])
    layout = out.frames[0].layout
    assert layout is not None and layout.tensor == (192, 192) and len(layout.places) == 1
    geo = layout.places[0]
    assert (geo.roi, geo.new_w, geo.new_h, geo.pad_x, geo.pad_y) == ((0, 0, 1366, 768), 192, 108, 0, 42)
    from flowpipe_nodes.decode import to_source

    # tensor box (0,42)-(192,150) is the whole frame
    box = to_source(Frame("s", 0, 0.0, None, layout=layout), np.array([[0.0, 42.0, 192.0, 150.0]]))
    np.testing.assert_allclose(box, [[0, 0, 1366, 768]], atol=1e-6)


def test_tiles_cover_the_frame_and_batch_the_tensor() -> None:
    out = run_pre(dict(size=(192, 192), resize="letterbox", color="RGB", layout="NHWC",
                       tiles={"grid": [2, 2], "overlap": 0.1, "full_frame": True}), [_image(1366, 768)], BACKENDS[0])
    assert out.result.ok, out.result.error
    t = out.frames[0].tensors["input"]
    layout = out.frames[0].layout
    assert layout is not None
    tiles = layout.places
    assert t.shape == (5, 192, 192, 3) and len(tiles) == 5
    assert tiles[0].roi == (0, 0, 1366, 768) and tiles[4].roi[0] + tiles[4].roi[2] == 1366


def test_tiles_over_a_region_cut_that_part_alone_and_map_back_to_the_frame() -> None:
    """A band across the picture (a counting line's): the grid lies inside it, edge to edge, each tile the
    band's height; a detection in a tile maps back to the frame through the tile's own placement."""
    from flowpipe_nodes.decode import to_source

    out = run_pre(dict(size=(300, 300), resize="stretch", color="RGB", layout="NHWC", dtype="u8",
                       tiles={"grid": [3, 1], "region": [0.0, 0.35, 1.0, 0.85]}), [_image(1280, 720)], BACKENDS[0])
    assert out.result.ok, out.result.error
    frame = out.frames[0]
    assert frame.tensors["input"].shape == (4, 300, 300, 3)
    assert frame.layout is not None
    whole, *tiles = [p.roi for p in frame.layout.places]
    assert whole == (0, 0, 1280, 720)
    assert [t[1] for t in tiles] == [252] * 3 and [t[3] for t in tiles] == [360] * 3  # 0.35-0.85 of 720
    assert tiles[0][0] == 0 and tiles[-1][0] + tiles[-1][2] == 1280  # across the whole width
    assert all(a[0] + a[2] > b[0] for a, b in itertools.pairwise(tiles))  # each overlapping the next
    # the middle tile's whole tensor is its part of the frame
    box = to_source(frame, np.array([[0.0, 0.0, 300.0, 300.0]]), tile=2)
    np.testing.assert_allclose(box, [[tiles[1][0], 252, tiles[1][0] + tiles[1][2], 612]], atol=1e-6)


@pytest.mark.parametrize("region", [[0.5, 0.0, 0.4, 1.0], [0.0, 0.2, 1.0, 1.2]])
def test_a_region_that_is_no_part_of_the_picture_is_rejected(region) -> None:
    from flowpipe import GraphError

    with pytest.raises(GraphError, match=r"region: expected x0, y0, x1, y1 with 0 <= x0 < x1 <= 1"):
        run_pre(dict(size=(64, 64), tiles={"grid": [2, 1], "region": region}), [_image(64, 64)], "cpu")


@pytest.mark.parametrize("backend", BACKENDS)
def test_output_lands_in_pooled_shared_memory_without_copies(backend) -> None:
    img = _image(640, 480)
    out = run_pre(dict(size=(128, 128)), [img] * 3, backend)
    assert out.result.ok
    assert out.result.edges["node->sink"]["copies"] == 3  # the collector copies out, and says so
    src = out.result.edges["src->node"]
    if backend == "opencl" and "unified" not in out.result.nodes["node"].get("opencl_memory", "unified"):
        # a discrete GPU cannot read host pages in place, nor write them: for a host consumer, one counted
        # upload of the frame and one counted read-back of its tensor (128x128x3 f32) per frame
        assert src["copies"] == 6 and src["bytes_copied"] == 3 * (img.nbytes + 128 * 128 * 3 * 4)
    else:
        assert src["copies"] == 0


@pytest.mark.parametrize("fmt, w, h, msg", [
    ("NV12", 640, 481, "NV12 needs even width and height (data of height*3/2 rows), got 640x481 data"),
    ("NV12", 1366, 1153, "got 1366x1153 data"),  # 769 luma rows + 384: odd height
    ("YUYV", 64, 64, "cannot convert format 'YUYV'"),
])
def test_bad_frames_give_clear_errors(fmt, w, h, msg) -> None:
    data = np.zeros((h, w), np.uint8) if fmt == "NV12" else np.zeros((h, w, 2), np.uint8)
    out = run_pre(dict(size=(64, 64)), [Frame("cam", 3, 0.0, data, fmt)], BACKENDS[0])
    assert out.result.exit_code == 1
    assert "node 'node' (preprocess), stream 'cam', frame 3" in str(out.result.error) and msg in str(out.result.error)


def test_roi_outside_frame_is_an_error() -> None:
    out = run_pre(dict(size=(64, 64), roi=(600, 0, 100, 100)), [_image(640, 480)], "cpu")
    assert out.result.exit_code == 1 and "roi (600, 0, 100, 100) is outside the 640x480 frame" in str(out.result.error)


def test_roi_and_tiles_together_rejected_at_validation() -> None:
    from flowpipe import GraphError

    with pytest.raises(GraphError, match="roi, tiles and objects exclude each other: expected one of them, got roi and tiles"):
        run_pre(dict(size=(64, 64), roi=(0, 0, 10, 10), tiles={"grid": [2, 2]}), [_image(64, 64)], "cpu")


@pytest.mark.parametrize("dtype", ["u8", "f32"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_objects_are_cut_as_squares_around_each_detection_padded_where_the_picture_ends(backend, dtype) -> None:
    """One entry per detection in the score range, the highest first: a square of twice its longer side
    around it at 64x64; a face at the picture's left edge keeps its place in the square, the rest padding.
    A frame without any gets no entries."""
    from flowpipe.frame import Detection

    img = _image(320, 240)
    frame = Frame("cam", 0, 0.0, img)
    frame.detections = [Detection((100, 80, 140, 120), 0.3), Detection((0, 100, 20, 140), 0.5),
                        Detection((200, 50, 240, 90), 0.9)]  # above the range: no look
    empty = Frame("cam", 1, 0.0, img)
    norm = {} if dtype == "u8" else dict(mean=[127.5] * 3, scale=[127.5] * 3)
    out = run_pre(dict(size=(64, 64), layout="NHWC", dtype=dtype, objects={"scores": (0.2, 0.6), "max": 4}, **norm),
                  [frame, empty], backend)
    assert out.result.ok, out.result.error
    layout = out.frames[0].layout
    assert layout is not None and layout.filled == 2 and layout.objects == (1, 0) and len(layout.places) == 2
    t = out.frames[0].tensors["input"]
    assert t.shape == (4, 64, 64, 3)
    for entry, (i, (cx, cy, side)) in enumerate([(1, (10, 120, 80)), (0, (120, 100, 80))]):
        k = 64 / side  # the reference: the square mapped onto 64x64, black outside the picture
        m = np.array([[k, 0, 32 - cx * k], [0, k, 32 - cy * k]])
        ref = cv2.warpAffine(img, m, (64, 64), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT)
        got = (t[entry] if dtype == "u8" else t[entry] * 127.5 + 127.5).round().astype(int)
        inside = ref.any(2)
        assert np.abs(got - ref.astype(int))[inside].mean() < 4, (i, np.abs(got - ref.astype(int))[inside].mean())
        assert (got[~inside] == 0).all() if i == 1 else inside.all()
    empty_layout = out.frames[1].layout
    assert empty_layout is not None and empty_layout.filled == 0 and empty_layout.objects == () \
        and out.frames[1].tensors["input"].shape[0] == 0

"""Recordings: H.264 that a real browser plays, files that survive SIGKILL up to their last fragment,
segments on a schedule, H.265, and a hardware encoder that is not here falling back with one line."""
from __future__ import annotations

import functools
import http.server
import itertools
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from flowpipe.testing import run_yaml

pytest.importorskip("av")
FFPROBE = shutil.which("ffprobe")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ROOT = Path(__file__).resolve().parent.parent


def probe(path: Path) -> dict:
    """Codec, size and the frames ffprobe decodes (errors: what it printed)."""
    r = subprocess.run([FFPROBE, "-v", "error", "-count_frames", "-select_streams", "v:0", "-show_entries",
                        "stream=codec_name,width,height,nb_read_frames", "-of", "json", str(path)],
                       capture_output=True, text=True, check=False)
    streams = json.loads(r.stdout or "{}").get("streams") or [{}]
    return dict(streams[0], errors=r.stderr.strip(), frames=int(streams[0].get("nb_read_frames", 0)))


def _synthetic(tmp: Path, writer: str, count: int = 90) -> str:
    return f"""
nodes:
  - {{id: src, type: synthetic_source, config: {{count: {count}, width: 320, height: 240, fps: 30}}}}
  - {{id: rec, type: video_writer, config: {{path: "{tmp}/v.mp4", {writer}}}, inputs: {{frame: src}}}}
"""


@pytest.mark.skipif(FFPROBE is None, reason="ffprobe (scripts/setup.sh installs ffmpeg)")
def test_segments_h265_and_a_missing_hardware_encoder(tmp_path, caplog) -> None:
    res = run_yaml(_synthetic(tmp_path, "segment_seconds: 1"))
    assert res.ok, res.error
    files = sorted(tmp_path.glob("v.*.mp4"))
    assert [f.name for f in files] == ["v.00000.mp4", "v.00001.mp4", "v.00002.mp4"]
    for f in files:  # each segment closed whole: 30 frames of H.264, nothing ffprobe complains of
        got = probe(f)
        assert (got["codec_name"], got["frames"], got["errors"]) == ("h264", 30, "")
    assert res.nodes["rec"]["segments"] == {str(tmp_path / "v.mp4"): 3}

    (tmp_path / "hevc").mkdir()
    res = run_yaml(_synthetic(tmp_path / "hevc", "codec: h265, crf: 30", count=20))
    assert res.ok, res.error
    got = probe(tmp_path / "hevc" / "v.mp4")
    assert (got["codec_name"], got["frames"], got["width"]) == ("hevc", 20, 320)

    (tmp_path / "nv12").mkdir()  # what hardware decoders hand over: encoded without going through BGR
    res = run_yaml(_synthetic(tmp_path / "nv12", "crf: 30", count=15).replace("fps: 30}", "fps: 30, format: NV12}"))
    assert res.ok, res.error
    assert probe(tmp_path / "nv12" / "v.mp4")["frames"] == 15

    (tmp_path / "hw").mkdir()
    with caplog.at_level(logging.WARNING, logger="flowpipe_nodes.media"):
        res = run_yaml(_synthetic(tmp_path / "hw", "encoder: qsv", count=10))
    assert res.ok, res.error
    assert res.nodes["rec"]["encoder"] == {str(tmp_path / "hw" / "v.mp4"): "libx264"}
    (line,) = [r.getMessage() for r in caplog.records if "not available" in r.getMessage()]
    assert line.startswith("encoder h264_qsv is not available here (") and line.endswith("): using libx264")
    assert probe(tmp_path / "hw" / "v.mp4")["frames"] == 10


@pytest.mark.skipif(FFPROBE is None, reason="ffprobe (scripts/setup.sh installs ffmpeg)")
def test_a_recording_survives_sigkill_up_to_its_last_fragment(tmp_path) -> None:
    """kill -9 in the middle of a recording in 2 s segments: every closed segment is whole, the open one plays
    up to its last fragment, and each JSONL record names the segment and frame that hold its picture, a frame
    that is in that file (a record waits for its fragment to be written)."""
    graph = tmp_path / "g.yaml"
    graph.write_text(f"""
nodes:
  - {{id: cam, type: video_source, config: {{uri: sample, loop: -1, realtime: true}}}}
  - {{id: rec, type: video_writer, config: {{path: "{tmp_path}/v.mp4", gop_seconds: 0.5, segment_seconds: 2}},
      inputs: {{frame: cam}}}}
  - {{id: meta, type: jsonl, config: {{path: "{tmp_path}/m.jsonl"}}, inputs: rec}}
""")
    p = subprocess.Popen([sys.executable, "-m", "flowpipe.cli", "run", str(graph)], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "m.jsonl").exists() or len((tmp_path / "m.jsonl").read_bytes().splitlines()) < 100:
            assert time.monotonic() < deadline and p.poll() is None
            time.sleep(0.05)
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)
    finally:
        if p.poll() is None:
            p.kill()
    records = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    segments = sorted(tmp_path.glob("v.*.mp4"))
    assert len(segments) >= 2  # killed in its second segment or later (2 s each, 100 records = 3.3 s)
    in_file: dict[str, list[int]] = {}
    for r in records:  # every record names the segment and the frame in it that hold its picture
        in_file.setdefault(r["recording"]["file"], []).append(r["recording"]["frame"])
    assert sorted(in_file) == [str(f) for f in segments]
    for f in segments:
        frames = in_file[str(f)]
        assert frames == list(range(len(frames)))
        got = probe(f)
        assert got["codec_name"] == "h264" and got["width"] == 1366 and got["errors"] == ""
        if f != segments[-1]:  # closed segments: whole
            assert got["frames"] == len(frames) == 60
        else:  # the open one: playable up to its last fragment, every record's frame in it
            assert 0 < len(frames) <= got["frames"]
    assert all(r["recording"]["in_file"] for r in records)


@pytest.mark.skipif(FFPROBE is None, reason="ffprobe (scripts/setup.sh installs ffmpeg)")
@pytest.mark.slow
def test_the_main_job_s_records_never_name_a_frame_its_recording_lost(tmp_path) -> None:
    """The face-blur job on a looping camera, killed with SIGKILL at random moments (from before its first
    record to a few seconds in): every JSONL record that was written names a frame that ffprobe finds in the
    recording, however early the kill came. (With ``records: encoded`` the first kill already finds records
    of frames the file does not have.)"""
    import random

    import yaml

    g = yaml.safe_load((ROOT / "graphs" / "face_blur.yaml").read_text())
    g["nodes"][0]["config"].update(loop=-1, realtime=True)  # a camera: frames as they come, for ever
    g["processes"] = 1
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(g, sort_keys=False))
    rng = random.Random(7)
    for k, delay in enumerate([0.0, rng.uniform(0.05, 1.0), rng.uniform(0.05, 1.0), rng.uniform(1.0, 3.0)]):
        out, meta = tmp_path / f"v{k}.mp4", tmp_path / f"m{k}.jsonl"
        p = subprocess.Popen([sys.executable, "-m", "flowpipe.cli", "run", str(tmp_path / "g.yaml"), "--set",
                              f"output={out}", "--set", f"metadata={meta}", "--set", "device=CPU"],
                             stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while k and not (meta.exists() and meta.read_bytes().count(b"\n")):  # the first record ...
                assert time.monotonic() < deadline and p.poll() is None
                time.sleep(0.02)
            time.sleep(delay if k else 1.5)  # ... then a random moment (the first run: at 1.5 s, any record or none)
            os.kill(p.pid, signal.SIGKILL)
            p.wait(10)
        finally:
            if p.poll() is None:
                p.kill()
        lines = meta.read_bytes().split(b"\n") if meta.exists() else []
        records = [json.loads(x) for x in lines[:-1]]  # whole lines only: a kill may cut the last
        if k:
            assert records, f"kill {k}: no record"
        playable = probe(out)["frames"] if out.exists() and out.stat().st_size else 0
        for r in records:
            assert r["recording"]["file"] == str(out) and r["recording"]["in_file"]
            assert r["recording"]["frame"] < playable, (k, delay, r["frame"], playable)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (scripts/setup.sh installs it)")
def test_the_main_job_s_video_plays_in_chromium(tmp_path) -> None:
    playwright = pytest.importorskip("playwright.sync_api")
    from flowpipe import load_graph
    from flowpipe.runtime import Runner

    spec = load_graph(str(ROOT / "graphs" / "face_blur.yaml"),
                      {"output": str(tmp_path / "face_blur.mp4"), "metadata": str(tmp_path / "m.jsonl"),
                       "device": "CPU"})
    res = Runner(spec, max_frames=90).run()
    assert res.ok, res.error
    (tmp_path / "index.html").write_text('<video id="v" muted playsinline src="face_blur.mp4"></video>')
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with playwright.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--autoplay-policy="
                                                                          "no-user-gesture-required"])
            page = browser.new_page()
            page.goto(f"http://127.0.0.1:{server.server_address[1]}/index.html")
            page.evaluate("document.getElementById('v').play()")
            page.wait_for_function("document.getElementById('v').currentTime > 1.0", timeout=20000)
            width, error = page.evaluate("[document.getElementById('v').videoWidth, document.getElementById('v')"
                                         ".error && document.getElementById('v').error.code]")
            browser.close()
    finally:
        server.shutdown()
    assert width == 1366 and error is None


@pytest.mark.skipif(FFPROBE is None, reason="ffprobe (scripts/setup.sh installs ffmpeg)")
def test_a_resolution_change_goes_on_in_a_new_file(tmp_path) -> None:
    """A camera that changes its size mid-stream: the file so far closes whole, the recording goes on in
    NAME.WxH.mp4."""
    import numpy as np

    from flowpipe.testing import feed

    frames = [np.full((360, 640, 3), i, np.uint8) for i in range(30)] + \
             [np.full((240, 320, 3), i, np.uint8) for i in range(20)]
    res = run_yaml(f"""
nodes:
  - {{id: src, type: list_source, config: {{feed: {feed(frames)}}}}}
  - {{id: rec, type: video_writer, config: {{path: "{tmp_path}/v.mp4"}}, inputs: {{frame: src}}}}
""")
    assert res.ok, res.error
    first, second = probe(tmp_path / "v.mp4"), probe(tmp_path / "v.320x240.mp4")
    assert (first["width"], first["frames"], second["width"], second["frames"]) == (640, 30, 320, 20)
    assert res.nodes["rec"]["files"] == {str(tmp_path / "v.mp4"): [str(tmp_path / "v.mp4"),
                                                                    str(tmp_path / "v.320x240.mp4")]}


def _ts(tmp_path: Path, *sizes: str) -> Path:
    """An MPEG-TS of 1 s test pattern per size, one after the other (a camera that changes its size)."""
    out = tmp_path / "ab.ts"
    data = b""
    for size in sizes:
        part = tmp_path / f"{size}.ts"
        subprocess.run([shutil.which("ffmpeg") or "/usr/bin/ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i",
                        f"testsrc=size={size}:rate=30", "-t", "1", "-c:v", "libx264", "-pix_fmt", "yuv420p",
                        "-f", "mpegts", str(part)], check=True)
        data += part.read_bytes()
    out.write_bytes(data)
    return out


@pytest.mark.skipif(FFPROBE is None, reason="ffmpeg (scripts/setup.sh installs it)")
def test_pyav_decoding_passes_size_changes_timestamps_and_damage_on(tmp_path) -> None:
    from flowpipe.testing import collected

    ab = _ts(tmp_path, "640x360", "320x240")
    for fmt in ("BGR", "NV12", "I420"):
        res = run_yaml(f"""
nodes:
  - {{id: src, type: video_source, config: {{uri: "{ab}", decoder: pyav, format: {fmt}}}}}
  - {{id: s, type: collect, config: {{into: sizes{fmt}, keep_pixels: true}}, inputs: src.frame}}
""")
        assert res.ok, res.error
        got = collected(f"sizes{fmt}")
        assert [(f.width, f.height) for f in got] == [(640, 360)] * 30 + [(320, 240)] * 30  # the graph sees it
        assert {f.format for f in got} == {fmt}
        pts = [f.pts for f in got]
        assert pts[0] == 0.0 and all(b > a for a, b in itertools.pairwise(pts)) and abs(pts[29] - 29 / 30) < 1e-3
        assert res.nodes["src"]["source"]["decoder"] == "pyav (h264 in software)"
        assert res.nodes["src"]["timestamp_jumps"] == 1  # the second part's clock restarted: counted, smoothed

    import random

    data = bytearray(ab.read_bytes())
    rnd = random.Random(7)
    for _ in range(60):
        data[rnd.randrange(len(data) // 4, len(data))] ^= 0xFF
    (tmp_path / "bad.ts").write_bytes(bytes(data))
    res = run_yaml(f"""
nodes:
  - {{id: src, type: video_source, config: {{uri: "{tmp_path / 'bad.ts'}", decoder: pyav}}}}
  - {{id: s, type: null_sink, inputs: src.frame}}
""")
    assert res.ok, res.error  # damaged packets are skipped (and counted), decoding goes on to the end
    assert res.frames["in"] == res.frames["out"] >= 30
    assert res.frames["in"] + res.nodes["src"].get("decode_errors", 0) >= 40



@pytest.mark.skipif(FFPROBE is None, reason="ffmpeg (scripts/setup.sh installs it)")
def test_hardware_decode_asked_for_falls_back_to_software_with_one_line(tmp_path, caplog) -> None:
    """``hwaccel: cuda`` where no NVIDIA decoder opens: the same frames from the software decoder, one warning
    naming the device, and stats that say what decoded; ``auto`` falls back without a word."""
    from flowpipe.testing import collected

    clip = _ts(tmp_path, "320x240", "320x240")
    seen = {}
    for accel in ("none", "auto", "cuda"):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="flowpipe_nodes.media"):
            res = run_yaml(f"""
nodes:
  - {{id: src, type: video_source, config: {{uri: "{clip}", decoder: pyav, format: NV12, hwaccel: {accel}}}}}
  - {{id: s, type: collect, config: {{into: hw{accel}, keep_pixels: true}}, inputs: src.frame}}
""")
        assert res.ok, res.error
        decoder = res.nodes["src"]["source"]["decoder"]
        seen[accel] = [f.image.copy() for f in collected(f"hw{accel}")]
        lines = [r.getMessage() for r in caplog.records if "hardware decode" in r.getMessage()]
        if decoder == "pyav (h264 on cuda)":  # a machine with an NVIDIA decoder (the GPU device)
            assert accel in ("auto", "cuda") and not lines
            continue
        assert decoder == "pyav (h264 in software)"
        assert len(lines) == (1 if accel == "cuda" else 0), lines
        if accel == "cuda":
            assert "cuda" in lines[0] and "software" in lines[0]
    assert len(seen["none"]) == len(seen["cuda"]) == 60
    import numpy as np

    for a, b in zip(seen["none"], seen["cuda"], strict=True):  # NVDEC and FFmpeg decode H.264 bit-exactly
        assert np.array_equal(a, b)
    from flowpipe import GraphError, load_graph

    with pytest.raises(GraphError, match=r"g\.yaml:1: node 'src' \(video_source\): .*hwaccel cuda needs decoder: pyav"):
        load_graph("g.yaml", text="nodes: [{id: src, type: video_source, config: {uri: sample, decoder: opencv, "
                                  "hwaccel: cuda}}]")


@pytest.mark.skipif(FFPROBE is None, reason="ffmpeg (scripts/setup.sh installs it)")
def test_the_source_decodes_into_a_format_every_node_after_it_takes(tmp_path) -> None:
    """``format: auto`` (the default): YUV when every node the frames reach takes it, so nothing converts to
    BGR; BGR through OpenCV as soon as one does not (an mp4v writer, a plugin that does not say)."""
    clip = _ts(tmp_path, "320x240", "320x240")

    def source(tail: str, config: str = "") -> tuple[str, str]:
        res = run_yaml(f"""
nodes:
  - {{id: src, type: video_source, config: {{uri: "{clip}"{config}}}}}
  - {{id: hop, type: passthrough, inputs: src}}
{tail}""")
        assert res.ok, res.error
        return res.nodes["src"]["format"], res.nodes["src"]["source"].get("decoder", "opencv")

    blur_write = f"""  - {{id: b, type: blur, inputs: {{detections: hop}}}}
  - {{id: w, type: video_writer, config: {{path: "{tmp_path}/o.mp4"WRITER}}, inputs: {{frame: b}}}}
"""
    assert source(blur_write.replace("WRITER", "")) == ("I420", "pyav (h264 in software)")
    assert source(blur_write.replace("WRITER", ", fourcc: mp4v")) == ("BGR", "opencv")
    assert source("  - {id: x, type: test_inplace, inputs: hop}\n") == ("BGR", "opencv")  # says nothing: BGR
    # a plugin that takes only detections says nothing either, and never reads pixels: YUV stays
    assert source("  - {id: x, type: test_count_faces, inputs: {detections: hop}}\n")[0] == "I420"
    assert source(blur_write.replace("WRITER", ""), ", hwaccel: cuda")[0] == "NV12"  # a device decoder's own
    err = run_yaml(f"""
nodes:
  - {{id: src, type: video_source, config: {{uri: "{clip}", format: I420}}}}
  - {{id: x, type: test_inplace, inputs: src}}
""").error
    assert "node 'src' (video_source)" in str(err) and "format I420: a node after this source does not take it " \
        "(x (test_inplace): BGR); expected format: auto or one of BGR" in str(err)
    assert probe(tmp_path / "o.mp4")["frames"] == 60


def test_a_picture_of_odd_size_is_decoded_into_bgr_and_recorded_a_row_and_column_short(tmp_path) -> None:
    """``format: auto`` would give I420, whose planes need even sides: a 333x211 file's frames are BGR instead
    (it failed on its first frame), every one goes through, and the recording, 4:2:0, is 332x210."""
    import av
    import numpy as np

    clip = tmp_path / "odd.mp4"
    with av.open(str(clip), "w") as c:
        s = c.add_stream("mpeg4", rate=25)
        s.width, s.height, s.pix_fmt = 333, 211, "yuv420p"
        for i in range(20):
            img = np.full((211, 333, 3), 10 * i, np.uint8)
            for pkt in s.encode(av.VideoFrame.from_ndarray(img, format="bgr24")):
                c.mux(pkt)
        for pkt in s.encode():
            c.mux(pkt)
    res = run_yaml(f"""
nodes:
  - {{id: src, type: video_source, config: {{uri: "{clip}"}}}}
  - {{id: hop, type: passthrough, inputs: src}}
  - {{id: b, type: blur, inputs: {{detections: hop}}}}
  - {{id: w, type: video_writer, config: {{path: "{tmp_path}/o.mp4"}}, inputs: {{frame: b}}}}
""")
    assert res.ok, res.error
    assert res.frames == {"in": 20, "out": 20, "dropped": 0, "failed": 0} and res.nodes["src"]["format"] == "BGR"
    with av.open(str(tmp_path / "o.mp4")) as c:
        sizes = {(f.width, f.height) for f in c.decode(video=0)}
    assert sizes == {(332, 210)}


@pytest.mark.parametrize("mode", ["blur", "pixelate", "fill"])
@pytest.mark.parametrize("fmt", ["I420", "NV12"])
def test_blur_masks_yuv_planes_where_they_are(mode: str, fmt: str) -> None:
    """A face masked in I420/NV12 planes looks as it does masked in BGR (colours included), and nothing
    outside the region moves: YUV frames are masked without a conversion."""
    import cv2
    import numpy as np
    from skimage import data

    from flowpipe.frame import Detection, Frame
    from flowpipe_nodes.draw import Blur

    bgr = cv2.cvtColor(data.astronaut(), cv2.COLOR_RGB2BGR)  # 512x512, a real face at about (170..330, 20..200)
    h, w = bgr.shape[:2]
    i420 = cv2.cvtColor(bgr, cv2.COLOR_BGR2YUV_I420)
    if fmt == "NV12":
        u, v = i420[h:h + h // 4].reshape(h // 2, w // 2), i420[h + h // 4:].reshape(h // 2, w // 2)
        yuv = np.vstack([i420[:h], np.dstack([u, v]).reshape(h // 2, w)])
        back = cv2.COLOR_YUV2BGR_NV12
    else:
        yuv, back = i420.copy(), cv2.COLOR_YUV2BGR_I420
    box = (170.0, 30.0, 330.0, 200.0)
    node = Blur("b", Blur.Config(mode=mode, grow=0.0))
    a = node.process(Frame("s", 0, 0.0, bgr.copy(), "BGR", detections=[Detection(box, 0.9)]), "detections")
    b = node.process(Frame("s", 0, 0.0, yuv.copy(), fmt, detections=[Detection(box, 0.9)]), "detections")
    masked_bgr, masked_yuv = a.image, cv2.cvtColor(b.data, back)
    ref = cv2.cvtColor(yuv, back)  # the same picture through YUV, unmasked
    inside = (slice(30, 200), slice(170, 330))
    assert np.abs(masked_yuv[inside].astype(int) - ref[inside].astype(int)).mean() > 5  # it is masked
    assert np.abs(masked_yuv[inside].astype(int) - masked_bgr[inside].astype(int)).mean() < 6  # as in BGR
    outside = np.ones((h, w), bool)
    outside[28:202, 168:332] = False  # (chroma is half size: one pixel of margin)
    assert np.array_equal(masked_yuv[outside], ref[outside])


def test_the_face_blur_job_in_yuv_from_decode_to_encode(tmp_path) -> None:
    """``decoder: pyav, pixels: I420``: the main job never makes a BGR picture, yet finds the very boxes the
    BGR paths find (the preprocess kernel converts YUV in FFmpeg's own fixed point), and writes a playable
    H.264 file; PyAV's BGR gives the very boxes OpenCV's does."""
    from flowpipe import load_graph
    from flowpipe.runtime import Runner

    found = {}
    graph = tmp_path / "face_blur_near.yaml"  # on the OpenCL kernel (auto takes OpenCV where OpenCL is the CPU)
    graph.write_text((ROOT / "graphs" / "face_blur_near.yaml").read_text().replace(
        "      resize: letterbox\n", "      resize: letterbox\n      backend: opencl\n", 1))
    for dec, px in (("opencv", "BGR"), ("pyav", "BGR"), ("pyav", "I420"), ("pyav", "NV12")):
        spec = load_graph(str(graph),
                          {"decoder": dec, "pixels": px, "output": str(tmp_path / f"{dec}{px}.mp4"),
                           "metadata": str(tmp_path / f"{dec}{px}.jsonl"), "device": "CPU", "tiles": None})
        res = Runner(spec, max_frames=60).run()
        assert res.ok, res.error
        assert res.nodes["pre"]["backend"] == "opencl"
        found[dec + px] = [json.loads(x) for x in (tmp_path / f"{dec}{px}.jsonl").read_text().splitlines()]

    def boxes(run: str) -> list[list[list[float]]]:
        return [sorted(o["box"] for o in r["objects"]) for r in found[run]]

    assert [r["frame"] for r in found["pyavI420"]] == [r["frame"] for r in found["opencvBGR"]] == list(range(60))
    assert sum(map(len, boxes("opencvBGR"))) > 30
    assert boxes("pyavBGR") == boxes("opencvBGR") == boxes("pyavI420") == boxes("pyavNV12")
    if FFPROBE is not None:
        assert probe(tmp_path / "pyavI420.mp4")["frames"] == 60


@pytest.mark.parametrize("fmt", ["BGR", "I420"])
@pytest.mark.parametrize("side", [12, 24, 48, 100, 180, 400])
def test_a_blurred_face_keeps_no_detail_finer_than_a_quarter_of_it_at_any_size(side: int, fmt: str) -> None:
    """The blur rule: a region is blurred with a Gaussian of sigma = its size / ``strength`` (8), so under 1% of
    a face's contrast finer than 4 cycles across it is left, from a 12 px face to a 400 px one, in BGR and in
    the Y plane of YUV frames (people recognise familiar faces from about 7x10 px; this leaves less than
    4x4). A real face (scikit-image's astronaut) at each size."""
    import cv2
    import numpy as np
    from skimage import data

    from flowpipe.frame import Detection, Frame
    from flowpipe_nodes.draw import Blur

    face = cv2.cvtColor(data.astronaut(), cv2.COLOR_RGB2BGR)[20:220, 160:340]
    face = cv2.resize(face, (side, side * 10 // 9 // 2 * 2), interpolation=cv2.INTER_AREA)
    fh = face.shape[0]
    canvas = np.zeros((fh + 20, side + 20, 3), np.uint8)
    canvas[10:-10, 10:-10] = face
    box = (10.0, 10.0, 10.0 + side, 10.0 + fh)
    picture = canvas if fmt == "BGR" else cv2.cvtColor(canvas, cv2.COLOR_BGR2YUV_I420)
    out = Blur("b", Blur.Config(grow=0.0)).process(Frame("s", 0, 0.0, picture.copy(), fmt,
                                                         detections=[Detection(box, 0.9)]), "detections")
    luma = (lambda p: cv2.cvtColor(p, cv2.COLOR_BGR2GRAY)) if fmt == "BGR" else (lambda p: p[:fh + 20])

    def fine(img: np.ndarray) -> float:  # spectral energy beyond 4 cycles across (Hann-windowed: no edge wrap)
        g = (img.astype(np.float64) - img.mean()) * np.outer(np.hanning(img.shape[0]), np.hanning(img.shape[1]))
        r = np.hypot(*np.meshgrid(np.fft.fftfreq(g.shape[0]) * g.shape[0], np.fft.fftfreq(g.shape[1]) * g.shape[1],
                                  indexing="ij"))
        return float((np.abs(np.fft.fft2(g))[r > 4] ** 2).sum())

    before, after = luma(picture)[10:10 + fh, 10:10 + side], luma(out.data)[10:10 + fh, 10:10 + side]
    assert fine(after) < 0.01 * fine(before), (fine(after) / fine(before))
    assert np.array_equal(luma(out.data)[:10], luma(picture)[:10])  # nothing outside the region touched


@pytest.mark.parametrize("fmt", ["I420", "NV12"])
def test_overlay_draws_on_yuv_converting_only_what_it_touches(fmt: str) -> None:
    """Boxes, labels and the rate drawn on an I420/NV12 frame look as drawn in BGR; every pixel away from
    them is left exactly as it was."""
    import cv2
    import numpy as np
    from skimage import data

    from flowpipe.frame import Detection, Frame
    from flowpipe_nodes.draw import Overlay

    bgr = cv2.cvtColor(data.astronaut(), cv2.COLOR_RGB2BGR)
    h, w = bgr.shape[:2]
    i420 = cv2.cvtColor(bgr, cv2.COLOR_BGR2YUV_I420)
    if fmt == "NV12":
        u, v = i420[h:h + h // 4].reshape(h // 2, w // 2), i420[h + h // 4:].reshape(h // 2, w // 2)
        yuv, back = np.vstack([i420[:h], np.dstack([u, v]).reshape(h // 2, w)]), cv2.COLOR_YUV2BGR_NV12
    else:
        yuv, back = i420.copy(), cv2.COLOR_YUV2BGR_I420
    dets = [Detection((171.0, 31.0, 329.0, 199.0), 0.93, "face", track_id=4), Detection((301.0, 301.0, 401.0, 451.0),
                                                                                      0.61, "face")]
    nodes = [Overlay("o", Overlay.Config(show_fps=True)) for _ in range(2)]  # each one's first frame: 0.0 fps
    for node in nodes:
        node.open(None)  # type: ignore[arg-type]
    drawn_bgr = nodes[0].process(Frame("cam", 0, 0.0, cv2.cvtColor(yuv, back), "BGR", detections=list(dets)),
                                 "detections").image
    drawn_yuv = nodes[1].process(Frame("cam", 0, 0.0, yuv.copy(), fmt, detections=list(dets)), "detections").data
    got, ref = cv2.cvtColor(drawn_yuv, back), cv2.cvtColor(yuv, back)
    changed = np.abs(drawn_bgr.astype(int) - ref.astype(int)).sum(axis=2) > 0  # where BGR drawing touched
    assert changed.sum() > 1000
    assert np.abs(got[changed].astype(int) - drawn_bgr[changed].astype(int)).mean() < 20  # drawn alike
    near = cv2.dilate(changed.astype(np.uint8), np.ones((9, 9), np.uint8)).astype(bool)
    far = ~near
    regions = np.zeros((h, w), bool)  # (conversions only happen in the drawings' regions)
    for d in dets:
        x1, y1, x2, y2 = (int(v) for v in d.box)
        regions[max(0, y1 - 30):y2 + 8, max(0, x1 - 8):x2 + 160] = True
    regions[:40, :220] = True
    assert np.array_equal(got[~regions], ref[~regions])  # untouched outside every drawing's region
    trip = np.abs(got[far & regions].astype(int) - ref[far & regions].astype(int))
    assert trip.mean() < 1.0 and trip.max() <= 16, (trip.mean(), trip.max())  # YUV->BGR->YUV rounding only


def test_a_writer_lets_held_frames_go_when_their_stream_stalls(tmp_path) -> None:
    """A stream that stops sending writes no next fragment: the frames the writer held for theirs go on after
    ``gop_seconds`` + 1 s, saying they are not in the file yet; a steady stream's go on as fragments are
    written, saying they are."""
    import numpy as np

    from flowpipe.frame import Frame, FrameRef
    from flowpipe.testing import Harness
    from flowpipe_nodes.sinks.recording import VideoWriter

    node = VideoWriter("rec", VideoWriter.Config(path=str(tmp_path / "v.mp4"), gop_seconds=0.2, fps=10))
    with Harness(node):
        assert node.declared.holds_frames
        out = []
        for i in range(5):  # a keyframe every 2 frames: the fragments before frame 4 are written
            f = Frame("cam", i, i / 10, np.full((64, 64, 3), 40 * i, np.uint8))
            f.ref = FrameRef("cam", i)
            out += node.process(f, "frame")
        assert [f.index for f in out] and all(f.meta["recording"]["in_file"] for f in out)
        assert all(f.data is None for f in out)  # their pixels went back while they waited
        assert node.poll() == []  # not due yet
        time.sleep(1.3)
        late = node.poll()
        assert [f.index for f in out + late] == list(range(5))
        assert late and not any(f.meta["recording"]["in_file"] for f in late)
        assert node.flush() == []


def test_a_stream_added_again_records_beside_its_first_file_and_no_other_takes_it(tmp_path) -> None:
    """A writer whose path has no {stream}: its first stream records to NAME.mp4; removed and added again, to
    NAME.2.mp4; another stream that comes after the first has ended to NAME-b.mp4, never over NAME.mp4."""
    import numpy as np

    from flowpipe.frame import Frame
    from flowpipe.testing import Harness
    from flowpipe_nodes.sinks.recording import VideoWriter

    node = VideoWriter("rec", VideoWriter.Config(path=str(tmp_path / "v.mp4"), fps=10))
    with Harness(node):
        for stream in ("a", "a", "b"):
            for i in range(3):
                node.process(Frame(stream, i, i / 10, np.zeros((48, 64, 3), np.uint8)), "frame")
            node.stream_stopping(stream)
            node.end_stream(stream)
    assert sorted(p.name for p in tmp_path.glob("*.mp4")) == ["v-b.mp4", "v.2.mp4", "v.mp4"]


def test_an_event_that_begins_while_its_recording_is_paused_says_why_it_has_no_clip(tmp_path) -> None:
    """A stream paused by a full disk: a frame's event that begins (or happens) then gets no clip, and its
    record says why; one that ends names none either way."""
    import numpy as np

    from flowpipe.frame import Frame
    from flowpipe.testing import Harness
    from flowpipe_nodes.sinks.recording import VideoWriter

    node = VideoWriter("rec", VideoWriter.Config(path=str(tmp_path / "v.mp4"), fps=10,
                                                 clips={"path": str(tmp_path / "clips")}))
    with Harness(node):
        node.paused["cam"] = {"file": str(tmp_path / "v.mp4"), "from_frame": 3, "not_recorded": 0}
        node.check_at["cam"] = time.monotonic() + 60
        f = Frame("cam", 5, 0.5, np.zeros((48, 64, 3), np.uint8))
        f.meta["analytics"] = {"events": [{"id": "a", "state": "begin"}, {"id": "b", "state": "end"}]}
        (out,) = [node.process(f, "frame")]
        begun, ended = out.meta["analytics"]["events"]
        assert begun["clip"] is None and begun["no_clip"] == f"no space left for {tmp_path / 'v.mp4'}"
        assert "clip" not in ended and out.meta["recording"]["in_file"] is False
        assert node.stats["event_clips_missed"] == 1


def _node_stat(res: Any, node: str, key: str) -> Any:
    """A node's stat, in one process or in whichever process of the run (shards) has it."""
    n = res.nodes[node]
    if key in n:
        return n[key]
    return next(s[key] for s in n.get("shards", {}).values() if key in s)


@pytest.mark.skipif(FFPROBE is None, reason="ffprobe (scripts/setup.sh installs ffmpeg)")
@pytest.mark.parametrize("processes", [1, 2])
def test_a_full_disk_pauses_that_streams_recording_and_records_then_resumes_in_a_new_file(tmp_path, small_disk,
                                                                                          caplog, processes) -> None:
    """A stream's recording and records on a disk that fills mid-run: one line names the file, the stream
    that writes elsewhere goes on, what was written stays playable and whole, every frame goes out with a
    record saying where it is (or that it is in no file), and when space returns recording goes on in a new
    file and records are written again. In one process, and over two (each stream in a process of its own:
    the full disk is one process's, the other never sees it)."""
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * (2 * 1024 * 1024 - 200 * 1024))  # 200 kB left
    text = f"""
processes: {processes}
nodes:
  - {{id: full, type: video_source, config: {{uri: sample, max_fps: 40}}}}
  - {{id: fine, type: video_source, config: {{uri: sample, max_fps: 40}}}}
  - {{id: rec_full, type: video_writer, config: {{path: "{small_disk}/v.mp4", crf: 18, preset: ultrafast,
     gop_seconds: 0.2, min_free_mb: 0.5}}, inputs: {{frame: full}}}}
  - {{id: rec_fine, type: video_writer, config: {{path: "{tmp_path}/fine.mp4", gop_seconds: 0.2}}, inputs: {{frame: fine}}}}
  - {{id: meta_full, type: jsonl, config: {{path: "{small_disk}/full.jsonl"}}, inputs: {{detections: rec_full}}}}
  - {{id: meta_fine, type: jsonl, config: {{path: "{tmp_path}/fine.jsonl"}}, inputs: {{detections: rec_fine}}}}
"""
    freed = threading.Event()

    def free_when_full() -> None:  # the disk fills; a second later space comes back
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and shutil.disk_usage(small_disk).free > 64 * 1024:
            time.sleep(0.05)
        time.sleep(1.0)
        filler.unlink()
        freed.set()

    threading.Thread(target=free_when_full, daemon=True).start()
    with caplog.at_level(logging.WARNING):
        res = run_yaml(text)
    assert res.ok, res.error
    assert freed.is_set()
    assert res.frames == {"in": 300, "out": 300, "dropped": 0, "failed": 0}
    if processes == 1:  # (a shard's log lines go to its own stderr)
        said = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert any(f"{small_disk}/v.mp4: No space left on device (stream full" in m for m in said), said
    paused = _node_stat(res, "rec_full", "out_of_space")["full"][0]
    assert paused["not_recorded"] > 0 and paused["resumed"] == 1

    # the stream that writes elsewhere went on: every frame recorded, every record written
    assert probe(tmp_path / "fine.mp4")["frames"] == 150
    assert len((tmp_path / "fine.jsonl").read_text().splitlines()) == 150

    # every line on the full disk whole; each record's claim holds against the file it names
    lines = (small_disk / "full.jsonl").read_text().splitlines()
    records = [json.loads(ln) for ln in lines]
    lost = sum(s.get("records_not_written", 0) for s in [res.nodes["meta_full"],
                                                         *res.nodes["meta_full"].get("shards", {}).values()])
    assert len(records) + lost == 150 and len(records) > 0
    playable = {str(p): probe(p)["frames"] for p in (small_disk / "v.mp4", small_disk / "v.resume1.mp4")}
    assert playable[str(small_disk / "v.resume1.mp4")] > 0
    for r in records:
        rec = r["recording"]
        if rec["in_file"]:
            assert rec["frame"] < playable[rec["file"]], (r, playable)
        elif rec["file"] is None:
            assert "no space left" in rec["why"]
    assert any(r["recording"]["file"] is None for r in records)  # the pause is on record too
    assert any(r["recording"]["file"] == str(small_disk / "v.resume1.mp4") for r in records)


def test_an_odd_sized_picture_is_recorded_without_its_last_row_and_column(tmp_path) -> None:
    """H.264 in 4:2:0 takes even sides only: an 801x533 picture (a photograph's size) is recorded at 800x532,
    where it failed to open the encoder before, and every picture is in the file."""
    import av
    import numpy as np

    from flowpipe_nodes.media.encode import Recorder

    rec = Recorder(str(tmp_path / "odd.mp4"), 25.0, (801, 533))
    picture = np.zeros((533, 801, 3), np.uint8)
    picture[:, :400] = (0, 0, 255)
    for _ in range(5):
        rec.write(picture)
    rec.close()
    with av.open(str(tmp_path / "odd.mp4")) as c:
        frames = [f.to_ndarray(format="bgr24") for f in c.decode(video=0)]
    assert len(frames) == 5 and frames[0].shape == (532, 800, 3)
    assert frames[0][266, 200, 2] > 200 and frames[0][266, 600, 2] < 50  # the picture, not a shifted one


@pytest.mark.parametrize("where, said", [("dir", "a folder, expected a video file's path"),
                                         ("file/x.mp4", "is a file, expected a folder")])
def test_a_recording_that_cannot_be_written_where_asked_fails_at_open_before_any_frame(tmp_path, where, said) -> None:
    """A folder for the path, or a file where its folder should be: told when the writer opens, no frame
    entered (it was found on the first frame, the frames before the error failed)."""
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("x")
    res = run_yaml(f"""
nodes:
  - {{id: src, type: video_source, config: {{uri: sample}}}}
  - {{id: w, type: video_writer, config: {{path: "{tmp_path / where}"}}, inputs: {{frame: src}}}}
""")
    assert not res.ok and "node 'w' (video_writer): open failed" in str(res.error) and said in str(res.error)
    assert res.frames["in"] == 0

"""Sources and network sinks for real: image folders, frame skipping, a live RTSP server that goes away
and comes back, the MJPEG preview in headless Chromium, the Prometheus endpoint."""
from __future__ import annotations

import itertools
import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import cv2
import numpy as np
import pytest

from flowpipe import Runner, load_graph
from flowpipe.testing import collected, run_yaml

HERE = Path(__file__).parent
SYS_PY = "/usr/bin/python3"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(spec_text: str, **kw):
    r = Runner(load_graph("<t>", text=spec_text), **kw)
    box: dict = {}
    t = threading.Thread(target=lambda: box.update(result=r.run()), daemon=True)
    t.start()
    return r, t, box


def test_image_folder_in_name_order_with_unreadable_file_skipped(tmp_path) -> None:
    for i in range(4):
        cv2.imwrite(str(tmp_path / f"img_{i:02d}.png"), np.full((40, 60, 3), i * 10, np.uint8))
    (tmp_path / "img_99.jpg").write_text("not an image")
    res = run_yaml(f"""
        nodes:
          - {{id: src, type: video_source, config: {{uri: "{tmp_path}"}}}}
          - {{id: s, type: collect, config: {{into: folder}}, inputs: src.frame}}
    """)
    assert res.ok and res.frames["in"] == 4 and res.nodes["src"]["unreadable"] == 1
    assert res.nodes["src"]["decoded"] == 4  # the pictures read, as a video's frames are counted
    assert [Path(f.meta["path"]).name for f in collected("folder")] == [f"img_{i:02d}.png" for i in range(4)]


def test_every_nth_frame_and_loop(tmp_path) -> None:
    from flowpipe.sample import make_sample

    video = tmp_path / "v.mp4"
    make_sample(video, frames=20)
    res = run_yaml(f"""
        nodes:
          - {{id: src, type: video_source, config: {{uri: "{video}", every: 3, loop: 1}}}}
          - {{id: s, type: collect, config: {{into: every}}, inputs: src.frame}}
    """)
    assert res.ok and res.nodes["src"]["decoded"] == 40
    got = collected("every")
    assert len(got) == 14 and [f.index for f in got] == list(range(14))
    assert [f.meta["decoded_index"] for f in got[:7]] == [0, 3, 6, 9, 12, 15, 18]


@pytest.mark.parametrize("content, msg", [
    (b"", "video file is empty (0 bytes)"),
    (b"this is a text file, not a video\n" * 20, "not a video FFmpeg can decode (Invalid data found when "
                                                  "processing input)"),
])
def test_bad_video_files_fail_clearly(tmp_path, content, msg) -> None:
    bad = tmp_path / "clip.mp4"
    bad.write_bytes(content)
    res = run_yaml(f"""
        nodes:
          - {{id: src, type: video_source, config: {{uri: "{bad}"}}}}
          - {{id: s, type: null_sink, inputs: src.frame}}
    """)
    assert res.exit_code == 1 and msg in str(res.error) and "node 'src' (video_source)" in str(res.error)


def _have_rtsp_server() -> bool:
    if not Path(SYS_PY).exists():
        return False
    r = subprocess.run([SYS_PY, "-c", "import gi; gi.require_version('GstRtspServer', '1.0'); "
                        "from gi.repository import GstRtspServer"], capture_output=True)
    return r.returncode == 0


def _rtsp_server(port: int) -> subprocess.Popen:
    """A real RTSP server on loopback (tests/rtsp_server.py), serving once it says so."""
    p = subprocess.Popen([SYS_PY, str(HERE / "rtsp_server.py"), str(port)], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    return p


@pytest.mark.skipif(not _have_rtsp_server(), reason="gst-rtsp-server (scripts/setup.sh installs it) is missing")
@pytest.mark.parametrize("decoder", ["opencv", "pyav"])
def test_rtsp_source_reconnects_when_the_server_comes_back(decoder: str) -> None:
    port = _free_port()
    srv = _rtsp_server(port)
    try:
        r, t, box = _start(f"""
nodes:
  - {{id: cam, type: video_source, config: {{uri: "rtsp://127.0.0.1:{port}/live", reconnect_attempts: 10,
      reconnect_backoff_s: 0.5, timeout_s: 2, decoder: {decoder}}}}}
  - {{id: s, type: null_sink, inputs: cam.frame}}
""", max_frames=120)
        deadline = time.monotonic() + 20
        while r.snapshot()["out"] < 30 and time.monotonic() < deadline:
            time.sleep(0.1)
        before = r.snapshot()["out"]
        assert before >= 30
        srv.kill()
        srv.wait()
        time.sleep(1.5)
        srv = _rtsp_server(port)
        t.join(60)
        res = box["result"]
        assert res.ok, res.error
        assert res.frames["out"] == 120 and res.nodes["cam"]["reconnects"] == 1
        assert 0 < res.nodes["cam"]["last_outage_s"] < 15
        if decoder == "pyav":
            assert res.nodes["cam"]["source"]["decoder"] == "pyav (mjpeg in software)"
    finally:
        srv.kill()


@pytest.mark.skipif(not _have_rtsp_server(), reason="gst-rtsp-server (scripts/setup.sh installs it) is missing")
@pytest.mark.parametrize("decoder, outages", [("pyav", 3), ("opencv", 1)])
def test_a_camera_that_flaps_keeps_its_stream_reports_every_outage_and_stalls_no_other(decoder, outages,
                                                                                        tmp_path) -> None:
    """An RTSP camera up ~2.5 s, down ~1.5 s, three times over, beside a steady stream: the camera's stream
    lives through every outage and each one is reported (when, how long, after which frame); the other
    stream's frames keep coming while the camera is away; the camera's timestamps go on forward across each
    outage, by the time it was away (each new connection's clock starts again)."""
    port = _free_port()
    srv = _rtsp_server(port)
    try:
        r, t, box = _start(f"""
plugins: [fp_testnodes]
nodes:
  - {{id: cam, type: video_source, config: {{uri: "rtsp://127.0.0.1:{port}/live", reconnect_attempts: 6,
      reconnect_backoff_s: 0.3, timeout_s: 2, decoder: {decoder}}}}}
  - {{id: steady, type: synthetic_source, config: {{count: 100000, width: 64, height: 48, fps: 30, realtime: true}}}}
  - {{id: s, type: null_sink, inputs: {{in: [cam.frame, steady.frame]}}}}
  - {{id: one, type: test_one_face, inputs: cam.frame}}
  - {{id: meta, type: jsonl, config: {{path: '{tmp_path / "cam.jsonl"}'}}, inputs: one.detections}}
""")
        during = []
        for _ in range(outages):
            time.sleep(2.5)
            srv.kill()
            srv.wait()
            steady0 = r.per_stream.get("steady", 0)
            time.sleep(1.5)
            during.append(r.per_stream.get("steady", 0) - steady0)
            srv = _rtsp_server(port)
        time.sleep(2.5)
        r.stop()
        t.join(60)
        res = box["result"]
        assert res.ok, res.error
        cam = res.nodes["cam"]
        assert cam["reconnects"] == outages, cam
        reported = cam["outages"]
        assert len(reported) == outages and all(0 < o["lasted_s"] < 8 for o in reported), reported
        assert [o["after_frame"] for o in reported] == sorted(o["after_frame"] for o in reported)
        assert cam["outage_total_s"] >= sum(o["lasted_s"] for o in reported) - 0.01
        assert res.per_stream["cam"] > 20 * outages  # it came back each time
        pts = [json.loads(line)["pts"] for line in (tmp_path / "cam.jsonl").read_text().splitlines()]
        steps = [b - a for a, b in itertools.pairwise(pts)]
        assert min(steps) > 0, steps  # never back to 0
        assert sum(step > 1.0 for step in steps) == outages, steps  # each outage a step of the time it lasted
        assert cam["timestamp_jumps"] >= outages
        assert min(during) >= 20, during  # 1.5 s of the steady stream's 30 fps while the camera was away
        assert res.frames["in"] == res.frames["out"] + res.frames["dropped"] + res.frames["failed"]
    finally:
        srv.kill()


def test_a_camera_not_up_when_the_run_starts_holds_back_no_other_stream_and_joins_when_it_answers() -> None:
    """A camera that does not answer yet: the graph opens all the same (every other stream starts), and the
    camera's stream starts when it answers, with the default of reconnecting for ever."""
    port = _free_port()
    r, t, box = _start(f"""
nodes:
  - {{id: cam, type: video_source, config: {{uri: "rtsp://127.0.0.1:{port}/live", reconnect_backoff_s: 0.3,
      timeout_s: 2}}}}
  - {{id: steady, type: synthetic_source, config: {{count: 100000, width: 64, height: 48, fps: 30, realtime: true}}}}
  - {{id: s, type: null_sink, inputs: {{in: [cam.frame, steady.frame]}}}}
""")
    srv = None
    try:
        deadline = time.monotonic() + 30
        while r.per_stream.get("steady", 0) < 60:  # two seconds of the other stream, the camera still down
            assert time.monotonic() < deadline and t.is_alive(), box
            time.sleep(0.1)
        assert r.per_stream.get("cam", 0) == 0
        srv = _rtsp_server(port)
        while r.per_stream.get("cam", 0) < 30:
            assert time.monotonic() < deadline + 30 and t.is_alive(), box
            time.sleep(0.1)
        r.stop()
        t.join(60)
        res = box["result"]
        assert res.ok, res.error
        assert res.frames["in"] == res.frames["out"] + res.frames["dropped"] + res.frames["failed"]
    finally:
        r.stop()
        if srv is not None:
            srv.kill()


@pytest.mark.parametrize("decoder", ["opencv", "pyav"])
def test_rtsp_source_that_never_comes_back_ends_with_a_clear_error(decoder, caplog) -> None:
    """Each try says why the camera cannot be opened, through OpenCV too (FFmpeg's reason, found by PyAV)."""
    port = _free_port()
    with caplog.at_level("WARNING"):
        res = run_yaml(f"""
            nodes:
              - {{id: cam, type: video_source, config: {{uri: "rtsp://127.0.0.1:{port}/live", reconnect_attempts: 2,
                  reconnect_backoff_s: 0.1, timeout_s: 1, decoder: {decoder}}}}}
              - {{id: s, type: null_sink, inputs: cam.frame}}
        """)
    assert res.exit_code == 1
    assert f"stream rtsp://127.0.0.1:{port}/live did not come back after 2 attempts" in str(res.error)
    said = [r.getMessage() for r in caplog.records]
    assert any(f"cannot open rtsp://127.0.0.1:{port}/live: Connection refused" in m for m in said), said
    assert any("not up yet; reconnect 1/2" in m for m in said), said  # never seen: not 'lost'


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (scripts/setup.sh installs it)")
def test_mjpeg_preview_renders_in_headless_chromium(tmp_path) -> None:
    r, t, _ = _start("""
nodes:
  - {id: src, type: video_source, config: {uri: sample, loop: -1, realtime: true}}
  - {id: prev, type: mjpeg_preview, config: {port: 0}, inputs: src.frame}
""")
    try:
        deadline = time.monotonic() + 20
        while "url" not in r.stats["prev"].extra and time.monotonic() < deadline:
            time.sleep(0.05)
        url = r.stats["prev"].extra["url"]
        assert url.startswith("http://127.0.0.1:")  # loopback unless configured
        time.sleep(1.0)
        shot = tmp_path / "preview.png"
        subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                        "--disable-background-networking", "--disable-component-update", "--disable-sync",
                        f"--user-data-dir={tmp_path / 'profile'}", "--window-size=700,500",
                        "--virtual-time-budget=3000", f"--screenshot={shot}", url],
                       capture_output=True, timeout=90, check=True)
        img = cv2.imread(str(shot))
        assert img is not None and img.shape[:2] == (500, 700)
        # the page background is near-black; the video (photograph of a face) must fill the image area
        area = img[60:400, 0:640]
        assert float(area.mean()) > 60 and float(area.std()) > 25
    finally:
        r.stop()
        t.join(30)


def test_prometheus_endpoint_serves_per_node_stats() -> None:
    r, t, box = _start("""
nodes:
  - {id: src, type: synthetic_source, config: {count: 1000000, realtime: true, fps: 200}}
  - {id: hop, type: passthrough, inputs: src.frame}
  - {id: metrics, type: prometheus, config: {port: 0}, inputs: hop.out}
""")
    try:
        deadline = time.monotonic() + 20
        while "url" not in r.stats["metrics"].extra and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        url = r.stats["metrics"].extra["url"]
        assert url.startswith("http://127.0.0.1:")
        text = urllib.request.urlopen(url, timeout=10).read().decode()  # noqa: S310 - checked http above
        assert 'flowpipe_node_frames_total{node="hop",type="passthrough"}' in text
        assert 'flowpipe_frames_total{fate="out"}' in text and 'flowpipe_stream_frames_total{stream="src"}' in text
        n = float(text.split('flowpipe_node_frames_total{node="hop",type="passthrough"} ')[1].split()[0])
        assert n > 0
    finally:
        r.stop()
        t.join(30)
    assert box["result"].ok

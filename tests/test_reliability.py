"""Reliability: corrupted media, interrupts, backpressure and memory. Every frame that entered is
accounted for. Figures these tests produce are recorded in docs/reliability.md."""
from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import cv2
import pytest
from waits import lines_in, until

from flowpipe.testing import run_yaml

FFMPEG = shutil.which("ffmpeg")
needs_ffmpeg = pytest.mark.skipif(FFMPEG is None, reason="ffmpeg (scripts/setup.sh installs it) makes the test media")


def _ffmpeg(*args: str) -> None:
    subprocess.run([FFMPEG, "-hide_banner", "-loglevel", "error", "-y", *args], check=True)


def _accounted(res) -> None:
    f = res.frames
    assert f["in"] == f["out"] + f["dropped"] + f["failed"], f
    assert res.exit_code in (0, 1)
    if res.error:
        assert "\n" not in str(res.error)


def _decode_graph(path: Path, into: str) -> str:
    return f"""
        nodes:
          - {{id: src, type: video_source, config: {{uri: "{path}"}}}}
          - {{id: s, type: collect, config: {{into: {into}}}, inputs: src.frame}}
    """


@pytest.fixture(scope="module")
def h264(tmp_path_factory) -> Path:
    if FFMPEG is None:
        pytest.skip("ffmpeg missing")
    p = tmp_path_factory.mktemp("media") / "clip.mp4"
    _ffmpeg("-f", "lavfi", "-i", "testsrc=size=640x360:rate=30", "-t", "4", "-c:v", "libx264", "-g", "30",
            "-pix_fmt", "yuv420p", "-movflags", "+faststart", str(p))
    return p


@needs_ffmpeg
@pytest.mark.parametrize("cut", [0.3, 0.6, 0.95])
def test_truncated_mp4_ends_cleanly_or_with_a_clear_error(h264, tmp_path, cut) -> None:
    data = h264.read_bytes()
    bad = tmp_path / "cut.mp4"
    bad.write_bytes(data[: int(len(data) * cut)])
    res = run_yaml(_decode_graph(bad, f"trunc{cut}"))
    _accounted(res)
    assert res.frames["in"] < 120  # fewer than the whole clip, every one of them accounted for
    assert res.ok or "node 'src' (video_source)" in str(res.error)


@needs_ffmpeg
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_flipped_bytes_mid_stream_carry_on(h264, tmp_path, seed) -> None:
    import random

    data = bytearray(h264.read_bytes())
    rnd = random.Random(seed)
    start = len(data) // 3  # after the moov box (faststart): corrupt the coded frames
    for _ in range(200):
        data[rnd.randrange(start, len(data))] ^= 0xFF
    bad = tmp_path / "flipped.mp4"
    bad.write_bytes(bytes(data))
    res = run_yaml(_decode_graph(bad, f"flip{seed}"))
    _accounted(res)
    # undecodable frames are skipped and counted; decoding carries on to the end of the file
    assert res.ok and res.frames["in"] + res.nodes["src"].get("decode_errors", 0) >= 100


@needs_ffmpeg
def test_resolution_change_mid_stream(tmp_path) -> None:
    a, b, ab = tmp_path / "a.ts", tmp_path / "b.ts", tmp_path / "ab.ts"
    _ffmpeg("-f", "lavfi", "-i", "testsrc=size=640x360:rate=30", "-t", "1", "-c:v", "libx264", "-pix_fmt", "yuv420p",
            "-f", "mpegts", str(a))
    _ffmpeg("-f", "lavfi", "-i", "testsrc=size=320x240:rate=30", "-t", "1", "-c:v", "libx264", "-pix_fmt", "yuv420p",
            "-f", "mpegts", str(b))
    ab.write_bytes(a.read_bytes() + b.read_bytes())
    res = run_yaml(_decode_graph(ab, "reschange"))
    _accounted(res)
    assert res.ok and res.frames == {"in": 60, "out": 60, "dropped": 0, "failed": 0}


INTERRUPT_GRAPH = """
plugins: [fp_testnodes]
nodes:
  - {{id: decode, type: video_source, config: {{uri: sample, loop: -1, realtime: true}}}}
  - {{id: slow, type: test_fault, config: {{delay_s: {delay}}}, inputs: decode.frame, thread: own}}
  - {{id: write, type: video_writer, config: {{path: "{out}/int.mp4"}}, inputs: slow.out}}
  - {{id: meta, type: jsonl, config: {{path: "{out}/int.jsonl"}}, inputs: slow.out}}
"""


def _run_cli(tmp_path: Path, delay: float) -> subprocess.Popen:
    g = tmp_path / "g.yaml"
    g.write_text(INTERRUPT_GRAPH.format(out=tmp_path, delay=delay))
    env = {**__import__("os").environ, "PYTHONPATH": str(Path(__file__).parent)}
    return subprocess.Popen([sys.executable, "-m", "flowpipe.cli", "run", str(g), "--stats", str(tmp_path / "s.json")],
                            stderr=subprocess.PIPE, text=True, env=env)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_leaves_playable_mp4_and_one_jsonl_line_per_frame(tmp_path, sig) -> None:
    proc = _run_cli(tmp_path, 0.0)
    until(lambda: lines_in(tmp_path / "int.jsonl") > 10, "frames came out", proc=proc)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    stats = json.loads((tmp_path / "s.json").read_text())
    out = stats["frames"]["out"]
    assert out > 10 and stats["frames"]["failed"] == 0 and stats["frames"]["in"] == out
    lines = (tmp_path / "int.jsonl").read_text().splitlines()
    assert len(lines) == out and all(json.loads(x)["frame"] == i for i, x in enumerate(lines))
    cap = cv2.VideoCapture(str(tmp_path / "int.mp4"))
    n = 0
    while cap.read()[0]:
        n += 1
    assert n == out


def test_second_interrupt_forces_a_quick_exit(tmp_path) -> None:
    proc = _run_cli(tmp_path, 1.0)  # one second per frame, a queue before it: a graceful drain takes seconds
    until(lambda: lines_in(tmp_path / "int.jsonl") >= 1, "a frame came out", proc=proc)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.5)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=30)
    assert time.monotonic() - t0 < 8
    assert proc.returncode == 130
    stats = json.loads((tmp_path / "s.json").read_text())
    f = stats["frames"]
    assert f["in"] == f["out"] + f["dropped"] + f["failed"]


RSS_SCRIPT = textwrap.dedent("""
    import json, resource, sys
    sys.path.insert(0, {tests!r})
    import fp_testnodes
    from flowpipe.testing import run_yaml
    res = run_yaml('''
    plugins: [fp_testnodes]
    nodes:
      - {{id: src, type: synthetic_source, config: {{count: {n}, width: 1920, height: 1080}}}}
      - {{id: slow, type: test_fault, config: {{delay_s: 0.004}}, inputs: src.frame, queue: 8{overflow}}}
      - {{id: s, type: null_sink, inputs: slow.out}}
    ''')
    print(json.dumps({{"rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "frames": res.frames,
                      "dropped": res.nodes["slow"]["dropped"]}}))
""")


def _rss(n: int, overflow: str = "") -> dict:
    code = RSS_SCRIPT.format(tests=str(Path(__file__).parent), n=n, overflow=overflow)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_slow_sink_keeps_memory_bounded_and_loses_nothing() -> None:
    short, long = _rss(100), _rss(600)
    for r, n in ((short, 100), (long, 600)):
        assert r["frames"] == {"in": n, "out": n, "dropped": 0, "failed": 0}
    # six times the frames, same peak: memory is bounded by the pools and queues, not by the input
    assert long["rss_mb"] - short["rss_mb"] < 40, (short, long)


def test_drop_policy_counts_every_drop() -> None:
    r = _rss(600, ", overflow: drop_oldest")
    f = r["frames"]
    assert f["in"] == 600 and f["dropped"] == r["dropped"] > 0 and f["out"] + f["dropped"] == 600


def test_a_finished_run_releases_its_buffers_and_fds_at_once(tmp_path) -> None:
    """Long-lived processes build and tear down graphs (source churn): nothing may wait for the GC."""
    import gc
    import os

    from flowpipe import load_graph, run

    root = Path(__file__).resolve().parent.parent
    params = {"output": str(tmp_path / "o.mp4"), "metadata": str(tmp_path / "o.jsonl"), "tiles": None}
    run(load_graph(root / "graphs" / "face_blur_near.yaml", params), max_frames=30)  # warm-up
    gc.disable()
    try:
        before = len(os.listdir("/proc/self/fd"))
        for _ in range(3):
            res = run(load_graph(root / "graphs" / "face_blur_near.yaml", params), max_frames=30)
            assert res.ok
        after = len(os.listdir("/proc/self/fd"))
    finally:
        gc.enable()
    assert after <= before + 2, (before, after)

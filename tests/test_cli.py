"""The command line: exit codes, one-line errors, drawings, node listings."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from flowpipe.cli import main

ROOT = Path(__file__).resolve().parent.parent


def test_validate_all_shipped_graphs_and_examples(capsys) -> None:
    graphs = [str(p) for p in sorted((ROOT / "graphs").glob("*.yaml"))]
    graphs.append(str(ROOT / "examples" / "02_custom_node" / "count_line.yaml"))
    assert main(["validate", *graphs]) == 0
    out = capsys.readouterr().out
    assert out.count(": ok (") == len(graphs)
    assert "loads plugin module: line_counter" in out
    assert "publish (mqtt): publishes nothing: no MQTT broker named (host is empty)" in out  # until one is named


def test_invalid_graph_exits_2_with_one_line_per_error(tmp_path, capsys) -> None:
    g = tmp_path / "bad.yaml"
    g.write_text("nodes:\n  - {id: a, type: synthetic_sorce}\n  - {id: b, type: null_sink, inputs: {in: a.x}}\n")
    assert main(["validate", str(g)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"{g}:2: node 'a' (synthetic_sorce): unknown node type 'synthetic_sorce'; did you mean "
                   f"'synthetic_source'? known: " + err[0].split("known: ")[1]]
    assert main(["run", str(g)]) == 2


def test_missing_file_exits_2(capsys) -> None:
    assert main(["validate", "/nope/graph.yaml"]) == 2
    assert "/nope/graph.yaml: cannot read graph: FileNotFoundError" in capsys.readouterr().err


def test_run_writes_stats_json(tmp_path) -> None:
    stats = tmp_path / "s.json"
    assert main(["run", str(ROOT / "graphs" / "passthrough.yaml"), "--set", "frames=50", "--stats", str(stats)]) == 0
    s = json.loads(stats.read_text())
    assert s["frames"] == {"in": 50, "out": 50, "dropped": 0, "failed": 0} and s["exit"] == 0
    assert set(s["nodes"]["hop"]) >= {"type", "frames", "fps", "latency_ms", "queue_max"}
    assert set(s["nodes"]["hop"]["latency_ms"]) == {"p50", "p95", "p99"}
    assert s["edges"]["src->hop"] == {"frames": 50, "copies": 0, "bytes_copied": 0, "memory": s["edges"]["src->hop"]["memory"]}
    assert s["edges"]["src->hop"]["memory"] in ("memfd", "dma-heap", "host")


def test_runtime_failure_exits_1_naming_file_line_and_node(tmp_path, capsys) -> None:
    """A node that fails as it runs is named with its graph file and line, as a config error is."""
    g = tmp_path / "g.yaml"
    g.write_text("nodes:\n  - {id: v, type: video_source, config: {uri: /nope.mp4}}\n"
                 "  - {id: s, type: null_sink, inputs: v.frame}\n")
    assert main(["run", str(g)]) == 1
    err = capsys.readouterr().err.strip().splitlines()  # said alone: no frame entered, no frame count before it
    assert err[-1:] == [f"error: {g}:2: node 'v' (video_source): uri: no such file or folder: /nope.mp4"], err
    assert not any(line.startswith("frames: in") for line in err), err
    # validate cannot know the host that will run it: it says what this one lacks, and passes
    assert main(["validate", str(g)]) == 0
    assert (f"  v (video_source): not on this host: uri: no such file or folder: /nope.mp4 ({g}:2; run refuses it "
            "here)") in capsys.readouterr().out


def test_a_run_that_fails_to_start_leaves_the_last_run_s_records(tmp_path) -> None:
    """The records file is emptied by this run's first record, not when it opens: a node that fails to open
    after it (here the detector, on a property its device lacks) leaves the last run's records beside the
    recording they name."""
    g = tmp_path / "g.yaml"
    g.write_text("params: {props: {}}\nnodes:\n"
                 "  - {id: src, type: synthetic_source, config: {count: 6}}\n"
                 "  - {id: pre, type: preprocess, inputs: src.frame, config: {size: [128, 128], layout: NHWC}}\n"
                 "  - {id: det, type: inference, inputs: pre.tensor, config: {model: blazeface_short, device: CPU, "
                 "properties: '${params.props}'}}\n"
                 "  - {id: faces, type: blazeface_decode, config: {variant: short}, inputs: det.tensors}\n"
                 f"  - {{id: meta, type: jsonl, config: {{path: {tmp_path}/m.jsonl}}, inputs: faces.detections}}\n")
    records = tmp_path / "m.jsonl"
    assert main(["run", str(g)]) == 0 and len(records.read_text().splitlines()) == 6
    assert main(["run", str(g), "--set", "props={NOT_A_KEY: 1}"]) == 1
    assert len(records.read_text().splitlines()) == 6
    assert main(["run", str(g), "--max-frames", "2"]) == 0 and len(records.read_text().splitlines()) == 2


def test_two_record_writers_of_one_file_keep_each_other_s_records(tmp_path) -> None:
    """Two jsonl nodes writing one file: the first record of either empties the last run's, once; the other's
    first record takes none of the lines already written."""
    g = tmp_path / "g.yaml"
    g.write_text("nodes:\n"
                 "  - {id: a, type: synthetic_source, config: {count: 20, width: 64, height: 48}}\n"
                 "  - {id: b, type: synthetic_source, config: {count: 5, width: 64, height: 48, fps: 20, "
                 "realtime: true}}\n"
                 "  - {id: pa, type: passthrough, inputs: {in: a.frame}}\n"
                 "  - {id: pb, type: passthrough, inputs: {in: b.frame}}\n"
                 f"  - {{id: ja, type: jsonl, config: {{path: {tmp_path}/m.jsonl}}, inputs: {{detections: pa.out}}}}\n"
                 f"  - {{id: jb, type: jsonl, config: {{path: {tmp_path}/m.jsonl}}, inputs: {{detections: pb.out}}}}\n")
    (tmp_path / "m.jsonl").write_text('{"stream": "old"}\n')
    for _ in range(2):
        assert main(["run", str(g)]) == 0
        records = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
        assert sorted((r["stream"], r["frame"]) for r in records) == sorted(
            [("a", i) for i in range(20)] + [("b", i) for i in range(5)])


def test_a_missing_input_is_said_before_any_model_compiles(tmp_path, capsys, monkeypatch) -> None:
    """Every node is asked what it would not find before any opens: the detector behind a missing clip never
    loads its model."""
    import flowpipe_nodes.inference.node as inference

    opened: list[str] = []
    monkeypatch.setattr(inference.Inference, "open", lambda self, ctx: opened.append(self.id))
    assert main(["run", str(ROOT / "graphs" / "face_blur.yaml"), "--set", f"input={tmp_path / 'gone.mp4'}"]) == 1
    err = capsys.readouterr().err
    assert f"node 'decode' (video_source): uri: no such file or folder: {tmp_path / 'gone.mp4'}" in err
    assert opened == [] and "graphs/face_blur.yaml:" in err


@pytest.mark.parametrize("suffix, graph, head", [
    (".dot", "face_blur", "digraph flowpipe {\n  rankdir=TB;"),  # 17 nodes in a row: top to bottom
    (".mmd", "face_blur", "flowchart TB"),
    (".dot", "passthrough", "digraph flowpipe {\n  rankdir=LR;"),  # a short graph: left to right
    (".mmd", "passthrough", "flowchart LR"),
])
def test_graph_drawing(tmp_path, suffix, graph, head) -> None:
    out = tmp_path / f"g{suffix}"
    assert main(["graph", str(ROOT / "graphs" / f"{graph}.yaml"), "-o", str(out)]) == 0
    text = out.read_text()
    assert text.startswith(head), text
    if graph == "face_blur":  # an edge's port named once where both ends share it
        assert "decode" in text and "detections -> frame" in text and "frame -> frame" not in text
        assert ("|tensor|" if suffix == ".mmd" else 'label="tensor"') in text


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz not installed")
def test_graph_svg_with_graphviz(tmp_path) -> None:
    out = tmp_path / "g.svg"
    assert main(["graph", str(ROOT / "graphs" / "face_blur.yaml"), "-o", str(out)]) == 0
    assert "<svg" in out.read_text()


def test_nodes_listing_and_detail(capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    assert main(["nodes"]) == 0
    listing = capsys.readouterr().out
    for t in ("video_source", "preprocess", "inference", "blazeface_decode", "tracker", "blur", "mqtt"):
        assert t in listing
    assert max(map(len, listing.splitlines())) <= 100
    # each type's first sentence whole, however long, wrapped under its name; its ports after it
    words = " ".join(listing.split())
    assert ("animal_faces Drops each face that lies (`cover` of its box) in the box of an animal a person detector "
            "found, and in no person's box; then the animals' boxes go too, and the people's unless `pass_persons` "
            "(the frame leaves with what it came with besides them). in: detections (detections); out: detections "
            "(detections)") in words
    assert "ssd_decode Decodes SSD detections. in: tensors (tensors)" in words
    assert main(["nodes", "mqtt"]) == 0
    detail = capsys.readouterr().out
    assert "\nAn empty `host` names no broker" in detail  # the whole description
    assert "  qos: int (default 1)  MQTT's quality of service: 0 at most once, 1 at least once, 2 exactly once\n" in detail
    assert main(["nodes", "preprocess"]) == 0
    detail = capsys.readouterr().out
    assert "inputs:  frame (frame)" in detail and "size:" in detail and "backend:" in detail
    # a choice's values, a part's own fields below it
    assert "  resize: 'stretch' | 'letterbox' (default 'stretch')" in detail
    assert "  tiles: Tiles | null (default None)" in detail and "\n      grid: tuple[int, int] (default (2, 2))" in detail
    assert main(["nodes", "preproces"]) == 2


@pytest.mark.parametrize(("doc", "sentence"), [
    ("Decodes SSD detections. Suppression done in the model.", "Decodes SSD detections."),
    ("Runs a model (or several at once: ``device: GPU+CPU``); outputs land in\n    ``frame.tensors`` by name.\n\n"
     "    More.", "Runs a model (or several at once: `device: GPU+CPU`); outputs land in `frame.tensors` by name."),
    ("Writes H.264 at 1.2x (e.g. a camera. Not this one) to ``a. B``, e.g. a file. Next.",
     "Writes H.264 at 1.2x (e.g. a camera. Not this one) to `a. B`, e.g. a file."),
    ("A paragraph with no full stop\n    over two lines\n\n    Then more. Here.", "A paragraph with no full stop over two lines"),
    ("", ""),
])
def test_a_node_s_summary_is_its_first_sentence_whole(doc, sentence) -> None:
    from flowpipe.cli.commands import first_sentence

    assert first_sentence(doc) == sentence


def test_devices_reports_shared_memory_and_openvino(capsys) -> None:
    assert main(["devices", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert "memfd" in rep["shared_memory"] and "CPU" in rep["openvino"]
    assert rep["inference_default"]["device"] in ("NPU", "GPU", "CPU")


def test_console_script_is_installed() -> None:
    exe = shutil.which("flowpipe")
    assert exe, "pip install -e . provides the flowpipe command"
    r = subprocess.run([exe, "validate", str(ROOT / "graphs" / "passthrough.yaml")], capture_output=True, text=True)
    assert r.returncode == 0 and ": ok (" in r.stdout


def test_bench_reports_rates_cpu_and_accounting_for_several_streams(tmp_path, capsys) -> None:
    out = tmp_path / "bench.json"
    code = main(["bench", str(ROOT / "graphs" / "passthrough.yaml"), "--frames", "3000", "--warmup", "50",
                 "--streams", "2", "--set", "frames=10000", "--json", str(out)])
    assert code == 0
    r = json.loads(out.read_text())
    assert r["exit"] == 0 and r["streams"] == 2
    assert r["frames"]["in"] == r["frames"]["out"] + r["frames"]["dropped"] + r["frames"]["failed"]
    assert r["frames"]["out"] >= 2 * 3050  # frames + warm-up per stream (the run stops there)
    assert sorted(r["per_stream_fps"]) == ["src", "src-1"] and all(v > 0 for v in r["per_stream_fps"].values())
    assert r["fps"] > 0 and r["copies_per_frame"] == 0
    # CPU per frame inside the measured window (start-up excluded): of the order of the whole run's average
    whole = 1e3 * r["cpu_s"] / r["frames"]["out"]
    assert r["cpu_ms_per_frame"] is not None and 0 < r["cpu_ms_per_frame"] < 2 * whole


def test_bench_rate_counts_no_frame_made_before_its_window_whatever_the_bursts() -> None:
    """A writer that passes frames on once their second of video is on disk ends 25 at once: the window
    starts at the warm-up's last frame, and the frames that ended in its burst were made before it. Steady
    frames give what they always gave."""
    from flowpipe.cli.bench import _bursts, _window_fps

    bursts = [1.0 + k + i * 1e-4 for k in range(4) for i in range(25)]  # 25 fps, a second at a time
    assert _window_fps(bursts, 10) == pytest.approx(25.0, rel=1e-3)  # (it read 30: 90 frames over 3 s)
    assert _bursts(bursts, 10) == 3  # too few to read a rate from: the command says so
    steady = [i / 25 for i in range(100)]
    assert _window_fps(steady, 10) == pytest.approx(90 / (99 / 25 - 9 / 25), rel=1e-6)
    assert _bursts(steady, 10) == 90


def test_graph_writes_dot_to_stdout_and_refuses_an_unknown_extension(tmp_path, capsys) -> None:
    g = str(ROOT / "graphs" / "passthrough.yaml")
    assert main(["graph", g]) == 0
    out = capsys.readouterr().out
    assert out.startswith("digraph") and "->" in out, out[:200]
    assert main(["graph", g, "--format", "mermaid"]) == 0 and capsys.readouterr().out.startswith("flowchart")
    assert main(["graph", g, "-o", str(tmp_path / "g.txt")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: -o {tmp_path / 'g.txt'}: unknown extension '.txt': expected one of .dot, .gv, .mmd, .md, "
                   ".png, .svg (or --format)"], err
    assert not (tmp_path / "g.txt").exists()


def test_bench_prints_a_summary_and_the_whole_json_only_when_asked(tmp_path, capsys) -> None:
    g = str(ROOT / "graphs" / "passthrough.yaml")
    assert main(["bench", g, "--frames", "3000", "--warmup", "50", "--set", "frames=10000"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{g}: 1 stream(s), 1 process(es)" and len(out) <= 9, out
    # (a rate the window could not measure reads '-', as --json says null: the bench test checks the figures)
    assert [line.split("  ")[1].strip() for line in out[1:7]] == [
        "fps (all streams)", "slowest stream", "CPU per frame", "copied per frame", "peak memory", "frames"], out
    assert out[4].endswith("0 bytes (0.00 copies)") and out[6].endswith("dropped 0, failed 0"), out
    assert main(["bench", g, "--frames", "300", "--warmup", "20", "--set", "frames=1000", "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["streams"] == 1


def test_serve_without_its_extra_says_which_to_install() -> None:
    """``flowpipe serve`` where uvicorn is not installed (the run-only setup): one line naming the extra, exit 2,
    not a traceback or a bare ModuleNotFoundError."""
    import subprocess
    import sys

    code = ("import sys; sys.modules['uvicorn'] = None; from flowpipe.cli import program; "
            "sys.argv = ['flowpipe', 'serve', '--port', '1']; program()")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip() == ("error: flowpipe serve needs the serve extra (uvicorn is not installed): pip install "
                                "-e '.[serve]' in a checkout, or pip install 'flowpipe[serve]'"), p.stderr

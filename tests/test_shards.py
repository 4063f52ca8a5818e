"""One graph over several processes (``processes: N``): streams sharded, one account, one set of outputs."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from waits import lines_in, until

from flowpipe import GraphError, load_graph
from flowpipe.runtime.shards import ShardedRun, auto_processes, plan, resolve_processes

HERE = Path(__file__).resolve().parent


def _graph(text: str, tmp_path: Path, name: str = "g.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return load_graph(str(path)), path


def _three_streams(tmp_path: Path, extra: str = "", counts: tuple[int, int, int] = (120, 90, 60),
                   realtime: bool = False, hop: str = "{id: hop, type: passthrough, inputs: {in: [a, b, c]}}") -> str:
    rt = ", realtime: true, fps: 100" if realtime else ""
    return f"""
        plugins: [fp_testnodes]
        processes: 2
        nodes:
          - {{id: a, type: synthetic_source, config: {{count: {counts[0]}, width: 64, height: 48{rt}}}}}
          - {{id: b, type: synthetic_source, config: {{count: {counts[1]}, width: 64, height: 48{rt}}}}}
          - {{id: c, type: synthetic_source, config: {{count: {counts[2]}, width: 64, height: 48{rt}}}}}
          - {hop}
          - {{id: meta, type: jsonl, config: {{path: {tmp_path}/m.jsonl}}, inputs: hop}}
          - {{id: video, type: video_writer, config: {{path: {tmp_path}/v.mp4}}, inputs: hop}}
        {extra}
    """


def _lines(path: Path) -> list[tuple[str, int]]:
    return [(r["stream"], r["frame"]) for r in map(json.loads, path.read_text().splitlines())]


def test_streams_are_sharded_and_every_frame_is_written_once(tmp_path) -> None:
    spec, _ = _graph(_three_streams(tmp_path), tmp_path)
    assert plan(spec, 2) == [["a", "c"], ["b"]]
    res = ShardedRun(spec, 2).run()
    assert res.ok, res.error
    assert res.frames == {"in": 270, "out": 270, "dropped": 0, "failed": 0}
    assert res.per_stream == {"a": 120, "b": 90, "c": 60}
    lines = _lines(tmp_path / "m.jsonl")  # two processes appended to one file: whole lines, each once
    assert sorted(lines) == sorted([("a", i) for i in range(120)] + [("b", i) for i in range(90)]
                                   + [("c", i) for i in range(60)])
    pids = {sh["pid"] for sh in res.shards}
    assert len(pids) == 2 and os.getpid() not in pids
    assert [sh["streams"] for sh in res.shards] == [["a", "c"], ["b"]]
    # per node: counts summed over the shards, each shard's own block kept
    assert res.nodes["hop"]["frames"] == 270 and set(res.nodes["hop"]["shards"]) == {"0", "1"}
    assert res.edges["a->hop"]["frames"] == 120 and res.edges["hop->meta"]["frames"] == 270
    assert res.edges["hop->meta"]["copies"] == 0
    # one video file per stream; the plain path is the first shard's first stream's
    videos = sorted(p.name for p in tmp_path.glob("v*.mp4"))
    assert len(videos) == 3 and "v.mp4" in videos


def test_a_shard_killed_costs_only_its_frames_in_flight(tmp_path) -> None:
    """SIGKILL inside shard 1 (stream b, frame 40): streams a and c finish; every frame is accounted."""
    hop = "{id: hop, type: test_crash, config: {crash_on: [40], streams: [b]}, inputs: {in: [a, b, c]}}"
    spec, _ = _graph(_three_streams(tmp_path, hop=hop, realtime=True), tmp_path)
    res = ShardedRun(spec, 2).run()
    assert res.exit_code == 1
    assert "shard 1" in str(res.error) and "streams b" in str(res.error) and "signal 9" in str(res.error)
    f = res.frames
    assert f["in"] == f["out"] + f["dropped"] + f["failed"]
    assert res.per_stream["a"] == 120 and res.per_stream["c"] == 60  # the other shard is untouched
    lines = _lines(tmp_path / "m.jsonl")
    assert {i for s, i in lines if s == "a"} == set(range(120))
    assert all(i < 40 for s, i in lines if s == "b")


def test_a_killed_shard_restarts_its_streams_where_they_stopped(tmp_path) -> None:
    """``on_error: restart`` on stream b's source: SIGKILL at frame 40 costs the frames in flight (failed,
    named); a new process resumes b after the last frame that entered the dead one; a and c never stop."""
    hop = "{id: hop, type: test_crash, config: {crash_on: [40], streams: [b]}, inputs: {in: [a, b, c]}}"
    text = _three_streams(tmp_path, hop=hop, realtime=True).replace(
        "{id: b, type: synthetic_source, config: {count: 90, width: 64, height: 48, realtime: true, fps: 100}}",
        "{id: b, type: synthetic_source, on_error: restart, restarts: 2,"
        " config: {count: 90, width: 64, height: 48, realtime: true, fps: 100}}")
    spec, _ = _graph(text, tmp_path)
    run = ShardedRun(spec, 2)
    res = run.run()
    assert res.ok, res.error
    f = res.frames
    assert f["in"] == f["out"] + f["dropped"] + f["failed"]
    assert res.per_stream == {"a": 120, "b": 90, "c": 60}  # every frame of every stream accounted once
    dead = [sh for sh in res.shards if sh["restarted"]]
    assert len(dead) == 1 and dead[0]["streams"] == ["b"] and "signal 9" in dead[0]["error"]
    assert res.shard_restarts == 1 and res.to_json()["processes"] == 2
    assert [sh["generation"] for sh in res.shards if sh["streams"] == ["b"]] == [0, 1]
    failed = f["failed"]
    assert 1 <= failed < 40 and re.search(r"frames in flight counted as failed: b \d", dead[0]["error"])
    lines = _lines(tmp_path / "m.jsonl")
    b = [i for s, i in lines if s == "b"]
    assert {i for s, i in lines if s == "a"} == set(range(120))
    assert len(set(range(90)) - set(b)) <= failed and max(b) == 89  # resumed and ran to the end
    assert 40 not in b  # the frame that killed the process never came back
    assert (tmp_path / "v-b.restart1.mp4").stat().st_size > 0 and (tmp_path / "v-b.mp4").exists()
    assert not any(p.is_alive() for p in (sh.proc for sh in run.shards))
    # the dead process's source left its stats as last reported (a camera's outages would be there), beside
    # its successor's: the frames it read before the kill, to within a report's lag
    blocks = res.nodes["b"]["shards"]
    died = [k for k in blocks if k.endswith("died")]
    assert sorted(blocks) == ["1", *died] and len(died) == 1 and str(dead[0]["pid"]) in died[0], blocks
    assert 0 < blocks[died[0]]["frames"] <= 41 and blocks["1"]["frames"] <= 90 - 40
    assert res.nodes["b"]["frames"] == blocks[died[0]]["frames"] + blocks["1"]["frames"]


def test_streams_added_at_run_time_go_on_in_the_process_that_replaces_a_killed_one(tmp_path, started) -> None:
    """Streams added while the graph runs (``flowpipe serve``'s cameras), over two processes: SIGKILL at
    stream x's frame 40 costs its frames in flight, counted from the dead process's board (the rows added
    streams take); a new process adds x again, going on after the last frame that entered, as it does for
    the graph's own streams; y, in the other process, never stops."""
    run, worker, results = started("on_error: restart, restarts: 2")
    deadline = time.monotonic() + 60
    run.live.add("x", "cam")
    run.live.add("y", "cam")
    first = run.live.where["x"]
    assert run.live.where["y"] is not first  # one a process
    # both run to their last frame (x after its restart), then the run is stopped
    while sorted(r["stream"] for r in run.live.states() if r["state"] == "ended") != ["x", "y"]:
        assert time.monotonic() < deadline, json.dumps(run.live.states(), default=str)  # whole, not cut short
        time.sleep(0.1)
    again = run.live.where["x"]
    assert again is not first and again.again == ["x"] and first.restarted
    run.stop()
    worker.join(60)
    (res,) = results
    assert res.ok, res.error
    f = res.frames
    assert f["in"] == f["out"] + f["dropped"] + f["failed"]
    assert res.per_stream == {"x": 90, "y": 90}  # every frame of both accounted once, the dead process's too
    dead = [sh for sh in res.shards if sh["restarted"]]
    assert len(dead) == 1 and "signal 9" in dead[0]["error"]
    assert 1 <= f["failed"] < 40 and re.search(r"frames in flight counted as failed: x \d", dead[0]["error"])
    lines = _lines(tmp_path / "m.jsonl")
    x = [i for s, i in lines if s == "x"]
    assert len(x) == len(set(x)) and max(x) == 89 and 40 not in x  # resumed after frame 40, never twice
    assert len(set(range(90)) - set(x)) <= f["failed"]
    assert {i for s, i in lines if s == "y"} == set(range(90))


def test_a_stream_added_at_run_time_whose_process_is_not_restarted_is_listed_failed_with_its_account(
        tmp_path, started) -> None:
    """The template without ``on_error: restart``: the stream ends with its process, listed as failed with
    the dead process's account of it (the frame in flight failed); the other process's stream goes on."""
    run, worker, results = started("on_error: fail")
    deadline = time.monotonic() + 60
    run.live.add("x", "cam")
    run.live.add("y", "cam")
    while {r["stream"]: r["state"] for r in run.live.states()} != {"x": "failed", "y": "ended"}:
        assert time.monotonic() < deadline, run.live.states()
        time.sleep(0.1)
    (x,) = [r for r in run.live.states() if r["stream"] == "x"]
    assert "signal 9" in x["error"] and x["in"] >= 41 and x["failed"] >= 1
    assert x["in"] == x["out"] + x["dropped"] + x["failed"] and "x" not in run.live.where
    run.stop()
    worker.join(60)
    (res,) = results
    assert res.per_stream == {"x": x["in"], "y": 90} and res.frames["failed"] == x["failed"]


def test_a_removed_stream_s_board_row_is_freed_and_its_account_kept() -> None:
    """The rows of streams added at run time: one removed gives its row to the next stream added, its account
    kept apart (a stream added later on its old row starts from nothing); the same name added again goes on
    after its last frame."""
    from flowpipe.runtime.board import StreamBoard

    board = StreamBoard(["a"], spare=1)
    assert board.bind("x") == 1 and board.bind("y") is None  # one spare row: held by x
    for i in range(50):
        board.entered("x", i)
        board.ended("x", i, "out")
    board.retire("x")
    assert board.bind("z") == 1  # x's row, cleared
    board.entered("z", 0)  # z's first frame, in flight
    assert board.per_stream() == {"x": 50, "z": 1} and board.next_index() == {"x": 50, "z": 1}
    assert board.totals() == {"in": 51, "out": 50, "dropped": 0, "failed": 0}
    assert board.account("z") == {"in": 1, "out": 0, "dropped": 0, "failed": 1}
    assert board.in_flight() == [("z", 0)]
    board.close()


@pytest.fixture
def started(tmp_path: Path):
    """Starts a graph of one template source over two processes, running in a thread (frame 40 of a stream
    named x kills its process): ``started(on_error)`` gives the run, its thread and its results. A run the
    test leaves running is stopped after it, failed or not (its thread must not outlive the suite)."""
    import threading

    runs: list = []

    def start(on_error: str) -> tuple:
        spec, _ = _graph(f"""
            plugins: [fp_testnodes]
            processes: 2
            nodes:
              - {{id: cam, type: synthetic_source, template: true, {on_error},
                  config: {{count: 90, width: 64, height: 48, realtime: true, fps: 100}}}}
              - {{id: hop, type: test_crash, config: {{crash_on: [40], streams: [x]}}, inputs: {{in: cam}}}}
              - {{id: meta, type: jsonl, config: {{path: {tmp_path}/m.jsonl}}, inputs: hop}}
        """, tmp_path)
        run = ShardedRun(spec, 2)
        results: list = []
        worker = threading.Thread(target=lambda: results.append(run.run()), daemon=True)
        worker.start()
        runs.append((run, worker))
        deadline = time.monotonic() + 60
        while not run.running:
            assert time.monotonic() < deadline and worker.is_alive()
            time.sleep(0.05)
        return run, worker, results

    yield start
    for run, worker in runs:
        if worker.is_alive():
            run.stop()
            worker.join(60)


def test_a_call_to_a_process_that_is_gone_fails_at_once_even_one_made_after_its_death_was_taken(
        tmp_path) -> None:
    """A call on the streams (the console's states) made just after the supervisor took a process's death,
    before the process is marked failed or replaced, fails at once: it used to wait out its timeout (60 s),
    as nothing was left to answer it."""
    from multiprocessing import Pipe

    from flowpipe.runtime.board import StreamBoard
    from flowpipe.runtime.commands import States
    from flowpipe.runtime.shards import _Shard

    spec, _ = _graph(_three_streams(tmp_path), tmp_path)
    run = ShardedRun(spec, 2)
    mine, theirs = Pipe()
    sh = _Shard(index=0, sources=["a"], proc=None, conn=mine, board=StreamBoard(["a"]))
    run._answered(sh)  # noqa: SLF001 - the death taken; error and restarted are set later, as in _died
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="shard 0 is gone"):
        run.call(sh, States(), timeout=5)
    assert time.monotonic() - t0 < 1
    assert not theirs.poll()  # nothing was sent to it
    sh.board.close()


def test_an_open_failure_in_one_shard_stops_every_shard_before_any_frame(tmp_path) -> None:
    text = _three_streams(tmp_path).replace(
        "{id: b, type: synthetic_source, config: {count: 90, width: 64, height: 48}}",
        "{id: b, type: video_source, config: {uri: " + str(tmp_path / "missing.mp4") + "}}")
    spec, _ = _graph(text, tmp_path)
    res = ShardedRun(spec, 2).run()
    assert res.exit_code == 1
    assert "node 'b' (video_source): uri: no such file or folder" in str(res.error) and "missing.mp4" in str(res.error)
    assert res.frames["in"] == 0
    assert (tmp_path / "m.jsonl").read_text() == ""


def test_first_interrupt_drains_every_shard(tmp_path) -> None:
    """SIGINT to the supervisor (as a terminal sends it): every shard drains, the outputs are whole."""
    path = tmp_path / "g.yaml"
    path.write_text(textwrap.dedent(_three_streams(tmp_path, counts=(5000, 5000, 5000), realtime=True)))
    env = {**os.environ, "PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen([sys.executable, "-m", "flowpipe.cli", "run", str(path), "--stats",
                             str(tmp_path / "s.json")], env=env, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    until(lambda: lines_in(tmp_path / "m.jsonl") >= 10, "frames came out", proc=proc)
    os.killpg(proc.pid, signal.SIGINT)  # the whole process group, as Ctrl-C does
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    stats = json.loads((tmp_path / "s.json").read_text())
    f = stats["frames"]
    assert 0 < f["in"] < 15000 and f["in"] == f["out"] and f["failed"] == 0, f
    assert len(_lines(tmp_path / "m.jsonl")) == f["out"]
    assert stats["processes"] == 2


def test_sharding_is_refused_with_in_memory_nodes(tmp_path) -> None:
    with pytest.raises(GraphError, match=r"node 'sink' \(collect\): processes: 2 is not available with collect: "
                                         r"it keeps packets in the memory of the process that started the run"):
        _graph("""
            processes: 2
            nodes:
              - {id: a, type: synthetic_source}
              - {id: sink, type: collect, config: {into: x}, inputs: a}
        """, tmp_path)


def test_processes_auto_and_limits(tmp_path, caplog) -> None:
    spec, _ = _graph(_three_streams(tmp_path), tmp_path)
    assert auto_processes(spec, cores=2) == 1  # small machines stay in one process
    assert auto_processes(spec, cores=16) == 3  # never more processes than streams
    assert auto_processes(spec, cores=8) == 3  # one per stream, never more than streams
    ids = [f"s{i}" for i in range(16)]
    sources = "".join(f"\n              - {{id: {i}, type: synthetic_source, config: {{count: 2}}}}" for i in ids)
    sixteen, _ = _graph(f"""
            plugins: [fp_testnodes]
            processes: auto
            nodes:{sources}
              - {{id: hop, type: passthrough, inputs: {{in: [{', '.join(ids)}]}}}}
              - {{id: meta, type: jsonl, config: {{path: {tmp_path}/m16.jsonl}}, inputs: hop}}
        """, tmp_path)
    assert len(sixteen.sources()) == 16
    assert auto_processes(sixteen, cores=16) == 16  # one process a stream, as many as the cores
    assert auto_processes(sixteen, cores=12) == 12  # never more processes than cores
    with caplog.at_level("WARNING", logger="flowpipe.shards"):
        assert resolve_processes(spec, 3) == 3 and not caplog.records
        assert resolve_processes(spec, 8) == 3  # asked for more than there are streams: said so
    assert [r.getMessage() for r in caplog.records] == [
        "processes: 8 asked for, 3 used: a process runs whole streams, and the graph has 3"]
    assert resolve_processes(spec, 1) == 1
    with pytest.raises(GraphError, match=r"processes: expected an integer 1\.\.256 or 'auto', got 0"):
        _graph("processes: 0\nnodes:\n  - {id: a, type: synthetic_source}\n", tmp_path)


def test_pools_are_sized_by_the_frames_that_keep_stages_busy(tmp_path) -> None:
    """A source's pool holds, per stage downstream, one frame inside and ``prefetch`` waiting, whatever the
    queue capacity (6 stages at queue 8: 14 frames, not 64); a queue that drops on overflow keeps its whole
    capacity. The pool bounds the frames in flight: no queue fills past it."""
    from flowpipe.runtime.runner import Runner

    def sized(prefetch: int, overflow: str = "block") -> tuple[int, int]:
        lines = ["plugins: [fp_testnodes]", f"prefetch: {prefetch}", "nodes:",
                 "  - {id: src, type: synthetic_source, config: {count: 200, width: 64, height: 48}}"]
        for i in range(5):
            lines.append(f"  - {{id: h{i}, type: passthrough, queue: 8, overflow: {overflow}, "
                         f"inputs: {{in: {'src' if i == 0 else f'h{i - 1}'}}}}}")
        lines.append("  - {id: sink, type: collect, config: {into: out}, inputs: h4}")
        path = tmp_path / f"p{prefetch}{overflow}.yaml"
        path.write_text("\n".join(lines) + "\n")
        runner = Runner(load_graph(str(path)))
        res = runner.run()
        assert res.ok and res.frames["in"] == res.frames["out"] + res.frames["dropped"] == 200
        return runner.frames_in_flight("src"), res.nodes["h0"]["queue_max"]

    n1, q1 = sized(1)
    assert n1 == 6 * 2 + 2 and q1 <= n1
    assert sized(0)[0] == 6 + 2 and sized(3)[0] == 6 * 4 + 2
    assert sized(1, overflow="drop_oldest")[0] == 5 * 8 + 2 + 2  # dropping queues need their frames
    (tmp_path / "bad.yaml").write_text("prefetch: -1\nnodes:\n  - {id: s, type: synthetic_source}\n")
    with pytest.raises(GraphError, match=r"bad\.yaml:1: prefetch: expected an integer 0\.\.64, got -1"):
        load_graph(str(tmp_path / "bad.yaml"))


def test_a_graph_not_running_takes_no_change_of_configs(tmp_path) -> None:
    """Before a run has begun (or after it ended), a change of configs is refused in one line, over one
    process or several, and the graph the processes would start from is left as it was."""
    from flowpipe.runtime import Runner

    spec = load_graph("<g>", text="plugins: [fp_testnodes]\nnodes:\n"
                                  "  - {id: s, type: synthetic_source, config: {count: 5}}\n"
                                  "  - {id: d, type: test_one_face, inputs: {frame: s}}\n"
                                  "  - {id: t, type: tracker, inputs: {detections: d.detections}}\n")
    change = {"t": {"high_score": 0.9}}
    for run in (Runner(spec), ShardedRun(spec, 2)):
        with pytest.raises(RuntimeError, match=r"^the graph is not running$"):
            run.live.retune(change)
    assert spec.node("t").config.high_score == 0.5  # type: ignore[attr-defined]


def test_a_frame_whose_record_was_written_before_its_process_died_is_counted_out(tmp_path) -> None:
    """A frame goes to the records and to a second sink; its process is killed (SIGKILL) once its record is in
    the file and before the other sink let it go. The supervisor finds its record: it went through (out), not
    failed, so every record names a frame counted out, and the frames in flight that had none are failed."""
    crash = (f"{{id: crash, type: test_crash, config: {{crash_on: [40], streams: [b], after_record: {tmp_path}/m.jsonl}},"
             " inputs: {in: hop}}")
    text = _three_streams(tmp_path, realtime=True, extra="").replace(
        f"  - {{id: video, type: video_writer, config: {{path: {tmp_path}/v.mp4}}, inputs: hop}}", f"  - {crash}")
    spec, _ = _graph(text, tmp_path)
    res = ShardedRun(spec, 2).run()
    assert res.exit_code == 1 and "signal 9" in str(res.error)
    f = res.frames
    assert f["in"] == f["out"] + f["dropped"] + f["failed"]
    lines = _lines(tmp_path / "m.jsonl")
    assert ("b", 40) in lines and len(lines) == len(set(lines))
    assert len(lines) == f["out"], (len(lines), f)


def test_recorded_finds_the_records_of_frames_in_flight_in_the_file_s_tail_and_no_cut_line(tmp_path) -> None:
    from flowpipe.runtime.shards import recorded

    path = tmp_path / "m.jsonl"
    lines = [json.dumps({"stream": "a", "frame": i, "pts": i / 25, "objects": []}, separators=(",", ":"))
             for i in range(200)]
    cut = '{"stream":"a","frame":200,"pts"'  # the last line, cut short by the death
    path.write_text("\n".join(lines) + "\n" + cut)
    want = [("a", 5), ("a", 198), ("a", 199), ("a", 200), ("b", 199)]
    assert recorded([str(path)], want) == [("a", 5), ("a", 198), ("a", 199)]
    tail = len(cut) + 1 + len(lines[-1]) + 1 + 5  # the tail starts inside frame 198's line: that one is no record
    assert recorded([str(path)], want, tail=tail) == [("a", 199)]
    assert recorded([str(tmp_path / "none.jsonl"), "-"], want) == []


def test_a_low_soft_limit_on_open_files_is_raised_to_the_hard_one(tmp_path) -> None:
    """Four streams of the main job over two processes and the device owner hold more fds than a soft limit of 256
    (shared frame buffers are fds): "Too many open files" in the owner, before. The command line raises the soft
    limit to the hard one, for itself and the processes it starts."""
    import resource
    import subprocess
    import sys

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 4096:
        pytest.skip(f"the hard limit on open files is {hard}: too low to run the job at all")

    def low() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))

    out = tmp_path / "b.json"
    p = subprocess.run([sys.executable, "-m", "flowpipe.cli", "bench", str(HERE.parent / "graphs" / "face_blur.yaml"),
                        "--streams", "4", "--processes", "2", "--frames", "10", "--warmup", "2", "--json", str(out),
                        "--set", f"output={tmp_path}/o.mp4", "--set", f"metadata={tmp_path}/o.jsonl"],
                       cwd=tmp_path, capture_output=True, text=True, preexec_fn=low, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    got = json.loads(out.read_text())
    assert got["frames"]["failed"] == 0 and got["frames"]["out"] == got["frames"]["in"] > 0


def test_a_run_that_needs_more_open_files_than_the_hard_limit_is_refused_before_it_opens(tmp_path) -> None:
    """Eight streams over two processes under a hard limit of 360 open files: each process needs at least 384
    (a process and four streams' frame buffers), so the run is refused at once, in one line that says what it
    needs, the limit and how to raise it, before a model loads or a node opens."""
    import resource
    import subprocess
    import sys

    def low() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (360, 360))

    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "flowpipe.cli", "bench", str(HERE.parent / "graphs" / "face_blur.yaml"),
                        "--streams", "8", "--processes", "2", "--frames", "10", "--set", f"output={tmp_path}/o.mp4",
                        "--set", f"metadata={tmp_path}/o.jsonl"],
                       cwd=tmp_path, capture_output=True, text=True, preexec_fn=low, timeout=120)
    assert p.returncode == 2, p.stderr[-2000:]
    (line,) = p.stderr.strip().splitlines()
    assert line.endswith("face_blur.yaml: this run needs at least 384 open files in each of its 2 processes (192 + 4 "
                         "stream(s) x 48: every shared frame buffer is one) and the hard limit is 360: raise it (ulimit "
                         "-Hn as root, or systemd's LimitNOFILE) or spread the streams over more processes "
                         "(--processes)"), line
    assert time.monotonic() - t0 < 30 and not (tmp_path / "o.mp4").exists()


def test_a_run_out_of_open_files_says_the_limit_and_how_to_raise_it(tmp_path) -> None:
    """The main job under a hard limit of 260 open files: above the least a run of one stream needs (240), below
    what its pools of shared frame buffers hold (some 300). It fails in one line that names the node, the limits and how to
    raise them, not a bare "Too many open files"."""
    import resource
    import subprocess
    import sys

    def low() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (260, 260))

    p = subprocess.run([sys.executable, "-m", "flowpipe.cli", "run", str(HERE.parent / "graphs" / "face_blur.yaml"),
                        "--processes", "1", "--set", f"output={tmp_path}/o.mp4", "--set", f"metadata={tmp_path}/o.jsonl"],
                       cwd=tmp_path, capture_output=True, text=True, preexec_fn=low, timeout=300)
    assert p.returncode == 1, p.stderr[-2000:]
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "node '" in last and "Too many open files (this process may hold 260 open " \
        "files, at most 260: every shared frame buffer is one; raise the hard limit, e.g. ulimit -Hn or systemd's " \
        "LimitNOFILE, or run fewer streams a process)" in last, last

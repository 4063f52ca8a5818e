"""The device owner: over several processes, inference runs once and every shard feeds it by fd."""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import re
import signal
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flowpipe import load_graph
from flowpipe.accel.host import usable_cores
from flowpipe.runtime.shards import ShardedRun

FACES = Path(__file__).resolve().parent


def _graph(tmp_path: Path, name: str = "g.yaml", every: tuple[int, ...] = (4, 5, 8), fps: float | None = None,
           detect: str = "", owner: bool = True, source: str = "", pre: str = "", requests: str = ""):
    """The 150-frame 1366x768 sample once per stream (every Nth frame), through BlazeFace on the CPU."""
    rate = f", max_fps: {fps}" if fps else ""
    sources = "\n".join(f"  - {{id: s{i}, type: video_source, config: {{uri: sample, every: {n}{rate}}}{source}}}"
                        for i, n in enumerate(every))
    ins = ", ".join(f"s{i}.frame" for i in range(len(every)))
    text = f"""\
processes: 2
device_owner: {str(owner).lower()}
nodes:
{sources}
  - id: pre
    type: preprocess
    config: {{size: [128, 128], resize: letterbox, color: RGB, layout: NHWC, dtype: f32,
             mean: [127.5, 127.5, 127.5], scale: [127.5, 127.5, 127.5]{pre}}}
    inputs: {{frame: [{ins}]}}
  - {{id: detect, type: inference, config: {{model: blazeface_short, device: CPU, cache_dir: {tmp_path}/ov{requests}}},
     inputs: {{tensor: pre.tensor}}{detect}}}
  - {{id: faces, type: blazeface_decode, config: {{variant: short}}, inputs: {{tensors: detect.tensors}}}}
  - {{id: meta, type: jsonl, config: {{path: {tmp_path}/{name}.jsonl}}, inputs: {{detections: faces.detections}}}}
"""
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return load_graph(str(path)), tmp_path / f"{name}.jsonl"


def _records(path: Path) -> dict[tuple[str, int], dict]:
    return {(r["stream"], r["frame"]): r for r in map(json.loads, path.read_text().splitlines())}


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_one_owner_serves_every_shard_without_copies(tmp_path) -> None:
    spec, out = _graph(tmp_path)
    run = ShardedRun(spec, 2)
    res = run.run()
    assert res.ok, res.error
    assert res.frames == {"in": 87, "out": 87, "dropped": 0, "failed": 0}
    assert res.per_stream == {"s0": 38, "s1": 30, "s2": 19}
    stats = res.to_json()
    owner = stats["device_owner"]
    shard_pids = {sh["pid"] for sh in stats["shards"]}
    assert len(owner["pids"]) == 1 and owner["pids"][0] not in shard_pids | {os.getpid()}
    section = stats["inference.detect"]
    assert section["owner_pid"] == owner["pids"][0] and section["input_binding"] == "host tensor, shared memory"
    # its CPU requests take half the cores: the shards decode and encode on the rest (the graph may say)
    assert section["config"]["INFERENCE_NUM_THREADS"] == str(max(1, usable_cores() // 2))
    assert stats["nodes"]["detect"]["device_owner"]["frames"] == 87  # one model served all three streams
    for name in ("pre->detect", "detect->faces"):  # frames and results crossed by fd, nothing copied
        edge = stats["edges"][name]
        assert edge["crosses_process"] and edge["frames"] == 87 and edge["copies"] == 0, (name, edge)
    assert not stats["edges"]["faces->meta"]["crosses_process"]

    # the same detections as every shard opening its own model
    spec2, out2 = _graph(tmp_path, "own.yaml", owner=False)
    fds = _open_fds()  # (libraries the first run loaded keep theirs)
    res2 = ShardedRun(spec2, 2).run()
    assert res2.ok and res2.to_json()["device_owner"] is None
    assert "INFERENCE_NUM_THREADS" not in res2.to_json()["inference.detect"]["config"]  # OpenVINO's choice
    mine, theirs = _records(out), _records(out2)
    assert len(mine) == 87 and mine == theirs
    assert sum(r["count"] for r in mine.values()) > 0
    # the shards decode as they would with the model in them (an inference node takes any pixels): the owner
    # does not make them convert every frame to BGR, which also changed the tensors off the OpenCL path

    def formats(run: dict) -> set[str]:
        return {sh["format"] for k in ("s0", "s1", "s2") for sh in run["nodes"][k]["shards"].values()}

    assert formats(stats) == formats(res2.to_json()) and "BGR" not in formats(stats)
    assert not any("detect" in str(c.get("pixels")) for c in stats["memory_contracts"].values())

    # nothing left behind: processes, the socket's folder, fds
    assert not Path(run.owner.path).parent.exists()  # type: ignore[union-attr]
    for pid in run.pids:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
    assert _open_fds() <= fds
    fds = _open_fds()
    again = ShardedRun(_graph(tmp_path, "again.yaml")[0], 2).run()
    assert again.ok and _open_fds() <= fds


def test_the_owner_writes_the_tensor_from_the_frame_that_crossed(tmp_path) -> None:
    """``owner: always`` (on a GPU, ``auto`` does this where the detector binds OpenCL buffers): the shards'
    preprocess only decides which frames go on and where their entries lie; the frame's picture crosses by
    fd and the owner writes the tensor next to the inference. Same detections as the shards writing it."""
    interval = ", interval: {every: 2}"
    spec, out = _graph(tmp_path, "lead.yaml", pre=f", owner: always{interval}")
    res = ShardedRun(spec, 2).run()
    assert res.ok, res.error
    assert res.frames == {"in": 87, "out": 87, "dropped": 0, "failed": 0}
    stats = res.to_json()
    pre = stats["nodes"]["pre"]
    assert pre["device_owner"]["ahead_of"] == "detect"
    assert pre["device_owner"]["backend"] in ("cpu", "opencl")
    ran = pre["device_owner"]["frames"]
    assert ran == stats["nodes"]["detect"]["device_owner"]["frames"]
    assert 87 // 2 <= ran < 87  # the interval passed over the others in the shards: they never crossed
    assert {sh["backend"] for sh in pre["shards"].values()} == {"owner"}
    assert stats["memory_contracts"]["pre.tensor"]["placement"] == "owner"
    for name in ("pre->detect", "detect->faces"):  # the picture and the results crossed by fd
        assert stats["edges"][name]["copies"] == 0, (name, stats["edges"][name])
    assert sum(e["bytes_copied"] for e in stats["edges"].values()) == 0

    spec2, out2 = _graph(tmp_path, "here.yaml", pre=f", owner: never{interval}")
    res2 = ShardedRun(spec2, 2).run()
    assert res2.ok, res2.error
    assert "device_owner" not in res2.to_json()["nodes"]["pre"]
    mine, theirs = _records(out), _records(out2)
    assert len(mine) == 87 and mine == theirs
    assert sum(r["count"] for r in mine.values()) > 0


def test_an_inline_node_runs_on_its_own_thread_in_the_owner_with_the_same_results(tmp_path) -> None:
    """``requests: inline`` (a second look, a profile detector): in the device owner it runs on a thread of its
    own, so that its requests hold up no other node's frames; every frame answered, the same detections as
    every shard running it itself."""
    spec, out = _graph(tmp_path, "lane.yaml", requests=", requests: inline")
    res = ShardedRun(spec, 2).run()
    assert res.ok, res.error
    assert res.frames == {"in": 87, "out": 87, "dropped": 0, "failed": 0}
    owned = res.to_json()["nodes"]["detect"]["device_owner"]
    assert owned["own_thread"] is True and owned["frames"] == owned["frames_on_own_thread"] == 87
    spec2, out2 = _graph(tmp_path, "lane_own.yaml", owner=False, requests=", requests: inline")
    res2 = ShardedRun(spec2, 2).run()
    assert res2.ok, res2.error
    mine, theirs = _records(out), _records(out2)
    assert len(mine) == 87 and mine == theirs
    assert sum(r["count"] for r in mine.values()) > 0
    # an async detector stays on the owner's loop (its requests only start there)
    spec3, _ = _graph(tmp_path, "loop.yaml", every=(8, 8))
    res3 = ShardedRun(spec3, 2).run()
    loop = res3.to_json()["nodes"]["detect"]["device_owner"]
    assert res3.ok and loop["own_thread"] is False and loop["frames_on_own_thread"] == 0 and loop["frames"] > 0


def test_the_owner_keeps_compiled_models_in_the_hosts_cache_when_the_graph_names_none(tmp_path, monkeypatch) -> None:
    """A device owner that restarts loads its models from this host's model cache instead of compiling them
    again (the graph names no cache_dir): the second run's owner finds the first's."""
    monkeypatch.setenv("FLOWPIPE_CACHE", str(tmp_path / "cache"))
    text = _graph(tmp_path, every=(8, 8))[0].file
    plain = Path(text).read_text().replace(f", cache_dir: {tmp_path}/ov", "")
    Path(text).write_text(plain)
    seen = []
    for _ in range(2):
        res = ShardedRun(load_graph(text), 2).run()
        assert res.ok, res.error
        seen.append(res.to_json()["inference.detect"]["cache"])
    assert seen == ["miss", "hit"]
    assert any((tmp_path / "cache" / "ov").iterdir())  # this host's model cache (FLOWPIPE_CACHE/ov)


def _owner_run(tmp_path: Path) -> tuple[ShardedRun, Path, Callable[[], Any]]:
    """Two streams over 2 shards and the device owner, its detector restarting, started in a thread and past
    its first 40 frames out; the callable waits for the run's result."""
    spec, out = _graph(tmp_path, every=(1, 1), fps=60, detect=", on_error: restart")
    run = ShardedRun(spec, 2)
    box: dict = {}
    t = threading.Thread(target=lambda: box.update(res=run.run()))
    t.start()
    deadline = time.monotonic() + 60
    while (run.owner is None or run.snapshot()["out"] < 40) and time.monotonic() < deadline:
        time.sleep(0.05)

    def result() -> Any:
        t.join(timeout=120)
        return box["res"]

    return run, out, result


def test_a_killed_owner_is_restarted_and_its_frames_are_accounted(tmp_path, capfd) -> None:
    run, out, result = _owner_run(tmp_path)
    first = run.owner.pid  # type: ignore[union-attr]
    os.kill(first, signal.SIGKILL)
    res = result()
    assert res.ok, res.error
    f = res.frames
    assert f["in"] == 300 and f["in"] == f["out"] + f["failed"] + f["dropped"]
    assert res.per_stream == {"s0": 150, "s1": 150}
    stats = res.to_json()
    owner = stats["device_owner"]
    assert owner["restarts"] == 1 and owner["pids"][0] == first and len(owner["pids"]) == 2
    # the standby took over (started, its modules imported, waiting), and a new one stood by until the end
    assert owner["took_over"] == [False, True]
    assert not [p for p in mp.active_children() if p.name.startswith("flowpipe:device-owner")]
    assert stats["nodes"]["detect"]["failed"] == f["failed"]
    assert stats["inference.detect"]["cache"] == "hit"  # the new owner loaded the model from the cache
    assert "fil_ms" in stats["inference.detect"]
    lines = _records(out)
    assert len(lines) == f["out"]  # every frame that came back is written once; the failed ones are not
    err = capfd.readouterr().err
    if f["failed"]:  # each named by stream and frame, in the shard that had sent it
        named = re.findall(r"stream '(s\d)', frame (\d+): RuntimeError: the device owner \(pid \d+\) died holding", err)
        assert named and all((s, int(i)) not in lines for s, i in named)
    for pid in run.pids:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()


def _gone(pid: int) -> bool:
    try:
        return "zombie" in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True


def test_a_killed_owner_whose_standby_is_gone_is_restarted_in_a_new_process(tmp_path) -> None:
    """The standby owner killed first, then the owner: the restart launches a new process instead (and a new
    standby after it); every frame is accounted and nothing outlives the run."""
    run, _out, result = _owner_run(tmp_path)
    owner = run.owner
    assert owner is not None and owner.standby_pid is not None  # a standby waits beside the owner
    standby = owner.standby_pid
    os.kill(standby, signal.SIGKILL)
    while not _gone(standby):
        time.sleep(0.05)
    os.kill(owner.pid, signal.SIGKILL)  # type: ignore[arg-type]
    res = result()
    assert res.ok, res.error
    f = res.frames
    assert f["in"] == 300 and f["in"] == f["out"] + f["failed"] + f["dropped"]
    stats = res.to_json()["device_owner"]
    assert stats["restarts"] == 1 and stats["took_over"] == [False, False] and standby not in stats["pids"]
    assert not [p for p in mp.active_children() if p.name.startswith("flowpipe:device-owner")]


def test_a_killed_shard_resumes_its_streams_on_the_same_owner(tmp_path) -> None:
    """SIGKILL of a worker mid-run, sources under ``on_error: restart``: the frames it had in flight fail
    (named), a new worker resumes its stream after the last frame that entered the dead one, the owner
    serves it without a restart, and the other stream never stops."""
    spec, out = _graph(tmp_path, every=(1, 1), fps=60, source=", on_error: restart")
    run = ShardedRun(spec, 2)
    box: dict = {}
    t = threading.Thread(target=lambda: box.update(res=run.run()))
    t.start()
    deadline = time.monotonic() + 60
    while (len(run.shards) < 2 or run.snapshot()["out"] < 60) and time.monotonic() < deadline:
        time.sleep(0.05)
    victim = run.shards[1].pid
    assert victim is not None
    os.kill(victim, signal.SIGKILL)
    t.join(timeout=120)
    res = box["res"]
    assert res.ok, res.error
    f = res.frames
    assert f["in"] == 300 and f["in"] == f["out"] + f["failed"] + f["dropped"]  # each frame entered once
    assert res.per_stream == {"s0": 150, "s1": 150}
    stats = res.to_json()
    assert stats["shard_restarts"] == 1 and stats["device_owner"]["restarts"] == 0
    dead = next(sh for sh in stats["shards"] if sh["restarted"])
    assert dead["pid"] == victim and dead["streams"] == ["s1"]
    named = re.search(r"(\d+) frames in flight counted as failed(?:: s1 ([\d,-]+))?", dead["error"])
    assert named and int(named.group(1)) == f["failed"]
    lines = _records(out)
    s1 = sorted(i for s, i in lines if s == "s1")
    assert {i for s, i in lines if s == "s0"} == set(range(150))
    assert len(s1) == len(set(s1)) and max(s1) == 149  # resumed on the same owner, to the end, no repeats
    assert len(lines) == f["out"] and 150 - len(s1) == f["failed"]
    for pid in run.pids:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()


def test_an_owner_that_cannot_open_stops_every_shard_before_any_frame(tmp_path) -> None:
    spec, _ = _graph(tmp_path)
    (tmp_path / "bad.xml").write_text("<not a model>")
    spec.nodes[[s.id for s in spec.nodes].index("detect")].config.model = str(tmp_path / "bad.xml")  # type: ignore[attr-defined]
    res = ShardedRun(spec, 2).run()
    assert not res.ok
    assert "detect" in str(res.error) and "device owner" in str(res.error)
    assert res.frames["in"] == 0


def _frame_buffers(pid: int) -> tuple[int, int]:
    """The shared frame buffers process ``pid`` maps, and the fds it holds for them."""
    maps = Path(f"/proc/{pid}/maps").read_text().count("flowpipe-frame")
    fds = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            fds += "flowpipe-frame" in os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
    return maps, fds


def test_the_owner_lets_each_stream_s_buffers_go_with_its_pool_and_keeps_no_fd_for_them(tmp_path) -> None:
    """Streams added to a run over two processes and removed again, one after another, their pictures crossing
    to the owner (``owner: always``, as on a GPU): the owner maps a stream's frame buffers while it runs and
    unmaps them once its pool let them go, and holds no fd for them (it kept every stream's mapped, an fd
    each, and a buffer made later could take a gone one's id and be read as it)."""
    text = f"""\
processes: 2
nodes:
  - {{id: cam, type: video_source, template: true, config: {{uri: sample, every: 10}}}}
  - id: pre
    type: preprocess
    config: {{size: [128, 128], resize: letterbox, color: RGB, layout: NHWC, dtype: f32, owner: always,
             mean: [127.5, 127.5, 127.5], scale: [127.5, 127.5, 127.5]}}
    inputs: {{frame: cam}}
  - {{id: detect, type: inference, config: {{model: blazeface_short, device: CPU, cache_dir: {tmp_path}/ov}},
     inputs: {{tensor: pre.tensor}}}}
  - {{id: faces, type: blazeface_decode, config: {{variant: short}}, inputs: {{tensors: detect.tensors}}}}
  - {{id: meta, type: jsonl, config: {{path: {tmp_path}/m.jsonl}}, inputs: {{detections: faces.detections}}}}
"""
    (tmp_path / "g.yaml").write_text(text)
    run = ShardedRun(load_graph(str(tmp_path / "g.yaml")), 2)
    results: list[Any] = []
    worker = threading.Thread(target=lambda: results.append(run.run()), daemon=True)
    worker.start()
    try:
        deadline = time.monotonic() + 120
        while not run.running:
            assert time.monotonic() < deadline and worker.is_alive()
            time.sleep(0.05)
        owner = run.owner.proc.pid
        base = _frame_buffers(owner)  # the owner's own pools, before any stream's buffers cross
        seen: list[tuple[int, int]] = []
        for i in range(6):
            run.live.add(f"s{i}", "cam")
            while not any(r["stream"] == f"s{i}" and r["state"] == "ended" for r in run.live.states()):
                assert time.monotonic() < deadline, run.live.states()
                time.sleep(0.05)
            run.live.remove(f"s{i}")
            seen.append(_frame_buffers(owner))
        # a shard tells the owner what its pools let go with its next frame, so each of the two shards' last
        # stream may still be mapped: two streams' buffers at most, however many came and went (each stayed
        # mapped, before); and none of them holds an fd there (one each, before)
        one = seen[0][0] - base[0]
        assert one > 0 and all(maps <= base[0] + 2 * one for maps, _ in seen), (base, seen)
        assert all(fds == base[1] for _, fds in seen), (base, seen)
    finally:
        run.stop()
        worker.join(60)
    (res,) = results
    assert res.ok, res.error
    assert res.per_stream == {f"s{i}": 15 for i in range(6)}

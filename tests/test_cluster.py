"""Many hosts on a real local Ray cluster (``ray.cluster_utils.Cluster``, loopback only, usage stats off):
streams placed by the resources hosts declare, each host running its streams in flowpipe's runtime."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from waits import until

from flowpipe import GraphError, load_graph
from flowpipe.cluster import Host, PlacementError, StreamNeed, place

ray = pytest.importorskip("ray")
# over several workers (pytest-xdist, --dist loadgroup), one runs every test here: one local Ray cluster, not one a
# worker, on a machine that runs the rest of the suite beside it
pytestmark = pytest.mark.xdist_group("ray_cluster")
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
# the hosts' workers import the test-only nodes (fp_testnodes) as a graph's plugins
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path(__file__).parent), os.environ.get("PYTHONPATH")) if p)


@pytest.fixture(scope="module")
def cluster():
    """A head with 1 CPU and an 'intel_cpu' resource, a second host with 1 CPU and one 'intel_gpu'."""
    from ray.cluster_utils import Cluster
    from test_sources_sinks import _free_port

    client_port = _free_port()
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"intel_cpu": 1},
                                                      "include_dashboard": False, "ray_client_server_port": client_port})
    c.client_port = client_port  # type: ignore[attr-defined]
    gpu_host = c.add_node(num_cpus=1, resources={"intel_gpu": 1})
    c.wait_for_nodes()
    ray.init(address=c.address, logging_level="ERROR")
    yield c, gpu_host
    ray.shutdown()
    c.shutdown()


def _graph(tmp_path: Path, per_stream: str, counts: tuple[int, ...] = (40, 30, 20), named: bool = False) -> tuple:
    """Streams s0, s1, ...; ``named``: from sources src0, src1, ... that name their streams (``stream: s0``)."""
    lines = ["plugins: [fp_testnodes]", f"cluster: {{per_stream: {per_stream}}}", "nodes:"]
    ids = [f"src{i}" if named else f"s{i}" for i in range(len(counts))]
    lines += [f"  - {{id: {ids[i]}, type: synthetic_source, config: {{count: {n}, width: 64, height: 48"
              + (f", stream: s{i}" if named else "") + "}}"
              for i, n in enumerate(counts)]
    ins = ", ".join(ids)
    lines += [f"  - {{id: hop, type: passthrough, inputs: {{in: [{ins}]}}}}",
              f"  - {{id: meta, type: jsonl, config: {{path: {tmp_path}/m.jsonl}}, inputs: hop}}"]
    path = tmp_path / "g.yaml"
    path.write_text("\n".join(lines) + "\n")
    return load_graph(str(path)), tmp_path / "m.jsonl"


def _lines(path: Path) -> list[tuple[str, int]]:
    return [(r["stream"], r["frame"]) for r in map(json.loads, path.read_text().splitlines())]


def _counted(lines: list[tuple[str, int]], streams: int) -> dict[str, int]:
    """Records of each of streams s0, s1, ...: what a run stopped at an unknown frame must account."""
    return {f"s{i}": sum(s == f"s{i}" for s, _ in lines) for i in range(streams)}


def test_placement_spreads_and_names_what_is_missing() -> None:
    hosts = [Host("a", {"CPU": 4, "intel_npu": 1}, {"npu": "lnl"}, "10.0.0.1"), Host("b", {"CPU": 4}, {}, "10.0.0.2")]
    npu = [StreamNeed(f"cam{i}", {"intel_npu": 0.25}) for i in range(4)]
    assert set(place(npu, hosts).values()) == {"a"}  # four streams share the one NPU
    cpu = [StreamNeed(f"c{i}", {"CPU": 1}) for i in range(4)]
    where = place(cpu, hosts)
    assert sorted(where.values()) == ["a", "a", "b", "b"]  # spread: each to the host with the most CPU left
    with pytest.raises(PlacementError, match=r"stream 'late' needs \{intel_npu: 0.25\} and fits on no host; free "
                                             r"in the cluster: 10.0.0.1 \{CPU: 2, intel_npu: 0, npu=lnl\}; 10.0.0.2 \{CPU: 2\}$"):
        place([StreamNeed("late", {"intel_npu": 0.25})], hosts)
    many = [Host(f"h{i}", {"CPU": 8, "intel_npu": 1}, {"npu": "lnl" if i % 2 else "mtl"}) for i in range(40)]
    with pytest.raises(PlacementError, match=r"^stream 'big' needs \{intel_npu: 2, npu=lnl\} and fits on no host; "
                                             r"free in the cluster: 20 of 40 hosts with \{npu=lnl\}, the most left "
                                             r"on one of them \{intel_npu: 1\}$"):
        place([StreamNeed("big", {"intel_npu": 2}, {"npu": "lnl"})], many)  # one line, however many hosts
    with pytest.raises(PlacementError, match=r"needs \{CPU: 1, npu=mtl\}"):
        place([StreamNeed("x", {"CPU": 1}, {"npu": "mtl"})], [Host("c", {"CPU": 8}, {"npu": "lnl"})])


def test_streams_run_on_the_hosts_that_have_their_resource(cluster, tmp_path) -> None:
    from flowpipe.cluster.controller import ClusterRun

    _, gpu_host = cluster
    spec, out = _graph(tmp_path, "{intel_gpu: 0.3}")
    res = ClusterRun(spec).run()
    assert res.ok, res.error
    assert res.frames == {"in": 90, "out": 90, "dropped": 0, "failed": 0}
    assert res.per_stream == {"s0": 40, "s1": 30, "s2": 20}
    assert [h["host_id"] for h in res.hosts] == [gpu_host.node_id]  # the only host with intel_gpu
    assert sorted(_lines(out)) == sorted([(f"s{i}", k) for i, n in enumerate((40, 30, 20)) for k in range(n)])


def test_streams_spread_over_hosts_and_one_account(cluster, tmp_path) -> None:
    from flowpipe.cluster.controller import ClusterRun

    spec, out = _graph(tmp_path, "{CPU: 0.5}", counts=(60, 50, 40, 30))
    res = ClusterRun(spec).run()
    assert res.ok, res.error
    assert res.frames == {"in": 180, "out": 180, "dropped": 0, "failed": 0}
    stats = res.to_json()
    assert len(stats["hosts"]) == 2 and sorted(len(h["streams"]) for h in stats["hosts"]) == [2, 2]
    assert len({h["pid"] for h in stats["hosts"]}) == 2 and os.getpid() not in {h["pid"] for h in stats["hosts"]}
    assert stats["nodes"]["hop"]["frames"] == 180
    lines = _lines(out)  # two hosts appended to one file after the first one opened (truncated) it
    assert len(lines) == 180 and len(set(lines)) == 180


def test_a_stream_that_fits_nowhere_is_one_line_before_any_frame(cluster, tmp_path) -> None:
    from flowpipe.cluster.controller import ClusterRun

    spec, out = _graph(tmp_path, "{intel_gpu: 0.5}")  # three halves of one GPU
    res = ClusterRun(spec).run()
    assert res.exit_code == 1
    msg = str(res.error)
    assert msg.startswith("stream 's2' needs {intel_gpu: 0.5} and fits on no host; free in the cluster: ")
    assert "intel_gpu: 0" in msg and "\n" not in msg
    assert res.frames["in"] == 0 and not out.exists()


@pytest.mark.parametrize(("header", "span"), [
    (None, (0, 200)), ("bytes=0-99", (0, 100)), ("bytes=150-", (150, 200)), ("bytes=-10", (190, 200)),
    ("bytes=190-500", (190, 200)), ("BYTES=0-0", (0, 1)), ("bytes=-500", (0, 200)),
    ("bytes=200-", (-1, -1)), ("bytes=-0", (-1, -1)),  # none of it in the file: 416
    ("bytes=0-1,5-6", (0, 200)), ("items=0-1", (0, 200)), ("bytes=10-5", (0, 200))])  # not read: the whole
def test_a_clip_read_on_its_host_in_the_byte_range_a_player_asks_for(header, span) -> None:
    """What part of a 200-byte clip on a host a ``Range`` header reads (only that part travels)."""
    from flowpipe.cluster.agent import byte_span
    from flowpipe.serve.api import _span

    assert byte_span(_span(header), 200) == span


def test_cluster_block_is_validated(tmp_path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("cluster: {per_stream: {intel_npu: lots}}\nnodes:\n  - {id: s, type: synthetic_source}\n")
    with pytest.raises(GraphError, match=r"bad\.yaml:1: cluster\.per_stream\.intel_npu: Input should be a valid "
                                         r"number"):
        load_graph(str(path))


def test_a_lost_host_s_streams_resume_on_the_others_with_every_frame_accounted(cluster, tmp_path) -> None:
    """A third host joins, takes streams, and is removed mid-run (its raylet and workers killed): its streams
    resume on the other hosts after the frames it had accounted; the others never stop; every frame of every
    stream is written once, and the account is exact. Its sources name their streams (``stream:``), which the
    records, the account and where a stream resumes go by."""
    import threading
    import time

    from flowpipe.cluster.controller import ClusterRun

    c, _ = cluster
    spare = c.add_node(num_cpus=1, resources={"spare": 1})
    c.wait_for_nodes()
    counts = (150, 150, 150)
    spec, out = _graph(tmp_path, "{CPU: 0.3}", counts=counts, named=True)
    for s in spec.nodes:
        if s.type == "synthetic_source":
            s.config.realtime, s.config.fps = True, 60.0  # type: ignore[attr-defined]
    run = ClusterRun(spec, poll_s=0.2)
    box: dict = {}
    t = threading.Thread(target=lambda: box.update(res=run.run()))
    t.start()
    deadline = time.monotonic() + 120  # a bound for a hang: Ray starts hosts slowly on a loaded machine
    while not any(a.host_id == spare.node_id and a.progress.get("out", 0) > 20 for a in run.agents):
        assert time.monotonic() < deadline, "the spare host never got going"
        time.sleep(0.05)
    lost_streams = next(a.sources for a in run.agents if a.host_id == spare.node_id)
    c.remove_node(spare)
    t.join(timeout=120)
    res = box["res"]
    assert res.ok, res.error
    assert res.per_stream == {f"s{i}": n for i, n in enumerate(counts)}
    f = res.frames
    assert f["in"] == f["out"] == sum(counts) and f["failed"] == f["dropped"] == 0
    stats = res.to_json()
    (moved,) = stats["replacements"]
    # how soon is the soak benchmark's to say (BENCHMARKS section 13): a loaded machine took 10.04 s once
    assert moved["streams"] == [s.replace("src", "s") for s in lost_streams] and moved["replaced_in_s"] > 0
    assert any(h["lost"] for h in stats["hosts"]) and any(h["generation"] == 1 for h in stats["hosts"])
    lines = _lines(out)
    for i, n in enumerate(counts):  # every frame's record once: none missing, none repeated across the loss
        got = sorted(k for s, k in lines if s == f"s{i}")
        assert got == list(range(n)), (f"s{i}", len(got))


def test_a_stream_added_at_run_time_goes_on_elsewhere_when_its_host_is_lost(cluster, tmp_path) -> None:
    """``flowpipe serve --cluster``'s cameras: a stream added to the running graph lands on one of two hosts
    that joined; that host is removed mid-run; the stream is placed again on the other, as it was added,
    after the frames its lost host had accounted, and runs to its end: every record once, the account exact."""
    import threading
    import time

    from flowpipe.cluster.controller import ClusterRun

    c, _ = cluster
    joined = [c.add_node(num_cpus=1, resources={"cams": 1}) for _ in range(2)]
    c.wait_for_nodes()
    path = tmp_path / "cams.yaml"
    path.write_text(f"""cluster: {{per_stream: {{cams: 0.6}}}}
nodes:
  - {{id: cam, type: synthetic_source, template: true, config: {{count: 300, width: 64, height: 48, realtime: true,
      fps: 60}}}}
  - {{id: hop, type: passthrough, inputs: {{in: cam}}}}
  - {{id: meta, type: jsonl, config: {{path: {tmp_path}/m.jsonl}}, inputs: hop}}
""")
    run = ClusterRun(load_graph(str(path)), poll_s=0.2)
    box: dict = {}
    t = threading.Thread(target=lambda: box.update(res=run.run()))
    t.start()
    deadline = time.monotonic() + 90
    while run.phase != "running":
        assert time.monotonic() < deadline and t.is_alive()
        time.sleep(0.05)
    run.live.add("x", "cam")
    (first,) = [a for a in run.agents if "x" in a.added]
    while first.progress.get("out", 0) < 30:
        assert time.monotonic() < deadline, "the stream never got going"
        time.sleep(0.05)
    lost = next(n for n in joined if n.node_id == first.host_id)
    c.remove_node(lost)
    while sum(run.per_stream().values()) < 300 or not any(
            "x" in a.added and a is not first and a.result is None for a in run.agents):
        assert time.monotonic() < deadline, run.per_stream()
        time.sleep(0.1)
    (again,) = [a for a in run.agents if "x" in a.added and a is not first]
    assert again.host_id != first.host_id and again.host_id in {n.node_id for n in joined}
    run.interrupt()
    t.join(timeout=60)
    for n in joined:
        if n is not lost:
            c.remove_node(n)
    res = box["res"]
    assert res.per_stream == {"x": 300}
    f = res.frames
    assert f["in"] == f["out"] + f["dropped"] + f["failed"] and f["out"] == 300
    (moved,) = res.to_json()["replacements"]
    assert moved["streams"] == ["x"] and moved["added"] and 30 <= moved["resume_at"]["x"] < 300
    assert sorted(k for s, k in _lines(tmp_path / "m.jsonl") if s == "x") == list(range(300))


def test_a_line_moved_while_it_runs_holds_on_every_host_and_where_a_lost_host_s_stream_goes(cluster,
                                                                                             tmp_path) -> None:
    """``flowpipe serve --cluster``'s parameters: two streams on two hosts each cross a gate once a lap, as the
    walker passes x = 25 (frame 18 of each lap of 40); the gate is moved to x = 40 (``retune``): every
    crossing after is where the walker passes it (frame 33), on both hosts and on the host a lost one's stream
    is placed on again (its agent starts from the graph as changed). A field that cannot change is refused
    before any host changes."""
    import threading
    import time

    from flowpipe.cluster.controller import ClusterRun

    c, _ = cluster
    joined = [c.add_node(num_cpus=1, resources={"cams": 1}) for _ in range(2)]
    c.wait_for_nodes()
    path = tmp_path / "gate.yaml"
    path.write_text("""plugins: [fp_testnodes]
cluster: {per_stream: {cams: 0.4}}
nodes:
  - {id: cam, type: synthetic_source, template: true, config: {count: 100000, width: 64, height: 48, realtime: true,
      fps: 60}}
  - {id: det, type: test_one_face, inputs: {frame: cam}}
  - {id: track, type: tracker, inputs: {detections: det.detections}}
  - id: an
    type: analytics
    config: {units: pixels, lines: {gate: {points: [[25, 0], [25, 200]]}}, rules: [{name: crossed, line: gate}]}
    inputs: {detections: track.detections}
""")
    run = ClusterRun(load_graph(str(path)), poll_s=0.2)
    t = threading.Thread(target=run.run)
    t.start()
    deadline = time.monotonic() + 90
    try:
        while run.phase != "running":
            assert time.monotonic() < deadline and t.is_alive()
            time.sleep(0.05)
        run.live.add("x", "cam")
        run.live.add("y", "cam")

        def crossed(since: float = 0.0) -> dict[str, set[int]]:
            got: dict[str, set[int]] = {}
            for e in run.live.events():
                if e["at"] > since:
                    got.setdefault(e["stream"], set()).add(e["frame"] % 40)
            return got

        while set(crossed()) != {"x", "y"}:
            assert time.monotonic() < deadline, run.per_stream()
            time.sleep(0.1)
        assert len({a.host_id for a in run.agents if a.added}) == 2
        with pytest.raises(ValueError, match=r"node 'det' \(test_one_face\): nope cannot change while"):
            run.live.retune({"det": {"nope": 1}})
        assert crossed() == {"x": {18}, "y": {18}}
        run.live.retune({"an": {"lines": {"gate": {"points": [[40, 0], [40, 200]]}}}})
        moved = time.time()
        first = next(a for a in run.agents if "x" in a.added)
        c.remove_node(next(n for n in joined if n.node_id == first.host_id))
        while not any("x" in a.added and a is not first and a.result is None and a.progress.get("out", 0) > 120
                      for a in run.agents):  # two laps on its new host
            assert time.monotonic() < deadline, run.per_stream()
            time.sleep(0.1)
        assert crossed(since=moved + 0.5) == {"x": {33}, "y": {33}}
        assert run.state.retuned == {"an": {"lines": {"gate": {"points": [[40, 0], [40, 200]]}}}}
    finally:
        run.abort()
        t.join(timeout=60)
        for n in joined:
            if n in c.list_all_nodes():
                c.remove_node(n)


def test_devices_of_every_host(cluster, capsys) -> None:
    """``flowpipe devices --cluster``: each host's devices as flowpipe sees them there, with what it declared."""
    from flowpipe.cluster.controller import cluster_devices

    c, gpu_host = cluster
    hosts = cluster_devices(c.address)
    assert len(hosts) >= 2
    by_id = {h["address"].split("(")[-1].rstrip(")"): h for h in hosts}
    gpu = by_id[gpu_host.node_id[:8]]
    assert gpu["resources"]["intel_gpu"] == 1.0
    for h in hosts:  # found on the host itself: OpenVINO's CPU plugin and this machine's shared memory
        assert "CPU" in h["devices"]["openvino"] and "memfd" in h["devices"]["shared_memory"]
    from flowpipe.cli import main

    assert main(["devices", "--cluster", c.address]) == 0
    shown = capsys.readouterr().out
    assert shown.count("== host ") == len(hosts) and "intel_gpu 1" in shown and "OpenVINO devices:" in shown


def test_rebalance_moves_streams_to_a_host_that_joins(cluster, tmp_path) -> None:
    """``--rebalance``: two streams start on the only host with 'intel_cpu'; a second such host joins; the
    first drains and the streams are placed again over both, each resuming after its last frame. The streams
    run until the test stops them, once both go on in their new places: however long the host takes to join
    on a loaded machine, it joins while they run."""
    import threading

    from flowpipe.cluster.controller import ClusterRun

    c, _ = cluster
    spec, out = _graph(tmp_path, "{intel_cpu: 0.4}", counts=(100_000, 100_000))
    for s in spec.nodes:
        if s.type == "synthetic_source":
            s.config.realtime, s.config.fps = True, 60.0  # type: ignore[attr-defined]
    run = ClusterRun(spec, poll_s=0.2, rebalance=True)
    box: dict = {}
    t = threading.Thread(target=lambda: box.update(res=run.run()))
    t.start()
    until(lambda: any(a.progress.get("out", 0) > 30 for a in run.agents), "frames came out", within=120)
    joined = c.add_node(num_cpus=1, resources={"intel_cpu": 1})
    moved = lambda: [a for a in run.agents if a.generation == 1]  # noqa: E731
    until(lambda: len(moved()) == 2 and all(a.progress.get("out", 0) > 10 for a in moved()),
          "both streams went on in their new places", within=120)
    run.stop()
    t.join(timeout=120)
    res = box["res"]
    assert res.ok, res.error
    lines = _lines(out)
    counted = _counted(lines, 2)
    assert res.frames == {"in": len(lines), "out": len(lines), "dropped": 0, "failed": 0}
    assert res.per_stream == counted
    stats = res.to_json()
    assert [r.get("why") for r in stats["replacements"]] == ["rebalance"]
    later = [h for h in stats["hosts"] if h["generation"] == 1]
    assert {h["host_id"] for h in later} == {stats["hosts"][0]["host_id"], joined.node_id}  # one each
    for sid, n in counted.items():  # each went on after its last frame: none lost, none twice
        assert sorted(k for s, k in lines if s == sid) == list(range(n))
    c.remove_node(joined)


def _realtime(spec, fps: float = 60.0) -> None:
    for s in spec.nodes:
        if s.type == "synthetic_source":
            s.config.realtime, s.config.fps = True, fps  # type: ignore[attr-defined]


def test_a_run_outlives_a_controller_that_dies(cluster, tmp_path) -> None:
    """The run's controller is a named, detached actor: killed mid-run, Ray starts it again and it takes the
    run over from the state it kept in the cluster (its host agents never stopped), with the line moved while
    the run went on. Meanwhile ``status`` lists hosts, devices, streams and rates, and every host serves its
    counts for Prometheus."""
    import signal
    import time
    import urllib.request

    from flowpipe.cluster.service import runs, submit
    from flowpipe.runtime.commands import Retune

    c, _ = cluster
    counts = (100_000,) * 3  # until stopped: however slow the machine, the controller is taken over mid-run
    _, out = _graph(tmp_path, "{CPU: 0.3}", counts=counts)
    path = tmp_path / "g.yaml"  # with a line, which is moved while it runs
    path.write_text(path.read_text().replace("inputs: hop}", "inputs: an}\n  - {id: an, type: analytics, config: "
                                             "{lines: {gate: {points: [[0.5, 0], [0.5, 1]]}}}, inputs: {detections: hop}}"))
    spec = load_graph(str(path))
    spec.cluster.metrics_port = 0  # type: ignore[union-attr]
    _realtime(spec, fps=30.0)
    moved = {"an": {"lines": {"gate": {"points": [[0.8, 0.0], [0.8, 1.0]]}}}}
    client = submit(spec, c.address, "restart-test")
    try:
        deadline = time.monotonic() + 60
        # (and a rate in the status: how soon it has one depends on the machine's load, not on the run)
        while (st := client.status())["frames"].get("out", 0) < 60 or \
                not sum(v["fps"] for v in st["streams"].values()) > 0:
            assert time.monotonic() < deadline, st
            time.sleep(0.1)
        assert st["name"] == "restart-test" and st["phase"] == "running"
        assert sorted(st["streams"]) == ["s0", "s1", "s2"] and all(v["host"] for v in st["streams"].values())
        assert all("CPU" in h["devices"] for h in st["hosts"])
        page = urllib.request.urlopen(st["hosts"][0]["metrics"], timeout=5).read().decode()  # noqa: S310 - http
        assert 'flowpipe_frames_total{fate="out",host=' in page and "flowpipe_stream_frames_total{host=" in page
        assert [r["name"] for r in runs(c.address)] == ["restart-test"]

        client.call("command", Retune(moved))
        first = client.call("pid")
        os.kill(first, signal.SIGKILL)  # the controller's process dies; Ray starts the actor again
        assert client.call("pid") != first
        st = client.status()
        assert st["phase"] == "running"  # taken over while the run went on
        assert st["retuned"] == moved  # the line as moved, for hosts started from now on too
        client.stop()
        res = client.wait()
    finally:
        if runs(c.address):
            client.remove()
    assert res.error is None and res.exit_code == 130, res.error  # ended by its stop, drained
    lines = _lines(out)
    counted = _counted(lines, len(counts))
    assert res.frames == {"in": len(lines), "out": len(lines), "dropped": 0, "failed": 0} and len(lines) > 60
    assert res.per_stream == counted
    assert not res.replacements and all(h["generation"] == 0 for h in res.to_json()["hosts"])
    # every frame of each stream once, none lost or written twice across the controller's restart
    assert sorted(lines) == sorted((sid, k) for sid, n in counted.items() for k in range(n))
    assert runs(c.address) == []  # the run and its kept state are gone with its end


def test_flowpipe_run_detach_status_and_stop(cluster, tmp_path, capsys, monkeypatch) -> None:
    """``flowpipe run --cluster --detach`` leaves the run in the cluster; ``flowpipe status`` shows it;
    ``flowpipe stop`` drains it, prints its account and removes it. A relative output path is the folder's the
    command ran in, not the cluster's working folder; ``--detach`` with no cluster, or with the local one that
    ends with the command, is refused, and one whose streams fit no host fails there, leaving nothing."""
    import time

    from flowpipe.cli import main

    c, _ = cluster
    path = tmp_path / "live.yaml"
    path.write_text("plugins: [fp_testnodes]\ncluster: {per_stream: {CPU: 0.3}}\nnodes:\n"
                    "  - {id: src, type: synthetic_source, config: {count: 100000, realtime: true, fps: 30, "
                    "stream: cam}}\n"
                    "  - {id: hop, type: passthrough, inputs: {in: [src]}}\n"
                    "  - {id: meta, type: jsonl, config: {path: out/m.jsonl}, inputs: hop}\n")
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(path), "--detach", "--name", "cams"]) == 2
    assert main(["run", str(path), "--cluster", "local", "--detach", "--name", "cams"]) == 2
    assert "--detach with --cluster local" in capsys.readouterr().err
    assert main(["status", "--cluster", "local"]) == 2 and main(["stop", "cams", "--cluster", "local"]) == 2
    assert "flowpipe status --cluster local: a local cluster ends with the command" in capsys.readouterr().err
    big = tmp_path / "big.yaml"  # a placement that fits no host: said by the command that detaches, nothing left
    big.write_text(path.read_text().replace("CPU: 0.3", "CPU: 64"))
    assert main(["run", str(big), "--cluster", c.address, "--detach", "--name", "huge"]) == 1
    assert "error: run huge: stream 'cam' needs {CPU: 64} and fits on no host" in capsys.readouterr().err
    assert main(["run", str(path), "--cluster", c.address, "--detach", "--name", "cams"]) == 0
    try:
        assert capsys.readouterr().out.strip() == "cams"
        deadline = time.monotonic() + 60
        while True:
            assert main(["status", "--cluster", c.address]) == 0
            shown = capsys.readouterr().out
            if "stream cam: 0 frames" not in shown and "stream cam:" in shown:
                break
            assert time.monotonic() < deadline, shown
            time.sleep(0.2)
        assert shown.startswith("run cams: running") and "  host " in shown and "devices CPU" in shown
        assert main(["status", "nope", "--cluster", c.address]) == 1
        assert "no run named 'nope'" in capsys.readouterr().err
        assert main(["stop", "cams", "--cluster", c.address]) == 0
        ended = capsys.readouterr().out
        n = len((tmp_path / "out" / "m.jsonl").read_text().splitlines())
        assert f"run cams: ended; frames in {n}, out {n}, dropped 0, failed 0" in ended and n > 0
        assert main(["status", "--cluster", c.address]) == 0
        assert "no flowpipe runs" in capsys.readouterr().out
    finally:
        from flowpipe.cluster.service import attach, runs

        if any(r["name"] == "cams" for r in runs(c.address)):
            attach(c.address, "cams").remove()


def _have_rtsp_server() -> bool:
    from test_sources_sinks import _have_rtsp_server as have

    return have()


@pytest.mark.skipif(not _have_rtsp_server(), reason="gst-rtsp-server (scripts/setup.sh installs it) is missing")
def test_a_live_stream_of_a_lost_host_reconnects_elsewhere_and_its_outage_is_reported(cluster, tmp_path) -> None:
    """A camera (a real RTSP server on loopback) read by a host that is lost: the stream reconnects on the
    other host that can take it, numbering goes on, and the outage is reported with its time and the frames
    the camera sent meanwhile."""
    import subprocess
    import threading
    import time

    from test_sources_sinks import HERE, SYS_PY, _free_port

    from flowpipe.cluster.controller import ClusterRun

    c, _ = cluster
    rooms = [c.add_node(num_cpus=1, resources={"cam": 1}) for _ in range(2)]
    c.wait_for_nodes()
    port = _free_port()
    srv = subprocess.Popen([SYS_PY, str(HERE / "rtsp_server.py"), str(port)], stdout=subprocess.PIPE, text=True)
    try:
        assert srv.stdout.readline().strip() == "ready"
        path = tmp_path / "cam.yaml"
        path.write_text(f"""plugins: [fp_testnodes]
cluster: {{per_stream: {{cam: 1}}}}
nodes:
  - {{id: door, type: video_source, config: {{uri: "rtsp://127.0.0.1:{port}/live", reconnect_attempts: 5,
      reconnect_backoff_s: 0.5, timeout_s: 5}}}}
  - {{id: hop, type: passthrough, inputs: {{in: [door]}}}}
  - {{id: meta, type: jsonl, config: {{path: {tmp_path}/m.jsonl}}, inputs: hop}}
""")
        from flowpipe import load_graph

        run = ClusterRun(load_graph(str(path)), poll_s=0.2)
        box: dict = {}
        t = threading.Thread(target=lambda: box.update(res=run.run()))
        t.start()
        deadline = time.monotonic() + 60
        while not any(a.progress.get("out", 0) > 30 for a in run.agents):
            assert time.monotonic() < deadline, "the camera never got going"
            time.sleep(0.05)
        (first,) = run.agents
        c.remove_node(next(r for r in rooms if r.node_id == first.host_id))
        while not run.outages or run.outages[0]["resumed_after_s"] is None:
            assert time.monotonic() < deadline + 60, "the stream never resumed"
            time.sleep(0.1)
        while sum(a.progress.get("out", 0) for a in run.agents[1:]) < 30:
            time.sleep(0.05)
        run.stop()
        t.join(timeout=60)
    finally:
        srv.kill()
        for r in rooms:
            if r.node_id != first.host_id:
                c.remove_node(r)
    res = box["res"]
    assert res.ok, res.error
    stats = res.to_json()
    (o,) = stats["outages"]
    assert o["stream"] == "door" and 0 < o["resumed_after_s"] < 20
    # the frames the camera sent meanwhile, at the rate it was read at before (which a loaded machine lowers)
    assert o["fps"] > 0 and o["frames_lost"] == round(o["resumed_after_s"] * o["fps"])
    assert [h["generation"] for h in stats["hosts"]] == [0, 1] and stats["hosts"][0]["lost"]
    f = res.frames
    assert f["in"] == f["out"] + f["dropped"] + f["failed"] and f["failed"] == 0
    frames = [k for _, k in _lines(tmp_path / "m.jsonl")]
    assert len(frames) == len(set(frames)) == f["out"]  # numbering goes on after the outage, nothing twice
    assert sorted(frames) == list(range(len(frames)))


def test_an_agent_started_again_loads_its_model_from_the_host_cache(cluster, tmp_path) -> None:
    """Inference nodes without a cache_dir get the host's model cache (``cluster.model_cache``): the first
    agent on a host compiles (FEIL), an agent started there again loads the compiled model (FIL)."""
    from flowpipe import load_graph
    from flowpipe.cluster.controller import ClusterRun

    path = tmp_path / "infer.yaml"
    path.write_text(f"""cluster: {{per_stream: {{intel_gpu: 0.5}}, model_cache: {tmp_path}/ov}}
nodes:
  - {{id: cam, type: synthetic_source, config: {{count: 8, width: 160, height: 120}}}}
  - {{id: pre, type: preprocess, config: {{size: [128, 128], color: RGB, layout: NHWC, backend: cpu}}, inputs: cam.frame}}
  - {{id: det, type: inference, config: {{model: blazeface_short, device: CPU}}, inputs: pre.tensor}}
  - {{id: end, type: null_sink, inputs: det.tensors}}
""")
    seen = []
    for _ in range(2):
        res = ClusterRun(load_graph(str(path))).run()
        assert res.ok, res.error
        assert res.frames["out"] == 8
        (host,) = res.to_json()["hosts"]
        seen.append(host["inference"]["inference.det"])
    assert seen[0]["cache"] == "miss" and "feil_ms" in seen[0]
    assert seen[1]["cache"] == "hit" and "fil_ms" in seen[1]


def test_flowpipe_run_cluster_waits_for_the_run_and_writes_its_stats(cluster, tmp_path) -> None:
    from flowpipe.cli import main
    from flowpipe.cluster.service import runs

    c, gpu_host = cluster
    spec_path = tmp_path / "g.yaml"
    _graph(tmp_path, "{intel_gpu: 0.3}")
    assert main(["run", str(spec_path), "--cluster", c.address, "--stats", str(tmp_path / "s.json")]) == 0
    stats = json.loads((tmp_path / "s.json").read_text())
    assert stats["frames"] == {"in": 90, "out": 90, "dropped": 0, "failed": 0}
    assert [h["host_id"] for h in stats["hosts"]] == [gpu_host.node_id] and stats["hosts"][0]["cpu_s"] > 0
    assert runs(c.address) == []  # the controller is gone with the run's end


def test_flowpipe_run_through_ray_client(cluster, tmp_path) -> None:
    """``--cluster ray://HOST:PORT``: a command on a machine outside the cluster (Ray Client)."""
    import subprocess
    import sys

    c, gpu_host = cluster
    port = c.client_port
    _graph(tmp_path, "{intel_gpu: 0.3}")
    r = subprocess.run([sys.executable, "-m", "flowpipe.cli", "run", str(tmp_path / "g.yaml"), "--cluster",
                        f"ray://127.0.0.1:{port}", "--stats", str(tmp_path / "s.json")],
                       capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parent),
                                                                        os.environ.get("PYTHONPATH", "")])))
    assert r.returncode == 0, r.stderr[-2000:]
    stats = json.loads((tmp_path / "s.json").read_text())
    assert stats["frames"]["out"] == 90 and [h["host_id"] for h in stats["hosts"]] == [gpu_host.node_id]


def test_serve_on_the_cluster_places_each_added_stream(cluster, tmp_path) -> None:
    """``flowpipe serve --cluster``: an instance's controller serves the same API; each stream added is placed
    on a host with room for it (here only the host with 'intel_gpu'), watched, removed with its account."""
    pytest.importorskip("fastapi")
    import time

    from fastapi.testclient import TestClient

    from flowpipe.serve.api import create_app
    from flowpipe.serve.instances import Instances

    c, gpu_host = cluster
    graphs = tmp_path / "graphs"
    graphs.mkdir()
    (graphs / "cams.yaml").write_text("""cluster: {per_stream: {intel_gpu: 0.4}}
nodes:
  - {id: cam, type: synthetic_source, template: true, config: {count: 100000, width: 96, height: 64,
      realtime: true, fps: 30}}
  - {id: hop, type: passthrough, inputs: {in: cam}}
  - {id: meta, type: jsonl, config: {path: meta.jsonl}, inputs: hop}
""")
    instances = Instances([graphs], tmp_path / "out", cluster=c.address)
    with TestClient(create_app(instances)) as client:
        iid = client.post("/pipelines/cams", json={}).json()["id"]
        for sid in ("a", "b"):
            r = client.post(f"/pipelines/{iid}/streams", json={"id": sid, "uri": "sample"})
            assert r.status_code == 201, r.text
        r = client.post(f"/pipelines/{iid}/streams", json={"id": "c", "uri": "sample"})
        assert r.status_code == 400 and "fits on no host" in r.json()["error"]  # 0.4 + 0.4 + 0.4 > 1 GPU
        deadline = time.monotonic() + 60
        while not all(s["out"] > 10 for s in client.get(f"/pipelines/{iid}/streams").json()):
            assert time.monotonic() < deadline
            time.sleep(0.1)
        rows = client.get(f"/pipelines/{iid}/streams").json()
        assert sorted(s["stream"] for s in rows) == ["a", "b"] and {s["host"] for s in rows} == {
            f"{h['NodeManagerAddress']} ({gpu_host.node_id[:8]})" for h in ray.nodes() if h["NodeID"] == gpu_host.node_id}
        while client.get(f"/pipelines/{iid}/streams/a/preview.jpg").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        # the live view, from the host running the stream: H.264 in fragmented MP4 (init, then fragments)
        got = b""
        with client.stream("GET", f"/pipelines/{iid}/streams/b/live.mp4") as r:
            assert r.status_code == 200 and r.headers["content-type"] == "video/mp4"
            for chunk in r.iter_bytes():
                got += chunk
                if got.count(b"moof") >= 2:
                    break
        assert got[4:8] == b"ftyp" and b"avc1" in got[:2000] and got.count(b"mdat") >= 2
        assert client.get(f"/pipelines/{iid}/events").json() == []  # the graph raises none; the hosts answer
        acct = client.delete(f"/pipelines/{iid}/streams/a").json()
        assert acct["state"] == "removed" and acct["in"] == acct["out"] > 10
        assert client.delete(f"/pipelines/{iid}/streams/a").status_code == 404
        final = client.delete(f"/pipelines/{iid}").json()
        assert final["state"] == "ABORTED" and final["frames"]["in"] == final["frames"]["out"] > 20
    from flowpipe.cluster.service import runs

    assert runs(c.address) == []


def test_serve_on_the_cluster_serves_each_event_s_snapshot_and_clip_from_the_host_that_raised_it(
        cluster, tmp_path) -> None:
    """Events of a cluster instance name their host; their snapshot and clip links read the files there (the
    host agent answers for the files its events name, and no other: a picture beside them in the same folder,
    which the server itself could read, is not served through a host)."""
    pytest.importorskip("fastapi")
    import time

    from fastapi.testclient import TestClient
    from test_serve import COUNTING

    from flowpipe.serve.api import create_app
    from flowpipe.serve.instances import Instances

    c, _ = cluster
    graphs = tmp_path / "graphs"
    graphs.mkdir()
    (graphs / "counting.yaml").write_text(
        COUNTING.replace("plugins: [fp_testnodes]", "plugins: [fp_testnodes]\ncluster: {per_stream: {intel_gpu: 0.4}}")
        .replace("type: video_source,", "type: video_source, template: true,")
        .replace("  input: sample\n", "  input: sample\n  gate: [[25, 0], [25, 200]]\n")
        .replace("points: [[25, 0], [25, 200]]", 'points: "${params.gate}"'))
    instances = Instances([graphs], tmp_path / "out", cluster=c.address)
    with TestClient(create_app(instances)) as client:
        iid = client.post("/pipelines/counting", json={}).json()["id"]
        assert client.post(f"/pipelines/{iid}/streams", json={"id": "gate", "uri": "sample"}).status_code == 201
        deadline = time.monotonic() + 90
        while not [e for e in client.get(f"/pipelines/{iid}/events").json() if e.get("clip") and e.get("snapshot")]:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        e = next(e for e in client.get(f"/pipelines/{iid}/events").json() if e.get("clip") and e.get("snapshot"))
        assert e["rule"] == "crossed" and "?host=" in e["snapshot"] and "?host=" in e["clip"]
        snap = client.get(e["snapshot"])
        assert snap.status_code == 200 and snap.headers["content-type"] == "image/jpeg"
        on_disk = instances.get(iid).folder / e["snapshot"].split("/files/")[1].split("?")[0]
        assert snap.content == on_disk.read_bytes() and snap.content[:2] == b"\xff\xd8"
        # an event names its clip while the clip runs on (its post-roll, 0.2 s; a browser plays what is there):
        # read it once the stream is a second past the event, the clip closed, so its bytes hold still below
        while not any(s["stream"] == "gate" and s["out"] > e["frame"] + 25
                      for s in client.get(f"/pipelines/{iid}/streams").json()):
            assert time.monotonic() < deadline + 60
            time.sleep(0.2)
        clip = client.get(e["clip"])
        assert clip.status_code == 200 and clip.headers["content-type"] == "video/mp4" and clip.content[4:8] == b"ftyp"
        # read on the host in byte ranges, as a browser's video element asks (Safari asks for nothing else)
        part = client.get(e["clip"], headers={"Range": "bytes=4-11"})
        assert part.status_code == 206 and part.content == clip.content[4:12]
        assert part.headers["content-range"] == f"bytes 4-11/{len(clip.content)}"
        tail = client.get(e["clip"], headers={"Range": "bytes=-16"})
        assert tail.status_code == 206 and tail.content == clip.content[-16:]
        beyond = client.get(e["clip"], headers={"Range": f"bytes={len(clip.content)}-"})
        assert beyond.status_code == 416 and beyond.headers["content-range"] == f"bytes */{len(clip.content)}"
        (on_disk.parent / "beside.jpg").write_bytes(snap.content)  # in the folder, named by no event
        beside = e["snapshot"].replace(on_disk.name, "beside.jpg")
        assert client.get(beside).status_code == 404 and "on host" in client.get(beside).json()["error"]
        assert client.get(beside.split("?")[0]).status_code == 200  # the server's own folder: served as before
        assert client.get(e["snapshot"].split("?")[0] + "?host=nowhere").status_code == 404
        # the gate moved where nothing walks, on the host through the run's controller: no crossing after
        r = client.patch(f"/pipelines/{iid}/parameters", json={"parameters": {"gate": [[900, 0], [900, 200]]}})
        assert r.status_code == 200, r.text
        moved = time.time()
        time.sleep(2.5)  # over three laps
        assert [e for e in client.get(f"/pipelines/{iid}/events").json() if e["at"] > moved + 0.5] == []
        client.delete(f"/pipelines/{iid}")

"""``flowpipe bench``: a graph run with warm-up, reporting what a performance review needs.

End-to-end FPS is measured over the frames after the warm-up (completion times of frames leaving the
graph); per-node FPS and latency percentiles, queue depths, CPU use, peak RSS, copies per frame and the
inference nodes' FEIL/FIL come from the same run.
"""
from __future__ import annotations

import copy
import itertools
import os
import platform
import resource
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..accel.host import usable_cores
from ..graph import GraphSpec, load_graph, parse_sets
from ..node import Source
from ..runtime.executor import executor
from ..runtime.settings import limit_library_threads


def replicate_sources(spec: GraphSpec, streams: int) -> GraphSpec:
    """N copies of every source (stream ids suffixed -1..-N-1) feeding the same consumers."""
    if streams <= 1:
        return spec
    for src in [s for s in spec.nodes if issubclass(s.cls, Source)]:
        for i in range(1, streams):
            base = src.stream
            update = {"stream": f"{base}-{i}"} if "stream" in type(src.config).model_fields else {}
            copy_source(spec, src, f"{src.id}-{i}", update)
    return spec


def copy_source(spec: GraphSpec, src: Any, node_id: str, update: dict[str, Any]) -> None:
    """One more source ``node_id``: a copy of ``src`` with ``update`` over its config, feeding its consumers."""
    dup = copy.copy(src)
    dup.id = node_id
    dup.config = src.config.model_copy(update=update)
    spec.nodes.append(dup)
    spec.dag.add_node(dup.id)
    for out_port, cons, in_port in spec.consumers(src.id):
        spec.node(cons).inputs[in_port].append((dup.id, out_port))
        spec.dag.add_edge(dup.id, cons, src_port=out_port, dst_port=in_port)


BURST_GAP_S = 0.001  # frames ending closer together than this one after another ended together (a writer that
#                     passes frames on once their fragment is on disk ends a second of them at once)
STEADY_BURSTS = 5  # fewer bursts than this in the window, and the rate is too coarse to read: the report says so


def _bursts(times: list[float], warmup: int) -> int:
    """How many separate times frames ended at after the warm-up (each frame one, where they flow)."""
    t = sorted(times)[max(warmup - 1, 0):]
    return sum(1 for a, b in itertools.pairwise(t) if b - a > BURST_GAP_S)


def _window_fps(times: list[float], warmup: int) -> float | None:
    """Frames a second from the end of the warm-up to the last frame: those that ended after the warm-up's last
    did, over that time. Frames that ended in the same burst as the warm-up's last were made before the window
    began and are not counted (counted, a run of a few seconds through a writer that passes frames on a second
    at a time read a quarter too fast)."""
    t = sorted(times)
    if len(t) <= warmup + 1:
        return None
    i = warmup - 1 if warmup > 0 else 0
    j = i + 1
    while j < len(t) and t[j] - t[j - 1] < BURST_GAP_S:
        j += 1
    n = len(t) - j
    return n / (t[-1] - t[i]) if t[-1] > t[i] and n else None


def bench_graph(path: str, sets: list[str] | None = None, frames: int = 300, warmup: int = 30,
                streams: int = 1, spec: GraphSpec | None = None, processes: int | str | None = None,
                device_owner: bool = True) -> dict[str, Any]:
    spec = spec or load_graph(path, parse_sets(sets))
    spec = replicate_sources(spec, streams)
    spec.device_owner = spec.device_owner and device_owner
    runner = executor(spec, processes, max_frames=(frames + warmup) * streams, record_times=True)
    n_proc = int(spec.processes)
    if n_proc == 1:
        limit_library_threads(spec)
    samples: list[tuple[float, float]] = []  # (time, CPU seconds of this process and its shards)
    peak_kb: dict[int, int] = {}  # per shard process: its high-water resident set
    shard_cpu: dict[int, float] = {}  # per shard process: CPU seconds when last seen alive
    stop = threading.Event()

    pss = [0]  # the highest sum of every process's proportional set (shared pages split among sharers)

    def sample() -> None:
        n = 0
        while not stop.wait(0.02):
            pids = runner.pids
            for p in pids:
                shard_cpu[p] = max(shard_cpu.get(p, 0.0), _proc_cpu_s(p))
                peak_kb[p] = max(peak_kb.get(p, 0), _proc_hwm_kb(p))
            samples.append((time.perf_counter(), time.process_time() + sum(shard_cpu.values())))
            n += 1
            if n % 10 == 0:  # every 0.2 s (the kernel walks each page table for it)
                pss[0] = max(pss[0], _proc_pss_kb("self") + sum(_proc_pss_kb(p) for p in pids))

    sampler = threading.Thread(target=sample, daemon=True)
    ru0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    sampler.start()
    res = runner.run()
    stop.set()
    sampler.join()
    ru1, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - t0
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    cpu += sum(shard_cpu.values())  # the shards' CPU, as last seen alive (their last ~20 ms are missed)
    times = [t for t, _ in res.done_times]
    by_stream: dict[str, list[float]] = {}
    for t, s in res.done_times:
        by_stream.setdefault(s, []).append(t)
    out_frames = max(res.frames["out"], 1)
    copies = sum(e["copies"] for e in res.edges.values())
    bytes_copied = sum(e["bytes_copied"] for e in res.edges.values())
    import openvino as ov  # its version for the report; the command line starts without loading OpenVINO

    return {
        "graph": str(path), "streams": streams, "processes": n_proc,
        "device_owner": bool(n_proc > 1 and spec.device_owner and any(s.contract.serves_streams for s in spec.nodes)),
        "frames": res.frames, "warmup": warmup,
        "fps": _round(_window_fps(times, warmup * streams)),
        "bursts": _bursts(times, warmup * streams),
        "per_stream_fps": {s: _round(_window_fps(ts, warmup)) for s, ts in sorted(by_stream.items())},
        "per_stream_fps_together": _together_fps(by_stream, warmup),
        "elapsed_s": round(wall, 3), "cpu_s": round(cpu, 3), "cpu_util_cores": round(cpu / wall, 2),
        "cpu_ms_per_frame": _window_cpu_ms(samples, sorted(times), warmup * streams),
        "peak_rss_mb": round((ru1.ru_maxrss + sum(peak_kb.values())) / 1024, 1),  # every process's peak, summed
        "peak_pss_mb": round(pss[0] / 1024, 1),  # the run's memory: libraries and shared buffers counted once
        "copies_per_frame": round(copies / out_frames, 4),
        "bytes_copied_per_frame": round(bytes_copied / out_frames, 1),
        "nodes": {k: {f: v.get(f) for f in ("type", "frames", "fps", "latency_ms", "queue_max", "busy_s",
                                                    "cpu_ms_per_frame")}
                  for k, v in res.nodes.items()},
        "detector_runs": _detector_runs(res.nodes),
        "edges": res.edges, "inference": res.inference, "exit": res.exit_code,
        "error": str(res.error) if res.error else None,
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": usable_cores(),
                    "python": platform.python_version(), "openvino": ov.get_version(),
                    "numpy": np.__version__},
    }


def slowest_fps(report: dict[str, Any]) -> float | None:
    """The slowest stream's rate in a bench report: its frames a second while every stream ran, after each one's
    warm-up (one stream: over its window after the warm-up). None where a stream has no rate, or fewer streams
    than the run had gave one (a stream starved through the run is the slowest of all)."""
    per = report.get("per_stream_fps_together") or report.get("per_stream_fps") or {}
    rates = list(per.values())
    if len(rates) < report["streams"] or any(v is None for v in rates):
        return None
    return min(rates)


def density(run: Callable[[int], dict[str, Any]], fps: float, start: int = 1, cap: int = 64,
            step_done: Callable[[dict[str, Any]], None] | None = None) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The most streams whose slowest stream holds ``fps``: from ``start`` streams, doubling while the slowest
    holds (up to ``cap``), then halving the gap between the last count that held and the first that fell.
    ``run(n)`` is one bench run at n streams. A start that falls is bisected down from (0: none held).

    Returns the ``density`` object (fps, streams, max_streams, steps: streams, fps of all streams, slowest,
    held) and the report of the run at the count that held (None where none did)."""
    steps: list[dict[str, Any]] = []
    held_report: dict[str, Any] | None = None

    def step(n: int) -> bool:
        nonlocal held_report
        r = run(n)
        slow = slowest_fps(r)
        held = r["exit"] == 0 and slow is not None and slow >= fps
        steps.append({"streams": n, "processes": r["processes"], "fps": r.get("fps"), "slowest": slow,
                      "held": held, **({"error": r["error"]} if r.get("error") else {})})
        if step_done:
            step_done(steps[-1])
        if held:
            held_report = r
        return held

    start = max(1, min(start, cap))
    lo, hi = 0, start  # lo held (0: nothing tried held), hi fell; cap + 1: nothing above the cap is tried
    n = start
    while step(n):
        lo = n
        if n >= cap:
            hi = cap + 1
            break
        n = min(2 * n, cap)
        hi = n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if step(mid):
            lo = mid
        else:
            hi = mid
    best = held_report if held_report is not None and held_report["streams"] == lo else None
    return {"fps": fps, "streams": lo, "max_streams": cap, "steps": steps}, best


def _together_fps(by_stream: dict[str, list[float]], warmup: int) -> dict[str, float | None]:
    """Each stream's rate while every stream ran (after the last warm-up ended, before the first stream
    ended): how evenly the run shares the machine, without the tails where fewer streams compete."""
    ts = {s: sorted(t) for s, t in by_stream.items() if len(t) > warmup + 1}
    if len(ts) < 2:
        return {s: _round(_window_fps(t, warmup)) for s, t in by_stream.items()}
    start = max(t[warmup] for t in ts.values())
    end = min(t[-1] for t in ts.values())
    if end <= start:
        return {s: None for s in ts}
    return {s: _round(sum(start < x <= end for x in t) / (end - start)) for s, t in sorted(ts.items())}


def _window_cpu_ms(samples: list[tuple[float, float]], times: list[float], warmup: int) -> float | None:
    """Process CPU milliseconds per frame between the end of the warm-up and the last frame (model
    compilation and start-up excluded), from samples taken every 20 ms."""
    if len(times) <= warmup + 1:
        return None
    start, end = times[warmup - 1] if warmup > 0 else times[0], times[-1]
    inside = [(t, c) for t, c in samples if start <= t <= end]
    if len(inside) < 2:
        return None
    frames = sum(1 for t in times if inside[0][0] < t <= inside[-1][0])
    return round((inside[-1][1] - inside[0][1]) / max(frames, 1) * 1e3, 3)


def _proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process (0 once it is gone)."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _proc_kb(pid: int | str, file: str, key: str) -> int:
    """A kB figure of a live process from /proc (0 once it is gone)."""
    try:
        for line in open(f"/proc/{pid}/{file}"):
            if line.startswith(key):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _proc_hwm_kb(pid: int) -> int:
    return _proc_kb(pid, "status", "VmHWM:")


def _proc_pss_kb(pid: int | str) -> int:
    return _proc_kb(pid, "smaps_rollup", "Pss:")



def _round(v: float | None) -> float | None:
    return round(v, 2) if v is not None else None


def _detector_runs(nodes: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Per preprocess with a detector interval: why the detector ran on frames, and how many it passed
    over, summed over the shards."""
    out: dict[str, dict[str, int]] = {}
    for nid, st in nodes.items():
        for block in [st, *st.get("shards", {}).values()]:
            for why, n in (block.get("detector_runs") or {}).items():
                out.setdefault(nid, {})[why] = out.get(nid, {}).get(why, 0) + n
    return out

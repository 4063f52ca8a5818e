"""One graph over the hosts of a Ray cluster: streams placed by resources, one host agent per host.

The controller (here: the ``flowpipe run --cluster`` process) reads the live hosts and what each declared
(``ray.nodes()``), places every stream with ``placement.place``, starts one ``HostAgent`` actor per host
that got streams (pinned to that host, reserving the streams' resources in Ray's accounting), polls their
progress and merges their statistics into one result: frames by fate, per stream, per node, per host.
"""
from __future__ import annotations

import logging
import os
import pickle
import time
from typing import Any

from ..graph import GraphSpec
from ..runtime.runner import RunSummary
from ..runtime.shards import _merge_nodes, stream_of
from .placement import Host, PlacementError, StreamNeed, place

log = logging.getLogger("flowpipe.cluster")
RESERVED = {"memory", "object_store_memory"}  # Ray's own accounting, not a stream's need


def connect(address: str | None) -> Any:
    """Ray, joined to ``address`` (``auto``: the cluster this host belongs to; ``local``: a one-host cluster
    started here). Usage statistics off."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    if not ray.is_initialized():
        if address in (None, "local"):
            ray.init(include_dashboard=False, logging_level=logging.ERROR)
        else:
            ray.init(address=address, logging_level=logging.ERROR)
    return ray


def hosts_of(ray: Any) -> list[Host]:
    out = []
    for n in ray.nodes():
        if not n.get("Alive"):
            continue
        res = {k: float(v) for k, v in n["Resources"].items() if k not in RESERVED and not k.startswith("node:")}
        labels = {k: str(v) for k, v in (n.get("Labels") or {}).items() if not k.startswith("ray.io/")}
        out.append(Host(n["NodeID"], res, labels, n.get("NodeManagerAddress", "")))
    return out


class ClusterRun:
    """Runs ``spec`` over the hosts of the Ray cluster at ``address``; ``run()`` returns a ``ClusterResult``."""

    def __init__(self, spec: GraphSpec, address: str | None = None, max_frames: int | None = None,
                 poll_s: float = 0.5):
        self.spec, self.max_frames, self.poll_s = spec, max_frames, poll_s
        self.address = address or (spec.cluster.address if spec.cluster else None)
        self.agents: list[dict[str, Any]] = []
        self.error: str | None = None
        self.interrupted = False
        self._stop = False
        self._now = False  # stop at once, not after the frames in flight

    def stop(self) -> None:
        self._stop = True

    def abort(self) -> None:
        self.interrupted = True
        self._stop = self._now = True

    def interrupt(self) -> None:
        """First SIGINT/SIGTERM: every host drains; second: every host stops now."""
        if self._stop:
            self.abort()
            return
        self.interrupted = True
        self.stop()

    def needs(self) -> list[StreamNeed]:
        keys = self.spec.cluster
        per = dict(keys.per_stream) if keys else {"CPU": 1.0}
        labels = dict(keys.labels) if keys else {}
        return [StreamNeed(s.id, per, labels) for s in self.spec.sources()]

    def run(self) -> ClusterResult:
        t0 = time.perf_counter()
        ray = connect(self.address)
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from .agent import HostAgent

        hosts = hosts_of(ray)
        try:
            where = place(self.needs(), hosts)
        except PlacementError as e:
            self.error = str(e)
            return ClusterResult(self, time.perf_counter() - t0)
        by_host: dict[str, list[str]] = {}
        for src in self.spec.sources():
            by_host.setdefault(where[src.id], []).append(src.id)
        payload = pickle.dumps(self.spec)
        actor = ray.remote(HostAgent)
        names = {h.host_id: h.name for h in hosts}
        total = max(1, len(self.spec.sources()))
        for i, (host_id, sources) in enumerate(by_host.items()):
            need: dict[str, float] = {}
            for n in self.needs():
                if n.stream in sources:
                    for r, v in n.resources.items():
                        need[r] = need.get(r, 0.0) + v
            cap = None if self.max_frames is None else max(1, round(self.max_frames * len(sources) / total))
            handle = actor.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(host_id, soft=False), max_concurrency=4,
                num_cpus=need.pop("CPU", 0.0), num_gpus=need.pop("GPU", 0.0), resources=need,
            ).remote(payload, sources, i * 1000, None, 0, cap)
            info = ray.get(handle.start.remote())
            log.info("host %s (%s): streams %s in %d process(es)", names[host_id], info["host"],
                     ", ".join(sources), info["processes"])
            self.agents.append({"host_id": host_id, "address": names[host_id], "handle": handle, "info": info,
                                "sources": sources, "progress": {}, "result": None, "error": None})
            if not info["opened"]:  # its open failed: the others are told not to start
                break
        start = all(a["info"]["opened"] for a in self.agents)
        ray.get([a["handle"].begin.remote(start) for a in self.agents])
        self._wait(ray)
        return ClusterResult(self, time.perf_counter() - t0)

    def _wait(self, ray: Any) -> None:
        told_stop = told_now = False
        while any(a["result"] is None and a["error"] is None for a in self.agents):
            if (self._stop and not told_stop) or (self._now and not told_now):
                told_stop, told_now = True, self._now
                for a in self.agents:
                    a["handle"].stop.remote(now=self._now)
            for a in self.agents:
                if a["result"] is not None or a["error"] is not None:
                    continue
                try:
                    a["result"] = ray.get(a["handle"].result.remote(self.poll_s))
                    if a["result"] is None:
                        a["progress"] = ray.get(a["handle"].progress.remote())
                except Exception as e:  # noqa: BLE001 - an agent or its host is gone
                    a["error"] = (f"host {a['address']} (streams {', '.join(a['sources'])}) lost: "
                                  f"{type(e).__name__}")
                    log.error("%s", a["error"])
        for a in self.agents:
            ray.kill(a["handle"], no_restart=True)

    def snapshot(self) -> dict[str, int]:
        out = {"in": 0, "out": 0, "dropped": 0, "failed": 0}
        for a in self.agents:
            counts = (a["result"] or {}).get("frames") or a["progress"]
            for k in out:
                out[k] += counts.get(k, 0)
        return out


class ClusterResult(RunSummary):
    """What a run over several hosts did, in the shape of ``RunResult`` (``to_json`` adds ``hosts``)."""

    def __init__(self, run: ClusterRun, elapsed: float):
        done = [(i, a["result"]) for i, a in enumerate(run.agents) if a["result"] is not None]
        self.frames = run.snapshot()
        lost = self.frames["in"] - self.frames["out"] - self.frames["dropped"] - self.frames["failed"]
        self.frames["failed"] += max(0, lost)  # frames in flight on hosts that were lost
        self.per_stream = {s: n for _, r in done for s, n in (r.get("streams") or {}).items()}
        self.nodes = _merge_nodes([(i, r) for i, r in done if r.get("nodes")])
        self.edges: dict[str, dict[str, Any]] = {}
        for _, r in done:
            for name, e in (r.get("edges") or {}).items():
                m = self.edges.setdefault(name, {"frames": 0, "copies": 0, "bytes_copied": 0, "memory": e["memory"]})
                for k in ("frames", "copies", "bytes_copied"):
                    m[k] += e[k]
        self.contracts = done[0][1].get("memory_contracts", {}) if done else {}
        self.inference = {k: v for _, r in done for k, v in r.items() if k.startswith("inference.")}
        self.elapsed_s = elapsed
        self.interrupted = run.interrupted
        errors = ([run.error] if run.error else []) + [a["error"] for a in run.agents if a["error"]] + \
                 [f"host {run.agents[i]['address']}: {r['error']}" for i, r in done if r.get("error")]
        self.error: BaseException | None = RuntimeError(errors[0]) if errors else None
        self.exit_code = 1 if self.error else (130 if self.interrupted else 0)
        self.hosts = [{"host_id": a["host_id"], "address": a["address"], "host": a["info"].get("host"),
                       "pid": a["info"].get("pid"), "processes": a["info"].get("processes"),
                       "streams": a["sources"], "frames": (a["result"] or {}).get("frames") or a["progress"],
                       "error": a["error"] or (a["result"] or {}).get("error")} for a in run.agents]

    def _more_json(self) -> dict[str, Any]:
        return {"hosts": self.hosts, "streams_by_host": {h["address"]: h["streams"] for h in self.hosts}}


__all__ = ["ClusterResult", "ClusterRun", "connect", "hosts_of", "stream_of"]

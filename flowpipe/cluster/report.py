"""What a cluster run tells while it goes (``flowpipe status --cluster``: its hosts, streams and rates) and
once it ended (``ClusterResult``: one account over every host that ran part of it)."""
from __future__ import annotations

import time
from collections import deque
from typing import Any

from ..runtime.stats import RunSummary, merge_nodes
from .state import AgentRecord, RunState, hosts_of


def snapshot(agents: list[AgentRecord]) -> dict[str, int]:
    """Frames by fate so far, over every host agent (its result, else its last report)."""
    out = {"in": 0, "out": 0, "dropped": 0, "failed": 0}
    for a in agents:
        counts = (a.result or {}).get("frames") or a.progress
        for k in out:
            out[k] += counts.get(k, 0)
    return out


def per_stream(agents: list[AgentRecord]) -> dict[str, int]:
    """Frames accounted per stream so far, over every host that ran it."""
    out: dict[str, int] = {}
    for a in agents:
        for s, n in ((a.result or {}).get("streams") or a.progress.get("streams") or {}).items():
            out[s] = out.get(s, 0) + n
    return out


class Report:
    """A run's rates (frames per stream over the last few seconds, from what its agents report) and its
    status."""

    WINDOW_S = 3.0

    def __init__(self, state: RunState):
        self.state = state
        self._seen: deque[tuple[float, dict[str, int]]] = deque()  # (time, frames per stream): rates

    def observe(self) -> None:
        """The agents' accounts now, after a poll of them."""
        self._seen.append((time.monotonic(), per_stream(self.state.agents)))
        while self._seen[-1][0] - self._seen[0][0] > self.WINDOW_S:
            self._seen.popleft()

    def rates(self) -> dict[str, float]:
        """Frames per second per stream over the last few seconds."""
        if len(self._seen) < 2:
            return {}
        (t0, first), (t1, last) = self._seen[0], self._seen[-1]
        return {s: (n - first.get(s, 0)) / max(t1 - t0, 1e-6) for s, n in last.items()}

    def status(self) -> dict[str, Any]:
        """What ``flowpipe status --cluster`` shows: the run's hosts, their devices, streams and rates."""
        st, rates = self.state, self.rates()
        hosts = {h.host_id: h for h in hosts_of(st.ray)} if st.ray is not None else {}
        where: dict[str, str] = {}
        rows = []
        for a in st.agents:
            live = a.running
            for s in a.sources + a.added:
                if live or s not in where:
                    where[s] = a.address
            held = [st.named(s) for s in a.sources] + a.added
            h = hosts.get(a.host_id)
            rows.append({"address": a.address, "host": a.info.get("host"), "pid": a.info.get("pid"),
                         "state": "running" if live else ("lost" if a.lost else "done"),
                         "processes": a.info.get("processes"), "generation": a.generation,
                         "devices": {k: v for k, v in (h.resources if h else {}).items()},
                         "metrics": a.info.get("metrics"), "streams": held,
                         "frames": (a.result or {}).get("frames") or a.progress,
                         "fps": round(sum(rates.get(s, 0.0) for s in held), 1) if live else 0.0})
        counts = per_stream(st.agents)  # by stream, as records name them (a source's ``stream``, else its id)
        streams = {s.stream: {"host": where.get(s.id), "frames": counts.get(s.stream, 0),
                              "fps": round(rates.get(s.stream, 0.0), 1)} for s in st.spec.sources()}
        return {"name": st.name, "phase": st.phase, "elapsed_s": round(time.time() - st.started_at, 1),
                "frames": snapshot(st.agents), "hosts": rows, "streams": streams, "replacements": st.replacements,
                "outages": st.outages, "retuned": {k: dict(v) for k, v in st.retuned.items()}, "error": st.error}


class ClusterResult(RunSummary):
    """What a run over several hosts did, in the shape of ``RunResult`` (``to_json`` adds ``hosts``)."""

    def __init__(self, run: RunState, elapsed: float):
        done = [(i, a.result) for i, a in enumerate(run.agents) if a.result is not None]
        self.frames = snapshot(run.agents)
        lost = self.frames["in"] - self.frames["out"] - self.frames["dropped"] - self.frames["failed"]
        self.frames["failed"] += max(0, lost)  # frames in flight on hosts that were lost
        self.per_stream = per_stream(run.agents)
        self.nodes = merge_nodes([(i, r) for i, r in done if r.get("nodes")])
        self.edges: dict[str, dict[str, Any]] = {}
        for _, r in done:
            for name, e in (r.get("edges") or {}).items():
                m = self.edges.setdefault(name, {"frames": 0, "copies": 0, "bytes_copied": 0, "memory": e["memory"]})
                for k in ("frames", "copies", "bytes_copied"):
                    m[k] += e[k]
        self.contracts = done[0][1].get("memory_contracts", {}) if done else {}
        self.inference = {k: v for _, r in done for k, v in r.items() if k.startswith("inference.")}
        self.elapsed_s = elapsed
        self.done_times: list[Any] = []  # frames' completion times stay on their hosts
        self.interrupted = run.interrupted
        errors = ([run.error] if run.error else []) + \
                 [a.error for a in run.agents if a.error and not (a.lost and run.replacements)] + \
                 [f"host {run.agents[i].address}: {r['error']}" for i, r in done if r.get("error")]
        self.error: BaseException | None = RuntimeError(errors[0]) if errors else None
        self.exit_code = 1 if self.error else (130 if self.interrupted else 0)
        self.hosts: list[dict[str, Any]] = [{"host_id": a.host_id, "address": a.address, "host": a.info.get("host"),
                       "pid": a.info.get("pid"), "processes": a.info.get("processes"),
                       "streams": [run.named(s) for s in a.sources] + a.added,
                       "frames": (a.result or {}).get("frames") or a.progress,
                       "generation": a.generation, "lost": a.lost, "metrics": a.info.get("metrics"),
                       "inference": {k: v for k, v in (a.result or {}).items() if k.startswith("inference.")},
                       "elapsed_s": (a.result or {}).get("elapsed_s"), "cpu_s": (a.result or {}).get("cpu_s"),
                       "error": a.error or (a.result or {}).get("error")} for a in run.agents]
        self.replacements = run.replacements
        self.outages = run.outages

    def _more_json(self) -> dict[str, Any]:
        return {"hosts": self.hosts, "replacements": self.replacements, "outages": self.outages}

"""A cluster run's host agents: started where placement puts the streams, and the streams of a host that is
lost, or drains for one that joined (``--rebalance``), placed again over the hosts there are, each resuming
after the last frame it had accounted or written."""
from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable

from ..graph import GraphSpec
from .agent import HostAgent
from .placement import PlacementError, place
from .state import NAMESPACE, AgentRecord, RunState, hosts_of

log = logging.getLogger("flowpipe.cluster")


def written(spec: GraphSpec, streams: list[str]) -> dict[str, int]:
    """Per stream of ``streams``: the last frame whose record is in the graph's ``jsonl`` outputs, where this
    process can read them (a path on storage every host shares)."""
    last: dict[str, int] = {}
    for path in spec.files("records"):
        if path == "-" or not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue  # a line cut by the loss
                st, ix = rec.get("stream"), rec.get("frame")
                if st in streams and isinstance(ix, int):
                    last[st] = max(last.get(st, -1), ix)
    return last


class Fleet:
    """Starts a run's host agents and, when a host goes, places its streams again (``rates``: frames per second
    per stream now, what a live stream's outage is reckoned by)."""

    def __init__(self, state: RunState, rates: Callable[[], dict[str, float]]):
        self.state, self.rates = state, rates

    def start(self, where: dict[str, str], start: dict[str, int], generation: int) -> bool:
        """One agent per host in ``where`` (stream -> host), every one opened before any of them starts."""
        st = self.state
        needs = {n.stream: n for n in st.needs()}
        by_host: dict[str, list[str]] = {}
        for src in st.spec.sources():
            if src.id in where:
                by_host.setdefault(where[src.id], []).append(src.id)
        total = max(1, len(st.spec.sources()))
        new = []
        for host_id, sources in by_host.items():
            need: dict[str, float] = {}
            for sid in sources:
                for r, v in needs[sid].resources.items():
                    need[r] = need.get(r, 0.0) + v
            cap = None
            if st.max_frames is not None:
                cap = max(1, round(st.max_frames * len(sources) / total) - sum(start.get(s, 0) for s in sources))
            agent = self.agent(host_id, sources, need, start, generation, cap)
            new.append(agent)
            if not agent.info["opened"]:  # its open failed: the others are told not to start
                break
        go = all(a.info["opened"] for a in new)
        st.ray.get([a.handle.begin.remote(go) for a in new])
        st.save()
        return go

    def agent(self, host_id: str, sources: list[str], need: dict[str, float], start: dict[str, int],
              generation: int, cap: int | None) -> AgentRecord:
        """A host agent for ``sources`` on ``host_id``, reserving ``need``; opened, not yet begun."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        st, need = self.state, dict(need)
        ray = st.ray
        names = {h.host_id: h.name for h in hosts_of(ray)}
        base = 1000 * len(st.agents)  # shard 0 of the first host's first start alone truncates outputs
        name = f"{st.name}/agent{len(st.agents)}"
        # where its streams resume (an agent with no sources of its own: the stream added to it)
        resume = {st.named(s): n for s, n in start.items() if s in sources or not sources}
        handle = ray.remote(HostAgent).options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(host_id, soft=False), max_concurrency=4,
            num_cpus=need.pop("CPU", 0.0), num_gpus=need.pop("GPU", 0.0), resources=need,
            name=name, namespace=NAMESPACE, lifetime="detached" if st.detached else None,
        ).remote(st.payload, sources, base, resume, generation, cap,
                 st.spec.cluster.metrics_port if st.spec.cluster else None)
        info = ray.get(handle.start.remote())
        log.info("host %s (%s): streams %s in %d process(es)%s", names.get(host_id), info["host"],
                 ", ".join(map(st.named, sources)) or "(to be added)", info["processes"],
                 f", restart {generation}" if generation else "")
        agent = AgentRecord(name, host_id, names.get(host_id, host_id[:8]), info, sources, generation,
                            {s: start.get(s, 0) for s in sources}, handle)
        st.agents.append(agent)
        return agent

    def joined(self, known: set[str]) -> set[str]:
        """``--rebalance``: when a host joins, the host running the most streams drains and its streams are
        placed again over every host (the new one included), each resuming after its last frame."""
        st = self.state
        now = {h.host_id for h in hosts_of(st.ray)}
        if now - known:
            live = [a for a in st.running() if not a.moving]
            busiest = max(live, key=lambda a: len(a.sources), default=None)
            if busiest is not None and len(busiest.sources) > 1:
                log.info("host joined: host %s drains streams %s to share them", busiest.address,
                         ", ".join(map(st.named, busiest.sources)))
                busiest.moving = True
                busiest.handle.stop.remote(now=False)
        return now

    def move(self, a: AgentRecord) -> None:
        """A host drained for a rebalance: its streams go where placement puts them now, each after the frames
        it finished (an exact account: nothing was in flight)."""
        st = self.state
        st.ray.kill(a.handle, no_restart=True)  # what it reserved is free for the streams' new places
        done = (a.result or {}).get("streams") or {}  # by stream
        with st.placing:  # (its new agents start from the graph as a change of configs left it)
            self.replace(a, {s: a.start.get(s, 0) + done.get(st.named(s), 0) for s in a.sources}, why="rebalance")

    def lose(self, a: AgentRecord, err: BaseException) -> dict[str, int]:
        """A host (or its agent) is gone: the graph's streams it ran resume on the hosts left, each after the
        frames it had accounted or written (frames it had in flight run again there; what it had done stays in
        the account). Returns where each stream it held (the graph's and those added to it) resumes."""
        st = self.state
        a.lost = True
        if a.handle is not None:
            try:  # an agent that no longer answers stops holding its streams and resources
                st.ray.kill(a.handle, no_restart=True)
            except Exception:  # noqa: BLE001, S110 - already gone with its host
                pass
        held = {s: st.named(s) for s in a.sources + a.added}  # source -> its stream
        a.error = f"host {a.address} (streams {', '.join(held.values())}) lost: {type(err).__name__}"
        accounted = dict(a.progress.get("streams", {}))  # by stream
        start = {s: a.start.get(s, 0) + accounted.get(stream, 0) for s, stream in held.items()}
        kept = {k: a.progress.get(k, 0) for k in ("out", "dropped", "failed")}
        # results it wrote after its last report, where the controller can read them (shared storage): those
        # frames are done (out), and their streams resume after them, so no result is written twice
        last_written = written(st.spec, list(held.values()))
        for s, stream in held.items():
            extra = last_written.get(stream, -1) + 1 - start[s]
            if extra > 0:
                start[s] += extra
                kept["out"] += extra
                accounted[stream] = accounted.get(stream, 0) + extra
        a.progress = dict(kept, **{"in": sum(kept.values()), "streams": accounted})
        log.warning("%s after %d frames accounted there", a.error, sum(accounted.values()))
        self._outages(a, start)
        if a.sources:
            self.replace(a, start, why="lost", without=a.host_id)
        return start

    def _outages(self, a: AgentRecord, start: dict[str, int]) -> None:
        """The live streams of lost agent ``a`` are out from when it last answered until they resume."""
        rates = self.rates()
        for src in self.state.spec.sources():
            if src.id in a.sources and src.contract.live:
                self.state.outages.append({
                    "stream": src.stream, "host": a.address, "last_seen": a.seen if a.seen is not None else time.time(),
                    "fps": round(rates.get(src.stream, 0.0), 2), "resumed_after_s": None, "frames_lost": None,
                    "resumed_at_frame": start[src.id], "generation": a.generation})

    def resumed(self) -> None:
        """Live streams of a lost host that send frames again on their new host: the outage is over; what
        the camera sent meanwhile was never read (reported: its time, and its frames at the rate before)."""
        st, now = self.state, time.time()
        for o in st.outages:
            if o["resumed_after_s"] is not None:
                continue
            later = [a for a in st.agents if a.generation > o["generation"]
                     and o["stream"] in map(st.named, a.sources)]
            if any(((a.result or {}).get("streams") or a.progress.get("streams") or {}).get(o["stream"], 0)
                   for a in later):
                o["resumed_after_s"] = round(now - o["last_seen"], 2)
                o["frames_lost"] = round(o["resumed_after_s"] * o["fps"])
                log.warning("stream %s: %.1f s without frames while host %s was lost (about %d frames at %.1f fps "
                            "never read)", o["stream"], o["resumed_after_s"], o["host"], o["frames_lost"], o["fps"])

    def replace(self, a: AgentRecord, start: dict[str, int], why: str, without: str | None = None) -> None:
        """Places ``a``'s streams again over the live hosts (less ``without``), with what the other live
        agents hold taken, and starts them there from ``start``."""
        st = self.state
        t0, noticed = time.perf_counter(), time.time()
        if st.stop:
            log.error("host %s: the run is stopping: streams %s not placed again", a.address,
                      ", ".join(map(st.named, a.sources)))
            return
        hosts = {h.host_id: h for h in hosts_of(st.ray) if h.host_id != without}
        needs = {n.stream: n for n in st.needs()}
        for other in st.agents:  # what live agents hold is not free
            if other is not a and other.running and other.host_id in hosts:
                for s in other.sources:
                    hosts[other.host_id].take(needs[s])
        try:
            where = place([needs[s] for s in a.sources], list(hosts.values()))
        except PlacementError as e:
            log.error("host %s: %s", a.address, e)
            st.error = f"{a.error}; {e}" if a.error else str(e)
            return
        log.info("streams %s of host %s resume on %s", ", ".join(map(st.named, a.sources)), a.address,
                 ", ".join(sorted({hosts[h].name for h in where.values()})))
        self.start(where, start, a.generation + 1)
        st.replacements.append({"host": a.address, "streams": [st.named(s) for s in a.sources],
                                "resume_at": {st.named(s): n for s, n in start.items()}, "why": why,
                                "noticed_at": round(noticed, 3), "replaced_in_s": round(time.perf_counter() - t0, 3)})


__all__ = ["Fleet", "written"]

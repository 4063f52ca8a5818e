"""One graph over the hosts of a Ray cluster: streams placed by resources, one host agent per host.

The controller reads the live hosts and what each declared (``ray.nodes()``), places every stream with
``placement.place``, starts one ``HostAgent`` actor per host that got streams (pinned to that host,
reserving the streams' resources in Ray's accounting), polls their progress and merges their statistics
into one result: frames by fate, per stream, per node, per host. Its parts: ``Fleet`` (fleet.py) starts the
agents and places a lost host's streams again, ``HostStreams`` (streams.py) is its live control (commands sent
to the agents), ``Report`` (report.py) its rates and status; they share the run's ``RunState`` (state.py).

``flowpipe run --cluster`` runs it inside a named, detached actor (``service.py``): the run outlives the
command, and a controller that dies is restarted by Ray and takes its run over from the state it keeps in
the cluster's own key-value store (``RunState.save``, ``ClusterRun.run``): its agents (named, detached) never
stopped.
"""
from __future__ import annotations

import logging
import secrets
import time
from typing import Any

from ..graph import GraphSpec
from ..runtime.live import retune_specs
from .fleet import Fleet, written
from .placement import PlacementError, place
from .report import ClusterResult, Report, per_stream
from .state import NAMESPACE, AgentRecord, RunState, connect, drop_state, hosts_of, load_state
from .streams import HostStreams

log = logging.getLogger("flowpipe.cluster")


def cluster_devices(address: str | None) -> list[dict[str, Any]]:
    """Each live host's devices as flowpipe sees them there (``flowpipe devices --cluster``), with the Ray
    resources it declared: a task pinned to every host."""
    ray = connect(address)
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    def look() -> dict[str, Any]:
        import socket

        from ..accel.host import device_report

        return {"host": socket.gethostname(), "devices": device_report()}

    task = ray.remote(num_cpus=0)(look)
    hosts = hosts_of(ray)
    found = ray.get([task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(h.host_id, soft=False)).remote()
                     for h in hosts])
    return [dict(f, address=h.name, resources=h.resources, labels=h.labels) for h, f in zip(hosts, found)]


class ClusterRun:
    """Runs ``spec`` over the hosts of the Ray cluster at ``address``; ``run()`` returns a ``ClusterResult``.

    It is the run's state machine (placing, running, stopping, finished): it polls the agents and hands each
    transition to the part it concerns: a host lost, drained or joining to ``fleet``, the agents' accounts to
    ``report``; streams added, removed and asked about while it runs go through ``live``."""

    def __init__(self, spec: GraphSpec, address: str | None = None, max_frames: int | None = None,
                 poll_s: float = 0.5, rebalance: bool = False, name: str | None = None, detached: bool = False):
        self.poll_s = poll_s
        self.rebalance = rebalance  # a host that joins takes streams over from the busiest host
        self.address = address or (spec.cluster.address if spec.cluster else None)
        self.state = RunState(spec, name or f"run-{secrets.token_hex(3)}", detached, max_frames)
        self.report = Report(self.state)
        self.fleet = Fleet(self.state, self.report.rates)
        self.live = HostStreams(self.state, self.fleet)

    @property
    def name(self) -> str:
        return self.state.name

    @property
    def phase(self) -> str:
        """placing, running, stopping, finished"""
        return self.state.phase

    @property
    def agents(self) -> list[AgentRecord]:
        return self.state.agents

    @property
    def outages(self) -> list[dict[str, Any]]:
        """Live streams of lost hosts: from when they were last seen to when they resumed."""
        return self.state.outages

    def stop(self) -> None:
        self.state.stop = True

    def abort(self) -> None:
        self.state.interrupted = True
        self.state.stop = self.state.now = True

    def interrupt(self) -> None:
        """First SIGINT/SIGTERM: every host drains; second: every host stops now."""
        if self.state.stop:
            self.abort()
            return
        self.state.interrupted = True
        self.stop()

    def per_stream(self) -> dict[str, int]:
        """Frames accounted per stream so far, over every host that ran it."""
        return per_stream(self.state.agents)

    def status(self) -> dict[str, Any]:
        """What ``flowpipe status --cluster`` shows: the run's hosts, their devices, streams and rates."""
        return self.report.status()

    def run(self) -> ClusterResult:
        """Places and runs the streams, or, where this run's state is kept (a controller restarted), takes
        the run over from it."""
        st = self.state
        st.ray = connect(self.address)
        kept = load_state(st.name) if st.detached else None
        if kept is not None and kept.get("result") is not None:
            return kept["result"]  # it had ended: the result waits for its client
        if kept is not None:
            self._restore(kept)
            self._wait()
            return self._end()
        try:
            where = place(st.needs(), hosts_of(st.ray))
        except PlacementError as e:
            st.error = str(e)
            return self._end()
        if self.fleet.start(where, {}, 0):
            st.phase = "running"
            self._wait()
        return self._end()

    def _end(self) -> ClusterResult:
        st = self.state
        for a in st.agents:
            if a.handle is not None:
                st.ray.kill(a.handle, no_restart=True)
        st.phase = "finished"
        result = ClusterResult(st, time.time() - st.started_at)
        st.save(result)
        return result

    def _restore(self, kept: dict[str, Any]) -> None:
        """A restarted controller: its agents found again by name (they never stopped), agents started after
        its last saved state stopped (their streams are where the state says), agents gone counted lost."""
        st = self.state
        ray = st.ray
        st.take_back(kept)
        st.configure(retune_specs(st.spec, st.retuned))  # before a lost host's streams are placed again
        known = {a.name for a in st.agents}
        for found in ray.util.list_named_actors(all_namespaces=True):
            if found["namespace"] == NAMESPACE and found["name"].startswith(f"{st.name}/") \
                    and found["name"] not in known:
                try:
                    ray.kill(ray.get_actor(found["name"], namespace=NAMESPACE), no_restart=True)
                except ValueError:
                    pass  # it ended meanwhile
        st.phase = "running"
        log.warning("run %s: controller restarted; %d host agent(s) taken over", st.name, len(st.running()))
        for a in list(st.agents):
            a.handle = None
            if a.running:
                try:
                    a.handle = ray.get_actor(a.name, namespace=NAMESPACE)
                except ValueError as e:  # gone while no controller watched
                    self._lost(a, e)

    def _lost(self, a: AgentRecord, err: BaseException) -> None:
        """A host (or its agent) is gone: its streams, the graph's and those added to it, resume on the hosts
        left, each after the frames it had accounted or written."""
        with self.state.placing:  # (a stream of it added again meanwhile by a user would run twice)
            start = self.fleet.lose(a, err)
            self.live.again(a, start)

    def _wait(self) -> None:
        st = self.state
        told_stop = told_now = False
        known = {h.host_id for h in hosts_of(st.ray)}
        looked = time.monotonic()
        keep = bool(st.spec.templates())  # streams come at run time: it runs until stopped
        while st.running() or (keep and not st.stop):
            if self.rebalance and not st.stop and time.monotonic() - looked > 1.0:
                looked = time.monotonic()
                known = self.fleet.joined(known)
            if (st.stop and not told_stop) or (st.now and not told_now):
                told_stop, told_now = True, st.now
                st.phase = "stopping"
                st.save()
                for a in st.running():
                    a.handle.stop.remote(now=st.now)
            ended = self._poll()
            self.report.observe()
            if any(o["resumed_after_s"] is None for o in st.outages):
                self.fleet.resumed()
            if ended or time.monotonic() - st.saved_at > 1.0:
                st.save()

    def _poll(self) -> bool:
        """Every running agent's result (waiting ``poll_s`` for it, all at once) or progress; whether any ended."""
        st = self.state
        ray = st.ray
        live = st.running()
        if not live:
            time.sleep(self.poll_s)
        asked = [(a, a.handle.result.remote(self.poll_s), a.handle.progress.remote()) for a in live]
        ended = False
        for a, result, progress in asked:  # every host waits its poll_s at once, not one after another
            try:
                a.result = ray.get(result)
                if a.result is None:
                    a.progress = ray.get(progress)
                    a.seen = time.time()
                else:
                    ended = True
                    if a.moving:
                        self.fleet.move(a)
            except Exception as e:  # noqa: BLE001 - an agent or its host is gone
                ended = True
                self._lost(a, e)
        return ended


__all__ = ["NAMESPACE", "AgentRecord", "ClusterResult", "ClusterRun", "cluster_devices", "connect", "drop_state",
           "hosts_of", "load_state", "written"]

"""One graph over the hosts of a Ray cluster: streams placed by resources, one host agent per host.

The controller reads the live hosts and what each declared (``ray.nodes()``), places every stream with
``placement.place``, starts one ``HostAgent`` actor per host that got streams (pinned to that host,
reserving the streams' resources in Ray's accounting), polls their progress and merges their statistics
into one result: frames by fate, per stream, per node, per host.

``flowpipe run --cluster`` runs it inside a named, detached actor (``service.py``): the run outlives the
command, and a controller that dies is restarted by Ray and takes its run over from the state it keeps in
the cluster's own key-value store (``save``/``restore``): its agents (named, detached) never stopped.
"""
from __future__ import annotations

import json
import logging
import os
import pickle
import secrets
import threading
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any

from ..graph import GraphSpec
from ..runtime.live import PartlyRetunedError, retune_specs, template_of
from ..runtime.stats import RunSummary, merge_nodes
from .agent import FilePart, HostAgent, Span
from .placement import Host, PlacementError, StreamNeed, place

log = logging.getLogger("flowpipe.cluster")
RESERVED = {"memory", "object_store_memory"}  # Ray's own accounting, not a stream's need
NAMESPACE = "flowpipe"  # Ray namespace of flowpipe's named actors and kept state


def connect(address: str | None) -> Any:
    """Ray, joined to ``address`` (``auto``: the cluster this host belongs to; ``local``: a one-host cluster
    started here). Usage statistics off."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    if not ray.is_initialized():
        if address in (None, "local"):
            ray.init(include_dashboard=False, logging_level=logging.ERROR, namespace=NAMESPACE)
        elif address.startswith("ray://"):
            for attempt in range(3):  # the client server starts a process per client; that start can fail once
                try:
                    ray.init(address=address, logging_level=logging.ERROR, namespace=NAMESPACE)
                    break
                except ConnectionError as e:
                    if attempt == 2:
                        raise
                    log.warning("Ray client at %s: %s; connecting again", address, str(e).splitlines()[0])
                    time.sleep(1.0 + attempt)
        else:
            ray.init(address=address, logging_level=logging.ERROR, namespace=NAMESPACE)
    return ray


def cause_of(e: Any) -> Exception:
    """What a remote call raised, as its caller's own error: the same kind and one line (a Ray task error
    carries the remote exception and its traceback)."""
    cause = e.cause if isinstance(getattr(e, "cause", None), (ValueError, KeyError, RuntimeError)) \
        else RuntimeError(str(e).splitlines()[0])
    return type(cause)(str(cause.args[0]) if cause.args else str(cause))


def _kv() -> Any:
    # the store Ray Serve's controller keeps its checkpoints in; Ray names its calls with a leading underscore
    from ray.experimental import internal_kv

    return internal_kv


def save_state(name: str, state: dict[str, Any]) -> None:
    _kv()._internal_kv_put(f"{name}/state", pickle.dumps(state), namespace=NAMESPACE)  # noqa: SLF001 - Ray's API


def load_state(name: str) -> dict[str, Any] | None:
    raw = _kv()._internal_kv_get(f"{name}/state", namespace=NAMESPACE)  # noqa: SLF001 - Ray's API
    return pickle.loads(raw) if raw else None  # noqa: S301 - written by this run's controller


def drop_state(name: str) -> None:
    _kv()._internal_kv_del(f"{name}/", del_by_prefix=True, namespace=NAMESPACE)  # noqa: SLF001 - Ray's API


def hosts_of(ray: Any) -> list[Host]:
    out = []
    for n in ray.nodes():
        if not n.get("Alive"):
            continue
        res = {k: float(v) for k, v in n["Resources"].items() if k not in RESERVED and not k.startswith("node:")}
        labels = {k: str(v) for k, v in (n.get("Labels") or {}).items() if not k.startswith("ray.io/")}
        out.append(Host(n["NodeID"], res, labels, f"{n.get('NodeManagerAddress', '')} ({n['NodeID'][:8]})"))
    return out


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


@dataclass
class AgentRecord:
    """One host agent of a run, as its controller keeps it (saved in the cluster's key-value store without
    its handle, which a controller taking the run over finds again by ``name``)."""

    name: str
    host_id: str
    address: str  # the host as people read it
    info: dict[str, Any]  # what its start said: host name, pid, processes, opened, metrics URL
    sources: list[str]  # the graph's streams placed on it
    generation: int  # how many times these streams were placed again
    start: dict[str, int]  # per stream: the first frame it runs
    handle: Any = None  # the Ray actor
    added: list[str] = field(default_factory=list)  # streams added to the running graph on it
    recipes: dict[str, dict[str, Any]] = field(default_factory=dict)  # each added stream's like and config
    removed: list[str] = field(default_factory=list)  # added streams being removed (not to be placed again)
    progress: dict[str, Any] = field(default_factory=dict)  # its last report: frames by fate, per stream
    result: dict[str, Any] | None = None  # its statistics once its part of the run ended
    error: str | None = None
    lost: bool = False  # its host (or itself) went away
    moving: bool = False  # draining so that its streams move to a host that joined
    seen: float | None = None  # when it last answered


RETUNE_TIMEOUT_S = 75.0  # a host agent takes a change of configs within this (its processes' 60 s and more), or
# is named as not having it


class ClusterRun:
    """Runs ``spec`` over the hosts of the Ray cluster at ``address``; ``run()`` returns a ``ClusterResult``.

    About 420 lines, kept whole on purpose: it is one state machine (placing, running, stopping, finished)
    whose every transition (a host lost, one joining, the controller restarted, a stream added) reads and
    writes the same agents and saves them together; its parts that stand alone are elsewhere (placement,
    the host agent, the per-agent record, the result)."""

    def __init__(self, spec: GraphSpec, address: str | None = None, max_frames: int | None = None,
                 poll_s: float = 0.5, rebalance: bool = False, name: str | None = None, detached: bool = False):
        self.spec, self.max_frames, self.poll_s = spec, max_frames, poll_s
        self.rebalance = rebalance  # a host that joins takes streams over from the busiest host
        self.address = address or (spec.cluster.address if spec.cluster else None)
        self.name = name or f"run-{secrets.token_hex(3)}"
        self.detached = detached  # agents outlive this process; the run's state is kept in the cluster
        self.phase = "placing"  # placing, running, stopping, finished
        self.started_at = time.time()
        self.agents: list[AgentRecord] = []
        self.replacements: list[dict[str, Any]] = []  # host losses and where their streams went
        self.error: str | None = None
        self.interrupted = False
        self._stop = False
        self._now = False  # stop at once, not after the frames in flight
        self._saved = 0.0
        self._seen: deque[tuple[float, dict[str, int]]] = deque()  # (time, frames per stream): rates
        self.outages: list[dict[str, Any]] = []  # live streams of lost hosts: from last seen to resumed
        self._placing = threading.RLock()  # streams added (the API's threads) and placed again (a host lost)
        self.retuned: dict[str, dict[str, Any]] = {}  # node -> fields changed while it runs (kept, as agents)

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

    def named(self, source: str) -> str:
        """The stream source node ``source`` emits, by which agents count frames and streams resume (a stream
        added at run time is named as itself)."""
        return next((s.stream for s in self.spec.sources() if s.id == source), source)

    def needs(self) -> list[StreamNeed]:
        keys = self.spec.cluster
        per = dict(keys.per_stream) if keys else {"CPU": 1.0}
        labels = dict(keys.labels) if keys else {}
        return [StreamNeed(s.id, per, labels, s.stream) for s in self.spec.sources()]

    def run(self) -> ClusterResult:
        """Places and runs the streams, or, where this run's state is kept (a controller restarted), takes
        the run over from it."""
        ray = connect(self.address)
        self._ray = ray
        self._payload = pickle.dumps(self.spec)
        state = load_state(self.name) if self.detached else None
        if state is not None and state.get("result") is not None:
            return state["result"]  # it had ended: the result waits for its client
        if state is not None:
            self._restore(state)
            self._wait()
            return self._end()
        try:
            where = place(self.needs(), hosts_of(ray))
        except PlacementError as e:
            self.error = str(e)
            return self._end()
        if self._start(where, {}, 0):
            self.phase = "running"
            self._wait()
        return self._end()

    def _end(self) -> ClusterResult:
        for a in self.agents:
            if a.handle is not None:
                self._ray.kill(a.handle, no_restart=True)
        self.phase = "finished"
        result = ClusterResult(self, time.time() - self.started_at)
        self._save(result)
        return result

    def _save(self, result: ClusterResult | None = None) -> None:
        """The run's state in the cluster's key-value store, for a controller that takes the run over."""
        if not self.detached:
            return
        self._saved = time.monotonic()
        save_state(self.name, {"agents": [replace(a, handle=None) for a in self.agents],
                               "replacements": self.replacements, "outages": self.outages, "error": self.error,
                               "interrupted": self.interrupted, "stop": self._stop, "now": self._now,
                               "started_at": self.started_at, "retuned": self.retuned, "result": result})

    def _restore(self, state: dict[str, Any]) -> None:
        """A restarted controller: its agents found again by name (they never stopped), agents started after
        its last saved state stopped (their streams are where the state says), agents gone counted lost."""
        ray = self._ray
        self.agents, self.replacements, self.error = state["agents"], state["replacements"], state["error"]
        self.outages = state["outages"]
        self.interrupted, self._stop, self._now = state["interrupted"], state["stop"], state["now"]
        self.started_at, self.retuned = state["started_at"], state.get("retuned", {})
        self._configure(retune_specs(self.spec, self.retuned))  # before a lost host's streams are placed again
        known = {a.name for a in self.agents}
        for found in ray.util.list_named_actors(all_namespaces=True):
            if found["namespace"] == NAMESPACE and found["name"].startswith(f"{self.name}/") \
                    and found["name"] not in known:
                try:
                    ray.kill(ray.get_actor(found["name"], namespace=NAMESPACE), no_restart=True)
                except ValueError:
                    pass  # it ended meanwhile
        self.phase = "running"
        log.warning("run %s: controller restarted; %d host agent(s) taken over", self.name,
                    sum(1 for a in self.agents if a.result is None and a.error is None))
        for a in list(self.agents):
            a.handle = None
            if a.result is None and a.error is None:
                try:
                    a.handle = ray.get_actor(a.name, namespace=NAMESPACE)
                except ValueError as e:  # gone while no controller watched
                    self._lost(a, e)

    def _start(self, where: dict[str, str], start: dict[str, int], generation: int) -> bool:
        """One agent per host in ``where`` (stream -> host), every one opened before any of them starts."""
        ray = self._ray
        needs = {n.stream: n for n in self.needs()}
        by_host: dict[str, list[str]] = {}
        for src in self.spec.sources():
            if src.id in where:
                by_host.setdefault(where[src.id], []).append(src.id)
        total = max(1, len(self.spec.sources()))
        new = []
        for host_id, sources in by_host.items():
            need: dict[str, float] = {}
            for sid in sources:
                for r, v in needs[sid].resources.items():
                    need[r] = need.get(r, 0.0) + v
            cap = None
            if self.max_frames is not None:
                cap = max(1, round(self.max_frames * len(sources) / total) - sum(start.get(s, 0) for s in sources))
            agent = self._agent(host_id, sources, need, start, generation, cap)
            new.append(agent)
            if not agent.info["opened"]:  # its open failed: the others are told not to start
                break
        go = all(a.info["opened"] for a in new)
        ray.get([a.handle.begin.remote(go) for a in new])
        self._save()
        return go

    def _agent(self, host_id: str, sources: list[str], need: dict[str, float], start: dict[str, int],
               generation: int, cap: int | None) -> AgentRecord:
        """A host agent for ``sources`` on ``host_id``, reserving ``need``; opened, not yet begun."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        ray, need = self._ray, dict(need)
        names = {h.host_id: h.name for h in hosts_of(ray)}
        base = 1000 * len(self.agents)  # shard 0 of the first host's first start alone truncates outputs
        name = f"{self.name}/agent{len(self.agents)}"
        # where its streams resume (an agent with no sources of its own: the stream added to it)
        resume = {self.named(s): n for s, n in start.items() if s in sources or not sources}
        handle = ray.remote(HostAgent).options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(host_id, soft=False), max_concurrency=4,
            num_cpus=need.pop("CPU", 0.0), num_gpus=need.pop("GPU", 0.0), resources=need,
            name=name, namespace=NAMESPACE, lifetime="detached" if self.detached else None,
        ).remote(self._payload, sources, base, resume, generation, cap,
                 self.spec.cluster.metrics_port if self.spec.cluster else None)
        info = ray.get(handle.start.remote())
        log.info("host %s (%s): streams %s in %d process(es)%s", names.get(host_id), info["host"],
                 ", ".join(map(self.named, sources)) or "(to be added)", info["processes"],
                 f", restart {generation}" if generation else "")
        agent = AgentRecord(name, host_id, names.get(host_id, host_id[:8]), info, sources, generation,
                            {s: start.get(s, 0) for s in sources}, handle)
        self.agents.append(agent)
        return agent

    # streams added at run time (flowpipe serve --cluster) ------------------------------------------------
    def add_stream(self, stream: str, like: str | None = None, config: dict[str, Any] | None = None,
                   start: int = 0, generation: int = 0, without: str | None = None) -> None:
        """Places a new stream like source ``like`` on a host with room for it and starts it there, in an
        agent of its own (its resources reserved in Ray's accounting). A stream of a lost host is added
        again the same way (``start``: its first frame there; ``without``: the host lost)."""
        if not self._placing.acquire(timeout=30):
            raise RuntimeError("streams of a lost host are being placed again: try again")
        try:
            self._add_stream(stream, like, config, start, generation, without)
        finally:
            self._placing.release()

    def _add_stream(self, stream: str, like: str | None, config: dict[str, Any] | None, start: int,
                    generation: int, without: str | None) -> None:
        if self.phase != "running" or self._stop:
            raise RuntimeError("the run is not running")
        if self._serving(stream) is not None or any(n.id == stream for n in self.spec.nodes) or \
                any(s.stream == stream for s in self.spec.sources()):
            raise ValueError(f"a stream or node named {stream!r} is already in the graph")
        like = template_of(self.spec, like).id
        keys = self.spec.cluster
        need = StreamNeed(stream, dict(keys.per_stream) if keys else {"CPU": 1.0}, dict(keys.labels) if keys else {})
        hosts = {h.host_id: h for h in hosts_of(self._ray) if h.host_id != without}
        needs = {n.stream: n for n in self.needs()}
        for other in self.agents:
            if other.result is None and other.error is None and other.host_id in hosts:
                for s in other.sources:
                    hosts[other.host_id].take(needs[s])
                for s in other.added:
                    hosts[other.host_id].take(StreamNeed(s, need.resources, need.labels))
        try:
            where = place([need], list(hosts.values()))
        except PlacementError as e:
            raise ValueError(str(e)) from None
        agent = self._agent(where[stream], [], need.resources, {stream: start}, generation, None)
        self._ray.get(agent.handle.begin.remote(agent.info["opened"]))
        from ray.exceptions import RayTaskError

        try:
            self._ray.get(agent.handle.add_stream.remote(stream, like, config))
        except RayTaskError as e:  # the stream's own error (a bad setting, a camera that does not open)
            agent.handle.stop.remote(now=True)
            raise cause_of(e) from None
        agent.added.append(stream)
        agent.start[stream] = start
        agent.recipes[stream] = {"like": like, "config": config}
        self._save()

    def _holding(self, stream: str) -> AgentRecord:
        for a in self.agents:
            if stream in a.added and stream not in a.removed and a.result is None and a.error is None:
                return a
        raise KeyError(f"no stream named {stream!r} was added to this graph")

    def remove_stream(self, stream: str, timeout: float = 30.0) -> dict[str, Any]:
        with self._placing:  # (not placed again by a host lost while it drains)
            a = self._holding(stream)
            a.removed.append(stream)
        account: dict[str, Any] = self._ray.get(a.handle.remove_stream.remote(stream, timeout))
        account["host"] = a.address
        a.handle.stop.remote(now=False)  # its agent had this stream alone: it ends, its account kept
        return account

    def stream_states(self) -> list[dict[str, Any]]:
        rows = []
        live = [a for a in self.agents if a.result is None and a.error is None]
        for a, got in zip(live, self._ray.get([a.handle.stream_states.remote() for a in live])):
            rows += [dict(r, host=a.address) for r in got]
        return rows

    def retune(self, changes: dict[str, dict[str, Any]]) -> None:
        """Nodes' configs changed on every host (``LiveControl.retune``), and in the graph agents started from
        now on get (a lost host's streams placed again, a rebalance). Hosts are asked at once, outside the
        placing lock (a lost host is placed again meanwhile); if none took it and one refused, every one is as
        it was; if some took it, the change stands, and the hosts that did not are named
        (``PartlyRetunedError``)."""
        if self.phase != "running":
            raise RuntimeError("the run is not running")
        if not self._placing.acquire(timeout=30):
            raise RuntimeError("a lost host's streams are being placed again; try again")
        try:
            new = retune_specs(self.spec, changes)
            old = {nid: self.spec.node(nid).config for nid in new}
            kept = {nid: dict(f) for nid, f in self.retuned.items()}
            self._configure(new)
            for nid, fields in changes.items():
                self.retuned.setdefault(nid, {}).update(fields)
            self._save()  # a controller that takes over has it, whatever the hosts answer
            live = [a for a in self.agents if a.result is None and a.error is None and a.handle is not None]
        finally:
            self._placing.release()
        took, refused, missed = self._ask_all(live, changes)
        if not took and (refused or missed):
            with self._placing:
                self._configure(old)
                self.retuned = kept
                self._save()
            raise refused[0] if refused else RuntimeError(f"no host took the change: {'; '.join(missed)}")
        if missed or refused:
            why = "; ".join(missed + [str(e) for e in refused])
            raise PartlyRetunedError(f"{why} (hosts {', '.join(took)} and those started from now on have the change)")

    def _ask_all(self, live: list[AgentRecord], changes: dict[str, dict[str, Any]]
                 ) -> tuple[list[str], list[Exception], list[str]]:
        """``retune`` on every agent in ``live`` at once, within one deadline: the hosts that took it (all or,
        over several processes, some of theirs), the refusals, and the others (not answering, failing) by
        name; a host lost or draining meanwhile is passed over (its streams start from the graph as changed)."""
        ray = self._ray
        refs = {a.handle.retune.remote(changes): a for a in live}
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=RETUNE_TIMEOUT_S)
        took: list[str] = []
        refused: list[Exception] = []
        missed = [f"host {refs[r].address}: no answer in {RETUNE_TIMEOUT_S:.0f}s" for r in refs if r not in ready]
        for ref in ready:
            a = refs[ref]
            try:
                ray.get(ref)
                took.append(a.address)
            except ray.exceptions.RayActorError:
                continue
            except Exception as e:  # noqa: BLE001 - sorted below
                err = cause_of(e)
                if isinstance(err, PartlyRetunedError):
                    took.append(a.address)
                    missed.append(f"host {a.address}: {err}")
                elif isinstance(err, ValueError):
                    refused.append(err)
                elif "not running" not in str(err):
                    missed.append(f"host {a.address}: {err}")
        return took, refused, missed

    def _configure(self, configs: dict[str, Any]) -> None:
        """The graph host agents start from, with ``configs`` (node id -> config) in place."""
        self.spec.configure(configs)
        self._payload = pickle.dumps(self.spec)

    def _serving(self, stream: str) -> Any:
        """The agent running ``stream`` now, or None."""
        return next((a for a in self.agents if (stream in a.sources or (stream in a.added and stream not in a.removed))
                     and a.result is None and a.error is None), None)

    def picture(self, stream: str) -> bytes | None:
        a = self._serving(stream)
        return None if a is None else self._ray.get(a.handle.picture.remote(stream))  # type: ignore[no-any-return]

    def video(self, stream: str, seq: int) -> tuple[bytes | None, list[tuple[int, bytes]]] | None:
        """The stream's live view after fragment ``seq``, from the host running it."""
        a = self._serving(stream)
        return None if a is None else self._ray.get(a.handle.video.remote(stream, seq))  # type: ignore[no-any-return]

    def events(self) -> list[dict[str, Any]]:
        """Every running host's newest events, oldest first; each names its host."""
        live = [a for a in self.agents if a.result is None and a.error is None]
        got = [dict(e, host=a.address) for a, evs in zip(live, self._ray.get([a.handle.events.remote() for a in live]))
               for e in evs]
        return sorted(got, key=lambda e: e.get("at", 0.0))

    def file(self, host: str, path: str, span: Span = None) -> FilePart | None:
        """An event's snapshot or clip (``span`` of it: ``HostAgent.file``) from the running host agent at
        ``host`` that raised it (None: no such agent, or no event of its names ``path``)."""
        for a in self.agents:
            if a.address == host and a.result is None and a.error is None:
                try:
                    got = self._ray.get(a.handle.file.remote(path, span))
                except Exception:  # noqa: BLE001, S112 - an agent going away: it has no file to give
                    continue
                if got is not None:
                    return got  # type: ignore[no-any-return]
        return None

    def _wait(self) -> None:
        ray = self._ray
        told_stop = told_now = False
        known = {h.host_id for h in hosts_of(ray)}
        looked = time.monotonic()
        keep = bool(self.spec.templates())  # streams come at run time: it runs until stopped
        while any(a.result is None and a.error is None for a in self.agents) or (keep and not self._stop):
            if self.rebalance and not self._stop and time.monotonic() - looked > 1.0:
                looked = time.monotonic()
                known = self._joined(known)
            if (self._stop and not told_stop) or (self._now and not told_now):
                told_stop, told_now = True, self._now
                self.phase = "stopping"
                self._save()
                for a in self.agents:
                    if a.result is None and a.error is None:
                        a.handle.stop.remote(now=self._now)
            live = [a for a in self.agents if a.result is None and a.error is None]
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
                            self._move(a)
                except Exception as e:  # noqa: BLE001 - an agent or its host is gone
                    ended = True
                    self._lost(a, e)
            self._seen.append((time.monotonic(), self.per_stream()))
            while self._seen[-1][0] - self._seen[0][0] > 3.0:
                self._seen.popleft()
            if any(o["resumed_after_s"] is None for o in self.outages):
                self._resumed()
            if ended or time.monotonic() - self._saved > 1.0:
                self._save()

    def _joined(self, known: set[str]) -> set[str]:
        """``--rebalance``: when a host joins, the host running the most streams drains and its streams are
        placed again over every host (the new one included), each resuming after its last frame."""
        now = {h.host_id for h in hosts_of(self._ray)}
        if now - known:
            live = [a for a in self.agents if a.result is None and a.error is None and not a.moving]
            busiest = max(live, key=lambda a: len(a.sources), default=None)
            if busiest is not None and len(busiest.sources) > 1:
                log.info("host joined: host %s drains streams %s to share them", busiest.address,
                         ", ".join(map(self.named, busiest.sources)))
                busiest.moving = True
                busiest.handle.stop.remote(now=False)
        return now

    def _move(self, a: AgentRecord) -> None:
        """A host drained for a rebalance: its streams go where placement puts them now, each after the frames
        it finished (an exact account: nothing was in flight)."""
        self._ray.kill(a.handle, no_restart=True)  # what it reserved is free for the streams' new places
        done = (a.result or {}).get("streams") or {}  # by stream
        with self._placing:  # (its new agents start from the graph as a change of configs left it)
            self._replace(a, {s: a.start.get(s, 0) + done.get(self.named(s), 0) for s in a.sources},
                          why="rebalance")

    def _lost(self, a: AgentRecord, err: BaseException) -> None:
        """A host (or its agent) is gone: its streams resume on the hosts left, each after the frames it had
        accounted or written (frames it had in flight run again there; what it had done stays in the
        account)."""
        with self._placing:  # (a stream of it added again meanwhile by a user would run twice)
            self._lose(a, err)

    def _lose(self, a: AgentRecord, err: BaseException) -> None:
        a.lost = True
        if a.handle is not None:
            try:  # an agent that no longer answers stops holding its streams and resources
                self._ray.kill(a.handle, no_restart=True)
            except Exception:  # noqa: BLE001, S110 - already gone with its host
                pass
        held = {s: self.named(s) for s in a.sources + a.added}  # source -> its stream
        a.error = f"host {a.address} (streams {', '.join(held.values())}) lost: {type(err).__name__}"
        accounted = dict(a.progress.get("streams", {}))  # by stream
        start = {s: a.start.get(s, 0) + accounted.get(stream, 0) for s, stream in held.items()}
        kept = {k: a.progress.get(k, 0) for k in ("out", "dropped", "failed")}
        # results it wrote after its last report, where the controller can read them (shared storage): those
        # frames are done (out), and their streams resume after them, so no result is written twice
        last_written = written(self.spec, list(held.values()))
        for s, stream in held.items():
            extra = last_written.get(stream, -1) + 1 - start[s]
            if extra > 0:
                start[s] += extra
                kept["out"] += extra
                accounted[stream] = accounted.get(stream, 0) + extra
        a.progress = dict(kept, **{"in": sum(kept.values()), "streams": accounted})
        log.warning("%s after %d frames accounted there", a.error, sum(accounted.values()))
        rates = self.rates()
        for src in self.spec.sources():
            if src.id in a.sources and src.contract.live:
                self.outages.append({"stream": src.stream, "host": a.address,
                                     "last_seen": a.seen if a.seen is not None else time.time(),
                                     "fps": round(rates.get(src.stream, 0.0), 2), "resumed_after_s": None,
                                     "frames_lost": None, "resumed_at_frame": start[src.id],
                                     "generation": a.generation})
        if a.sources:
            self._replace(a, start, why="lost", without=a.host_id)
        for s in (s for s in a.added if s not in a.removed):  # placed again as it was added, after its last frame
            t0, noticed = time.perf_counter(), time.time()
            recipe = a.recipes.get(s, {})
            moved: dict[str, Any] = {"host": a.address, "streams": [s], "resume_at": {s: start[s]}, "why": "lost",
                                     "added": True, "noticed_at": round(noticed, 3), "replaced_in_s": None}
            try:
                self.add_stream(s, recipe.get("like"), recipe.get("config"), start=start[s],
                                generation=a.generation + 1, without=a.host_id)
                moved["replaced_in_s"] = round(time.perf_counter() - t0, 3)
            except Exception as e:  # noqa: BLE001 - the others go on
                log.error("host %s: stream %s added at run time not placed again: %s", a.address, s, e)
                moved["error"] = f"{type(e).__name__}: {e}"
            self.replacements.append(moved)

    def _resumed(self) -> None:
        """Live streams of a lost host that send frames again on their new host: the outage is over; what
        the camera sent meanwhile was never read (reported: its time, and its frames at the rate before)."""
        now = time.time()
        for o in self.outages:
            if o["resumed_after_s"] is not None:
                continue
            later = [a for a in self.agents if a.generation > o["generation"]
                     and o["stream"] in map(self.named, a.sources)]
            if any(((a.result or {}).get("streams") or a.progress.get("streams") or {}).get(o["stream"], 0)
                   for a in later):
                o["resumed_after_s"] = round(now - o["last_seen"], 2)
                o["frames_lost"] = round(o["resumed_after_s"] * o["fps"])
                log.warning("stream %s: %.1f s without frames while host %s was lost (about %d frames at %.1f fps "
                            "never read)", o["stream"], o["resumed_after_s"], o["host"], o["frames_lost"], o["fps"])

    def rates(self) -> dict[str, float]:
        """Frames per second per stream over the last few seconds."""
        if len(self._seen) < 2:
            return {}
        (t0, first), (t1, last) = self._seen[0], self._seen[-1]
        return {s: (n - first.get(s, 0)) / max(t1 - t0, 1e-6) for s, n in last.items()}

    def _replace(self, a: AgentRecord, start: dict[str, int], why: str, without: str | None = None) -> None:
        """Places ``a``'s streams again over the live hosts (less ``without``), with what the other live
        agents hold taken, and starts them there from ``start``."""
        t0, noticed = time.perf_counter(), time.time()
        if self._stop:
            log.error("host %s: the run is stopping: streams %s not placed again", a.address,
                      ", ".join(map(self.named, a.sources)))
            return
        hosts = {h.host_id: h for h in hosts_of(self._ray) if h.host_id != without}
        needs = {n.stream: n for n in self.needs()}
        for other in self.agents:  # what live agents hold is not free
            if other is not a and other.result is None and other.error is None and other.host_id in hosts:
                for s in other.sources:
                    hosts[other.host_id].take(needs[s])
        try:
            where = place([needs[s] for s in a.sources], list(hosts.values()))
        except PlacementError as e:
            log.error("host %s: %s", a.address, e)
            self.error = f"{a.error}; {e}" if a.error else str(e)
            return
        log.info("streams %s of host %s resume on %s", ", ".join(map(self.named, a.sources)), a.address,
                 ", ".join(sorted({hosts[h].name for h in where.values()})))
        self._start(where, start, a.generation + 1)
        self.replacements.append({"host": a.address, "streams": [self.named(s) for s in a.sources],
                                  "resume_at": {self.named(s): n for s, n in start.items()}, "why": why,
                                  "noticed_at": round(noticed, 3), "replaced_in_s": round(time.perf_counter() - t0, 3)})

    def snapshot(self) -> dict[str, int]:
        out = {"in": 0, "out": 0, "dropped": 0, "failed": 0}
        for a in self.agents:
            counts = (a.result or {}).get("frames") or a.progress
            for k in out:
                out[k] += counts.get(k, 0)
        return out

    def per_stream(self) -> dict[str, int]:
        """Frames accounted per stream so far, over every host that ran it."""
        out: dict[str, int] = {}
        for a in self.agents:
            for s, n in ((a.result or {}).get("streams") or a.progress.get("streams") or {}).items():
                out[s] = out.get(s, 0) + n
        return out

    def status(self) -> dict[str, Any]:
        """What ``flowpipe status --cluster`` shows: the run's hosts, their devices, streams and rates."""
        rates = self.rates()
        hosts = {h.host_id: h for h in hosts_of(self._ray)} if hasattr(self, "_ray") else {}
        where: dict[str, str] = {}
        rows = []
        for a in self.agents:
            live = a.result is None and a.error is None
            for s in a.sources + a.added:
                if live or s not in where:
                    where[s] = a.address
            held = [self.named(s) for s in a.sources] + a.added
            h = hosts.get(a.host_id)
            rows.append({"address": a.address, "host": a.info.get("host"), "pid": a.info.get("pid"),
                         "state": "running" if live else ("lost" if a.lost else "done"),
                         "processes": a.info.get("processes"), "generation": a.generation,
                         "devices": {k: v for k, v in (h.resources if h else {}).items()},
                         "metrics": a.info.get("metrics"), "streams": held,
                         "frames": (a.result or {}).get("frames") or a.progress,
                         "fps": round(sum(rates.get(s, 0.0) for s in held), 1) if live else 0.0})
        counts = self.per_stream()  # by stream, as records name them (a source's ``stream``, else its id)
        streams = {s.stream: {"host": where.get(s.id), "frames": counts.get(s.stream, 0),
                              "fps": round(rates.get(s.stream, 0.0), 1)} for s in self.spec.sources()}
        return {"name": self.name, "phase": self.phase, "elapsed_s": round(time.time() - self.started_at, 1),
                "frames": self.snapshot(), "hosts": rows, "streams": streams, "replacements": self.replacements,
                "outages": self.outages, "retuned": {k: dict(v) for k, v in self.retuned.items()},
                "error": self.error}


class ClusterResult(RunSummary):
    """What a run over several hosts did, in the shape of ``RunResult`` (``to_json`` adds ``hosts``)."""

    def __init__(self, run: ClusterRun, elapsed: float):
        done = [(i, a.result) for i, a in enumerate(run.agents) if a.result is not None]
        self.frames = run.snapshot()
        lost = self.frames["in"] - self.frames["out"] - self.frames["dropped"] - self.frames["failed"]
        self.frames["failed"] += max(0, lost)  # frames in flight on hosts that were lost
        self.per_stream = run.per_stream()
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


__all__ = ["NAMESPACE", "ClusterResult", "ClusterRun", "connect", "drop_state", "hosts_of", "load_state", "written"]

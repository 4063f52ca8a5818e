"""What a cluster run's controller holds, shared by its parts (``ClusterRun``, ``Fleet``, ``HostStreams``,
``Report``), and kept in the cluster's own key-value store, from which a controller restarted by Ray takes the
run over: its host agents, what happened to its hosts, the changes of configs made while it runs.
"""
from __future__ import annotations

import logging
import os
import pickle
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any

from ..graph import GraphSpec
from .placement import Host, StreamNeed

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


def hosts_of(ray: Any) -> list[Host]:
    out = []
    for n in ray.nodes():
        if not n.get("Alive"):
            continue
        res = {k: float(v) for k, v in n["Resources"].items() if k not in RESERVED and not k.startswith("node:")}
        labels = {k: str(v) for k, v in (n.get("Labels") or {}).items() if not k.startswith("ray.io/")}
        out.append(Host(n["NodeID"], res, labels, f"{n.get('NodeManagerAddress', '')} ({n['NodeID'][:8]})"))
    return out


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

    @property
    def running(self) -> bool:
        """Its part of the run goes on: it has no result, and was not lost."""
        return self.result is None and self.error is None

    def holds(self, stream: str) -> bool:
        """It runs ``stream`` (one of the graph's, or one added to it and not being removed)."""
        return stream in self.sources or (stream in self.added and stream not in self.removed)


#: the fields of ``RunState`` a controller keeps in the cluster's store, and takes back when it restarts
KEPT = ("agents", "replacements", "outages", "error", "interrupted", "stop", "now", "started_at", "retuned")


class RunState:
    """A cluster run as its controller's parts share it: the graph its agents start from, its agents and
    what happened to its hosts, its phase and the stop asked for; ``save`` keeps it in the cluster."""

    def __init__(self, spec: GraphSpec, name: str, detached: bool, max_frames: int | None):
        self.spec, self.name, self.max_frames = spec, name, max_frames
        self.detached = detached  # agents outlive this process; the run's state is kept in the cluster
        self.payload = pickle.dumps(spec)  # the graph as agents get it
        self.ray: Any = None  # Ray, once the run has connected
        self.phase = "placing"  # placing, running, stopping, finished
        self.started_at = time.time()
        self.agents: list[AgentRecord] = []
        self.replacements: list[dict[str, Any]] = []  # host losses and where their streams went
        self.outages: list[dict[str, Any]] = []  # live streams of lost hosts: from last seen to resumed
        self.retuned: dict[str, dict[str, Any]] = {}  # node -> fields changed while it runs (kept, as agents)
        self.error: str | None = None
        self.interrupted = False
        self.stop = False
        self.now = False  # stop at once, not after the frames in flight
        self.placing = threading.RLock()  # streams added (the API's threads) and placed again (a host lost)
        self.saved_at = 0.0

    def running(self) -> list[AgentRecord]:
        """The agents whose part of the run goes on."""
        return [a for a in self.agents if a.running]

    def named(self, source: str) -> str:
        """The stream source node ``source`` emits, by which agents count frames and streams resume (a stream
        added at run time is named as itself)."""
        return next((s.stream for s in self.spec.sources() if s.id == source), source)

    def needs(self) -> list[StreamNeed]:
        """What each of the graph's streams needs of a host."""
        keys = self.spec.cluster
        per = dict(keys.per_stream) if keys else {"CPU": 1.0}
        labels = dict(keys.labels) if keys else {}
        return [StreamNeed(s.id, per, labels, s.stream) for s in self.spec.sources()]

    def added_need(self, stream: str) -> StreamNeed:
        """What a stream added at run time needs of a host (what each of the graph's streams needs)."""
        keys = self.spec.cluster
        return StreamNeed(stream, dict(keys.per_stream) if keys else {"CPU": 1.0}, dict(keys.labels) if keys else {})

    def configure(self, configs: dict[str, Any]) -> None:
        """The graph host agents start from, with ``configs`` (node id -> config) in place."""
        self.spec.configure(configs)
        self.payload = pickle.dumps(self.spec)

    def save(self, result: Any = None) -> None:
        """The run's state in the cluster's key-value store, for a controller that takes the run over (and,
        once it ended, its ``result``, which waits there for its client)."""
        if not self.detached:
            return
        self.saved_at = time.monotonic()
        kept = {k: getattr(self, k) for k in KEPT}
        kept["agents"] = [replace(a, handle=None) for a in self.agents]
        save_state(self.name, dict(kept, result=result))

    def take_back(self, kept: dict[str, Any]) -> None:
        """What a controller before this one kept (``save``)."""
        for k in KEPT:
            setattr(self, k, kept[k] if k != "retuned" else kept.get(k, {}))

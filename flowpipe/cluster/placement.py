"""Where each stream runs: streams placed on hosts by the resources they need and the labels they ask for.

Resources are Ray's: ``CPU``, ``GPU`` and custom ones a host declares when it joins (``ray start
--resources='{"intel_npu": 1, "intel_gpu": 1}'``); a share such as ``{"intel_npu": 0.25}`` puts four
streams on one NPU. Labels (``{"npu_generation": "lnl"}``) are exact matches on what a host declares.
Placement spreads: each stream goes to the host with the most of its scarcest needed resource left, so a
new host gets the next streams and a lost host's streams spread over the rest. Pure functions, no Ray:
the controller and the control-plane simulation (``benchmarks/cluster_sim.py``) both use them.
"""
from __future__ import annotations

from dataclasses import dataclass, field


class PlacementError(ValueError):
    """A stream fits on no host: one line naming what it needs and what the cluster has."""


@dataclass(frozen=True)
class StreamNeed:
    stream: str  # what placement answers by: the source node's id
    resources: dict[str, float] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    name: str = ""  # for messages: the stream as its records name it (the source's ``stream``), else ``stream``


@dataclass
class Host:
    host_id: str
    resources: dict[str, float]  # what it declared
    labels: dict[str, str] = field(default_factory=dict)
    name: str = ""  # for messages: its address

    def __post_init__(self) -> None:
        self.free = dict(self.resources)

    def fits(self, need: StreamNeed) -> bool:
        return all(self.labels.get(k) == v for k, v in need.labels.items()) and all(
            self.free.get(r, 0.0) + 1e-9 >= amount for r, amount in need.resources.items())

    def take(self, need: StreamNeed) -> None:
        for r, amount in need.resources.items():
            self.free[r] = self.free.get(r, 0.0) - amount

    def give(self, need: StreamNeed) -> None:
        for r, amount in need.resources.items():
            self.free[r] = min(self.resources.get(r, 0.0), self.free.get(r, 0.0) + amount)

    def headroom(self, need: StreamNeed) -> float:
        """The share left of the scarcest resource the stream needs (1: untouched)."""
        shares = [self.free.get(r, 0.0) / self.resources[r] for r in need.resources if self.resources.get(r)]
        return min(shares) if shares else 1.0


def _describe(resources: dict[str, float], labels: dict[str, str]) -> str:
    parts = [f"{k}: {round(v, 3):g}" for k, v in sorted(resources.items())]
    parts += [f"{k}={v}" for k, v in sorted(labels.items())]
    return "{" + ", ".join(parts) + "}"


def _free(hosts: list[Host], need: StreamNeed) -> str:
    """What the cluster has for ``need``: each host for a few hosts, else the most any one host has left."""
    if not hosts:
        return "no hosts"
    if len(hosts) <= 4:
        return "; ".join(f"{h.name or h.host_id[:8]} {_describe(h.free, h.labels)}" for h in hosts)
    labelled = [h for h in hosts if all(h.labels.get(k) == v for k, v in need.labels.items())]
    most = {r: max((h.free.get(r, 0.0) for h in labelled), default=0.0) for r in need.resources}
    where = f"{len(labelled)} of {len(hosts)} hosts" + (f" with {_describe({}, need.labels)}" if need.labels else "")
    return f"{where}, the most left on one of them {_describe(most, {})}"


def place(needs: list[StreamNeed], hosts: list[Host]) -> dict[str, str]:
    """stream -> host_id for every stream in ``needs``, taking from the hosts' ``free`` resources (the caller
    gives hosts with what is already taken subtracted). Raises ``PlacementError`` for the first stream that
    fits nowhere."""
    out: dict[str, str] = {}
    having: dict[frozenset[str], list[Host]] = {}  # the hosts that declare every resource a stream names
    for need in needs:
        key = frozenset(need.resources)
        if key not in having:
            having[key] = [h for h in hosts if all(h.resources.get(r, 0.0) > 0 for r in key)]
        best: Host | None = None
        best_room = -1.0
        for h in having[key]:
            if h.fits(need):
                room = h.headroom(need)
                if room > best_room:
                    best, best_room = h, room
        if best is None:
            raise PlacementError(f"stream '{need.name or need.stream}' needs {_describe(need.resources, need.labels)} "
                                 f"and fits on no host; free in the cluster: {_free(hosts, need)}")
        best.take(need)
        out[need.stream] = best.host_id
    return out

"""What a run counts: each node's figures, and the summary every executor returns (``--stats``)."""
from __future__ import annotations

import threading
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np


class HighWater(Protocol):
    """A node's inbox, as its figures read it."""

    @property
    def high_water(self) -> int: ...


def frame_list(frames: Iterable[tuple[str, int]]) -> str:
    """``cam-a 4-7,9, cam-b 4`` : frames (stream, index), per stream, runs of indices as ranges."""
    by: dict[str, list[int]] = {}
    for stream, index in frames:
        by.setdefault(stream, []).append(index)
    out = []
    for stream, idx in by.items():
        idx.sort()
        runs: list[list[int]] = []
        for i in idx:
            if runs and i == runs[-1][1] + 1:
                runs[-1][1] = i
            else:
                runs.append([i, i])
        out.append(f"{stream} " + ",".join(f"{a}-{b}" if b > a else str(a) for a, b in runs))
    return ", ".join(out)


class Window:
    """The last ``size`` values of a series, in a buffer made once: the memory a node's figures take is the
    same after a minute and after a month (a deque of Python floats grew by ~32 bytes a frame per node, in
    every process, until it held 100,000)."""

    __slots__ = ("_buf", "_n", "size")

    def __init__(self, size: int = 8192):
        self.size = size
        self._buf = array("d", bytes(8 * size))
        self._n = 0

    def append(self, value: float) -> None:
        self._buf[self._n % self.size] = value
        self._n += 1

    def values(self) -> np.ndarray:
        """The values kept (at most ``size``, the newest), in no particular order."""
        return np.frombuffer(self._buf, np.float64, min(self._n, self.size)).copy()

    def __len__(self) -> int:
        return min(self._n, self.size)


@dataclass
class NodeStats:
    type: str
    frames: int = 0
    dropped: int = 0
    failed: int = 0
    restarts: int = 0
    busy_s: float = 0.0  # wall time in the node (waits on devices and full queues included)
    cpu_s: float = 0.0  # CPU time of the node's own thread in it: the stage's cost, without the waits
    first: float | None = None
    last: float | None = None
    latency: Window = field(default_factory=Window)  # seconds per frame, the last 8192 frames
    extra: dict[str, Any] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def summary(self, channel: HighWater | None) -> dict[str, Any]:
        lat = self.latency.values() * 1e3
        span = (self.last - self.first) if self.first is not None and self.last is not None else 0.0
        out: dict[str, Any] = {
            "type": self.type, "frames": self.frames, "dropped": self.dropped, "failed": self.failed,
            "restarts": self.restarts,
            "fps": round(self.frames / span, 2) if span > 0 else None,
            "busy_s": round(self.busy_s, 4),
            "cpu_ms_per_frame": round(1e3 * self.cpu_s / self.frames, 3) if self.frames else None,
            "latency_ms": {f"p{q}": round(float(np.percentile(lat, q)), 4) if lat.size else None
                           for q in (50, 95, 99)},
            "queue_max": channel.high_water if channel else 0,
        }
        out.update(self.extra)
        return out


class RunSummary:
    """What a run did, as ``--stats`` shows it: filled by ``RunResult`` (one process) and ``ShardedResult``."""

    frames: dict[str, int]
    per_stream: dict[str, int]
    nodes: dict[str, Any]
    edges: dict[str, dict[str, Any]]
    contracts: dict[str, Any]
    inference: dict[str, Any]
    elapsed_s: float
    done_times: list[Any]  # with ``record_times``: when each frame got its fate (benchmarks)
    exit_code: int
    error: BaseException | None

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def to_json(self) -> dict[str, Any]:
        out = {"frames": self.frames, "streams": self.per_stream, "nodes": self.nodes, "edges": self.edges,
               "memory_contracts": self.contracts, "elapsed_s": round(self.elapsed_s, 4), "exit": self.exit_code,
               "error": str(self.error) if self.error else None, **self._more_json()}
        out.update(self.inference)
        return out

    def _more_json(self) -> dict[str, Any]:
        return {}


def merge_nodes(results: list[tuple[int | str, dict[str, Any]]]) -> dict[str, Any]:
    """Per node: counts and busy time summed over the shards that ran it; each shard's block kept."""
    merged: dict[str, Any] = {}
    cpu_ms: dict[str, float] = {}  # CPU ms summed over the frames of every shard, per node
    for index, res in results:
        for nid, st in res["nodes"].items():
            m = merged.setdefault(nid, {"type": st.get("type"), "frames": 0, "dropped": 0, "failed": 0,
                                        "busy_s": 0.0, "queue_max": 0, "shards": {}})
            for k in ("frames", "dropped", "failed"):
                m[k] += st.get(k) or 0
            m["busy_s"] = round(m["busy_s"] + (st.get("busy_s") or 0.0), 4)
            cpu_ms[nid] = cpu_ms.get(nid, 0.0) + (st.get("cpu_ms_per_frame") or 0.0) * (st.get("frames") or 0)
            m["cpu_ms_per_frame"] = round(cpu_ms[nid] / m["frames"], 3) if m["frames"] else None
            m["queue_max"] = max(m["queue_max"], st.get("queue_max") or 0)
            m["shards"][str(index)] = st
    return merged

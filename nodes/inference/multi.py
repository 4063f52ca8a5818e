"""Several devices used together (``device: GPU+CPU``): one ``Engine`` per device, each with its own compiled
model and pool of requests, each frame on the device its ``Split`` deals it to, results in frame order.

Which device runs a frame is a function of the frame's stream and its index (``split``, ``split_by``), never of
which device is free first: devices' numerics differ (a GPU runs
in f16), so routing by load would make a frame's boxes depend on how busy the machine was. The price is that a
device given more than its speed's share makes the other wait: ``flowpipe bench`` says which shares match the
devices' speeds. Every device's requests are recycled as soon as its own frames finish, so a slower device's
frame at the head does not stop the faster one; finished frames wait here until every frame submitted before
them is done. How many frames may be here at once (``window``) bounds how far the faster device runs ahead."""
from __future__ import annotations

import hashlib
import math
import threading
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from flowpipe.accel.openvino import DeviceChoice, OpenVino
from flowpipe.contracts import Allocation, Offer
from flowpipe.errors import FrameError
from flowpipe.frame import Frame
from flowpipe.memory import Slot

from .batching import Entries
from .config import InferenceConfig
from .engine import Engine


@dataclass(eq=False)
class _Group:
    """Frames submitted together (or one frame that runs no request), in the order they came."""

    frames: list[Frame]
    left: int  # frames not back from their device yet (finished or failed)
    engine: Engine | None = None  # the device that runs them; None: they ran none
    out: list[Frame] = field(default_factory=list)  # the ones that finished


GOLDEN = (5 ** 0.5 - 1) / 2  # a stream's frames dealt along i * GOLDEN (mod 1): spread evenly, whatever runs


class Split:
    """Which of the devices runs a frame: a function of its stream and its index, nothing else (not of how many
    frames came before it: a frame a live source dropped, one that failed upstream, or a process restarted
    mid-stream moves no other frame). ``by="frame"``: frame ``i`` of a stream goes where ``phase + i * GOLDEN``
    (mod 1) falls among the shares laid end to end, the phase a hash of the stream's name, so that streams in
    step keep every device busy. The points spread evenly over any run of frames, every frame or every k-th (an
    interval's), and each device gets its share. ``by="stream"``: each stream on one device, the one of highest
    weighted rendezvous score for its name (a stream keeps its device whatever other streams come and go)."""

    def __init__(self, shares: list[int], by: str = "frame"):
        if not shares or min(shares) < 1:
            raise ValueError(f"expected a share >= 1 for each device, got {shares}")
        self.shares, self.by = shares, by
        total = sum(shares)
        self._bounds = [sum(shares[:k + 1]) / total for k in range(len(shares))]
        self._homes: dict[str, int] = {}  # by="stream": each stream's device, once worked out

    def device(self, stream: str, index: int) -> int:
        """The device (index into the shares) that runs frame ``index`` of ``stream``."""
        if self.by == "stream":
            return self.home(stream)
        u = (zlib.crc32(stream.encode()) / 2.0**32 + index * GOLDEN) % 1.0
        return next((k for k, b in enumerate(self._bounds) if u < b), len(self.shares) - 1)

    def home(self, stream: str) -> int:
        """``by="stream"``: the device of highest score -share / ln(u), u uniform in (0, 1) from a hash of the
        stream's name and the device's place (the first listed on a tie)."""
        if stream not in self._homes:
            def score(i: int) -> float:
                h = int.from_bytes(hashlib.blake2b(f"{i}:{stream}".encode(), digest_size=8).digest(), "big")
                return -self.shares[i] / math.log((h + 0.5) / 2.0**64)
            self._homes[stream] = max(range(len(self.shares)), key=lambda i: (score(i), -i))
        return self._homes[stream]


class MultiEngine:
    """One node's model on several devices at once, with ``Engine``'s interface for the node. ``engines``
    in the order the config lists their devices; ``section`` is the node's ``--stats`` block, with each
    device's own block (and its frames and share of them) under ``devices``."""

    def __init__(self, node_id: str, config: InferenceConfig, choices: list[DeviceChoice], wake: Callable[[], None],
                 label: Callable[[Frame, str], None], t_open: float):
        if len(choices) < 2:
            raise ValueError("MultiEngine runs on several devices; one device is an Engine")
        self.node_id, self.config, self.wake = node_id, config, wake
        self.device = "+".join(ch.device for ch in choices)
        self.reason = choices[0].reason
        self.batch = 1
        self.engines = [Engine(node_id, config, ch, self._changed_now, _labeller(label, ch.device), t_open)
                        for ch in choices]
        self.entries = Entries()
        self.edge: str | None = None
        self.window = 0  # frames here at most (running, or finished and waiting for an older one)
        self.section: dict[str, Any] = {}
        self._changed = threading.Event()  # a request of some device finished (or failed)
        self._groups: deque[_Group] = deque()  # in submission order
        self._group_of: dict[int, _Group] = {}  # a frame on a device -> its group
        self._errors: deque[FrameError] = deque()
        self._into: dict[int, list[np.ndarray]] = {}  # a client's own memory for a frame's results
        self._current: Engine | None = None  # the device whose request is being bound (during submit)
        self.split = Split([config.split.get(ch.device, 1) for ch in choices], config.split_by)

    # loading ----------------------------------------------------------------------------------------
    def load(self, ov_owner: OpenVino, offer: Offer, alloc: Allocation, entries: Entries, edge: str | None,
             frames_in_flight: int) -> None:
        """Each device's model compiled with its own config (``build_config`` per device), and output pools
        with room for every frame the window lets wait here."""
        if self.config.batch > 1:
            raise ValueError(f"batch: device {self.device} deals each frame to one device; "
                             f"expected batch: 1, got {self.config.batch}")
        self.edge = edge
        for i, e in enumerate(self.engines):
            # entries per device: a bounded-dynamic batch on CPU and GPU, static on the NPU
            e.load(ov_owner, offer, alloc, Entries.of(offer, 1, e.device, alloc.placement), edge, frames_in_flight)
            if e.stateful:
                raise ValueError(f"a stateful model keeps its state in one request on one device; expected one "
                                 f"device, got {self.device}")
            if i == 0:
                self.entries = e.entries
        total = len(self.requests)
        # the faster device runs ahead of a slower one's oldest frame by up to as many frames again
        self.window = 2 * total
        for e in self.engines:
            e.hold_outputs(self.window)
        names = _names([e.device for e in self.engines])
        first = self.engines[0].section
        self.section = {"device": self.device, "device_reason": self.reason, "requests": total,
                        "window": self.window,
                        "split": {"by": self.split.by, "shares": dict(zip(names, self.split.shares))},
                        "input": first["input"], "input_memory": first["input_memory"],
                        "stateful": False, "input_binding": None,
                        "devices": {name: e.section for name, e in zip(names, self.engines)}}
        for e in self.engines:
            e.section.update(frames=0, share=0.0)
        if entries.up_to:
            self.section["entries"] = entries.describe()

    def warm(self) -> None:
        for e in self.engines:
            e.warm()

    @property
    def requests(self) -> list[Any]:
        """Every device's requests, device after device."""
        return [r for e in self.engines for r in e.requests]

    @requests.setter
    def requests(self, value: list[Any]) -> None:
        at = 0
        for e in self.engines:
            n = len(e.requests)
            e.requests, at = value[at:at + n], at + n

    @property
    def stateful(self) -> bool:
        return False  # refused at load

    # what a client in another process needs -------------------------------------------------------------
    def output_specs(self) -> list[tuple[str, tuple[int, ...], str]]:
        return self.engines[0].output_specs()  # one model: the same outputs on every device

    def frames_at_once(self) -> int:
        """Every device's requests, and the finished frames that wait for an older one on a slower device."""
        return self.window

    def provide(self, frame: Frame, arrays: list[np.ndarray]) -> None:
        """Kept until ``frame`` is submitted: then the device that runs it gets them."""
        self._into[id(frame)] = arrays

    def release(self, frame: Frame) -> None:
        self._into.pop(id(frame), None)

    # binding: the device whose request is being started ----------------------------------------------
    def bind_input(self, req: Any, frame: Frame) -> str:
        e = self._binding()
        how = e.section["input_binding"] = e.bind_input(req, frame)
        return how

    def bind_outputs(self, req: Any, frames: list[Frame], slots: list[Slot] | None = None) -> None:
        self._binding().bind_outputs(req, frames, slots)

    def _binding(self) -> Engine:
        assert self._current is not None, "bound outside submit"
        return self._current

    # running ----------------------------------------------------------------------------------------
    def submit(self, frames: list[Frame], bind: Callable[[Any], None]) -> list[Frame]:
        """Starts a request for ``frames`` on the device the split deals them to; while that device has no
        request idle (or the window is full), waits until some device's request finishes. Returns frames that
        came out meanwhile."""
        ready: list[Frame] = []
        e = self.engines[self.split.device(frames[0].stream, frames[0].index)]
        while True:
            self._changed.clear()  # before looking: a request finishing after this wakes the wait below
            ready += self.collect()
            if e.free and len(self._groups) < self.window:
                break
            self._changed.wait()
        into = self._into.pop(id(frames[0]), None)
        if into is not None:
            e.provide(frames[0], into)
        group = _Group(list(frames), len(frames), e)
        self._groups.append(group)
        for f in frames:
            self._group_of[id(f)] = group
        self._current = e
        try:
            self._took(e, e.submit(frames, bind))  # a free request: starts at once (or fails these frames)
        finally:
            self._current = None
        return ready + self.collect()

    def run_inline(self, frame: Frame, bind: Callable[[Any], None]) -> list[Frame]:
        """``requests: inline``: on the device the split deals the frame to, in the calling thread."""
        into = self._into.pop(id(frame), None)
        e = self.engines[self.split.device(frame.stream, frame.index)]
        if into is not None:
            e.provide(frame, into)
        self._current = e
        try:
            done = e.run_inline(frame, bind)
        finally:
            self._current = None
        self._count(e, len(done))
        return done

    def pass_through(self, frame: Frame) -> None:
        """A frame that runs no request goes on in its turn, after the frames submitted before it."""
        self.release(frame)
        self._groups.append(_Group([frame], 0, None, [frame]))

    def collect(self) -> list[Frame]:
        """Every device's finished frames taken (recycling its requests), then the frames whose turn has
        come, in submission order (never raises)."""
        for e in self.engines:
            self._took(e, e.collect())
        out: list[Frame] = []
        while self._groups and self._groups[0].left == 0:
            out += self._groups.popleft().out
        return out

    def drain(self) -> list[Frame]:
        """Every frame here, once its request is done."""
        out = []
        while self._groups:
            out += self.collect()
            self.wait_head()
        return out

    def wait_head(self) -> None:
        """Until the oldest frame's request is done (it is its device's oldest: every older one came out)."""
        if self._groups and self._groups[0].left and self._groups[0].engine is not None:
            self._groups[0].engine.wait_head()

    def _took(self, e: Engine, frames: list[Frame]) -> None:
        """Frames back from device ``e``, and its failed requests: their groups one step nearer done."""
        for f in frames:
            g = self._group_of.pop(id(f))
            g.out.append(f)
            g.left -= 1
        if frames:
            self._count(e, len(frames))
        while (err := e.next_error()) is not None:
            for f in err.frames:
                failed = self._group_of.pop(id(f), None)
                if failed is not None:
                    failed.left -= 1
            self._errors.append(err)

    def _count(self, e: Engine, n: int) -> None:
        """Frames per device and each device's share of them (``--stats``)."""
        e.section["frames"] = e.section.get("frames", 0) + n
        total = sum(x.section.get("frames", 0) for x in self.engines) or 1
        for x in self.engines:
            x.section["share"] = round(x.section.get("frames", 0) / total, 3)

    def next_error(self) -> FrameError | None:
        for e in self.engines:
            self._took(e, [])
        return self._errors.popleft() if self._errors else None

    @property
    def failed(self) -> bool:
        return bool(self._errors) or any(e.failed for e in self.engines)

    def _changed_now(self) -> None:
        self._changed.set()
        self.wake()

    def close(self) -> None:
        for e in self.engines:
            e.close()
        self.section["outputs_held_at_close"] = len(self._into) + sum(
            e.section.get("outputs_held_at_close", 0) for e in self.engines)


def _labeller(label: Callable[[Frame, str], None], device: str) -> Callable[[Frame], None]:
    """Labels each frame with the device that ran it."""
    return lambda frame: label(frame, device)


def _names(devices: list[str]) -> list[str]:
    """Keys of the devices' blocks in ``--stats``: the device, numbered where one is listed twice."""
    return [d if devices.count(d) == 1 else f"{d}.{devices[:i].count(d)}" for i, d in enumerate(devices)]

"""Test-only nodes: fault injection, in-place writers, lifecycle recording.

Importable by worker processes too (graphs name it under ``plugins:``)."""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from flowpipe import Frame, Node, NodeConfig, register
from flowpipe.node import PIXELS_ALL, NodeContract
from flowpipe_nodes.inference import Inference

EVENTS: list[str] = []
_lock = threading.Lock()


def record(event: str) -> None:
    with _lock:
        EVENTS.append(event)


@register("test_fault")
class Fault(Node):
    """Raises on the listed frame indices; records open/close, and in the frame the thread it ran in."""

    inputs = {"in": "any"}
    outputs = {"out": "any"}

    class Config(NodeConfig):
        fail_on: list[int] = []
        fail_open: bool = False
        delay_s: float = 0.0

    def open(self, ctx: Any) -> None:
        record(f"open:{self.id}")
        if self.config.fail_open:
            raise RuntimeError("cannot open")

    def process(self, frame: Frame, port: str) -> Frame:
        frame.meta.setdefault("threads", {})[self.id] = threading.current_thread().name
        if self.config.delay_s:
            time.sleep(self.config.delay_s)
        if frame.index in self.config.fail_on:
            raise ValueError(f"bad frame {frame.index}")
        return frame

    def close(self) -> None:
        record(f"close:{self.id}")


@register("test_inplace")
class InPlace(Node):
    """Writes its input image in place (declares it, so the engine copies on write when shared)."""

    inputs = {"in": "frame"}
    outputs = {"out": "frame"}

    @classmethod
    def contract(cls, config: NodeConfig) -> NodeContract:
        return cls.declare(writes_input=True)

    def process(self, frame: Frame, port: str) -> Frame:
        frame.data[...] = 255
        return frame


@register("test_crash")
class Crash(Node):
    """Kills its own process (SIGKILL) on the listed frames: a worker crash."""

    inputs = {"in": "any"}
    outputs = {"out": "any"}

    class Config(NodeConfig):
        crash_on: list[int] = []
        streams: list[str] | None = None  # only frames of these streams (default: all)
        after_record: str | None = None  # first wait (2 s at most) for the frame's record in this JSON Lines file

    def process(self, frame: Frame, port: str) -> Frame:
        mine = self.config.streams is None or frame.stream in self.config.streams
        if mine and frame.index in self.config.crash_on:
            if self.config.after_record is not None:
                key = f'"stream":"{frame.stream}","frame":{frame.index},'.encode()
                until = time.monotonic() + 2
                while time.monotonic() < until and key not in Path(self.config.after_record).read_bytes():
                    time.sleep(0.01)
            os.kill(os.getpid(), 9)
        frame.data[0, 0, 0] = 7  # visible to the parent: same pages
        frame.meta["pid"] = os.getpid()
        frame.meta["malloc_arena_max"] = os.environ.get("MALLOC_ARENA_MAX")  # what its process set for itself
        return frame



class _FlakyRequest:
    """An OpenVINO infer request that reports a failure when waited on if it was the n-th one started."""

    def __init__(self, req: Any, owner: Any):
        self._req, self._owner, self._fail = req, owner, False

    def start_async(self, *args: Any) -> None:
        n, self._owner.started = self._owner.started, self._owner.started + 1
        self._fail = n in self._owner.config.fail_requests
        self._req.start_async(*args)

    def wait(self) -> None:
        self._req.wait()
        if self._fail:
            raise RuntimeError("injected device failure")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._req, name)


@register("test_flaky_inference")
class FlakyInference(Inference):
    """The real inference node whose n-th started requests fail (as OpenVINO reports a device failure)."""

    class Config(Inference.Config):
        fail_requests: list[int] = []

    def open(self, ctx: Any) -> None:
        super().open(ctx)
        self.started = 0
        self.requests = [_FlakyRequest(r, self) for r in self.requests]


@register("test_streams")
class Streams(Node):
    """Spreads one source's frames over N streams (frame i goes to stream s{i % N})."""

    inputs = {"in": "any"}
    outputs = {"out": "any"}

    class Config(NodeConfig):
        streams: int = 2

    def process(self, frame: Frame, port: str) -> Frame:
        frame.stream = f"s{frame.index % self.config.streams}"
        return frame


@register("test_reopen")
class Reopen(Node):
    """A node whose instance must not be used while closed: counts frames that reach it then
    (``closed_hits``), fails the frames listed in ``fail_on`` once each."""

    inputs = {"in": "any"}
    outputs = {"out": "any"}

    @classmethod
    def contract(cls, config: NodeConfig) -> NodeContract:
        return cls.declare(one_worker=None)

    class Config(NodeConfig):
        fail_on: list[int] = []

    def __init__(self, node_id: str, config: NodeConfig | None = None):
        super().__init__(node_id, config)
        self.failed: set[int] = set()
        self.state = "new"

    def open(self, ctx: Any) -> None:
        self.stats = ctx.stats
        self.stats.setdefault("closed_hits", 0)
        time.sleep(0.02)
        self.state = "open"

    def process(self, frame: Frame, port: str) -> Frame:
        if self.state != "open":
            self.stats["closed_hits"] += 1
        time.sleep(0.002)
        if frame.index in self.config.fail_on and frame.index not in self.failed:
            self.failed.add(frame.index)
            raise RuntimeError(f"planned failure at {frame.index}")
        return frame

    def close(self) -> None:
        self.state = "closed"
        time.sleep(0.02)


@register("test_slow_restart")
class SlowRestart(Node):
    """Passes every frame on; in a process that replaces one (generation > 0) it opens ``seconds`` late."""

    inputs = {"in": "any"}
    outputs = {"out": "any"}

    class Config(NodeConfig):
        seconds: float = 3.0

    @classmethod
    def contract(cls, config: NodeConfig) -> NodeContract:
        return cls.declare(one_worker=None, forwards={"out": "in"})

    def open(self, ctx: Any) -> None:
        if ctx.generation > 0:
            time.sleep(self.config.seconds)

    def process(self, frame: Frame, port: str) -> Frame:
        return frame


@register("test_one_face")
class OneFace(Node):
    """A detector stand-in: one face per frame, where the frame's index puts it (moving right)."""

    inputs = {"frame": "frame"}
    outputs = {"detections": "detections"}

    @classmethod
    def contract(cls, config: NodeConfig) -> NodeContract:
        return cls.declare(one_worker=None)

    def process(self, frame: Frame, port: str) -> Frame:
        from flowpipe.frame import Detection

        x = float(frame.index % 40)
        frame.detections = [Detection((x, 10.0, x + 20.0, 30.0), 0.9, "face")]
        return frame


@register("test_count_faces")
class CountFaces(Node):
    """A plugin that reads only detections (it counts them): it never looks at the pixels, so it does not
    narrow the pixel format the sources decode into."""

    inputs = {"detections": "detections"}

    def process(self, frame: Frame, port: str) -> None:
        self.seen = getattr(self, "seen", 0) + len(frame.detections)


@register("test_jitter")
class Jitter(Node):
    """Takes a random time on each frame (up to ``max_s``): a stage whose pace changes from run to run, as a
    loaded machine's does. Changes nothing of the frame."""

    inputs = {"in": "any"}
    outputs = {"out": "any"}

    class Config(NodeConfig):
        max_s: float = 0.02

    @classmethod
    def contract(cls, config: NodeConfig) -> NodeContract:
        return cls.declare(pixels=PIXELS_ALL)  # never reads the pixels: the graph's formats stay as they are

    def open(self, ctx: Any) -> None:
        import random

        self.random = random.Random()  # unseeded: another pace each run

    def process(self, frame: Frame, port: str) -> Frame:
        time.sleep(self.random.uniform(0.0, self.config.max_s))
        return frame


@register("test_blind")
class Blind(Node):
    """Takes away every detection on the frames before ``until``: a detector that found nothing there (a face in
    the dark, cut by the picture's edge), on real footage whose later frames it finds."""

    inputs = {"in": "any"}
    outputs = {"out": "any"}

    class Config(NodeConfig):
        until: int = 0

    @classmethod
    def contract(cls, config: NodeConfig) -> NodeContract:
        return cls.declare(pixels=PIXELS_ALL, one_worker=None)

    def process(self, frame: Frame, port: str) -> Frame:
        if frame.index < self.config.until:
            frame.detections = []
        return frame


@register("test_blocks")
class Blocks(Node):
    """Records, for each frame, how many shared buffers its model outputs lie in (``BLOCKS``)."""

    inputs = {"tensors": "tensors"}
    outputs = {"tensors": "tensors"}

    def process(self, frame: Frame, port: str) -> Frame:
        names = [n for n in frame.tensors if n != "input"]
        bufs = {id(frame.buffer_of(frame.tensors[n])) for n in names}
        with _lock:
            BLOCKS.append((len(names), len(bufs), any(frame.buffer_of(frame.tensors[n]) is None for n in names)))
        return frame


BLOCKS: list[tuple[int, int, bool]] = []

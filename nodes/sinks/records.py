"""Records: one JSON line per frame (``jsonl``), and the per-frame record that the metadata sinks send."""
from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from flowpipe.frame import Frame
from flowpipe.node import NodeConfig, NodeContract, Resource, RunContext, Sink
from flowpipe.registry import register

log = logging.getLogger("flowpipe.metadata")


def frame_record(frame: Frame) -> dict[str, Any]:
    """The per-frame record: stream, frame, timestamp, objects (label, score, box in source pixels, track),
    and where the frame was recorded when it comes from a ``video_writer``."""
    rec: dict[str, Any] = {"stream": frame.stream, "frame": frame.index, "pts": round(frame.pts, 4),
                           "objects": [d.to_json() for d in frame.detections], "count": len(frame.detections)}
    if "classes" in frame.meta:
        rec["classes"] = frame.meta["classes"]
    if "analytics" in frame.meta:  # after an ``analytics`` node: zone counts, line totals, crossings, events
        rec["analytics"] = frame.meta["analytics"]
    if "recording" in frame.meta:  # after a video_writer: the file (segment) and the frame in it
        rec["recording"] = frame.meta["recording"]
    return rec


@register("jsonl")
class JsonLines(Sink):
    """Writes one JSON line per frame, each with one append (an interrupted run leaves whole lines; the
    shard processes of one run append to the same file, the first of them truncating it before any frame).
    A line the file cannot take (a full disk, a quota) is not left half written: the part that went in is
    cut off again, the records that could not be written are counted (``records_not_written``, and named
    in the log), and writing goes on once the file takes lines again (tried once a second).

    YAML:
        - id: meta
          type: jsonl
          config: {path: out/faces.jsonl}
          inputs: {detections: track.detections}
    """

    inputs = {"detections": "detections"}

    class Config(NodeConfig):
        path: str = Field(description="output file, or '-' for standard output")

    config: Config

    @classmethod
    def contract(cls, config: NodeConfig) -> NodeContract:
        assert isinstance(config, cls.Config)
        return cls.declare(files={"path": "records"}, resources=(Resource(f"writes {config.path}"),))

    def open(self, ctx: RunContext) -> None:
        self.fd: int | None = None
        self.fresh = False
        self.gate: _Emptied | None = None
        if self.config.path == "-":
            return
        Path(self.config.path).parent.mkdir(parents=True, exist_ok=True)
        # the first shard's first start truncates (shards open before any frame flows); a restarted shard
        # appends after the lines its streams' earlier process wrote. A process that is the whole run empties
        # the file on its first record, or at a clean end with none: a run that fails to start (another node's
        # open, a missing input) leaves the last run's records as they were, beside the recording they name.
        # Nodes of the run that write the same file empty it once, whichever has a record first.
        first = ctx.shard[0] == 0 and ctx.generation == 0
        self.fresh = first and ctx.alone
        truncate = os.O_TRUNC if first and not self.fresh else 0
        self.fd = os.open(self.config.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | truncate, 0o644)
        self.gate = _Emptied.open(self.config.path) if self.fresh else None
        self.stats = ctx.stats
        self.lost = 0  # records the file could not take
        self.lost_since: tuple[str, int] | None = None  # the first of the records being lost now
        self.retry_at = 0.0

    def write(self, frame: Frame) -> None:
        line = json.dumps(frame_record(frame), separators=(",", ":")) + "\n"
        if self.fd is None:
            sys.stdout.write(line)
            sys.stdout.flush()
            return
        if self.lost_since is not None and time.monotonic() < self.retry_at:
            self._not_written(frame)
            return
        self._begin()
        try:
            self._append(line.encode())
        except OSError as e:
            if e.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            self.retry_at = time.monotonic() + 1.0
            if self.lost_since is None:
                log.error("node '%s': %s: %s: records are not written from stream %s frame %d on; writing "
                          "goes on when the file takes lines again", self.id, self.config.path,
                          os.strerror(e.errno), frame.stream, frame.index)
                self.lost_since = (frame.stream, frame.index)
            self._not_written(frame)
            return
        if self.lost_since is not None:
            log.warning("node '%s': %s takes lines again (stream %s frame %d); %d records were not written",
                        self.id, self.config.path, frame.stream, frame.index, self.lost)
            self.lost_since = None

    def _append(self, data: bytes) -> None:
        """One whole line at the end of the file, or none of it (under the file's lock: the shards of a run
        append to the same file, and a part cut off must be this line's)."""
        assert self.fd is not None
        _lock(self.fd, True)
        try:
            append_whole(self.fd, data)
        finally:
            _lock(self.fd, False)

    def _begin(self) -> None:
        """The last run's records gone, once this run has something to say (its first record, or its end)."""
        if self.fresh:  # (fresh: opened with its file and its gate)
            assert self.fd is not None and self.gate is not None
            self.gate.empty(self.fd)
            self.fresh = False

    def flush(self) -> None:
        self._begin()

    def _not_written(self, frame: Frame) -> None:
        self.lost += 1
        self.stats["records_not_written"] = self.lost

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        gate: _Emptied | None = getattr(self, "gate", None)
        if gate is not None:
            gate.close()
            self.gate = None


class _Emptied:
    """One file's emptying at a run's first record, shared by the nodes of the process that write it while
    they are open: the first record of any of them empties it, once (a second node's first record must not
    take the lines the first one wrote)."""

    _open: ClassVar[dict[str, _Emptied]] = {}
    _guard: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, key: str):
        self.key, self.users, self.done = key, 0, False
        self.lock = threading.Lock()

    @classmethod
    def open(cls, path: str) -> _Emptied:
        key = os.path.realpath(path)
        with cls._guard:
            gate = cls._open.setdefault(key, cls(key))
            gate.users += 1
            return gate

    def empty(self, fd: int) -> None:
        with self.lock:
            if not self.done:
                os.ftruncate(fd, 0)
                self.done = True

    def close(self) -> None:
        with self._guard:
            self.users -= 1
            if self.users <= 0:
                self._open.pop(self.key, None)


def append_whole(fd: int, data: bytes) -> None:
    """``data`` at the end of the file, or none of it: a write the kernel takes in parts (a disk filling up)
    that then fails is cut off again, and its error raised."""
    end = os.fstat(fd).st_size
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view):]
    except OSError:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, end)
        raise


def _lock(fd: int, take: bool) -> None:
    """The file's advisory lock taken or given back (POSIX; elsewhere none: one process writes it)."""
    if os.name == "posix":
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX if take else fcntl.LOCK_UN)

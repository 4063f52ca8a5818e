"""``isolation: process``: a node runs in a worker process; frames cross as buffer handles.

Pixel and tensor memory is never pickled when it lives in a shared buffer: the parent sends each
buffer's fd once over a Unix socket (SCM_RIGHTS), the worker maps it, and later messages name the
buffer, offset, shape and dtype. The worker writes in place into the same pages the parent reads.
Arrays outside shared memory are pickled, and counted as copies. A worker that dies is reported as
that node's failure naming the frame it held; with ``on_error: restart`` a new worker takes over.
"""
from __future__ import annotations

import logging
import multiprocessing as mp
import os
import socket
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from .. import memory
from ..accel import devices
from ..backedge import BackEdge
from ..contracts import Allocation, InputContract
from ..errors import FrameError
from ..frame import Frame
from ..graph import NodeSpec
from ..node import Node, RunContext
from ..registry import import_plugin, lookup
from .messages import (
    ArrayRef,
    Close,
    Closed,
    FrameFailed,
    FrameHeader,
    FrameIn,
    FrameOut,
    FramesOut,
    RemoteError,
    WorkerOpenFailed,
    WorkerReady,
)
from .settings import environment_for_children, malloc_arenas_limited
from .wire import Codec, recv, send

log = logging.getLogger("flowpipe.process")


def _refs(codec: Codec, f: Frame, new_fds: dict[int, int]) -> tuple[ArrayRef | None, dict[str, ArrayRef]]:
    """``f``'s image and tensors as references (buffers this side has not sent yet: into ``new_fds``)."""
    return (codec.encode(f.data, f, new_fds) if f.data is not None else None,
            {k: codec.encode(v, f, new_fds) for k, v in f.tensors.items()})


def _encode_frame(codec: Codec, f: Frame) -> FrameHeader:
    return FrameHeader(f.stream, f.index, f.pts, f.format, f.meta, f.detections, f.layout, f.skipped,
                       *_refs(codec, f, {}))


def _decode_into(codec: Codec, h: FrameHeader, frame: Frame | None = None) -> Frame:
    data = codec.decode(h.data) if h.data is not None else None
    tensors = {k: codec.decode(v) for k, v in h.tensors.items()}
    if frame is None:
        return Frame(h.stream, h.index, h.pts, data, h.format, h.meta, tensors, h.detections, layout=h.layout,
                     skipped=h.skipped)
    frame.meta, frame.detections, frame.format, frame.layout = h.meta, h.detections, h.format, h.layout
    frame.skipped = h.skipped
    if data is not None:
        frame.data = data
    frame.tensors.update(tensors)
    return frame


# -- worker side -----------------------------------------------------------------------------------------
class OutsideContext:
    """A node's view of the run from another process than the runner's (a worker, the device owner): host
    memory, its own stats and sections, none of the run's in-memory feeds or collections."""

    where = "a worker process"

    def __init__(self, node_id: str, in_flight: int, shard: tuple[int, int] = (0, 1), streams: int = 1,
                 devices_: Any = None, generation: int = 0):
        self.node_id = node_id
        self.shard = shard
        self.alone = False  # a node in a worker process, or served by a device owner: part of a bigger run
        self.streams = streams
        self.generation = generation
        self.serves_processes = 0
        self.devices = devices_ if devices_ is not None else devices()
        self.stats: dict[str, Any] = {}
        self.sections: dict[str, dict[str, Any]] = {}
        self.edges: dict[str, BackEdge] = {}  # this process's only: no other node of the run is here
        self._in_flight = in_flight

    @property
    def stopping(self) -> bool:
        return False

    def wake(self) -> None:
        pass

    def resume_at(self, stream: str) -> int:
        return 0  # only sources resume, and they run in the runner's process

    def frames_in_flight(self) -> int:
        return self._in_flight

    def allocation(self, port: str) -> Allocation:
        return Allocation("host")

    def input(self, port: str) -> InputContract | None:
        return None

    def section(self, name: str, data: dict[str, Any]) -> None:
        self.sections[name] = data

    def feed(self, name: str) -> list[Any]:
        raise KeyError(f"in-memory feed {name!r} is not reachable from {self.where}")

    def collector(self, name: str) -> list[Frame]:
        raise KeyError(f"in-memory collection {name!r} is not reachable from {self.where}")

    def back_edge(self, name: str) -> BackEdge:
        return self.edges.setdefault(name, BackEdge(name))

    def snapshot(self) -> dict[str, Any]:
        return {}

    def provide(self, kind: str, answer: Callable[..., Any]) -> None:
        """Nobody asks here: the run's observers are in the process that runs the graph."""

    def journal(self, record: dict[str, Any]) -> None:
        """Not journaled from here, as its answers to the run's observers are not (``provide``): a node isolated
        in a process of its own raises no event a server sees."""


def _worker_main(sock: socket.socket, info: dict[str, Any]) -> None:
    malloc_arenas_limited()  # as shards and the device owner: started from Python, it inherits no MALLOC_ARENA_MAX
    for mod in info["plugins"]:
        import_plugin(mod, info["plugin_dir"])

    cls = lookup(info["type"])
    node = cls(info["id"], cls.Config.model_validate(info["config"]))
    ctx = OutsideContext(info["id"], info["in_flight"], tuple(info["shard"]), info["streams"],
                         generation=info["generation"])
    codec = Codec()
    try:
        node.open(ctx)
    except Exception as e:  # noqa: BLE001
        send(sock, WorkerOpenFailed(RemoteError.of(e)))
        return
    send(sock, WorkerReady())
    while True:
        try:
            msg, fds = recv(sock)
        except EOFError:
            break
        match msg:
            case FrameIn():
                for bid, fd in zip(msg.new_ids, fds):
                    codec.buffers[bid] = memory.SharedBuffer(os.fstat(fd).st_size, "memfd", _fd=fd)
                frame = _decode_into(codec, msg)
                try:
                    result = node.process(frame, msg.port)
                    send(sock, _encode_result(codec, result))
                except Exception as e:  # noqa: BLE001
                    send(sock, FrameFailed(RemoteError.of(e)))
            case Close():
                try:
                    node.close()
                finally:
                    send(sock, Closed(ctx.stats))
                break


def _encode_result(codec: Codec, result: Any) -> FrameOut | FramesOut:
    """What ``process`` returned, and the arrays that crossed by value to send it."""
    if isinstance(result, Frame):  # most nodes: the frame they were given
        f = result
        data, tensors = _refs(codec, f, {})
        return FrameOut(f.stream, f.index, f.pts, f.format, f.meta, f.detections, f.layout, f.skipped, data, tensors,
                        codec.take_copies())
    body: list[FrameHeader] | dict[str, list[FrameHeader]] | None
    if result is None:
        body = None
    elif isinstance(result, list):
        body = [_encode_frame(codec, f) for f in result]
    else:
        body = {p: [_encode_frame(codec, f) for f in (v if isinstance(v, list) else [v])] for p, v in result.items()}
    return FramesOut(body, codec.take_copies())


# -- parent side -----------------------------------------------------------------------------------------
class ProcessNode(Node):
    """Stands in for a node whose real instance runs in a worker process."""

    def __init__(self, spec: NodeSpec, plugins: list[str], plugin_dir: str | None):
        super().__init__(spec.id, spec.config)
        # what it stands in for declares, but nothing is forwarded through the hop: what crosses to the worker
        # and back is the frame's host memory, never an allocation a producer made for a consumer beyond it
        self.declared = replace(spec.contract, forwards={})
        self.spec = spec
        self.plugins, self.plugin_dir = plugins, plugin_dir
        self.restarts_left = spec.restarts if spec.on_error == "restart" else 0

    def open(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.stats = ctx.stats
        self._start()

    def _start(self) -> None:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        info = {"type": self.spec.type, "id": self.id, "config": self.spec.config.model_dump(mode="json"),
                "plugins": self.plugins, "plugin_dir": self.plugin_dir, "in_flight": self.ctx.frames_in_flight(),
                "shard": list(self.ctx.shard), "streams": self.ctx.streams,
                "generation": self.ctx.generation}
        mpc = mp.get_context("spawn")
        environment_for_children()
        self.proc = mpc.Process(target=_worker_main, args=(child, info), name=f"flowpipe:{self.id}", daemon=True)
        self.proc.start()
        child.close()
        self.sock = parent
        self.codec = Codec()
        msg, _ = self._recv_or_crash(None)
        match msg:
            case WorkerOpenFailed(error):
                raise error.exception("open failed in worker process: ")
            case WorkerReady():
                pass
        self.stats["process"] = {"pid": self.proc.pid, "restarts": self.stats.get("process", {}).get("restarts", 0)}

    def _recv_or_crash(self, frame: Frame | None) -> tuple[Any, list[int]]:
        try:
            return recv(self.sock)
        except (EOFError, ConnectionError, OSError):
            self.proc.join(timeout=5)
            code = self.proc.exitcode
            held = f" holding stream '{frame.stream}' frame {frame.index}" if frame is not None else ""
            raise _WorkerDiedError(f"worker process {self.proc.pid} died (exit code {code}){held}") from None

    def process(self, frame: Frame, port: str) -> Any:
        new: dict[int, int] = {}
        data, tensors = _refs(self.codec, frame, new)
        ids = list(new)  # buffers the worker has not seen: their fds ride along, once
        out = FrameIn(frame.stream, frame.index, frame.pts, frame.format, frame.meta, frame.detections, frame.layout,
                      frame.skipped, data, tensors, port, ids)
        try:
            send(self.sock, out, [new[b] for b in ids])
            msg, _ = self._recv_or_crash(frame)
        except (_WorkerDiedError, BrokenPipeError, ConnectionError) as e:
            err = e if isinstance(e, _WorkerDiedError) else _WorkerDiedError(f"worker process died: {e}")
            if self.restarts_left > 0:
                self.restarts_left -= 1
                log.warning("node '%s': %s; restarting worker (%d restarts left)", self.id, err, self.restarts_left)
                self._start()
                self.stats["process"]["restarts"] = self.stats["process"].get("restarts", 0) + 1
                raise FrameError(frame, err) from None
            raise err from None
        match msg:
            case FrameOut():
                res, copies = msg, msg.copies
            case FramesOut(res, copies):
                pass
            case FrameFailed(error):
                raise error.exception()
            case _:
                raise RuntimeError(f"unexpected message from the worker process: {msg!r}")
        for n_copies, nbytes in (self.codec.take_copies(), copies):  # by value, either way: copies
            for _ in range(n_copies):
                memory.record(nbytes // max(n_copies, 1))
        if res is None:
            return None
        if isinstance(res, FrameHeader):
            return _decode_into(self.codec, res, frame)
        if isinstance(res, list):
            return [_decode_into(self.codec, b, frame if i == 0 else None) for i, b in enumerate(res)]
        return {p: [_decode_into(self.codec, b, frame) for b in v] for p, v in res.items()}

    def close(self) -> None:
        try:
            send(self.sock, Close())
            msg, _ = recv(self.sock)
            match msg:
                case Closed(stats):
                    self.stats.update({k: v for k, v in stats.items() if k != "process"})
        except (OSError, EOFError):
            pass
        finally:
            self.sock.close()
            self.proc.join(timeout=5)
            if self.proc.is_alive():
                self.proc.kill()


class _WorkerDiedError(RuntimeError):
    pass


def isolate(spec: NodeSpec, plugins: list[str] | None = None, plugin_dir: str | None = None) -> Node:
    """The stand-in for ``spec``'s node, whose real instance runs in a worker process."""
    why = spec.contract.isolation_refused
    if why is not None:
        raise ValueError(f"isolation: process is not available for {spec.type}: {why}")
    return ProcessNode(spec, plugins or [], plugin_dir)

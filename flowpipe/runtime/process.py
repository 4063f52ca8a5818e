"""``isolation: process``: a node runs in a worker process; frames cross as buffer handles.

Pixel and tensor memory is never pickled when it lives in a shared buffer: the parent sends each
buffer's fd once over a Unix socket (SCM_RIGHTS), the worker maps it, and later messages name the
buffer, offset, shape and dtype. The worker writes in place into the same pages the parent reads.
Arrays outside shared memory are pickled, and counted as copies. A worker that dies is reported as
that node's failure naming the frame it held; with ``on_error: restart`` a new worker takes over.
"""
from __future__ import annotations

import array
import logging
import multiprocessing as mp
import os
import pickle
import socket
import struct
from typing import Any

import numpy as np

from .. import memory
from ..accel import devices
from ..contracts import Allocation, InputContract
from ..errors import FrameError
from ..frame import Frame
from ..graph import NodeSpec
from ..node import Node, RunContext

log = logging.getLogger("flowpipe.process")
MAX_FDS = 64


# -- wire format ---------------------------------------------------------------------------------------
def _send(sock: socket.socket, obj: Any, fds: list[int] | None = None) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    head = struct.pack("<Q", len(data))
    if fds:
        sock.sendmsg([head], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    else:
        sock.sendall(head)
    sock.sendall(data)


def _recv(sock: socket.socket) -> tuple[Any, list[int]]:
    fds = array.array("i")
    head, anc, _, _ = sock.recvmsg(8, socket.CMSG_SPACE(MAX_FDS * fds.itemsize))
    if not head:
        raise EOFError("worker closed the connection")
    for level, typ, data in anc:
        if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
    while len(head) < 8:
        more = sock.recv(8 - len(head))
        if not more:
            raise EOFError("worker closed the connection")
        head += more
    (n,) = struct.unpack("<Q", head)
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise EOFError("worker closed the connection")
        buf += chunk
    return pickle.loads(bytes(buf)), list(fds)  # noqa: S301 - our own worker, over a socketpair


class _Codec:
    """Turns arrays into references to shared buffers (by id) where they live in one."""

    def __init__(self) -> None:
        self.buffers: dict[int, memory.SharedBuffer] = {}
        self.pickled = 0  # arrays that crossed by value: copies, reported to the parent's ledger
        self.pickled_bytes = 0

    def take_copies(self) -> tuple[int, int]:
        out = (self.pickled, self.pickled_bytes)
        self.pickled = self.pickled_bytes = 0
        return out

    def encode(self, arr: Any, frame: Frame | None, new_fds: dict[int, int]) -> Any:
        if not isinstance(arr, np.ndarray):
            return ("obj", arr)
        found = self._find(arr)  # a buffer this side already knows (by the id both sides use)
        if found is None and frame is not None:
            buf = frame.buffer_of(arr)
            if buf is not None and buf.handle is not None:
                found = (id(buf), buf)
                self.buffers[id(buf)] = buf
                new_fds[id(buf)] = buf.handle
        if found is not None:
            bid, buf = found
            return ("buf", bid, arr.ctypes.data - buf.address, arr.shape, arr.dtype.str, arr.strides)
        self.pickled_bytes += arr.nbytes
        self.pickled += 1
        return ("obj", arr)

    def _find(self, arr: np.ndarray) -> tuple[int, memory.SharedBuffer] | None:
        addr = arr.ctypes.data
        for bid, buf in self.buffers.items():
            if buf.address <= addr < buf.address + buf.size:
                return bid, buf
        return None

    def decode(self, item: Any) -> Any:
        if item[0] == "obj":
            return item[1]
        _, bid, offset, shape, dtype, strides = item
        buf = self.buffers[bid]
        base = buf.array((buf.size,), np.uint8)
        return np.lib.stride_tricks.as_strided(base[offset:].view(np.dtype(dtype)), shape, strides)


def _encode_frame(codec: _Codec, f: Frame, new_fds: dict[int, int]) -> dict[str, Any]:
    return {"stream": f.stream, "index": f.index, "pts": f.pts, "format": f.format, "meta": f.meta,
            "layout": f.layout, "detections": f.detections,
            "data": codec.encode(f.data, f, new_fds) if f.data is not None else None,
            "tensors": {k: codec.encode(v, f, new_fds) for k, v in f.tensors.items()}}


def _decode_into(codec: _Codec, msg: dict[str, Any], frame: Frame | None = None) -> Frame:
    data = codec.decode(msg["data"]) if msg["data"] is not None else None
    tensors = {k: codec.decode(v) for k, v in msg["tensors"].items()}
    if frame is None:
        return Frame(msg["stream"], msg["index"], msg["pts"], data, msg["format"], msg["meta"], tensors,
                     msg["detections"], layout=msg["layout"])
    frame.meta, frame.detections, frame.format = msg["meta"], msg["detections"], msg["format"]
    frame.layout = msg["layout"]
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
        self.streams = streams
        self.generation = generation
        self.devices = devices_ if devices_ is not None else devices()
        self.stats: dict[str, Any] = {}
        self.sections: dict[str, dict[str, Any]] = {}
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

    def snapshot(self) -> dict[str, Any]:
        return {}


def _worker_main(sock: socket.socket, info: dict[str, Any]) -> None:
    from ..registry import import_plugin, lookup

    for mod in info["plugins"]:
        import_plugin(mod, info["plugin_dir"])

    cls = lookup(info["type"])
    node = cls(info["id"], cls.Config.model_validate(info["config"]))
    ctx = OutsideContext(info["id"], info["in_flight"], tuple(info["shard"]), info["streams"],
                         generation=info["generation"])
    codec = _Codec()
    try:
        node.open(ctx)
    except Exception as e:  # noqa: BLE001
        _send(sock, ("open_error", f"{type(e).__name__}: {e}"))
        return
    _send(sock, ("ready", None))
    while True:
        try:
            msg, fds = _recv(sock)
        except EOFError:
            break
        kind = msg[0]
        if kind == "frame":
            _, new_ids, fmsg, port = msg
            for bid, fd in zip(new_ids, fds):
                codec.buffers[bid] = memory.SharedBuffer(os.fstat(fd).st_size, "memfd", _fd=fd)
            frame = _decode_into(codec, fmsg)
            try:
                result = node.process(frame, port)
                body = _encode_result(codec, result)
                _send(sock, ("ok", body, codec.take_copies()))
            except Exception as e:  # noqa: BLE001
                _send(sock, ("error", f"{type(e).__name__}: {e}"))
        elif kind == "close":
            try:
                node.close()
            finally:
                _send(sock, ("closed", ctx.stats))
            break


def _encode_result(codec: _Codec, result: Any) -> Any:
    if result is None:
        return None
    if isinstance(result, Frame):
        return ("one", _encode_frame(codec, result, {}))
    if isinstance(result, list):
        return ("list", [_encode_frame(codec, f, {}) for f in result])
    return ("dict", {p: [_encode_frame(codec, f, {}) for f in (v if isinstance(v, list) else [v])]
                     for p, v in result.items()})


# -- parent side -----------------------------------------------------------------------------------------
class ProcessNode(Node):
    """Stands in for a node whose real instance runs in a worker process."""

    def __init__(self, spec: NodeSpec, plugins: list[str], plugin_dir: str | None):
        super().__init__(spec.id, spec.config)
        self.declared = spec.contract  # what it stands in for declares
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
        self.proc = mpc.Process(target=_worker_main, args=(child, info), name=f"flowpipe:{self.id}", daemon=True)
        self.proc.start()
        child.close()
        self.sock = parent
        self.codec = _Codec()
        msg, _ = self._recv_or_crash(None)
        if msg[0] == "open_error":
            raise RuntimeError(f"open failed in worker process: {msg[1]}")
        self.stats["process"] = {"pid": self.proc.pid, "restarts": self.stats.get("process", {}).get("restarts", 0)}

    def _recv_or_crash(self, frame: Frame | None) -> tuple[Any, list[int]]:
        try:
            return _recv(self.sock)
        except (EOFError, ConnectionError, OSError):
            self.proc.join(timeout=5)
            code = self.proc.exitcode
            held = f" holding stream '{frame.stream}' frame {frame.index}" if frame is not None else ""
            raise _WorkerDiedError(f"worker process {self.proc.pid} died (exit code {code}){held}") from None

    def process(self, frame: Frame, port: str) -> Any:
        new: dict[int, int] = {}
        fmsg = _encode_frame(self.codec, frame, new)
        ids = list(new)  # buffers the worker has not seen: their fds ride along, once
        try:
            _send(self.sock, ("frame", ids, fmsg, port), [new[b] for b in ids])
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
        if msg[0] == "error":
            raise RuntimeError(msg[1])
        for n_copies, nbytes in (self.codec.take_copies(), msg[2]):  # by value, either way: copies
            for _ in range(n_copies):
                memory.record(nbytes // max(n_copies, 1))
        res = msg[1]
        if res is None:
            return None
        kind, body = res
        if kind == "one":
            return _decode_into(self.codec, body, frame)
        if kind == "list":
            return [_decode_into(self.codec, b, frame if i == 0 else None) for i, b in enumerate(body)]
        return {p: [_decode_into(self.codec, b, frame) for b in v] for p, v in body.items()}

    def close(self) -> None:
        try:
            _send(self.sock, ("close",))
            msg, _ = _recv(self.sock)
            if msg[0] == "closed":
                self.stats.update({k: v for k, v in msg[1].items() if k != "process"})
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

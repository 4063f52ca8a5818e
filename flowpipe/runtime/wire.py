"""The wire between a run's processes over a Unix socket: a message pickled behind its length, with file
descriptors beside it (SCM_RIGHTS); and the codec that turns arrays in shared buffers into references.

    send(sock, msg, fds)    one message (runtime/messages.py), the fds of buffers it names for the first time
    recv(sock)              -> (message, fds that came with it); EOFError when the other side is gone
    Codec                   arrays <-> BufferRef / ObjectRef, and the buffers mapped from fds received
"""
from __future__ import annotations

import array
import pickle
import socket
import struct
from typing import Any

import numpy as np

from .. import memory
from ..frame import Frame
from .messages import ArrayRef, BufferRef, ObjectRef

MAX_FDS = 64


def send(sock: socket.socket, msg: Any, fds: list[int] | None = None) -> None:
    data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
    head = struct.pack("<Q", len(data))
    if fds:
        sock.sendmsg([head], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    else:
        sock.sendall(head)
    sock.sendall(data)


def recv(sock: socket.socket) -> tuple[Any, list[int]]:
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
    return pickle.loads(bytes(buf)), list(fds)  # noqa: S301 - our own processes, over our own socket


class Codec:
    """Turns arrays into references to shared buffers (by id) where they live in one."""

    def __init__(self) -> None:
        self.buffers: dict[int, memory.SharedBuffer] = {}
        self.pickled = 0  # arrays that crossed by value: copies, reported to the parent's ledger
        self.pickled_bytes = 0

    def take_copies(self) -> tuple[int, int]:
        out = (self.pickled, self.pickled_bytes)
        self.pickled = self.pickled_bytes = 0
        return out

    def encode(self, arr: Any, frame: Frame | None, new_fds: dict[int, int]) -> ArrayRef:
        if not isinstance(arr, np.ndarray):
            return ObjectRef(arr)
        found = self._find(arr)  # a buffer this side already knows (by the id both sides use)
        if found is None and frame is not None:
            buf = frame.buffer_of(arr)
            if buf is not None and getattr(buf, "handle", None) is not None:  # (a backend's own memory has none)
                found = (id(buf), buf)
                self.buffers[id(buf)] = buf
                new_fds[id(buf)] = buf.handle
        if found is not None:
            bid, buf = found
            return BufferRef(bid, arr.ctypes.data - buf.address, arr.shape, arr.dtype.str, arr.strides)
        self.pickled_bytes += arr.nbytes
        self.pickled += 1
        return ObjectRef(arr)

    def _find(self, arr: np.ndarray) -> tuple[int, memory.SharedBuffer] | None:
        addr = arr.ctypes.data
        for bid, buf in self.buffers.items():
            if buf.address <= addr < buf.address + buf.size:
                return bid, buf
        return None

    def decode(self, ref: ArrayRef) -> Any:
        match ref:  # no positional captures: a frame's arrays come through here, each frame
            case BufferRef():
                buf = self.buffers[ref.bid]
                base = buf.array((buf.size,), np.uint8)
                return np.lib.stride_tricks.as_strided(base[ref.offset:].view(np.dtype(ref.dtype)), ref.shape,
                                                       ref.strides)
            case ObjectRef():
                return ref.value
        raise TypeError(f"not an array reference: {ref!r}")

"""The messages between a run's processes: every one crosses the wire as itself; errors keep their words."""
from __future__ import annotations

import pickle
import socket
from dataclasses import FrozenInstanceError, fields

import pytest

from flowpipe.runtime import messages as m
from flowpipe.runtime.wire import recv, send


def _sample(cls: type[m.Message]) -> m.Message:
    return cls(*[f"{f.name}-value" for f in fields(cls)])  # type: ignore[call-arg, arg-type]


def test_every_message_is_frozen_slotted_and_crosses_as_itself() -> None:
    kinds = [c for c in vars(m).values() if isinstance(c, type) and issubclass(c, m.Message) and c is not m.Message]
    assert len(kinds) >= 20
    a, b = socket.socketpair()
    for cls in kinds:
        msg = _sample(cls)
        assert not hasattr(msg, "__dict__")
        for f in fields(cls)[:1]:
            with pytest.raises(FrozenInstanceError):
                setattr(msg, f.name, None)
        send(a, msg)
        got, fds = recv(b)
        assert type(got) is cls and got == msg and fds == []
    nested = m.FrameOut("cam", 3, 0.1, "BGR", {}, [], None, None, m.BufferRef(7, 0, (2, 2), "|u1", (2, 1)),
                        {"t": m.ObjectRef([1])}, (0, 0))
    data = pickle.dumps(nested, protocol=pickle.HIGHEST_PROTOCOL)
    assert pickle.loads(data) == nested and b"stream" not in data  # field values only, no names  # noqa: S301


def test_remote_errors_read_as_they_did() -> None:
    assert str(m.RemoteError.of(ValueError("bad frame 3"))) == "ValueError: bad frame 3"
    assert str(m.RemoteError.of("node 'x' is not served by this device owner")) == \
        "node 'x' is not served by this device owner"
    err = m.RemoteError.of(RuntimeError("no model"), "in the device owner, pid 12")
    assert str(err.exception("in the device owner: ")) == \
        "in the device owner: RuntimeError: no model (in the device owner, pid 12)"
    assert type(err.exception()) is RuntimeError

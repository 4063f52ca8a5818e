"""A model on a device of another accelerator backend (``flowpipe.accel.backends``): the backend's ``Session``
driven as the engine drives OpenVINO's requests, so frames keep their order, results land in pooled shared
memory (or a client's own), and a failed request fails only its frames.

Each request of the session is seen here as an infer request: started with its frame's input and the memory
its results go to, done when the backend says so (from any thread)."""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from flowpipe import models
from flowpipe.contracts import Allocation, Offer
from flowpipe.frame import Frame
from flowpipe.memory import BufferPool, SharedLease, Slot, packed

from .batching import Entries
from .engine import COUNTS, Engine, _cache_dir


class _Request:
    """Slot ``slot`` of a backend's session, with the calls the engine makes of an infer request."""

    def __init__(self, session: Any, slot: int):
        self.session, self.slot = session, slot
        self.inputs: dict[str, np.ndarray] = {}
        self.outputs: dict[str, np.ndarray] = {}
        self._event = threading.Event()
        self._error: BaseException | None = None
        self._callback: Callable[[Any], None] | None = None
        self._userdata: Any = None

    def set_callback(self, fn: Callable[[Any], None], userdata: Any) -> None:
        self._callback, self._userdata = fn, userdata

    def query_state(self) -> list[Any]:
        return []

    def start_async(self) -> None:
        self._event.clear()
        self._error = None
        self.session.start(self.slot, self.inputs, self.outputs, self._done)

    def _done(self, error: BaseException | None) -> None:
        self._error = error
        self._event.set()
        if self._callback is not None:
            self._callback(self._userdata)

    def wait(self) -> None:
        self._event.wait()
        if self._error is not None:
            raise self._error

    def infer(self) -> None:
        self.start_async()
        self.wait()


class SessionEngine(Engine):
    """The engine over a backend's session: one frame a request (``batch: 1``), its input read where the
    preprocess wrote it (host memory, or memory the backend made: ``Allocator``), its results written into
    pooled shared buffers."""

    def load_session(self, backend: Any, offer: Offer, alloc: Allocation, entries: Entries, edge: str | None,
                     frames_in_flight: int) -> None:
        c = self.config
        name = backend.name
        unsupported = [what for what, bad in (
            (f"batch: {c.batch} (one frame a request)", c.batch != 1),
            ("entries of a variable count (objects a frame)", entries.up_to),
            ("a precompiled blob (OpenVINO's)", bool(c.blob)),
            ("preprocessing folded into the model (its preprocess node's backend: openvino); set that node's "
             "backend to opencl or cpu", offer.model_preprocessing is not None)) if bad]
        if unsupported:
            raise ValueError(f"backend '{name}' runs a model on frames its preprocess wrote, one at a time; this "
                             f"graph asks for {'; '.join(unsupported)}")
        self.entries, self.edge = entries, edge
        self.placement = alloc.placement
        shape = tuple(offer.tensor.shape) if offer.tensor is not None else None
        path = models.resolve(c.model, sha256=c.model_sha256)
        self.session = backend.compile(str(path), self.device, cache_dir=_cache_dir(c.cache_dir),
                                       requests=c.num_requests, input_shape=shape)
        first = self.session.inputs[0]
        self.input_name = first.name
        self.in_shape = tuple(first.shape) if all(d >= 0 for d in first.shape) else None
        self.in_type = None
        n = 1 if c.requests == "inline" else max(1, int(self.session.requests))
        self._pool_of([_Request(self.session, i) for i in range(n)])
        open_dims = [o.name for o in self.session.outputs if any(d < 0 for d in o.shape)]
        if open_dims:
            raise ValueError(f"backend '{name}' left the shape of output(s) {', '.join(open_dims)} open for input "
                             f"{list(shape or ())}: expected each output's shape once the input's is known")
        pools = min(frames_in_flight, 64) + len(self.requests)
        self.out_names = [o.name for o in self.session.outputs]
        self.out_specs = [(tuple(o.shape), np.dtype(o.dtype)) for o in self.session.outputs]
        size, self.out_offsets = packed(self.out_specs)  # a frame's results in one buffer, each at its offset
        self.out_pools = [BufferPool(size, pools, trim=False)]  # written by the backend: its pages stay
        self._dynamic_dims = [[] for _ in self.out_names]
        self.section = {"backend": name, "device": self.device, "device_reason": self.choice.reason,
                        "requests": len(self.requests), "cache": str(getattr(self.session, "cache", "off")),
                        "input": {"name": first.name, "shape": str(list(first.shape)), "type": first.dtype},
                        "input_memory": alloc.placement, "input_binding": None, **COUNTS}

    def warm(self) -> None:
        """Nothing to prepare: one input shape."""

    def bind_input(self, req: Any, frame: Frame) -> str:
        t = frame.tensors.get("input")
        if t is None:
            raise ValueError("no input tensor on the frame: expected a preprocess node upstream")
        if hasattr(getattr(t, "buffer", None), "int_ptr"):
            raise ValueError(f"the input is an OpenCL buffer; backend '{self.section['backend']}' reads host memory")
        arr = np.asarray(t)
        if self.in_shape is not None and tuple(arr.shape) != self.in_shape:
            raise ValueError(f"input tensor shape {list(arr.shape)} does not match the model's {list(self.in_shape)}")
        req.inputs = {self.input_name: arr}
        if self.placement == "backend":
            return "the backend's own memory, in place (the preprocess wrote it there)"
        return "host array, in place (the backend binds it)"

    def bind_outputs(self, req: Any, frames: list[Frame], slots: list[Slot] | None = None) -> None:
        (frame,) = frames
        into = self._into.pop(id(frame), None)
        outputs: dict[str, np.ndarray] = {}
        block = None
        if into is None:  # one block of the pool for every output
            lease = self.out_pools[0].acquire(timeout=30)
            frame.hold(SharedLease(lease, 1))
            block = lease.buffer
        for i, name in enumerate(self.out_names):
            if block is None:  # a client's own shared buffer: results land in place
                assert into is not None
                arr = into[i]
            else:
                arr = block.array(*self.out_specs[i], offset=self.out_offsets[i])
            outputs[name] = arr
            frame.tensors[name] = arr
        req.outputs = outputs

    def close(self) -> None:
        super().close()
        session, self.session = getattr(self, "session", None), None
        if session is not None:
            session.close()

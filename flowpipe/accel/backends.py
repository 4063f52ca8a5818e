"""Accelerator backends: what runs inference, on which devices, binding which memory.

A backend declares its devices, the memory kinds each binds without a copy, and, where it runs models,
compiles one into a ``Session`` (a pool of requests started asynchronously, each told where its inputs and
outputs are). Backends come from the ``flowpipe.backends`` entry-point group, so a package adds one with no
edit of flowpipe::

    [project.entry-points."flowpipe.backends"]
    onnxruntime = "flowpipe_onnxruntime:OnnxRuntime"

The entry point names a class (or any callable) made with no arguments. Two are built in: ``openvino`` (NPU,
GPU, CPU: its ``compile`` gives a ``Session`` as any backend's, and the inference node drives it through its
own engine, ``flowpipe_nodes.inference.engine``, for the remote tensors, batches and state it knows) and
``opencl`` (the preprocessing devices, no models). A graph names a
device of another backend as ``BACKEND:DEVICE`` (``device: onnxruntime:CPU``); plain names are OpenVINO's.

Memory kinds a device binds:

* ``host``: memory of this process (numpy arrays);
* ``fd-host``: host memory shared through an fd (memfd; what crosses processes);
* ``opencl``: OpenCL buffers in the device's own context;
* ``dma-buf``: DMA-BUF fds imported by the device (Linux); ``nt-handle``: NT handles (Windows);
* ``own``: memory the backend itself makes (page-locked for its device's uploads, or inside the device's own
  address space and visible to the host): a backend whose device declares it allocates it (``allocate``), the
  producer of the device's input writes each frame's tensor into it, and the session is started on views of it;
  flowpipe makes host and fd-host memory in its pools, OpenCL buffers through its OpenCL owner
  (``flowpipe.accel.opencl``).
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..errors import NoDeviceError, one_line
from .opencl import OpenCl
from .openvino import DeviceChoice, OpenVino

log = logging.getLogger("flowpipe.backends")

GROUP = "flowpipe.backends"
MEMORY_KINDS = ("host", "fd-host", "opencl", "dma-buf", "nt-handle", "own")


@dataclass(frozen=True)
class BackendDevice:
    """One device a backend offers: its name there (``CPU``, ``GPU.1``), what it is, the memory it binds."""

    name: str
    kind: str  # npu | gpu | cpu | other
    memory: tuple[str, ...] = ("host",)
    description: str = ""


@dataclass(frozen=True)
class PortSpec:
    """A model input or output: its name, shape (-1 where it is open) and element type."""

    name: str
    shape: tuple[int, ...]
    dtype: str


Done = Callable[[BaseException | None], None]


@runtime_checkable
class Session(Protocol):
    """A model compiled on one device, with ``requests`` that may run at once. ``start`` begins request
    ``slot`` on ``inputs`` (name -> array) and returns at once; the backend writes each output into
    ``outputs`` (name -> array of the output's shape, where results land) and calls ``done(None)`` (or
    ``done(error)``) from any thread when it has finished. A slot is started again only after its ``done``."""

    inputs: list[PortSpec]
    outputs: list[PortSpec]
    requests: int

    def start(self, slot: int, inputs: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray],
              done: Done) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class OwnMemory(Protocol):
    """One buffer a backend made (``Allocator.allocate``): host-visible at ``address`` for ``size`` bytes, with
    numpy views over it, let go with ``close``."""

    address: int
    size: int

    def array(self, shape: tuple[int, ...], dtype: Any = np.uint8, offset: int = 0) -> np.ndarray: ...

    def close(self) -> None: ...


@runtime_checkable
class Allocator(Protocol):
    """A backend that makes the memory its devices bind (``own`` among a device's memory kinds): the buffers a
    producer writes that device's input into come from here."""

    def allocate(self, device: str, nbytes: int) -> OwnMemory: ...


@runtime_checkable
class Backend(Protocol):
    """An accelerator backend: its devices and, where it runs models, sessions on them."""

    name: str

    def devices(self) -> list[BackendDevice]: ...

    def compile(self, model: str, device: str, *, cache_dir: str | None, requests: int | None,
                input_shape: tuple[int, ...] | None) -> Session:
        """``model`` (a file path) compiled for ``device`` (one of ``devices()``' names), its first input held
        to ``input_shape`` where the model leaves it open; ``cache_dir``: where it may keep what it compiled."""
        ...


class OpenVinoBackend:
    """OpenVINO's devices, as a backend sees them, and its models as ``Session``s of host arrays. The inference
    node runs OpenVINO's devices through its own engine (remote tensors, batches across streams, stateful
    models)."""

    name = "openvino"

    def __init__(self, owner: OpenVino | None = None):
        self._owner = owner

    @property
    def owner(self) -> OpenVino:
        if self._owner is None:
            from . import devices

            self._owner = devices().openvino
        return self._owner

    def devices(self) -> list[BackendDevice]:
        out = []
        for d in self.owner.available():
            base = d.split(".")[0]
            memory = {"NPU": ("host", "fd-host", "dma-buf", "nt-handle"),
                      "GPU": ("host", "fd-host", "opencl", "dma-buf", "nt-handle")}.get(base, ("host", "fd-host"))
            try:
                full = str(self.owner.device_info(d).get("FULL_DEVICE_NAME", ""))
            except Exception:  # noqa: BLE001 - a name is all a listing needs
                full = ""
            out.append(BackendDevice(d, base.lower() if base in ("NPU", "GPU", "CPU") else "other", memory, full))
        return out

    def compile(self, model: str, device: str, *, cache_dir: str | None, requests: int | None,
                input_shape: tuple[int, ...] | None) -> Session:
        """``model`` (an IR, ONNX or TFLite file) compiled for ``device``, with OpenVINO's model cache in
        ``cache_dir``: a session of host arrays in and out, as any backend's. The inference node runs OpenVINO's
        devices through its own engine instead (remote tensors, batches across streams, stateful models)."""
        ov_model = self.owner.read_model(model)
        if input_shape is not None and ov_model.inputs[0].get_partial_shape().is_dynamic:
            ov_model.reshape({ov_model.inputs[0].any_name: list(input_shape)})
        config: dict[str, Any] = {"PERFORMANCE_HINT": "THROUGHPUT"}
        if cache_dir:
            config["CACHE_DIR"] = cache_dir
        compiled = self.owner.compile(ov_model, device, config)
        return OpenVinoSession(compiled, requests)


class OpenVinoSession:
    """A model OpenVINO compiled, as a ``Session``: a pool of infer requests, each started on host arrays (its
    inputs and outputs bound in place, no copy on the CPU) and finished through its callback."""

    def __init__(self, compiled: Any, requests: int | None):
        import openvino as ov

        self._ov = ov
        cm = compiled.model
        self.cache = compiled.cache
        self.inputs = [_port(p) for p in cm.inputs]
        self.outputs = [_port(p) for p in cm.outputs]
        n = requests or int(cm.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))
        self._requests = [cm.create_infer_request() for _ in range(max(1, n))]
        self.requests = len(self._requests)

    def start(self, slot: int, inputs: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray],
              done: Done) -> None:
        ov, req = self._ov, self._requests[slot]
        for name, arr in inputs.items():
            req.set_tensor(name, ov.Tensor(np.ascontiguousarray(arr), shared_memory=True))
        for name, arr in outputs.items():
            req.set_tensor(name, ov.Tensor(arr, shared_memory=True))  # the results land in the caller's array

        def finished(_: Any) -> None:
            done(None)

        req.set_callback(finished, None)
        try:
            req.start_async()
        except Exception as e:  # noqa: BLE001 - a request that cannot start fails its frame, as one that ran
            done(e)

    def close(self) -> None:
        for r in self._requests:
            r.wait()
        self._requests = []


def _port(p: Any) -> PortSpec:
    shape = p.get_partial_shape()
    dims = tuple(d.get_length() if d.is_static else -1 for d in shape)
    return PortSpec(p.any_name, dims, str(p.get_element_type().to_dtype()))


class OpenClBackend:
    """The OpenCL devices preprocessing runs on (no models): buffers in their contexts, pinned host memory."""

    name = "opencl"

    def __init__(self, owner: OpenCl | None = None):
        self._owner = owner

    def devices(self) -> list[BackendDevice]:
        if self._owner is None:
            from . import devices

            self._owner = devices().opencl
        out = []
        for p in self._owner.platforms():
            for d in p["devices"]:
                if d["usable"]:
                    kind = str(d["type"]).lower()
                    out.append(BackendDevice(d["name"], kind if kind in ("gpu", "cpu") else "other",
                                             ("host", "opencl"), p["platform"]))
        return out

    def compile(self, model: str, device: str, *, cache_dir: str | None, requests: int | None,
                input_shape: tuple[int, ...] | None) -> Session:
        raise NotImplementedError("OpenCL runs preprocessing kernels, not models")


@dataclass
class Backends:
    """The backends of this process: the built-in ones, then each entry point of ``flowpipe.backends``
    (loaded when first asked for). One that fails to load is kept as its one-line reason."""

    loaded: dict[str, Any] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    _scanned: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _scan(self) -> None:
        with self._lock:
            if self._scanned:
                return
            self.loaded.setdefault("openvino", OpenVinoBackend())
            self.loaded.setdefault("opencl", OpenClBackend())
            for ep in entry_points(group=GROUP):
                if ep.name in self.loaded:
                    continue
                try:
                    backend = ep.load()()
                    if not isinstance(backend, Backend):
                        raise TypeError("it is not a backend: expected name, devices() and compile()")
                    self.loaded[ep.name] = backend
                except Exception as e:  # noqa: BLE001 - whatever a plugin raises is its one line
                    self.failed[ep.name] = one_line(f"backend '{ep.name}' ({ep.value}) failed to load: "
                                                    f"{type(e).__name__}: {e}")
                    log.warning("%s", self.failed[ep.name])
            self._scanned = True

    def names(self) -> list[str]:
        self._scan()
        return list(self.loaded)

    def get(self, name: str) -> Any:
        """The backend ``name``; one that failed to load, or is not installed, raises its one line."""
        self._scan()
        if name in self.loaded:
            return self.loaded[name]
        if name in self.failed:
            raise NoDeviceError(self.failed[name])
        raise NoDeviceError(f"no backend {name!r}: installed: {', '.join(self.loaded)} (a backend is a package "
                            f"with an entry point in the '{GROUP}' group)")

    def choose_all(self, wanted: str | list[str], refused: Mapping[str, str] | None = None) -> list[DeviceChoice]:
        """The devices a node runs on: OpenVINO's choice for plain names (``AUTO``, ``NPU,GPU,CPU``,
        ``GPU+CPU``); for ``BACKEND:DEVICE`` that backend's device, else one line listing the devices it has."""
        alts = [w for part in ([wanted] if isinstance(wanted, str) else wanted) for w in str(part).split(",")]
        foreign = [a.strip() for a in alts if ":" in a]
        if not foreign:
            return self.get("openvino").owner.choose_all(wanted, refused)
        if len(alts) > 1 or "+" in foreign[0]:
            raise ValueError(f"device: {','.join(alts)!r}: a device of another backend ('{foreign[0]}') stands "
                             "alone: no fallback list or '+' with it")
        name, dev = (s.strip() for s in foreign[0].split(":", 1))
        backend = self.get(name)
        there = [d.name for d in backend.devices()]
        match = [d for d in there if d.upper() == dev.upper()]
        if not match:
            raise NoDeviceError(f"backend '{name}' has no device {dev!r}: its devices: {', '.join(there) or 'none'}")
        return [DeviceChoice(match[0], f"{name}:{match[0]} asked for and present (its devices: {', '.join(there)})",
                             [f"{name}:{match[0]}"], backend=name)]

    def device(self, device: str) -> BackendDevice | None:
        """The device ``BACKEND:DEVICE`` as its backend declares it (None: the backend has no such device)."""
        name, dev = (x.strip() for x in device.split(":", 1))
        return next((d for d in self.get(name).devices() if d.name == dev), None)

    def allocator(self, device: str) -> tuple[Callable[[int], OwnMemory] | None, str]:
        """For ``BACKEND:DEVICE``: what makes a buffer of so many bytes in the memory the device binds, where the
        device declares ``own`` memory and its backend allocates it; else None and why not."""
        name, dev = (x.strip() for x in device.split(":", 1))
        backend = self.get(name)
        found = self.device(device)
        if found is None or "own" not in found.memory:
            return None, f"{device} binds no memory of its backend's own making"
        if not isinstance(backend, Allocator):
            return None, f"{device} declares memory of its own, but backend '{name}' has no allocate()"
        return (lambda nbytes: backend.allocate(dev, nbytes)), ""

    def report(self) -> dict[str, Any]:
        """Every backend, its devices and the memory each binds; those that failed to load, and why."""
        self._scan()
        out: dict[str, Any] = {}
        for name, b in self.loaded.items():
            try:
                out[name] = {"devices": [{"name": d.name, "kind": d.kind, "memory": list(d.memory),
                                          "description": d.description} for d in b.devices()]}
            except Exception as e:  # noqa: BLE001
                out[name] = {"error": f"{type(e).__name__}: {e}"}
        for name, why in self.failed.items():
            out[name] = {"error": why}
        return out


__all__ = ["MEMORY_KINDS", "Allocator", "Backend", "BackendDevice", "Backends", "OpenClBackend", "OpenVinoBackend",
           "OwnMemory", "PortSpec", "Session"]

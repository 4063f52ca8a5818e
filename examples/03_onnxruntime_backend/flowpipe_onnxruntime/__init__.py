"""ONNX Runtime as a flowpipe backend: its CPU execution provider as the device ``onnxruntime:CPU``.

flowpipe finds it through the ``flowpipe.backends`` entry point in this package's pyproject.toml and makes
``OnnxRuntime()``; the inference node asks it for a ``Session`` on a model file and drives its requests. It
imports nothing of flowpipe: a backend is a shape (``flowpipe.accel.backends.Backend``), not a base class.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

# ONNX's element types as numpy names
_TYPES = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
          "tensor(uint8)": "uint8", "tensor(int8)": "int8", "tensor(int32)": "int32", "tensor(int64)": "int64",
          "tensor(bool)": "bool"}


@dataclass(frozen=True)
class Device:
    name: str
    kind: str
    memory: tuple[str, ...] = ("host", "fd-host")
    description: str = ""


@dataclass(frozen=True)
class Port:
    name: str
    shape: tuple[int, ...]
    dtype: str


class OnnxRuntime:
    """The backend: ONNX Runtime's CPU execution provider (others could be listed the same way)."""

    name = "onnxruntime"

    def __init__(self) -> None:
        import onnxruntime as ort  # fails here, at load, where it is not installed: flowpipe says so in one line

        self._ort = ort

    def devices(self) -> list[Device]:
        providers = self._ort.get_available_providers()
        return [Device("CPU", "cpu", description=f"ONNX Runtime {self._ort.__version__} CPUExecutionProvider")] \
            if "CPUExecutionProvider" in providers else []

    def compile(self, model: str, device: str, *, cache_dir: str | None, requests: int | None,
                input_shape: tuple[int, ...] | None) -> Session:
        if not model.endswith(".onnx"):
            raise ValueError(f"onnxruntime runs .onnx models; got {model}")
        return Session(self._ort, model, requests or 2, input_shape)


def _reshaped(model: str, shape: tuple[int, ...]) -> bytes:
    """``model`` with its first input of ``shape`` and every other shape left for ONNX Runtime to infer."""
    import onnx

    m = onnx.load(model)
    first = next(i for i in m.graph.input if i.name not in {t.name for t in m.graph.initializer})
    for dim, size in zip(first.type.tensor_type.shape.dim, shape):
        dim.ClearField("dim_param")
        dim.dim_value = size
    del m.graph.value_info[:]
    for out in m.graph.output:
        for k, dim in enumerate(out.type.tensor_type.shape.dim):
            dim.dim_param = f"out_{out.name}_{k}"
    return bytes(m.SerializeToString())


class Session:
    """A model in an ``InferenceSession``; each request runs asynchronously (``run_async``, ONNX Runtime's own
    thread pool) and its outputs are written into the memory flowpipe gives."""

    def __init__(self, ort: Any, model: str, requests: int, input_shape: tuple[int, ...] | None):
        options = ort.SessionOptions()
        options.log_severity_level = 3  # errors only: its notes on a model's graph are not the run's
        self._sess = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        (first, *rest) = self._sess.get_inputs()
        if rest:
            raise ValueError(f"{model}: {len(rest) + 1} inputs; this backend feeds one")
        shape = tuple(d if isinstance(d, int) else -1 for d in first.shape)
        if input_shape is not None and tuple(input_shape) != shape:
            if len(input_shape) != len(shape):
                raise ValueError(f"{model}: input {first.name} is {list(first.shape)}; the preprocess makes "
                                 f"{list(input_shape)}")
            # the preprocess's tensor: a fully convolutional model whose file holds placeholder dimensions
            # (as flowpipe's registry says of it) takes it, as OpenVINO's reshape does
            self._sess = ort.InferenceSession(_reshaped(model, tuple(input_shape)), options,
                                              providers=["CPUExecutionProvider"])
            shape = tuple(input_shape)
        dtype = _TYPES[first.type]
        self.inputs = [Port(first.name, shape, dtype)]
        self.requests = requests
        self.cache = "off"
        names = [o.name for o in self._sess.get_outputs()]
        if all(d >= 0 for d in shape):  # each output's shape for this input: one run on zeros tells
            got = self._sess.run(names, {first.name: np.zeros(shape, dtype)})
            self.outputs = [Port(n, tuple(a.shape), str(a.dtype)) for n, a in zip(names, got)]
        else:
            self.outputs = [Port(o.name, tuple(d if isinstance(d, int) else -1 for d in o.shape),
                                 _TYPES.get(o.type, "float32")) for o in self._sess.get_outputs()]
        self._names = names

    def start(self, slot: int, inputs: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray],
              done: Callable[[BaseException | None], None]) -> None:
        def finished(results: list[np.ndarray], _userdata: Any, error: str) -> None:
            if error:
                done(RuntimeError(f"onnxruntime: {error}"))
                return
            try:
                for name, arr in zip(self._names, results):
                    np.copyto(outputs[name], arr)  # into flowpipe's shared memory
            except Exception as e:  # noqa: BLE001 - a shape the memory does not hold fails its frame
                done(e)
                return
            done(None)

        self._sess.run_async(self._names, dict(inputs), finished, None)

    def close(self) -> None:
        self._sess = None

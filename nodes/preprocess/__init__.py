"""Preprocessing into the model's input tensor: ROI, resize (stretch/letterbox), colour, normalize, layout.

Backends (one class each, behind ``write(frame, geos, lease, base)`` and ``close()``):
* ``opencl`` (``opencl.py``): one fused kernel (``flowpipe/kernels/preprocess.cl``) reads the frame's
  shared buffer and writes the tensor in place. On unified-memory devices (PoCL, Intel iGPU) both are host
  buffers wrapped with ``CL_MEM_USE_HOST_PTR`` (no copies). When the downstream inference runs on
  OpenVINO's GPU plugin, the kernel runs in OpenVINO's own OpenCL context and writes device buffers the
  inference binds as remote tensors.
* ``cpu`` (``cpu.py``): OpenCV + numpy, writing into the same pooled tensor memory.
* ``openvino``: no work here; the inference node folds resize/colour/normalize into the model with
  OpenVINO's PrePostProcessor and the frame itself is the input tensor.
* ``auto``: ``opencl`` when a platform exists, else ``cpu`` (logged).

The node, its config and the choice of backend are in ``node.py``; where pictures land in the tensor
(letterbox, tiles, crops around objects) in ``geometry.py``.
"""
from __future__ import annotations

from .config import PreprocessConfig
from .cpu import CpuBackend
from .geometry import Geometry, Objects, Tiles, fitted, geometry
from .node import Choice, Preprocess, choose, shape_for, size_for
from .opencl import OpenClBackend
from .tensor import DTYPES, SRC_FMT, TensorMemory

__all__ = ["DTYPES", "SRC_FMT", "Choice", "CpuBackend", "Geometry", "Objects", "OpenClBackend", "Preprocess",
           "PreprocessConfig", "TensorMemory", "Tiles", "choose", "fitted", "geometry", "shape_for", "size_for"]

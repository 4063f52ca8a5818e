"""OpenVINO inference: owns the compiled model, the device's remote context and a pool of infer requests.

Frames are submitted asynchronously and come out in submission order (so in frame order per stream).
Inputs are bound without copies: host tensors over the preprocess node's shared buffers on CPU (and on
NPU where no DMA-BUF is available), OpenCL buffers wrapped as remote tensors on the GPU, DMA-BUF fds
imported as ``MEM_TYPE: SHARED_BUF`` remote tensors on the NPU. Outputs land in pooled shared buffers
bound per request, so results are never copied out of a request. With ``batch: N`` the node hands the
upstream preprocess slots of its batch buffers (``memory.BatchSlots``; on the GPU OpenCL buffers bound as
one remote tensor) and each frame is written straight into its place in the batch. A producer that fills
a varying number of entries per frame (one per object found: ``TensorSpec.up_to``) gets a model whose batch
is bounded-dynamic on CPU and GPU (each request runs the entries the frame has) and static at the bound on
the NPU (the rest of the entries run and are ignored); a frame without any entries runs no request.

By concern: ``node`` (the ``inference`` node type: config, memory contract, ports, what the device owner
calls), ``engine`` (device, requests, binding), ``model`` (the model read, fitted to its producer's tensor
and compiled), ``multi`` (several devices at once, ``device: GPU+CPU``: each frame on the device its stream
and index deal it to, results in frame order), ``batching`` (batches across streams, entries per frame), ``state``
(stateful models, one state per stream).
"""
from __future__ import annotations

from .batching import Batcher, Entries
from .config import InferenceConfig, NpuOptions
from .engine import Engine
from .multi import MultiEngine
from .node import Inference
from .state import StreamStates

__all__ = ["Batcher", "Engine", "Entries", "Inference", "InferenceConfig", "MultiEngine", "NpuOptions", "StreamStates"]

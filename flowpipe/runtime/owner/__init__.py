"""The device owner: in a run over several processes, nodes that serve many streams run once, here.

A node type that declares ``serves_streams`` (inference) would otherwise be opened by every shard: one
compiled model, one set of infer requests and one device context per process (on an NPU, one compiled
copy of the model per process). With a device owner the supervisor starts one more process that opens
those nodes once; in each shard an ``OwnerClient`` takes the node's place and sends it frames:

- the input tensor and the output buffers live in the shard's shared memory (memfd, or DMA-BUF where a
  heap exists): each buffer's fd crosses once (SCM_RIGHTS), then a frame is a header naming buffer,
  offset, shape and dtype. The owner binds the input as it would in one process (a host tensor over the
  pages; a SHARED_BUF remote tensor on the NPU) and the request writes its results straight into the
  shard's output buffers, so nothing is copied either way;
- where the node's device binds device memory, which cannot cross processes (OpenCL buffers in a GPU's
  context), the node that writes its input (a preprocess declaring ``owner_side``) runs here too, ahead
  of it: the shard's instance only decides which frames go and where their entries lie, the frame's
  picture crosses by fd, and the owner uploads it once and writes the tensor on the device, as one
  process would;
- the owner batches across every stream of every shard (``batch: N``), answers in each shard's order,
  and says which frames a failed request took;
- a node that holds no frames past ``process`` (its requests run to their end there, ``requests: inline``:
  second looks, a profile detector) runs on a thread of its own here, so that its requests hold up no other
  node's frames;
- a shard's client counts the frames it sent and has not had back; when the owner dies those are failed
  by the shard's ``on_error`` (named by stream and frame), the supervisor hands the socket to a new owner
  (its model from the OpenVINO cache) and clients reconnect. Where the owned nodes may restart, a standby
  owner waits beside the serving one, its interpreter started, its modules imported and its devices
  listed (nothing opened on them), so a takeover costs only opening the nodes; a new standby follows.

Its modules: ``client`` (the shard's side, ``OwnerClient``), ``server`` (the owner's loop over every shard's
clients and its control pipe), ``process`` (the supervisor's ``OwnerProcess``: start, standby, restart, close;
and the process's entry point).
"""
from __future__ import annotations

from .client import OwnerClient, OwnerLink
from .process import OwnerProcess, OwnerStartStoppedError
from .server import OwnerSide

__all__ = ["OwnerClient", "OwnerLink", "OwnerProcess", "OwnerSide", "OwnerStartStoppedError"]

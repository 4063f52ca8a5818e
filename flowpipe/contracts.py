"""Memory contracts: what a producer writes, what a consumer asks for, and what the runner hands out.

Before any node opens, the runner resolves every edge once (``flowpipe.runtime.negotiate``):

1. forward, in graph order: each output port's ``Offer`` (a tensor's shape and type, the placements its
   producer can write, or preprocessing a consumer may fold into its model);
2. backward, consumers first: each input's ``Request`` (host memory, device buffers in an OpenVINO
   device's OpenCL context, DMA-BUF, page-locked frames for a discrete GPU, batch slots of N);
3. per output port, an ``Allocation`` built from the merged requests of its consumers.

Nodes that forward packets untouched (``NodeContract.forwards``) pass offers down and requests up, so a
passthrough between a preprocess and an inference keeps zero copy and remote binding. No node reads
another node's spec, config or stats: what it learns of its neighbours is in these records.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from .accel.opencl import ClDevice
from .memory import BatchSlots, BufferPool, available_kinds

#: ``host``: shared host memory (memfd / DMA-BUF heap where present); ``opencl``: device buffers in an
#: OpenVINO device's OpenCL context; ``dma-buf``: DMA-BUF host memory a device imports by fd;
#: ``pinned``: page-locked host memory of an OpenCL context (a discrete GPU uploads it by DMA);
#: ``owner``: the device owner writes the tensor next to its consumer, from the frame, which crosses
#: processes by fd (the producer in the shard only decides which frames and where their entries lie).
Placement = Literal["any", "host", "opencl", "dma-buf", "pinned", "owner", "backend"]


@dataclass(frozen=True)
class TensorSpec:
    """One frame's tensor: ``shape`` with its entries (tiles) first, numpy ``dtype`` name. With ``up_to``
    the first dimension is an upper bound: each frame fills as many entries as it has (the objects found in
    it, ``frame.layout.filled``), none at all in a frame without any."""

    shape: tuple[int, ...]
    dtype: str
    up_to: bool = False
    #: one frame in this many carries the tensor (a detector's interval); the others pass with no entries,
    #: each in its turn behind the frames before it: a consumer that keeps frames in order holds this many
    #: times the frames it runs at once
    every: int = 1

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * np.dtype(self.dtype).itemsize


#: The element types a model's input is said in (the registry's words), by numpy's name.
ELEMENT_TYPES = {"u8": "uint8", "f16": "float16", "f32": "float32"}


@dataclass(frozen=True)
class ModelInput:
    """The picture tensor a model takes, as its registry entry says: one entry ``shape`` ([1, C, H, W] or
    [1, H, W, C] by ``layout``), its element type (u8, f16, f32), and whether its height and width may be any
    (``any_size``: dynamic in the file, or placeholders). The consumer running the model declares it on its
    input (``NodeContract.takes``): validation holds the producer's declared tensor against it, and the
    consumer the tensor it got when it opens, with the same words."""

    model: str
    shape: tuple[int, ...]
    layout: str
    dtype: str
    any_size: bool = False

    def refusal(self, tensor: TensorSpec, producer: str) -> str | None:
        """Why ``tensor``, which ``producer`` writes, is not this input, in one line; None where it is (or where
        this is no picture's tensor: OpenVINO says what it takes). A dimension of -1 in ``tensor`` is a height
        or width known only as it runs (a tensor sized to its source): it fits any height or width, never the
        channels."""
        if len(self.shape) != 4 or self.layout not in ("NHWC", "NCHW"):
            return None
        nhwc = self.layout == "NHWC"
        h, w, c = (self.shape[1], self.shape[2], self.shape[3]) if nhwc else (self.shape[2], self.shape[3],
                                                                              self.shape[1])
        expected = (h, w, c) if nhwc else (c, h, w)
        channels = 2 if nhwc else 0
        got = tuple(tensor.shape[1:])
        fits = len(got) == 3 and got[channels] == c and all(
            i == channels or self.any_size or g in (-1, e) for i, (g, e) in enumerate(zip(got, expected)))
        want_dtype = ELEMENT_TYPES.get(self.dtype, "float32")
        if fits and tensor.dtype == want_dtype:
            return None
        shown = ", ".join("?" if d < 0 else str(d) for d in tensor.shape)
        got_dtype = next((k for k, v in ELEMENT_TYPES.items() if v == tensor.dtype), tensor.dtype)
        return (f"model {self.model} takes [{', '.join(map(str, [1, *expected]))}] {self.layout} {self.dtype}"
                f"{' of any height and width' if self.any_size else ''}; '{producer}' produces [{shown}] "
                f"{got_dtype}: expected {'' if self.any_size else f'size: [{w}, {h}], '}layout: {self.layout}, "
                f"dtype: {self.dtype} in its config (flowpipe models list gives each model's input)")


@dataclass(frozen=True)
class Offer:
    """What a producer writes on an output port, declared from its config before anything opens."""

    producer: str = ""
    port: str = ""
    tensor: TensorSpec | None = None
    writes: frozenset[str] = frozenset({"host"})
    #: preprocessing the consumer folds into its model instead (OpenVINO PrePostProcessor parameters)
    model_preprocessing: dict[str, Any] | None = None
    #: the picture size (width, height) of the frames on this port (of a tensor: of the frames it is made
    #: from), where it is known before any open (a video file's header); None: not known (a camera, a
    #: network stream, a generated source)
    picture: tuple[int, int] | None = None


@dataclass(frozen=True)
class Request:
    """What a consumer asks of the memory on one input."""

    placement: Placement = "any"
    device: str | None = None  # ``opencl``: the OpenVINO device whose OpenCL context buffers live in
    batch: int = 1  # > 1: the producer writes each frame into a slot of a batch buffer of this many
    cl: ClDevice | None = None  # ``pinned``: the OpenCL context whose page-locked memory to use
    by: str = ""  # the asking node (for messages and --stats)


@dataclass
class Allocation:
    """What the runner hands a producer for one output port: where what it writes must live."""

    placement: Placement = "host"
    device: str | None = None
    cl: ClDevice | None = None
    slots: BatchSlots | None = None
    #: ``backend`` placement: makes one buffer of so many bytes in the memory the consumer's backend binds
    #: (``flowpipe.accel.backends.Allocator``)
    make: Callable[[int], Any] | None = None
    consumers: list[str] = field(default_factory=list)
    why: str = ""
    #: The pixel formats every node its frames reach takes (a decoder picks its output format from them),
    #: and the nodes that take fewer than all, with theirs.
    pixels: frozenset[str] | None = None
    pixels_by: str = ""

    def pool(self, nbytes: int, count: int, kind: str | None = None) -> BufferPool:
        """A pool of ``count`` buffers of ``nbytes`` in this allocation's memory (``kind`` overrides the
        shared-memory kind for host placements: a source configured for ``memfd``)."""
        if self.placement == "opencl":
            assert self.cl is not None
            cl = self.cl
            return BufferPool(nbytes, count, "device", factory=lambda: cl.buffer(nbytes))
        if self.placement == "pinned" and kind is None:
            assert self.cl is not None
            pinned = self.cl
            return BufferPool(nbytes, count, "ocl-pinned", factory=lambda: pinned.pinned(nbytes))
        if self.placement == "backend" and kind is None:
            assert self.make is not None
            make = self.make
            return BufferPool(nbytes, count, "backend", factory=lambda: make(nbytes))
        if self.placement == "dma-buf" and kind is None and "dma-heap" in available_kinds():
            kind = "dma-heap"
        # host memory lets the pages of buffers no frame reaches go; memory placed for a device keeps them
        return BufferPool(nbytes, count, kind, trim=self.placement == "host")


@dataclass(frozen=True)
class InputContract:
    """What a consumer learns of one input edge: the offer it gets and the allocation its producer uses."""

    offer: Offer
    allocation: Allocation
    edge: str = ""  # "upstream->this", the name copies on this input are counted under
    #: the offer as the node was given it: of several producers the largest picture, in a shard the picture
    #: of the whole graph's sources (``offer`` is the first producer's own)
    given: Offer | None = None

"""What both backends write: the pixel formats they read, the tensor's element types, and where one
frame's entries lie in the memory the node took for it (its own buffer, or its slot of a batch buffer)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

SRC_FMT = {"BGR": 0, "RGB": 1, "GRAY": 2, "NV12": 3, "I420": 4}
#: config dtype -> (the kernel's DST_T, numpy type, OpenCL C type)
DTYPES: dict[str, tuple[int, type[np.generic], str]] = {
    "u8": (0, np.uint8, "uchar"), "f16": (1, np.float16, "half"), "f32": (2, np.float32, "float")}


@dataclass(frozen=True)
class TensorMemory:
    """One frame's tensor (``shape``, entries first) in a buffer of ``batch`` frames' tensors."""

    shape: tuple[int, ...]
    dtype: type[np.generic]
    batch: int = 1  # frames in one buffer: the batch slots' size, or 1 in a buffer of the node's own

    @property
    def nbytes(self) -> int:
        """One frame's tensor, in bytes."""
        return int(np.prod(self.shape)) * np.dtype(self.dtype).itemsize

    @property
    def full_shape(self) -> tuple[int, ...]:
        """The whole buffer's entries (every frame's of the batch)."""
        return (self.batch * self.shape[0], *self.shape[1:])

    def view(self, lease: Any, base: int) -> np.ndarray:
        """The host array of one frame's entries, ``base`` the first of them in ``lease``'s buffer."""
        return lease.buffer.array(self.full_shape, self.dtype)[base:base + self.shape[0]]

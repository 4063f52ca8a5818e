"""A device service: one node instance that serves the streams of every process of a run from the one
process that owns the device (the device owner), as the inference node does."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..frame import Frame

if TYPE_CHECKING:
    from . import Devices


@runtime_checkable
class DeviceService(Protocol):
    """What a node whose contract says ``serves_streams`` offers the device owner that runs it for every
    shard: where clients put its input, what its results are and where they go, what it adds to each frame.
    A node that serves streams without these gets the defaults: host input, no provided outputs, one frame
    at once, nothing added."""

    def owned_input(self, devices: Devices) -> str:
        """The placement clients in other processes give its input (``host``, ``dma-buf``)."""

    def output_specs(self) -> list[tuple[str, tuple[int, ...], str]]:
        """One frame's outputs (name, shape, dtype), for a client that provides the memory they land in."""

    def frames_at_once(self) -> int:
        """Frames it works on at once when every request is busy: what its clients keep it fed with."""

    def frame_meta(self) -> dict[str, Any]:
        """What it adds to each frame's metadata (the owner's clients add it on their side)."""

    def provide_outputs(self, frame: Frame, arrays: list[Any]) -> None:
        """Where ``frame``'s results go: a client's own shared buffers, one array per output."""

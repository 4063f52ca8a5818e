"""The device wing: one owner per device kind per process, reached by nodes through ``ctx.devices``.

* ``openvino`` (``OpenVino``): the Core, device choice, compile / cache / blobs, model fitting, tensor binding.
* ``opencl`` (``OpenCl``): contexts of its own or adopted from OpenVINO, queues, program caches per context.
* ``backends`` (``Backends``): every accelerator backend, built in or from the ``flowpipe.backends`` entry
  points, its devices and the memory they bind; where a node's device is chosen.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

from .backends import Backends, OpenClBackend, OpenVinoBackend
from .opencl import ClDevice, OpenCl, wait_event
from .openvino import OpenVino
from .service import DeviceService


@dataclass
class Devices:
    openvino: OpenVino = field(default_factory=OpenVino)
    opencl: OpenCl = field(default_factory=OpenCl)
    backends: Backends = field(default_factory=Backends)

    def __post_init__(self) -> None:
        self.backends.loaded.setdefault("openvino", OpenVinoBackend(self.openvino))
        self.backends.loaded.setdefault("opencl", OpenClBackend(self.opencl))


_devices: Devices | None = None
_lock = threading.Lock()


def devices() -> Devices:
    """This process's device owners (created on first use; a device is opened only when asked for)."""
    global _devices
    with _lock:
        if _devices is None:
            _devices = Devices()
        return _devices


__all__ = ["Backends", "ClDevice", "DeviceService", "Devices", "OpenCl", "OpenVino", "devices", "wait_event"]

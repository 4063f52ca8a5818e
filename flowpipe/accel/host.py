"""What this host offers a run, as flowpipe sees it: the cores this process may use, shared-memory kinds,
OpenVINO devices and OpenCL platforms (``flowpipe devices``, and each host of a cluster)."""
from __future__ import annotations

import os
from typing import Any

from .. import memory
from . import devices
from .openvino import choose_device


def usable_cores() -> int:
    """The cores this process may run on (its affinity), else the machine's."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def device_report() -> dict[str, Any]:
    """What this host has, as flowpipe sees it: shared-memory kinds, OpenVINO devices, OpenCL platforms."""
    owners = devices()
    report: dict[str, Any] = {"shared_memory": memory.available_kinds(),
                              "shared_memory_default": memory.best_kind()}
    try:
        avail = owners.openvino.available()
        report["openvino"] = {d: owners.openvino.device_info(d) for d in avail}
        try:
            choice = choose_device("AUTO", avail)
            report["inference_default"] = {"device": choice.device, "reason": choice.reason}
        except RuntimeError as e:
            report["inference_default"] = {"device": None, "reason": str(e)}
    except Exception as e:  # noqa: BLE001
        report["openvino"] = {"error": str(e)}
    report["opencl"] = owners.opencl.platforms()
    report["backends"] = owners.backends.report()
    return report

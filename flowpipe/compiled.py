"""Compiling, caching and precompiled blobs for the inference node and ``flowpipe compile``.

A blob file is a small JSON header (model sha256, device, driver/compiler versions, OpenVINO version and
the compile config) followed by OpenVINO's exported model; importing checks the header against the
device in hand so a blob made for another device or driver is refused with a clear error.
"""
from __future__ import annotations

import hashlib
import json
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .devices import compile_lock, device_info, ov_core, supported_properties

MAGIC = b"FLOWPIPE-BLOB\x01"
HINTS = ("LATENCY", "THROUGHPUT", "CUMULATIVE_THROUGHPUT")
PRIORITIES = ("LOW", "MEDIUM", "HIGH")
#: YAML names of the NPU plugin properties and the keys OpenVINO knows them by.
NPU_KEYS = {"turbo": "NPU_TURBO", "tiles": "NPU_TILES", "compilation_mode_params": "NPU_COMPILATION_MODE_PARAMS",
            "defer_weights_load": "NPU_DEFER_WEIGHTS_LOAD", "bypass_umd_caching": "NPU_BYPASS_UMD_CACHING",
            "qdq_optimization": "NPU_QDQ_OPTIMIZATION"}


def _ov_value(v: Any) -> Any:
    if isinstance(v, bool):
        return "YES" if v else "NO"
    return v if isinstance(v, (int, float)) else str(v)


def build_config(device: str, *, hint: str | None = None, num_requests: int | None = None,
                 priority: str | None = None, cache_dir: str | None = None, npu: dict[str, Any] | None = None,
                 properties: dict[str, Any] | None = None, supported: set[str] | None = None,
                 read_property: Any = None) -> dict[str, Any]:
    """The property map handed to ``compile_model``, validated against the device's SUPPORTED_PROPERTIES.

    ``supported`` and ``read_property`` are injectable so the NPU map is testable without an NPU.
    """
    dev = device.split(".")[0].upper()
    supported = supported if supported is not None else supported_properties(device)
    cfg: dict[str, Any] = {}
    if hint:
        if hint not in HINTS:
            raise ValueError(f"performance_hint: expected one of {'|'.join(HINTS)}, got {hint!r}")
        cfg["PERFORMANCE_HINT"] = hint
    if num_requests:
        cfg["PERFORMANCE_HINT_NUM_REQUESTS"] = int(num_requests)
    if priority:
        if priority not in PRIORITIES:
            raise ValueError(f"priority: expected one of {'|'.join(PRIORITIES)}, got {priority!r}")
        cfg["MODEL_PRIORITY"] = priority
    if cache_dir:
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
        cfg["CACHE_DIR"] = str(cache_dir)
    for name, value in (npu or {}).items():
        if value is None:
            continue
        if dev != "NPU":
            raise ValueError(f"npu.{name} applies to the NPU only, but the device is {device}")
        key = NPU_KEYS[name]
        if name == "tiles":
            max_tiles = None
            try:
                max_tiles = int((read_property or ov_core().get_property)(device, "NPU_MAX_TILES"))
            except Exception:  # noqa: BLE001 - an older driver has no NPU_MAX_TILES
                pass
            if max_tiles is not None and not 1 <= int(value) <= max_tiles:
                raise ValueError(f"npu.tiles: expected 1..{max_tiles} (NPU_MAX_TILES of {device}), got {value}")
        cfg[key] = _ov_value(value)
    for key, value in (properties or {}).items():
        cfg[str(key)] = _ov_value(value)
    unknown = sorted(k for k in cfg if k not in supported)
    if unknown:
        rw = sorted(k for k in supported if k.isupper())
        raise ValueError(f"{device} does not support {', '.join(unknown)}; supported: {', '.join(rw)}")
    return cfg


def model_hash(path: str | Path) -> str:
    h = hashlib.sha256()
    p = Path(path)
    for f in [p] + ([p.with_suffix(".bin")] if p.suffix == ".xml" and p.with_suffix(".bin").exists() else []):
        h.update(f.read_bytes())
    return h.hexdigest()


def blob_key(device: str, model_sha: str, config: dict[str, Any]) -> dict[str, Any]:
    import openvino as ov

    info = device_info(device)
    return {"model_sha256": model_sha, "device": device.split(".")[0].upper(),
            "device_name": info.get("FULL_DEVICE_NAME"), "driver": info.get("NPU_DRIVER_VERSION"),
            "compiler": info.get("NPU_COMPILER_VERSION"), "openvino": ov.get_version(),
            "config": {k: str(v) for k, v in sorted(config.items()) if k != "CACHE_DIR"}}


def write_blob(path: str | Path, header: dict[str, Any], blob: bytes) -> None:
    head = json.dumps(header, sort_keys=True).encode()
    with open(path, "wb") as f:
        f.write(MAGIC + struct.pack("<I", len(head)) + head)
        f.write(blob)


def read_blob(path: str | Path) -> tuple[dict[str, Any], bytes]:
    data = Path(path).read_bytes()
    if not data.startswith(MAGIC):
        raise ValueError(f"{path}: not a flowpipe blob (made by 'flowpipe compile')")
    (n,) = struct.unpack_from("<I", data, len(MAGIC))
    start = len(MAGIC) + 4
    return json.loads(data[start:start + n]), data[start + n:]


def check_blob(header: dict[str, Any], device: str) -> None:
    want = blob_key(device, header.get("model_sha256", ""), {})
    for k in ("device", "device_name", "driver", "compiler", "openvino"):
        if header.get(k) != want.get(k):
            raise ValueError(f"blob was made for {k} {header.get(k)!r}, this machine has {want.get(k)!r}; "
                             f"recompile with: flowpipe compile MODEL --device {want['device']}")


@dataclass
class Compiled:
    model: Any
    device: str
    config: dict[str, Any]
    compile_ms: float
    cache: str  # "hit", "miss", "off", "blob"
    extra: dict[str, Any] = field(default_factory=dict)


def compile_model(model: Any, device: str, config: dict[str, Any]) -> Compiled:
    core = ov_core()
    with compile_lock(device):
        t0 = time.perf_counter()
        cm = core.compile_model(model, device, config)
        ms = (time.perf_counter() - t0) * 1e3
    cache = "off"
    if "CACHE_DIR" in config:
        try:
            cache = "hit" if bool(cm.get_property("LOADED_FROM_CACHE")) else "miss"
        except Exception:  # noqa: BLE001
            cache = "unknown"
    return Compiled(cm, device, config, ms, cache)


def import_blob(path: str | Path, device: str, config: dict[str, Any]) -> Compiled:
    import io

    header, blob = read_blob(path)
    check_blob(header, device)
    core = ov_core()
    with compile_lock(device):
        t0 = time.perf_counter()
        cm = core.import_model(io.BytesIO(blob), device, {k: v for k, v in config.items() if k != "CACHE_DIR"})
        ms = (time.perf_counter() - t0) * 1e3
    return Compiled(cm, device, config, ms, "blob", {"blob_header": header})

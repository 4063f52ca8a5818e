"""The OpenVINO owner: one Core per process, device choice, compile / cache / precompiled blobs, fitting a
model to the tensors its producer declares, and binding shared memory as input and output tensors.

The inference node keeps the policy (batching, request order, per-stream state); everything that talks
to OpenVINO about devices, models and memory lives here. Nodes reach it through ``ctx.devices.openvino``.

A blob file is a small JSON header (model sha256, device, driver/compiler versions, OpenVINO version and
the compile config) followed by OpenVINO's exported model; importing checks the header against the
device in hand so a blob made for another device or driver is refused with a clear error.
"""
from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import struct
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import NoDeviceError
from ..exported import named
from ..models import cache_dir, sha256_of

log = logging.getLogger("flowpipe.openvino")
MAGIC = b"FLOWPIPE-BLOB\x01"
HINTS = ("LATENCY", "THROUGHPUT", "CUMULATIVE_THROUGHPUT")
PRIORITIES = ("LOW", "MEDIUM", "HIGH")
DEVICE_ORDER = ("NPU", "GPU", "CPU")
#: Keys the Core accepts for every device although a plugin may not list them in SUPPORTED_PROPERTIES.
CORE_KEYS = {"CACHE_DIR", "CACHE_MODE", "ENABLE_MMAP", "FORCE_TBB_TERMINATE", "LOG_LEVEL", "PERFORMANCE_HINT",
             "PERFORMANCE_HINT_NUM_REQUESTS", "MODEL_PRIORITY", "INFERENCE_PRECISION_HINT", "EXECUTION_MODE_HINT",
             "ALLOW_AUTO_BATCHING"}
#: YAML names of the NPU plugin properties and the keys OpenVINO knows them by.
NPU_KEYS = {"turbo": "NPU_TURBO", "tiles": "NPU_TILES", "compilation_mode_params": "NPU_COMPILATION_MODE_PARAMS",
            "defer_weights_load": "NPU_DEFER_WEIGHTS_LOAD", "bypass_umd_caching": "NPU_BYPASS_UMD_CACHING",
            "qdq_optimization": "NPU_QDQ_OPTIMIZATION"}


@dataclass
class DeviceChoice:
    device: str
    reason: str
    tried: list[str]
    backend: str = "openvino"  # the accelerator backend whose device it is (flowpipe.accel.backends)


@dataclass
class Compiled:
    model: Any
    device: str
    config: dict[str, Any]
    compile_ms: float
    cache: str  # "hit", "miss", "off", "blob"
    extra: dict[str, Any] = field(default_factory=dict)


def choose_device(wanted: str | list[str], available: list[str]) -> DeviceChoice:
    """Pick the first wanted device that exists. ``AUTO`` means NPU -> GPU -> CPU; of devices joined with
    ``+`` (used together, ``choose_devices``) the first present one.

    >>> choose_device("AUTO", ["CPU"]).reason
    'NPU not present, GPU not present; CPU is present (available: CPU)'
    """
    return choose_devices(wanted, available)[0]


def choose_devices(wanted: str | list[str], available: list[str],
                   refused: Mapping[str, str] | None = None) -> list[DeviceChoice]:
    """The devices to run on: ``,`` (or a list) separates alternatives, the first with a device present
    wins; ``+`` joins devices used together (``GPU+CPU``: each present one runs frames), in the order
    given, the faster first. ``AUTO`` means NPU -> GPU -> CPU, one of them. ``refused``: devices the model
    cannot run on (device -> why), passed over as if absent; where every wanted one is refused, the first
    other present one of NPU -> GPU -> CPU runs it, and the reason says why.

    >>> [c.device for c in choose_devices("NPU+GPU+CPU", ["CPU", "GPU"])]
    ['GPU', 'CPU']
    >>> choose_devices("GPU", ["CPU", "GPU"], {"GPU": "no kernel"})[0].reason
    'GPU refused by the model (no kernel); NPU not present; CPU is present (available: CPU, GPU)'
    """
    refused = {k.upper(): v for k, v in (refused or {}).items()}
    if refused:
        usable = [a for a in available if a.split(".")[0] not in refused]
        wanted_alts = _alternatives(wanted)
        asked, present = {d for alt in wanted_alts for d in alt}, {a.split(".")[0] for a in available}
        why = "; ".join(f"{d} refused by the model ({v})" for d, v in refused.items() if d in asked and d in present)
        alternatives = [kept for alt in wanted_alts if (kept := [d for d in alt if d not in refused])]
        if not any(d in present for alt in alternatives for d in alt):  # every wanted one present is refused
            alternatives = [[d] for d in DEVICE_ORDER if d not in refused]
        chosen = choose_devices(["+".join(alt) for alt in alternatives], usable)
        return [DeviceChoice(c.device, (why + "; " if why else "") + c.reason.replace(
            f"(available: {', '.join(usable)})", f"(available: {', '.join(available)})"), c.tried) for c in chosen]
    seen: list[str] = []
    tried: list[str] = []
    base_available = {a.split(".")[0] for a in available}
    skipped: list[str] = []
    for alt in _alternatives(wanted):
        label = "+".join(alt)
        if label in seen:
            continue
        seen.append(label)
        tried.extend(d for d in alt if d not in tried)
        here = [d for d in alt if d in available or d in base_available]
        if not here:
            skipped.append(f"{label} not present")
            continue
        why = ", ".join(skipped + [f"{d} not present" for d in alt if d not in here])
        what = f"{here[0]} is present" if len(here) == 1 else f"{' and '.join(here)} are present, used together"
        reason = (why + "; " if why else "") + f"{what} (available: {', '.join(available)})"
        return [DeviceChoice(d, reason, list(tried)) for d in here]
    raise NoDeviceError(f"no wanted device is available: wanted {' -> '.join(seen)}, available: "
                       f"{', '.join(available) or 'none'}")


def _alternatives(wanted: str | list[str]) -> list[list[str]]:
    """``wanted`` as alternatives, each the devices used together (``AUTO``: one alternative per device)."""
    out: list[list[str]] = []
    for w in [wanted] if isinstance(wanted, str) else wanted:
        for part in str(w).split(","):
            devs = list(dict.fromkeys(d.strip().upper() for d in part.split("+")))  # a repeat runs once
            if devs in (["AUTO"], [""]):
                out.extend([d] for d in DEVICE_ORDER)
            elif "AUTO" in devs or "" in devs:
                raise ValueError(f"device: {part.strip()!r}: '+' joins named devices (e.g. GPU+CPU), not AUTO "
                                 "or an empty name")
            else:
                out.append(devs)
    return out


class OpenVino:
    """Owns this process's ``openvino.Core``; compilations on one device are serialized (concurrent NPU
    compiles are known to crash drivers)."""

    def __init__(self, core: Any = None):
        self._core = core
        self._lock = threading.Lock()
        self._compile_locks: dict[str, threading.Lock] = {}

    @property
    def core(self) -> Any:
        with self._lock:
            if self._core is None:
                import openvino as ov

                self._core = ov.Core()
            return self._core

    def available(self) -> list[str]:
        return list(self.core.available_devices)

    def choose(self, wanted: str | list[str]) -> DeviceChoice:
        return choose_device(wanted, self.available())

    def choose_all(self, wanted: str | list[str], refused: Mapping[str, str] | None = None) -> list[DeviceChoice]:
        """Every device of the first wanted alternative that has one present (``GPU+CPU``: both here), of
        those the model is not ``refused`` on."""
        return choose_devices(wanted, self.available(), refused)

    def supported_properties(self, device: str) -> set[str]:
        try:
            return set(self.core.get_property(device, "SUPPORTED_PROPERTIES")) | CORE_KEYS
        except Exception:  # noqa: BLE001 - an absent device raises
            return set(CORE_KEYS)

    def device_info(self, device: str) -> dict[str, Any]:
        info: dict[str, Any] = {"device": device}
        for key in ("FULL_DEVICE_NAME", "DEVICE_ARCHITECTURE", "NPU_DRIVER_VERSION", "NPU_COMPILER_VERSION",
                    "OPTIMIZATION_CAPABILITIES"):
            try:
                info[key] = str(self.core.get_property(device, key))
            except Exception:  # noqa: BLE001, S110 - not every device has every key
                pass
        return info

    def remote_context(self, device: str) -> Any:
        """The device's default remote context (GPU: OpenCL; NPU: Level Zero), None where there is none."""
        try:
            return self.core.get_default_context(device)
        except Exception:  # noqa: BLE001 - CPU has none; an NPU driver may lack one
            return None

    def build_config(self, device: str, **kwargs: Any) -> dict[str, Any]:
        return build_config(device, supported=self.supported_properties(device),
                            read_property=self.core.get_property, **kwargs)

    def read_model(self, path: str | Path, part: dict[str, Any] | None = None) -> Any:
        """The model in ``path``; a TensorFlow frozen graph (.pb) through its OpenVINO IR, converted once into
        the model cache (the TF frontend takes seconds on an Object Detection API graph, the IR a fraction of
        one: every start of a graph with it waited that long). ``part``: the part of it to run (``cut``)."""
        path = Path(path)
        model = named(self.core.read_model(str(self._as_ir(path) if path.suffix == ".pb" else path)))
        return cut(model, part, str(path)) if part else model

    def _as_ir(self, path: Path) -> Path:
        """``path`` converted to OpenVINO IR in the model cache, named by its content's sha256 (a changed
        file is converted again). One converter at a time (a lock file: the processes of a run start
        together), written under a temporary name and renamed, the .xml last, so a reader never takes a
        half-written pair; a failed conversion leaves nothing."""
        import fcntl

        xml = cache_dir() / "converted" / f"{path.stem}.{sha256_of(path)[:16]}.xml"
        if xml.exists():
            return xml
        xml.parent.mkdir(parents=True, exist_ok=True)
        with open(xml.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the process ends
            if not xml.exists():  # another converted it while this one waited
                import openvino as ov

                tmp = xml.with_name(f".{xml.stem}.{os.getpid()}.{threading.get_ident()}.xml")
                try:
                    ov.save_model(self.core.read_model(str(path)), str(tmp), compress_to_fp16=False)
                    tmp.with_suffix(".bin").replace(xml.with_suffix(".bin"))
                    tmp.replace(xml)
                finally:
                    tmp.unlink(missing_ok=True)
                    tmp.with_suffix(".bin").unlink(missing_ok=True)
                log.info("model %s converted to OpenVINO IR once: %s", path.name, xml)
        return xml

    def _compile_lock(self, device: str) -> threading.Lock:
        with self._lock:
            return self._compile_locks.setdefault(device.split(".")[0].upper(), threading.Lock())

    def compile(self, model: Any, device: str, config: dict[str, Any]) -> Compiled:
        with self._compile_lock(device):
            t0 = time.perf_counter()
            cm = self.core.compile_model(model, device, config)
            ms = (time.perf_counter() - t0) * 1e3
        cache = "off"
        if "CACHE_DIR" in config:
            try:
                cache = "hit" if bool(cm.get_property("LOADED_FROM_CACHE")) else "miss"
            except Exception:  # noqa: BLE001
                cache = "unknown"
        return Compiled(cm, device, config, ms, cache)

    def blob_key(self, device: str, model_sha: str, config: dict[str, Any]) -> dict[str, Any]:
        import openvino as ov

        info = self.device_info(device)
        return {"model_sha256": model_sha, "device": device.split(".")[0].upper(),
                "device_name": info.get("FULL_DEVICE_NAME"), "driver": info.get("NPU_DRIVER_VERSION"),
                "compiler": info.get("NPU_COMPILER_VERSION"), "openvino": ov.get_version(),
                "config": {k: str(v) for k, v in sorted(config.items()) if k != "CACHE_DIR"}}

    def check_blob(self, header: dict[str, Any], device: str) -> None:
        want = self.blob_key(device, header.get("model_sha256", ""), {})
        for k in ("device", "device_name", "driver", "compiler", "openvino"):
            if header.get(k) != want.get(k):
                raise ValueError(f"blob was made for {k} {header.get(k)!r}, this machine has {want.get(k)!r}; "
                                 f"recompile with: flowpipe compile MODEL --device {want['device']}")

    def import_blob(self, path: str | Path, device: str, config: dict[str, Any]) -> Compiled:
        header, blob = read_blob(path)
        self.check_blob(header, device)
        with self._compile_lock(device):
            t0 = time.perf_counter()
            cm = self.core.import_model(io.BytesIO(blob), device,
                                        {k: v for k, v in config.items() if k != "CACHE_DIR"})
            ms = (time.perf_counter() - t0) * 1e3
        return Compiled(cm, device, config, ms, "blob", {"blob_header": header})


# -- compile configuration and blobs ----------------------------------------------------------------------
def _ov_value(v: Any) -> Any:
    if isinstance(v, bool):
        return "YES" if v else "NO"
    return v if isinstance(v, (int, float)) else str(v)


def build_config(device: str, *, supported: set[str], read_property: Callable[[str, str], Any] | None = None,
                 hint: str | None = None, num_requests: int | None = None, priority: str | None = None,
                 cache_dir: str | None = None, npu: dict[str, Any] | None = None,
                 properties: dict[str, Any] | None = None) -> dict[str, Any]:
    """The property map handed to ``compile_model``, validated against the device's SUPPORTED_PROPERTIES.

    ``supported`` and ``read_property`` come from the owner (or a test), so the NPU map is testable
    without an NPU.
    """
    dev = device.split(".")[0].upper()
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
        if name == "tiles":
            max_tiles = None
            try:
                max_tiles = int(read_property(device, "NPU_MAX_TILES")) if read_property else None
            except Exception:  # noqa: BLE001, S110 - an older driver has no NPU_MAX_TILES
                pass
            if max_tiles is not None and not 1 <= int(value) <= max_tiles:
                raise ValueError(f"npu.tiles: expected 1..{max_tiles} (NPU_MAX_TILES of {device}), got {value}")
        cfg[NPU_KEYS[name]] = _ov_value(value)
    for key, value in (properties or {}).items():
        cfg[str(key)] = _ov_value(value)
    unknown = sorted(k for k in cfg if k not in supported)
    if unknown:
        rw = sorted(k for k in supported if k.isupper())
        raise ValueError(f"{device} does not support {', '.join(unknown)}; supported: {', '.join(rw)}")
    return cfg


def no_auto_batching(config: dict[str, Any]) -> None:
    """Inputs written by an OpenCL preprocess arrive as remote (OCL_BUFFER) tensors. OpenVINO's automatic
    batching, which the GPU's THROUGHPUT hint turns on for batch-1 models, gathers inputs on the host and
    cannot read them: the plugin aborts the whole process from a worker thread (seen with PP-OCR text
    detection on OpenVINO 2026.4). Turn it off; ``batch: N`` on the node batches without it."""
    if str(config.get("ALLOW_AUTO_BATCHING", "NO")).upper() not in ("NO", "FALSE", "0"):
        raise ValueError("properties.ALLOW_AUTO_BATCHING: OpenVINO's automatic batching cannot take the remote "
                         "(OCL_BUFFER) tensors an OpenCL preprocess writes; expected NO (or leave it out), "
                         "batch: N on this node, or backend: cpu on the preprocess")
    config["ALLOW_AUTO_BATCHING"] = "NO"


def model_hash(path: str | Path) -> str:
    h = hashlib.sha256()
    p = Path(path)
    for f in [p] + ([p.with_suffix(".bin")] if p.suffix == ".xml" and p.with_suffix(".bin").exists() else []):
        h.update(f.read_bytes())
    return h.hexdigest()


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


# -- fitting a model to the tensors its producer declares --------------------------------------------------
def static_batch(model: Any) -> int | None:
    ps = model.inputs[0].get_partial_shape()
    return ps[0].get_length() if ps[0].is_static else None


def fit_input(model: Any, want: tuple[int, ...] | None, device: str, producer: str | None,
              any_size: bool = False) -> Any:
    """Static shapes: reshape a dynamic input to ``want`` (the producer's declared tensor, times the batch),
    or a static one whose batch differs; refuse a mismatch in any other dimension, unless the model takes
    any size (``any_size``: a fully convolutional model whose file holds placeholder dimensions)."""
    inp = model.inputs[0]
    ps = inp.get_partial_shape()
    if ps.is_dynamic or (any_size and want is not None):
        if want is None:
            if device == "NPU":
                raise ValueError(f"model input {inp.get_any_name()} is dynamic {ps}; the NPU needs a static "
                                 "shape: put a preprocess node upstream (its size sets the shape)")
            return model
        model.reshape({inp.get_any_name(): list(want)})
        log.info("reshaped %s input %s to static %s", "dynamic" if ps.is_dynamic else "any-size", ps, list(want))
        return model
    have = tuple(ps.to_shape())
    if want is None or have == tuple(want):
        return model
    if have[1:] != tuple(want[1:]):
        raise ValueError(f"model input {inp.get_any_name()} is {list(have)} but upstream '{producer}' produces "
                         f"{list(want)} (a fully convolutional model whose file holds placeholder dimensions "
                         "takes any_size: true)")
    try:  # a batch (tiles, several frames): reshape the batch dimension
        if have[0] == 1 and want[0] > 1:
            unfold_batch(model)
        model.reshape({inp.get_any_name(): list(want)})
    except Exception as e:  # noqa: BLE001
        raise ValueError(f"model input {inp.get_any_name()} is {list(have)} and cannot take batch {want[0]} from "
                         f"'{producer}': {str(e).splitlines()[0]}") from None
    return model


def unfold_batch(model: Any) -> int:
    """Keep a batch on the batch axis where a model written for one picture folds it into the next axis:
    a Reshape of a [1, H, W, C] feature map to the constant [1, -1, k] (a TFLite SSD head: BlazeFace's
    anchors) becomes [-1, H*W*C/k, k], so each entry's results are a block of their own, whatever the
    number of feature maps concatenated after it. Returns how many were changed."""
    from openvino import opset13 as ops

    changed = 0
    for op in model.get_ordered_ops():
        if op.get_type_name() != "Reshape":
            continue
        target = op.input_value(1).get_node()
        src = op.input(0).get_partial_shape()
        if target.get_type_name() != "Constant" or src.rank.is_dynamic or len(src) != 4 or src.is_dynamic:
            continue
        t = [int(v) for v in target.get_data().reshape(-1)]
        dims = [d.get_length() for d in src]
        if len(t) != 3 or t[:2] != [1, -1] or dims[0] != 1 or t[2] < 1 or (dims[1] * dims[2] * dims[3]) % t[2]:
            continue
        new = ops.constant(np.array([-1, dims[1] * dims[2] * dims[3] // t[2], t[2]], np.int64))
        op.input(1).replace_source_output(new.output(0))
        changed += 1
    if changed:
        model.validate_nodes_and_infer_types()
        log.info("kept the batch on its axis in %d reshapes of feature maps", changed)
    return changed


def bounded_batch(model: Any) -> Any:
    """The input's batch dimension made dynamic up to its (static) size: a request runs as many entries as
    its input tensor has (CPU and GPU; the NPU takes static shapes only)."""
    import openvino as ov

    inp = model.inputs[0]
    shape = list(inp.get_partial_shape().to_shape())
    model.reshape({inp.get_any_name(): ov.PartialShape([ov.Dimension(1, shape[0]), *shape[1:]])})
    return model


def with_ppp(model: Any, color: str, mean: tuple[float, ...], scale: tuple[float, ...], layout: str) -> Any:
    """Fold resize, colour conversion and normalization into the model (OpenVINO's PrePostProcessor): the
    frame itself (u8 BGR, NHWC, any size) becomes the input tensor."""
    import openvino as ov
    from openvino.preprocess import ColorFormat, PrePostProcessor, ResizeAlgorithm

    ppp = PrePostProcessor(model)
    inp = ppp.input()
    inp.tensor().set_element_type(ov.Type.u8).set_layout(ov.Layout("NHWC")) \
        .set_color_format(ColorFormat.BGR).set_spatial_dynamic_shape()
    steps = inp.preprocess()
    steps.convert_element_type(ov.Type.f32)
    if color == "RGB":
        steps.convert_color(ColorFormat.RGB)
    steps.resize(ResizeAlgorithm.RESIZE_LINEAR)
    steps.mean(list(mean)).scale(list(scale))
    inp.model().set_layout(ov.Layout(layout))
    return ppp.build()


def cut(model: Any, spec: dict[str, Any], name: str) -> Any:
    """``model`` cut to the part a registry entry's ``cut`` names: ending at the operations named ``outputs``
    (their first output each, in that order), what came after them gone; and, with ``input_at``, starting where
    that operation's output was, from a new input of the entry's ``input`` type (any batch), what came before
    it gone. A detector whose own pre- and postprocessing run in shapes known only as they run (TensorFlow's
    per-image resize loop, its per-class suppression: Loop, NonZero) then runs where only static shapes do
    (the NPU) or where that processing has no kernel (the GPU plugin on some OpenCL drivers); flowpipe's
    preprocess and the decoder do that processing on the frame."""
    import openvino as ov
    from openvino import opset13

    ops = {op.get_friendly_name(): op for op in model.get_ops()}
    names = [*spec["outputs"], *([spec["input_at"]] if spec.get("input_at") else [])]
    missing = [n for n in names if n not in ops]
    if missing:
        raise ValueError(f"model {name}: no operation {', '.join(map(repr, missing))} to cut it at (the registry's "
                         "`cut`)")
    params = list(model.get_parameters())
    if spec.get("input_at"):
        at = ops[spec["input_at"]].output(0)
        dims = list(at.get_partial_shape())[1:]
        if not all(d.is_static for d in dims):
            raise ValueError(f"model {name}: {spec['input_at']} has no static picture size to start it at")
        shape = [-1, *(d.get_length() for d in dims)]
        param = opset13.parameter(ov.PartialShape(shape), getattr(ov.Type, spec.get("dtype", "f32")), name="image")
        source = opset13.convert(param, at.get_element_type()) if at.get_element_type() != param.get_element_type() \
            else param
        for target in list(at.get_target_inputs()):
            target.replace_source_output(source.output(0))
        params = [param]
    cut_model = ov.Model([ops[n].output(0) for n in spec["outputs"]], params, model.get_friendly_name())
    for out, n in zip(cut_model.outputs, spec["outputs"]):
        out.get_tensor().set_names({n})
    return cut_model


def batch_free_outputs(model: Any) -> set[int]:
    """The outputs that no input reaches: what the model computes from its own constants (a cut detector's
    anchors, once its shapes are static and folded), the same for every frame of a batch, not split."""
    free = set()
    for i, result in enumerate(model.get_results()):
        seen, todo = set(), [result.input_value(0).get_node()]
        while todo:
            node = todo.pop()
            if node.get_name() in seen:  # unique per node (a wrapper's id() is not: they come and go)
                continue
            seen.add(node.get_name())
            if node.get_type_name() == "Parameter":
                break
            todo += [v.get_node() for v in node.input_values()]
        else:
            free.add(i)
    return free


def fold(model: Any) -> Any:
    """``model`` with what its static shapes make constant computed once (OpenVINO's ConstantFolding): a cut
    detector's anchors, worked out from its feature maps' sizes, become the constants they are."""
    from openvino._pyopenvino.passes import ConstantFolding, Manager

    manager = Manager()
    manager.register_pass(ConstantFolding())
    manager.run_passes(model)
    return model


def check_batch_layout(owner: OpenVino, batched: Any, path: str, device: str, config: dict[str, Any],
                       part: dict[str, Any] | None = None) -> None:
    """A model reshaped from batch 1 to B must give each entry's results as a contiguous block: on the
    batch axis, or folded frame-major into axis 1 (single-feature-map BlazeFace does this). Models that fold
    it another way (multi-layer anchor concatenation) are refused, not mis-split."""
    b = batched.inputs[0].get_shape()[0]
    if all(o.get_shape()[0] == b for o in batched.outputs):
        return
    single = owner.compile(owner.read_model(path, part), device, config).model
    x = np.random.default_rng(0).uniform(-1, 1, tuple(batched.inputs[0].get_shape())).astype(
        batched.inputs[0].get_element_type().to_dtype())
    got = batched(x)
    for k in range(b):
        ref = single(x[k:k + 1])
        for ob, o1 in zip(batched.outputs, single.outputs):
            block = split_batch(got[ob], k, b)
            tol = 0.05 * (np.abs(ref[o1]).max() + 1)
            if block.shape != ref[o1].shape or not np.allclose(block, ref[o1], atol=tol):
                raise ValueError(f"the model folds a batch of {b} into output {ob.get_any_name()} "
                                 f"{list(ob.get_shape())} in an order that cannot be split per entry; "
                                 "expected batch: 1 and no tiles with this model")


def split_batch(view: np.ndarray, k: int, n: int) -> np.ndarray:
    """Frame k's share of a batched output of n frames (each one or more entries): along the batch axis, or
    along axis 1 where the model folds the batch into it ([1, n*2304, 16])."""
    if view.shape[0] % n == 0 and (view.shape[0] > 1 or n == 1):  # on the batch axis (entries per frame)
        m = view.shape[0] // n
        return view[k * m:(k + 1) * m]
    if view.shape[0] == 1 and view.ndim >= 2 and view.shape[1] % n == 0:
        m = view.shape[1] // n
        return view[:, k * m:(k + 1) * m]
    raise ValueError(f"cannot split output {list(view.shape)} into {n} frames")


# -- binding shared memory as tensors ------------------------------------------------------------------------
class TensorBinder:
    """Makes (once per buffer) and caches the OpenVINO tensors over pooled memory a compiled model reads and
    writes: host tensors over shared memory, OCL_BUFFER remote tensors over OpenCL buffers of OpenVINO's
    GPU context, SHARED_BUF remote tensors over DMA-BUF fds on the NPU."""

    def __init__(self, element_type: Any, shape: tuple[int, ...] | None, remote_context: Any = None):
        self.element_type, self.shape, self.remote_context = element_type, shape, remote_context
        self._host: dict[tuple[int, tuple[int, ...]], Any] = {}
        self._remote: dict[int, Any] = {}

    def host(self, arr: np.ndarray) -> Any:
        """A tensor sharing ``arr``'s memory (``shared_memory=True``), made once per pooled view."""
        import openvino as ov

        key = (arr.ctypes.data, arr.shape)
        t = self._host.get(key)
        if t is None:
            t = self._host[key] = ov.Tensor(arr, shared_memory=True)
        return t

    def ocl_buffer(self, buffer: Any) -> Any:
        """A remote tensor over an OpenCL buffer of OpenVINO's GPU context."""
        import openvino as ov

        rt = self._remote.get(buffer.int_ptr)
        if rt is None:
            rt = self._remote[buffer.int_ptr] = self.remote_context.create_tensor(
                self.element_type, ov.Shape(list(self.shape or ())),
                {"SHARED_MEM_TYPE": "OCL_BUFFER", "MEM_HANDLE": hex(buffer.int_ptr)})
        return rt

    def shared_buf(self, buffer: Any, device: str) -> Any:
        """A remote tensor importing a DMA-BUF (NPU: ``MEM_TYPE: SHARED_BUF``); written against the NPU
        remote tensor API, not verified on NPU hardware."""
        import openvino as ov

        rt = self._remote.get(buffer.handle)
        if rt is None:
            rt = self._remote[buffer.handle] = self.remote_context.create_tensor(
                self.element_type, ov.Shape(list(self.shape or ())), buffer.remote_properties(device))
        return rt

    def clear(self) -> None:
        self._host.clear()
        self._remote.clear()

"""An ``inference`` node's settings (read by the node and its engine)."""
from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from flowpipe.node import NodeConfig


class NpuOptions(BaseModel):
    """NPU plugin properties (see the NPU plugin README); ignored unless the chosen device is NPU."""

    model_config = ConfigDict(extra="forbid")
    turbo: bool | None = Field(None, description="NPU_TURBO (default: the driver's)")
    tiles: int | None = Field(None, ge=1, description="NPU_TILES: tiles the model runs on, 1 to the device's "
                              "NPU_MAX_TILES (default: the compiler's choice)")
    compilation_mode_params: str | None = Field(None, description="NPU_COMPILATION_MODE_PARAMS, as the NPU "
                                                "compiler takes them")
    defer_weights_load: bool | None = Field(None, description="NPU_DEFER_WEIGHTS_LOAD (default: the driver's)")
    bypass_umd_caching: bool | None = Field(None, description="NPU_BYPASS_UMD_CACHING: the driver's own cache of "
                                            "compiled models not used (default: the driver's)")
    qdq_optimization: bool | None = Field(None, description="NPU_QDQ_OPTIMIZATION (default: the driver's)")



class InferenceConfig(NodeConfig):
    """An ``inference`` node's settings."""

    model: str = Field(description="registry name (flowpipe models list), .xml/.onnx/.tflite path, or an "
                                   "http(s) URL (with model_sha256)")
    model_sha256: str | None = Field(None, description="required for a URL: the model file's sha256")

    @field_validator("model")
    @classmethod
    def _known(cls, v: str) -> str:
        """A name that is no path, file or URL must be the registry's (a misspelt one fails here, not at start)."""
        import difflib

        from flowpipe.models import registry

        if "/" in v or "\\" in v or "." in v or v.startswith("~"):
            return v  # a path or URL: looked for when the node opens, on the host that runs it
        names = list(registry())
        if v not in names:
            near = difflib.get_close_matches(v, names, n=1)
            which = f"did you mean {near[0]!r}?" if near else f"flowpipe models list: {', '.join(names)}"
            raise ValueError(f"expected a registry name ({which}), a .xml/.onnx/.tflite path or an http(s) URL")
        return v
    device: str | list[str] = Field(
        "AUTO", description="NPU|GPU|CPU|AUTO, a fallback list (the first present), e.g. 'NPU,GPU,CPU', or devices "
        "used together, e.g. 'GPU+CPU' (each present one runs its share of the frames, by split; batch: 1); a "
        "device of another accelerator backend as BACKEND:DEVICE, e.g. 'onnxruntime:CPU' (flowpipe devices lists them)")

    @field_validator("device")
    @classmethod
    def _device_names(cls, v: str | list[str]) -> str | list[str]:
        """Each name one OpenVINO knows, or a backend installed here and a device name (a misspelt one fails
        here, not when the node opens on some host; whether that backend has the device is said at open)."""
        import difflib
        from importlib.metadata import entry_points

        from flowpipe.accel.backends import GROUP

        known = ("NPU", "GPU", "CPU", "AUTO")
        for part in re.split(r"[,+]", ",".join([v] if isinstance(v, str) else v)):
            name = part.strip().upper()
            if ":" in part:
                backend, dev = (x.strip() for x in part.split(":", 1))
                names = sorted({"openvino", *(ep.name for ep in entry_points(group=GROUP))})
                if backend not in names or not dev:
                    near = difflib.get_close_matches(backend, names, n=1)
                    raise ValueError(f"{part.strip()!r}: expected BACKEND:DEVICE with a backend installed here ("
                                     + (f"did you mean {near[0]!r}? " if near else "") + f"installed: "
                                     f"{', '.join(names)})")
                continue
            if name and not re.fullmatch(r"(NPU|GPU|CPU)(\.\d+)?|AUTO", name):
                near = difflib.get_close_matches(name.split(".")[0], known, n=1)
                raise ValueError(f"{part.strip()!r} is no device" + (f" (did you mean {near[0]!r}?)" if near else "")
                                 + "; expected NPU, GPU or CPU (GPU.1: one of several), AUTO, a fallback list "
                                 "'NPU,GPU,CPU', devices used together 'GPU+CPU', or BACKEND:DEVICE")
        return v
    split: dict[str, int] = Field(
        default_factory=dict, description="devices used together ('GPU+CPU'): each device's share of the frames, "
        "e.g. {GPU: 3, CPU: 1} (default: equal). Which device runs a frame is a function of its stream and its "
        "index, never of which device is free (devices' numerics differ, so that would make the output depend "
        "on load); 'flowpipe bench' says which shares match the devices' speeds")
    split_by: Literal["frame", "stream"] = Field(
        "frame", description="devices used together: frame, each stream's frames spread over the devices by "
        "their shares and their index; stream, each stream on one device for its whole run (its boxes all of one "
        "device's numerics; streams dealt by rendezvous hashing of their names, weighted by the shares, so a "
        "stream keeps its device as others come and go)")

    @field_validator("split")
    @classmethod
    def _shares(cls, v: dict[str, int]) -> dict[str, int]:
        bad = {k: n for k, n in v.items() if not isinstance(n, int) or n < 1}
        if bad:
            raise ValueError(f"expected a whole number >= 1 for each device's share, got {bad}")
        return {k.strip().upper() if ":" not in k else k.strip(): n for k, n in v.items()}

    performance_hint: Literal["LATENCY", "THROUGHPUT", "CUMULATIVE_THROUGHPUT"] = Field(
        "THROUGHPUT", description="OpenVINO's PERFORMANCE_HINT: LATENCY, each request as fast as it can; THROUGHPUT, "
        "the most frames a second (requests in flight together); CUMULATIVE_THROUGHPUT, several devices at once")
    num_requests: int | None = Field(None, ge=1, le=64, description="default: OPTIMAL_NUMBER_OF_INFER_REQUESTS")
    priority: Literal["LOW", "MEDIUM", "HIGH"] | None = Field(None, description="OpenVINO's MODEL_PRIORITY among "
                                                               "models sharing a device (default: the device's)")
    cache_dir: str | Literal[False] | None = Field(
        None, description="OpenVINO model cache: a model compiled once is loaded from it on later starts (FIL < "
        "FEIL on a hit, as TensorRT engines are kept); default: this host's (FLOWPIPE_CACHE, else "
        "~/.cache/flowpipe, /ov); false: none, every start compiles")
    blob: str | None = Field(None, description="precompiled blob from 'flowpipe compile' (import, no compile)")
    any_size: bool | None = Field(None, description="the model takes any input height and width (a fully "
                                  "convolutional detector whose file holds placeholder dimensions): its input is "
                                  "reshaped to what the preprocess makes; default: the registry's word, else false")
    properties: dict[str, Any] = Field(default_factory=dict, description="extra OpenVINO properties")
    npu: NpuOptions = Field(default_factory=NpuOptions, description="the NPU plugin's own properties, for the NPU "
                            "alone")
    batch: int = Field(1, ge=1, le=64, description="frames per inference request (streams batched together)")
    batch_timeout_ms: float = Field(10.0, gt=0, description="send a partial batch after this wait")
    requests: Literal["async", "inline"] = Field(
        "async", description="async: a pool of requests in flight, completions polled on a thread of this "
        "node's own; inline: each frame's request runs to completion in the thread of the stage before (no "
        "thread hop, one request): for a small second model whose frames mostly have nothing to run")
    reset_state: Literal["per_stream", "never"] = Field(
        "per_stream", description="stateful models: one state per stream (saved/restored), reset at frame 0")

    @model_validator(mode="after")
    def _split_names_devices_used_together(self) -> InferenceConfig:
        """``split`` names devices of ``device``'s list of devices used together, and only with one."""
        if not self.split:
            return self
        together = [[d.strip().upper() if ":" not in d else d.strip() for d in alt.split("+")]
                    for alt in re.split(r",", ",".join([self.device] if isinstance(self.device, str) else self.device))
                    if "+" in alt]
        names = {d for alt in together for d in alt}
        unknown = sorted(set(self.split) - names)
        if not together or unknown:
            raise ValueError(f"split: {', '.join(unknown or sorted(self.split))}: expected devices of device's list "
                             f"of devices used together ('GPU+CPU'), got device: {self.device}")
        return self

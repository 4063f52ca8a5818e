"""A node's model made for its device: read (a registry model, a file, the part of one a node runs), fitted to
the tensor its producer writes (static shapes, a batch, the producer's preprocessing folded in) and compiled;
or a precompiled blob imported and checked against that tensor."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from flowpipe import models
from flowpipe.accel import openvino as ovx
from flowpipe.accel.openvino import Compiled, OpenVino
from flowpipe.contracts import Offer

from .batching import Entries
from .config import InferenceConfig


class ModelCompiler:
    """Compiles one node's model for ``device`` (``compile``), and says how its results come out: ``whole``,
    the outputs that do not depend on the batch (every frame gets them whole); ``serial``, a model whose batch
    cannot change run one entry at a time (``entries.variable`` is then off)."""

    def __init__(self, config: InferenceConfig, device: str, entries: Entries, placement: str) -> None:
        self.config = config
        self.device = device
        self.batch = config.batch
        self.entries = entries
        self.placement = placement  # where the input's memory lives (the allocation's placement)
        self.part = models.part_of(config.model)  # the part of a registry model it runs (``cut``), or None
        self.whole: set[int] = set()
        self.serial = False

    def compile(self, ov_owner: OpenVino, offer: Offer, config: dict[str, Any]) -> Compiled:
        """The precompiled blob, or the model fitted to the producer's tensor and compiled; with a batch
        added here, checked to keep each frame's results a block of their own."""
        c = self.config
        if c.blob:
            comp = ov_owner.import_blob(Path(c.blob).expanduser(), self.device, config)
            self.whole = set(comp.extra.get("blob_header", {}).get("whole_outputs", []))
            self._blob_fits(comp, offer)
            return comp
        path = models.resolve(c.model, sha256=c.model_sha256)
        model = ov_owner.read_model(path, self.part)
        batch_before = ovx.static_batch(model)
        variable = self.entries.variable
        try:
            model = self._fit_model(model, offer)
            batched = batch_before == 1 and ovx.static_batch(model) not in (None, 1)
            if variable:  # each request runs the entries its frame has, up to the producer's bound
                if batched:  # each entry's results a block of their own: checked at the bound (static)
                    static = ov_owner.compile(model, self.device, config)
                    ovx.check_batch_layout(ov_owner, static.model, str(path), self.device, config, self.part)
                model = ovx.bounded_batch(model)
            self.whole = ovx.batch_free_outputs(model)
            comp = ov_owner.compile(model, self.device, config)
            if batched and not variable:
                ovx.check_batch_layout(ov_owner, comp.model, str(path), self.device, config, self.part)
            return comp
        except ValueError as e:  # a batch its graph cannot take, or one it takes but mixes the entries' results
            if not (self.entries.up_to and batch_before == 1):  # not entries that could run one at a time
                raise
            return self._compile_serial(ov_owner, path, offer, config, e)

    def _compile_serial(self, ov_owner: OpenVino, path: Path, offer: Offer, config: dict[str, Any],
                        why: ValueError) -> Compiled:
        """A model whose batch cannot change (MoveNet: its graph picks one person's keypoints), under a
        producer that fills several entries a frame (objects): compiled at batch 1, each entry a run of its
        own (``run_inline``) from host memory, its results in its own block of the outputs."""
        assert offer.tensor is not None
        name = self.config.model or self.config.blob
        if self.config.requests != "inline":
            raise ValueError(f"model {name}: its batch cannot change ({why}); expected requests: inline, which "
                             "runs each entry on its own") from why
        if self.placement == "opencl":
            raise ValueError(f"model {name}: its batch cannot change, and each entry runs on its own from host "
                             f"memory; expected its preprocess '{offer.producer}' on backend: cpu") from why
        one = dataclasses.replace(offer, tensor=dataclasses.replace(offer.tensor, shape=(1, *offer.tensor.shape[1:])))
        comp = ov_owner.compile(self._fit_model(ov_owner.read_model(path, self.part), one), self.device, config)
        for o in comp.model.outputs:
            if o.get_partial_shape().is_dynamic or o.get_partial_shape().to_shape()[0] != 1:
                raise ValueError(f"model {name}: its batch cannot change ({why}), and output {o.get_any_name()} "
                                 f"is {o.get_partial_shape()}, not one entry's block [1, ...]: its entries cannot "
                                 "run one at a time either; expected objects: {max: 1}") from why
        self.serial = True
        self.entries.variable = False  # the request runs one entry at a time, not a batch of the frame's
        return comp

    def _blob_fits(self, comp: Compiled, offer: Offer) -> None:
        """A blob's input is fixed when it is compiled: one that is not the tensor the producer writes (a batch
        of tiles, a batch of frames) is refused here, before any frame, with the shape to compile it for."""
        want = offer.tensor.shape if offer.tensor is not None else None
        pshape = comp.model.inputs[0].get_partial_shape()
        if want is None or pshape.is_dynamic:
            return
        if self.batch > 1:
            want = (want[0] * self.batch, *want[1:])
        have = tuple(pshape.to_shape())
        if tuple(want) != have:
            by = offer.producer or "the producer"
            raise ValueError(f"blob {self.config.blob}: its input is {list(have)}, but {by} writes {list(want)}; "
                             f"compile it for that: flowpipe compile {self.config.model or 'MODEL'} --shape "
                             f"{','.join(map(str, want))}")

    def _fit_model(self, model: Any, offer: Offer) -> Any:
        """Static shapes from the tensor the producer declares (times the batch), or the producer's
        preprocessing folded into the model (PrePostProcessor)."""
        if offer.model_preprocessing is not None:
            if self.part:  # a cut model: its batch static, its anchors constants
                shape = model.inputs[0].get_partial_shape()
                model.reshape([self.batch, *(d.get_length() for d in list(shape)[1:])])
                ovx.fold(model)
            return ovx.with_ppp(model, **offer.model_preprocessing)
        want = offer.tensor.shape if offer.tensor is not None else None
        if want is not None and self.batch > 1:  # several frames (each one or more entries) per request
            want = (want[0] * self.batch, *want[1:])
        c = self.config
        any_size = c.any_size if c.any_size is not None else (
            models.is_registry_name(c.model) and bool(models.entry(c.model)["input"].get("any_size")))
        if offer.tensor is not None and models.is_registry_name(c.model) and not c.blob:
            ps = model.inputs[0].get_partial_shape()
            sized = any_size or len(ps) != 4 or any(d.is_dynamic for d in list(ps)[1:])  # H, W the model's own?
            _fits_registry(c.model, offer.tensor.shape, offer.tensor.dtype, offer.producer or "upstream", sized)
        fitted = ovx.fit_input(model, want, self.device, offer.producer or None, any_size)
        return ovx.fold(fitted) if self.part else fitted  # a cut model's anchors: constants


_DTYPES = {"u8": "uint8", "f16": "float16", "f32": "float32"}


def _fits_registry(name: str, shape: tuple[int, ...], dtype: str, producer: str, any_size: bool) -> None:
    """The producer's tensor against the registry's input of model ``name`` (its size, unless the model takes
    any (``any_size``: its height and width dynamic, or placeholders), layout and type): a mismatch is said in
    the preprocess's own words before OpenVINO reshapes the model into it (a model whose batch is dynamic
    takes any shape there, and fails deep inside with its own message)."""
    spec = models.entry(name)["input"]
    layout, dims = spec.get("layout", "NCHW"), spec["shape"]
    if len(dims) != 4 or layout not in ("NHWC", "NCHW"):
        return  # not a picture's tensor: OpenVINO says what it takes
    want_dtype = _DTYPES.get(spec.get("dtype", "f32"), "float32")
    h, w, c = (dims[1], dims[2], dims[3]) if layout == "NHWC" else (dims[2], dims[3], dims[1])
    got = tuple(shape[1:])
    expected = (h, w, c) if layout == "NHWC" else (c, h, w)
    fits = got == expected or (any_size and len(got) == 3 and (got[2] if layout == "NHWC" else got[0]) == c)
    if not fits or dtype != want_dtype:
        raise ValueError(
            f"model {name} takes [{', '.join(map(str, [1, *expected]))}] {layout} {spec.get('dtype', 'f32')}"
            f"{' of any height and width' if any_size else ''}; '{producer}' produces {list(shape)} "
            f"{next((k for k, v in _DTYPES.items() if v == dtype), dtype)}: expected "
            f"{'' if any_size else f'size: [{w}, {h}], '}layout: {layout}, dtype: {spec.get('dtype', 'f32')} "
            "in its config (flowpipe models list gives each model's input)")

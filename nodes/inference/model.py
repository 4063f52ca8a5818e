"""A node's model made for its device: read (a registry model, a file, the part of one a node runs), fitted to
the tensor its producer writes (static shapes, a batch, the producer's preprocessing folded in) and compiled;
or a precompiled blob imported and checked against that tensor."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from flowpipe import exported, models
from flowpipe.accel import openvino as ovx
from flowpipe.accel.openvino import Compiled, OpenVino
from flowpipe.contracts import ModelInput, Offer

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
        any_size = c.any_size if c.any_size is not None else models.takes_any_size(c.model)
        ps = model.inputs[0].get_partial_shape()
        takes = model_input(c, len(ps) != 4 or any(d.is_dynamic for d in list(ps)[1:]))  # H, W the model's own?
        if offer.tensor is not None and takes is not None:  # as validation did, with the tensor it got
            why = takes.refusal(offer.tensor, offer.producer or "upstream")
            if why is not None:
                raise ValueError(why)
        fitted = ovx.fit_input(model, want, self.device, offer.producer or None, any_size)
        return ovx.fold(fitted) if self.part else fitted  # a cut model's anchors: constants


def model_input(c: InferenceConfig, dynamic: bool | None = None) -> ModelInput | None:
    """What the registry says model ``c.model`` takes, its height and width any where the config or the registry
    says so, or where the model's own input leaves them open (``dynamic``: as read when the node opens; None:
    the file in this host's cache, read without compiling, where it is there; validation fetches nothing).
    None for a model file, a URL or a blob, whose input OpenVINO says."""
    if c.blob or not models.is_registry_name(c.model):
        return None
    spec = models.entry(c.model)["input"]
    any_size = c.any_size if c.any_size is not None else bool(spec.get("any_size"))
    if not any_size:
        any_size = _open_here(c.model) if dynamic is None else dynamic
    return ModelInput(c.model, tuple(int(d) for d in spec["shape"]), spec.get("layout", "NCHW"),
                      spec.get("dtype", "f32"), any_size)


def _open_here(name: str) -> bool:
    """Whether registry model ``name``'s file in this host's cache leaves its height or width open (or is no
    picture's [N, ., ., .]); False where it is not there, or is a TensorFlow graph (converting one takes
    seconds, and the registry says those that take any size) or a cut model's (the cut's input is the
    registry's)."""
    if models.entry(name).get("cut"):
        return False
    path = models.cached_path(name)
    if path.suffix not in (".onnx", ".xml", ".tflite") or not path.is_file():
        return False
    try:
        shape = exported.read_file(path)[1]
    except Exception:  # noqa: BLE001 - a file OpenVINO cannot read is said when the node opens
        return False
    return len(shape) != 4 or any(d <= 0 for d in shape[1:])

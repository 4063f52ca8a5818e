"""The packet that moves through a graph: a frame, its planes and the metadata stages attach."""
from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import FrameError

FORMATS = ("BGR", "RGB", "GRAY", "NV12", "I420", "TENSOR")


@dataclass
class Detection:
    """One object: box in source-frame pixels (x1, y1, x2, y2), score, label, optional track id, and
    whether it was detected or predicted."""

    box: tuple[float, float, float, float]
    score: float
    label: str = "object"
    label_id: int = 0
    track_id: int | None = None
    keypoints: list[tuple[float, float]] | None = None
    #: ``detection``: found in this frame; ``predicted``: where a tracked object that the detector missed
    #: in this frame is expected (a track coasting through a miss); ``interpolated``: where a tracked object
    #: was in a frame the detector's interval passed over, between the frames it ran on
    source: str = "detection"
    #: what later stages found out about the object, by name (a second model's look at its crop:
    #: ``{"face": 0.81}``)
    attributes: dict[str, float] = field(default_factory=dict)
    #: each keypoint's score, where the model gives them (a pose head's visibility)
    keypoint_scores: list[float] | None = None
    #: the object's outline (x, y points in source pixels), where a segmentation head gives a mask
    mask: list[list[float]] | None = None

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"label": self.label, "score": round(float(self.score), 4),
                             "box": [round(float(v), 1) for v in self.box], "source": self.source}
        if self.track_id is not None:
            d["track_id"] = self.track_id
        if self.attributes:
            d["attributes"] = {k: round(float(v), 4) for k, v in self.attributes.items()}
        if self.keypoints is not None:
            scores = self.keypoint_scores or []
            d["keypoints"] = [[round(float(x), 1), round(float(y), 1), *([round(float(scores[i]), 3)]
                                                                         if i < len(scores) else [])]
                              for i, (x, y) in enumerate(self.keypoints)]
        if self.mask is not None:
            d["mask"] = self.mask
        return d


@dataclass(frozen=True)
class Placement:
    """Where one entry of a tensor got its picture: the part of the frame it shows (``roi``: x, y, width,
    height in source pixels), scaled to ``new_w`` x ``new_h`` tensor pixels at ``pad_x``, ``pad_y`` (the rest
    is padding). The whole picture letterboxed or stretched, one tile, or the square around one object."""

    roi: tuple[int, int, int, int]
    new_w: int
    new_h: int
    pad_x: int
    pad_y: int

    @property
    def scale(self) -> tuple[float, float]:
        return self.new_w / self.roi[2], self.new_h / self.roi[3]

    def to_source(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Tensor pixel coordinates -> source frame pixel coordinates."""
        sx, sy = self.scale
        return (x - self.pad_x) / sx + self.roi[0], (y - self.pad_y) / sy + self.roi[1]


@dataclass(frozen=True)
class TensorLayout:
    """How a frame's picture was laid into its input tensor (``frame.layout``). The ``preprocess`` node
    writes it with the tensor; the decoders read it to map what a model found back onto the frame, the
    second looks (``blazeface_check``, ``centerface_check``) to know which object each entry shows, and the
    inference to run only the entries a frame filled of a tensor declared ``up_to``."""

    #: the preprocess node that wrote the tensor
    node: str
    #: the tensor's width and height (pixels)
    tensor: tuple[int, int]
    #: one per batch entry: the whole picture; a tile each; with objects a crop each
    places: tuple[Placement, ...]
    #: with objects: the index in ``frame.detections`` of the object each entry shows, in entry order
    objects: tuple[int, ...] | None = None
    #: with objects: how many entries of the ``up_to`` tensor this frame filled (none: all of them)
    filled: int | None = None


class FrameRef:
    """Shared by a frame and every packet derived from it: counts live references across fan-out,
    holds the buffer leases, and reports the frame's fate once when the last reference ends."""

    __slots__ = ("_lock", "_on_final", "count", "fate", "index", "leases", "stream", "t_in")

    def __init__(self, stream: str, index: int, on_final: Callable[[FrameRef], None] | None = None):
        self.count = 1
        self.fate = "out"
        self.leases: list[Any] = []
        self._lock = threading.Lock()
        self._on_final = on_final
        self.stream, self.index = stream, index
        self.t_in = 0.0  # when it entered the run (perf_counter): end-to-end latency per stream

    def report_to(self, on_final: Callable[[FrameRef], None]) -> None:
        """Where this frame's fate goes when its last reference ends (the run that accounts for it)."""
        if self._on_final is not None and self._on_final != on_final:
            raise RuntimeError(f"frame {self.stream}:{self.index} is already accounted for by another run")
        self._on_final = on_final

    def add(self, n: int) -> None:
        with self._lock:
            self.count += n
            final = self.count == 0
        if final:
            self._finish()

    def end(self, fate: str = "out") -> None:
        """One reference ends: delivered ("out"), "dropped" by a policy, or "failed"."""
        rank = {"out": 0, "dropped": 1, "failed": 2}
        with self._lock:
            if rank[fate] > rank[self.fate]:
                self.fate = fate
            self.count -= 1
            final = self.count == 0
        if final:
            self._finish()

    def _finish(self) -> None:
        for lease in self.leases:
            lease.release()
        self.leases.clear()
        if self._on_final is not None:
            self._on_final(self)


@dataclass(eq=False)
class Frame:
    """A video frame (or tensor) and everything stages attach to it.

    ``data`` is the pixel memory (a view over a shared buffer where the source uses a pool):
    BGR/RGB ``(H, W, 3)``, GRAY ``(H, W)``, NV12/I420 ``(H * 3 // 2, W)``.
    """

    stream: str
    index: int
    pts: float
    data: np.ndarray | None = None
    format: str = "BGR"
    meta: dict[str, Any] = field(default_factory=dict)
    tensors: dict[str, Any] = field(default_factory=dict)
    detections: list[Detection] = field(default_factory=list)
    ref: FrameRef | None = None
    #: how the preprocess laid the picture into ``tensors["input"]`` (None before a preprocess)
    layout: TensorLayout | None = None
    #: the preprocess whose detector interval passed over this frame (nothing was sought in it; a tracker
    #: fills its objects in from the frames around it), or None
    skipped: str | None = None

    @property
    def image(self) -> np.ndarray:
        """The pixels, for stages that need them (a frame that carries only tensors is a FrameError)."""
        if self.data is None:
            raise FrameError(self, f"frame {self.index} of stream '{self.stream}' carries no image")
        return self.data

    def gray(self) -> np.ndarray:
        """The pixels as gray ``(H, W)``: the luma plane itself for YUV frames (no conversion), the image for GRAY,
        a converted copy for BGR and RGB (what a picture's change or motion is measured on)."""
        import cv2

        img = self.image
        if self.format in ("NV12", "I420"):
            return img[:self.height]
        if self.format == "GRAY":
            return img
        return cv2.cvtColor(img, cv2.COLOR_RGB2GRAY if self.format == "RGB" else cv2.COLOR_BGR2GRAY)

    def bgr(self) -> np.ndarray:
        """The pixels as BGR ``(H, W, 3)``: the image itself for BGR frames, a converted copy otherwise (for
        stages that look now and then, like previews; stages on every frame work in the frame's format)."""
        import cv2

        img = self.image
        code = {"RGB": cv2.COLOR_RGB2BGR, "GRAY": cv2.COLOR_GRAY2BGR, "NV12": cv2.COLOR_YUV2BGR_NV12,
                "I420": cv2.COLOR_YUV2BGR_I420}.get(self.format)
        return img if code is None else cv2.cvtColor(img, code)

    def hold(self, lease: Any) -> None:
        """Keep ``lease`` (a pooled buffer this frame's data or tensors live in) until the frame's last
        reference ends; a frame made outside a run gets its reference here."""
        if self.ref is None:
            self.ref = FrameRef(self.stream, self.index)
        self.ref.leases.append(lease)

    def release_memory(self) -> bool:
        """Give back every pooled buffer the frame holds (its pixels, its tensors) before it ends, where this
        packet is the frame's only reader: a stage that keeps a frame past the last one that reads its memory
        (a writer that holds it until its file has it) keeps only its metadata. False (nothing given back)
        where another packet of the frame is still on its way."""
        ref = self.ref
        if ref is None or ref.count != 1:
            return False
        leases, ref.leases = ref.leases, []
        for lease in leases:
            lease.release()
        self.data, self.tensors = None, {}
        return True

    def end(self, fate: str) -> None:
        """End this packet's reference to its frame (see ``FrameRef.end``); no-op outside a run."""
        if self.ref is not None:
            self.ref.end(fate)

    @property
    def height(self) -> int:
        assert self.data is not None
        return self.data.shape[0] * 2 // 3 if self.format in ("NV12", "I420") else self.data.shape[0]

    @property
    def width(self) -> int:
        assert self.data is not None
        return self.data.shape[1]

    @property
    def buffer(self) -> Any:
        """The pooled SharedBuffer that ``data`` is a view of, else None (a frame may hold other leases,
        such as its tensor's, that are not its pixels)."""
        return self.buffer_of(self.data)

    def buffer_of(self, array: Any) -> Any:
        """The pooled SharedBuffer that ``array`` is a view of, or None."""
        lease = self.lease_of(array)
        return lease.buffer if lease is not None else None

    def lease_of(self, array: Any) -> Any:
        """The lease this frame holds whose buffer ``array`` is a view of (its ``pool`` is where it came
        from), or None."""
        if self.ref is None or not isinstance(array, np.ndarray):
            return None
        addr = array.ctypes.data
        for lease in self.ref.leases:
            buf = getattr(lease, "buffer", None)
            base = getattr(buf, "address", None)  # device memory (an OpenCL buffer) has no host address
            if buf is not None and base is not None and base <= addr < base + buf.size:
                return lease
        return None

    @property
    def memory(self) -> str:
        buf = self.buffer
        return buf.kind if buf is not None else ("heap" if self.data is not None else "none")

    def planes(self) -> dict[str, np.ndarray]:
        """Per-plane views (no copies): Y/UV for NV12, Y/U/V for I420, the image otherwise."""
        assert self.data is not None
        h, w = self.height, self.width
        if self.format == "NV12":
            return {"Y": self.data[:h], "UV": self.data[h:].reshape(h // 2, w // 2, 2)}
        if self.format == "I420":
            flat = self.data.reshape(-1)
            q = (h // 2) * (w // 2)
            return {"Y": self.data[:h], "U": flat[h * w:h * w + q].reshape(h // 2, w // 2),
                    "V": flat[h * w + q:h * w + 2 * q].reshape(h // 2, w // 2)}
        return {self.format: self.data}


def unknown_labels(wanted: list[str] | None, known: list[str] | None, what: str) -> str | None:
    """What is wrong with ``wanted`` where the class names are ``known`` (a model's, as the inference node
    puts them in a frame's ``meta["labels"]``): a label no class has, with the nearest one; else None. A
    misspelt class would otherwise find and count nothing, silently."""
    import difflib

    if not wanted or not known:
        return None
    bad = [w for w in wanted if w not in known]
    if not bad:
        return None
    near = difflib.get_close_matches(bad[0], known, n=1)
    hint = f"; did you mean {near[0]!r}?" if near else f" (the model's: {', '.join(map(str, known[:12]))}, ...)"
    return f"{what}: no class {bad[0]!r} in the model's labels{hint}"

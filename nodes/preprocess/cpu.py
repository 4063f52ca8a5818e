"""The OpenCV + numpy backend: each entry converted to the tensor's colour, resized and normalized into its
place in pooled tensor memory; several entries (tiles, objects) put together in 8 bits and normalized at
once."""
from __future__ import annotations

from typing import Any

import cv2
import numpy as np

from flowpipe.frame import Frame

from .config import PreprocessConfig
from .geometry import Geometry
from .tensor import DTYPES, TensorMemory

#: YUV and BGR/RGB frames straight to the tensor's colour order (one OpenCV call)
_TO_COLOR = {("NV12", "RGB"): cv2.COLOR_YUV2RGB_NV12, ("NV12", "BGR"): cv2.COLOR_YUV2BGR_NV12,
             ("I420", "RGB"): cv2.COLOR_YUV2RGB_I420, ("I420", "BGR"): cv2.COLOR_YUV2BGR_I420,
             ("BGR", "RGB"): cv2.COLOR_BGR2RGB, ("RGB", "BGR"): cv2.COLOR_RGB2BGR, ("GRAY", "BGR"): cv2.COLOR_GRAY2BGR,
             ("GRAY", "RGB"): cv2.COLOR_GRAY2RGB}


def _in_color(frame: Frame, color: str) -> np.ndarray:
    """The frame's pixels (the whole picture) as BGR or RGB, or a gray frame as it is."""
    return frame.image if frame.format == color else cv2.cvtColor(frame.image, _TO_COLOR[frame.format, color])


def host_norm(c: PreprocessConfig) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """float32 mean (None where mean and scale leave the values as they are) and 1/scale per channel, and
    the padding per channel as the tensor holds it (pad_value normalized like a pixel)."""
    ch = 1 if c.color == "GRAY" else 3
    mean = np.asarray(c.mean[:ch], np.float32)
    inv = np.asarray([1.0 / s for s in c.scale[:ch]], np.float32)
    pad = (np.full(ch, c.pad_value, np.float32) - mean) * inv
    if c.dtype == "u8":
        pad = np.clip(np.rint(pad), 0, 255)
    plain = not mean.any() and bool((inv == 1).all())
    return None if plain else mean, inv, pad.astype(DTYPES[c.dtype][1])


def canvas_pad(c: PreprocessConfig) -> int | None:
    """The padding as an 8-bit pixel where entries can be put together in 8 bits and normalized at once
    (a float tensor in colour, a whole pad value); else None."""
    whole = float(c.pad_value).is_integer() and 0 <= c.pad_value <= 255
    return int(c.pad_value) if whole and c.dtype != "u8" and c.color != "GRAY" else None


class CpuBackend:
    """Writes tensors with OpenCV and numpy (``memory``: where one frame's entries lie; only ``write``
    needs it, ``entry`` writes into any array)."""

    def __init__(self, config: PreprocessConfig, memory: TensorMemory | None = None):
        self.config = config
        self.memory = memory
        self._norm = host_norm(config)
        self._canvas_pad = canvas_pad(config)

    def write(self, frame: Frame, geos: list[Geometry], lease: Any, base: int) -> np.ndarray:
        """The frame's entries for ``geos``, written from entry ``base`` of ``lease``'s buffer on."""
        assert self.memory is not None, "the node gives the memory it writes into"
        out = self.memory.view(lease, base)
        if len(geos) > 1 and self._canvas_pad is not None:
            self.entries(self.picture(frame), geos, out)
        else:
            picture = self.picture(frame) if len(geos) > 1 else None  # converted once for all entries
            for i, geo in enumerate(geos):
                self.entry(frame, geo, out[i], picture)
        return out

    def close(self) -> None:
        pass

    def picture(self, frame: Frame) -> np.ndarray:
        """The whole picture in the colour ``entry`` crops from (BGR where the tensor is gray)."""
        c = self.config
        return frame.bgr() if c.color == "GRAY" and frame.format != "GRAY" else _in_color(frame, c.color)

    def entry(self, frame: Frame, geo: Geometry, out: np.ndarray, picture: np.ndarray | None = None) -> None:
        """One batch entry (``out`` is [C,H,W] or [H,W,C]) with OpenCV: the picture converted straight to the
        tensor's colour order (YUV -> RGB in one call), resized where it must be, and written once into its
        place, mean and scale applied on the way; only the padding around it is filled. The values are the
        same as filling a padded canvas and normalizing it whole (the same float32 operations)."""
        c = self.config
        x, y, w, h = geo.roi
        gray = c.color == "GRAY" and frame.format != "GRAY"  # luma of the resized BGR, as the kernel takes it
        img = (picture if picture is not None else self.picture(frame))[y:y + h, x:x + w]
        if (geo.new_w, geo.new_h) != (w, h):
            img = cv2.resize(img, (geo.new_w, geo.new_h), interpolation=cv2.INTER_LINEAR)
        if gray:
            img = cv2.cvtColor(img, cv2.COLOR_BGR2GRAY)
        if img.ndim == 2:
            img = img[..., None]
        mean, inv, pad = self._norm
        nchw = c.layout == "NCHW"
        px, py, nw, nh = geo.pad_x, geo.pad_y, geo.new_w, geo.new_h
        if mean is None:  # 0..255 as they are: the one cast is the one pass
            values: np.ndarray = img
        else:
            values = (img.astype(np.float32) - mean) * inv
            if c.dtype == "u8":
                values = np.clip(np.rint(values), 0, 255)
        if nchw:
            np.copyto(out[:, py:py + nh, px:px + nw], values.transpose(2, 0, 1), casting="unsafe")
        else:
            np.copyto(out[py:py + nh, px:px + nw], values, casting="unsafe")
        oh, ow = (out.shape[1], out.shape[2]) if nchw else (out.shape[0], out.shape[1])
        if px or py or nw != ow or nh != oh:
            view = out.transpose(1, 2, 0) if nchw else out  # HWC either way: one pad value per channel
            view[:py] = pad
            view[py + nh:] = pad
            view[py:py + nh, :px] = pad
            view[py:py + nh, px + nw:] = pad

    def entries(self, picture: np.ndarray, geos: list[Geometry], out: np.ndarray) -> None:
        """Several entries (tiles, objects) with OpenCV: each resized into its place on an 8-bit canvas of
        them all, then normalized in one pass into ``out`` (per entry the same values as ``entry``'s, but
        the per-entry work is one resize: 0.04 ms an entry instead of 0.15 at 128x128)."""
        c = self.config
        k = len(geos)
        nchw = c.layout == "NCHW"
        oh, ow = (out.shape[2], out.shape[3]) if nchw else (out.shape[1], out.shape[2])
        canvas = np.full((k, oh, ow, picture.shape[2]), self._canvas_pad, np.uint8)
        for i, geo in enumerate(geos):
            x, y, w, h = geo.roi
            img = picture[y:y + h, x:x + w]
            if (geo.new_w, geo.new_h) != (w, h):
                img = cv2.resize(img, (geo.new_w, geo.new_h), interpolation=cv2.INTER_LINEAR)
            canvas[i, geo.pad_y:geo.pad_y + geo.new_h, geo.pad_x:geo.pad_x + geo.new_w] = img
        dst = out[:k]
        src = canvas.transpose(0, 3, 1, 2) if nchw else canvas
        mean, inv, _ = self._norm
        if mean is None:
            np.copyto(dst, src, casting="unsafe")
            return
        offset = mean * inv
        if (inv == inv[0]).all() and (offset == offset[0]).all():  # one scalar for every channel: fast loops
            np.multiply(src, inv[0], out=dst, casting="unsafe")
            np.subtract(dst, offset[0], out=dst, casting="unsafe")
            return
        for ch in range(len(inv)):
            part, into = (src[:, ch], dst[:, ch]) if nchw else (src[..., ch], dst[..., ch])
            np.multiply(part, inv[ch], out=into, casting="unsafe")
            np.subtract(into, offset[ch], out=into, casting="unsafe")

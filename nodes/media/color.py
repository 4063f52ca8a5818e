"""YUV -> BGR as FFmpeg converts it (swscale's BT.601 limited-range fixed point, chroma of each 2x2 block):
decoding straight to BGR and decoding to NV12/I420 then converting give the very same pixels. The OpenCL
preprocess kernel uses the same integers (``flowpipe/kernels/preprocess.cl``); this numpy copy is what the
kernel is checked against (the host preprocess path keeps OpenCV's cheaper conversion: this one costs about
10 ms per 1366x768 frame)."""
from __future__ import annotations

import numpy as np

Y_GAIN, U_TO_B, U_TO_G, V_TO_G, V_TO_R = 9539, 16525, -3209, -6660, 13075  # Q13

_I = np.arange(256, dtype=np.int32)
_LUMA = ((_I - 16) * Y_GAIN) >> 13
_UB, _UG, _VG, _VR = (((_I - 128) * k) >> 13 for k in (U_TO_B, U_TO_G, V_TO_G, V_TO_R))


def chroma_planes(planes: np.ndarray, fmt: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The Y plane and the U and V planes (half size each way) of NV12 or I420 data ``(H * 3 // 2, W)``."""
    h = planes.shape[0] * 2 // 3
    w = planes.shape[1]
    if fmt == "NV12":
        uv = planes[h:].reshape(h // 2, w // 2, 2)
        return planes[:h], uv[..., 0], uv[..., 1]
    if fmt == "I420":
        chroma = planes[h:].reshape(2, h // 2, w // 2)
        return planes[:h], chroma[0], chroma[1]
    raise ValueError(f"expected NV12 or I420 planes, got {fmt}")


def yuv_to_bgr(planes: np.ndarray, fmt: str) -> np.ndarray:
    """BGR ``(H, W, 3)`` uint8 of NV12 or I420 planes, equal to FFmpeg's ``bgr24`` of the same picture."""
    y, u, v = chroma_planes(planes, fmt)
    luma = _LUMA[y]
    up = (lambda a: np.repeat(np.repeat(a, 2, 0), 2, 1))  # noqa: E731 - the 2x2 block's chroma
    out = np.empty((*y.shape, 3), np.uint8)
    np.clip(luma + up(_UB[u]), 0, 255, out=out[..., 0], casting="unsafe")
    np.clip(luma + up(_UG[u] + _VG[v]), 0, 255, out=out[..., 1], casting="unsafe")
    np.clip(luma + up(_VR[v]), 0, 255, out=out[..., 2], casting="unsafe")
    return out

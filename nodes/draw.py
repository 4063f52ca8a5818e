"""Frame stages that change pixels: blur or pixelate regions (privacy), draw boxes and labels."""
from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Literal

import cv2
import numpy as np
from pydantic import Field

from flowpipe import memory
from flowpipe.frame import Detection, Frame
from flowpipe.node import Node, NodeConfig, NodeContract, RunContext
from flowpipe.registry import register


def grow_box(box: Sequence[float], grow: float, width: int, height: int) -> tuple[float, float, float, float]:
    """``box`` grown by ``grow`` of its size in all (half on each side), clipped to the picture: the region
    ``blur`` masks (the privacy evaluation scores the same region). Where the picture's edge cuts the margin
    off one side, that part goes on the other: a face the edge cuts keeps its whole margin in the picture,
    on the side where the detector saw the least of it."""
    x1, y1, x2, y2 = box
    gw, gh = (x2 - x1) * grow / 2, (y2 - y1) * grow / 2

    def grown(a: float, b: float, g: float, end: float) -> tuple[float, float]:
        lost_a, lost_b = min(g, max(0.0, g - a)), min(g, max(0.0, b + g - end))  # margin past each edge
        return max(0.0, a - g - lost_b), min(end, b + g + lost_a)

    gx1, gx2 = grown(x1, x2, gw, float(width))
    gy1, gy2 = grown(y1, y2, gh, float(height))
    return gx1, gy1, gx2, gy2


def _region(frame: Frame, box: tuple[float, ...], grow: float) -> tuple[int, int, int, int] | None:
    gx1, gy1, gx2, gy2 = grow_box(box, grow, frame.width, frame.height)
    x1, y1, x2, y2 = int(gx1), int(gy1), int(np.ceil(gx2)), int(np.ceil(gy2))
    return (x1, y1, x2, y2) if x2 > x1 and y2 > y1 else None


@register("blur")
class Blur(Node):
    """Blurs or pixelates every detected region in place (privacy masking).

    YAML:
        - id: blur
          type: blur
          config: {mode: blur, grow: 0.2}
          inputs: {detections: faces.detections}
    """

    inputs = {"detections": "detections"}
    outputs = {"frame": "detections"}
    @classmethod
    def contract(cls, config: NodeConfig) -> NodeContract:
        return cls.declare(pixels=frozenset({"BGR", "NV12", "I420"}), writes_input=True, one_worker=None)

    class Config(NodeConfig):
        mode: Literal["blur", "pixelate", "fill"] = Field("blur", description="blur: a Gaussian; pixelate: coarse "
                                                          "cells; fill: black")
        grow: float = Field(0.15, ge=0, le=2, description="enlarge each box by this fraction")
        strength: int = Field(8, ge=1, le=64, description="blur: Gaussian sigma = region size / strength (8 leaves "
                                                          "under 1% of the contrast finer than 4 cycles across the "
                                                          "face, at any size); pixelate: cells across")
        labels: list[str] | None = Field(None, description="only these labels (default: all)")

    config: Config

    def process(self, frame: Frame, port: str) -> Frame:
        if frame.format not in ("BGR", "NV12", "I420"):
            raise ValueError(f"blur works on BGR, NV12 or I420 frames, got {frame.format}")
        with memory.cpu_write(frame.buffer_of(frame.data)):  # DMA-BUF frames: sync around the CPU write
            self._apply(frame)
        return frame

    def _apply(self, frame: Frame) -> None:
        """Each region blurred in every plane: full size in BGR or Y, half size in the chroma planes (so YUV
        frames are masked where they are, never converted)."""
        c = self.config
        if frame.format == "BGR":
            planes = [(frame.image, 1, 0)]  # (plane, scale, black in it)
        else:  # video range: black is Y 16, U and V 128
            planes = [(p, 1, 16) if name == "Y" else (p, 2, 128) for name, p in frame.planes().items()]
        for d in frame.detections:
            if c.labels and d.label not in c.labels:
                continue
            r = _region(frame, d.box, c.grow)
            if r is None:
                continue
            for plane, s, black in planes:
                x1, y1, x2, y2 = r[0] // s, r[1] // s, -(-r[2] // s), -(-r[3] // s)
                if x2 > x1 and y2 > y1:
                    self._mask(plane[y1:y2, x1:x2], black)

    def _mask(self, roi: np.ndarray, black: int) -> None:
        c = self.config
        h, w = roi.shape[:2]
        if c.mode == "fill":
            roi[...] = black
        elif c.mode == "pixelate":
            n = c.strength  # cells across the region, in every plane alike
            cells = (max(1, w // max(1, w // n)), max(1, h // max(1, h // n)))
            small = cv2.resize(roi, cells, interpolation=cv2.INTER_AREA)
            cv2.resize(small, (w, h), dst=roi, interpolation=cv2.INTER_NEAREST)
        else:  # a Gaussian of sigma = region / strength, whatever the region's size (the rule: at the default
            # 8, under 1% of the face's contrast finer than 4 cycles across is left; people recognise familiar
            # faces from about 7x10 px). Computed at 4 * strength px across at most (what such a blur leaves
            # needs no more) and scaled back: the cost does not grow with the face.
            f = max(1.0, max(w, h) / (4 * c.strength))
            size = (max(1, round(w / f)), max(1, round(h / f)))
            small = cv2.resize(roi, size, interpolation=cv2.INTER_AREA) if f > 1 else roi
            sh, sw = small.shape[:2]
            cv2.GaussianBlur(small, (0, 0), sigmaX=sw / c.strength, sigmaY=sh / c.strength, dst=small,
                             borderType=cv2.BORDER_REPLICATE)
            if f > 1:
                cv2.resize(small, (w, h), dst=roi, interpolation=cv2.INTER_LINEAR)


@register("overlay")
class Overlay(Node):
    """Draws boxes, labels, scores, track ids and the stream's FPS onto the frame in place."""

    inputs = {"detections": "detections"}
    outputs = {"frame": "detections"}
    @classmethod
    def contract(cls, config: NodeConfig) -> NodeContract:
        return cls.declare(pixels=frozenset({"BGR", "NV12", "I420"}), writes_input=True, one_worker=None)

    class Config(NodeConfig):
        color: tuple[int, int, int] = Field((0, 200, 255), description="BGR")
        thickness: int = Field(2, ge=1, le=20, description="lines of boxes, outlines, zones and counting lines, "
                               "in pixels")
        show_fps: bool = Field(True, description="the stream's id and frame rate in the picture's corner")
        show_scores: bool = Field(True, description="each box's score after its label")

    config: Config

    def open(self, ctx: RunContext) -> None:
        self._times: dict[str, list[float]] = {}

    def end_stream(self, stream: str) -> None:
        self._times.pop(stream, None)

    def process(self, frame: Frame, port: str) -> Frame:
        if frame.format not in ("BGR", "NV12", "I420"):
            raise ValueError(f"overlay draws on BGR, NV12 or I420 frames, got {frame.format}")
        with memory.cpu_write(frame.buffer_of(frame.data)):  # DMA-BUF frames: sync around the CPU write
            for region, draw in self._drawings(frame):
                if frame.format == "BGR":
                    draw(frame.image, 0, 0)
                else:  # YUV: only the region drawn on goes through BGR and back
                    x1, y1, x2, y2 = _even(region, frame.width, frame.height)
                    if x2 > x1 and y2 > y1:
                        roi = yuv_region_to_bgr(frame, x1, y1, x2, y2)
                        draw(roi, x1, y1)
                        bgr_to_yuv_region(frame, x1, y1, roi)
        return frame

    def _drawings(self, frame: Frame) -> list[tuple[tuple[int, int, int, int], Any]]:
        """What to draw: (the region it touches, a function drawing it into an image whose top-left corner is
        at x0, y0 of the frame)."""
        c = self.config
        out: list[tuple[tuple[int, int, int, int], Any]] = []
        font, pad = cv2.FONT_HERSHEY_SIMPLEX, c.thickness + 2
        for d in frame.detections:
            x1, y1, x2, y2 = (round(v) for v in d.box)
            text = d.label + (f" #{d.track_id}" if d.track_id is not None else "")
            if c.show_scores:
                text += f" {d.score:.2f}"
            (tw, th), _ = cv2.getTextSize(text, font, 0.5, 1)
            ty = max(12, y1 - 4)

            def box(img: np.ndarray, x0: int, y0: int, b: tuple[int, ...] = (x1, y1, x2, y2), t: str = text,
                    ty: int = ty) -> None:
                cv2.rectangle(img, (b[0] - x0, b[1] - y0), (b[2] - x0, b[3] - y0), c.color, c.thickness)
                cv2.putText(img, t, (b[0] - x0, ty - y0), font, 0.5, c.color, 1, cv2.LINE_AA)

            out.append(((x1 - pad, min(y1, ty - th) - pad, max(x2, x1 + tw) + pad, max(y2, ty) + pad), box))
            out += _outline_and_points(d, c.color, c.thickness)
        out += _shapes(frame, c.color, c.thickness)
        if c.show_fps:
            ts = self._times.setdefault(frame.stream, [])
            ts.append(time.monotonic())
            del ts[:-30]
            fps = (len(ts) - 1) / (ts[-1] - ts[0]) if len(ts) > 1 and ts[-1] > ts[0] else 0.0
            label = f"{frame.stream} {fps:5.1f} fps"
            (tw, th), _ = cv2.getTextSize(label, font, 0.6, 2)

            def rate(img: np.ndarray, x0: int, y0: int, t: str = label) -> None:
                cv2.putText(img, t, (8 - x0, 22 - y0), font, 0.6, (255, 255, 255), 2, cv2.LINE_AA)

            out.append(((0, 0, 8 + tw + 6, 22 + 6), rate))
        return out


def _outline_and_points(d: Detection, color: tuple[int, int, int],
                        thickness: int) -> list[tuple[tuple[int, int, int, int], Any]]:
    """An object's mask outline (a segmentation head's) and its keypoints (a pose head's, those scored 0.3 or
    more where scored), each with the region it touches."""
    out: list[tuple[tuple[int, int, int, int], Any]] = []
    if d.mask:
        pts = np.round(np.asarray(d.mask, np.float64)).astype(np.int32)
        x1, y1 = pts.min(0)
        x2, y2 = pts.max(0)

        def outline(img: np.ndarray, x0: int, y0: int, p: np.ndarray = pts) -> None:
            cv2.polylines(img, [p - np.array([x0, y0], np.int32)], True, color, max(1, thickness - 1), cv2.LINE_AA)

        out.append(((int(x1) - thickness, int(y1) - thickness, int(x2) + thickness, int(y2) + thickness), outline))
    scores = d.keypoint_scores or []
    for i, (x, y) in enumerate(d.keypoints or []):
        if i < len(scores) and scores[i] < 0.3:
            continue
        cx, cy, r = round(x), round(y), thickness + 1

        def point(img: np.ndarray, x0: int, y0: int, at: tuple[int, int] = (cx, cy), r: int = r) -> None:
            cv2.circle(img, (at[0] - x0, at[1] - y0), r, color, -1, cv2.LINE_AA)

        out.append(((cx - r - 1, cy - r - 1, cx + r + 1, cy + r + 1), point))
    return out


def _shapes(frame: Frame, color: tuple[int, int, int], thickness: int) -> list[tuple[tuple[int, int, int, int], Any]]:
    """An analytics node's zones (outlined, with how many are in) and lines (with their totals in and out)."""
    shapes = frame.meta.get("analytics_shapes")
    found = frame.meta.get("analytics", {})
    if not shapes:
        return []
    out: list[tuple[tuple[int, int, int, int], Any]] = []
    font = cv2.FONT_HERSHEY_SIMPLEX
    for kind, items in (("zones", shapes["zones"]), ("lines", shapes["lines"])):
        for name, pts in items.items():
            p = np.array(pts, np.float64).round().astype(np.int32)
            text = shape_text(kind, name, found)
            (tw, th), _ = cv2.getTextSize(text, font, 0.5, 1)
            tx, ty = int(p[:, 0].min()) + 4, int(p[:, 1].min()) + th + 4
            x1, y1 = min(int(p[:, 0].min()), tx), min(int(p[:, 1].min()), ty - th)
            x2, y2 = max(int(p[:, 0].max()), tx + tw), max(int(p[:, 1].max()), ty)
            pad = thickness + 2

            def draw(img: np.ndarray, x0: int, y0: int, p: np.ndarray = p, closed: bool = kind == "zones",
                     t: str = text, at: tuple[int, int] = (tx, ty)) -> None:
                cv2.polylines(img, [p - np.array([x0, y0], np.int32)], closed, color, thickness, cv2.LINE_AA)
                cv2.putText(img, t, (at[0] - x0, at[1] - y0), font, 0.5, color, 1, cv2.LINE_AA)

            out.append(((x1 - pad, y1 - pad, x2 + pad, y2 + pad), draw))
    return out


def shape_text(kind: str, name: str, found: dict[str, Any]) -> str:
    """What is written by a zone (how many are in it) or a line (its totals in and out; per label where more
    than one label crossed it, as a vehicle count wants them: ``car 3/1, bus 1/0``)."""
    if kind == "zones":
        return f"{name}: {found.get('zones', {}).get(name, {}).get('count', 0)}"
    tot = found.get("lines", {}).get(name, {})
    text = f"{name}: in {tot.get('in', 0)} out {tot.get('out', 0)}"
    per = tot.get("labels") or {}
    if len(per) > 1:
        text += " (" + ", ".join(f"{lab} {n.get('in', 0)}/{n.get('out', 0)}" for lab, n in sorted(per.items())) + ")"
    return text


def _even(r: tuple[int, int, int, int], w: int, h: int) -> tuple[int, int, int, int]:
    """A region inside the frame on even coordinates (whole chroma samples)."""
    x1, y1 = max(0, r[0]) & ~1, max(0, r[1]) & ~1
    x2, y2 = min(w, r[2] + (r[2] & 1)), min(h, r[3] + (r[3] & 1))
    return x1, y1, x2 & ~1, y2 & ~1


def yuv_region_to_bgr(frame: Frame, x1: int, y1: int, x2: int, y2: int) -> np.ndarray:
    """A BGR copy of one (even-aligned) region of an NV12/I420 frame."""
    p = frame.planes()
    w, h = x2 - x1, y2 - y1
    y = p["Y"][y1:y2, x1:x2]
    if frame.format == "NV12":
        uv = p["UV"][y1 // 2:y2 // 2, x1 // 2:x2 // 2].reshape(h // 2, w)
        return cv2.cvtColor(np.vstack([y, uv]), cv2.COLOR_YUV2BGR_NV12)
    u, v = p["U"][y1 // 2:y2 // 2, x1 // 2:x2 // 2], p["V"][y1 // 2:y2 // 2, x1 // 2:x2 // 2]
    flat = np.concatenate([y.reshape(-1), u.reshape(-1), v.reshape(-1)])
    return cv2.cvtColor(flat.reshape(h * 3 // 2, w), cv2.COLOR_YUV2BGR_I420)


def bgr_to_yuv_region(frame: Frame, x1: int, y1: int, bgr: np.ndarray) -> None:
    """Writes a BGR region back into an NV12/I420 frame's planes at (x1, y1)."""
    h, w = bgr.shape[:2]
    flat = cv2.cvtColor(bgr, cv2.COLOR_BGR2YUV_I420).reshape(-1)
    q = (h // 2) * (w // 2)
    u, v = flat[h * w:h * w + q].reshape(h // 2, w // 2), flat[h * w + q:].reshape(h // 2, w // 2)
    p = frame.planes()
    p["Y"][y1:y1 + h, x1:x1 + w] = flat[:h * w].reshape(h, w)
    if frame.format == "NV12":
        uv = p["UV"][y1 // 2:(y1 + h) // 2, x1 // 2:(x1 + w) // 2]
        uv[..., 0], uv[..., 1] = u, v
    else:
        p["U"][y1 // 2:(y1 + h) // 2, x1 // 2:(x1 + w) // 2] = u
        p["V"][y1 // 2:(y1 + h) // 2, x1 // 2:(x1 + w) // 2] = v

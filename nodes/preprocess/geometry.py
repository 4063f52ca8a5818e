"""Where a picture (or a part of it) lands in the tensor: letterbox and stretch, tiles, crops around objects.
Pure functions over numbers (and a frame's detections), shared by both backends and the decoders' tests."""
from __future__ import annotations

from typing import Annotated

import numpy as np
from pydantic import Field, model_validator

from flowpipe.frame import Frame, Placement
from flowpipe.node import NodeConfig

from ..track.geometry import share_inside

#: where the (ROI of the) frame, a tile or a crop lands in an entry of the tensor
Geometry = Placement


def geometry(src_w: int, src_h: int, out_w: int, out_h: int, resize: str,
             roi: tuple[int, int, int, int] | None = None, upscale: bool = True) -> Geometry:
    x, y, w, h = roi if roi else (0, 0, src_w, src_h)
    if resize == "letterbox":
        s = min(out_w / w, out_h / h)
        if not upscale:  # a small picture stays at its own scale, padded (a detector that takes any size)
            s = min(s, 1.0)
        new_w, new_h = max(1, min(out_w, round(w * s))), max(1, min(out_h, round(h * s)))
        return Geometry((x, y, w, h), new_w, new_h, (out_w - new_w) // 2, (out_h - new_h) // 2)
    return Geometry((x, y, w, h), out_w, out_h, 0, 0)


def fitted(size: tuple[int, int], picture: tuple[int, int], upscale: bool, align: int) -> tuple[int, int]:
    """The tensor for a letterboxed ``picture``: its letterboxed size in ``size`` rounded up to multiples of
    ``align``, at most ``size``."""
    geo = geometry(picture[0], picture[1], size[0], size[1], "letterbox", None, upscale)
    return min(size[0], -(-geo.new_w // align) * align), min(size[1], -(-geo.new_h // align) * align)


class Tiles(NodeConfig):
    """Cut the frame into a grid of overlapping tiles (plus the whole frame) so small, distant objects
    keep enough pixels after resizing. Each tile is one batch entry of the tensor."""

    grid: tuple[int, int] = Field((2, 2), description="columns, rows")
    overlap: float = Field(0.1, ge=0, lt=1, description="fraction of a tile shared with its neighbour")
    full_frame: bool = Field(True, description="also run on the whole frame (large, close objects)")
    region: tuple[float, float, float, float] | None = Field(
        None, description="x0, y0, x1, y1 as fractions of the picture: the grid covers this part of it alone "
        "(the band round a counting line, a zone), each tile the sharper for it (default: the whole picture)")

    @model_validator(mode="after")
    def _region_inside(self) -> Tiles:
        if self.region is not None:
            x0, y0, x1, y1 = self.region
            if not (0 <= x0 < x1 <= 1 and 0 <= y0 < y1 <= 1):
                raise ValueError(f"region: expected x0, y0, x1, y1 with 0 <= x0 < x1 <= 1 and 0 <= y0 < y1 <= 1, "
                                 f"got {list(self.region)}")
        return self

    @property
    def count(self) -> int:
        return self.grid[0] * self.grid[1] + int(self.full_frame)

    def rois(self, w: int, h: int) -> list[tuple[int, int, int, int] | None]:
        """The whole frame (None), then each tile as x, y, w, h in pixels, row by row."""
        x0, y0, x1, y1 = self.region or (0.0, 0.0, 1.0, 1.0)
        left, top = round(x0 * w), round(y0 * h)
        rw, rh = max(1, round(x1 * w) - left), max(1, round(y1 * h) - top)
        cols, rows = self.grid
        tw = min(rw, int(np.ceil(rw / cols * (1 + self.overlap))))
        th = min(rh, int(np.ceil(rh / rows * (1 + self.overlap))))
        out: list[tuple[int, int, int, int] | None] = [None] if self.full_frame else []
        for r in range(rows):
            for c in range(cols):
                x = 0 if cols == 1 else round(c * (rw - tw) / (cols - 1))
                y = 0 if rows == 1 else round(r * (rh - th) / (rows - 1))
                out.append((left + x, top + y, tw, th))
        return out


class Objects(NodeConfig):
    """One batch entry per object found upstream, for a second model's look at each (DL Streamer's
    gvaclassify, DeepStream's secondary GIE): a square around the object, ``scale`` times its longer side,
    resized to the tensor's size; what lies outside the picture is padding. The tensor has ``max`` entries
    and each frame fills as many as it has objects (``frame.layout.filled``; the inference after
    it runs only those, or none)."""

    scores: tuple[float, float] = Field((0.0, 1.0), description="objects scoring from the first up to (not "
                                        "including) the second: the ones a second look decides about")
    labels: list[str] | None = Field(None, description="only objects with these labels (default: all)")
    attributes: dict[str, tuple[float, float]] | None = Field(None, description="only objects with these "
                                                              "attributes, each from the first value up to (not "
                                                              "including) the second: a cascade, one look at what "
                                                              "an earlier one left in doubt")
    not_holding: dict[str, Annotated[float, Field(ge=0, le=1)]] | None = Field(
        None, description="objects holding (half or more of its box inside theirs) a detection of one of these "
        "labels at its score or more get no entry: a person whose face was found needs no look for the head")
    not_in: dict[str, Annotated[float, Field(ge=0, le=1)]] | None = Field(
        None, description="objects lying (half or more of their box) inside a detection of one of these labels at its "
        "score or more get no entry: a face in a person's box is a person's, and needs no look at what it is")
    max: int = Field(16, ge=1, le=256, description="entries at most (the highest scores first)")
    scale: float = Field(2.0, gt=0, le=8, description="the square's side, in the object's longer sides "
                                                      "(context around it: a face's look needs its head)")
    inside: bool = Field(False, description="slide the square inside the picture where it fits (an object at "
                                            "the edge is seen with the picture around it, off the middle, "
                                            "instead of with padding; its place in the crop is in the metadata)")

    def pick(self, frame: Frame) -> list[int]:
        """The indices of ``frame.detections`` that get an entry, in entry order."""
        lo, hi = self.scores
        chosen = [i for i, d in enumerate(frame.detections) if lo <= d.score < hi
                  and (self.labels is None or d.label in self.labels)
                  and all(a in d.attributes and v[0] <= d.attributes[a] < v[1]
                          for a, v in (self.attributes or {}).items())]
        if self.not_holding:
            held = _found(frame, self.not_holding)
            chosen = [i for i in chosen
                      if not any(j != i and share_inside(b, frame.detections[i].box) >= 0.5 for j, b in held)]
        if self.not_in:
            around = _found(frame, self.not_in)
            chosen = [i for i in chosen
                      if not any(j != i and share_inside(frame.detections[i].box, b) >= 0.5 for j, b in around)]
        return sorted(chosen, key=lambda i: -frame.detections[i].score)[: self.max]

    def geometry(self, box: tuple[float, float, float, float], src_w: int, src_h: int, out_w: int,
                 out_h: int) -> Geometry | None:
        """Where the square around ``box`` lands in an entry: its part inside the picture, scaled, placed
        where it lies in the square; None for a box wholly outside the picture."""
        side = self.scale * max(box[2] - box[0], box[3] - box[1], 1.0)
        sx, sy = (box[0] + box[2] - side) / 2, (box[1] + box[3] - side) / 2
        if self.inside:  # along each axis the picture is wider than the square: slid in
            sx = min(max(sx, 0.0), src_w - side) if side <= src_w else sx
            sy = min(max(sy, 0.0), src_h - side) if side <= src_h else sy
        k = min(out_w, out_h) / side
        x0, y0 = max(0, int(np.floor(sx))), max(0, int(np.floor(sy)))
        x1, y1 = min(src_w, int(np.ceil(sx + side))), min(src_h, int(np.ceil(sy + side)))
        if x1 <= x0 or y1 <= y0:
            return None
        ox, oy = (out_w - side * k) / 2, (out_h - side * k) / 2  # a tensor that is not square: centred
        pad_x = min(out_w - 1, max(0, round(ox + (x0 - sx) * k)))
        pad_y = min(out_h - 1, max(0, round(oy + (y0 - sy) * k)))
        new_w = max(1, min(out_w - pad_x, round((x1 - x0) * k)))
        new_h = max(1, min(out_h - pad_y, round((y1 - y0) * k)))
        return Geometry((x0, y0, x1 - x0, y1 - y0), new_w, new_h, pad_x, pad_y)


def _found(frame: Frame, scores: dict[str, float]) -> list[tuple[int, tuple[float, float, float, float]]]:
    """The frame's detections (index, box) of the labels ``scores`` names, each at its label's score or more."""
    return [(j, d.box) for j, d in enumerate(frame.detections) if d.label in scores and d.score >= scores[d.label]]

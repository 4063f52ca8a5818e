"""A text detector's probability map -> word boxes in source pixels (DB, PaddleOCR's detector)."""
from __future__ import annotations

import cv2
import numpy as np
from pydantic import Field

from flowpipe.frame import Detection, Frame
from flowpipe.node import NodeConfig
from flowpipe.registry import register

from .base import Decoder, box_of, output_of, to_source


@register("db_decode")
class DbDecode(Decoder):
    """Decodes a DB text-detection probability map [1,1,H,W] (PP-OCR) into text boxes."""

    class Config(NodeConfig):
        threshold: float = Field(0.3, ge=0, le=1, description="binarization threshold on the probability map")
        box_threshold: float = Field(0.5, ge=0, le=1, description="minimum mean probability inside a box")
        unclip_ratio: float = Field(1.6, gt=0, description="each box grows by its area x this / its perimeter (DB "
                                    "finds text regions shrunk)")
        min_size: int = Field(3, ge=1, description="regions whose shorter side is under this many pixels of the "
                              "probability map are dropped")
        max_detections: int = Field(1000, ge=1, description="regions looked at a frame at most")
        output: str | None = Field(None, description="the output tensor's name (default: the model's first)")

    config: Config

    def process(self, frame: Frame, port: str) -> Frame:
        if frame.skipped:  # the detector's interval passed over it: nothing was sought
            return frame
        c = self.config
        prob = output_of(frame, c.output, 0)
        if prob.ndim != 4 or prob.shape[1] != 1:
            raise ValueError(f"expected a probability map [1,1,H,W], got {list(prob.shape)}")
        p = prob[0, 0]
        mask = (p > c.threshold).astype(np.uint8)
        contours, _ = cv2.findContours(mask, cv2.RETR_LIST, cv2.CHAIN_APPROX_SIMPLE)
        boxes, scores = [], []
        for cnt in contours[: c.max_detections]:
            x, y, w, h = cv2.boundingRect(cnt)
            if min(w, h) < c.min_size:
                continue
            score = float(p[y:y + h, x:x + w][mask[y:y + h, x:x + w] > 0].mean())
            if score < c.box_threshold:
                continue
            # unclip: DB shrinks text regions; grow by area * ratio / perimeter
            area, peri = cv2.contourArea(cnt), cv2.arcLength(cnt, True)
            d = area * c.unclip_ratio / max(peri, 1e-6)
            boxes.append([x - d, y - d, x + w + d, y + h + d])
            scores.append(score)
        src = to_source(frame, np.asarray(boxes, np.float64).reshape(-1, 4))
        frame.detections = [Detection(box_of(b), s, "text", 0) for b, s in zip(src, scores)]
        return frame



"""A folder of pictures read as a stream: in name order, each turned upright, one that does not decode
skipped and counted."""
from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from flowpipe_nodes.media.decode import turned

log = logging.getLogger("flowpipe.video")
IMAGE_EXT = {".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp"}


class ImageFolder:
    """The pictures (``IMAGE_EXT``) of folder ``uri``, in name order, read as BGR and turned ``rotate``
    degrees clockwise (``auto``: as each picture's EXIF orientation says). One that does not decode is
    skipped, told in the log and counted in ``stats`` (``unreadable``). A folder without pictures is an
    error at open."""

    def __init__(self, uri: str, rotate: str | int, node_id: str, stats: dict[str, Any]) -> None:
        path = Path(os.path.expanduser(uri))
        self.paths = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_EXT)
        if not self.paths:
            raise FileNotFoundError(f"no images ({', '.join(sorted(IMAGE_EXT))}) in folder {uri}")
        self.rotate = rotate
        self.id = node_id
        self.stats = stats
        self.failures = 0

    def pictures(self) -> Iterator[tuple[Path, np.ndarray]]:
        """One pass over the folder: each picture that decodes, with its path."""
        for p in self.paths:
            img = cv2.imread(str(p), cv2.IMREAD_COLOR if self.rotate == "auto" else  # auto: its EXIF orientation
                             cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION)
            if img is not None and self.rotate not in ("auto", 0):
                img = np.ascontiguousarray(turned(img, "BGR", int(self.rotate)))
            if img is None:
                log.warning("node '%s': cannot decode image %s; skipped", self.id, p)
                self.failures += 1
                self.stats["unreadable"] = self.failures
                continue
            yield p, img

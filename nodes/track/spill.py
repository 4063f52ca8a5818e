"""A stream's held frames on disk: what lets a tracker hold a whole recording (``offline``) without holding its
pictures in memory or the source's pool. Each frame's pixels are appended to one file of the stream in a spill
folder and its pooled buffers go back at once; when the stream ends the file is mapped, and each frame reads
its picture there (the kernel's page cache holds what is read). The file has no name from the start: nothing is
left behind, whatever ends the run."""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import overload

import cv2
import numpy as np

from flowpipe.frame import Frame

#: frames a mapping of the spill file holds when they come back
CHUNK = 64
#: the widest picture the backward tracker looks at (wider ones are scaled down: optical flow at half of 1080p
#: follows a face as well, at a quarter of the cost)
LOOK_WIDTH = 960


class Spill:
    """One stream's held frames' pixels in a file of ``folder``."""

    def __init__(self, folder: Path, stream: str):
        self.folder = folder
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", stream)[:40]
        # a file with no name (unlinked as it is made): nothing is left behind however the run ends, kill -9 too
        self.file = tempfile.TemporaryFile(dir=folder, prefix=f"flowpipe-{name}-", suffix=".spill")
        self.where: list[tuple[int, tuple[int, ...], np.dtype]] = []  # per frame: offset, shape, dtype
        self.size = 0

    def room(self, frame: Frame, stream: str) -> None:
        """Refuse, before the first frame is kept, a stream whose frames (as many as its source says it has) do
        not fit the folder's free space."""
        total = int(frame.meta.get("frames") or 0)
        if not total or frame.data is None:
            return
        need = total * frame.data.nbytes
        free = shutil.disk_usage(self.folder).free
        if need > free:
            raise ValueError(f"offline: stream '{stream}' needs {need / 1e9:.1f} GB in the spill folder "
                             f"{self.folder} ({total} frames of {frame.width}x{frame.height} {frame.format}) and "
                             f"{free / 1e9:.1f} GB is free: expected a folder with that room (spill: DIR)")

    def keep(self, frame: Frame) -> int:
        """``frame``'s pixels to the file, its pooled buffers (pixels, tensors) given back: the bytes written."""
        data = frame.image
        self.file.write(np.ascontiguousarray(data).tobytes())
        self.where.append((self.size, data.shape, data.dtype))
        self.size += data.nbytes
        if not frame.release_memory():
            raise ValueError("offline: another branch of the graph still reads this frame's picture: the tracker "
                             "that holds a whole stream must be its only reader")
        return int(data.nbytes)

    def restore(self, frames: Sequence[Frame]) -> None:
        """Each kept frame's picture back (in the order they were kept), as a view of the file mapped ``CHUNK``
        frames a mapping: a mapping goes when its last frame ends, so what the process holds is the frames on
        their way, not the recording (and a stream of hours needs a few thousand mappings, not one a frame).
        Private mappings: what later stages write (the blur) never goes back to the file. The file closes here
        (the mappings hold it until their frames end)."""
        self.file.flush()
        for start in range(0, len(self.where), CHUNK):
            part = self.where[start:start + CHUNK]
            first = part[0][0]
            end = part[-1][0] + int(np.prod(part[-1][1])) * np.dtype(part[-1][2]).itemsize
            mapped = np.memmap(self.file, np.uint8, mode="c", offset=first, shape=(end - first,))
            for f, (at, shape, dtype) in zip(frames[start:start + CHUNK], part, strict=True):
                n = int(np.prod(shape)) * np.dtype(dtype).itemsize
                f.data = mapped[at - first:at - first + n].view(dtype).reshape(shape)
        self.close()

    def close(self) -> None:
        self.file.close()


class Pictures(Sequence[np.ndarray]):
    """Frames' pictures as the backward tracker reads them: gray (their luma plane where they are YUV), scaled to
    ``LOOK_WIDTH`` at most, made when asked for (a recording's frames never all at once in memory)."""

    def __init__(self, frames: Sequence[Frame]):
        self.frames = frames
        w = frames[0].width if frames else 0
        self.scale = min(1.0, LOOK_WIDTH / w) if w else 1.0
        self._last: tuple[int, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.frames)

    @overload
    def __getitem__(self, i: int) -> np.ndarray: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[np.ndarray]: ...

    def __getitem__(self, i: int | slice) -> np.ndarray | Sequence[np.ndarray]:
        if isinstance(i, slice):
            return Pictures(self.frames[i])
        i = i % len(self.frames) if i < 0 else i
        if self._last is not None and self._last[0] == i:
            return self._last[1]
        f = self.frames[i]
        gray = f.gray()
        if self.scale < 1.0:
            gray = cv2.resize(gray, (round(f.width * self.scale), round(f.height * self.scale)),
                              interpolation=cv2.INTER_AREA)
        self._last = (i, gray)
        return gray


def spill_folder(configured: str | None) -> Path:
    """The folder held frames go to: the configured one, else the system's temporary folder."""
    folder = Path(configured) if configured else Path(tempfile.gettempdir())
    if not folder.is_dir():
        raise ValueError(f"offline: spill folder {folder} does not exist; expected a folder (spill: DIR)")
    if not os.access(folder, os.W_OK):
        raise ValueError(f"offline: spill folder {folder} cannot be written; expected a writable folder")
    return folder

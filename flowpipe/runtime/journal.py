"""A run's event journal: every event record its nodes raise or change, one JSON line each, appended as it
happens to one file that every process of the run shares (``GraphSpec.journal``; ``flowpipe serve`` gives each
instance one in its folder and indexes it).

Each record is one ``write`` to a file opened with ``O_APPEND``: the lines of several processes never
interleave, and a record is in the file (the kernel's page cache) once the call returns, whatever becomes of
the process after (a ``kill -9``); a power loss may lose the last ones."""
from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger("flowpipe.journal")


class Journal:
    """Appends records to ``path`` (made with its folder on the first one; readable by its owner only)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._fd: int | None = None
        self._lock = threading.Lock()
        self._failed = False
        self._torn = False  # a record written in part (a full disk): the next begins on a line of its own
        self._closed = False

    def append(self, record: dict[str, Any]) -> None:
        line = (json.dumps(record, default=str, separators=(",", ":")) + "\n").encode()
        with self._lock:
            if self._closed:  # (a node thread that outlived the run's end: its file may be read and gone)
                return
            try:
                if self._fd is None:
                    self.path.parent.mkdir(parents=True, exist_ok=True)
                    self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
                    self._torn = _ends_torn(self._fd)  # a process killed in the middle of a record, before
                _write_all(self._fd, b"\n" + line if self._torn else line)
            except OSError as e:  # a full disk: the run goes on, and says so once (a server still polls its events)
                self._torn = True
                if not self._failed:
                    self._failed = True
                    log.error("%s: %s; event records are not journaled until it can be written", self.path,
                              os.strerror(e.errno or 0))
            else:
                self._failed = self._torn = False

    def close(self) -> None:
        with self._lock:
            fd, self._fd, self._closed = self._fd, None, True
        if fd is not None:
            os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    """``data`` written whole (a write may take part of it: a full disk says so on the next)."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _ends_torn(fd: int) -> bool:
    """Whether the file ends in the middle of a line."""
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


def read(path: str | Path, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """The whole records of ``path`` from byte ``offset`` on, and the offset after the last whole line (a line
    still being written is read next time); a line that is not JSON is skipped, said in the log."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return [], offset
    out, end = read_lines(data, str(path))
    return out, offset + end


def read_lines(data: bytes, where: str = "") -> tuple[list[dict[str, Any]], int]:
    """The records of the whole lines of ``data``, and how many bytes those lines take."""
    end = data.rfind(b"\n") + 1
    out = []
    for line in data[:end].splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            log.warning("%s: a line that is not an event record skipped: %.80r", where, line)
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out, end

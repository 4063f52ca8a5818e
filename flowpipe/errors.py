"""Errors that carry where they happened: file:line, node id and type."""
from __future__ import annotations

import errno
from dataclasses import dataclass
from typing import Any

_CONTROL = {c: f"\\x{c:02x}" for c in range(32)} | {10: "\\n", 13: "\\r", 9: "\\t", 0x7F: "\\x7f"}


def one_line(text: str) -> str:
    """Control characters (newlines from a hostile key, say) escaped: an error stays on one line."""
    return text.translate(_CONTROL)


def _out_of_files(e: BaseException | None) -> bool:
    """Whether ``e``, or an error it was raised from or while handling, is "Too many open files"."""
    seen = 0
    while e is not None and seen < 8:
        if isinstance(e, OSError) and e.errno in (errno.EMFILE, errno.ENFILE):
            return True
        e, seen = e.__cause__ or e.__context__, seen + 1
    return False


def reason(e: BaseException) -> str:
    """``Type: message``, for an error line; one that ran out of open files also says the limit and how to raise it
    (every shared frame buffer is an fd: a stream over shards holds hundreds, README "Open files")."""
    text = f"{type(e).__name__}: {e}"
    if _out_of_files(e):
        try:
            import resource

            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            text += (f" (this process may hold {soft} open files, at most {hard}: every shared frame buffer is one; "
                     "raise the hard limit, e.g. ulimit -Hn or systemd's LimitNOFILE, or run fewer streams a process)")
        except (ImportError, ValueError, OSError):
            pass
    return text


@dataclass(frozen=True)
class Diagnostic:
    """One problem found in a graph, printable as a single line."""

    message: str
    file: str | None = None
    line: int | None = None
    node_id: str | None = None
    node_type: str | None = None

    def __str__(self) -> str:
        where = self.file or "<graph>"
        if self.line is not None:
            where += f":{self.line}"
        parts = [where]
        if self.node_id is not None:
            parts.append(f"node '{self.node_id}'" + (f" ({self.node_type})" if self.node_type else ""))
        parts.append(self.message)
        return one_line(": ".join(parts))


class GraphError(Exception):
    """A graph or its configuration is invalid (CLI exit code 2)."""

    def __init__(self, diagnostics: list[Diagnostic] | Diagnostic | str):
        if isinstance(diagnostics, str):
            diagnostics = Diagnostic(diagnostics)
        if isinstance(diagnostics, Diagnostic):
            diagnostics = [diagnostics]
        self.diagnostics = list(diagnostics)
        super().__init__("\n".join(str(d) for d in self.diagnostics))


class NodeError(Exception):
    """A node failed at run time (CLI exit code 1). Names the node, stream and frame."""

    def __init__(self, node_id: str, node_type: str, message: str,
                 stream: str | None = None, frame: int | None = None,
                 file: str | None = None, line: int | None = None):
        self.node_id, self.node_type, self.message = node_id, node_type, message
        self.stream, self.frame = stream, frame
        self.file, self.line = file, line
        where = f"node '{node_id}' ({node_type})"
        if stream is not None:
            where += f", stream '{stream}'"
        if frame is not None:
            where += f", frame {frame}"
        if file is not None:
            where = f"{file}:{line}: {where}" if line is not None else f"{file}: {where}"
        super().__init__(one_line(f"{where}: {message}"))

    def at(self, file: str, line: int | None) -> NodeError:
        """The same failure, naming the graph file and the line its node starts on."""
        located = NodeError(self.node_id, self.node_type, self.message, self.stream, self.frame, file, line)
        located.__cause__ = self.__cause__
        return located


class NoDeviceError(RuntimeError):
    """None of the devices a node asks for is present on this host."""


class OutputLostError(RuntimeError):
    """What a sink was given reached neither its destination nor a place that keeps it for the next run (MQTT
    messages no broker acknowledged, with no outbox). Raised from ``close``, once every frame has gone through:
    the run ends in exit 1 with this line, naming the node, as a failure does."""


class FrameError(Exception):
    """Raised by a node (often from an async callback) to say which frame failed, or which frames:
    a batched request fails for every frame in it, and the node's ``on_error`` applies to each."""

    def __init__(self, frame: Any, cause: BaseException | str):
        self.frames = list(frame) if isinstance(frame, (list, tuple)) else [frame]
        self.frame, self.cause = self.frames[0], cause
        super().__init__(str(cause))

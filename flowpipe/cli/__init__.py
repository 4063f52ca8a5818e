"""The ``flowpipe`` command line. Exit codes: 0 ok, 1 runtime failure, 2 invalid graph or config,
130 interrupted after a clean shutdown.

This module stays light: the commands import the engine (most of a second), and a Ctrl-C in that second ends
the command as one later does (130, no traceback)."""
from __future__ import annotations

import os
import signal
import sys
from typing import Any


def _interrupts_are_the_parents() -> None:
    """In a child a library forks (OpenVINO's telemetry sends its event from one on import, for up to 3 s):
    the terminal's Ctrl-C reaches it too, and the command decides what it means (a child killed by it printed a
    traceback over the command's own last line). A handler that does nothing, not SIG_IGN: a program the child
    goes on to execute starts with Ctrl-C as it should be."""
    signal.signal(signal.SIGINT, _passed_over)


def _passed_over(signum: int, frame: Any) -> None:
    """Ctrl-C in a library's child: the program's to act on."""


_interrupted = False


def interrupted() -> bool:
    """Whether the program got Ctrl-C (SIGINT): a library that turned the ``KeyboardInterrupt`` into an error of
    its own (pydantic builds a schema in Rust, and an interrupt there comes out as a ``SchemaError``) failed
    because of it, and the command ends as interrupted, not with that error."""
    return _interrupted


def _on_interrupt(signum: int, frame: Any) -> None:
    global _interrupted
    _interrupted = True
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # the program itself (not a caller's process that imports it)
        os.register_at_fork(after_in_child=_interrupts_are_the_parents)
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, _on_interrupt)
    try:
        from .commands import main as command
    except Exception:
        if not _interrupted:  # a library's own error for the interrupt it was given, or a real one
            raise
        return _interrupted_while_starting(argv)
    except KeyboardInterrupt:
        return _interrupted_while_starting(argv)
    return command(argv)


def _interrupted_while_starting(argv: list[str] | None) -> int:
    print("interrupted while starting", file=sys.stderr)
    if argv is None:  # the program itself: nothing opened yet, and modules half imported are not finalized
        # (a library's signal handling caught mid-import could end the interpreter's exit with the signal)
        sys.stderr.flush()
        os._exit(130)
    return 130


def program() -> None:
    """The ``flowpipe`` program: ``main`` with the command line's arguments, then exit with its code. An
    interrupt once the command has returned (the interpreter closing) changes nothing and is ignored: it ended a
    finished run with the signal, not its code."""
    try:
        code = main()
    except KeyboardInterrupt:  # a second one, while the command was answering the first
        code = 130
    while True:
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # raises an interrupt still pending before it ignores them
            break
        except KeyboardInterrupt:
            continue
    sys.exit(code)


def __getattr__(name: str) -> Any:
    """The commands module's names (``build_parser``, ``to_dot`` ...), imported when first asked for."""
    import importlib

    if name.startswith("__"):
        raise AttributeError(name)
    return getattr(importlib.import_module(".commands", __name__), name)

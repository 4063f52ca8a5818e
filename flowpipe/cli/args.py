"""Argument types the commands share."""
from __future__ import annotations

import argparse


def processes_arg(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= 256:
        raise argparse.ArgumentTypeError(f"expected an integer 1..256 or 'auto', got {text!r}")
    return n


def positive_arg(text: str) -> int:
    """A count of at least 1 (``--max-frames``)."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected an integer 1 or more, got {text!r}")
    return n

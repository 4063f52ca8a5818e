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

"""Waiting in tests for what a run does, not for a time: a test that sleeps a fixed time and then looks finds
less on a loaded machine (the suite runs over several workers on 2 cores)."""
from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path


def until(cond: Callable[[], bool], what: str, within: float = 60.0, proc: subprocess.Popen | None = None) -> None:
    """Returns once ``cond()`` holds; fails after ``within`` seconds (a bound for a hang, not a pace), or at once
    where ``proc`` ended first."""
    deadline = time.monotonic() + within
    while not cond():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the process ended (exit {proc.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} within {within:.0f} s")
        time.sleep(0.05)


def lines_in(path: Path) -> int:
    """Whole lines written to ``path`` so far (0 where it is not there yet)."""
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0

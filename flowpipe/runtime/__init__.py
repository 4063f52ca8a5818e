"""The runtime: the runner and its channels, per-run state, memory-contract resolution, worker processes."""
from __future__ import annotations

from .runner import Runner, RunResult, run

__all__ = ["RunResult", "Runner", "run"]

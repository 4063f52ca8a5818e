"""The runtime: executors (one process, shards over processes) behind one interface, their channels, per-run
state, memory-contract resolution, worker processes and the device owner."""
from __future__ import annotations

from .commands import LiveControl
from .context import Resume, RunHooks, Share
from .executor import Executor, executor, provide
from .runner import Runner, RunResult, run
from .stats import RunSummary

__all__ = ["Executor", "LiveControl", "Resume", "RunHooks", "RunResult", "RunSummary", "Runner", "Share", "executor",
           "provide", "run"]

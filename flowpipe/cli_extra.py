"""Commands that reach devices, models and benchmarks (kept apart so the core CLI stays small)."""
from __future__ import annotations

import argparse
from typing import Any, Callable


def add_commands(sub: Any, with_set: Callable[[argparse.ArgumentParser], None]) -> None:
    pass

"""``python -m flowpipe.cli``: the command line."""
from __future__ import annotations

from . import program

program()

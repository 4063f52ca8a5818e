"""``python -m flowpipe.cli``: the command line."""
from __future__ import annotations

import sys

from . import main

sys.exit(main())

"""What every benchmark does with its result: stamp it (cores, date), print it, keep it where asked."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any


def publish(result: dict[str, Any], out: str | None) -> None:
    result.setdefault("cores", len(os.sched_getaffinity(0)))
    result.setdefault("date", time.strftime("%Y-%m-%d"))
    print(json.dumps(result))
    if out:
        Path(out).write_text(json.dumps(result, indent=1))

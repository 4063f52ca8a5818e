"""Ctrl-C at random moments, many times: ``flowpipe run`` of the main job in one process and over shards with the
device owner, each interrupted (SIGINT to its process group, as a terminal sends it) at a random moment in the
first seconds (models compiling, shards and the owner starting, frames flowing, the writer closing), and with a
second Ctrl-C half a second after the first in some runs. Reported per run: the moment, the exit code, whether a
traceback or a crash showed, the seconds the run took to end after the last interrupt, and whether its
recording plays to its end.

    python benchmarks/interrupts.py --times 20 --json OUT.json   # run_all.py interrupts

Every run must end in 130 (or 0 where it had ended before the interrupt), with no traceback, no crash, and a
recording that plays; tests/test_interrupt.py holds six of these moments in the suite.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _plays(path: Path) -> bool | None:
    """Whether the recording decodes to its end (None: none was written)."""
    if not path.exists() or not path.stat().st_size:
        return None
    import av

    try:
        with av.open(str(path)) as c:
            return sum(1 for _ in c.decode(video=0)) > 0
    except Exception:  # noqa: BLE001 - any decoding failure is a recording that does not play
        return False


def one(args: list[str], after: float, twice: bool, work: Path) -> dict:
    p = subprocess.Popen([sys.executable, "-m", "flowpipe.cli", *args], cwd=work, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    time.sleep(after)
    os.killpg(p.pid, signal.SIGINT)
    last = time.monotonic()
    if twice:
        time.sleep(0.5)
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGINT)
            last = time.monotonic()
    try:
        _, err = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        _, err = p.communicate()
    return {"after_s": round(after, 2), "twice": twice, "rc": p.returncode,
            "ended_s": round(time.monotonic() - last, 2), "traceback": "Traceback" in err,
            "crash": p.returncode in (-11, 139, -6, 134), "plays": _plays(work / "o.mp4"),
            "last_line": (err.strip().splitlines() or [""])[-1][:300]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--times", type=int, default=20, help="interrupts per way of running")
    ap.add_argument("--within", type=float, default=9.0, help="the moment is drawn from 0.5 s to this")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json")
    a = ap.parse_args()
    rnd = random.Random(a.seed)  # noqa: S311 - seeded moments, not secrets
    ways = {"one process": ["run", str(ROOT / "graphs" / "face_blur.yaml"), "--processes", "1"],
            "over shards": ["run", str(ROOT / "graphs" / "face_count_multistream.yaml"), "--processes", "2",
                            "--set", "loop=-1"]}
    runs = []
    for way, args in ways.items():
        for i in range(a.times):
            work = Path(tempfile.mkdtemp(prefix="flowpipe-int-"))
            extra = ["--set", f"output={work / 'o.mp4'}"] if way == "one process" else []
            r = one([*args, *extra, "--set", f"metadata={work / 'm.jsonl'}"], rnd.uniform(0.5, a.within),
                    twice=i % 4 == 3, work=work)
            r["way"] = way
            runs.append(r)
            print(json.dumps(r), flush=True)
    ok = [r for r in runs if r["rc"] in (0, 130) and not r["traceback"] and not r["crash"] and r["plays"] is not False]
    out = {"date": time.strftime("%Y-%m-%d"), "cores": os.cpu_count(), "times": a.times, "seed": a.seed,
           "ended_well": len(ok), "runs_all": len(runs), "runs": runs}
    print(f"{len(ok)} of {len(runs)} ended well (130 or 0, no traceback, no crash, the recording plays)")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()

"""How many people the people graph counts in a zone, against counts made by eye (``eval/flowpipe_eval/zones.json``).

graphs/people_count.yaml runs once on each clip with the clip's zone (and its crossings' line); the zone's count
on each sampled frame is scored against the truth's range for it: exact, or off by so many people, over or under.

    python benchmarks/zone_eval.py --out OUT.json   # run_all.py zone_eval

Nothing in the graph was chosen on these counts: they were made after it was fixed, and this is their first use.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_results import publish
from count_back import tracked


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clips", nargs="*")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a parameter of the graph (YAML value), as flowpipe run --set")
    ap.add_argument("--out")
    args = ap.parse_args()
    from flowpipe.graph import parse_sets
    from flowpipe_eval.crossings import truth as crossing_truth
    from flowpipe_eval.zones import score, truth

    sets = parse_sets(args.set)

    t, about = truth(), crossing_truth()
    rows = []
    for name in args.clips or list(t):
        records, _ = tracked(name, **{**sets, "zone": t[name]["zone"]})
        counts = {r["frame"]: r["analytics"]["zones"]["zone"]["count"] for r in records}
        rows.append(score(name, counts).row() | {"about": about[name]["about"]})
        print(rows[-1], flush=True)
    frames = sum(r["frames"] for r in rows)
    summary = {"frames": frames, "exact": sum(r["exact"] for r in rows),
               "off": round(sum(r["off"] * r["frames"] for r in rows) / max(frames, 1), 3),
               "bias": round(sum(r["bias"] * r["frames"] for r in rows) / max(frames, 1), 3)}
    publish({"graph": "graphs/people_count.yaml", "set": args.set, "rows": rows, "summary": summary}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

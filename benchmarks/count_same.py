"""A line's ``same``: a crossing that is another track's, counted the same way a moment before, is not counted.

One person the tracker holds twice (a second box over the first, or a track split on the line: the old id
lost as a new one takes the person) crosses a line twice. With ``same``, a crossing whose box lies on the box
of another track counted crossing the same way in the last ``same_within`` seconds (that track still on it,
or lost the frame before) by ``same`` of the smaller box is that track's again, and not counted.

graphs/people_count.yaml runs once on each clip; its tracked people are replayed through the analytics node
alone (``count: every, back: 1.0``, the graph's) without ``same`` and at each setting below, and the
crossings scored against ``eval/flowpipe_eval/crossings.json``.

    python benchmarks/count_same.py --out OUT.json   # run_all.py count_same

The setting is chosen on the clips ``count_back.py`` replays (the default here): every clip but those added
after ``every`` was chosen (``after: fifth_plaza_look``). Written before any run on the others: ``same: 0.7,
same_within: 1.0`` (the fewest twice-counted crossings for one true crossing lost on the chosen clips) goes into
the people graph only if, on the concourse's three clips, held out from this choice, it makes fewer errors
(missed, false and twice-counted crossings together) with at most one true crossing lost of 54:

    python benchmarks/count_same.py --clips concourse concourse_low concourse_dark --settings 0.7:1.0 \\
        --out OUT.json
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_results import publish
from count_back import replay, tracked

SETTINGS = [f"{s}:{w}" for s in (0.9, 0.8, 0.7, 0.6, 0.5) for w in (0.5, 1.0, 2.0)]
KEYS = ("true", "found", "false", "twice")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clips", nargs="*")
    ap.add_argument("--settings", nargs="*", default=SETTINGS, help="SAME:WITHIN (seconds)")
    ap.add_argument("--out")
    args = ap.parse_args()
    from flowpipe_eval.crossings import line, score, truth

    t = truth()
    names = args.clips or [n for n, c in t.items() if c.get("after") != "fifth_plaza_look"]
    settings = ["none", *args.settings]
    rows = []
    for name in names:
        records, size = tracked(name)
        own = line(name)
        per, dropped = {}, {}
        base = replay(records, size, own, 1.0)
        for setting in settings:
            extra = "" if setting == "none" else ", same: {}, same_within: {}".format(*setting.split(":"))
            got = base if setting == "none" else replay(records, size, own, 1.0, extra)
            s = score(name, got).row()
            per[setting] = {k: s[k] for k in KEYS} | {"missed": s["missed"]}
            dropped[setting] = [{"frame": c["frame"], "track": c["track"], "direction": c["direction"]}
                                for c in base if c not in got]
        rows.append({"clip": name, "part": t[name].get("part", "seen"), "by_setting": per, "not_counted": dropped})
        print({k: rows[-1][k] for k in ("clip", "by_setting")}, flush=True)
    totals = {st: {k: sum(r["by_setting"][st][k] for r in rows) for k in KEYS} for st in settings}
    for v in totals.values():
        v["errors"] = v["true"] - v["found"] + v["false"] + v["twice"]
    publish({"clips": names, "settings": settings, "rows": rows, "totals": totals}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

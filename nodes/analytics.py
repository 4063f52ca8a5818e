"""Zones, lines and the events they raise, over tracked objects (DeepStream's nvdsanalytics, Frigate's zones).

Per stream and frame the ``analytics`` node places each tracked object by one point of its box (its feet by
default): which zones hold it and since when, which lines it crossed and which way. Rules turn that into
events that begin and end: a zone holding ``occupancy`` objects or more for ``for`` seconds, an object
dwelling in a zone ``dwell`` seconds, a line crossed. What it found goes on the frame
(``frame.meta["analytics"]``), so the JSONL and MQTT sinks after it carry zone counts, line totals and events
with the frame's detections.

Geometry is in fractions of the picture (0-1, a polygon or line drawn once fits every resolution) unless
``units: pixels``; a stream (a camera) may have zones and lines of its own (``streams``), over the node's by
name. A line from A to B is crossed ``in`` when an object goes from its left to its right as seen looking from
A to B (in image coordinates, y down: for a line drawn left to right, from above it to below), and ``out`` the
other way; an object is on a side only once its point is ``margin`` of its box's height past the line, so a box
jittering on the line crosses nothing; each track is counted once a line, the way it first
crossed it (or, with ``count: each_way``, once each way; with ``count: every``, each time, a crossing back once
it had gone ``back`` of its box's heights past the line).

A camera that moves carries still objects over lines and into zones. With ``camera_moving``, lines and zones count
only while the camera holds still, as the tracker measures it on the pictures (its ``gmc``: each frame's
``meta["camera_motion"]``, how far the camera's motion moved the picture's farthest corner, in pixels): from a frame
that moved it more than ``camera_moving`` pixels until one that moved it less than ``camera_still``, no crossing is
counted and no object enters or leaves a zone (which side of a line each track is on is followed still, so the
camera's motion itself crosses nothing once counting resumes).
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import cv2
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from flowpipe.frame import Detection, Frame
from flowpipe.node import PIXELS_ALL, Node, NodeConfig, NodeContract, Resource, RunContext
from flowpipe.registry import register
from flowpipe_nodes.media.clips import retain, unused

from .track.rate import StreamRates, factor, scale_count

log = logging.getLogger("flowpipe.analytics")

Point = tuple[float, float]
Box = tuple[float, float, float, float]
# events kept for flowpipe serve (its console, its event index, which reads them every second): the newest
# RECENT, and every one raised in the last RECENT_S seconds however many, up to RECENT_MAX
RECENT, RECENT_S, RECENT_MAX = 200, 30.0, 50_000


class Zone(BaseModel):
    model_config = ConfigDict(extra="forbid")
    polygon: list[Point] = Field(min_length=3, description="corners, in order")


class Line(BaseModel):
    model_config = ConfigDict(extra="forbid")
    points: tuple[Point, Point] = Field(description="A, B: crossing it from its left to its right (looking from A "
                                                    "to B) is 'in'")
    count: Literal["first", "each_way", "every"] = Field(
        "first", description="first: a track is counted once, the way it first crossed (a box that grows or "
        "jitters back over the line is no crossing back); each_way: once each way (a door one track walks in "
        "and back out of); every: each time it crosses, a crossing back once it had gone `back` of its heights "
        "past the line (a person who comes back, or an id the tracker passed to someone crossing the other way)")
    back: float = Field(1.0, ge=0, description="with count: every, of a box's height: how far past the line a "
                        "track counted one way must have gone before a crossing back counts (a box that grows "
                        "back over the line, or an id passed to a neighbour, goes less far)")
    same: float | None = Field(None, gt=0, le=1, description="a crossing whose box lies this much (a share of "
                               "the smaller box) on the box of another track counted crossing the same way "
                               "within `same_within` seconds, that track still on it or lost the frame before, "
                               "is that object's again (one person the tracker holds twice, or whose id changed "
                               "on the line): not counted. A box inside another's is the same whatever their "
                               "sizes (a child in front of an adult, crossing with them, counts once). None: every "
                               "track's crossings count")
    same_within: float = Field(1.0, gt=0, description="seconds: how long after a crossing `same` looks back")


class Shapes(BaseModel):
    """One stream's own zones and lines: each replaces the node's of its name, or adds one, for that stream."""

    model_config = ConfigDict(extra="forbid")
    zones: dict[str, Zone] = Field(default_factory=dict)
    lines: dict[str, Line] = Field(default_factory=dict)


class Rule(BaseModel):
    """One of: ``zone`` + ``occupancy`` (+ ``for``), ``zone`` + ``dwell``, ``line`` (+ ``direction``)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    name: str
    zone: str | None = None
    line: str | None = None
    occupancy: int | None = Field(None, ge=1, description="objects in the zone at once")
    for_s: float = Field(0.0, alias="for", ge=0, description="occupancy: seconds it must hold before the event "
                                                             "begins (and be under for before it ends)")
    dwell: float | None = Field(None, gt=0, description="seconds one object stays in the zone")
    direction: Literal["in", "out", "any"] = "any"
    labels: list[str] | None = Field(None, description="objects it counts (default: the node's labels)")

    @model_validator(mode="after")
    def _one_kind(self) -> Rule:
        kinds = [self.occupancy is not None, self.dwell is not None, self.line is not None]
        if sum(kinds) != 1:
            raise ValueError(f"rule '{self.name}': expected one of occupancy, dwell (both with a zone) or line")
        if (self.occupancy is not None or self.dwell is not None) and self.zone is None:
            raise ValueError(f"rule '{self.name}': occupancy and dwell need a zone")
        if self.line is not None and self.zone is not None:
            raise ValueError(f"rule '{self.name}': a line rule has no zone")
        return self

    @property
    def kind(self) -> str:
        return "occupancy" if self.occupancy is not None else "dwell" if self.dwell is not None else "crossing"


@dataclass
class _Open:
    """An event that began and has not ended."""

    id: str
    begun: float
    frame: int
    tracks: set[int]
    below_since: float | None = None  # occupancy: when the count fell under the rule's


@dataclass
class _StreamState:
    """One stream's analytics: where each track was, the zones it is in since when, what it crossed, the open
    events, the running totals."""

    config: Analytics.Config  # the config this state was kept under (a running graph's may change)
    last: dict[int, Point] = field(default_factory=dict)  # track -> its point in the last frame it was in
    side: dict[tuple[str, int], int] = field(default_factory=dict)  # (line, track) -> -1 left, +1 right
    counted: set[tuple[str, int, str]] = field(default_factory=set)  # (line, track, direction) counted
    way: dict[tuple[str, int], tuple[str, float]] = field(default_factory=dict)  # (line, track) -> the direction
    # it was last counted, and how far past the line it has gone since, in its box's heights (count: every)
    entered: dict[tuple[str, int], float] = field(default_factory=dict)  # (zone, track) -> since (s)
    box: dict[int, tuple[int, Box]] = field(default_factory=dict)  # track -> (its last frame, its box there)
    recent: dict[str, deque[tuple[float, str, int]]] = field(default_factory=dict)  # line -> its counted
    # crossings' (time, direction, track), those of the `same_within` seconds before its last crossing (`same`)
    seen: dict[int, int] = field(default_factory=dict)  # track -> the last frame it was in
    totals: dict[str, dict[str, int]] = field(default_factory=dict)  # line -> {"in": n, "out": n}
    by_label: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)  # line -> label -> {"in", "out"}
    over_since: dict[str, float] = field(default_factory=dict)  # occupancy rule -> since when it holds
    open: dict[tuple[str, Any], _Open] = field(default_factory=dict)  # (rule, key) -> event
    seq: int = 0
    moving: bool = False  # camera_moving: the camera moves, counting pauses

    def camera(self, motion: float | None, moving: float, still: float) -> str | None:
        """The camera's motion on this frame (pixels; None: not measured, which changes nothing): whether counting
        ``paused`` or ``resumed`` on it (None: neither)."""
        if motion is None:
            return None
        if not self.moving and motion > moving:
            self.moving = True
            return "paused"
        if self.moving and motion < still:
            self.moving = False
            return "resumed"
        return None

    def occupancy(self, zones: dict[str, Zone], points: dict[int, Point], labels: dict[int, str],
                  scale: tuple[float, float], t: float, index: int, forget: int,
                  counting: bool = True) -> dict[str, dict[str, Any]]:
        """Who is in each zone on frame ``index`` (at ``t`` s), and since when: a track seen outside it, or not
        seen for ``forget`` frames, leaves; while the camera moves (not ``counting``) none enters and none is
        seen leaving (who was in stays in, where the camera's motion puts them). Each zone's count, its labels'
        counts and its tracks."""
        out: dict[str, dict[str, Any]] = {}
        for name, z in zones.items():
            if counting:
                poly = np.array([(x * scale[0], y * scale[1]) for x, y in z.polygon], np.float32)
                inside = {tid for tid, p in points.items() if cv2.pointPolygonTest(poly, p, False) >= 0}
            else:
                inside = {tid for tid in points if (name, tid) in self.entered}
            for tid in inside:
                self.entered.setdefault((name, tid), t)
            for key in [k for k in self.entered if k[0] == name and k[1] not in inside]:
                if (counting and key[1] in points) or index - self.seen.get(key[1], -10**9) > forget:
                    del self.entered[key]  # seen outside, or gone
            held = sorted(inside)
            by_label: dict[str, int] = {}
            for tid in held:
                lab = labels.get(tid)
                if lab is not None:
                    by_label[lab] = by_label.get(lab, 0) + 1
            out[name] = {"count": len(held), "labels": by_label, "tracks": held}
        return out

    def cross(self, lines: dict[str, Line], objs: list[Detection], points: dict[int, Point], boxes: dict[int, Box],
              labels: dict[int, str], scale: tuple[float, float], t: float, index: int, margin: float,
              stats: dict[str, Any], counting: bool = True) -> list[tuple[str, int, str]]:
        """The lines' crossings on frame ``index`` (at ``t`` s), each track once a line (or once each way, or
        every time: the line's ``count``), added to the totals: (line, track, direction) of each counted. One
        the same as another's (``same``) is counted with it, in ``stats`` alone. While the camera moves (not
        ``counting``) the side each track is on is followed and nothing is counted."""
        crossed: list[tuple[str, int, str]] = []
        for name, ln in lines.items():
            a = np.array(ln.points[0]) * scale
            b = np.array(ln.points[1]) * scale
            tot = self.totals.setdefault(name, {"in": 0, "out": 0})
            for d in objs:
                if d.track_id is None:
                    continue
                tid = d.track_id
                p = np.array(points[tid])
                height = max(d.box[3] - d.box[1], 1e-9)
                off = _offset(a, b, p)
                if not counting:  # where the camera's motion put it: no crossing once counting resumes
                    side = 1 if off > margin * height else -1 if off < -margin * height else 0
                    if side:
                        self.side[(name, tid)] = side
                    continue
                prev = self.way.get((name, tid))
                if prev is not None:  # how far it went on the side it was counted to
                    self.way[(name, tid)] = (prev[0], max(prev[1], off / height * (1 if prev[0] == "in" else -1)))
                side = 1 if off > margin * height else -1 if off < -margin * height else 0
                was = self.side.get((name, tid))
                if side == 0:
                    continue
                self.side[(name, tid)] = side
                if was is None or was == side or not _within(a, b, np.array(self.last.get(tid, points[tid])), p):
                    continue
                direction = "in" if side > 0 else "out"
                if not _counts(ln, direction, prev,
                               (name, tid, "in") in self.counted or (name, tid, "out") in self.counted,
                               (name, tid, direction) in self.counted):
                    continue
                same = ln.same is not None and _same(ln, self.recent.setdefault(name, deque()), self.box, boxes, tid,
                                                     direction, t, index)
                self.counted.add((name, tid, direction))  # (one the same as another's: counted with it)
                self.way[(name, tid)] = (direction, off / height * side)
                if same:
                    stats["crossings_same"] += 1
                    continue
                tot[direction] += 1
                per = self.by_label.setdefault(name, {}).setdefault(labels[tid], {"in": 0, "out": 0})
                per[direction] += 1
                crossed.append((name, tid, direction))
                if ln.same is not None:
                    self.recent.setdefault(name, deque()).append((t, direction, tid))
                stats["crossings"] += 1
        return crossed

    def moved_on(self, points: dict[int, Point], boxes: dict[int, Box], index: int, forget: int) -> None:
        """Where each track was on frame ``index`` kept for the next; a track not seen for ``forget`` frames
        forgotten: one that comes back after this is a new one (and what it crossed with it)."""
        self.last.update(points)
        self.box.update((tid, (index, box)) for tid, box in boxes.items())
        gone = {k for k, f in self.seen.items() if index - f > forget}
        if not gone:
            return
        for tid in gone:
            self.seen.pop(tid)
            self.last.pop(tid, None)
            self.box.pop(tid, None)
        self.side = {k: v for k, v in self.side.items() if k[1] not in gone}
        self.counted = {k for k in self.counted if k[1] not in gone}
        self.way = {k: v for k, v in self.way.items() if k[1] not in gone}


#: What a running graph may change: zones, lines, rules and what they count (``Analytics.retune``).
TUNABLE = frozenset({"zones", "lines", "streams", "rules", "labels", "margin", "forget", "camera_moving",
                     "camera_still"})


@register("analytics")
class Analytics(Node):
    """Zones, lines and rules over a tracker's objects; events on the frame (``meta["analytics"]``).

    YAML:
        - id: analytics
          type: analytics
          config:
            labels: [person]
            zones: {door: {polygon: [[0.1, 0.5], [0.4, 0.5], [0.4, 1.0], [0.1, 1.0]]}}
            lines: {entrance: {points: [[0.5, 0.0], [0.5, 1.0]]}}
            streams:                      # a camera with a view of its own: its entrance lies elsewhere
              cam2: {lines: {entrance: {points: [[0.2, 0.3], [0.9, 0.3]]}}}
            rules:
              - {name: crowded, zone: door, occupancy: 3, for: 2.0}
              - {name: loitering, zone: door, dwell: 30}
              - {name: came_in, line: entrance, direction: in}
            snapshots: out/events
          inputs: {detections: track.detections}
    """

    inputs = {"detections": "detections"}
    outputs = {"frame": "detections"}

    class Config(NodeConfig):
        zones: dict[str, Zone] = Field(default_factory=dict, description="name -> {polygon: [[x, y], ...]}")
        lines: dict[str, Line] = Field(default_factory=dict, description="name -> {points: [A, B], count: first | "
                                                                        "each_way | every}")
        rules: list[Rule] = Field(default_factory=list, description="{name, zone, occupancy, for} | {name, zone, "
                                  "dwell} | {name, line, direction}: each raises events")
        streams: dict[str, Shapes] = Field(default_factory=dict, description="stream id -> {zones, lines} of its "
                                           "own (a camera's view), each by name over the ones above; a rule on "
                                           "a zone or line a stream lacks does not apply to it")
        labels: list[str] | None = Field(None, description="the labels counted (default: every tracked object)")
        units: Literal["fraction", "pixels"] = Field("fraction", description="of the zones' and lines' points")
        anchor: Literal["bottom", "center"] = Field("bottom", description="the point of a box that is placed: "
                                                                          "its bottom centre (feet) or centre")
        margin: float = Field(0.1, ge=0, le=1, description="of a box's height: how far past a line its point "
                                                           "must be to be on that side")
        forget: int = Field(30, ge=1, description="frames a track not seen keeps its time in a zone (its dwell "
                                                  "goes on if it comes back in them; the tracker's max_age) and "
                                                  "the lines it crossed (counted again only after)")
        rate: float | None = Field(None, gt=0, description="frames a second forget is at: a stream at another "
                                   "rate (from its timestamps) has it scaled to the same seconds (the tracker's "
                                   "rate, where it has one)")
        camera_moving: float | None = Field(None, gt=0, description="pixels a frame: lines and zones count only "
                                            "while the camera holds still. From a frame whose camera motion (a "
                                            "tracker's gmc measures it: how far it moved the picture's farthest "
                                            "corner) is over this until one under camera_still, no crossing is "
                                            "counted and no object enters or leaves a zone; each record says "
                                            "camera_moving, and counting: paused / resumed where it changes. "
                                            "None: counting never pauses")
        camera_still: float | None = Field(None, gt=0, description="pixels a frame: with camera_moving, a camera "
                                           "paused on is still again under this (default: half camera_moving)")
        snapshots: str | None = Field(None, description="folder for a JPEG of the frame each event begins on")
        snapshots_keep_s: float | None = Field(None, gt=0, description="snapshots older than this are deleted "
                                               "(looked at as each is written), as event clips' keep_s")
        snapshots_keep_mb: float | None = Field(None, gt=0, description="a stream's snapshots beyond this many "
                                                "MB are deleted, the oldest first")

        def zones_of(self, stream: str) -> dict[str, Zone]:
            """The zones of ``stream``: the node's, with its own (``streams``) over them."""
            own = self.streams.get(stream)
            return {**self.zones, **own.zones} if own is not None else self.zones

        def lines_of(self, stream: str) -> dict[str, Line]:
            own = self.streams.get(stream)
            return {**self.lines, **own.lines} if own is not None else self.lines

        @model_validator(mode="after")
        def _names(self) -> Analytics.Config:
            every: list[Shapes | Analytics.Config] = [self, *self.streams.values()]
            zones = sorted({n for c in every for n in c.zones})
            lines = sorted({n for c in every for n in c.lines})
            for r in self.rules:
                if r.zone is not None and r.zone not in zones:
                    raise ValueError(f"rule '{r.name}': no zone '{r.zone}' (zones: {', '.join(zones) or 'none'})")
                if r.line is not None and r.line not in lines:
                    raise ValueError(f"rule '{r.name}': no line '{r.line}' (lines: {', '.join(lines) or 'none'})")
            names = [r.name for r in self.rules]
            if len(set(names)) != len(names):
                raise ValueError("rules: each needs its own name")
            if self.camera_still is not None and (self.camera_moving is None or self.camera_still > self.camera_moving):
                raise ValueError(f"camera_still: expected a motion no larger than camera_moving "
                                 f"({self.camera_moving}), got {self.camera_still}")
            if self.units == "fraction":  # (half a picture beyond its edges: a line drawn on past them)
                shapes = [(f"zone '{n}'", z.polygon) for c in every for n, z in c.zones.items()] + [
                    (f"line '{n}'", ln.points) for c in every for n, ln in c.lines.items()]
                for what, pts in shapes:
                    off = next((p for p in pts if any(not (-0.5 <= v <= 1.5) for v in p)), None)
                    if off is not None:
                        raise ValueError(f"{what}: point {list(off)}: zones and lines are in fractions of the "
                                         "picture (0-1, up to half a picture beyond its edges); for pixels set "
                                         "units: pixels")
            return self

    config: Config

    @classmethod
    def contract(cls, config: NodeConfig) -> NodeContract:
        c: Any = config
        return cls.declare(pixels=frozenset({"BGR"}) if c.snapshots else PIXELS_ALL,
                           one_worker="analytics keeps each stream's tracks, zones and events in frame order",
                           files={"snapshots": "folder"}, tunable=TUNABLE,
                           stream_keyed=frozenset({"streams"}),
                           resources=(Resource(f"writes {c.snapshots}/"),) if c.snapshots else ())

    def open(self, ctx: RunContext) -> None:
        self.streams: dict[str, _StreamState] = {}
        self.rates = StreamRates()  # rate: each stream's frames a second
        self.recent: deque[dict[str, Any]] = deque()  # for flowpipe serve: RECENT, RECENT_S, RECENT_MAX
        self.lock = threading.Lock()
        self.stats = ctx.stats
        self.journal = ctx.journal  # each event as it is raised (flowpipe serve's event index reads it)
        self.stats.update({"events": 0, "crossings": 0, "crossings_same": 0})
        if self.config.camera_moving is not None:
            self.stats.update({"camera_paused": 0, "camera_paused_frames": 0})
        self.unmeasured = False  # camera_moving over frames that carry no camera motion: said once
        self.passed_over: dict[str, int] | None = {}  # tracked objects by label, while ``labels`` has taken none
        self._shots: dict[tuple[str, int], str] = {}  # this run's newest snapshots, by stream and frame
        if self.config.snapshots:
            Path(self.config.snapshots).mkdir(parents=True, exist_ok=True)
        ctx.provide("events", self.recent_events)

    def end_stream(self, stream: str) -> None:
        self.streams.pop(stream, None)
        self.rates.drop(stream)
        for key in [k for k in self._shots if k[0] == stream]:  # added again, it numbers its frames from 0
            del self._shots[key]

    def process(self, frame: Frame, port: str) -> Frame:
        c = self.config
        st = self.streams.get(frame.stream)
        if st is None:
            st = self.streams[frame.stream] = _StreamState(config=c)
        scale = (1.0, 1.0) if c.units == "pixels" else (float(frame.width or 1), float(frame.height or 1))
        t = float(frame.pts)
        events: list[dict[str, Any]] = []
        if st.config is not c:  # the running graph was retuned: what changed starts afresh
            events += self._retuned(st, st.config, c, frame, t)
            st.config = c
        own_zones, own_lines = c.zones_of(frame.stream), c.lines_of(frame.stream)
        forget = c.forget if c.rate is None else scale_count(
            c.forget, factor(self.rates.update(frame.stream, frame.pts), c.rate))
        objs = [d for d in frame.detections if d.track_id is not None and (c.labels is None or d.label in c.labels)]
        if c.labels is not None and self.passed_over is not None:
            self._none_taken(self.passed_over, objs, frame)
        points = {d.track_id: _point(d, c.anchor) for d in objs if d.track_id is not None}
        boxes: dict[int, Box] = {d.track_id: d.box for d in objs if d.track_id is not None} \
            if any(ln.same is not None for ln in own_lines.values()) else {}  # (only `same` looks at boxes)
        labels = {d.track_id: d.label for d in objs if d.track_id is not None}
        for tid in points:
            st.seen[tid] = frame.index
        motion = frame.meta.get("camera_motion")
        change = self._camera(st, frame) if c.camera_moving is not None else None
        counting = not st.moving
        zones = st.occupancy(own_zones, points, labels, scale, t, frame.index, forget, counting)
        crossed = st.cross(own_lines, objs, points, boxes, labels, scale, t, frame.index, c.margin, self.stats,
                           counting)
        st.moved_on(points, boxes, frame.index, forget)
        # rules
        for r in c.rules:
            if r.zone is None or r.zone in zones:  # a zone this stream lacks: the rule is not this stream's
                events += self._rule(r, st, frame, t, zones, crossed, labels)
        if events:
            self._raised(events, frame)
        frame.meta["analytics_shapes"] = {  # in pixels, for an overlay to draw (not in the records)
            "zones": {n: [(x * scale[0], y * scale[1]) for x, y in z.polygon] for n, z in own_zones.items()},
            "lines": {n: [(x * scale[0], y * scale[1]) for x, y in ln.points] for n, ln in own_lines.items()}}
        lines = {k: {**v, "labels": {lab: dict(n) for lab, n in st.by_label.get(k, {}).items()}}
                 for k, v in st.totals.items()}
        frame.meta["analytics"] = {"zones": zones, "lines": lines,
                                   "crossings": [{"line": n, "track": tid, "label": labels[tid], "direction": dr}
                                                 for n, tid, dr in crossed],
                                   "events": events}
        if "camera_motion" in frame.meta:  # a tracker measured the camera's motion (its gmc)
            frame.meta["analytics"]["camera_motion"] = motion
        if c.camera_moving is not None:
            frame.meta["analytics"]["camera_moving"] = st.moving
            if change is not None:
                frame.meta["analytics"]["counting"] = change
        return frame

    def _camera(self, st: _StreamState, frame: Frame) -> str | None:
        """``camera_moving``: whether counting pauses or resumes on ``frame``, by the camera's motion its tracker
        measured (said once where frames carry none: counting never pauses)."""
        c = self.config
        if "camera_motion" not in frame.meta:
            if not self.unmeasured:
                self.unmeasured = True
                log.warning("node '%s': camera_moving: stream %s frame %d carries no camera motion (a tracker with "
                            "gmc before this node measures it): counting does not pause", self.id, frame.stream,
                            frame.index)
            return None
        change = st.camera(frame.meta["camera_motion"], c.camera_moving or 0.0,
                           c.camera_still if c.camera_still is not None else (c.camera_moving or 0.0) / 2)
        self.stats["camera_paused"] = self.stats.get("camera_paused", 0) + (change == "paused")
        self.stats["camera_paused_frames"] = self.stats.get("camera_paused_frames", 0) + st.moving
        return change

    def _raised(self, events: list[dict[str, Any]], frame: Frame) -> None:
        """Events raised on ``frame``: counted, kept for the console (with the wall clock's time), and those that
        begin given the frame's snapshot (``snapshots``)."""
        self.stats["events"] += sum(e["state"] != "end" for e in events)
        with self.lock:
            now = time.time()
            for e in events:
                e["at"] = round(now, 3)  # wall clock: when it was raised
                self.recent.append(e)
            kept = self.recent
            while len(kept) > RECENT_MAX or (len(kept) > RECENT and kept[0]["at"] < now - RECENT_S):
                kept.popleft()
        if self.config.snapshots and any(e["state"] != "end" for e in events):
            snap = self._snapshot(frame)
            for e in events:
                if e["state"] != "end" and snap:
                    e["snapshot"] = snap
        for e in events:
            self.journal(dict(e))

    def _retuned(self, st: _StreamState, old: Analytics.Config, new: Analytics.Config, frame: Frame,
                 t: float) -> list[dict[str, Any]]:
        """A stream's state carried over to a retuned config: a line moved, renamed or removed forgets which
        side each track was on and what it crossed (its totals go on), so the move itself crosses nothing (a
        line whose ``count`` alone changed keeps both: a track it counted is not counted again); a zone removed
        forgets who was in it; an event of a rule removed or changed ends on this frame."""
        stream = frame.stream
        old_lines, new_lines = old.lines_of(stream), new.lines_of(stream)
        moved = {n for n, ln in old_lines.items() if n not in new_lines or new_lines[n].points != ln.points}
        if moved:
            st.side = {k: v for k, v in st.side.items() if k[0] not in moved}
            st.counted = {k for k in st.counted if k[0] not in moved}
            st.way = {k: v for k, v in st.way.items() if k[0] not in moved}
            for n in moved:
                st.recent.pop(n, None)
            for n in moved - set(new_lines):
                st.totals.pop(n, None)
                st.by_label.pop(n, None)
        gone = set(old.zones_of(stream)) - set(new.zones_of(stream))
        st.entered = {k: v for k, v in st.entered.items() if k[0] not in gone}
        rules = {r.name: r for r in new.rules}
        out = []
        for r in old.rules:
            if rules.get(r.name) == r and r.zone not in gone:  # (a zone this stream lost: its events end too)
                continue
            st.over_since.pop(r.name, None)
            for key in [k for k in st.open if k[0] == r.name]:
                out.append(self._record(r, frame, st.open.pop(key), "end", t) | {"retuned": True})
        return out

    PASSED_OVER = 100  # tracked objects none of whose labels ``labels`` names: a misspelt label, said once

    def _none_taken(self, seen: dict[str, int], objs: list[Detection], frame: Frame) -> None:
        """Says once, in the log, that ``labels`` names none of the first ``PASSED_OVER`` tracked objects'
        labels (a label misspelt counts nothing, silently); quiet for good once it has taken one."""
        if objs:
            self.passed_over = None
            return
        for d in frame.detections:
            if d.track_id is not None:
                seen[d.label] = seen.get(d.label, 0) + 1
        if sum(seen.values()) >= self.PASSED_OVER:
            log.warning("node '%s': labels %s: none of the %d tracked objects so far is one (they are: %s); "
                        "nothing is counted", self.id, list(self.config.labels or []), sum(seen.values()),
                        ", ".join(f"{k} ({n})" for k, n in sorted(seen.items(), key=lambda x: -x[1])))
            self.passed_over = None

    def recent_events(self) -> list[dict[str, Any]]:
        """The newest events, oldest first, as they stand now: the run's ``events`` (``flowpipe serve``)."""
        with self.lock:
            return [dict(e) for e in self.recent]

    def _rule(self, r: Rule, st: _StreamState, frame: Frame, t: float, zones: dict[str, dict[str, Any]],
              crossed: list[tuple[str, int, str]], labels: dict[int, str]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        wanted = set(r.labels) if r.labels else None
        if r.kind == "crossing":
            for name, tid, direction in crossed:
                if name == r.line and r.direction in ("any", direction) and (wanted is None or labels[tid] in wanted):
                    once = self._begin(st, r, frame, t, {tid}, key=("x", tid, direction))
                    st.open.pop((r.name, ("x", tid, direction)))
                    out.append(self._record(r, frame, once, "instant", t) | {"direction": direction})
            return out
        assert r.zone is not None
        held = [tid for tid in zones[r.zone]["tracks"] if wanted is None or labels.get(tid) in wanted]
        if r.kind == "dwell":
            assert r.dwell is not None
            for tid in held:
                since = st.entered[(r.zone, tid)]
                if t - since >= r.dwell and (r.name, tid) not in st.open:
                    out.append(self._record(r, frame, self._begin(st, r, frame, since, {tid}, key=tid), "begin", t))
            staying = {k[1] for k in st.entered if k[0] == r.zone}  # in it, or unseen in it for under forget
            for key, open_ev in list(st.open.items()):
                if key[0] == r.name and key[1] not in staying:
                    del st.open[key]
                    out.append(self._record(r, frame, open_ev, "end", t))
            return out
        assert r.occupancy is not None
        ev: _Open | None = st.open.get((r.name, None))
        if len(held) >= r.occupancy:
            since = st.over_since.setdefault(r.name, t)
            if ev is None and t - since >= r.for_s:
                ev = self._begin(st, r, frame, since, set(held), key=None)
                out.append(self._record(r, frame, ev, "begin", t))
            elif ev is not None:
                ev.tracks |= set(held)
                ev.below_since = None
        else:
            st.over_since.pop(r.name, None)
            if ev is not None:
                ev.below_since = t if ev.below_since is None else ev.below_since
                if t - ev.below_since >= r.for_s:
                    del st.open[(r.name, None)]
                    out.append(self._record(r, frame, ev, "end", t))
        return out

    def _begin(self, st: _StreamState, r: Rule, frame: Frame, since: float, tracks: set[int], key: Any) -> _Open:
        st.seq += 1
        ev = _Open(f"{frame.stream}-{r.name}-{st.seq}", since, frame.index, set(tracks))
        st.open[(r.name, key)] = ev
        return ev

    def _record(self, r: Rule, frame: Frame, ev: _Open, state: str, t: float) -> dict[str, Any]:
        rec: dict[str, Any] = {"id": ev.id, "rule": r.name, "kind": r.kind, "state": state, "stream": frame.stream,
                               "tracks": sorted(ev.tracks), "start": round(ev.begun, 4), "frame": frame.index}
        rec["zone" if r.zone is not None else "line"] = r.zone if r.zone is not None else r.line
        if state in ("end", "instant"):
            rec["end"] = round(t, 4)
        return rec

    def _snapshot(self, frame: Frame) -> str | None:
        """The frame as a JPEG in ``snapshots`` (its path), where it has BGR pixels."""
        if frame.data is None or frame.format != "BGR":
            return None
        key = (frame.stream, frame.index)
        if key in self._shots:  # several events on one frame share its snapshot
            return self._shots[key]
        # a name an earlier run's records give is not written over (frame numbers begin at 0 in every run)
        path = unused(Path(self.config.snapshots or ".") / f"{frame.stream}-{frame.index:08d}.jpg")
        ok, buf = cv2.imencode(".jpg", frame.image, [cv2.IMWRITE_JPEG_QUALITY, 85])
        if not ok:
            log.warning("node '%s': could not encode a snapshot of stream %s frame %d", self.id,
                        frame.stream, frame.index)
            return None
        try:
            path.write_bytes(buf.tobytes())
        except OSError as e:  # a full disk: the event goes on without its picture, said once
            path.unlink(missing_ok=True)
            self.stats["snapshots_not_written"] = self.stats.get("snapshots_not_written", 0) + 1
            if self.stats["snapshots_not_written"] == 1:
                log.error("node '%s': %s: %s: events go on without snapshots while it lasts", self.id, path,
                          os.strerror(e.errno) if e.errno else e)
            return None
        self._shots[key] = str(path)
        retain(path.parent, frame.stream, ".jpg", self.config.snapshots_keep_s, self.config.snapshots_keep_mb)
        if len(self._shots) > 256:
            self._shots.pop(next(iter(self._shots)))
        return str(path)


def _point(d: Detection, anchor: str) -> Point:
    x1, y1, x2, y2 = d.box
    return ((x1 + x2) / 2, y2 if anchor == "bottom" else (y1 + y2) / 2)


def _offset(a: np.ndarray, b: np.ndarray, p: np.ndarray) -> float:
    """How far ``p`` lies right of the line A->B in pixels (image coordinates: y down; left of it: negative)."""
    ab = b - a
    return float(ab[0] * (p[1] - a[1]) - ab[1] * (p[0] - a[0])) / max(float(np.hypot(*ab)), 1e-9)


def _counts(line: Line, direction: str, last: tuple[str, float] | None, any_counted: bool, this_way: bool) -> bool:
    """Whether a track's crossing of ``line`` in ``direction`` is counted, by the line's ``count``: ``last``, the
    way it was last counted and how far past the line it went since (in heights), for ``every``."""
    if line.count == "first":
        return not any_counted
    if line.count == "each_way":
        return not this_way
    return last is None or (last[0] != direction and last[1] >= line.back)


def _same(line: Line, recent: deque[tuple[float, str, int]], last: dict[int, tuple[int, Box]], now: dict[int, Box],
          tid: int, direction: str, t: float, index: int) -> bool:
    """Whether track ``tid``'s crossing of ``line`` at time ``t`` is another track's, counted crossing the same
    way in the last ``same_within`` seconds (``recent``, pruned here): that track's box in this frame (``now``),
    or in the frame before if it is not in this one, lies on ``tid``'s by ``same`` of the smaller box."""
    while recent and t - recent[0][0] > line.same_within:
        recent.popleft()
    mine = now[tid]
    for _, way, other in recent:
        if other == tid or way != direction:
            continue
        box = now.get(other)
        if box is None:
            seen = last.get(other)
            box = seen[1] if seen is not None and seen[0] >= index - 1 else None
        if box is not None and _on_smaller(mine, box) >= (line.same or 1.0):
            return True
    return False


def _on_smaller(a: Box, b: Box) -> float:
    """How much of the smaller of boxes ``a`` and ``b`` lies on the other."""
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    if w <= 0 or h <= 0:
        return 0.0
    smaller = min((a[2] - a[0]) * (a[3] - a[1]), (b[2] - b[0]) * (b[3] - b[1]))
    return float(w * h / max(smaller, 1e-9))


def _within(a: np.ndarray, b: np.ndarray, p0: np.ndarray, p1: np.ndarray) -> bool:
    """Whether the move from ``p0`` to ``p1`` passes the line between A and B, not beyond its ends (where the
    object goes round it)."""
    ab = b - a
    n2 = float(ab @ ab) or 1e-9
    u0, u1 = float((p0 - a) @ ab) / n2, float((p1 - a) @ ab) / n2
    return not ((u0 < 0 and u1 < 0) or (u0 > 1 and u1 > 1))

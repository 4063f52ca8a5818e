"""Faces in their context: a person detector's boxes say whose face a face detector found. A face that lies in an
animal's box and in no person's is an animal's (a raccoon, a dog, a squirrel looking at the camera), whatever the
face detectors scored it: it goes. What a face was judged may hold over the frames the person detector does not
run on (``remember``), so that the detector need run only where a face has not been judged; a face judged a
person's (in a person's box) stays masked whatever it is judged next, so its verdict may hold longer
(``remember_person``)."""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import Field

from flowpipe.backedge import BackEdge
from flowpipe.frame import Frame
from flowpipe.node import PIXELS_ALL, Node, NodeConfig, NodeContract, RunContext
from flowpipe.registry import register

from .track.geometry import greedy, iou_matrix, share_inside

#: COCO's animals, as SSD MobileNet v2 (the registry's person detector) names them
COCO_ANIMALS = ["bird", "cat", "dog", "horse", "sheep", "cow", "elephant", "bear", "zebra", "giraffe"]


@dataclass
class _Verdict:
    """What one face was judged on the last frame the person detector ran on, and where that face is now."""

    box: np.ndarray
    animal: bool
    person: bool = False  # it lay in a person's box (the surest verdict, and one that keeps it masked)
    by_kind: bool = False  # an animal's on a classifier's word alone (no animal's box): the least sure verdict
    age: int = 0  # frames since it was judged

    def horizon(self, c: AnimalFaces.Config) -> int:
        """Frames after which it asks to be renewed (it lapses at twice that): a verdict on the classifier's word
        alone asks on the next frame and lapses after two, so a person the detector missed once is looked at again
        at once."""
        if self.by_kind:
            return 1
        return c.remember_person if self.person and c.remember_person is not None else c.remember


@register("animal_faces")
class AnimalFaces(Node):
    """Drops each face that lies (``cover`` of its box) in the box of an animal a person detector found, and in
    no person's box; then the animals' boxes go too, and the people's unless ``pass_persons`` (the frame leaves
    with what it came with besides them). On a frame the person detector did not run on there are no such
    boxes, and every face stays: with a detector interval or a person detector every few frames, a face it has not
    looked at yet is a face.

    YAML (after a person detector merged its people and animals into the faces, as ``heads`` does):
        - id: persons
          type: ssd_decode
          config: {classes: [person, bird, cat, dog, horse, sheep, cow, elephant, bear, zebra, giraffe],
                   score_threshold: 0.5, merge: true}
          inputs: {tensors: people.tensors}
        - {id: animals, type: animal_faces, inputs: {detections: persons.detections}}

    With ``remember``, the person detector need not run on every frame (its preprocess ``along`` an interval
    of ``every: 30``, ``follow: animals``): on a frame it did not run on, a face lying on one judged (IoU
    ``same``) is judged the same, an animal's going again, and the verdict moves with the face; a face no verdict
    holds stays (masked: privacy first) and asks for the detector on the stream's next frames (this node's
    word), as does one judged ``remember`` frames ago, whose verdict holds until renewed (twice that at most). A
    face that lies where another was judged an animal's is taken for it: a person's face held on a dog's face
    while the detector does not look goes until the detector looks again. A face judged a person's (in a
    person's box) is masked whatever it is judged next, so that verdict risks no leak and may hold longer,
    ``remember_person`` frames: a camera on people the detector finds then runs it about once in that many
    frames; one the detector found in no box (it missed the person, or the animal) asks after ``remember``.

    With ``kind``, a face in no person's box whose attribute ``kind_attribute`` (a classifier's share on animals,
    ``class_check``, looked at on the frames the person detector ran on) is ``kind`` or more is an animal's too,
    as one in an animal's box is: a monkey's, a lion's. A face in a person's box stays a person's whatever it says
    (a classifier takes some faces in profile for an animal's), and one it did not look at stays a face. A verdict
    on the classifier's word alone is the least sure: it asks for the detector on the next frame, and lapses after
    two.
    """

    inputs = {"detections": "detections"}
    outputs = {"detections": "detections"}

    class Config(NodeConfig):
        animals: list[str] = Field(COCO_ANIMALS, description="labels of the person detector's animals: their "
                                   "boxes go")
        drop_faces: bool = Field(True, description="a face in an animal's box and no person's goes (false: only "
                                 "the animals' boxes go)")
        persons: list[str] = Field(["person"], description="labels of its people: a face in one of theirs stays, "
                                   "whatever animal's box it is in too (a child holding a cat)")
        pass_persons: bool = Field(True, description="the people's boxes go on (to a pose model finding their "
                                   "heads); false: they go here too, having only said whose each face is")
        faces: list[str] = Field(["face"], description="labels of the detections that are faces")
        cover: float = Field(0.5, gt=0, le=1, description="the share of a face's box inside another box that "
                             "puts it there")
        remember: int = Field(0, ge=0, le=150, description="frames a face's verdict holds where the person "
                              "detector did not run: a face lying on one judged (IoU same) is judged the same; "
                              "one no verdict holds, or one judged this long ago, asks for the detector (a "
                              "preprocess along following this node), a verdict lapsing at twice that; 0: faces "
                              "are judged only where it ran")
        remember_person: int | None = Field(None, ge=1, le=750, description="remember: frames the verdict of "
                                            "a face judged a person's (in a person's box) holds before it asks to "
                                            "be renewed (it keeps the face masked, so it risks no leak; an "
                                            "animal the detector missed once stays masked this long); None: "
                                            "remember")
        same: float = Field(0.5, gt=0, le=1, description="remember: the IoU with a judged face's box that makes a "
                            "face that one")
        kind: float | None = Field(None, gt=0, le=1, description="a face in no person's box whose kind_attribute "
                                   "is this or more is an animal's, as one in an animal's box (None: the attribute "
                                   "is not read)")
        kind_attribute: str = Field("animal", description="kind: the attribute a classifier's look wrote (its "
                                    "share on animals)")

    config: Config
    edge: BackEdge | None = None

    @classmethod
    def contract(cls, config: NodeConfig) -> NodeContract:
        # never reads the pixels; with remember, its state is per stream (a stream stays on one worker)
        return cls.declare(pixels=PIXELS_ALL, one_worker=None)

    def open(self, ctx: RunContext) -> None:
        self.stats: dict[str, Any] = ctx.stats
        self.stats["dropped"] = 0  # faces dropped as animals'
        self.lock = threading.Lock()  # streams on several workers count into one stat
        self.verdicts: dict[str, list[_Verdict]] = {}
        # no face judged yet: a stream's first frame; without remember, never, so the detector runs on every frame
        self.edge = ctx.back_edge(self.id).open(first={"ask": True, "frame": -1} if self.config.remember
                                                else {"ask": True})
        if self.config.remember:
            self.stats["remembered"] = 0  # faces judged by what the same face was judged before

    def process(self, frame: Frame, port: str) -> Frame:
        c = self.config
        layout = frame.layout  # the person detector's (a look at its faces after it, ``kind``'s, an objects one)
        ran = not frame.skipped and not (layout is not None and layout.filled == 0 and layout.objects is None)
        animals = [d.box for d in frame.detections if d.label in c.animals]
        people = [d.box for d in frame.detections if d.label in c.persons]
        faces = [d for d in frame.detections if d.label in c.faces]
        if not c.remember or ran:
            person = [any(share_inside(d.box, p) >= c.cover for p in people) for d in faces]
            boxed = [bool(not p and any(share_inside(d.box, a) >= c.cover for a in animals))
                     for d, p in zip(faces, person, strict=True)]
            by_kind = [bool(not p and not b and c.kind is not None
                            and d.attributes.get(c.kind_attribute, 0.0) >= c.kind)
                       for d, p, b in zip(faces, person, boxed, strict=True)]
            animal = [b or k for b, k in zip(boxed, by_kind, strict=True)]
            unjudged = 0
            if c.remember:
                self._judged(frame.stream, faces, animal, person, by_kind)
        else:
            animal, unjudged = self._recalled(frame.stream, faces)  # (unjudged: or judged long ago)
        drop = {id(d) for d, a in zip(faces, animal, strict=True) if a and c.drop_faces}
        kept = [d for d in frame.detections if id(d) not in drop and d.label not in c.animals
                and (c.pass_persons or d.label not in c.persons)]
        with self.lock:
            self.stats["dropped"] += len(drop)
        if self.edge is not None:  # whether a face is left unjudged, as of this frame (an ask counts once: the
            # detector runs on a frame after it, and its answer comes here); a frame passed over: the last holds
            word = {"ask": unjudged > 0, "unjudged": unjudged, "frame": frame.index} \
                if c.remember and not frame.skipped else None
            self.edge.say(frame.stream, frame.index, word)
        frame.detections = kept
        return frame

    def _judged(self, stream: str, faces: list[Any], animal: list[bool], person: list[bool],
                by_kind: list[bool]) -> None:
        """The verdicts on a frame the detector ran on: those of its faces, and those of faces judged before that
        no face of it lies on (a face the face detectors missed this time keeps its verdict)."""
        boxes = np.asarray([d.box for d in faces], np.float32).reshape(-1, 4)
        with self.lock:
            before = self.verdicts.get(stream, [])
            known = np.stack([v.box for v in before]) if before else np.zeros((0, 4), np.float32)
            taken = {j for _, j in greedy(iou_matrix(boxes, known), self.config.same)}
            self.verdicts[stream] = [*(_Verdict(b, a, p, k) for b, a, p, k in zip(boxes, animal, person, by_kind,
                                                                                  strict=True)),
                                     *(v for j, v in enumerate(before) if j not in taken)]

    def _recalled(self, stream: str, faces: list[Any]) -> tuple[list[bool], int]:
        """Each face's verdict from the stream's faces judged before (the best lying on it by ``same``; each
        verdict takes one face and moves with it), and how many faces ask for the detector: those no verdict
        holds, and those whose verdict is ``remember`` frames old (``remember_person`` for a person's face; it
        holds until renewed, twice that at most)."""
        c = self.config
        with self.lock:
            verdicts = [v for v in self.verdicts.get(stream, []) if v.age < 2 * v.horizon(c)]
            for v in verdicts:
                v.age += 1
            self.verdicts[stream] = verdicts
        boxes = np.asarray([d.box for d in faces], np.float32).reshape(-1, 4)
        known = np.stack([v.box for v in verdicts]) if verdicts else np.zeros((0, 4), np.float32)
        out = [False] * len(faces)
        pairs = greedy(iou_matrix(boxes, known), c.same)
        for i, j in pairs:
            verdicts[j].box = boxes[i]
            out[i] = verdicts[j].animal
        with self.lock:
            self.stats["remembered"] += len(pairs)
        return out, len(faces) - len(pairs) + sum(verdicts[j].age >= verdicts[j].horizon(c) for _, j in pairs)

    def end_stream(self, stream: str) -> None:
        with self.lock:
            self.verdicts.pop(stream, None)
        if self.edge is not None:
            self.edge.forget(stream)

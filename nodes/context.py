"""Faces in their context: a person detector's boxes say whose face a face detector found. A face that lies in an
animal's box and in no person's is an animal's (a raccoon, a dog, a squirrel looking at the camera), whatever the
face detectors scored it: it goes."""
from __future__ import annotations

import threading
from typing import Any

from pydantic import Field

from flowpipe.frame import Frame
from flowpipe.node import PIXELS_ALL, Node, NodeConfig, NodeContract, RunContext
from flowpipe.registry import register

from .track.geometry import share_inside

#: COCO's animals, as SSD MobileNet v2 (the registry's person detector) names them
COCO_ANIMALS = ["bird", "cat", "dog", "horse", "sheep", "cow", "elephant", "bear", "zebra", "giraffe"]


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

    config: Config

    @classmethod
    def contract(cls, config: NodeConfig) -> NodeContract:
        return cls.declare(pixels=PIXELS_ALL, one_worker=None)  # never reads the pixels; no state across frames

    def open(self, ctx: RunContext) -> None:
        self.stats: dict[str, Any] = ctx.stats
        self.stats["dropped"] = 0  # faces dropped as animals'
        self.lock = threading.Lock()  # streams on several workers count into one stat

    def process(self, frame: Frame, port: str) -> Frame:
        c = self.config
        animals = [d.box for d in frame.detections if d.label in c.animals]
        people = [d.box for d in frame.detections if d.label in c.persons]
        kept = []
        for d in frame.detections:
            if d.label in c.animals or (not c.pass_persons and d.label in c.persons):
                continue
            if (c.drop_faces and d.label in c.faces and any(share_inside(d.box, a) >= c.cover for a in animals)
                    and not any(share_inside(d.box, p) >= c.cover for p in people)):
                with self.lock:
                    self.stats["dropped"] += 1
                continue
            kept.append(d)
        frame.detections = kept
        return frame

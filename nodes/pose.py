"""Heads from a pose model's keypoints: a person whose face no face detector sees (turned away, under a hat,
too dark) still has the head found, where the nose, eyes and ears of the person's pose lie."""
from __future__ import annotations

import numpy as np
from pydantic import Field

from flowpipe.backedge import BackEdge
from flowpipe.frame import Detection, Frame
from flowpipe.node import PIXELS_ALL, Node, NodeConfig, NodeContract, RunContext
from flowpipe.registry import register

from .track.geometry import share_inside

#: MoveNet's (COCO's) keypoints, in its output's order
KEYPOINTS = ("nose", "left_eye", "right_eye", "left_ear", "right_ear", "left_shoulder", "right_shoulder",
             "left_elbow", "right_elbow", "left_wrist", "right_wrist", "left_hip", "right_hip", "left_knee",
             "right_knee", "left_ankle", "right_ankle")
_HEAD = slice(0, 5)  # nose, eyes, ears
_EYES, _EARS, _SHOULDERS = [tuple(KEYPOINTS.index(f"{side}_{part}") for side in ("left", "right"))
                            for part in ("eye", "ear", "shoulder")]


@register("movenet_heads")
class MoveNetHeads(Node):
    """Each person a preprocess with ``objects`` cut a crop around, looked at by MoveNet (17 keypoints of the
    one person in the crop, [1, 1, 17, 3] each as y, x, score): where at least ``min_points`` of the head's
    five (nose, eyes, ears) score ``keypoint_score`` or more, a ``label`` detection boxes the head. Its width
    is the largest of what the points say of it: 1.2x the ears' distance, 2.2x the eyes', half the
    shoulders' (a head seen from behind shows its ears and shoulders, not its eyes); its height 1.25x that,
    its centre the points' mean. The person detections go: the frame leaves with faces and heads. A head
    holding ``cover`` of a face found at ``face_score`` or more is that face's, and is dropped (the face's
    own mask is there).

    Proportions and thresholds are MoveNet's and the human head's, not fitted to any clip.

    YAML (after a person detector merged into the faces: ``ssd_decode`` with ``merge: true``):
        - id: pose_pre
          type: preprocess
          config: {size: [192, 192], color: RGB, layout: NHWC, dtype: u8, backend: cpu,
                   objects: {labels: [person], max: 8, scale: 1.2}}
          inputs: {frame: persons.detections}
        - {id: pose, type: inference, config: {model: movenet_lightning, requests: inline},
           inputs: {tensor: pose_pre.tensor}}
        - {id: heads, type: movenet_heads, inputs: {tensors: pose.tensors}}
    """

    inputs = {"tensors": "tensors"}
    outputs = {"detections": "detections"}

    class Config(NodeConfig):
        keypoint_score: float = Field(0.3, ge=0, le=1, description="a keypoint counts from this score up")
        min_points: int = Field(2, ge=1, le=5, description="head keypoints (nose, eyes, ears) a head needs")
        label: str = Field("head", description="the label of the heads found")
        person: str = Field("person", description="the label of the person detections looked at")
        faces: list[str] = Field(["face"], description="labels of detections that are faces")
        face_score: float = Field(0.5, ge=0, le=1, description="a face found at this score or more in a head "
                                  "makes it that face's")
        cover: float = Field(0.5, gt=0, le=1, description="the share of a face's box inside a head that makes "
                             "the head that face's")
        every: int = Field(1, ge=1, le=30, description="its word to the person detector's preprocess (along, "
                           "following it): asks for it on one in this many of the frames the detectors run on, "
                           "and on each while heads are found")

    config: Config
    edge: BackEdge | None = None

    @classmethod
    def contract(cls, config: NodeConfig) -> NodeContract:
        return cls.declare(pixels=PIXELS_ALL, one_worker=None)  # never reads the pixels; no state across frames

    def process(self, frame: Frame, port: str) -> Frame:
        c = self.config
        layout = frame.layout
        if layout is None or layout.objects is None:
            raise ValueError("no persons were cut for this frame: expected a preprocess with objects upstream")
        heads: list[Detection] = []
        if layout.objects:
            out = [np.asarray(v) for k, v in frame.tensors.items() if k != "input" and np.shape(v)[-2:] == (17, 3)]
            if len(out) != 1 or out[0].size < 51 * len(layout.objects):
                raise ValueError(f"expected MoveNet's keypoints [N, 1, 17, 3] for {len(layout.objects)} crops, "
                                 f"got {[list(np.shape(v)) for k, v in frame.tensors.items() if k != 'input']}")
            points = out[0].reshape(-1, 17, 3)
            tw, th = layout.tensor
            for k, i in enumerate(layout.objects):
                person = frame.detections[i]
                yx = points[k]
                xs, ys = layout.places[k].to_source(yx[:, 1] * tw, yx[:, 0] * th)
                box = head_box(np.column_stack([xs, ys]), yx[:, 2], c.keypoint_score, c.min_points)
                if box is None:
                    continue
                box = (max(0.0, box[0]), max(0.0, box[1]), min(float(frame.width), box[2]),
                       min(float(frame.height), box[3]))
                if box[2] <= box[0] or box[3] <= box[1]:
                    continue
                head = Detection(box, person.score, c.label, 0)
                head.attributes["pose"] = round(float(yx[_HEAD, 2].max()), 4)
                heads.append(head)
        faces = [d for d in frame.detections if d.label in c.faces]
        sure = [d.box for d in faces if d.score >= c.face_score]
        kept = [h for h in heads if not any(share_inside(f, h.box) >= c.cover for f in sure)]
        frame.detections = [*(d for d in frame.detections if d.label != c.person), *kept]
        if self.edge is not None and not frame.skipped:  # a frame the detectors ran on: what it found holds
            n = self.seen.get(frame.stream, 0) + 1  # (one stream's frames come in order, on one worker)
            self.seen[frame.stream] = n
            self.edge.say(frame.stream, frame.index, {"found": len(kept), "ask": n % c.every == 0})  # (a person
            # detector along follows it)
        elif self.edge is not None:
            self.edge.say(frame.stream, frame.index)  # its last word holds
        return frame

    def open(self, ctx: RunContext) -> None:
        self.edge = ctx.back_edge(self.id).open(first={"ask": True})  # a stream's first frames: heads are sought
        # from the start
        self.seen: dict[str, int] = {}  # per stream: frames the detectors ran on

    def end_stream(self, stream: str) -> None:
        if self.edge is not None:
            self.edge.forget(stream)
        self.seen.pop(stream, None)


def head_box(points: np.ndarray, scores: np.ndarray, threshold: float, min_points: int
             ) -> tuple[float, float, float, float] | None:
    """The head's box from a pose's keypoints (source pixels, (17, 2), with their scores): None where fewer
    than ``min_points`` of the nose, eyes and ears score ``threshold`` or more."""
    ok = scores >= threshold
    head = np.flatnonzero(ok[_HEAD])
    if len(head) < min_points:
        return None

    def apart(pair: tuple[int, ...]) -> float:
        a, b = pair
        return float(np.hypot(*(points[a] - points[b]))) if ok[a] and ok[b] else 0.0

    width = max(1.2 * apart(_EARS), 2.2 * apart(_EYES), 0.5 * apart(_SHOULDERS))
    if width <= 0:  # the points found are a nose with one eye or ear: their spread is the face's half
        spread = points[head].max(0) - points[head].min(0)
        width = 2.0 * float(max(spread.max(), 1.0))
    cx, cy = points[head].mean(0)
    height = 1.25 * width
    cy -= 0.1 * height  # the eyes and ears lie a little under the middle of the head, the nose further
    return (float(cx - width / 2), float(cy - height / 2), float(cx + width / 2), float(cy + height / 2))

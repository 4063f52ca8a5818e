"""Multi-object tracking: an IoU tracker with ByteTrack's two-stage association, ids per stream.

``core``: the algorithm over plain arrays, one ``TrackerCore`` per stream; ``geometry``: box overlap, the
camera's motion, the picture's edges; ``motion``: the camera's own motion measured on the pictures (``gmc``);
``node``: the ``tracker`` node, which adapts frames to it; ``gaps``: the frames a detector's interval passed
over, filled in; ``offline``: a recording held whole, its pictures on disk (``spill``), each track followed back
over the frames before it was found (``backward``)."""
from __future__ import annotations

from .core import Coasting, Tentative, Track, TrackerCore, TrackerSettings, TrackUpdate
from .geometry import iou_matrix, scene_motion
from .node import Tracker

__all__ = ["Coasting", "Tentative", "Track", "TrackUpdate", "Tracker", "TrackerCore", "TrackerSettings",
           "iou_matrix", "scene_motion"]

"""Decoders: a model's raw outputs -> ``frame.detections`` with boxes in source-frame pixels.

``base``: what they share (mapping back through the preprocess's layout, suppression, the node base);
``faces``, ``objects``, ``text``: by what they find; ``checks``: second looks on crops; ``classify``: the top
classes of a classifier; ``heads``: the heads detectors are exported with, as pure functions over arrays, and
``exported``: the node that decodes any of them from the model's own metadata."""
from __future__ import annotations

from .base import Decoder, nms, to_source, weighted_nms
from .checks import BlazeFaceCheck, CenterFaceCheck, ClassCheck
from .classify import ClassifyTopK
from .exported import DetectDecode
from .faces import BlazeFaceDecode, CenterFaceDecode, RetinaFaceDecode
from .objects import SsdDecode, YoloV8Decode
from .text import DbDecode

__all__ = ["BlazeFaceCheck", "BlazeFaceDecode", "CenterFaceCheck", "CenterFaceDecode", "ClassCheck", "ClassifyTopK",
           "DbDecode", "Decoder", "DetectDecode", "RetinaFaceDecode", "SsdDecode", "YoloV8Decode", "nms", "to_source",
           "weighted_nms"]

"""Decoders: a model's raw outputs -> ``frame.detections`` with boxes in source-frame pixels.

``base``: what they share (mapping back through the preprocess's layout, suppression, the node base);
``faces``, ``objects``, ``text``: by what they find; ``checks``: second looks on crops; ``classify``: the top
classes of a classifier."""
from __future__ import annotations

from .base import Decoder, nms, to_source, weighted_nms
from .checks import BlazeFaceCheck, CenterFaceCheck, ClassCheck
from .classify import ClassifyTopK
from .faces import BlazeFaceDecode, CenterFaceDecode, RetinaFaceDecode
from .objects import SsdDecode, YoloV8Decode
from .text import DbDecode

__all__ = ["BlazeFaceCheck", "BlazeFaceDecode", "CenterFaceCheck", "CenterFaceDecode", "ClassCheck", "ClassifyTopK",
           "DbDecode", "Decoder", "RetinaFaceDecode", "SsdDecode", "YoloV8Decode", "nms", "to_source", "weighted_nms"]

"""Sinks: the nodes a stream's packets end at, written somewhere.

``records``: one JSON line per frame (``jsonl``) and the per-frame record the metadata sinks send; ``mqtt``: the
records published to a broker, with an outbox; ``recording``: each stream's video file and event clips
(``video_writer``); ``preview``: pictures for a browser (``mjpeg_preview``) and for the console (``preview``);
``metrics``: a Prometheus endpoint (``prometheus``); ``collect``: the run's memory (``collect``, ``null_sink``)."""
from __future__ import annotations

from .collect import Collect, NullSink
from .metrics import Prometheus
from .mqtt import Mqtt, Outbox
from .preview import MjpegPreview, Preview
from .recording import EventClips, VideoWriter
from .records import JsonLines, frame_record

__all__ = ["Collect", "EventClips", "JsonLines", "MjpegPreview", "Mqtt", "NullSink", "Outbox", "Preview",
           "Prometheus", "VideoWriter", "frame_record"]

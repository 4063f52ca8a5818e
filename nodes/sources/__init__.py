"""Sources: the nodes a stream begins at.

``video``: files, network streams, cameras and image folders (``video_source``), with ``network`` (a network
stream's connection kept, its timestamps across outages) and ``images`` (a folder of pictures read as a stream);
``synthetic``: frames made up (``synthetic_source``); ``feed``: an in-memory feed of the run (``list_source``)."""
from __future__ import annotations

from .feed import ListSource
from .synthetic import SyntheticSource
from .video import VideoSource, VideoSourceConfig, is_live

__all__ = ["ListSource", "SyntheticSource", "VideoSource", "VideoSourceConfig", "is_live"]

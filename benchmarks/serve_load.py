"""Does a busy API slow the video down? ``flowpipe serve`` runs the face-blur graph on 8 paced streams of the
sample clip; the streams' rates are measured over a quiet window, then while 200 concurrent clients (another
process) ask for the instance's status as fast as they are answered, then quiet again.

    python benchmarks/serve_load.py --out OUT.json   # run_all.py serve_load

Reported: per-stream FPS in each window (median over streams), their ratio under load, and the status
calls answered per second with their p50/p99 latency.
"""
from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench_results import publish

ROOT = Path(__file__).resolve().parent.parent

LOAD = r"""
import asyncio, json, sys, time
import httpx

async def main(url, clients, seconds):
    lat = []
    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=clients)) as c:
        end = time.monotonic() + seconds
        async def one():
            while time.monotonic() < end:
                t = time.perf_counter()
                r = await c.get(url)
                r.raise_for_status()
                lat.append(time.perf_counter() - t)
        await asyncio.gather(*(one() for _ in range(clients)))
    print(json.dumps(lat))

asyncio.run(main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3])))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--fps", type=float, default=5.0, help="each stream's pace")
    ap.add_argument("--clients", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=15.0, help="each window")
    ap.add_argument("--out")
    args = ap.parse_args()
    import httpx
    import uvicorn

    from flowpipe.serve.api import create_app
    from flowpipe.serve.instances import Instances

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    tmp = Path(tempfile.mkdtemp(prefix="flowpipe-serve-load-"))
    instances = Instances([ROOT / "graphs"], tmp)
    server = uvicorn.Server(uvicorn.Config(create_app(instances), host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    base = f"http://127.0.0.1:{port}"
    streams = [{"id": f"cam{i}", "uri": "sample", "options": {"loop": -1, "max_fps": args.fps}}
               for i in range(args.streams)]
    r = httpx.post(f"{base}/pipelines/face_blur_near", json={"parameters": {"tiles": None}, "streams": streams},
                   timeout=120)
    r.raise_for_status()
    iid = r.json()["id"]
    inst = instances.get(iid)

    def counts() -> dict[str, int]:
        return {row["stream"]: row["out"] for row in inst.runner.live.states()}

    def window(load: bool) -> tuple[float, list[float]]:
        c0, t0 = counts(), time.monotonic()
        lat: list[float] = []
        if load:
            got = subprocess.run([sys.executable, "-c", LOAD, f"{base}/pipelines/{iid}/status", str(args.clients),
                                  str(args.seconds)], capture_output=True, text=True, check=True)
            lat = json.loads(got.stdout)
        else:
            time.sleep(args.seconds)
        c1, t1 = counts(), time.monotonic()
        return statistics.median((c1[k] - c0.get(k, 0)) / (t1 - t0) for k in c1), lat

    time.sleep(5)  # every stream running
    quiet1, _ = window(False)
    busy, lat = window(True)
    quiet2, _ = window(False)
    httpx.delete(f"{base}/pipelines/{iid}", timeout=60)
    server.should_exit = True
    lat.sort()
    quiet = (quiet1 + quiet2) / 2
    result = {"streams": args.streams, "pace_fps": args.fps, "clients": args.clients, "window_s": args.seconds,
              "fps_quiet_before": round(quiet1, 2), "fps_under_load": round(busy, 2),
              "fps_quiet_after": round(quiet2, 2),
              "ratio_under_load": round(busy / quiet, 3), "status_calls": len(lat),
              "status_calls_per_s": round(len(lat) / args.seconds, 1),
              "status_p50_ms": round(lat[len(lat) // 2] * 1e3, 1) if lat else None,
              "status_p99_ms": round(lat[int(len(lat) * 0.99)] * 1e3, 1) if lat else None}
    publish(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Soak at scale: N looping streams of the shipped face-blur graph over several processes (shards and the
device owner) for M minutes from the first frame out (the start-up, such as compiling a GPU model into an empty
cache, is not the soak); the proportional set size (PSS) and open fds of every process of the run,
sampled every few seconds, and a line fitted through them after the warm-up: a leak is a slope.

    python benchmarks/soak_streams.py --minutes 8 --streams 16 --processes 16 --device GPU --json soak.json
    python benchmarks/soak_streams.py --minutes 4 --streams 4 --processes 2 --device CPU   # 2 cores
    python benchmarks/soak_streams.py --minutes 8 --streams 16 --processes 16 --device GPU --kill-every 30

Reports, per process and for the whole run: PSS at the end of the warm-up and at the end, the slope in MB
per hour and as a share of the level per hour, open fds the same way, and the frames' account.

With ``--kill-every S`` (chaos): a random shard is killed (SIGKILL) every S seconds and the device owner once,
half way; every source and the owner restart (``on_error: restart``). Reported and checked then: every frame
that entered accounted (out, dropped or failed), no JSONL record twice and one for every frame out, every
recording playable (decoded to its end without an error), and per fault the seconds until the rate over 2 s
is back to 80% of the rate over the 10 s before it (for a camera's server taken away: from its return).

With ``--rtsp`` one more stream comes from a live RTSP server on loopback (GStreamer's, tests/rtsp_server.py),
which the chaos stops for ``--outage`` seconds and starts again a third of the way in; with ``--mqtt`` every
record also goes to a Mosquitto broker, which the chaos pauses (SIGSTOP, SIGCONT) for ``--outage`` seconds two
thirds of the way in. Reported then: the camera's outages and reconnects, and the records published against
the frames out (the client queues them while the broker is away; each stream's outbox keeps them until the
broker has them, so what a killed shard had queued is sent by its successor: at least once).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
RECOVER_S = 8.0  # a fault this near the end of the run would leave no time to see the rate come back


#: the first line of a mapping in /proc/PID/smaps: "start-end perms offset dev inode [name]"
_MAPPING = re.compile(r"^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \S+\s*(.*)$")


class Mappings(NamedTuple):
    """A process's memory as one pass over its /proc/PID/smaps reads it."""

    pss_mb: float  # proportional set size: shared pages split among the processes that map them
    parts: dict[str, float]  # PSS in MB by what the mappings are (``_part``): a creep shows as the part that grows
    frame_maps: int  # flowpipe's shared frame buffers mapped (a mapping may hold no fd: the device owner maps
    # shards' buffers that way), so a leak of buffers shows even where the fds stay flat


def _part(name: str) -> str:
    """What a mapping is: ``heap`` (brk), ``anon`` (malloc's arenas, Python's and the libraries' own mmaps),
    ``frames`` (flowpipe's shared buffers), ``device`` (``/dev/...``: a driver's), ``code`` (shared objects),
    ``stack``, ``other`` ([vdso] ...), ``files``."""
    return ("heap" if name == "[heap]" else "stack" if name.startswith("[stack") else
            "frames" if "flowpipe-frame" in name else "device" if name.startswith("/dev/") else
            "code" if ".so" in name else "anon" if not name or name.startswith("[anon") else
            "other" if name.startswith("[") else "files")


def mappings(pid: int) -> Mappings:
    kb: dict[str, int] = {}
    frames = 0
    part = "anon"
    try:
        with open(f"/proc/{pid}/smaps") as f:
            for line in f:
                if line.startswith("Pss:"):
                    kb[part] = kb.get(part, 0) + int(line.split()[1])
                elif (m := _MAPPING.match(line)) is not None:
                    part = _part(m.group(1).strip())
                    frames += part == "frames"
    except OSError:
        pass
    return Mappings(round(sum(kb.values()) / 1024, 1), {k: round(v / 1024, 1) for k, v in sorted(kb.items())}, frames)


def fd_inventory(pid: int) -> dict[str, int]:
    """A process's open fds by what they are (``memfd:flowpipe-frame 1572864``: a shared buffer of that many
    bytes; ``socket``, ``pipe``, ``anon_inode:[eventfd]``, a file's folder ...): a creep shows as the kind that
    grows."""
    kinds: dict[str, int] = {}
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return kinds
    for fd in names:
        path = f"/proc/{pid}/fd/{fd}"
        try:
            target = os.readlink(path)
            if target.startswith(("/memfd:", "/dev/dma_heap")) or " (deleted)" in target:
                kind = f"{target.split(' (')[0]} {os.stat(path).st_size}"
            elif target.startswith("/"):
                kind = os.path.dirname(target)
            else:
                kind = target.split("[")[0].rstrip(":") if target.startswith(("socket", "pipe")) else target
        except OSError:
            continue
        kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


def inventory_change(first: dict[int, dict[str, int]], last: dict[int, dict[str, int]]) -> dict[str, dict[str, int]]:
    """Per process (by pid), each kind of fd whose count changed between two inventories: its change."""
    out: dict[str, dict[str, int]] = {}
    for pid, kinds in last.items():
        before = first.get(pid, {})
        moved = {k: kinds.get(k, 0) - before.get(k, 0) for k in set(kinds) | set(before)
                 if kinds.get(k, 0) != before.get(k, 0)}
        if moved:
            out[str(pid)] = dict(sorted(moved.items(), key=lambda kv: -abs(kv[1])))
    return out


def process_tree(root: int) -> list[int]:
    """``root`` and every process below it."""
    parent: dict[int, int] = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    parent[int(p)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    found: list[int] = []
    todo = [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += [c for c, pp in parent.items() if pp == pid]
    return found


def fit(t: list[float], y: list[float]) -> dict[str, float]:
    """Level and slope of a series after the warm-up (per hour, and as a share of the mean level per hour)."""
    if len(t) < 3:
        return {"start": y[0] if y else 0.0, "end": y[-1] if y else 0.0, "per_hour": 0.0, "share_per_hour": 0.0}
    slope = float(np.polyfit(t, y, 1)[0]) * 3600
    level = float(np.mean(y)) or 1.0
    return {"start": round(y[0], 1), "end": round(y[-1], 1), "per_hour": round(slope, 1),
            "share_per_hour": round(slope / level, 4)}


def main() -> None:
    from flowpipe import load_graph
    from flowpipe.cli.bench import replicate_sources
    from flowpipe.runtime import executor
    from flowpipe.runtime.settings import malloc_arenas_limited

    malloc_arenas_limited()  # as the flowpipe command does for itself and the processes it starts
    ap = argparse.ArgumentParser()
    ap.add_argument("--graph", default=str(ROOT / "graphs" / "face_blur.yaml"))
    ap.add_argument("--minutes", type=float, default=8)
    ap.add_argument("--warmup", type=float, default=60, help="seconds left out of the fit")
    ap.add_argument("--every", type=float, default=10, help="seconds between samples")
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--processes", default="16")
    ap.add_argument("--device", default="AUTO")
    ap.add_argument("--set", action="append", default=[], dest="sets", help="graph params NAME=VALUE")
    ap.add_argument("--kill-every", type=float, default=0, help="seconds between shard kills (0: none)")
    ap.add_argument("--rtsp", action="store_true", help="one more stream from an RTSP server the chaos stops")
    ap.add_argument("--mqtt", action="store_true", help="records to an MQTT broker the chaos pauses")
    ap.add_argument("--outage", type=float, default=4.0, help="seconds the RTSP server and the broker are away")
    ap.add_argument("--flap", help="UP,DOWN: the RTSP camera flaps for the whole run (up UP s, down DOWN s) "
                                   "instead of one outage")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.kill_every and a.kill_every < RECOVER_S:
        ap.error(f"--kill-every: at least {RECOVER_S:g} s, so that each fault's recovery is its own")
    work = Path(tempfile.mkdtemp(prefix="flowpipe-soak-"))
    params: dict[str, Any] = {"output": str(work / "o.mp4"), "metadata": str(work / "m.jsonl"), "device": a.device}
    params.update(dict(s.split("=", 1) for s in a.sets))
    spec = load_graph(a.graph, params)
    for s in spec.sources():
        s.config.loop = -1  # type: ignore[attr-defined]
    spec = replicate_sources(spec, a.streams)
    camera = Service.rtsp(work) if a.rtsp else None
    broker = Service.mosquitto(work) if a.mqtt else None
    if camera is not None:
        add_camera(spec, f"rtsp://127.0.0.1:{camera.port}/live")
    if broker is not None:
        add_mqtt(spec, broker.port, work / "outbox")
    heard = Listener(broker.port) if broker is not None else None
    if a.kill_every:  # every part restarts after a kill
        for s in spec.nodes:
            if s in spec.sources() or s.contract.serves_streams:
                s.on_error, s.restarts = "restart", 1000
    run = executor(spec, int(a.processes) if a.processes.isdigit() else a.processes)
    samples: list[dict[str, Any]] = []
    done = threading.Event()
    rate: list[tuple[float, int]] = []  # (seconds, frames out) every 0.5 s
    faults: list[dict[str, Any]] = []
    t_start = time.monotonic()
    begun: list[float] = []  # when the first frame came out: the soak's clock (the start-up is not the soak)

    def since_first() -> float | None:
        if not begun:
            if run.snapshot()["out"] == 0:
                return None
            begun.append(time.monotonic())
        return time.monotonic() - begun[0]

    def count() -> None:
        while not done.wait(0.5):
            rate.append((time.monotonic() - t_start, run.snapshot()["out"]))

    flap = tuple(float(x) for x in a.flap.split(",")) if a.flap else None
    camera_at, camera_down = (flap[0], flap[1]) if flap else (a.minutes * 20, a.outage)

    def chaos() -> None:
        """A random shard killed every ``kill_every`` s (none in the run's last RECOVER_S), the device owner
        once at half time; times from the first frame out (faults are reported from the run's start, as the
        rate is)."""
        nonlocal camera_at
        rng = random.Random(1)  # noqa: S311 - which shard dies, repeatably
        owner_at, next_kill = a.minutes * 30, a.warmup / 2 + a.kill_every
        last_kill = -RECOVER_S  # faults RECOVER_S apart at least: each one's recovery is its own
        while not done.wait(0.2):
            now, soak = time.monotonic() - t_start, since_first()
            if soak is None:
                continue
            shards = getattr(run, "shards", [])
            owner = getattr(run, "owner", None)
            if owner_at is not None and soak >= owner_at and soak - last_kill >= RECOVER_S and owner is not None \
                    and owner.pid:
                faults.append({"t_s": round(now, 1), "killed": "device owner", "pid": owner.pid})
                os.kill(owner.pid, signal.SIGKILL)
                owner_at, last_kill = None, soak
                next_kill = max(next_kill, soak + RECOVER_S)
            elif next_kill <= soak < a.minutes * 60 - RECOVER_S:  # time left to see it recover
                live = [sh for sh in shards if sh.opened and sh.pid and not sh.restarted and sh.proc.is_alive()]
                if live:
                    sh = rng.choice(live)
                    faults.append({"t_s": round(now, 1), "killed": f"shard {sh.index}", "pid": sh.pid})
                    os.kill(sh.pid, signal.SIGKILL)
                    last_kill = soak
                next_kill = soak + a.kill_every
            for service, at, down in ((camera, camera_at, camera_down), (broker, a.minutes * 40, a.outage)):
                if service is not None and not service.faulted and soak >= at:
                    faults.append({"t_s": round(now, 1), "away": service.name, "for_s": down})
                    service.faulted = True
                    threading.Thread(target=service.outage, args=(down,), daemon=True).start()
            if flap and camera is not None and camera.faulted and soak >= camera_at + sum(flap) \
                    and soak < a.minutes * 60 - RECOVER_S:
                camera_at, camera.faulted = camera_at + sum(flap), False  # the next time it goes down

    threading.Thread(target=count, daemon=True).start()
    if a.kill_every:
        threading.Thread(target=chaos, daemon=True).start()

    inventories: dict[str, dict[int, dict[str, int]]] = {}  # fds by kind: at the end of the warm-up, the last

    def sample() -> None:
        while since_first() is None and not done.wait(0.2):
            pass
        t0 = time.monotonic()
        while not done.wait(a.every):
            pids = process_tree(os.getpid())
            snap = run.snapshot()
            mem = {p: mappings(p) for p in pids}
            fds = {p: fd_inventory(p) for p in pids}  # one pass over each process's fds: the count and the kinds
            samples.append({"t_s": round(time.monotonic() - t0, 1), "out": snap["out"],
                            "pss_mb": {p: m.pss_mb for p, m in mem.items()},
                            "fds": {p: sum(kinds.values()) for p, kinds in fds.items()},
                            "frame_maps": {p: m.frame_maps for p, m in mem.items()},
                            "pss_parts": {p: m.parts for p, m in mem.items()}})
            if "warm" not in inventories and samples[-1]["t_s"] >= a.warmup:
                inventories["warm"] = fds
            inventories["last"] = fds
            print(f"{samples[-1]['t_s']:7.1f}s  PSS {sum(samples[-1]['pss_mb'].values()):8.1f} MB  fds "
                  f"{sum(samples[-1]['fds'].values()):6d}  out {snap['out']}", file=sys.stderr, flush=True)
            if time.monotonic() - t0 > a.minutes * 60:
                run.stop()
                return

    threading.Thread(target=sample, daemon=True).start()
    try:
        res = run.run()
    finally:
        done.set()
        for service in (camera, broker):
            if service is not None:
                service.stop()
    out = summarize(samples, a.warmup)
    out.update(graph=a.graph, streams=a.streams, processes=a.processes, device=a.device, minutes=a.minutes,
               warmup_s=a.warmup, frames=res.frames, error=str(res.error) if res.error else None, samples=samples)
    if "warm" in inventories:  # what grew after the warm-up, per process: the kinds of fd a creep is made of
        out["fds_changed_after_warmup"] = inventory_change(inventories["warm"], inventories["last"])
        owner = getattr(run, "owner", None)
        out["device_owner_pid"] = owner.pid if owner is not None else None
    if a.kill_every:
        out["chaos"] = chaos_report(work, res.frames, faults, rate)
        stats = res.to_json()  # the last device owner's: how long it took to start, and to open each node
        out["device_owner"] = dict(stats.get("device_owner") or {}, opened={
            nid: {k: n["device_owner"].get(k) for k in ("open_s", "frames")}
            for nid, n in stats.get("nodes", {}).items() if isinstance(n.get("device_owner"), dict)})
        out["owner_models"] = {k: {f: v.get(f) for f in ("cache", "compile_ms", "fil_ms", "feil_ms")}
                               for k, v in stats.items() if k.startswith("inference.")}
        nodes = stats.get("nodes", {})

        def parts(nid: str) -> list[dict[str, Any]]:  # a node's stats in each process that ran it
            n = nodes.get(nid, {})
            return list(n.get("shards", {}).values()) or [n]

        if camera is not None:
            out["camera"] = {"frames": sum(p.get("frames") or 0 for p in parts("camera")),
                             "reconnects": sum(p.get("reconnects") or 0 for p in parts("camera")),
                             "outages": [o for p in parts("camera") for o in p.get("outages") or []]}
        if heard is not None:
            time.sleep(2.0)  # the last messages on their way
            heard.close()
            records = {(r["stream"], r["frame"]) for r in map(json.loads, (work / "m.jsonl").read_text().splitlines())}
            got = heard.frames
            missing = sorted(records - set(got))
            kept = outbox_kept(work / "outbox")  # left for each stream's next run: delivered then, not lost
            out["mqtt"] = {"records": len(records), "received": len(got), "missing": len(missing),
                           "twice": len(got) - len(set(got)), "not_recorded": len(set(got) - records),
                           "queue_dropped": sum(p.get("queue_dropped") or 0 for p in parts("mqtt")),
                           "unacknowledged": sum(p.get("unacknowledged") or 0 for p in parts("mqtt")),
                           "left_in_outbox": len(kept), "lost": [list(k) for k in missing if k not in kept][:20],
                           "missing_frames": [list(k) for k in missing[:20]],
                           "heard_last_s": heard.quiet_s()}
    print(json.dumps({k: v for k, v in out.items() if k not in ("samples", "per_process")}, indent=1))
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))


class Service:
    """A process the chaos takes away for a while: the RTSP server (stopped, started again on its port) or the
    MQTT broker (paused with SIGSTOP, then SIGCONT)."""

    def __init__(self, name: str, argv: list[str], port: int, pause: bool):
        self.name, self.argv, self.port, self.pause = name, argv, port, pause
        self.faulted = False
        self.proc = self._start()

    @classmethod
    def rtsp(cls, work: Path) -> Service:
        py = "/usr/bin/python3"  # GStreamer's Python bindings are the system Python's
        return cls("rtsp server", [py, str(ROOT / "tests" / "rtsp_server.py"), str(_free_port())], 0, pause=False)

    @classmethod
    def mosquitto(cls, work: Path) -> Service:
        port = _free_port()
        conf = work / "mosquitto.conf"
        conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n")
        exe = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
        return cls("mqtt broker", [exe, "-c", str(conf)], port, pause=True)

    def _start(self) -> subprocess.Popen[bytes]:
        if not self.port:
            self.port = int(self.argv[-1])
        proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return proc
            except OSError:
                time.sleep(0.05)
        proc.kill()
        raise RuntimeError(f"{self.name} ({self.argv[0]}) did not start")

    def outage(self, seconds: float) -> None:
        if self.pause:
            self.proc.send_signal(signal.SIGSTOP)
            time.sleep(seconds)
            self.proc.send_signal(signal.SIGCONT)
        else:
            self.proc.terminate()
            self.proc.wait(10)
            time.sleep(seconds)
            self.proc = self._start()

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGCONT)
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class Listener:
    """An MQTT subscriber to every record (QoS 1), on a session of its own: which frames' records arrived."""

    def __init__(self, port: int):
        import paho.mqtt.client as mqtt

        self.frames: list[tuple[str, int]] = []
        ready = threading.Event()
        self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
        self.c.on_connect = lambda c, u, f, rc, p=None: c.subscribe("flowpipe/#", qos=1)
        self.c.on_subscribe = lambda c, u, mid, rcs, p=None: ready.set()
        self.last = 0.0
        self.c.on_message = lambda c, u, m: self._heard(m.payload)
        self.c.connect("127.0.0.1", port)
        self.c.loop_start()
        if not ready.wait(10):
            raise RuntimeError("could not subscribe to the broker")

    def quiet_s(self) -> float | None:
        """Seconds since the last record arrived."""
        return round(time.monotonic() - self.last, 2) if self.frames else None

    def _heard(self, payload: bytes | bytearray) -> None:
        self.frames.append(record_key(payload))
        self.last = time.monotonic()


    def close(self) -> None:
        self.c.loop_stop()
        self.c.disconnect()


def record_key(payload: bytes | bytearray) -> tuple[str, int]:
    """A record's stream and frame."""
    r = json.loads(payload)
    return r["stream"], r["frame"]


def outbox_kept(folder: Path) -> set[tuple[str, int]]:
    """The records the MQTT outboxes still hold undelivered at the end (their stream's next run sends them)."""
    kept: set[tuple[str, int]] = set()
    for f in folder.glob("*.jsonl"):
        left: dict[int, str] = {}
        for line in f.read_bytes().splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if "m" in r:
                left[r["m"]] = r["p"]
            elif "a" in r:
                left.pop(r["a"], None)
        kept |= {record_key(p.encode()) for p in left.values()}
    return kept


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def add_camera(spec: Any, uri: str) -> None:
    """One more stream, ``camera``: a copy of the graph's source reading ``uri`` live, reconnecting for ever."""
    from flowpipe.cli.bench import copy_source

    copy_source(spec, spec.sources()[0], "camera", {"uri": uri, "stream": "camera", "loop": 0,
                                                   "reconnect_attempts": 1000, "reconnect_backoff_s": 0.2})


def add_mqtt(spec: Any, port: int, outbox: Path) -> None:
    """Every frame's record to the broker too, from where the JSON lines get theirs, kept in ``outbox`` until
    the broker has it (what a killed shard had queued is sent by the process that takes its streams over)."""
    from flowpipe.graph import NodeSpec
    from flowpipe.registry import lookup

    meta = next(n for n in spec.nodes if n.type == "jsonl")
    cls = lookup("mqtt")
    config = cls.Config.model_validate({"port": port, "topic": "flowpipe/{stream}", "max_queued": 60000,
                                        "outbox": str(outbox)})
    spec.add(NodeSpec("mqtt", "mqtt", cls, config, {"detections": list(meta.inputs["detections"])}))


def chaos_report(work: Path, frames: dict[str, int], faults: list[dict[str, Any]],
                 rate: list[tuple[float, int]]) -> dict[str, Any]:
    """What the faults left: the account, the JSONL records against the frames out, every recording decoded
    to its end, and the seconds each fault took the rate down for."""
    import av

    seen: dict[tuple[str, int], int] = {}
    for f in work.glob("*.jsonl"):
        for line in f.read_bytes().splitlines():
            r = json.loads(line)
            seen[(r["stream"], r["frame"])] = seen.get((r["stream"], r["frame"]), 0) + 1
    files: dict[str, dict[str, Any]] = {}
    for f in sorted(work.glob("*.mp4")):
        try:
            with av.open(str(f)) as c:
                c.streams.video[0].thread_type = "AUTO"  # decoded on every core: hours of video to check
                files[f.name] = {"frames": sum(1 for _ in c.decode(video=0)), "error": None}
        except Exception as e:  # noqa: BLE001 - a file that does not play is what this reports
            files[f.name] = {"frames": None, "error": f"{type(e).__name__}: {e}"}
    for fault in faults:  # a camera's stream cannot come back before its server does: counted from its return
        fault["recovery_s"] = recovery(rate, fault["t_s"], away=fault["for_s"] if fault.get("away") == "rtsp server"
                                       else 0.0)
    return {"faults": faults, "accounted": frames["in"] == frames["out"] + frames["dropped"] + frames["failed"],
            "records": sum(seen.values()), "records_twice": sum(1 for n in seen.values() if n > 1),
            "records_vs_out": sum(seen.values()) - frames["out"], "recordings": len(files),
            "unplayable": {k: v["error"] for k, v in files.items() if v["error"]},
            "worst_recovery_s": max((f["recovery_s"] for f in faults if f["recovery_s"] is not None), default=None),
            "not_recovered": sum(1 for f in faults if f["recovery_s"] is None)}


def recovery(rate: list[tuple[float, int]], t: float, before: float = 10.0, window: float = 2.0,
             share: float = 0.8, away: float = 0.0) -> float | None:
    """Seconds from ``t`` (or from ``t + away``: a service that was away for that long, from its return) until
    the rate over ``window`` seconds is ``share`` of the rate over the ``before`` seconds before ``t`` again
    (None: never, in the run)."""
    def over(t0: float, t1: float) -> float | None:
        pts = [(s, n) for s, n in rate if t0 <= s <= t1]
        return (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0]) if len(pts) > 1 and pts[-1][0] > pts[0][0] else None

    base = over(t - before, t)
    if not base:
        return None
    back = t + away
    for s, _ in rate:
        if s >= back + window:
            r = over(s - window, s)
            if r is not None and r >= share * base:
                return round(s - back, 1)
    return None


def _ends(series: list[int]) -> dict[str, int | None]:
    """The first and last of a series after the warm-up."""
    return {"start": series[0] if series else None, "end": series[-1] if series else None}


def _parts_change(series: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    """Each part of a process's PSS after the warm-up: its first and last MB, and the change."""
    if not series:
        return {}
    first, last = series[0], series[-1]
    return {k: {"start": first.get(k, 0.0), "end": last.get(k, 0.0),
                "change": round(last.get(k, 0.0) - first.get(k, 0.0), 1)} for k in sorted(set(first) | set(last))}


def summarize(samples: list[dict[str, Any]], warmup: float) -> dict[str, Any]:
    """Rate, and the lines through PSS and open fds after ``warmup`` (whole, last half, per process)."""
    kept = [s for s in samples if s["t_s"] >= warmup]
    half = kept[len(kept) // 2:]
    t = [s["t_s"] for s in kept]
    pids = sorted({p for s in kept for p in s["pss_mb"]})
    per = {str(p): {"pss_mb": fit([s["t_s"] for s in kept if p in s["pss_mb"]],
                                  [s["pss_mb"][p] for s in kept if p in s["pss_mb"]]),
                    "fds": fit([s["t_s"] for s in kept if p in s["fds"]], [s["fds"][p] for s in kept if p in s["fds"]]),
                    "frame_maps": _ends([s["frame_maps"][p] for s in kept if p in s.get("frame_maps", {})]),
                    "pss_parts_mb": _parts_change([s["pss_parts"][p] for s in kept if p in s.get("pss_parts", {})])}
           for p in pids}
    th = [s["t_s"] for s in half]
    return {"fps": round((kept[-1]["out"] - kept[0]["out"]) / (t[-1] - t[0]), 1) if len(kept) > 1 else None,
            "pss_mb": fit(t, [sum(s["pss_mb"].values()) for s in kept]),
            "fds": fit(t, [float(sum(s["fds"].values())) for s in kept]),
            "pss_mb_last_half": fit(th, [sum(s["pss_mb"].values()) for s in half]),
            "fds_last_half": fit(th, [float(sum(s["fds"].values())) for s in half]), "per_process": per}


if __name__ == "__main__":
    main()

"""Commands for runs on a Ray cluster: ``run --cluster`` (through the run's controller), ``status``, ``stop``."""
from __future__ import annotations

import argparse
import json
import logging
import secrets
import sys
from pathlib import Path
from typing import Any

from ..cluster.service import attach, runs, submit
from ..node import set_setting
from ..runtime.settings import interrupts_stop

log = logging.getLogger("flowpipe")


def run_name(graph: str) -> str:
    return f"{Path(graph).stem}-{secrets.token_hex(3)}"


def anchor_paths(spec: Any, cwd: Path) -> None:
    """Every relative path the graph writes (recordings, records, folders, state) and an input file there made
    absolute against the folder the command runs in: the run's processes start in the cluster's own working
    folder, where a relative path would land otherwise (each host writes its streams' files on its own disk)."""
    for node, key, _, path in spec.outputs():
        if not Path(path).expanduser().is_absolute():
            set_setting(node.config, key, str(cwd / path))
    for node in spec.nodes:
        uri = getattr(node.config, "uri", None)  # an input file named from here
        if isinstance(uri, str) and "://" not in uri and not Path(uri).is_absolute() and (cwd / uri).exists():
            node.config.uri = str(cwd / uri)


def run_on_cluster(args: argparse.Namespace, spec: Any, address: str, progress: Any) -> Any:
    """``flowpipe run --cluster``: the run's controller starts in the cluster; this command waits for its
    result (passing Ctrl-C on), or with ``--detach`` leaves it running once its hosts have opened, prints its
    name and gives the exit status (1 where it could not be placed or opened)."""
    name = args.name or run_name(args.graph)
    anchor_paths(spec, Path.cwd())
    client = submit(spec, address, name, detach=args.detach, max_frames=args.max_frames,
                    rebalance=args.rebalance)
    log.info("run %s: %d streams placed over the Ray cluster at %s", name, len(spec.sources()), address)
    if args.detach:  # left running only once it runs: a placement or an open that fails is said here
        placed = client.placed()
        if placed["phase"] == "finished" and placed.get("error"):
            client.remove()
            print(f"error: run {name}: {placed['error']}", file=sys.stderr)
            return 1
        print(name)
        return 0
    with interrupts_stop(client):
        return client.wait(progress)


def _not_local(args: argparse.Namespace) -> bool:
    """``local`` names a cluster that lives only as long as one command: there is none to look into."""
    if args.cluster != "local":
        return True
    print(f"error: flowpipe {args.cmd} --cluster local: a local cluster ends with the command that started it; "
          "name a running one: --cluster auto|ray://HOST:PORT", file=sys.stderr)
    return False


def cmd_status(args: argparse.Namespace) -> int:
    if not _not_local(args):
        return 2
    found = runs(args.cluster)
    if args.name:
        found = [r for r in found if r["name"] == args.name]
        if not found:
            print(f"error: no run named {args.name!r} in the cluster at {args.cluster}", file=sys.stderr)
            return 1
    if args.json:
        print(json.dumps(found, indent=2))
        return 0
    if not found:
        print(f"no flowpipe runs in the cluster at {args.cluster}")
    for r in found:
        print(show_run(r))
    return 0


def show_run(r: dict[str, Any]) -> str:
    f = r.get("frames") or {}
    lines = [f"run {r['name']}: {r['phase']}, {r.get('elapsed_s', 0)} s, frames in {f.get('in', 0)} out "
             f"{f.get('out', 0)} dropped {f.get('dropped', 0)} failed {f.get('failed', 0)}"
             + (f"; error: {r['error']}" if r.get("error") else "")]
    for h in r["hosts"]:
        devices = ", ".join(f"{k} {v:g}" for k, v in sorted(h["devices"].items()))
        metrics = f", metrics {h['metrics']}" if h["metrics"] else ""
        lines.append(f"  host {h['address']} ({h['host']}): {h['state']}, {h['processes']} process(es), "
                     f"{h['fps']:.1f} fps, devices {devices or '-'}{metrics}")
    for s, st in r["streams"].items():
        lines.append(f"    stream {s}: {st['frames']} frames, {st['fps']:.1f} fps on {st['host'] or '-'}")
    for m in r.get("replacements", []):
        done = f"placed again in {m['replaced_in_s']} s" if m.get("error") is None else \
            f"not placed again: {m['error']}"
        lines.append(f"  {m['why']}: streams {', '.join(m['streams'])} of host {m['host']} {done}")
    return "\n".join(lines)


def cmd_stop(args: argparse.Namespace) -> int:
    """Stops a run (its hosts drain; ``--now``: at once) and waits for its end. A run started with
    ``--detach`` is removed with its result (printed here); otherwise its result goes to the command that
    started it."""
    if not _not_local(args):
        return 2
    client = attach(args.cluster, args.name)
    client.stop(now=args.now)
    result = client.wait(remove=False)
    f = result.frames
    print(f"run {args.name}: ended; frames in {f['in']}, out {f['out']}, dropped {f['dropped']}, failed {f['failed']}")
    if client.call("detached"):
        client.remove()
    return 0


def add_commands(sub: Any) -> None:
    s = sub.add_parser("status", help="runs on a Ray cluster: hosts, devices, streams, FPS")
    s.add_argument("name", nargs="?", help="one run (default: every run)")
    s.add_argument("--cluster", required=True, metavar="auto|ray://HOST:PORT")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_status)

    t = sub.add_parser("stop", help="stop a run on a Ray cluster (its hosts drain), or remove one that ended")
    t.add_argument("name")
    t.add_argument("--cluster", required=True, metavar="auto|ray://HOST:PORT")
    t.add_argument("--now", action="store_true", help="stop at once instead of draining the frames in flight")
    t.set_defaults(func=cmd_stop)

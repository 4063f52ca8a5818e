"""``flowpipe serve``: the REST API and web console over template folders, on this host or a Ray cluster."""
from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import sys
from pathlib import Path
from typing import Any

log = logging.getLogger("flowpipe")


def cmd_serve(args: argparse.Namespace) -> int:
    """``flowpipe serve``: the REST API and web console over the graphs of ``--graphs`` folders."""
    try:
        import fastapi  # noqa: F401  # the serve extra (FastAPI, uvicorn): loaded only by the command that needs it
        import uvicorn
    except ImportError as e:
        print(f"error: flowpipe serve needs the serve extra ({e.name} is not installed): "
              "pip install -e '.[serve]' in a checkout, or pip install 'flowpipe[serve]'", file=sys.stderr)
        return 2

    from ..serve.api import create_app
    from ..serve.events import EventIndexError
    from ..serve.instances import Instances
    from ..serve.state import StateError

    token = args.token or os.environ.get("FLOWPIPE_TOKEN")
    try:
        loopback = ipaddress.ip_address(args.host).is_loopback
    except ValueError:
        loopback = args.host == "localhost"
    if not loopback and not token:
        print(f"error: serving on {args.host} (not loopback) needs a token: --token or FLOWPIPE_TOKEN",
              file=sys.stderr)
        return 2
    if bool(args.tls_cert) != bool(args.tls_key):
        print("error: TLS needs both --tls-cert and --tls-key (PEM files)", file=sys.stderr)
        return 2
    for opt, f in (("--tls-cert", args.tls_cert), ("--tls-key", args.tls_key)):
        if f and not Path(f).is_file():
            print(f"error: {opt} {f}: no such file; expected a PEM file", file=sys.stderr)
            return 2
    tls = bool(args.tls_cert)
    if token and not tls and not loopback:
        if not args.insecure_http:
            print(f"error: serving on {args.host} over plain HTTP sends the token in clear: --tls-cert and --tls-key "
                  "serve HTTPS; --insecure-http if a TLS proxy in front of it speaks to the network", file=sys.stderr)
            return 2
        log.warning("the token travels in clear over plain HTTP on %s (--insecure-http): keep a TLS proxy in front",
                    args.host)
    state = Path(args.state) if args.state else None
    if state is not None and (state.is_dir() or (state.parent.exists() and not state.parent.is_dir())):
        print(f"error: --state {state}: not a file in a folder; expected a path like DIR/instances.json",
              file=sys.stderr)
        return 2
    if args.events_keep < 0 or (args.events_keep_days is not None and not args.events_keep_days > 0):
        print("error: --events-keep and --events-keep-days: expected a number over 0 (--events-keep 0: no limit)",
              file=sys.stderr)
        return 2
    shipped = Path(__file__).resolve().parents[2] / "graphs"
    folders = [Path(f) for f in (args.graphs or [Path("graphs") if Path("graphs").is_dir() else shipped])]
    try:
        instances = Instances(folders, Path(args.output_dir), Path(args.media_dir) if args.media_dir else None,
                              cluster=args.cluster, state=state, events_keep_days=args.events_keep_days,
                              events_keep=args.events_keep or None)
    except EventIndexError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    log.info("flowpipe serve on %s://%s:%d/ (%d templates from %s)%s", "https" if tls else "http", args.host,
             args.port,
             len(instances.templates), ", ".join(map(str, folders)),
             "; requests need 'Authorization: Bearer <token>'" if token else "")
    if not instances.templates:
        log.warning("no graph templates in %s (a template is a graph file, NAME.yaml, that flowpipe validate "
                    "passes): --graphs DIR serves those in DIR", ", ".join(
                        f"{f.resolve()}{'' if f.is_dir() else ' (no such folder)'}" for f in folders))
    if not args.fresh:
        try:
            back = instances.restore()
        except StateError as e:
            print(f"error: {e}: move it away, or --fresh to start with no pipeline (and write it anew)",
                  file=sys.stderr)
            return 2
        if back:
            log.info("restored %d pipeline(s) with %d stream(s) from %s (--fresh: none)", len(back),
                     sum(len(i.added) for i in back), instances.saved_at)
    uvicorn.run(create_app(instances, token), host=args.host, port=args.port, log_level="warning",
                ssl_certfile=args.tls_cert, ssl_keyfile=args.tls_key)
    instances.closing = True  # what runs now is what the next start restores
    for inst in list(instances.instances.values()):
        instances.stop(inst)
    instances.close()
    return 0


def add_serve(sub: Any) -> None:
    s = sub.add_parser("serve", help="REST API and web console: start graphs, add and remove streams")
    s.add_argument("--host", default="127.0.0.1", help="bind address (not loopback: needs --token)")
    s.add_argument("--port", type=int, default=8080, help="(default: 8080)")
    s.add_argument("--graphs", action="append", metavar="DIR", help="template folders (default: ./graphs where "
                   "there is one, else the graphs flowpipe ships)")
    s.add_argument("--output-dir", default="out/serve", help="every instance writes inside DIR/ID/")
    s.add_argument("--media-dir", help="files streams may read (default: network URIs and 'sample' only)")
    s.add_argument("--token", help="bearer token every request needs (or FLOWPIPE_TOKEN)")
    s.add_argument("--tls-cert", metavar="PEM", help="serve HTTPS with this certificate (chain) ...")
    s.add_argument("--tls-key", metavar="PEM", help="... and its private key")
    s.add_argument("--insecure-http", action="store_true", help="serve plain HTTP off loopback with a token (a TLS "
                   "proxy in front speaks to the network); refused otherwise")
    s.add_argument("--state", metavar="FILE", help="what runs, saved at each change and run again at the next start "
                   "(default: OUTPUT_DIR/instances.json); it holds no token and no camera password")
    s.add_argument("--fresh", action="store_true", help="start with no pipeline (default: those the last serve with "
                   "this --state ran, with their streams)")
    s.add_argument("--events-keep-days", type=float, metavar="DAYS", help="the event index (OUTPUT_DIR/events.sqlite, "
                   "GET /events) forgets events older than this (default: none; snapshots and clips are the graph's "
                   "to keep or delete)")
    s.add_argument("--events-keep", type=int, default=100_000, metavar="N", help="... and the oldest beyond N "
                   "(default: 100000; 0: no limit)")
    s.add_argument("--cluster", metavar="auto|ray://HOST:PORT",
                   help="instances run on a Ray cluster, each stream placed on a host with room for it")
    s.set_defaults(func=cmd_serve)

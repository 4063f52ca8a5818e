"""The command line's commands (``run``, ``validate``, ``graph``, ``nodes``, and those of ``bench``, ``extra``,
``cluster`` and ``serve``) and their parser."""
from __future__ import annotations

import argparse
import gc
import inspect
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ..errors import Diagnostic, GraphError
from ..graph import load_graph, parse_sets
from ..registry import lookup, registry
from ..runtime.executor import executor, resolve_processes
from ..runtime.settings import interrupts_stop, limit_library_threads, malloc_arenas_limited, open_files_raised
from ..runtime.stats import RunSummary
from . import cluster as cli_cluster
from . import extra as cli_extra
from . import interrupted
from . import serve as cli_serve
from .args import positive_arg, processes_arg
from .cluster import run_on_cluster

log = logging.getLogger("flowpipe")
EXIT_OK, EXIT_RUNTIME, EXIT_CONFIG, EXIT_INTERRUPTED = 0, 1, 2, 130


def _load(path: str, sets: list[str] | None = None, fixed_streams: bool = False):
    """A graph file with ``--set`` values; ``fixed_streams``: it is run here, so its streams are its sources
    (no stream is added while it runs)."""
    try:
        params = parse_sets(sets)
    except GraphError as e:  # the command line's, told with the graph it was for
        raise GraphError(Diagnostic(e.diagnostics[0].message, path)) from None
    return load_graph(path, params, fixed_streams=fixed_streams)


class _Progress:
    """A one-line live display on a terminal; silent otherwise."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stderr  # the one in use now, not the one at import
        self.enabled = self.stream.isatty()
        self.t0 = time.monotonic()
        self.last = (self.t0, 0)

    def __call__(self, counts: dict[str, int]) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        t_prev, n_prev = self.last
        done = counts["out"] + counts["dropped"] + counts["failed"]
        fps = (done - n_prev) / max(now - t_prev, 1e-6)
        self.last = (now, done)
        self.stream.write(f"\r{now - self.t0:7.1f}s  in {counts['in']}  out {counts['out']}  "
                          f"dropped {counts['dropped']}  failed {counts['failed']}  {fps:7.1f} fps\x1b[K")
        self.stream.flush()

    def end(self) -> None:
        if self.enabled:
            self.stream.write("\n")


def cmd_run(args: argparse.Namespace) -> int:

    spec = _load(args.graph, args.set, fixed_streams=True)
    if args.stats:  # its folder made now, as outputs' are: a run's stats are never lost at its end
        Path(args.stats).parent.mkdir(parents=True, exist_ok=True)
    progress = _Progress()
    # nodes that cannot run sharded refuse it here, on a cluster too
    processes = resolve_processes(spec, args.processes)
    if args.no_device_owner:
        spec.device_owner = False
    address = args.cluster or (spec.cluster.address if spec.cluster else None)
    if args.detach and not address:
        print("error: --detach needs a cluster to leave the run in: --cluster auto|ray://HOST:PORT", file=sys.stderr)
        return EXIT_CONFIG
    if args.detach and address == "local":
        print("error: --detach with --cluster local: the local cluster ends with this command, and the run with "
              "it; start one with 'ray start --head' and use --cluster auto", file=sys.stderr)
        return EXIT_CONFIG
    result: RunSummary
    if address:
        on_cluster = run_on_cluster(args, spec, address, progress)
        if isinstance(on_cluster, int):  # --detach: the run goes on in the cluster, or could not start
            return on_cluster
        result = on_cluster
    else:
        run = executor(spec, processes, max_frames=args.max_frames, progress=progress)
        if spec.processes > 1:
            log.info("%d streams sharded over %d processes", len(spec.sources()), spec.processes)
        else:
            limit_library_threads(spec)  # one process: the libraries' pools sized to this graph
        with interrupts_stop(run):
            result = run.run()
        del run
        # the run's device objects (compiled models, OpenCL contexts, their threads) go now, while the
        # interpreter is whole, not in its teardown at exit, where a native pool's thread may outlive it
        gc.collect()
    progress.end()
    stats = result.to_json()
    if args.stats:
        Path(args.stats).write_text(json.dumps(stats, indent=2))
    f = result.frames
    if result.error:  # what went wrong first: the line a user reads, and alone where no frame entered
        print(f"error: {result.error}", file=sys.stderr)
    if f["in"] or not result.error:
        print(f"frames: in {f['in']}, out {f['out']}, dropped {f['dropped']}, failed {f['failed']} "
              f"in {result.elapsed_s:.2f}s", file=sys.stderr)
    return result.exit_code


def cmd_validate(args: argparse.Namespace) -> int:
    code = EXIT_OK
    for path in args.graph:
        try:
            spec = _load(path, args.set)
        except GraphError as e:
            for d in e.diagnostics:
                print(d, file=sys.stderr)
            code = EXIT_CONFIG
            continue
        print(f"{path}: ok ({len(spec.nodes)} nodes, {spec.dag.number_of_edges()} edges)")
        for d in spec.run_refuses:  # what only a run of its own sources refuses (a server may add the stream)
            print(f"  flowpipe run refuses: {d}")
        for mod in spec.plugins:
            print(f"  loads plugin module: {mod}")
        for s in spec.nodes:
            for res in s.contract.resources:
                print(f"  {s.id} ({s.type}): {res.what}")
            if not s.template and (why := s.contract.missing()) is not None:  # may be there on the host that runs it
                print(f"  {s.id} ({s.type}): not on this host: {why} ({spec.file}:{s.line}; run refuses it here)")
    return code


LONG_CHAIN = 6  # nodes in a row past which a drawing runs top to bottom: a page is taller than it is wide


def _direction(spec: Any) -> str:
    """Left to right for a short graph; top to bottom where its longest path is long (one row of 17 boxes is
    unreadable at any size)."""
    import networkx as nx

    return "LR" if nx.dag_longest_path_length(spec.dag) + 1 <= LONG_CHAIN else "TB"


def _edge_label(d: dict[str, Any]) -> str:
    """An edge's ports, one name where both ends share it."""
    return d["src_port"] if d["src_port"] == d["dst_port"] else f'{d["src_port"]} -> {d["dst_port"]}'


def to_dot(spec: Any) -> str:
    lines = ["digraph flowpipe {", f"  rankdir={_direction(spec)};", "  node [shape=box, style=rounded];"]
    for s in spec.nodes:
        lines.append(f'  "{s.id}" [label="{s.id}\\n({s.type})"];')
    for u, v, d in spec.dag.edges(data=True):
        lines.append(f'  "{u}" -> "{v}" [label="{_edge_label(d)}"];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def to_mermaid(spec: Any) -> str:
    lines = [f"flowchart {_direction(spec)}"]
    for s in spec.nodes:
        lines.append(f'  {s.id}["{s.id}<br/>({s.type})"]')
    for u, v, d in spec.dag.edges(data=True):
        lines.append(f'  {u} -->|{_edge_label(d)}| {v}')
    return "\n".join(lines) + "\n"


#: What ``flowpipe graph -o FILE`` writes, by the file's extension.
GRAPH_FORMATS = {".dot": "dot", ".gv": "dot", ".mmd": "mermaid", ".md": "mermaid", ".png": "png", ".svg": "svg"}


def cmd_graph(args: argparse.Namespace) -> int:
    """The graph drawn: DOT (or ``--format mermaid``) to stdout, or into ``-o FILE`` in the format its
    extension names (PNG and SVG through Graphviz)."""
    spec = _load(args.graph, args.set)
    if args.output is None:
        if args.format in ("png", "svg"):
            print(f"error: {args.format.upper()} is written to a file: -o FILE.{args.format}", file=sys.stderr)
            return EXIT_CONFIG
        sys.stdout.write(to_mermaid(spec) if args.format == "mermaid" else to_dot(spec))
        return EXIT_OK
    out = Path(args.output)
    fmt = args.format or GRAPH_FORMATS.get(out.suffix.lower())
    if fmt is None:
        print(f"error: -o {out}: unknown extension '{out.suffix}': expected one of "
              f"{', '.join(GRAPH_FORMATS)} (or --format)", file=sys.stderr)
        return EXIT_CONFIG
    out.parent.mkdir(parents=True, exist_ok=True)  # as run makes its outputs' folders
    if fmt == "mermaid":
        out.write_text(to_mermaid(spec))
    elif fmt == "dot":
        out.write_text(to_dot(spec))
    else:
        dot = shutil.which("dot")
        if dot is None:
            print(f"error: {fmt.upper()} output needs Graphviz's 'dot' on PATH; write .dot or .mmd instead",
                  file=sys.stderr)
            return EXIT_RUNTIME
        subprocess.run([dot, f"-T{fmt}", "-o", str(out)], input=to_dot(spec).encode(), check=True)
    print(f"wrote {out} ({fmt})")
    return EXIT_OK


def cmd_nodes(args: argparse.Namespace) -> int:
    width = max(60, shutil.get_terminal_size((100, 24)).columns)
    if not args.type:
        name_w = 23
        for name, cls in sorted(registry().items()):
            ins = ", ".join(f"{p} ({k})" for p, k in cls.inputs.items()) or "none"
            outs = ", ".join(f"{p} ({k})" for p, k in cls.outputs.items()) or "none"
            lines = [*_wrapped(first_sentence(cls.__doc__ or ""), width, name_w), f"in: {ins}; out: {outs}"]
            print(f"{name:{name_w - 1}s} {lines[0]}")
            for line in lines[1:]:
                print(" " * name_w + line)
        print("\nflowpipe nodes TYPE: a type's whole description, its ports and every config key")
        return EXIT_OK
    try:
        cls = lookup(args.type)
    except KeyError as e:
        print(f"error: {e.args[0]}", file=sys.stderr)
        return EXIT_CONFIG
    print(f"{args.type}: {_plain(inspect.cleandoc(cls.__doc__ or ''))}\n")
    print("inputs:  " + (", ".join(f"{p} ({k})" for p, k in cls.inputs.items()) or "none"))
    print("outputs: " + (", ".join(f"{p} ({k})" for p, k in cls.outputs.items()) or "none"))
    print("config:")
    _fields(cls.Config, "  ", width)
    return EXIT_OK


def _plain(text: str) -> str:
    """Docstring markup as a terminal shows it: ````x```` as ```x```."""
    return text.replace("``", "`")


def first_sentence(doc: str) -> str:
    """A docstring's first sentence, whole, on one line: its first paragraph up to the first full stop outside
    brackets and quotes that ends it (the paragraph's end, or a space and a capital letter next: not ``e.g. a``,
    ``1.2x``, ``H.264``); the whole paragraph where no such stop is."""
    para = _plain(" ".join(inspect.cleandoc(doc).split("\n\n")[0].split()))
    depth, quoted = 0, False
    for i, ch in enumerate(para):
        if ch == "`":
            quoted = not quoted
        elif quoted:
            continue
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(0, depth - 1)
        elif ch == "." and depth == 0:
            rest = para[i + 1:]
            if not rest or (rest[0] == " " and rest[1:2].isupper()):
                return para[:i + 1]
    return para


def _wrapped(text: str, width: int, indent: int) -> list[str]:
    """``text`` in lines that fit ``width`` after ``indent`` columns (at least 40 wide); one word longer than
    that keeps its line."""
    import textwrap

    return textwrap.wrap(text, max(40, width - indent), break_long_words=False, break_on_hyphens=False) or [""]


def _type_text(ann: Any) -> str:
    """A field's type as a user writes its values: a choice's values, a union's parts, a part's name."""
    import types
    import typing

    from pydantic import BaseModel

    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is typing.Annotated:  # a constrained value: the constraint is in the description or the error
        return _type_text(args[0])
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join("null" if a is type(None) else _type_text(a) for a in args)
    if origin is not None and args:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(_type_text(a) for a in args)}]"
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann.__name__
    return getattr(ann, "__name__", None) or str(ann).replace("typing.", "")


def _fields(model: Any, indent: str, width: int, seen: frozenset[Any] = frozenset()) -> None:
    """A config model's fields, each with its type, default and help (the help wrapped below it where the line
    would not fit); a part that is a model of its own (tiles, clips) with its fields below it."""
    import typing

    from pydantic import BaseModel

    for name, field in model.model_fields.items():
        value = field.default_factory() if field.default_factory is not None else field.default  # type: ignore[call-arg]
        default = "required" if field.is_required() else f"default {value!r}"
        head = f"{indent}{name}: {_type_text(field.annotation)} ({default})"
        desc = _plain(" ".join((field.description or "").split()))
        if desc and len(head) + 2 + len(desc) <= width:
            print(f"{head}  {desc}")
        else:
            print(head)
            for line in (_wrapped(desc, width, len(indent) + 4) if desc else []):
                print(f"{indent}    {line}")
        parts = [a for a in (field.annotation, *typing.get_args(field.annotation))
                 if isinstance(a, type) and issubclass(a, BaseModel) and a not in seen]
        for part in parts[:1]:
            _fields(part, indent + "    ", width, seen | {part})


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="flowpipe", description=(__doc__ or "").replace("``", ""))
    p.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    sub = p.add_subparsers(dest="cmd", required=True)

    def with_set(sp: argparse.ArgumentParser, what: str = "override a graph parameter (a YAML value)") -> None:
        sp.add_argument("--set", action="append", metavar="NAME=VALUE", help=what)

    r = sub.add_parser("run", help="run a graph")
    r.add_argument("graph")
    with_set(r)
    r.add_argument("--stats", metavar="PATH", help="write run statistics as JSON")
    r.add_argument("--max-frames", type=positive_arg, metavar="N", help="stop the sources after N frames in all")
    r.add_argument("--processes", type=processes_arg, metavar="N|auto",
                   help="shard the streams over N worker processes (default: the graph's 'processes', 1)")
    r.add_argument("--no-device-owner", action="store_true",
                   help="over several processes, every shard opens its own inference (default: one device owner)")
    r.add_argument("--cluster", metavar="auto|local|ray://HOST:PORT",
                   help="place the streams over the hosts of a Ray cluster (default: the graph's 'cluster', none)")
    r.add_argument("--rebalance", action="store_true",
                   help="with --cluster: a host that joins takes streams over from the busiest host")
    r.add_argument("--name", help="with --cluster: the run's name in the cluster (default: GRAPH-xxxxxx)")
    r.add_argument("--detach", action="store_true",
                   help="with --cluster: print the run's name and leave it running (flowpipe status/stop)")
    r.set_defaults(func=cmd_run)

    v = sub.add_parser("validate", help="check graphs without running them (touches no device)")
    v.add_argument("graph", nargs="+")
    with_set(v)
    v.set_defaults(func=cmd_validate)

    g = sub.add_parser("graph", help="draw a graph: DOT to stdout, or -o FILE (.dot, .mmd; .png/.svg with Graphviz)")
    g.add_argument("graph")
    g.add_argument("-o", "--output", help="the file, its format by its extension (default: DOT to stdout)")
    g.add_argument("--format", choices=["dot", "mermaid", "png", "svg"])
    with_set(g)
    g.set_defaults(func=cmd_graph)

    n = sub.add_parser("nodes", help="list node types, or show one")
    n.add_argument("type", nargs="?")
    n.set_defaults(func=cmd_nodes)


    cli_extra.add_commands(sub, with_set)
    cli_cluster.add_commands(sub)
    cli_serve.add_serve(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except KeyboardInterrupt:
        print("interrupted while starting", file=sys.stderr)
        return EXIT_INTERRUPTED
    level = logging.DEBUG if args.debug else logging.INFO
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    before, now = open_files_raised()
    if now != before:
        logging.getLogger("flowpipe").debug("open files: soft limit %d -> %d (the hard limit)", before, now)
    malloc_arenas_limited()
    try:
        return args.func(args)
    except GraphError as e:
        for d in e.diagnostics:
            print(d, file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:  # one the command had no answer of its own to (a run's is its summary)
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader went (`flowpipe validate ... | head`): what it wanted, it had
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return EXIT_OK
    except Exception as e:
        if interrupted():  # a library's own error for the interrupt it was given
            print("interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
        if args.debug:
            raise
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_RUNTIME

"""Graph files: YAML -> validated GraphSpec, in phases that touch no device.

Phases: parse (safe loader, line numbers kept) -> params and interpolation -> graph schema ->
node type lookup -> node config (pydantic, unknown keys are errors) -> wiring (ports, kinds, cycles).
Each phase reports every problem it finds, one line each, and later phases run only on a clean result.
"""
from __future__ import annotations

import builtins
import functools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import Diagnostic, GraphError
from .node import Node, NodeConfig, NodeContract, Source, kinds_compatible
from .registry import import_plugin, lookup

MAX_YAML_BYTES = 1 << 20
MAX_EXPANDED_NODES = 100_000
TOP_KEYS = {"flowpipe", "description", "params", "plugins", "processes", "device_owner", "prefetch", "cluster",
            "nodes"}
OVERFLOW = ("block", "drop_oldest", "drop_newest")
ON_ERROR = ("fail", "drop", "restart")
ISOLATION = ("thread", "process")
THREAD = ("auto", "own")
_ID_RE = re.compile(r"^[A-Za-z_][\w-]*$")
_VAR_RE = re.compile(r"\$\{(?:params\.(?P<param>[A-Za-z_]\w*)|env:(?P<env>[A-Za-z_]\w*)(?::-(?P<default>[^}]*))?)\}")


def _choice(name: str, allowed: tuple[str, ...]) -> Any:
    def check(v: Any) -> Any:
        if v not in allowed:
            raise ValueError(f"expected one of {'|'.join(allowed)}, got {v!r}")
        return v
    return field_validator(name, mode="before")(lambda cls, v: check(v))


def _integer(name: str, lo: int, hi: int) -> Any:
    def check(v: Any) -> Any:
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise ValueError(f"expected an integer {lo}..{hi}, got {v!r}")
        return v
    return field_validator(name, mode="before")(lambda cls, v: check(v))


class EngineKeys(BaseModel):
    """The keys every node takes beside ``id``, ``type``, ``config`` and ``inputs``: how the runner runs it."""

    model_config = ConfigDict(extra="forbid")
    on_error: str = Field("fail", description="fail | drop | restart")
    isolation: str = Field("thread", description="thread | process (a worker process; frames cross as fds)")
    queue: int = Field(8, description="bounded input queue, 1..4096")
    overflow: str = Field("block", description="block | drop_oldest | drop_newest (every drop is counted)")
    workers: int = Field(1, description="threads for stages that keep no cross-stream state, 1..64")
    thread: str = Field("auto", description="auto (in its producer's thread where no queue is needed between "
                                            "them) | own (its own thread behind its queue)")
    restarts: int = Field(3, description="with on_error: restart, how many times, 0..1000")
    template: bool = Field(False, description="a source that is not run: the pattern of the streams added to "
                                              "the running graph (flowpipe serve)")

    _on_error = _choice("on_error", ON_ERROR)
    _isolation = _choice("isolation", ISOLATION)
    _overflow = _choice("overflow", OVERFLOW)
    _queue = _integer("queue", 1, 4096)
    _workers = _integer("workers", 1, 64)
    _thread = _choice("thread", THREAD)
    _restarts = _integer("restarts", 0, 1000)


class ClusterKeys(BaseModel):
    """The graph's ``cluster:`` block: the Ray cluster to run on and what each stream needs there."""

    model_config = ConfigDict(extra="forbid")
    address: str | None = Field(None, description="auto (the local Ray cluster) or ray://HOST:PORT; "
                                                  "--cluster overrides it")
    per_stream: dict[str, float] = Field(default_factory=lambda: {"CPU": 1.0},
                                         description="Ray resources one stream takes, e.g. {intel_npu: 0.25}")
    labels: dict[str, str] = Field(default_factory=dict, description="host labels a stream needs (exact)")
    metrics_port: int | None = Field(None, ge=0, le=65535,
                                     description="each host serves its streams' counts for Prometheus at "
                                                 "http://HOST:PORT/metrics on its Ray address (0: a free port)")
    model_cache: str | None = Field(None, description="where each host keeps compiled models of inference nodes "
                                                      "without a cache_dir (default: ~/.cache/flowpipe/ov)")


ENGINE_KEYS = set(EngineKeys.model_fields)
NODE_KEYS = {"id", "type", "config", "inputs"} | ENGINE_KEYS


class LineDict(dict):
    """A mapping that remembers the line of itself and of each key."""

    def __init__(self, *args: Any, **kw: Any):
        super().__init__(*args, **kw)
        self.line: int = 0
        self.key_lines: dict[Any, int] = {}


class LineList(list):
    def __init__(self, *args: Any):
        super().__init__(*args)
        self.line: int = 0
        self.item_lines: list[int] = []


class _Loader(yaml.SafeLoader):
    """SafeLoader that keeps line numbers (only plain data types are ever constructed)."""

    def construct_mapping(self, node, deep=False):  # type: ignore[override]
        self.flatten_mapping(node)
        out = LineDict()
        out.line = node.start_mark.line + 1
        out.key_lines = {}
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                raise yaml.constructor.ConstructorError(None, None, "unhashable mapping key",
                                                        key_node.start_mark) from None
            out[key] = self.construct_object(value_node, deep=True)
            out.key_lines[key] = key_node.start_mark.line + 1
        return out

    def construct_sequence(self, node, deep=False):  # type: ignore[override]
        out = LineList(self.construct_object(child, deep=True) for child in node.value)
        out.line = node.start_mark.line + 1
        out.item_lines = [child.start_mark.line + 1 for child in node.value]
        return out


_Loader.add_constructor("tag:yaml.org,2002:map", _Loader.construct_mapping)
_Loader.add_constructor("tag:yaml.org,2002:seq", _Loader.construct_sequence)


@dataclass
class NodeSpec:
    id: str
    type: str
    cls: builtins.type[Node]  # (the field ``type`` shadows the builtin here)
    config: NodeConfig
    inputs: dict[str, list[tuple[str, str]]]
    on_error: str = "fail"
    queue: int = 8
    isolation: str = "thread"
    restarts: int = 3
    line: int | None = None
    overflow: str = "block"
    workers: int = 1
    template: bool = False  # a source not run: the pattern of streams added at run time
    thread: str = "auto"  # auto: in its producer's thread where it can (Runner._runs_in); own: its own

    def make(self) -> Node:
        return self.cls(self.id, self.config)

    @functools.cached_property
    def contract(self) -> NodeContract:
        """What this node, as configured, declares (``Node.contract``): read by validation and the runner."""
        return self.cls.contract(self.config)


@dataclass
class GraphSpec:
    file: str
    nodes: list[NodeSpec]
    params: dict[str, Any] = field(default_factory=dict)
    plugins: list[str] = field(default_factory=list)
    plugin_dir: str | None = None  # the graph file's folder, where plugin modules may sit
    dag: nx.MultiDiGraph = field(default_factory=nx.MultiDiGraph)
    processes: int | str = 1  # worker processes the streams are sharded over, or "auto"
    #: over several processes, nodes that serve many streams (inference) run once in a device owner
    device_owner: bool = True
    #: frames waiting in front of each stage worker beyond the one inside: what pools are sized by (more
    #: absorbs jitter between stages, each costs one decoded picture per stage)
    prefetch: int = 1
    #: over several hosts (``--cluster``): where and what each stream needs
    cluster: ClusterKeys | None = None
    #: a shard's part of a graph (``runtime.shards.subgraph``): the whole graph, whose sources every shard
    #: takes into account where they size what it declares (a tensor sized to the largest picture)
    whole: GraphSpec | None = None

    def sources(self) -> list[NodeSpec]:
        """The source nodes that run, in graph order: one stream each."""
        return [s for s in self.nodes if issubclass(s.cls, Source) and not s.template]

    def templates(self) -> list[NodeSpec]:
        """Sources that are the pattern of streams added to the running graph."""
        return [s for s in self.nodes if issubclass(s.cls, Source) and s.template]

    def node(self, node_id: str) -> NodeSpec:
        return next(n for n in self.nodes if n.id == node_id)

    def consumers(self, node_id: str) -> list[tuple[str, str, str]]:
        """(out_port, consumer id, in_port) for every edge leaving ``node_id``."""
        return [(d["src_port"], v, d["dst_port"]) for _, v, d in self.dag.out_edges(node_id, data=True)]

    def topo_order(self) -> list[NodeSpec]:
        order = list(nx.topological_sort(self.dag))
        return [self.node(i) for i in order]


def parse_sets(items: list[str] | None) -> dict[str, Any]:
    """``--set NAME=VALUE`` pairs; VALUE is read as a YAML scalar (``30`` -> int, ``true`` -> bool)."""
    out: dict[str, Any] = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise GraphError(f"--set {item!r}: expected NAME=VALUE")
        try:
            out[name.strip()] = yaml.safe_load(value) if value else ""
        except yaml.YAMLError:
            out[name.strip()] = value
    return out


def load_graph(path: str | Path, overrides: dict[str, Any] | None = None,
               text: str | None = None) -> GraphSpec:
    """Read and validate a graph file. Raises GraphError with one Diagnostic per problem."""
    fname = str(path)
    if text is None:
        try:
            if os.path.getsize(path) > MAX_YAML_BYTES:
                raise GraphError(Diagnostic(f"file is larger than {MAX_YAML_BYTES} bytes", fname))
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise GraphError(Diagnostic(f"cannot read graph: {e.__class__.__name__}: {e}", fname)) from None
    doc = _parse(text, fname)
    return _validate(doc, fname, overrides or {})


def _parse(text: str, fname: str) -> Any:
    if len(text) > MAX_YAML_BYTES:
        raise GraphError(Diagnostic(f"document is larger than {MAX_YAML_BYTES} bytes", fname))
    try:
        docs = list(yaml.load_all(text, Loader=_Loader))
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else None
        what = " ".join(str(x) for x in (e.context, e.problem) if x)
        raise GraphError(Diagnostic(f"YAML error: {what}", fname, line)) from None
    except (yaml.YAMLError, RecursionError, ValueError) as e:
        raise GraphError(Diagnostic(f"YAML error: {str(e).splitlines()[0] if str(e) else type(e).__name__}",
                                    fname)) from None
    if len(docs) != 1:
        raise GraphError(Diagnostic(f"expected exactly one YAML document, got {len(docs)}", fname, 1))
    _check_size(docs[0], fname)
    return docs[0]


def _check_size(doc: Any, fname: str) -> None:
    """Aliases share objects; count the expanded tree so an alias bomb is rejected, not walked forever."""
    seen, stack = 0, [doc]
    while stack:
        item = stack.pop()
        seen += 1
        if seen > MAX_EXPANDED_NODES:
            raise GraphError(Diagnostic(f"document expands to more than {MAX_EXPANDED_NODES} values "
                                        "(YAML aliases?)", fname))
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _line(obj: Any, key: Any = None) -> int | None:
    if isinstance(obj, LineDict):
        return obj.key_lines.get(key, obj.line) if key is not None else obj.line
    if isinstance(obj, LineList):
        if isinstance(key, int) and 0 <= key < len(obj.item_lines):
            return obj.item_lines[key]
        return obj.line
    return None


def _type_name(v: Any) -> str:
    return {dict: "mapping", LineDict: "mapping", list: "list", LineList: "list", str: "string",
            int: "integer", float: "number", bool: "boolean", type(None): "null"}.get(type(v), type(v).__name__)


def _interpolate(value: Any, params: dict[str, Any], where: tuple[str, int | None], errors: list[Diagnostic],
                 node: tuple[str | None, str | None] = (None, None)) -> Any:
    fname, line = where
    if isinstance(value, LineDict):
        out = LineDict()
        out.line, out.key_lines = value.line, value.key_lines
        for k, v in value.items():
            out[k] = _interpolate(v, params, (fname, value.key_lines.get(k, line)), errors, node)
        return out
    if isinstance(value, LineList):
        out_l = LineList(_interpolate(v, params, (fname, ln), errors, node)
                         for v, ln in zip(value, value.item_lines))
        out_l.line, out_l.item_lines = value.line, value.item_lines
        return out_l
    if not isinstance(value, str) or "${" not in value:
        return value

    def resolve(m: re.Match) -> Any:
        if m.group("param"):
            name = m.group("param")
            if name not in params:
                known = ", ".join(sorted(params)) or "none"
                errors.append(Diagnostic(f"unknown parameter '${{params.{name}}}': known params: {known}",
                                         fname, line, *node))
                return ""
            return params[name]
        return os.environ.get(m.group("env"), m.group("default") if m.group("default") is not None else "")

    full = _VAR_RE.fullmatch(value)
    if full:
        return resolve(full)
    return _VAR_RE.sub(lambda m: str(resolve(m)), value)


def _validate(doc: Any, fname: str, overrides: dict[str, Any]) -> GraphSpec:
    errors: list[Diagnostic] = []

    def fail_if_errors() -> None:
        if errors:
            raise GraphError(errors)

    # graph schema -------------------------------------------------------------------------------
    if not isinstance(doc, dict):
        raise GraphError(Diagnostic(f"graph: expected a mapping with 'nodes', got {_type_name(doc)}", fname, 1))
    for key in doc:
        if key not in TOP_KEYS:
            errors.append(Diagnostic(f"unknown top-level key '{key}': expected one of {', '.join(sorted(TOP_KEYS))}",
                                     fname, _line(doc, key)))
    raw_params = doc.get("params") or LineDict()
    if not isinstance(raw_params, dict):
        errors.append(Diagnostic(f"params: expected a mapping, got {_type_name(raw_params)}", fname,
                                 _line(doc, "params")))
        raw_params = LineDict()
    params: dict[str, Any] = {}
    for k, v in raw_params.items():
        params[str(k)] = _interpolate(v, {}, (fname, _line(raw_params, k)), errors)
    for k, v in overrides.items():
        if k not in params:
            errors.append(Diagnostic(f"--set {k}: no such parameter; known params: "
                                     f"{', '.join(sorted(params)) or 'none'}", fname, _line(doc, "params")))
        params[k] = v
    plugins = doc.get("plugins") or []
    if not isinstance(plugins, list) or not all(isinstance(p, str) for p in plugins):
        errors.append(Diagnostic("plugins: expected a list of module names", fname, _line(doc, "plugins")))
        plugins = []
    processes = doc.get("processes", 1)
    if processes != "auto" and (isinstance(processes, bool) or not isinstance(processes, int)
                                or not 1 <= processes <= 256):
        errors.append(Diagnostic(f"processes: expected an integer 1..256 or 'auto', got {processes!r}", fname,
                                 _line(doc, "processes")))
        processes = 1
    prefetch = doc.get("prefetch", 1)
    if isinstance(prefetch, bool) or not isinstance(prefetch, int) or not 0 <= prefetch <= 64:
        errors.append(Diagnostic(f"prefetch: expected an integer 0..64, got {prefetch!r}", fname,
                                 _line(doc, "prefetch")))
        prefetch = 1
    cluster = None
    if doc.get("cluster") is not None:
        try:
            cluster = ClusterKeys.model_validate(doc["cluster"])
        except ValidationError as e:
            err = e.errors()[0]
            at = ".".join(str(x) for x in err["loc"])
            errors.append(Diagnostic(f"cluster.{at}: {err['msg']}", fname, _line(doc, "cluster")))
    device_owner = doc.get("device_owner", True)
    if not isinstance(device_owner, bool):
        errors.append(Diagnostic(f"device_owner: expected true or false, got {device_owner!r}", fname,
                                 _line(doc, "device_owner")))
        device_owner = True
    nodes_raw = doc.get("nodes")
    if not isinstance(nodes_raw, list) or not nodes_raw:
        errors.append(Diagnostic(f"nodes: expected a non-empty list of nodes, got {_type_name(nodes_raw)}",
                                 fname, _line(doc, "nodes") or 1))
    fail_if_errors()
    nodes_raw = _interpolate(nodes_raw, params, (fname, _line(doc, "nodes")), errors)
    fail_if_errors()

    # per-node schema and type lookup --------------------------------------------------------------
    plugin_dir = os.path.dirname(os.path.abspath(fname)) if os.path.isfile(fname) else None
    for mod in plugins:  # plugins may sit beside the graph file
        try:
            import_plugin(mod, plugin_dir)
        except Exception as e:  # noqa: BLE001 - any import failure is a config error here
            errors.append(Diagnostic(f"plugin '{mod}' failed to import: {type(e).__name__}: {e}", fname,
                                     _line(doc, "plugins")))
    fail_if_errors()

    seen: dict[str, int | None] = {}
    specs: list[NodeSpec] = []
    raw_inputs: dict[str, Any] = {}
    for i, raw in enumerate(nodes_raw):
        line = _line(nodes_raw, i)
        if not isinstance(raw, dict):
            errors.append(Diagnostic(f"nodes[{i}]: expected a mapping with id and type, got {_type_name(raw)}",
                                     fname, line))
            continue
        nid, ntype = raw.get("id"), raw.get("type")
        node = (nid if isinstance(nid, str) else None, ntype if isinstance(ntype, str) else None)
        for key in raw:
            if key not in NODE_KEYS:
                errors.append(Diagnostic(f"unknown key '{key}': expected one of {', '.join(sorted(NODE_KEYS))}",
                                         fname, _line(raw, key), *node))
        if not isinstance(nid, str) or not _ID_RE.match(nid):
            errors.append(Diagnostic(f"id: expected a name like 'decode_1' (letters, digits, _ or -), got {nid!r}",
                                     fname, _line(raw, "id"), *node))
            continue
        if nid in seen:
            errors.append(Diagnostic(f"duplicate node id '{nid}' (first defined at line {seen[nid]})",
                                     fname, _line(raw, "id"), *node))
            continue
        seen[nid] = _line(raw, "id")
        if not isinstance(ntype, str):
            errors.append(Diagnostic(f"type: expected a node type name, got {ntype!r}", fname,
                                     _line(raw, "type") if "type" in raw else line, nid, None))
            continue
        try:
            cls = lookup(ntype)
        except KeyError as e:
            errors.append(Diagnostic(str(e.args[0]), fname, _line(raw, "type"), *node))
            continue
        keys = {k: v for k, v in raw.items() if k in ENGINE_KEYS}
        try:
            eng = EngineKeys.model_validate(keys)
        except ValidationError as e:
            for err in e.errors():
                key = str(err["loc"][0]) if err["loc"] else "?"
                msg = str(err["msg"]).removeprefix("Value error, ")
                errors.append(Diagnostic(f"{key}: {msg}", fname, _line(raw, key), *node))
            eng = EngineKeys.model_validate({})
        workers = eng.workers
        if workers > 1 and not cls.parallel_streams:
            errors.append(Diagnostic(f"workers: {ntype} keeps state across streams and runs on one worker; "
                                     f"expected 1, got {workers}", fname, _line(raw, "workers"), *node))
            workers = 1
        elif workers > 1 and eng.isolation == "process":
            errors.append(Diagnostic("workers: expected 1 with isolation: process", fname, _line(raw, "workers"),
                                     *node))
            workers = 1
        if eng.isolation == "process":
            why = isolation_refusal(cls)
            if why is not None:
                errors.append(Diagnostic(f"isolation: process is not available for {ntype}: {why}; expected "
                                         "isolation: thread", fname, _line(raw, "isolation"), *node))
        cfg_raw = raw.get("config") or LineDict()
        if not isinstance(cfg_raw, dict):
            errors.append(Diagnostic(f"config: expected a mapping, got {_type_name(cfg_raw)}", fname,
                                     _line(raw, "config"), *node))
            continue
        try:
            cfg = cls.Config.model_validate(dict(cfg_raw))
        except ValidationError as e:
            for err in e.errors():
                loc = ".".join(str(x) for x in err["loc"])
                key = err["loc"][0] if err["loc"] else None
                got = err.get("input")
                msg = err["msg"]
                if err["type"] == "extra_forbidden":
                    fields = ", ".join(cls.Config.model_fields) or "none"
                    msg = f"unknown key; expected one of: {fields}"
                elif err["type"] != "missing":
                    msg = f"{msg}, got {got!r}"
                errors.append(Diagnostic(f"config.{loc}: {msg}", fname, _line(cfg_raw, key), *node))
            continue
        except Exception as e:  # noqa: BLE001 - validators may raise anything
            errors.append(Diagnostic(f"config: {e}", fname, _line(raw, "config"), *node))
            continue
        raw_inputs[nid] = (raw.get("inputs"), raw)
        if eng.template and not issubclass(cls, Source):
            errors.append(Diagnostic(f"template: only a source can be the pattern of added streams; {ntype} is not "
                                     "a source", fname, _line(raw, "template"), *node))
        specs.append(NodeSpec(nid, ntype, cls, cfg, {}, eng.on_error, eng.queue, eng.isolation, eng.restarts, line,
                              eng.overflow, workers, eng.template, eng.thread))
    fail_if_errors()

    # wiring ---------------------------------------------------------------------------------------
    by_id = {s.id: s for s in specs}
    dag = nx.MultiDiGraph()
    for s in specs:
        dag.add_node(s.id)
    for s in specs:
        inputs, raw = raw_inputs[s.id]
        where = (fname, _line(raw, "inputs") if "inputs" in raw else s.line)
        node = (s.id, s.type)
        if inputs is None:
            inputs = {}
        if not isinstance(inputs, dict):
            if isinstance(inputs, (str, list)) and len(s.cls.inputs) == 1:
                inputs = {next(iter(s.cls.inputs)): inputs}  # shorthand for a single-input node
            else:
                errors.append(Diagnostic(f"inputs: expected a mapping of port -> 'node.port', got "
                                         f"{_type_name(inputs)}", *where, *node))
                continue
        for port, refs in inputs.items():
            pline = _line(inputs, port) or where[1]
            if port not in s.cls.inputs:
                errors.append(Diagnostic(f"inputs.{port}: unknown input port; expected one of: "
                                         f"{', '.join(s.cls.inputs) or 'none (a source takes no inputs)'}",
                                         fname, pline, *node))
                continue
            for ref in refs if isinstance(refs, list) else [refs]:
                if not isinstance(ref, str):
                    errors.append(Diagnostic(f"inputs.{port}: expected 'node.port', got {ref!r}", fname, pline, *node))
                    continue
                up_id, _, up_port = ref.partition(".")
                up = by_id.get(up_id)
                if up is None:
                    errors.append(Diagnostic(f"inputs.{port}: no node '{up_id}' in this graph; known: "
                                             f"{', '.join(by_id)}", fname, pline, *node))
                    continue
                if not up_port:
                    if len(up.cls.outputs) != 1:
                        errors.append(Diagnostic(f"inputs.{port}: '{up_id}' has ports "
                                                 f"{', '.join(up.cls.outputs) or 'none'}; name one as "
                                                 f"'{up_id}.PORT'", fname, pline, *node))
                        continue
                    up_port = next(iter(up.cls.outputs))
                if up_port not in up.cls.outputs:
                    errors.append(Diagnostic(f"inputs.{port}: '{up_id}' ({up.type}) has no output port "
                                             f"'{up_port}'; expected one of: {', '.join(up.cls.outputs) or 'none'}",
                                             fname, pline, *node))
                    continue
                out_kind, in_kind = up.cls.outputs[up_port], s.cls.inputs[port]
                if not kinds_compatible(out_kind, in_kind):
                    errors.append(Diagnostic(f"inputs.{port}: port kind mismatch: expected {in_kind}, got "
                                             f"{out_kind} from '{up_id}.{up_port}'", fname, pline, *node))
                    continue
                s.inputs.setdefault(port, []).append((up_id, up_port))
                dag.add_edge(up_id, s.id, src_port=up_port, dst_port=port)
        for port in s.cls.inputs:
            if port not in s.inputs and not any(e.node_id == s.id for e in errors):
                errors.append(Diagnostic(f"input port '{port}' ({s.cls.inputs[port]}) is not connected",
                                         *where, *node))
    fail_if_errors()
    try:
        cycle = nx.find_cycle(dag)
        ids = [u for u, *_ in cycle] + [cycle[0][0]]
        first = by_id[ids[0]]
        raise GraphError(Diagnostic(f"cycle: {' -> '.join(ids)}; a graph must be acyclic", fname,
                                    first.line, first.id, first.type))
    except nx.NetworkXNoCycle:
        pass
    spec = GraphSpec(fname, specs, params, list(plugins), plugin_dir, dag, processes, device_owner, prefetch,
                     cluster)
    for s in specs:
        for msg in s.cls.check_wiring(s, spec):
            errors.append(Diagnostic(msg, fname, s.line, s.id, s.type))
        why = sharding_refusal(s.cls)
        if processes != 1 and why is not None:
            errors.append(Diagnostic(f"processes: {processes} is not available with {s.type}: {why}; expected "
                                     "processes: 1", fname, s.line, s.id, s.type))
    fail_if_errors()
    return spec

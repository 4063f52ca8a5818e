"""Validation in named phases, run in order by ``validate``; none touches a device.

1. parse (``load.parse_yaml``): one YAML document through the safe loader, line numbers kept
2. graph keys: top-level keys, params and ``--set``, plugins, processes, prefetch, cluster, device_owner, nodes
3. params: ``${params.X}`` and ``${env:X}`` in the nodes
4. plugins: the graph's plugin modules imported (they register node types)
5. nodes, each through: schema and type lookup (known types, the closest name suggested) -> engine keys ->
   config (the type's pydantic model; unknown keys are errors) -> its contract against its engine keys
   (workers, isolation) -> template
6. wiring: ports, port kinds, unconnected inputs; then cycles; then tensors: each tensor a producer's config
   says it writes against the model input its consumer runs it through (a registry model's size, layout and
   element type: the check the consumer makes again when it opens, with the tensor it got)
7. engine rules: sharding over processes
8. streams, where a run's streams are its sources (no template source): each key of a per-stream config field
   names one of them; kept on the spec (``run_refuses``: a server may add the stream), raised with
   ``fixed_streams`` (``flowpipe run``: nothing added while it runs)

Each phase reports every problem it finds, one line each (file:line, node id and type, expected vs got), and
later phases run only on a clean result. Within the node phases a node's problems stay together, nodes in
graph order, and a problem that stops a node (a bad id, an unknown type, a bad config) ends its checks.
"""
from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

import networkx as nx
from pydantic import BaseModel, ValidationError

from ..errors import Diagnostic, GraphError
from ..node import Node, NodeContract, Source, kinds_compatible
from ..registry import import_plugin, lookup
from .load import LineDict, interpolate, line_of, parameter_uses, type_name
from .spec import ENGINE_KEYS, NODE_KEYS, TOP_KEYS, ClusterKeys, EngineKeys, GraphSpec, NodeSpec

_ID_RE = re.compile(r"^[A-Za-z_][\w-]*$")


def _raise_if(errors: list[Diagnostic]) -> None:
    if errors:
        raise GraphError(errors)


@dataclass
class _Graph:
    """What the graph keys phase read off the top level."""

    params: dict[str, Any]
    plugins: list[str]
    processes: int | str
    prefetch: int
    cluster: ClusterKeys | None
    device_owner: bool
    nodes: Any


def validate(doc: Any, fname: str, overrides: dict[str, Any], fixed_streams: bool = False) -> GraphSpec:
    """A parsed graph document through every phase after parsing, in order; the GraphSpec it describes.
    ``fixed_streams``: the run's streams are the graph's sources (no stream is added while it runs). A problem
    with a value a parameter given here (``--set``, a client's) put in a node names that parameter."""
    try:
        return _validate(doc, fname, overrides, fixed_streams)
    except GraphError as e:
        if not overrides:
            raise
        uses = parameter_uses(doc)
        raise GraphError([_given(d, overrides, uses) for d in e.diagnostics]) from None


def _given(d: Diagnostic, overrides: dict[str, Any], uses: dict[str, list[tuple[str | None, str]]]) -> Diagnostic:
    """``d``, naming the given parameter whose value lands on the config key it is about."""
    if d.node_id is None:
        return d
    about = d.message.split(":", 1)[0]
    for name in overrides:
        if f"--set {name}" in d.message:  # named already
            return d
        for node, key in uses.get(name, []):
            if node == d.node_id and (about == key or about.startswith(key + ".") or key.startswith(about + ".")):
                return replace(d, message=f"{d.message} (from parameter '{name}')")
    return d


def _validate(doc: Any, fname: str, overrides: dict[str, Any], fixed_streams: bool) -> GraphSpec:
    top = _graph_keys(doc, fname, overrides)
    nodes_raw = _params(top, doc, fname)
    plugin_dir = _plugins(top.plugins, doc, fname)
    specs, raw_inputs = _nodes(nodes_raw, fname)
    left_out = {s.id for s in specs if not s.enabled}
    specs = _left_out(specs, raw_inputs, fname)
    dag = _wiring(specs, raw_inputs, fname, left_out)
    _acyclic(dag, specs, fname)
    _tensors(specs, raw_inputs, fname)
    spec = GraphSpec(fname, specs, top.params, list(top.plugins), plugin_dir, dag, top.processes, top.device_owner,
                     top.prefetch, top.cluster)
    _engine_rules(spec)
    spec.run_refuses = _stream_keys(spec, raw_inputs, fname, overrides)
    if fixed_streams:
        _raise_if(spec.run_refuses)
    return spec


# 2. graph keys ----------------------------------------------------------------------------------------------

def _graph_keys(doc: Any, fname: str, overrides: dict[str, Any]) -> _Graph:
    """Phase 2, graph keys: a mapping of known top-level keys, each of the right shape; ``--set`` names only
    params the graph declares; ``nodes`` a non-empty list."""
    errors: list[Diagnostic] = []
    if not isinstance(doc, dict):
        raise GraphError(Diagnostic(f"graph: expected a mapping with 'nodes', got {type_name(doc)}", fname, 1))
    for key in doc:
        if key not in TOP_KEYS:
            errors.append(Diagnostic(f"unknown top-level key '{key}'{did_you_mean(key, TOP_KEYS)}: expected one of "
                                     f"{', '.join(sorted(TOP_KEYS))}", fname, line_of(doc, key)))
    params = _param_values(doc, fname, overrides, errors)
    plugins = doc.get("plugins") or []
    if not isinstance(plugins, list) or not all(isinstance(p, str) for p in plugins):
        errors.append(Diagnostic("plugins: expected a list of module names", fname, line_of(doc, "plugins")))
        plugins = []
    processes = doc.get("processes", 1)
    if processes != "auto" and (isinstance(processes, bool) or not isinstance(processes, int)
                                or not 1 <= processes <= 256):
        errors.append(Diagnostic(f"processes: expected an integer 1..256 or 'auto', got {processes!r}", fname,
                                 line_of(doc, "processes")))
        processes = 1
    prefetch = doc.get("prefetch", 1)
    if isinstance(prefetch, bool) or not isinstance(prefetch, int) or not 0 <= prefetch <= 64:
        errors.append(Diagnostic(f"prefetch: expected an integer 0..64, got {prefetch!r}", fname,
                                 line_of(doc, "prefetch")))
        prefetch = 1
    cluster = None
    if doc.get("cluster") is not None:
        try:
            cluster = ClusterKeys.model_validate(doc["cluster"])
        except ValidationError as e:
            err = e.errors()[0]
            at = ".".join(str(x) for x in err["loc"])
            errors.append(Diagnostic(f"cluster.{at}: {err['msg']}", fname, line_of(doc, "cluster")))
    device_owner = doc.get("device_owner", True)
    if not isinstance(device_owner, bool):
        errors.append(Diagnostic(f"device_owner: expected true or false, got {device_owner!r}", fname,
                                 line_of(doc, "device_owner")))
        device_owner = True
    nodes_raw = doc.get("nodes")
    if not isinstance(nodes_raw, list) or not nodes_raw:
        errors.append(Diagnostic(f"nodes: expected a non-empty list of nodes, got {type_name(nodes_raw)}",
                                 fname, line_of(doc, "nodes") or 1))
    _raise_if(errors)
    return _Graph(params, plugins, processes, prefetch, cluster, device_owner, nodes_raw)


def _param_values(doc: Any, fname: str, overrides: dict[str, Any], errors: list[Diagnostic]) -> dict[str, Any]:
    """The ``params:`` mapping (``${env:X}`` resolved in its values), ``--set`` overrides applied."""
    raw_params = doc.get("params") or LineDict()
    if not isinstance(raw_params, dict):
        errors.append(Diagnostic(f"params: expected a mapping, got {type_name(raw_params)}", fname,
                                 line_of(doc, "params")))
        raw_params = LineDict()
    params: dict[str, Any] = {}
    for k, v in raw_params.items():  # (a default given a value here is not read: its variable need not be set)
        params[str(k)] = v if str(k) in overrides else interpolate(v, {}, (fname, line_of(raw_params, k)), errors)
    for k, v in overrides.items():
        if k not in params:
            errors.append(Diagnostic(f"--set {k}: no such parameter; known params: "
                                     f"{', '.join(sorted(params)) or 'none'}", fname, line_of(doc, "params")))
        params[k] = v
    return params


# 3. params, 4. plugins ----------------------------------------------------------------------------------------

def _params(top: _Graph, doc: Any, fname: str) -> Any:
    """Phase 3, params: the node list with ``${params.X}`` and ``${env:X}`` replaced; an unknown param is an error."""
    errors: list[Diagnostic] = []
    nodes_raw = interpolate(top.nodes, top.params, (fname, line_of(doc, "nodes")), errors)
    _raise_if(errors)
    return nodes_raw


def _plugins(plugins: list[str], doc: Any, fname: str) -> str | None:
    """Phase 4, plugins: import the graph's plugin modules (from beside the graph file first) so the node
    types they register can be looked up. Returns the graph file's folder, where plugins may sit."""
    errors: list[Diagnostic] = []
    plugin_dir = os.path.dirname(os.path.abspath(fname)) if os.path.isfile(fname) else None
    for mod in plugins:
        try:
            import_plugin(mod, plugin_dir)
        except Exception as e:  # noqa: BLE001 - any import failure is a config error here
            errors.append(Diagnostic(f"plugin '{mod}' failed to import: {type(e).__name__}: {e}", fname,
                                     line_of(doc, "plugins")))
    _raise_if(errors)
    return plugin_dir


# 5. nodes -----------------------------------------------------------------------------------------------------

@dataclass
class _Draft:
    """One node on its way through the node phases: its mapping, what the phases found, its problems."""

    index: int
    raw: Any
    line: int | None
    errors: list[Diagnostic] = field(default_factory=list)
    stopped: bool = False  # a phase found a problem the later ones cannot look past
    who: tuple[str | None, str | None] = (None, None)  # (id, type) where each is a string, for diagnostics
    nid: str = ""
    ntype: str = ""
    cls: type[Node] = Node
    eng: EngineKeys = field(default_factory=EngineKeys)
    workers: int = 1
    config: Any = None
    config_failed: bool = False  # its config did not validate: reported, no spec made

    def stop(self, diagnostic: Diagnostic) -> None:
        self.errors.append(diagnostic)
        self.stopped = True


def _nodes(nodes_raw: Any, fname: str) -> tuple[list[NodeSpec], dict[str, Any]]:
    """Phase 5, nodes: every node through type lookup, engine keys, config and template, in that order.
    Returns the node specs (inputs not yet wired) and each node's ``(inputs, mapping)`` for wiring."""
    drafts = [_Draft(i, raw, line_of(nodes_raw, i)) for i, raw in enumerate(nodes_raw)]
    for phase in (_node_types, _node_engine_keys, _node_configs, _node_contracts, _node_templates):
        phase([d for d in drafts if not d.stopped], fname)
    _raise_if([e for d in drafts for e in d.errors])
    specs = [NodeSpec(d.nid, d.ntype, d.cls, d.config, {}, d.eng.on_error, d.eng.queue, d.eng.isolation,
                      d.eng.restarts, d.line, d.eng.overflow, d.workers, d.eng.template, d.eng.thread,
                      d.eng.enabled)
             for d in drafts]
    return specs, {d.nid: (d.raw.get("inputs"), d.raw) for d in drafts}


def _node_types(drafts: list[_Draft], fname: str) -> None:
    """Phase 5a, node schema and type lookup: a mapping of known keys, an id that is a name and unique, and a
    registered type (for an unknown one, the closest known name)."""
    seen: dict[str, int | None] = {}
    for d in drafts:
        raw = d.raw
        if not isinstance(raw, dict):
            d.stop(Diagnostic(f"nodes[{d.index}]: expected a mapping with id and type, got {type_name(raw)}",
                              fname, d.line))
            continue
        nid, ntype = raw.get("id"), raw.get("type")
        d.who = (nid if isinstance(nid, str) else None, ntype if isinstance(ntype, str) else None)
        for key in raw:
            if key not in NODE_KEYS:
                d.errors.append(Diagnostic(f"unknown key '{key}'{did_you_mean(key, NODE_KEYS)}: expected one of "
                                           f"{', '.join(sorted(NODE_KEYS))}", fname, line_of(raw, key), *d.who))
        if not isinstance(nid, str) or not _ID_RE.match(nid):
            d.stop(Diagnostic(f"id: expected a name like 'decode_1' (letters, digits, _ or -), got {nid!r}",
                              fname, line_of(raw, "id"), *d.who))
            continue
        if nid in seen:
            d.stop(Diagnostic(f"duplicate node id '{nid}' (first defined at line {seen[nid]})",
                              fname, line_of(raw, "id"), *d.who))
            continue
        seen[nid] = line_of(raw, "id")
        if not isinstance(ntype, str):
            d.stop(Diagnostic(f"type: expected a node type name, got {ntype!r}", fname,
                              line_of(raw, "type") if "type" in raw else d.line, nid, None))
            continue
        try:
            d.cls = lookup(ntype)
        except KeyError as e:
            d.stop(Diagnostic(str(e.args[0]), fname, line_of(raw, "type"), *d.who))
            continue
        d.nid, d.ntype = nid, ntype


def _node_engine_keys(drafts: list[_Draft], fname: str) -> None:
    """Phase 5b, engine keys (``on_error``, ``queue``, ``workers``, ``isolation`` ...), each of the type and
    range it must have."""
    for d in drafts:
        raw = d.raw
        keys = {k: v for k, v in raw.items() if k in ENGINE_KEYS}
        try:
            d.eng = EngineKeys.model_validate(keys)
        except ValidationError as e:
            for err in e.errors():
                key = str(err["loc"][0]) if err["loc"] else "?"
                msg = str(err["msg"]).removeprefix("Value error, ")
                got = "" if "got " in msg or "input" not in err else f", got {err['input']!r}"
                d.errors.append(Diagnostic(f"{key}: {msg}{got}", fname, line_of(raw, key), *d.who))
            d.eng = EngineKeys.model_validate({})
        d.workers = d.eng.workers


def did_you_mean(key: Any, known: Any) -> str:
    """`` (did you mean 'X'?)`` naming the known key closest to a misspelt one, or nothing where none is close."""
    near = difflib.get_close_matches(str(key), sorted(str(k) for k in known), n=1)
    return f" (did you mean '{near[0]}'?)" if near else ""


def config_error(model: type[BaseModel], err: Any) -> str:
    """One pydantic error of a node's config as one short line: where (``config.a.b``), what was expected, and
    what it got where that is short; an unknown key with the keys of the part it is in (a nested one's own),
    a list too short with the items it needs."""
    loc = tuple(err["loc"])
    where = "config" + "".join(f".{x}" for x in loc)
    got = err.get("input")
    msg = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        part = _model_at(model, loc[:-1])
        fields = list(part.model_fields) if part is not None else []
        return f"{where}: unknown key{did_you_mean(loc[-1], fields)}; expected one of: {', '.join(fields) or 'none'}"
    if err["type"] == "missing" and loc and isinstance(loc[-1], int) and isinstance(got, (list, tuple)):
        return f"{where[: where.rindex('.')]}: expected {loc[-1] + 1} items, got {len(got)}: {got!r}"
    if err["type"] == "missing":
        return f"{where}: {msg}"
    shown = repr(got)
    if "got " in msg or len(shown) > 120 or (err["type"] == "value_error" and isinstance(got, dict)):
        # the check says what it got, or checked a whole part (the message names what in it is wrong)
        return f"{where}: {msg}"
    return f"{where}: {msg}, got {shown}"


def _model_at(model: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model the config's part at ``loc`` is (through fields, optional ones, mappings' values
    and lists' items), None where it is no model."""
    t: Any = model
    for part in loc:
        t = _unwrapped(t)
        if isinstance(t, type) and issubclass(t, BaseModel):
            field = t.model_fields.get(str(part))
            if field is None:
                return None
            t = field.annotation
        elif get_origin(t) in (dict, Mapping) and get_args(t):
            t = get_args(t)[-1]
        elif get_origin(t) in (list, tuple) and get_args(t):
            t = get_args(t)[0]
        else:
            return None
    t = _unwrapped(t)
    return t if isinstance(t, type) and issubclass(t, BaseModel) else None


def _unwrapped(t: Any) -> Any:
    """``X`` of ``X | None`` and of ``Annotated[X, ...]``."""
    while get_origin(t) in (Annotated, Union, UnionType):
        t = next((a for a in get_args(t) if a is not type(None)), None)
    return t


def _node_configs(drafts: list[_Draft], fname: str) -> None:
    """Phase 5c, node configs: ``config`` a mapping the node type's pydantic model accepts; an unknown key
    names the keys the type takes."""
    for d in drafts:
        raw, cls = d.raw, d.cls
        cfg_raw = raw.get("config") or LineDict()
        if not isinstance(cfg_raw, dict):
            d.stop(Diagnostic(f"config: expected a mapping, got {type_name(cfg_raw)}", fname,
                              line_of(raw, "config"), *d.who))
            continue
        try:
            d.config = cls.Config.model_validate(dict(cfg_raw))
        except ValidationError as e:
            for err in e.errors():
                key = err["loc"][0] if err["loc"] else None
                d.errors.append(Diagnostic(config_error(cls.Config, err), fname, line_of(cfg_raw, key), *d.who))
            d.config_failed = True  # its contract is still checked, from the type's defaults
        except Exception as e:  # noqa: BLE001 - validators may raise anything
            d.stop(Diagnostic(f"config: {e}", fname, line_of(raw, "config"), *d.who))


def _contract_of(d: _Draft) -> NodeContract | None:
    """The node's contract from its config; where the config failed, from the type's defaults (so its engine
    keys are still checked: one run of ``flowpipe validate`` names every problem), or None where even
    those need a setting the config did not give."""
    if not d.config_failed:
        return d.cls.contract(d.config)
    unset = {name: None for name, f in d.cls.Config.model_fields.items() if f.is_required()}
    try:
        return d.cls.contract(d.cls.Config.model_construct(**unset))
    except (AttributeError, AssertionError, TypeError, ValueError):
        return None


def _node_contracts(drafts: list[_Draft], fname: str) -> None:
    """Phase 5d, what each node declares from its config (``Node.contract``) against its engine keys: several
    workers only for a node that keeps no state across streams and runs in threads, a worker process only
    for a node that can run in one."""
    for d in drafts:
        contract = _contract_of(d)
        if contract is None:
            continue
        raw = d.raw
        if d.workers > 1 and contract.one_worker is not None:
            d.errors.append(Diagnostic(f"workers: {contract.one_worker}; expected 1, got {d.workers}", fname,
                                       line_of(raw, "workers"), *d.who))
            d.workers = 1
        elif d.workers > 1 and d.eng.isolation == "process":
            d.errors.append(Diagnostic("workers: expected 1 with isolation: process", fname, line_of(raw, "workers"),
                                       *d.who))
            d.workers = 1
        why = contract.isolation_refused
        if d.eng.isolation == "process" and why is not None:
            d.errors.append(Diagnostic(f"isolation: process is not available for {d.ntype}: {why}; expected "
                                       "isolation: thread", fname, line_of(raw, "isolation"), *d.who))


def _node_templates(drafts: list[_Draft], fname: str) -> None:
    """Phase 5e, templates: only a source can be the pattern of the streams added to a running graph."""
    for d in drafts:
        if d.eng.template and not issubclass(d.cls, Source):
            d.errors.append(Diagnostic(f"template: only a source can be the pattern of added streams; {d.ntype} is "
                                       "not a source", fname, line_of(d.raw, "template"), *d.who))


# 6. wiring ----------------------------------------------------------------------------------------------------

def _left_out(specs: list[NodeSpec], raw_inputs: dict[str, Any], fname: str) -> list[NodeSpec]:
    """Phase 5e, nodes left out (``enabled: false``): each has one input, and whatever names one of its
    outputs is fed what feeds it instead (through several left out in a row). Returns the nodes that stay;
    rewrites ``raw_inputs`` in place."""
    off = {s.id: s for s in specs if not s.enabled}
    if not off:
        return specs
    feed: dict[str, str] = {}
    errors: list[Diagnostic] = []
    for nid, s in off.items():
        inputs, raw = raw_inputs[nid]
        refs = list(inputs.values()) if isinstance(inputs, dict) else [inputs]
        flat = [r for x in refs for r in (x if isinstance(x, list) else [x])]
        if len(flat) != 1 or not isinstance(flat[0], str):
            errors.append(Diagnostic(f"enabled: false feeds the node's consumers what feeds it: expected one "
                                     f"input, got {len(flat)}", fname, line_of(raw, "enabled"), nid, s.type))
        else:
            feed[nid] = flat[0]
    _raise_if(errors)

    def through(ref: Any) -> Any:
        for _ in range(len(feed) + 1):
            if not isinstance(ref, str) or ref.partition(".")[0] not in feed:
                break
            ref = feed[ref.partition(".")[0]]
        return ref

    for s in specs:
        inputs, raw = raw_inputs[s.id]
        if isinstance(inputs, dict):
            for port, refs in inputs.items():
                inputs[port] = [through(r) for r in refs] if isinstance(refs, list) else through(refs)
        else:
            raw_inputs[s.id] = ([through(r) for r in inputs] if isinstance(inputs, list) else through(inputs), raw)
    return [s for s in specs if s.id not in off]


def _wiring(specs: list[NodeSpec], raw_inputs: dict[str, Any], fname: str,
            left_out: AbstractSet[str] = frozenset()) -> nx.MultiDiGraph:
    """Phase 6a, wiring: each node's ``inputs`` name input ports it has, fed by output ports of nodes in this
    graph, of kinds that fit; every input port is connected; a config field naming another node names one of
    the graph (or one ``left_out``, which then says nothing: a detector following a decoder left out runs on its
    count alone). Fills ``NodeSpec.inputs``; returns the DAG."""
    errors: list[Diagnostic] = []
    by_id = {s.id: s for s in specs}
    dag = nx.MultiDiGraph()
    for s in specs:
        dag.add_node(s.id)
    for s in specs:
        inputs, raw = raw_inputs[s.id]
        where = (fname, line_of(raw, "inputs") if "inputs" in raw else s.line)
        node = (s.id, s.type)
        if inputs is None:
            inputs = {}
        if not isinstance(inputs, dict):
            if isinstance(inputs, (str, list)) and len(s.contract.inputs) == 1:
                inputs = {next(iter(s.contract.inputs)): inputs}  # shorthand for a single-input node
            else:
                errors.append(Diagnostic(f"inputs: expected a mapping of port -> 'node.port', got "
                                         f"{type_name(inputs)}", *where, *node))
                continue
        for port, refs in inputs.items():
            pline = line_of(inputs, port) or where[1]
            if port not in s.contract.inputs:
                errors.append(Diagnostic(f"inputs.{port}: unknown input port; expected one of: "
                                         f"{', '.join(s.contract.inputs) or 'none (a source takes no inputs)'}",
                                         fname, pline, *node))
                continue
            for ref in refs if isinstance(refs, list) else [refs]:
                up = _upstream(ref, s, port, by_id, (fname, pline), errors)
                if up is not None:
                    s.inputs.setdefault(port, []).append(up)
                    dag.add_edge(up[0], s.id, src_port=up[1], dst_port=port)
        for port in s.contract.inputs:
            if port not in s.inputs and not any(e.node_id == s.id for e in errors):
                errors.append(Diagnostic(f"input port '{port}' ({s.contract.inputs[port]}) is not connected",
                                         *where, *node))
        for key, target in s.contract.refers.items():  # config fields naming another node of the graph
            if target not in by_id and target not in left_out:
                errors.append(Diagnostic(f"config.{key}: no node '{target}' in this graph; expected one of: "
                                         f"{', '.join(x for x in by_id if x != s.id)}",
                                         fname, line_of(raw, "config") if "config" in raw else s.line, *node))
    _raise_if(errors)
    return dag


def _upstream(ref: Any, s: NodeSpec, port: str, by_id: dict[str, NodeSpec], where: tuple[str, int | None],
              errors: list[Diagnostic]) -> tuple[str, str] | None:
    """The (node id, output port) that ``ref`` (``'node.port'``, or ``'node'`` where it has one output port)
    names as input ``port`` of ``s``, or None with the problem appended to ``errors``."""
    node = (s.id, s.type)
    if not isinstance(ref, str):
        errors.append(Diagnostic(f"inputs.{port}: expected 'node.port', got {ref!r}", *where, *node))
        return None
    up_id, _, up_port = ref.partition(".")
    up = by_id.get(up_id)
    if up is None:
        errors.append(Diagnostic(f"inputs.{port}: no node '{up_id}' in this graph; known: "
                                 f"{', '.join(by_id)}", *where, *node))
        return None
    if not up_port:
        if len(up.contract.outputs) != 1:
            errors.append(Diagnostic(f"inputs.{port}: '{up_id}' has ports "
                                     f"{', '.join(up.contract.outputs) or 'none'}; name one as "
                                     f"'{up_id}.PORT'", *where, *node))
            return None
        up_port = next(iter(up.contract.outputs))
    if up_port not in up.contract.outputs:
        errors.append(Diagnostic(f"inputs.{port}: '{up_id}' ({up.type}) has no output port "
                                 f"'{up_port}'; expected one of: {', '.join(up.contract.outputs) or 'none'}",
                                 *where, *node))
        return None
    out_kind, in_kind = up.contract.outputs[up_port], s.contract.inputs[port]
    if not kinds_compatible(out_kind, in_kind):
        errors.append(Diagnostic(f"inputs.{port}: port kind mismatch: expected {in_kind}, got "
                                 f"{out_kind} from '{up_id}.{up_port}'", *where, *node))
        return None
    return up_id, up_port


def _acyclic(dag: nx.MultiDiGraph, specs: list[NodeSpec], fname: str) -> None:
    """Phase 6b, cycles: a graph must be acyclic; the error names the first cycle found, node by node."""
    try:
        cycle = nx.find_cycle(dag)
    except nx.NetworkXNoCycle:
        return
    ids = [u for u, *_ in cycle] + [cycle[0][0]]
    first = next(s for s in specs if s.id == ids[0])
    raise GraphError(Diagnostic(f"cycle: {' -> '.join(ids)}; a graph must be acyclic", fname,
                                first.line, first.id, first.type))


def _tensors(specs: list[NodeSpec], raw_inputs: dict[str, Any], fname: str) -> None:
    """Phase 6c, tensors: what a producer's config says it writes on a port (``NodeContract.tensors``, through
    nodes that forward it untouched) against the model input its consumer declares there
    (``NodeContract.takes``): a registry model fed another size, layout or element type is refused here, in the
    words the consumer would refuse it in when it opens."""
    errors: list[Diagnostic] = []
    by_id = {s.id: s for s in specs}
    for s in specs:
        for port, takes in s.contract.takes.items():
            inputs, raw = raw_inputs[s.id]
            line = (line_of(inputs, port) if isinstance(inputs, dict) else None) or \
                (line_of(raw, "inputs") if "inputs" in raw else s.line)
            for up_id, up_port in s.inputs.get(port, []):
                tensor, producer = _declared(by_id, up_id, up_port)
                why = takes.refusal(tensor, producer) if tensor is not None else None
                if why is not None:
                    errors.append(Diagnostic(why, fname, line, s.id, s.type))
    _raise_if(errors)


def _declared(by_id: dict[str, NodeSpec], node_id: str, port: str) -> tuple[Any, str]:
    """The tensor node ``node_id`` says it writes on ``port`` and the node that writes it, following ports that
    forward what they get untouched; (None, node) where none says."""
    for _ in range(len(by_id)):
        s = by_id[node_id]
        contract = s.contract
        if port in contract.tensors:
            return contract.tensors[port], s.id
        through = contract.forwards.get(port)
        ups = s.inputs.get(through, []) if through is not None else []
        if len(ups) != 1:
            break
        node_id, port = ups[0]
    return None, node_id


# 7. engine rules ----------------------------------------------------------------------------------------------

def _engine_rules(spec: GraphSpec) -> None:
    """Phase 7, engine rules on the wired graph: nodes that cannot run their streams sharded over several
    processes (``NodeContract.sharding``), and nodes that hold a whole stream after a live source, whose
    stream never ends (``NodeContract.whole_stream``)."""
    errors: list[Diagnostic] = []
    for s in spec.nodes:
        why = s.contract.sharding
        if spec.processes != 1 and why is not None:
            errors.append(Diagnostic(f"processes: {spec.processes} is not available with {s.type}: {why}; "
                                     "expected processes: 1", spec.file, s.line, s.id, s.type))
        whole = s.contract.whole_stream
        if whole is not None:
            live = [a for a in nx.ancestors(spec.dag, s.id) if spec.node(a).contract.live]
            if live:
                src = spec.node(sorted(live)[0])
                uri = getattr(src.config, "uri", None)
                shown = re.sub(r"//[^/@]*@", "//***@", uri) if isinstance(uri, str) else None  # no credentials
                errors.append(Diagnostic(f"{whole}: source '{src.id}' is live"
                                         + (f" ({shown})" if shown else "") + ", its stream never ends; expected a "
                                         "recorded file", spec.file, s.line, s.id, s.type))
    _raise_if(errors)


# 8. streams ---------------------------------------------------------------------------------------------------

def _stream_keys(spec: GraphSpec, raw_inputs: dict[str, Any], fname: str,
                 overrides: dict[str, Any]) -> list[Diagnostic]:
    """Phase 8, for a run whose streams are its sources: each key of a per-stream config field
    (``NodeContract.stream_keyed``: a camera's own zones and lines) names one of those that reach the node,
    so a misspelt camera (or one on another branch) is an error, not settings that never apply."""
    errors: list[Diagnostic] = []
    if spec.templates():  # its streams come while it runs, from its templates
        return errors
    for s in spec.nodes:
        if not s.contract.stream_keyed:
            continue
        upstream = nx.ancestors(spec.dag, s.id)
        streams = [src.stream for src in spec.sources() if src.id in upstream]  # those that reach the node
        raw_cfg = raw_inputs[s.id][1].get("config")
        for name in sorted(s.contract.stream_keyed):
            keyed = getattr(s.config, name, None) or {}
            raw_field = raw_cfg.get(name) if isinstance(raw_cfg, dict) else None
            given = next((k for k, v in overrides.items() if v is raw_field and raw_field is not None), None)
            for key in keyed:
                if key not in streams:
                    line = (line_of(raw_field, key) if raw_field is not None else None) or line_of(raw_cfg, name)
                    errors.append(Diagnostic(
                        f"config.{name}: no stream {key!r} reaches this node"
                        f"{f' (given by --set {given})' if given else ''}; expected one of: "
                        f"{', '.join(streams) or 'none'} (a source's `stream`, else its id)", fname,
                        line or s.line, s.id, s.type))
    return errors

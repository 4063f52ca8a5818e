"""Reading graph files: the safe YAML loader that keeps line numbers, size limits, ``${params.X}`` and
``${env:X}`` interpolation, and ``--set NAME=VALUE`` overrides."""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml

from ..errors import Diagnostic, GraphError

MAX_YAML_BYTES = 1 << 20
MAX_EXPANDED_NODES = 100_000
_VAR_RE = re.compile(r"\$\{(?:params\.(?P<param>[A-Za-z_]\w*)|env:(?P<env>[A-Za-z_]\w*)(?::-(?P<default>[^}]*))?)\}")


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


class _Lines:
    """What the safe loaders construct: plain data in mappings and lists that keep their line numbers."""

    def construct_mapping(self, node, deep=False):  # type: ignore[no-untyped-def]
        self.flatten_mapping(node)  # type: ignore[attr-defined]
        out = LineDict()
        out.line = node.start_mark.line + 1
        out.key_lines = {}
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=True)  # type: ignore[attr-defined]
            try:
                hash(key)
            except TypeError:
                raise yaml.constructor.ConstructorError(None, None, "unhashable mapping key",
                                                        key_node.start_mark) from None
            out[key] = self.construct_object(value_node, deep=True)  # type: ignore[attr-defined]
            out.key_lines[key] = key_node.start_mark.line + 1
        return out

    def construct_sequence(self, node, deep=False):  # type: ignore[no-untyped-def]
        out = LineList(self.construct_object(child, deep=True) for child in node.value)  # type: ignore[attr-defined]
        out.line = node.start_mark.line + 1
        out.item_lines = [child.start_mark.line + 1 for child in node.value]
        return out


class _Loader(_Lines, yaml.SafeLoader):
    """PyYAML's own safe loader, keeping lines: its errors name what they found (the character, the alias)."""


_LOADERS: tuple[type[yaml.SafeLoader], ...] = (_Loader,)
if yaml.__with_libyaml__:  # PyYAML built with libyaml, as its wheels are

    class _FastLoader(_Lines, yaml.CSafeLoader):  # type: ignore[misc]
        """libyaml's parser: it reads a graph some 6 times faster, but its errors say less (no character, no
        alias name), so a document it refuses is read again by _Loader for the error to give."""

    _LOADERS = (_FastLoader, _Loader)  # type: ignore[assignment]

for _loader in _LOADERS:
    _loader.add_constructor("tag:yaml.org,2002:map", _loader.construct_mapping)
    _loader.add_constructor("tag:yaml.org,2002:seq", _loader.construct_sequence)


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


def read_text(path: str | Path, fname: str) -> str:
    """The graph file's text, refused past ``MAX_YAML_BYTES`` or where it cannot be read as UTF-8."""
    try:
        if os.path.getsize(path) > MAX_YAML_BYTES:
            raise GraphError(Diagnostic(f"file is larger than {MAX_YAML_BYTES} bytes", fname))
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise GraphError(Diagnostic(f"cannot read graph: {e.__class__.__name__}: {e}", fname)) from None


def parse_yaml(text: str, fname: str) -> Any:
    """Phase 1, parse: one YAML document through the safe loader, every mapping and list keeping its lines."""
    if len(text) > MAX_YAML_BYTES:
        raise GraphError(Diagnostic(f"document is larger than {MAX_YAML_BYTES} bytes", fname))
    try:
        docs = _documents(text)
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


def _documents(text: str) -> list[Any]:
    """The documents in ``text``, through the first loader that takes it; the last one's error where none does."""
    for loader in _LOADERS[:-1]:
        try:
            return list(yaml.load_all(text, Loader=loader))
        except (yaml.YAMLError, RecursionError):
            pass
    return list(yaml.load_all(text, Loader=_LOADERS[-1]))


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


def line_of(obj: Any, key: Any = None) -> int | None:
    """The line of ``obj`` (a LineDict or LineList), or of its key or item ``key``; None for plain values."""
    if isinstance(obj, LineDict):
        return obj.key_lines.get(key, obj.line) if key is not None else obj.line
    if isinstance(obj, LineList):
        if isinstance(key, int) and 0 <= key < len(obj.item_lines):
            return obj.item_lines[key]
        return obj.line
    return None


def type_name(v: Any) -> str:
    """What a value is, in the words of the errors ("mapping", "list", "string", ...)."""
    return {dict: "mapping", LineDict: "mapping", list: "list", LineList: "list", str: "string",
            int: "integer", float: "number", bool: "boolean", type(None): "null"}.get(type(v), type(v).__name__)


def interpolate(value: Any, params: dict[str, Any], where: tuple[str, int | None], errors: list[Diagnostic],
                 node: tuple[str | None, str | None] = (None, None)) -> Any:
    """``value`` with ``${params.X}`` and ``${env:X[:-default]}`` replaced, lines kept; an unknown parameter
    is an error appended to ``errors``."""
    fname, line = where
    if isinstance(value, LineDict):
        out = LineDict()
        out.line, out.key_lines = value.line, value.key_lines
        for k, v in value.items():
            out[k] = interpolate(v, params, (fname, value.key_lines.get(k, line)), errors, node)
        return out
    if isinstance(value, LineList):
        out_l = LineList(interpolate(v, params, (fname, ln), errors, node)
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
        name, default = m.group("env"), m.group("default")
        if name not in os.environ and default is None:  # an empty path or URI would be taken for one
            errors.append(Diagnostic(f"environment variable '{name}' is not set, and '${{env:{name}}}' gives no "
                                     f"default; expected it set, or '${{env:{name}:-DEFAULT}}'", fname, line, *node))
            return ""
        return os.environ.get(name, default or "")

    left = _VAR_RE.sub("", value)
    if "${" in left:  # written as a substitution, and none: it would be kept as it is (a folder named so)
        bad = left[left.index("${"):].split("}")[0][:40] + ("}" if "}" in left[left.index("${"):] else "")
        errors.append(Diagnostic(f"'{bad}' is no substitution; expected '${{params.NAME}}', '${{env:NAME}}' or "
                                 "'${env:NAME:-DEFAULT}'", fname, line, *node))
        return value
    full = _VAR_RE.fullmatch(value)
    if full:
        return resolve(full)
    return _VAR_RE.sub(lambda m: str(resolve(m)), value)


def parameter_uses(doc: Any) -> dict[str, list[tuple[str | None, str]]]:
    """Where each ``${params.X}`` of a parsed graph file lands: (node id, dotted key under the node, as
    ``config.zones.door.polygon`` or ``enabled``), or (None, the graph's own dotted key)."""
    uses: dict[str, list[tuple[str | None, str]]] = {}

    def walk(value: Any, node: str | None, key: str) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, node, f"{key}.{k}" if key else str(k))
        elif isinstance(value, list):
            for v in value:
                walk(v, node, key)
        elif isinstance(value, str):
            for m in _VAR_RE.finditer(value):
                if m.group("param"):
                    uses.setdefault(m.group("param"), []).append((node, key))

    if not isinstance(doc, dict):
        return uses
    for k, v in doc.items():
        if k == "nodes" and isinstance(v, list):
            for n in v:
                if isinstance(n, dict):
                    walk(n, str(n.get("id")), "")
        elif k != "params":
            walk(v, None, str(k))
    return uses

"""The node registry: ``@register("name")``, the built-in library and the ``flowpipe.nodes`` entry points."""
from __future__ import annotations

import difflib
import importlib
import pkgutil
from collections.abc import Callable
from importlib.metadata import entry_points

from .errors import GraphError
from .node import PORT_KINDS, AsyncNode, Negotiating, Node

#: What a node type said with class attributes and hooks before contracts, and where it says it now.
_DECLARED_IN_CONTRACT = {
    "writes_input": "writes_input=True", "holds_frames": "holds_frames=True", "holding": "holds_frames=...",
    "parallel_streams": "one_worker=None", "forwards": "forwards={...}", "isolation_refused": "isolation='why'",
    "sharding_refused": "sharding='why'", "serves_streams": "serves_streams=True", "pixels": "pixels=frozenset(...)",
    "pixel_formats": "pixels=...", "check_wiring": "one_worker / isolation (the engine applies them)",
}
#: What a node type implemented on the base class before the node API was cut to what every node needs, and
#: what replaces it: a mixin to inherit, or where it is said now.
_MOVED_FROM_NODE = {
    "poll": "AsyncNode", "stream_stopping": "AsyncNode", "offer": "Negotiating", "request": "Negotiating",
    "resources": "the contract: cls.declare(resources=(Resource('what it opens'),))",
    "missing": "the contract: cls.declare(resources=(Resource('opens PATH', reads=PATH, field='KEY'),)), which the "
               "run checks",
}
_REGISTRY: dict[str, type[Node]] = {}
_ORIGIN: dict[str, str] = {}
_LOADED = False


def register(type_name: str) -> Callable[[type[Node]], type[Node]]:
    """Class decorator: register a node type. A second registration of a name is an error."""

    def deco(cls: type[Node]) -> type[Node]:
        origin = f"{cls.__module__}.{cls.__qualname__}"
        if type_name in _REGISTRY and _ORIGIN[type_name] != origin:
            raise GraphError(f"node type '{type_name}' registered twice: by {_ORIGIN[type_name]} and by {origin}")
        for kind in list(cls.inputs.values()) + list(cls.outputs.values()):
            if kind not in PORT_KINDS:
                raise TypeError(f"{origin}: port kind {kind!r} is not one of {PORT_KINDS}")
        old = next((name for name in _DECLARED_IN_CONTRACT if any(name in vars(c) for c in cls.__mro__[:-1]
                                                                  if c is not Node)), None)
        if old is not None:  # said the old way, it would be ignored: say where it goes now
            raise TypeError(f"{origin}: '{old}' is declared in the node's contract now: "
                            f"def contract(cls, config): return cls.declare({_DECLARED_IN_CONTRACT[old]})")
        moved = _moved(cls)
        if moved is not None:
            raise TypeError(f"{origin}: {moved}")
        cls.type_name = type_name
        _REGISTRY[type_name] = cls
        _ORIGIN[type_name] = origin
        return cls

    return deco


def _moved(cls: type[Node]) -> str | None:
    """What a node type written to the earlier node API uses that has moved, and where it is now; None when
    it uses only today's."""
    mixins = {"AsyncNode": AsyncNode, "Negotiating": Negotiating}
    for name, now in _MOVED_FROM_NODE.items():
        mixin = mixins.get(now)
        if mixin is not None and issubclass(cls, mixin):
            continue
        if any(name in vars(c) for c in cls.__mro__[:-1] if c.__module__ != "flowpipe.node"):
            if mixin is not None:
                return f"{name}() belongs to flowpipe.{now} now: class {cls.__name__}({now}, ...)"
            return f"{name}() is no longer asked of a node; it goes in {now}"
    return None


def load_builtin_and_plugins() -> None:
    """Import the built-in node library and the ``flowpipe.nodes`` entry points, once."""
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    builtin = importlib.import_module("flowpipe_nodes")  # the node library, by name: the engine knows no node type

    for mod in pkgutil.iter_modules(builtin.__path__):
        if not mod.name.startswith("_"):
            importlib.import_module(f"flowpipe_nodes.{mod.name}")
    for ep in entry_points(group="flowpipe.nodes"):
        before = set(_REGISTRY)
        obj = ep.load()
        if isinstance(obj, type) and issubclass(obj, Node) and obj.type_name not in before:
            if ep.name in _REGISTRY and _REGISTRY[ep.name] is not obj:
                raise GraphError(f"entry point '{ep.name}' ({ep.value}) clashes with {_ORIGIN[ep.name]}")
            register(ep.name)(obj)


def registry() -> dict[str, type[Node]]:
    load_builtin_and_plugins()
    return dict(_REGISTRY)


def lookup(type_name: str) -> type[Node]:
    reg = registry()
    if type_name in reg:
        return reg[type_name]
    close = difflib.get_close_matches(type_name, reg, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    raise KeyError(f"unknown node type '{type_name}'{hint}{' ' if hint else '; '}known: {', '.join(sorted(reg))}")


def import_plugin(name: str, beside: str | None = None) -> None:
    """Import a graph's plugin module: from the folder ``beside`` (the graph file's) when it holds
    ``name.py`` or a ``name/`` package, else from the installed packages. sys.path is not changed."""
    import importlib.util
    import os
    import sys

    if name in sys.modules:
        return
    path = None
    if beside:
        for cand in (os.path.join(beside, *name.split(".")) + ".py",
                     os.path.join(beside, *name.split("."), "__init__.py")):
            if os.path.isfile(cand):
                path = cand
                break
    if path is None:
        importlib.import_module(name)
        return
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise

"""The node API: typed ports, a pydantic config schema, open/process/close, and the registry.

A node is a class registered under a type name::

    @register("passthrough")
    class Passthrough(Node):
        '''Forwards frames unchanged.

        YAML:
            - id: p
              type: passthrough
              inputs: {in: src.out}
        '''
        inputs = {"in": "frame"}
        outputs = {"out": "frame"}

        def process(self, frame, port):
            return frame

Port kinds describe what a packet carries: ``frame`` (an image), ``tensor`` (a model input tensor),
``tensors`` (raw model outputs), ``detections`` (decoded objects). Every packet is a ``Frame`` that keeps
its image, so any output may feed an input of kind ``frame``; ``any`` accepts everything.
"""
from __future__ import annotations

import difflib
import importlib
import pkgutil
from importlib.metadata import entry_points
from typing import Any, ClassVar, Iterator

from pydantic import BaseModel, ConfigDict

from .errors import GraphError
from .frame import Frame

PORT_KINDS = ("frame", "tensor", "tensors", "detections", "any")


class NodeConfig(BaseModel):
    """Base for node config schemas: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")


class Node:
    """Base class of every stage. Subclasses declare ``inputs``/``outputs`` and a ``Config``."""

    type_name: ClassVar[str] = ""
    inputs: ClassVar[dict[str, str]] = {}
    outputs: ClassVar[dict[str, str]] = {}
    Config: ClassVar[type[NodeConfig]] = NodeConfig
    #: True if ``process`` writes the input image in place (the engine copies on write when shared).
    writes_input: ClassVar[bool] = False
    #: True if the node keeps frames past ``process`` and emits them later (async pools, batching).
    holds_frames: ClassVar[bool] = False
    #: True if ``process`` may run on several threads at once for different streams (``workers: N``):
    #: the node keeps no state shared across streams, or guards it.
    parallel_streams: ClassVar[bool] = False

    def __init__(self, node_id: str, config: NodeConfig | None = None):
        self.id = node_id
        self.config = config if config is not None else self.Config()

    # lifecycle -----------------------------------------------------------------------------------
    def open(self, ctx: Any) -> None:
        """Acquire resources (files, devices). ``ctx`` is the run's RunContext."""

    def process(self, frame: Frame, port: str) -> Any:
        """Handle one packet. Return None, a Frame, a list of Frames, or {port: Frame | [Frame]}."""
        raise NotImplementedError

    def poll(self) -> Any:
        """For ``holds_frames`` nodes: return what is ready now, without blocking."""
        return None

    def flush(self) -> Any:
        """End of stream on every input: return what is still held (same forms as ``process``)."""
        return None

    def close(self) -> None:
        """Release resources. Called once for every node whose ``open`` succeeded."""

    # declared facts the validator and the engine use ---------------------------------------------
    def resources(self) -> list[str]:
        """What this node will load, open or listen on (shown by ``flowpipe validate``)."""
        return []


class Source(Node):
    """A node with no inputs that produces frames. Implement ``frames``."""

    def frames(self) -> Iterator[Frame]:
        raise NotImplementedError

    def process(self, frame: Frame, port: str) -> Any:  # pragma: no cover - sources have no inputs
        raise RuntimeError("a source has no inputs")


_REGISTRY: dict[str, type[Node]] = {}
_ORIGIN: dict[str, str] = {}
_LOADED = False


def register(type_name: str):
    """Class decorator: register a node type. A second registration of a name is an error."""

    def deco(cls: type[Node]) -> type[Node]:
        origin = f"{cls.__module__}.{cls.__qualname__}"
        if type_name in _REGISTRY and _ORIGIN[type_name] != origin:
            raise GraphError(f"node type '{type_name}' registered twice: by {_ORIGIN[type_name]} and by {origin}")
        for kind in list(cls.inputs.values()) + list(cls.outputs.values()):
            if kind not in PORT_KINDS:
                raise TypeError(f"{origin}: port kind {kind!r} is not one of {PORT_KINDS}")
        cls.type_name = type_name
        _REGISTRY[type_name] = cls
        _ORIGIN[type_name] = origin
        return cls

    return deco


def load_builtin_and_plugins() -> None:
    """Import the built-in node library and the ``flowpipe.nodes`` entry points, once."""
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    import flowpipe.nodes as builtin

    for mod in pkgutil.iter_modules(builtin.__path__):
        if not mod.name.startswith("_"):
            importlib.import_module(f"flowpipe.nodes.{mod.name}")
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
    raise KeyError(f"unknown node type '{type_name}'{hint} known: {', '.join(sorted(reg))}")


def kinds_compatible(out_kind: str, in_kind: str) -> bool:
    return in_kind in ("any", "frame") or out_kind == "any" or out_kind == in_kind

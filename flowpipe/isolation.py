"""Process isolation: run a node in its own process; frames cross by handle, not by pickling pixels."""
from __future__ import annotations

from .graph import NodeSpec
from .node import Node


def maybe_isolate(spec: NodeSpec) -> Node:
    if spec.isolation == "thread":
        return spec.make()
    from .procnode import ProcessNode

    return ProcessNode(spec)

"""What import-linter cannot see: the node library is installed as ``flowpipe.nodes`` from the folder nodes/,
so an engine module importing it by that name is outside the graph import-linter builds. The engine loads
the library by name only (the registry); the privacy evaluation, which judges the face-blur graph, may use
its helpers."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "flowpipe"
ALLOWED = {"eval"}  # flowpipe/eval/: the evaluation of the shipped graphs, above the runtime


def _library_imports(text: str, depth: int) -> list[str]:
    """Imports of the node library in a module ``depth`` folders below the repository root (flowpipe/x.py: 1)."""
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("flowpipe.nodes")]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            absolute = node.level == 0 and module.startswith("flowpipe.nodes")
            relative = node.level == depth and module.split(".")[0] == "nodes"
            if absolute or relative:
                found.append(f"{'.' * node.level}{module} (line {node.lineno})")
    return found


def test_the_engine_imports_no_node_type() -> None:
    offenders = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        if rel.parts[0] not in ALLOWED and (got := _library_imports(path.read_text(), len(rel.parts))):
            offenders[str(rel)] = got
    assert offenders == {}


@pytest.mark.parametrize(("text", "depth", "caught"), [
    ("from ..nodes.video import is_live\n", 2, True),  # flowpipe/runtime/x.py
    ("from .nodes import draw\n", 1, True),  # flowpipe/x.py
    ("from flowpipe.nodes.track import TrackerCore\n", 2, True),
    ("import flowpipe.nodes.preprocess\n", 3, True),
    ("from ..node import Node\n", 2, False),
    ("from .nodes_of_a_graph import x\n", 2, False),
])
def test_the_check_sees_an_import_of_the_library(text: str, depth: int, caught: bool) -> None:
    assert bool(_library_imports(text, depth)) is caught

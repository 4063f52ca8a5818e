"""Config fuzzing: thousands of malformed and adversarial graphs; every one must end in one-line
errors (exit code 2 from the CLI): no traceback, no hang, no code run. Figures: docs/reliability.md."""
from __future__ import annotations

import os
import string
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flowpipe import GraphError, load_graph
from flowpipe.cli import main

ROOT = Path(__file__).resolve().parent.parent
VALID = (ROOT / "graphs" / "face_blur.yaml").read_text()
CANARY = "/tmp/flowpipe-fuzz-canary"  # noqa: S108 - a fixed path a YAML exploit would write
FUZZ = settings(max_examples=int(os.environ.get("FLOWPIPE_FUZZ_EXAMPLES", "500")), deadline=2000,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def check(text: str) -> None:
    """The property: a GraphError of one-line diagnostics, or a valid graph; nothing else."""
    try:
        load_graph("fuzz.yaml", text=text)
    except GraphError as e:
        assert e.diagnostics
        for d in e.diagnostics:
            line = str(d)
            assert line.startswith("fuzz.yaml") and "\n" not in line and "Traceback" not in line
    assert not os.path.exists(CANARY), "a graph ran code"


scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True),
                    st.text(max_size=40), st.sampled_from(["${params.x}", "${env:HOME}", "${", "}}", "node.port",
                                                           "\u202e\u0000", "💥" * 50, "a" * 5000]))
values = st.recursive(scalars, lambda c: st.lists(c, max_size=5) | st.dictionaries(st.text(max_size=10), c, max_size=5),
                      max_leaves=25)
node_keys = st.sampled_from(["id", "type", "config", "inputs", "on_error", "queue", "overflow", "isolation",
                             "restarts", "bogus", ""])
node_types = st.sampled_from(["video_source", "preprocess", "inference", "blazeface_decode", "tracker", "blur",
                              "video_writer", "jsonl", "mqtt", "passthrough", "no_such_type", ""])


@st.composite
def graphs(draw):
    """Graph-shaped documents with wrong types, missing fields, bad wiring and cycles."""
    n = draw(st.integers(1, 6))
    ids = [draw(st.sampled_from(["a", "b", "c", "d", "a", "x y", "1", ""])) for _ in range(n)]
    nodes = []
    for i in range(n):
        node = {"id": ids[i], "type": draw(node_types)}
        for _ in range(draw(st.integers(0, 3))):
            node[draw(node_keys)] = draw(values)
        if draw(st.booleans()):
            src = draw(st.sampled_from(ids))
            node["inputs"] = {draw(st.sampled_from(["in", "frame", "tensor", "x"])):
                              draw(st.sampled_from([f"{src}.frame", f"{src}.out", src, f"{src}.", ".x"]))}
        nodes.append(node)
    doc = {"nodes": nodes}
    if draw(st.booleans()):
        doc["params"] = draw(values)
    if draw(st.booleans()):
        doc[draw(st.sampled_from(["plugins", "flowpipe", "extra"]))] = draw(values)
    return doc


@FUZZ
@given(graphs())
def test_structured_graphs(doc) -> None:
    check(yaml.safe_dump(doc, allow_unicode=True))


@FUZZ
@given(st.data())
def test_mutated_yaml_text(data) -> None:
    text = VALID
    for _ in range(data.draw(st.integers(1, 8))):
        pos = data.draw(st.integers(0, len(text)))
        op = data.draw(st.sampled_from(["insert", "delete", "replace"]))
        chunk = data.draw(st.text(alphabet=string.printable + "{}[]:&*!|>-\t\u00e9", max_size=6))
        if op == "insert":
            text = text[:pos] + chunk + text[pos:]
        elif op == "delete":
            text = text[:pos] + text[pos + len(chunk):]
        else:
            text = text[:pos] + chunk + text[pos + len(chunk):]
    check(text)


ADVERSARIAL = [
    f"nodes: !!python/object/apply:os.system ['touch {CANARY}']\n",
    f"nodes:\n  - !!python/object/new:subprocess.Popen [['touch', '{CANARY}']]\n",
    "nodes: !!binary aGVsbG8=\n",
    "nodes: &a [*a]\n",
    "a: &a ['x','x','x','x','x','x','x','x','x']\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
    "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"
    "nodes: [*f]\n",
    "nodes:\n" + "  - " * 1 + "[" * 5000 + "]" * 5000 + "\n",
    "nodes:\n  - {id: a, type: synthetic_source, config: {count: 99999999999999999999999999}}\n",
    "nodes:\n  - {id: a, type: synthetic_source, config: {width: -1, height: 1e308}}\n",
    "nodes:\n  - {id: a, type: synthetic_source}\n  - {id: a, type: synthetic_source}\n",
    "plugins: [os]\nnodes:\n  - {id: a, type: synthetic_source, queue: 100000}\n",
    "---\nnodes: []\n---\nnodes: []\n",
    "\ufeffnodes:\n  - {id: \u0430, type: synthetic_source}\n",
    "x" * (2 << 20),
    "nodes:\n  - {id: a, type: synthetic_source, config: {stream: '${env:PATH}${env:PATH}'}}\n  - {id: b, type: null_sink}\n",
]


def test_adversarial_documents(tmp_path) -> None:
    for i, text in enumerate(ADVERSARIAL):
        check(text)
        f = tmp_path / f"g{i}.yaml"
        f.write_text(text)
        assert main(["validate", str(f)]) in (0, 2)  # 0 only where the document is a valid graph
    assert not os.path.exists(CANARY)


def test_cli_exit_code_2_and_one_line_per_error_on_fuzzed_files(tmp_path, capsys) -> None:
    import random

    rnd = random.Random(7)
    bad = 0
    body = "\n".join(x for x in VALID.splitlines() if not x.lstrip().startswith("#"))  # edits land in the graph
    for i in range(200):
        chars = list(body)
        for _ in range(rnd.randint(1, 6)):
            chars.insert(rnd.randrange(len(chars)), rnd.choice("{}[]:&*!-\t\"'%@`"))
        f = tmp_path / f"m{i}.yaml"
        f.write_text("".join(chars))
        code = main(["validate", str(f)])
        err = capsys.readouterr().err
        assert code in (0, 2)
        if code == 2:
            bad += 1
            assert err and all(line.startswith(str(f)) for line in err.strip().splitlines()), err
            assert "Traceback" not in err
    assert bad > 150

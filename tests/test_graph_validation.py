"""Every validation error is one line naming file:line, node id and type, expected vs got."""
from __future__ import annotations

from pathlib import Path

import pytest

from flowpipe import GraphError, load_graph
from flowpipe.graph import parse_sets

OK_HEAD = "nodes:\n  - {id: src, type: synthetic_source, config: {count: 3}}\n"


def errors_of(text: str, **kw) -> list[str]:
    with pytest.raises(GraphError) as e:
        load_graph("g.yaml", text=text, **kw)
    return [str(d) for d in e.value.diagnostics]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("nodes: [\n  {id: a\n", r"^g\.yaml:\d+: YAML error"),
        ("- 1\n- 2\n", r"^g\.yaml:1: graph: expected a mapping with 'nodes', got list"),
        ("nodes: []\n", r"^g\.yaml:1: nodes: expected a non-empty list of nodes, got list"),
        (OK_HEAD + "extra: 1\n", r"^g\.yaml:3: unknown top-level key 'extra'"),
        (OK_HEAD + "  - {id: x, type: pasthrough, inputs: src}\n",
         r"^g\.yaml:3: node 'x' \(pasthrough\): unknown node type 'pasthrough'; did you mean 'passthrough'\? known: "),
        ("nodes:\n  - id: src\n    type: synthetic_source\n    config:\n      count: 3\n      widht: 5\n",
         r"^g\.yaml:6: node 'src' \(synthetic_source\): config\.widht: unknown key \(did you mean 'width'\?\); expected one of: count, width"),
        ("nodes:\n  - id: src\n    type: synthetic_source\n    config:\n      count: many\n",
         r"^g\.yaml:5: node 'src' \(synthetic_source\): config\.count: Input should be a valid integer.*got 'many'"),
        # a nested part's unknown key names that part's keys; a list too short says how many it needs
        (OK_HEAD + "  - id: pre\n    type: preprocess\n    config: {size: [8, 8], tiles: {grid: [3], regoin: 1}}\n"
                   "    inputs: src\n",
         r"^g\.yaml:5: node 'pre' \(preprocess\): config\.tiles\.grid: expected 2 items, got 1: \[3\]$"),
        (OK_HEAD + "  - id: pre\n    type: preprocess\n    config: {size: [8, 8], tiles: {grid: [3, 1], regoin: 1}}\n"
                   "    inputs: src\n",
         r"config\.tiles\.regoin: unknown key \(did you mean 'region'\?\); expected one of: grid, overlap, "
         r"full_frame, region$"),
        # a check of a whole part says what it got, once; a whole config is never dumped
        (OK_HEAD + "  - id: pre\n    type: preprocess\n    config: {size: [8, 8], tiles: {region: [0, 0, 1.6, 1]}}\n"
                   "    inputs: src\n",
         r"config\.tiles: region: expected x0, y0, x1, y1 with 0 <= x0 < x1 <= 1 and 0 <= y0 < y1 <= 1, "
         r"got \[0\.0, 0\.0, 1\.6, 1\.0\]$"),
        (OK_HEAD + "  - id: an\n    type: analytics\n    config: {zones: {door: {polygon: [[0, 0], [1.55, 0], [1, 1]]}}}\n"
                   "    inputs: src\n",
         r"node 'an' \(analytics\): config: zone 'door': point \[1\.55, 0\.0\]: zones and lines are in fractions "
         r"of the picture \(0-1, up to half a picture beyond its edges\); for pixels set units: pixels$"),
        (OK_HEAD + "  - {id: s, type: null_sink, input: src}\n",
         r"^g\.yaml:3: node 's' \(null_sink\): unknown key 'input' \(did you mean 'inputs'\?\): expected one of "),
        (OK_HEAD + "  - {id: s, type: null_sink, inputs: src, enabled: maybe}\n",
         r"^g\.yaml:3: node 's' \(null_sink\): enabled: Input should be a valid boolean, unable to interpret input, "
         r"got 'maybe'$"),
        (OK_HEAD + "  - {id: src, type: null_sink, inputs: src}\n", r"^g\.yaml:3: node 'src' \(null_sink\): duplicate node id 'src' \(first defined at line 2\)"),
        (OK_HEAD + "  - id: s\n    type: null_sink\n    inputs: {inn: src.frame}\n",
         r"^g\.yaml:5: node 's' \(null_sink\): inputs\.inn: unknown input port; expected one of: in"),
        (OK_HEAD + "  - id: s\n    type: null_sink\n    inputs: {in: src.out}\n",
         r"^g\.yaml:5: node 's' \(null_sink\): inputs\.in: 'src' \(synthetic_source\) has no output port 'out'; expected one of: frame"),
        (OK_HEAD + "  - id: s\n    type: null_sink\n    inputs: {in: nope.frame}\n",
         r"node 's' \(null_sink\): inputs\.in: no node 'nope' in this graph"),
        (OK_HEAD + "  - id: s\n    type: null_sink\n", r"^g\.yaml:3: node 's' \(null_sink\): input port 'in' \(any\) is not connected"),
        (OK_HEAD + "  - id: pre\n    type: preprocess\n    config: {interval: {every: 3, follow: trak}}\n"
                   "    inputs: src\n",
         r"^g\.yaml:5: node 'pre' \(preprocess\): config\.interval\.follow: no node 'trak' in this graph; "
         r"expected one of: src$"),
        (OK_HEAD + "  - id: pre_b\n    type: preprocess\n    config: {along: pre}\n    inputs: src\n",
         r"^g\.yaml:5: node 'pre_b' \(preprocess\): config\.along\.node: no node 'pre' in this graph; "
         r"expected one of: src$"),
        (OK_HEAD + "  - {id: s, type: null_sink, inputs: src, on_error: ignore}\n",
         r"on_error: expected one of fail\|drop\|restart, got 'ignore'"),
        (OK_HEAD + "  - {id: s, type: null_sink, inputs: src, queue: 0}\n", r"queue: expected an integer 1\.\.4096, got 0"),
        ("nodes:\n  - {id: src, type: synthetic_source, config: {count: '${params.n}'}}\n",
         r"^g\.yaml:2: unknown parameter '\$\{params\.n\}': known params: none"),
        ("nodes: !!python/object/apply:os.system ['echo hi']\n", r"^g\.yaml:1: YAML error: .*could not determine a constructor"),
        # libyaml reads graphs where PyYAML has it; its errors leave out what they found, so a graph it refuses is
        # read again by PyYAML's own parser, whose error names it
        ("nodes:\n  - {id: a, type: *camera}\n", r"^g\.yaml:2: YAML error: found undefined alias 'camera'$"),
        ("nodes:\n\t- {id: a}\n", r"^g\.yaml:2: YAML error: .*found character '\\t' that cannot start any token$"),
        ("a: &a [1,1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
         "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
         "f: [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\n", r"^g\.yaml: document expands to more than 100000 values"),
    ],
)
def test_error_is_one_pinned_line(text: str, expected: str) -> None:
    errs = errors_of(text)
    assert errs and all("\n" not in e for e in errs)
    assert any(__import__("re").search(expected, e) for e in errs), errs


def test_kind_mismatch_names_both_kinds() -> None:
    from flowpipe import Node, register

    @register("test_tensor_consumer")
    class TensorConsumer(Node):
        inputs = {"tensor": "tensor"}

    errs = errors_of(OK_HEAD + "  - {id: t, type: test_tensor_consumer, inputs: {tensor: src.frame}}\n")
    assert errs == ["g.yaml:3: node 't' (test_tensor_consumer): inputs.tensor: port kind mismatch: "
                    "expected tensor, got frame from 'src.frame'"]


def test_cycle_is_reported() -> None:
    text = ("nodes:\n  - {id: src, type: synthetic_source}\n"
            "  - {id: a, type: test_fault, inputs: {in: [src.frame, b.out]}}\n"
            "  - {id: b, type: test_fault, inputs: {in: a.out}}\n")
    errs = errors_of(text)
    assert len(errs) == 1 and "cycle: a -> b -> a" in errs[0]


def test_all_errors_of_a_phase_are_reported_together() -> None:
    text = OK_HEAD + "  - {id: a, type: nope}\n  - {id: b, type: null_sink, config: {x: 1}, inputs: src}\n"
    errs = errors_of(text)
    assert len(errs) == 2 and errs[0].startswith("g.yaml:3") and errs[1].startswith("g.yaml:4")


def test_params_env_and_set_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FP_W", "32")
    text = ("params:\n  n: 5\n  w: ${env:FP_W:-16}\n  h: ${env:FP_UNSET:-24}\n  name: cam\n"
            "nodes:\n  - id: src\n    type: synthetic_source\n"
            "    config: {count: '${params.n}', width: '${params.w}', height: '${params.h}', stream: '${params.name}-1'}\n")
    spec = load_graph("g.yaml", text=text)
    cfg = spec.node("src").config
    assert (cfg.count, cfg.width, cfg.height, cfg.stream) == (5, 32, 24, "cam-1")
    spec = load_graph("g.yaml", text=text, overrides=parse_sets(["n=7", "name=door"]))
    assert spec.node("src").config.count == 7 and spec.node("src").config.stream == "door-1"
    assert "--set nope: no such parameter; known params: h, n, name, w" in errors_of(text, overrides={"nope": 1})[0]
    # an unset variable with no default, and what looks like a substitution and is none, are errors on their line
    monkeypatch.delenv("FP_UNSET", raising=False)
    for written, said in (("${env:FP_UNSET}", "environment variable 'FP_UNSET' is not set, and '${env:FP_UNSET}' "
                                              "gives no default; expected it set, or '${env:FP_UNSET:-DEFAULT}'"),
                          ("${env:FP_W:16}", "'${env:FP_W:16}' is no substitution; expected '${params.NAME}'"),
                          ("${env:FP_W:-16", "'${env:FP_W:-16' is no substitution"),
                          ("${ENV:FP_W}", "'${ENV:FP_W}' is no substitution")):
        (bad,) = errors_of(text.replace("${env:FP_W:-16}", written))
        assert bad.startswith("g.yaml:3: ") and said in bad, bad
    # a parameter given a value is not read from its default: its variable need not be set
    given = load_graph("g.yaml", text=text.replace("${env:FP_W:-16}", "${env:FP_UNSET}"), overrides={"w": 8})
    assert given.node("src").config.width == 8
    # a bad value given for a parameter names it: the line is the graph's, the value the command line's
    (bad,) = errors_of(text, overrides=parse_sets(["w=wide"]))
    assert bad.startswith("g.yaml:9: node 'src' (synthetic_source): config.width: ") and bad.endswith(
        "got 'wide' (from parameter 'w')"), bad
    (bad,) = errors_of(text.replace("'${params.w}'", "wide"))
    assert not bad.endswith(")"), bad  # written in the graph itself: no parameter to name


def test_a_node_left_out_feeds_its_consumers_what_fed_it() -> None:
    """``enabled: false`` (a parameter's value here): the node is not in the graph and its consumer is fed by
    its producer, through two left out in a row; a node of two inputs cannot be left out."""
    text = ("params:\n  keep: true\nnodes:\n  - {id: src, type: synthetic_source, config: {count: 3}}\n"
            "  - {id: a, type: passthrough, inputs: src, enabled: '${params.keep}'}\n"
            "  - {id: b, type: passthrough, inputs: a.out, enabled: '${params.keep}'}\n"
            "  - {id: s, type: null_sink, inputs: {in: b.out}}\n")
    assert [n.id for n in load_graph("g.yaml", text=text).nodes] == ["src", "a", "b", "s"]
    spec = load_graph("g.yaml", text=text, overrides=parse_sets(["keep=false"]))
    assert [n.id for n in spec.nodes] == ["src", "s"] and spec.node("s").inputs == {"in": [("src", "frame")]}
    two = ("nodes:\n  - {id: src, type: synthetic_source}\n  - {id: t, type: synthetic_source}\n"
           "  - id: a\n    type: test_fault\n    enabled: false\n    inputs: {in: [src.frame, t.frame]}\n"
           "  - {id: s, type: null_sink, inputs: a.out}\n")
    assert errors_of(two) == ["g.yaml:6: node 'a' (test_fault): enabled: false feeds the node's consumers what "
                              "feeds it: expected one input, got 2"]


def test_a_node_two_features_need_runs_where_either_is_on() -> None:
    """``enabled`` as a list of parameters: the node runs where any of them is true, and is left out where
    none is; anything but true and false in the list is an error naming the line and the node."""
    text = ("params:\n  heads: false\n  check: true\nnodes:\n  - {id: src, type: synthetic_source, config: {count: 3}}\n"
            "  - {id: a, type: passthrough, inputs: src, enabled: ['${params.heads}', '${params.check}']}\n"
            "  - {id: s, type: null_sink, inputs: {in: a.out}}\n")
    for sets, ids in ((["heads=false"], ["src", "a", "s"]), (["heads=true", "check=false"], ["src", "a", "s"]),
                      (["check=false"], ["src", "s"])):
        assert [n.id for n in load_graph("g.yaml", text=text, overrides=parse_sets(sets)).nodes] == ids, sets
    assert errors_of(text.replace("'${params.check}'", "3")) == [
        "g.yaml:6: node 'a' (passthrough): enabled: expected true, false or a list of them (any), each maybe a list "
        "(all), got [False, 3]"]
    # a list in the list: all of it (a feature's part, on only with the feature)
    nested = text.replace("enabled: ['${params.heads}', '${params.check}']",
                          "enabled: [['${params.heads}', '${params.check}']]")
    for sets, ids in ((["heads=true"], ["src", "a", "s"]), (["heads=false"], ["src", "s"]),
                      (["heads=true", "check=false"], ["src", "s"])):
        assert [n.id for n in load_graph("g.yaml", text=nested, overrides=parse_sets(sets)).nodes] == ids, sets
    # the face-blur graph's classifier for the animal check: with the check and animal_kind, not with either alone
    graph = str(Path(__file__).resolve().parent.parent / "graphs" / "face_blur.yaml")
    for sets, on in ((["animals=true", "animal_kind=true"], True), (["animals=true"], False),
                     (["animal_kind=true"], False), (["heads=true", "animal_kind=true"], True)):
        assert ("kind" in [n.id for n in load_graph(graph, overrides=parse_sets(sets)).nodes]) == on, sets
    # the face-blur graph's person detector without heads: it follows the heads' node, left out, which says
    # nothing, and the animal check, which asks where a face has not been judged
    spec = load_graph(str(Path(__file__).resolve().parent.parent / "graphs" / "face_blur.yaml"),
                      overrides=parse_sets(["animals=true", "heads_every=3"]))
    ids = [n.id for n in spec.nodes]
    assert "people" in ids and "heads" not in ids
    assert spec.node("people_pre").config.along.followed() == ["heads", "animals"]


def test_parse_sets_rejects_missing_equals() -> None:
    with pytest.raises(GraphError, match="expected NAME=VALUE"):
        parse_sets(["novalue"])


def test_shipped_graphs_validate() -> None:
    from pathlib import Path

    graphs = sorted(Path(__file__).parent.parent.joinpath("graphs").glob("*.yaml"))
    assert graphs, "graphs/ is empty"
    for g in graphs:
        load_graph(g)


def test_every_unknown_key_gets_the_closest_known_one(tmp_path) -> None:
    """A misspelt top-level key, node key and config key (a nested one's too) each name the closest known one."""
    import textwrap

    top = tmp_path / "top.yaml"
    top.write_text("node:\n  - {id: src, type: synthetic_source}\n")
    with pytest.raises(GraphError, match=r"unknown top-level key 'node' \(did you mean 'nodes'\?\)"):
        load_graph(top)
    g = tmp_path / "g.yaml"
    g.write_text(textwrap.dedent("""\
        nodes:
          - id: src
            type: synthetic_source
            confg: {count: 3}
          - id: pre
            type: preprocess
            config: {sise: [64, 64], interval: {evry: 2}}
            inputs: {frame: src}
        """))
    with pytest.raises(GraphError) as e:
        load_graph(g)
    said = [d.message for d in e.value.diagnostics]
    assert any(m.startswith("unknown key 'confg' (did you mean 'config'?)") for m in said), said
    assert any(m.startswith("config.sise: unknown key (did you mean 'size'?); expected one of: size,") for m in said), said
    assert any(m.startswith("config.interval.evry: unknown key (did you mean 'every'?)") for m in said), said


GRAPHS = Path(__file__).resolve().parent.parent / "graphs"


@pytest.mark.parametrize(("graph", "sets", "edit", "said"), [
    # BlazeFace short range (128x128) where the near-face graph feeds full range's 192x192 tiles
    ("face_blur_near.yaml", ["model=blazeface_short"], None,
     "node 'detect' (inference): model blazeface_short takes [1, 128, 128, 3] NHWC f32; 'pre' produces "
     "[5, 192, 192, 3] f32: expected size: [128, 128], layout: NHWC, dtype: f32 in its config (flowpipe models "
     "list gives each model's input)"),
    # CenterFace (NCHW, any size) fed NHWC by a preprocess sized to the source: the size is not known, the layout is
    ("face_blur.yaml", [], ("layout: NCHW, dtype: f32, interval", "layout: NHWC, dtype: f32, interval"),
     "node 'detect' (inference): model centerface takes [1, 3, 384, 640] NCHW f32 of any height and width; 'pre' "
     "produces [1, ?, ?, 3] f32: expected layout: NCHW, dtype: f32 in its config (flowpipe models list gives each "
     "model's input)"),
    ("face_blur.yaml", ["size=[640, 384]"], None, None),  # CenterFace takes any size
    ("text_detect.yaml", ["size=960"], None, None),  # PP-OCR's input is dynamic: any size, as a run takes it
], ids=["size", "layout", "any-size", "dynamic"])
def test_a_registry_model_fed_another_size_or_layout_is_refused_by_validate(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], graph: str, sets: list[str],
        edit: tuple[str, str] | None, said: str | None) -> None:
    """``flowpipe validate`` refuses what the inference node would refuse when it opens (a registry model's size,
    layout and element type against the preprocess's config), in one line naming the file, the line where the
    model is fed and the node; a model that takes any size is not held to one."""
    from flowpipe.cli import main

    path = GRAPHS / graph
    if edit is not None:
        text = path.read_text()
        assert edit[0] in text
        path = tmp_path / graph
        path.write_text(text.replace(edit[0], edit[1]))
    code = main(["validate", str(path), *[a for s in sets for a in ("--set", s)]])
    err = capsys.readouterr().err.splitlines()
    if said is None:
        assert code == 0 and err == [], err
        return
    assert code == 2 and len(err) == 1, err
    where, _, message = err[0].partition(": ")
    assert message == said, err[0]
    file, line = where.rsplit(":", 1)
    assert file == str(path) and "inputs: {tensor: pre.tensor}" in path.read_text().splitlines()[int(line) - 1]


def test_the_registry_says_which_models_take_any_size() -> None:
    """Validation holds a graph to a registry model's stated size where the model's file is not in this host's
    cache: every file that is here and leaves its height and width open is one the registry says takes any."""
    import openvino as ov

    from flowpipe import models

    core = ov.Core()
    for name, e in models.builtin_registry().items():
        path = models.cached_path(name)
        if e.get("cut") or path.suffix not in (".onnx", ".tflite", ".xml") or not path.is_file():
            continue
        dims = list(core.read_model(str(path)).inputs[0].get_partial_shape())
        if any(d.is_dynamic for d in dims[1:]):
            assert e["input"].get("any_size"), (name, dims)

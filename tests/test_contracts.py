"""Node contracts from config (``Node.contract``), the executor interface and its factory, and the hooks a
part of a bigger run plugs into the single-process runner."""
from __future__ import annotations

import textwrap
from typing import Any

import pytest

from flowpipe import Frame, GraphError, load_graph
from flowpipe.node import PIXELS_ALL, PIXELS_BGR, Node, NodeContract, default_pixels
from flowpipe.registry import lookup
from flowpipe.runtime import Executor, RunHooks, Runner, executor


def _contract(node_type: str, **config: Any) -> NodeContract:
    cls = lookup(node_type)
    return cls.contract(cls.Config(**config))


@pytest.mark.parametrize(("node_type", "config", "traits"), [
    # a tracker holds frames and keeps one worker only with a lookahead
    ("tracker", {}, {"holds_frames": False, "one_worker": None, "isolation_refused": None}),
    ("tracker", {"lookahead": 3}, {"holds_frames": True,
                                   "one_worker": "a tracker with a lookahead keeps each stream's frames in order "
                                                 "on one worker",
                                   "isolation_refused": "a tracker with a lookahead holds frames past process()"}),
    # asynchronous requests are held past process(); inline ones run to completion in it
    ("inference", {"model": "m.xml"}, {"holds_frames": True, "serves_streams": True, "pixels": PIXELS_ALL}),
    ("inference", {"model": "m.xml", "requests": "inline"}, {"holds_frames": False, "serves_streams": True}),
    # a camera or network stream is live, a file is not
    ("video_source", {"uri": "rtsp://10.0.0.7/stream1"}, {"live": True}),
    ("video_source", {"uri": "clip.mp4"}, {"live": False, "isolation_refused": "a source runs in the runner's "
                                                                              "process, where its frames are "
                                                                              "accounted"}),
    # what a writer writes, by kind; what it gets is the finished picture
    ("video_writer", {"path": "o.mp4"}, {"files": {"path": "video"}, "final_picture": True,
                                         "pixels": frozenset({"BGR", "NV12", "I420"})}),
    ("video_writer", {"path": "o.mp4", "fourcc": "mp4v"}, {"pixels": frozenset({"BGR"})}),
    ("jsonl", {"path": "o.jsonl"}, {"files": {"path": "records"}, "final_picture": False, "pixels": PIXELS_ALL}),
    ("collect", {"into": "x"}, {"sharding": "it keeps packets in the memory of the process that started the run"}),
    ("passthrough", {}, {"forwards": {"out": "in"}, "one_worker": None}),
])
def test_a_node_declares_its_contract_from_its_config(node_type: str, config: dict[str, Any],
                                                      traits: dict[str, Any]) -> None:
    got = _contract(node_type, **config)
    assert {k: getattr(got, k) for k in traits} == traits


def test_a_node_that_says_nothing_takes_bgr_only_where_it_gets_pictures() -> None:
    assert default_pixels({"frame": "frame"}) == PIXELS_BGR
    assert default_pixels({"in": "any"}) == PIXELS_BGR
    assert default_pixels({"detections": "detections"}) == PIXELS_ALL
    assert default_pixels({"tensors": "tensors"}) == PIXELS_ALL

    class Reader(Node):
        inputs = {"detections": "detections"}

    class Painter(Node):
        inputs = {"frame": "frame"}

    assert Reader("r").declared.pixels == PIXELS_ALL and Painter("p").declared.pixels == PIXELS_BGR
    assert Painter("p").declared.one_worker is not None  # one worker unless it says otherwise


def test_validation_reads_the_contract_of_the_configured_node() -> None:
    """The same node type is refused or taken by what its config makes of it."""
    graph = """
        nodes:
          - {id: src, type: list_source, config: {feed: items}}
          - {id: t, type: tracker, isolation: process, config: {lookahead: LOOK}, inputs: {detections: src}}
    """
    with pytest.raises(GraphError, match=r"node 't' \(tracker\): isolation: process is not available for tracker: "
                                         r"a tracker with a lookahead holds frames past process\(\); expected "
                                         "isolation: thread"):
        load_graph("<t>", text=textwrap.dedent(graph.replace("LOOK", "2")))
    spec = load_graph("<t>", text=textwrap.dedent(graph.replace("LOOK", "0")))
    assert spec.node("t").contract.isolation_refused is None


TWO = """
    nodes:
      - {id: a, type: synthetic_source, config: {count: 40}}
      - {id: b, type: synthetic_source, config: {count: 30}}
      - {id: hop, type: passthrough, inputs: {in: [a, b]}}
      - {id: sink, type: null_sink, inputs: hop}
"""


def test_the_factory_picks_the_executor_from_the_processes_asked_for() -> None:
    one: Executor = executor(load_graph("<t>", text=textwrap.dedent(TWO)))
    res = one.run()
    assert isinstance(one, Runner) and res.ok and res.frames["out"] == 70 and "processes" not in res.to_json()
    spec = load_graph("<t>", text=textwrap.dedent(TWO))
    two = executor(spec, 2)
    res = two.run()
    assert spec.processes == 2 and res.ok and res.frames["out"] == 70
    assert res.to_json()["processes"] == 2 and len(two.pids) == 2 and two.per_stream == {"a": 40, "b": 30}


def test_hooks_put_a_node_in_a_graph_nodes_place_and_observe_every_fate() -> None:
    """What a shard plugs in: its own node for one of the graph's (the device owner's client), an observer
    told each frame's entry and fate (its board), and a word before any frame (every shard opened)."""
    entered: list[tuple[str, int]] = []
    ended: list[tuple[str, int, str]] = []

    class Board:
        def entered(self, stream: str, index: int) -> None:
            entered.append((stream, index))

        def ended(self, stream: str, index: int, fate: str) -> None:
            ended.append((stream, index, fate))

    made: list[str] = []

    def make(spec: Any) -> Node | None:
        if spec.id != "hop":
            return None
        made.append(spec.id)
        return lookup("null_sink")(spec.id)  # ends every frame here: nothing reaches the sink

    opened: list[bool] = []
    spec = load_graph("<t>", text=textwrap.dedent(TWO))
    hooks = RunHooks(make_node=make, fates=Board(), on_opened=lambda: opened.append(True) or True)
    res = Runner(spec, hooks=hooks).run()
    assert res.ok and made == ["hop"] and opened == [True]
    assert res.nodes["sink"]["frames"] == 0 and res.frames["out"] == 70
    assert sorted(entered) == sorted({(s, i) for s, i, _ in ended}) and len(ended) == 70
    assert {fate for *_, fate in ended} == {"out"}
    stopped = Runner(load_graph("<t>", text=textwrap.dedent(TWO)), hooks=RunHooks(on_opened=lambda: False)).run()
    assert stopped.frames["in"] == 0 and stopped.exit_code == 130  # another part failed to open: no frame


def test_a_node_added_to_a_graph_is_wired_and_checked_as_a_graph_files_node() -> None:
    from flowpipe.graph import NodeSpec

    spec = load_graph("<t>", text=textwrap.dedent(TWO))
    cls = lookup("collect")
    spec.add(NodeSpec("keep", "collect", cls, cls.Config(into="kept"), {"in": [("hop", "out")]}))
    assert ("hop", "keep") in spec.dag.edges and spec.consumers("hop") == [("out", "sink", "in"), ("out", "keep", "in")]
    res = Runner(spec).run()
    assert res.ok and len(res.collected["kept"]) == 70
    with pytest.raises(ValueError, match="already in the graph"):
        spec.add(NodeSpec("keep", "collect", cls, cls.Config(into="x"), {"in": [("hop", "out")]}))
    with pytest.raises(ValueError, match="has no input port 'frame'"):
        spec.add(NodeSpec("k2", "collect", cls, cls.Config(into="x"), {"frame": [("hop", "out")]}))
    decoder = lookup("blazeface_decode")
    with pytest.raises(ValueError, match=r"a.frame \(frame\) cannot feed tensors \(tensors\)"):
        spec.add(NodeSpec("d", "blazeface_decode", decoder, decoder.Config(), {"tensors": [("a", "frame")]}))


def test_a_node_in_a_worker_process_declares_what_it_stands_for_but_forwards_nothing() -> None:
    from flowpipe.runtime.process import isolate

    spec = load_graph("<t>", text=textwrap.dedent(TWO.replace("type: passthrough,", "type: passthrough, "
                                                                                  "isolation: process,")))
    hop = spec.node("hop")
    stand_in = isolate(hop)
    assert hop.contract.forwards == {"out": "in"} and stand_in.declared.forwards == {}
    assert stand_in.declared.pixels == hop.contract.pixels == PIXELS_ALL
    res = Runner(spec).run()
    assert res.ok and res.frames["out"] == 70


def test_a_bad_config_does_not_hide_what_the_engine_keys_break() -> None:
    """One run of validate names every problem of a node: its config's and its engine keys' (checked against
    the type's defaults where the config failed)."""
    text = """
        nodes:
          - {id: src, type: synthetic_source}
          - {id: meta, type: jsonl, workers: 2, config: {path: o.jsonl, colour: red}, inputs: {detections: src}}
    """
    with pytest.raises(GraphError) as e:
        load_graph("<t>", text=textwrap.dedent(text))
    got = [d.message for d in e.value.diagnostics]
    assert got == ["config.colour: unknown key; expected one of: path",
                   "workers: jsonl keeps state across streams and runs on one worker; expected 1, got 2"]


def test_a_node_type_declaring_traits_the_old_way_is_told_where_they_go() -> None:
    from flowpipe.registry import register

    with pytest.raises(TypeError, match=r"'parallel_streams' is declared in the node's contract now: def contract\(cls, "
                                        r"config\): return cls.declare\(one_worker=None\)"):
        @register("test_old_style")
        class OldStyle(Node):
            inputs = {"in": "frame"}
            parallel_streams = True
    with pytest.raises(TypeError, match="'holding' is declared in the node's contract now"):
        @register("test_old_style_hook")
        class OldHook(Node):
            inputs = {"in": "frame"}

            def holding(self) -> bool:
                return True


def test_a_node_type_written_to_the_earlier_node_api_is_told_what_replaces_what_it_uses() -> None:
    from flowpipe.registry import register

    with pytest.raises(TypeError, match=r"OldAsync: poll\(\) belongs to flowpipe.AsyncNode now: "
                                        r"class OldAsync\(AsyncNode, \.\.\.\)"):
        @register("test_old_async")
        class OldAsync(Node):
            inputs = {"in": "frame"}

            def poll(self) -> list[Frame]:
                return []
    with pytest.raises(TypeError, match=r"request\(\) belongs to flowpipe.Negotiating now"):
        @register("test_old_memory")
        class OldMemory(Node):
            inputs = {"in": "frame"}

            def request(self, port: str, offer: Any, outputs: Any, devices: Any) -> Any:
                return None
    with pytest.raises(TypeError, match=r"missing\(\) is no longer asked of a node; it goes in the contract: "
                                        r"cls.declare\(resources=\(Resource\('opens PATH', reads=PATH"):
        @register("test_old_missing")
        class OldMissing(Node):
            inputs = {"in": "frame"}

            def missing(self) -> str | None:
                return None


def test_the_node_base_class_offers_what_every_node_needs_and_no_more() -> None:
    """Eight calls on ``Node``; the rest comes with the mixin a node needs, and a node that holds frames
    without the mixin that gives them back is refused when it is made."""
    from flowpipe.node import AsyncNode

    public = sorted(n for n, v in vars(Node).items() if not n.startswith("_") and callable(getattr(Node, n))
                    and not isinstance(v, type))
    assert public == ["close", "contract", "declare", "end_stream", "flush", "open", "process", "retune"]

    class Holds(Node):
        @classmethod
        def contract(cls, config: Any) -> Any:
            return cls.declare(holds_frames=True)

    with pytest.raises(TypeError, match=r"Holds: its contract holds frames \(holds_frames=True\), which a node "
                                        r"gives back through poll\(\): inherit flowpipe.AsyncNode"):
        Holds("h")

    class HoldsAndGives(AsyncNode, Holds):
        pass

    assert HoldsAndGives("h").declared.holds_frames

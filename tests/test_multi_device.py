"""Several devices at once (``device: GPU+CPU``): the choice, and the scheduler over real OpenVINO CPU engines
(two of them stand for two devices here; one is slowed down), in a graph and on its own."""
from __future__ import annotations

import copy
import itertools
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_inference import _graph  # the same small graph: preprocess, inference, collect

from flowpipe import Frame
from flowpipe.accel import OpenVino, devices
from flowpipe.accel.openvino import DeviceChoice, choose_device, choose_devices
from flowpipe.contracts import Allocation, Offer
from flowpipe.errors import FrameError, GraphError
from flowpipe.testing import collected, feed, run_yaml
from flowpipe_nodes.inference import Entries, InferenceConfig, MultiEngine
from flowpipe_nodes.inference.multi import Split


# -- the choice --------------------------------------------------------------------------------------------
def test_plus_joins_devices_used_together_in_the_order_given() -> None:
    got = choose_devices("NPU+GPU+CPU", ["CPU", "GPU"])
    assert [c.device for c in got] == ["GPU", "CPU"]
    assert got[0].reason == "NPU not present; GPU and CPU are present, used together (available: CPU, GPU)"
    assert [c.device for c in choose_devices("GPU+CPU", ["CPU"])] == ["CPU"]
    assert choose_devices("GPU+CPU", ["CPU"])[0].reason == "GPU not present; CPU is present (available: CPU)"
    # ',' stays a fallback list: the first alternative with a device present wins
    assert [c.device for c in choose_devices("NPU+GPU,CPU", ["CPU"])] == ["CPU"]
    assert [c.device for c in choose_devices(["GPU+CPU", "NPU"], ["CPU", "NPU"])] == ["CPU"]
    assert [c.device for c in choose_devices("gpu + cpu + gpu", ["CPU", "GPU.0"])] == ["GPU", "CPU"]
    assert choose_device("GPU+CPU", ["CPU", "GPU"]).device == "GPU"  # one device asked of several: the first
    with pytest.raises(RuntimeError, match=r"^no wanted device is available: wanted NPU\+GPU -> NPU, available: CPU$"):
        choose_devices("NPU+GPU,NPU", ["CPU"])
    with pytest.raises(ValueError, match=r"'\+' joins named devices"):
        choose_devices("AUTO+CPU", ["CPU"])


# -- a graph ---------------------------------------------------------------------------------------------
def _frames(n: int) -> list[Frame]:
    rng = np.random.default_rng(5)
    return [Frame(s, i, i / 30, rng.integers(0, 255, (96, 128, 3), np.uint8)) for i in range(n) for s in ("a", "b")]


def test_gpu_plus_cpu_without_a_gpu_runs_on_the_cpu_alone() -> None:
    res = run_yaml(_graph(feed(_frames(6)), "gpucpu", "model: blazeface_short, device: GPU+CPU"))
    assert res.ok, res.error
    sec = res.inference["inference.det"]
    assert sec["device"] == "CPU" and sec["device_reason"].startswith("GPU not present; CPU is present")
    assert "devices" not in sec  # one device: the single-device engine, as with device: CPU
    got = collected("gpucpu")
    assert {f.meta["inference"]["device"] for f in got} == {"CPU"}
    for s in ("a", "b"):
        assert [f.index for f in got if f.stream == s] == list(range(6))


def _two_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """Devices joined with '+' resolve to two CPU engines: the scheduler on real requests, on this machine."""
    def choose_all(self: OpenVino, wanted: str | list[str], refused: dict[str, str] | None = None) -> list[DeviceChoice]:
        if "+" not in str(wanted):
            return choose_devices(wanted, self.available(), refused)
        return [DeviceChoice("CPU", "two CPU engines (test)", ["CPU"]) for _ in range(2)]

    monkeypatch.setattr(OpenVino, "choose_all", choose_all)


def test_a_graph_on_two_devices_keeps_order_and_reports_each_devices_share(monkeypatch) -> None:
    _two_cpus(monkeypatch)
    f32 = "properties: {INFERENCE_PRECISION_HINT: f32}"
    multi = run_yaml(_graph(feed(_frames(30)), "multi2", f"model: blazeface_short, device: GPU+CPU, num_requests: 2, {f32}"))
    single = run_yaml(_graph(feed(_frames(30)), "single1", f"model: blazeface_short, device: CPU, {f32}"))
    assert multi.ok and single.ok, (multi.error, single.error)
    assert multi.frames == {"in": 60, "out": 60, "dropped": 0, "failed": 0}
    sec = multi.inference["inference.det"]
    assert sec["device"] == "CPU+CPU" and sec["requests"] == 4 and sec["window"] == 8
    assert sec["split"] == {"by": "frame", "shares": {"CPU.0": 1, "CPU.1": 1}}
    assert sec["input_memory"] == "host" and sec["input_binding"] == "host tensor, shared memory"
    per = sec["devices"]
    assert set(per) == {"CPU.0", "CPU.1"} and all(d["requests"] == 2 for d in per.values())
    dealt = sum(Split([1, 1]).device(s, i) for s in ("a", "b") for i in range(30))
    assert (per["CPU.0"]["frames"], per["CPU.1"]["frames"]) == (60 - dealt, dealt)  # each frame as its index says
    assert 20 <= dealt <= 40
    assert sum(d["share"] for d in per.values()) == pytest.approx(1.0, abs=0.01)
    # what each device ran: a request of one image for each of its frames (batch 1)
    assert all(d["inferences"] == d["images"] == d["frames"] for d in per.values()), per
    # each device's busy time: while a request of its own ran, a share of the time since its first
    for d in (*per.values(), single.inference["inference.det"]):
        assert 0 < d["busy_s"] and 0 < d["busy_share"] <= 1, d
    from flowpipe.cli.extra import bench_summary

    lines = bench_summary({"graph": "g", "streams": 2, "processes": 1, "inference": multi.inference}).splitlines()
    assert [line.split()[:2] for line in lines if " busy " in line] == [["det", "openvino:CPU.0"],
                                                                        ["det", "openvino:CPU.1"]], lines
    assert all(re.search(r"busy \d+% of the run \([\d.]+ requests at once\), \d+ frames \(\d+%\)$", line)
               for line in lines if " busy " in line), lines
    # requests at once while busy: between one and each device's pool
    assert all(1 <= d["in_flight"] <= d["requests"] for d in per.values()), per
    a, b = collected("multi2"), collected("single1")
    for s in ("a", "b"):
        assert [f.index for f in a if f.stream == s] == list(range(30))
    ref = {(f.stream, f.index): f for f in b}
    for f in a:
        assert f.meta["inference"]["device"] == "CPU"
        for name in ("regressors", "classificators"):
            np.testing.assert_allclose(f.tensors[name], ref[(f.stream, f.index)].tensors[name], atol=1e-3)


def test_batch_with_several_devices_is_refused(monkeypatch) -> None:
    _two_cpus(monkeypatch)
    res = run_yaml(_graph(feed(_frames(2)), "multib", "model: blazeface_short, device: GPU+CPU, batch: 2"))
    assert res.exit_code == 1
    assert re.match(r"<test>:\d+: " + re.escape("node 'det' (inference): "), str(res.error)) and "\n" not in str(res.error)
    assert "deals each frame to one device; expected batch: 1, got 2" in str(res.error)


# -- the scheduler on its own --------------------------------------------------------------------------------
class _Delayed:
    """An infer request of engine ``k`` that starts ``delay`` seconds after it is asked to (a slower device),
    and fails when waited on if it is one of the ``fail`` starts of its engine (counted from 0). Its engine
    waits on it when it takes its frames and recycles it: ``collected`` gets (k, time) then."""

    def __init__(self, req: Any, k: int, delay: float, log: list[int], fail: set[int],
                 collected: list[tuple[int, float]]):
        self._req, self._k, self._delay, self._log, self._fail_at = req, k, delay, log, fail
        self._collected = collected
        self._started = threading.Event()
        self._started.set()
        self._fail = False

    def start_async(self) -> None:
        self._fail = len(self._log) in self._fail_at
        self._log.append(len(self._log))
        self._started.clear()

        def go() -> None:
            time.sleep(self._delay)
            self._req.start_async()
            self._started.set()

        threading.Thread(target=go, daemon=True).start()

    def wait(self) -> None:
        self._started.wait()
        self._req.wait()
        self._collected.append((self._k, time.perf_counter()))
        if self._fail:
            raise RuntimeError("injected device failure")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._req, name)


@pytest.fixture(scope="module")
def affine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model: y = 2x + 1 over [1, 4]."""
    import openvino as ov
    from openvino import opset13 as ops

    x = ops.parameter([1, 4], ov.Type.f32, name="input")
    y = ops.add(ops.multiply(x, ops.constant(np.float32(2))), ops.constant(np.float32(1)))
    path = tmp_path_factory.mktemp("affine") / "affine.xml"
    ov.save_model(ov.Model([ops.result(y)], [x], "affine"), path)
    return path


def _engine(affine: Path, delays: tuple[float, float], fail: tuple[set[int], set[int]] = (set(), set()),
            shares: tuple[int, int] = (1, 1)) -> tuple[MultiEngine, list[tuple[int, float]]]:
    """Two CPU engines, two requests each: the first ``delays[0]`` per request, the second ``delays[1]``,
    given ``shares`` of the frames; the returned list gets (engine, time) as each request is collected (and
    recycled)."""
    cfg = InferenceConfig(model=str(affine), device="CPU+CPU", num_requests=2)
    choices = [DeviceChoice("CPU", "test", ["CPU"]) for _ in range(2)]
    collected: list[tuple[int, float]] = []
    multi = MultiEngine("m", cfg, choices, lambda: None, lambda f, d: None, time.perf_counter())
    multi.split = Split(list(shares))
    multi.load(devices().openvino, Offer(), Allocation(), Entries(), None, 8)
    for k, e in enumerate(multi.engines):
        starts: list[int] = []
        e.requests = [_Delayed(r, k, delays[k], starts, fail[k], collected) for r in e.requests]
    return multi, collected


def _frame(i: int) -> Frame:
    return Frame("s", i, 0.0, None, "TENSOR", tensors={"input": np.full((1, 4), i, np.float32)})


def _bind(multi: MultiEngine, f: Frame) -> Callable[[Any], None]:
    def bind(req: Any) -> None:
        multi.bind_input(req, f)
        multi.bind_outputs(req, [f])
    return bind


class _Sink:
    """Where finished frames go: each one's index and result kept, its pooled output memory let go (as the
    node downstream does)."""

    def __init__(self) -> None:
        self.index: list[int] = []
        self.result: dict[int, np.ndarray] = {}

    def __iadd__(self, frames: list[Frame]) -> _Sink:
        for f in frames:
            self.index.append(f.index)
            outs = [v for k, v in f.tensors.items() if k != "input"]
            if outs:
                self.result[f.index] = outs[0].copy()
            if f.ref is not None:
                f.ref.end()
        return self


def _run(multi: MultiEngine, frames: list[Frame]) -> _Sink:
    out = _Sink()
    for f in frames:
        out += multi.submit([f], _bind(multi, f))
        out += multi.collect()
    out += multi.drain()
    return out


def _recording(multi: MultiEngine) -> dict[tuple[str, int], int]:
    """Which engine each frame was submitted to, by (stream, index)."""
    ran: dict[tuple[str, int], int] = {}
    for k, e in enumerate(multi.engines):
        def submit(frames: list[Frame], bind: Callable[[Any], None], k: int = k, orig: Any = e.submit) -> list[Frame]:
            ran.update({(f.stream, f.index): k for f in frames})
            return orig(frames, bind)
        e.submit = submit  # type: ignore[method-assign]
    return ran


def test_which_device_runs_a_frame_is_the_same_whichever_device_is_slower(affine) -> None:
    """The split deals frames by their stream and turn alone: a quiet run, one whose first device is slow and
    one whose second is slow give each frame the same device (devices' numerics differ: a frame's boxes must
    not depend on load), and the same results in the same order."""
    frames = [Frame(s, i, 0.0, None, "TENSOR", tensors={"input": np.full((1, 4), 10 * i + (s == "b"), np.float32)})
              for i in range(16) for s in ("a", "b")]
    seen = []
    for delays in ((0.01, 0.01), (0.12, 0.005), (0.005, 0.12)):
        multi, _ = _engine(affine, delays)
        ran = _recording(multi)
        try:
            out = _run(multi, [copy.copy(f) for f in frames])
        finally:
            multi.close()
        assert out.index == [f.index for f in frames]
        seen.append(ran)
    assert seen[0] == seen[1] == seen[2]
    split = Split([1, 1])
    assert seen[0] == {(f.stream, f.index): split.device(f.stream, f.index) for f in frames}
    assert 12 <= sum(seen[0].values()) <= 20  # about an equal share each


def test_the_faster_device_recycles_its_requests_while_the_slower_ones_frame_is_the_oldest(affine) -> None:
    multi, collected = _engine(affine, (0.01, 0.25), shares=(3, 1))
    try:
        frames = [_frame(i) for i in range(40)]
        frames[7].meta["skip"] = True
        out = _Sink()
        for f in frames:
            if f.meta.get("skip"):  # runs no request: out in its turn
                multi.pass_through(f)
                continue
            out += multi.submit([f], _bind(multi, f))
            out += multi.collect()
        out += multi.drain()
        assert out.index == list(range(40))  # (a) in submission order
        assert sorted(out.result) == [i for i in range(40) if i != 7]
        for i, got in out.result.items():
            np.testing.assert_allclose(got, np.full((1, 4), 2 * i + 1, np.float32))
        fast, slow = (multi.engines[k].section for k in (0, 1))
        expected = sum(multi.split.device("s", i) for i in range(40) if i != 7)
        assert fast["frames"] + slow["frames"] == 39 and slow["frames"] == expected  # (b) its share: about 1 in 4
        assert fast["share"] + slow["share"] == pytest.approx(1.0, abs=0.002)
        # (c) the slower engine's first frame was the oldest for 0.25 s: meanwhile the faster engine took its
        # finished frames and recycled its requests (more were collected than its two requests hold)
        first_slow = min(t for k, t in collected if k == 1)
        assert sum(1 for k, t in collected if k == 0 and t < first_slow) > 2
        assert not multi.failed
    finally:
        multi.close()


def test_the_split_deals_each_device_its_share_spread_out_and_streams_keep_their_device() -> None:
    split = Split([3, 1])
    # a stream's frames: each device its share of any run of them, every frame or an interval's every 3rd
    for step, runs in ((1, 4), (3, 6), (7, 15)):
        got = [split.device("cam0", i) for i in range(0, 4000 * step, step)]
        assert 0.74 < got.count(0) / 4000 < 0.76, step
        assert max(len(list(g)) for _, g in itertools.groupby(got)) <= runs, step  # spread out: no long runs
    # over many streams in step, each moment's frames are shared too
    now = [split.device(f"cam{n}", 100) for n in range(400)]
    assert 0.65 < now.count(0) / 400 < 0.85
    # a function of the stream and the index alone: a frame dropped or failed before moves no other
    assert [Split([3, 1]).device("cam0", i) for i in (5, 9, 12)] == [split.device("cam0", i) for i in (5, 9, 12)]
    # by stream: each stream on one device for good, by the shares over many streams; a third device takes
    # streams from the others and moves none between them
    two, three = Split([3, 1], "stream"), Split([3, 1, 2], "stream")
    homes = {f"cam{n}": two.device(f"cam{n}", 0) for n in range(600)}
    assert all(two.device(s, i) == d for s, d in homes.items() for i in (1, 77))
    assert 0.68 < list(homes.values()).count(0) / 600 < 0.82
    assert all(three.home(s) in (d, 2) for s, d in homes.items())
    with pytest.raises(ValueError, match="expected a share >= 1"):
        Split([2, 0])


def test_a_split_that_names_no_device_used_together_is_refused_at_validate(tmp_path) -> None:
    for device, split, why in (("GPU+CPU", "{NPU: 2}", "split: NPU: expected devices of device's list of devices "
                                "used together ('GPU+CPU'), got device: GPU+CPU"),
                               ("CPU", "{CPU: 2}", "split: CPU: expected devices of device's list of devices used "
                                "together ('GPU+CPU'), got device: CPU"),
                               ("GPU+CPU", "{GPU: 0}", "expected a whole number >= 1 for each device's share")):
        with pytest.raises(GraphError) as err:
            run_yaml(_graph(feed(_frames(2)), "nosplit", f"model: blazeface_short, device: {device}, split: {split}"))
        assert re.fullmatch(r"<test>:\d+: node 'det' \(inference\): config.*" + re.escape(why) + ".*", str(err.value))


def test_a_failed_request_on_one_device_fails_its_frame_only(affine) -> None:
    multi, _collected = _engine(affine, (0.01, 0.1), fail=(set(), {0}))  # the slower engine's first request fails
    try:
        frames = [_frame(i) for i in range(20)]
        out = _run(multi, frames)
        assert multi.failed
        err = multi.next_error()
        assert isinstance(err, FrameError) and "injected device failure" in str(err)
        assert multi.next_error() is None and not multi.failed
        failed = [f.index for f in err.frames]
        assert len(failed) == 1
        # (d) every frame accounted: out in order, or failed
        assert out.index == [i for i in range(20) if i not in failed]
    finally:
        multi.close()


def test_a_clients_own_memory_gets_the_results_on_whichever_device_runs_them(affine) -> None:
    multi, _collected = _engine(affine, (0.02, 0.02))
    try:
        assert multi.frames_at_once() == 8 and multi.output_specs()[0][1:] == ((1, 4), "<f4")
        frames = [_frame(i) for i in range(12)]
        mine = {f.index: np.zeros((1, 4), np.float32) for f in frames}
        out = _Sink()
        for f in frames:
            multi.provide(f, [mine[f.index]])
            out += multi.submit([f], _bind(multi, f))
        out += multi.drain()
        assert out.index == list(range(12))
        assert all(s["frames"] > 0 for s in (e.section for e in multi.engines))
        for i, arr in mine.items():
            np.testing.assert_allclose(arr, np.full((1, 4), 2 * i + 1, np.float32))
    finally:
        multi.close()
    assert multi.section["outputs_held_at_close"] == 0


def test_the_node_on_two_devices_serves_a_device_owners_clients(affine, monkeypatch) -> None:
    """What the device owner asks of the node (host input, output specs, frames at once, a client's own
    memory for the results), on two devices."""
    from flowpipe.testing import Harness
    from flowpipe_nodes.inference import Inference

    _two_cpus(monkeypatch)
    node = Inference("det", Inference.Config(model=str(affine), device="GPU+CPU", num_requests=2))
    with Harness(node) as h:
        assert h.requests["tensor"].placement == "host" and node.owned_input(h.devices) == "host"
        assert isinstance(node.engine, MultiEngine) and node.device == "CPU+CPU"
        assert node.frames_at_once() == node.max_held == 8
        assert node.output_specs()[0][1:] == ((1, 4), "<f4")
        mine = {i: np.zeros((1, 4), np.float32) for i in range(16)}
        out = _Sink()
        for i in range(16):
            f = _frame(i)
            node.provide_outputs(f, [mine[i]])
            out += node.process(f, "tensor")
            out += node.poll()
        out += node.flush()
        assert out.index == list(range(16))
        for i, arr in mine.items():
            np.testing.assert_allclose(arr, np.full((1, 4), 2 * i + 1, np.float32))
        sec = h.context.sections["inference.det"]
        assert sec["device"] == "CPU+CPU" and sum(d["frames"] for d in sec["devices"].values()) == 16


def test_a_model_the_registry_says_cannot_run_on_the_gpu_runs_on_the_next_device(monkeypatch) -> None:
    """A registry model that ``refuses`` the GPU (a plugin lacking a kernel it needs; SSD MobileNet v2 did,
    before it was cut ahead of its postprocessing): on a machine with a GPU, ``device: GPU`` and AUTO choose
    the CPU for it, and the reason (``--stats`` ``device_reason``) says why; its input memory is then asked
    for on the host, not in the GPU's OpenCL context. A model that refuses nothing still gets the GPU."""
    from flowpipe import models
    from flowpipe_nodes.inference import Inference

    reg = copy.deepcopy(models.registry())  # the registry's own (cached) dict stays as it is
    reg["ssd_mobilenet_v2_coco"]["refuses"] = {"GPU": "the GPU plugin has no NonZero kernel over u8"}
    monkeypatch.setattr(models, "registry", lambda: reg)
    monkeypatch.setattr(OpenVino, "available", lambda self: ["CPU", "GPU"])
    offer = Offer(producer="pre", port="tensor", writes=frozenset({"host", "opencl"}))
    for wanted in ("GPU", "AUTO", "GPU+CPU"):
        node = Inference("det", InferenceConfig(model="ssd_mobilenet_v2_coco", device=wanted))
        (choice,) = node.choose_all(devices())
        assert choice.device == "CPU" and choice.reason.startswith("GPU refused by the model (the GPU plugin"), choice
        assert node.request("tensor", offer, {}, devices()).placement == "host"
    other = Inference("det", InferenceConfig(model="blazeface_short", device="GPU"))
    assert [c.device for c in other.choose_all(devices())] == ["GPU"]
    assert other.request("tensor", offer, {}, devices()).placement == "opencl"


def test_bench_says_which_shares_match_the_devices_speeds() -> None:
    from flowpipe.cli.extra import bench_summary, speed_shares

    def dev(frames: int, busy_s: float) -> dict[str, Any]:
        return {"frames": frames, "busy_s": busy_s, "busy_share": 0.9, "share": 0.5}

    assert speed_shares({"GPU": dev(300, 10), "CPU": dev(100, 10)}) == {"GPU": 3, "CPU": 1}
    assert speed_shares({"GPU": dev(250, 10), "CPU": dev(100, 10)}) == {"GPU": 5, "CPU": 2}
    assert speed_shares({"GPU": dev(200, 10), "CPU": dev(0, 0)}) is None  # one device ran none: nothing measured
    assert speed_shares({"GPU.0": dev(200, 10), "GPU.1": dev(100, 10)}) == {"GPU.0": 2, "GPU.1": 1}
    twice = {"device": "CPU+CPU", "devices": {"CPU.0": dev(200, 10), "CPU.1": dev(100, 10)}}
    assert "shares that match" not in bench_summary({"graph": "g", "streams": 1, "processes": 1,  # split cannot
                                                      "inference": {"inference.det": twice}})  # tell them apart
    sec = {"device": "GPU+CPU", "split": {"by": "frame", "shares": {"GPU": 1, "CPU": 1}},
           "devices": {"GPU": dev(300, 10), "CPU": dev(100, 10)}}
    text = bench_summary({"graph": "g", "streams": 1, "processes": 1, "inference": {"inference.det": sec}})
    assert "det                   shares that match these devices' speeds in this run: split: {GPU: 3, CPU: 1}" in text
    sec["split"]["shares"] = {"GPU": 3, "CPU": 1}  # already so: nothing to say
    assert "shares that match" not in bench_summary({"graph": "g", "streams": 1, "processes": 1,
                                                      "inference": {"inference.det": sec}})

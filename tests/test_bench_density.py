"""flowpipe bench --density: the most streams whose slowest stream holds a rate, and the steps that found it."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from flowpipe.cli import main
from flowpipe.cli.bench import density

ROOT = Path(__file__).resolve().parent.parent


def replay(steps: list[dict[str, Any]], start: int, cap: int) -> list[int]:
    """The counts the search must try, given whether each step held: doubling from ``start`` while it holds (up
    to ``cap``), then halving the gap between the last that held and the first that fell."""
    held = iter(s["held"] for s in steps)
    tried, lo, hi, n = [start], 0, start, start
    while next(held):
        lo = n
        if n >= cap:
            hi = cap + 1
            break
        n = min(2 * n, cap)
        hi = n
        tried.append(n)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        tried.append(mid)
        if next(held):
            lo = mid
        else:
            hi = mid
    return tried


def check(d: dict[str, Any], fps: float, start: int, cap: int) -> None:
    """What any search's answer holds to, whatever the machine measured."""
    assert d["fps"] == fps and d["max_streams"] == cap
    steps = d["steps"]
    assert all(set(s) >= {"streams", "processes", "fps", "slowest", "held"} for s in steps), steps
    for s in steps:  # each step's verdict is its own slowest stream against the rate
        assert s["held"] == (s["slowest"] is not None and s["slowest"] >= fps), s
    assert [s["streams"] for s in steps] == replay(steps, start, cap)
    held = {s["streams"] for s in steps if s["held"]}
    tried = {s["streams"] for s in steps}
    assert d["streams"] == max(held, default=0)
    n = d["streams"]
    assert n == cap or (n + 1 in tried and n + 1 not in held), steps


def fake_run(rates: dict[int, float]) -> Any:
    """A bench report at n streams whose slowest stream makes rates[n] (the others twice that)."""
    def run(n: int) -> dict[str, Any]:
        per = {f"cam-{i}": rates[n] * (1 if i == n - 1 else 2) for i in range(n)}
        return {"streams": n, "processes": 1, "exit": 0, "error": None, "fps": sum(per.values()),
                "per_stream_fps": per, "per_stream_fps_together": per}
    return run


@pytest.mark.parametrize(("start", "cap", "holds_up_to", "tried", "found"), [
    (1, 64, 6, [1, 2, 4, 8, 6, 7], 6),  # doubling, then bisection between 4 (held) and 8 (fell)
    (1, 64, 8, [1, 2, 4, 8, 16, 12, 10, 9], 8),
    (1, 5, 100, [1, 2, 4, 5], 5),  # the cap held: nothing above it is tried
    (1, 64, 0, [1], 0),  # not one stream holds the rate
    (4, 64, 2, [4, 2, 3], 2),  # a start that falls is bisected down from
    (3, 64, 3, [3, 6, 4], 3),
])
def test_density_doubles_while_the_slowest_holds_then_bisects(start, cap, holds_up_to, tried, found) -> None:
    rates = {n: 30.0 if n <= holds_up_to else 20.0 for n in range(1, 129)}
    d, report = density(fake_run(rates), 25.0, start=start, cap=cap)
    assert [s["streams"] for s in d["steps"]] == tried and d["streams"] == found
    check(d, 25.0, start, cap)
    assert (report or {}).get("streams") == (found or None)


def test_density_counts_a_stream_without_a_rate_as_fallen() -> None:
    """A stream starved through the whole run leaves no rate (or none at all): the step did not hold."""
    def run(n: int) -> dict[str, Any]:
        per: dict[str, float | None] = {f"cam-{i}": 40.0 for i in range(min(n, 2))}
        if n == 2:
            per["cam-1"] = None
        return {"streams": n, "processes": 1, "exit": 0, "error": None, "fps": 80.0, "per_stream_fps": per,
                "per_stream_fps_together": per}
    d, _ = density(run, 25.0)
    assert [(s["streams"], s["held"]) for s in d["steps"]] == [(1, True), (2, False)] and d["streams"] == 1


def test_bench_density_runs_the_search_and_reports_each_step(tmp_path, capsys) -> None:
    """A real search over the pass-through graph: whatever this machine makes, each step's verdict is its own
    slowest stream against --fps, the counts follow doubling then bisection, and the answer is the most that held
    (the next count tried and fell, or the cap)."""
    g = str(ROOT / "graphs" / "passthrough.yaml")
    out = tmp_path / "density.json"
    assert main(["bench", g, "--density", "--fps", "1000", "--max-streams", "6", "--frames", "300", "--warmup", "20",
                 "--set", "frames=1000", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    d = r["density"]
    check(d, 1000.0, 1, 6)
    assert d["streams"] == 0 or r["streams"] == d["streams"]  # the report is the run at the count that held
    steps = " ".join(f"{s['streams']} {'ok' if s['held'] else 'no'}" for s in d["steps"])
    n = d["streams"]
    what = {0: "no stream held", 1: "1 stream held"}.get(n, f"{n} streams held")
    cap = ", the most tried (--max-streams 6)" if n == 6 else ""
    assert capsys.readouterr().out.strip().splitlines()[-1] == f"density: {what} >= 1000 fps{cap} (steps: {steps})"

    # a rate no stream makes: one step, none held, and the JSON says so on stdout
    assert main(["bench", g, "--density", "--fps", "1e12", "--frames", "100", "--warmup", "10", "--json", "-"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["streams"] == 0 and [s["streams"] for s in r["density"]["steps"]] == [1]
    assert r["density"]["streams"] == 0 and not r["density"]["steps"][0]["held"]

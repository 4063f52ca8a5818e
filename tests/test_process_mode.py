"""isolation: process — frames cross by handle, writes land in the same pages, crashes are reported."""
from __future__ import annotations

import os

import pytest

from flowpipe.testing import collected, run_yaml

pytestmark = pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="fd passing of memfd is Linux-only")


def test_worker_writes_in_place_and_nothing_is_copied(monkeypatch) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)  # a run started from Python, not from the command
    res = run_yaml("""
        plugins: [fp_testnodes]
        nodes:
          - {id: src, type: synthetic_source, config: {count: 40, width: 640, height: 360}}
          - {id: w, type: test_crash, isolation: process, inputs: src.frame}
          - {id: s, type: collect, config: {into: proc_ok}, inputs: w.out}
    """)
    assert res.ok, res.error
    assert res.frames == {"in": 40, "out": 40, "dropped": 0, "failed": 0}
    assert res.edges["src->w"]["copies"] == 0 and res.edges["w->s"]["copies"] == 0
    got = collected("proc_ok")
    assert {f.meta["pid"] for f in got} != {os.getpid()} and len({f.meta["pid"] for f in got}) == 1
    # the worker keeps two malloc arenas, as shards and the device owner do (and says so to what it starts)
    assert {f.meta["malloc_arena_max"] for f in got} == {"2"}


def test_worker_sigkill_fails_the_node_naming_the_frame(events) -> None:
    res = run_yaml("""
        plugins: [fp_testnodes]
        nodes:
          - {id: src, type: synthetic_source, config: {count: 50, stream: cam}}
          - {id: w, type: test_crash, config: {crash_on: [12]}, isolation: process, inputs: src.frame}
          - {id: after, type: test_fault, inputs: w.out}
    """)
    assert res.exit_code == 1
    assert "node 'w' (test_crash), stream 'cam', frame 12" in str(res.error)
    assert "died (exit code -9)" in str(res.error)
    f = res.frames
    assert f["in"] == f["out"] + f["dropped"] + f["failed"] and f["failed"] >= 1 and f["out"] >= 12
    assert "close:after" in events  # the rest of the graph shut down cleanly


def test_restart_policy_replaces_the_worker_and_counts_the_lost_frame() -> None:
    res = run_yaml("""
        plugins: [fp_testnodes]
        nodes:
          - {id: src, type: synthetic_source, config: {count: 30}}
          - {id: w, type: test_crash, config: {crash_on: [5, 9]}, isolation: process, on_error: restart,
             restarts: 3, inputs: src.frame}
          - {id: s, type: collect, config: {into: proc_restart}, inputs: w.out}
    """)
    assert res.ok, res.error
    assert res.frames == {"in": 30, "out": 28, "dropped": 0, "failed": 2}
    assert res.nodes["w"]["restarts"] == 2
    assert len({f.meta["pid"] for f in collected("proc_restart")}) == 3

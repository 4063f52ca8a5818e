"""A node's figures take the same memory after a minute and after a month."""
from __future__ import annotations

import numpy as np

from flowpipe.runtime.stats import NodeStats, Window


def test_a_window_keeps_the_newest_values_in_memory_made_once() -> None:
    w = Window(4)
    assert len(w) == 0 and w.values().size == 0
    for v in (1.0, 2.0, 3.0):
        w.append(v)
    assert sorted(w.values()) == [1.0, 2.0, 3.0]
    buffer = w.values().nbytes
    for v in range(4, 1000):
        w.append(float(v))
    assert len(w) == 4 and sorted(w.values()) == [996.0, 997.0, 998.0, 999.0]
    assert w.values().nbytes == buffer + 8  # four values, never more


def test_latency_percentiles_come_from_the_window() -> None:
    st = NodeStats("x")
    for ms in range(1, 101):
        st.latency.append(ms / 1e3)
    st.frames = 100
    got = st.summary(None)["latency_ms"]
    assert got == {f"p{q}": round(float(np.percentile(np.arange(1, 101), q)), 4) for q in (50, 95, 99)}

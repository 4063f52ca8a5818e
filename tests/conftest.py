"""Shared fixtures. Test-only nodes live in fp_testnodes (importable by worker processes)."""
from __future__ import annotations

import fp_testnodes  # noqa: F401  (registers the test-only node types)
import pytest
from fp_testnodes import EVENTS


@pytest.fixture
def events() -> list[str]:
    EVENTS.clear()
    return EVENTS

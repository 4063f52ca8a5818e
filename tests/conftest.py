"""Shared fixtures. Test-only nodes live in fp_testnodes (importable by worker processes)."""
from __future__ import annotations

import os
import sys
import threading

import fp_testnodes  # noqa: F401  (registers the test-only node types)
import pytest
from fp_testnodes import EVENTS

_STATUS = pytest.StashKey[int]()  # pytest's exit status, kept for pytest_unconfigure


@pytest.fixture
def events() -> list[str]:
    EVENTS.clear()
    return EVENTS


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config.stash[_STATUS] = int(exitstatus)


def pytest_unconfigure(config: pytest.Config) -> None:
    """A run a failed test left going (its thread waiting for a stop that never came) must not keep the
    suite from ending: the threads still running are named, and the process exits with pytest's status."""
    left = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    if not left:
        return
    print(f"\nthreads left running after the tests: {', '.join(t.name for t in left)}; exiting without them",
          file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(config.stash.get(_STATUS, 1))


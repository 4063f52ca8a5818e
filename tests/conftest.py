"""Shared fixtures. Test-only nodes live in fp_testnodes (importable by worker processes)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time

import fp_testnodes  # noqa: F401  (registers the test-only node types)
import pytest
from fp_testnodes import EVENTS

_STATUS = pytest.StashKey[int]()  # pytest's exit status, kept for pytest_unconfigure
EXIT_GRACE_S = 60.0  # how long the interpreter may take to exit after the tests


@pytest.fixture
def events() -> list[str]:
    EVENTS.clear()
    return EVENTS


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest tests (marked ``slow``) first, in their order: over several workers (pytest-xdist) none of
    them is left to run alone at the end."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config.stash[_STATUS] = int(exitstatus)


def pytest_unconfigure(config: pytest.Config) -> None:
    """A run a failed test left going (its thread waiting for a stop that never came) must not keep the
    suite from ending: if the interpreter has not exited a minute after the tests, the threads it still waits
    for are named and the process exits with pytest's status, or 1 where the tests passed (the hang is a bug)."""
    status = config.stash.get(_STATUS, 1)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return  # a worker (pytest-xdist) waits for the others' tests and is ended by the controller, which watches

    def watch() -> None:
        time.sleep(EXIT_GRACE_S)
        left = [t.name for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
        print(f"\nthreads left running {EXIT_GRACE_S:.0f} s after the tests: {', '.join(left)}; exiting without "
              "them", file=sys.stderr, flush=True)
        os._exit(status or 1)

    threading.Thread(target=watch, name="exit-watch", daemon=True).start()


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MB tmpfs (root only: skipped where it cannot be mounted)."""
    where = tmp_path / "small"
    where.mkdir()
    mount, umount = shutil.which("mount"), shutil.which("umount")
    if mount is None or umount is None:
        pytest.skip("no mount here")
    r = subprocess.run([mount, "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(where)], capture_output=True, text=True,
                       check=False)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    yield where
    subprocess.run([umount, "-l", str(where)], check=False)

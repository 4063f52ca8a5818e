"""The supervisor's handle on the device owner's process (``OwnerProcess``: start, watch, restart through a
standby, close), and the process's entry point (``owner_main``)."""
from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import os
import pickle
import signal
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from ...accel import devices
from ...graph import NodeSpec
from ...registry import import_plugin
from ..messages import (
    Close,
    OwnerClosed,
    OwnerCrashed,
    OwnerListening,
    OwnerTakeOver,
)
from ..settings import environment_for_children, malloc_arenas_limited, no_interrupts_inherited
from .client import OwnerLink
from .server import serve

log = logging.getLogger("flowpipe.owner")


def owner_main(control: Connection, path: str, payload: bytes, plugins: list[str], plugin_dir: str | None,
               standby: bool = False) -> None:
    """The owner process: its nodes' plugins imported, then it serves; a ``standby`` waits first, ready, for the
    supervisor's word to take over (``OwnerTakeOver``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor decides what an interrupt means
    malloc_arenas_limited()
    for mod in plugins:
        import_plugin(mod, plugin_dir)
    specs, leads = pickle.loads(payload)  # noqa: S301 - from the supervisor that started us
    if standby:  # ready to take over: the nodes' modules imported, the devices listed, nothing opened
        for s in specs:
            s.make()
        with contextlib.suppress(Exception):  # no OpenVINO here: the nodes say so when they open
            devices().openvino.available()
        try:
            msg = control.recv()
        except (EOFError, OSError):  # the supervisor closed us, or is gone
            return
        if not isinstance(msg, OwnerTakeOver):
            return
    serve(control, path, specs, leads)


class OwnerStartStoppedError(Exception):
    """The run was asked to stop while the device owner started: nothing ran yet, and nothing is left to drain."""


class OwnerProcess:
    """The supervisor's handle on the device owner: start, watch, restart, close. While a restart is left
    (``restarts_allowed``), a standby owner waits to take over."""

    def __init__(self, specs: list[NodeSpec], plugins: list[str], plugin_dir: str | None, path: str,
                 leads: dict[str, NodeSpec] | None = None, restarts_allowed: int = 0,
                 stopping: Callable[[], bool] | None = None):
        self.specs, self.plugins, self.plugin_dir, self.path = specs, plugins, plugin_dir, path
        #: the run was asked to stop (an interrupt): a start still under way is given up (``OwnerStartStoppedError``)
        self.stopping = stopping or (lambda: False)
        self.leads = leads or {}  # per owned node, the node that may run ahead of it here (``owner_side``)
        self.restarts_allowed = restarts_allowed
        self.restarts = 0
        self.pids: list[int] = []
        self.starts_s: list[float] = []  # each start: from the launch (or takeover) to its socket listening
        self.took_over: list[bool] = []  # each start: by a standby that was ready
        self.final: dict[str, Any] | None = None
        self.error: str | None = None
        self.link: OwnerLink | None = None
        self.proc: Any = None
        self.conn: Connection | None = None
        self._spare: tuple[Any, Connection] | None = None
        try:
            self._start()
        except BaseException:
            self.close()  # a process that did start, or a standby, does not outlive the failure
            raise

    def _launch(self, standby: bool) -> tuple[Any, Connection]:
        ctx = mp.get_context("spawn")
        environment_for_children()
        conn, child = ctx.Pipe(duplex=True)
        proc = ctx.Process(target=owner_main, name="flowpipe:device-owner" + (" (standby)" if standby else ""),
                           daemon=True, args=(child, self.path, pickle.dumps((self.specs, self.leads)),
                                              self.plugins, self.plugin_dir, standby))
        try:
            with no_interrupts_inherited():
                proc.start()
        finally:
            child.close()
        return proc, conn

    def _take_over(self) -> bool:
        """The standby becomes the owner, if it is there to."""
        spare, self._spare = self._spare, None
        if spare is None:
            return False
        try:
            if not spare[0].is_alive():
                raise OSError("the standby owner is gone")
            spare[1].send(OwnerTakeOver())
        except OSError:
            _end(*spare)
            return False
        self.proc, self.conn = spare
        return True

    def _first_word(self) -> Any:
        assert self.conn is not None
        deadline = time.monotonic() + 120
        while not self.conn.poll(0.1):  # a start (a model compiling) is given up at once when the run stops
            if self.stopping():
                raise OwnerStartStoppedError("the run was stopped while the device owner started")
            if time.monotonic() > deadline:
                raise RuntimeError("the device owner did not start within 120 s")
        try:
            return self.conn.recv()
        except EOFError:
            raise RuntimeError(f"the device owner exited while starting (exit code {self.proc.exitcode})") from None

    def _start(self) -> None:
        t0 = time.monotonic()
        took_over = self._take_over()
        if not took_over:
            self.proc, self.conn = self._launch(standby=False)
        try:
            msg = self._first_word()
        except RuntimeError:
            if not took_over:
                raise
            assert self.conn is not None
            _end(self.proc, self.conn)  # the standby failed to take over: a new process instead
            took_over = False
            self.proc, self.conn = self._launch(standby=False)
            msg = self._first_word()
        match msg:
            case OwnerListening(pid, placements):
                self.pids.append(pid)
                self.link = OwnerLink(self.path, placements)
                self.starts_s.append(round(time.monotonic() - t0, 3))
                self.took_over.append(took_over)
                if self.restarts < self.restarts_allowed:  # the next one: it imports while this one serves
                    try:
                        self._spare = self._launch(standby=True)
                    except Exception as e:  # noqa: BLE001 - no standby: a restart starts a new process
                        log.warning("no standby device owner: %s", e)
            case OwnerCrashed(error):
                raise error.exception("the device owner failed to start: ")
            case _:
                raise RuntimeError(f"the device owner failed to start: {msg!r}")

    @property
    def pid(self) -> int | None:
        return self.pids[-1] if self.pids else None

    @property
    def standby_pid(self) -> int | None:
        """The standby owner's process, while one waits."""
        return self._spare[0].pid if self._spare is not None else None

    def check(self) -> str | None:
        """Restart a dead owner (returns what happened, for the log), or None when it is alive."""
        if self.proc.is_alive():
            return None
        code = self.proc.exitcode
        how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        if self.restarts >= self.restarts_allowed:
            self.error = f"device owner (pid {self.pid}) died ({how}); no restarts left"
            return self.error
        self.restarts += 1
        assert self.conn is not None
        self.conn.close()
        try:
            self._start()
        except (RuntimeError, OSError) as e:
            self.error = f"device owner died ({how}) and did not restart: {e}"
            return self.error
        return f"device owner died ({how}); restarted as pid {self.pid} (restart {self.restarts})"

    def close(self) -> None:
        if self._spare is not None:  # the standby ends when its pipe closes
            _end(*self._spare)
            self._spare = None
        if self.proc is None or self.conn is None:
            return
        if self.proc.is_alive():
            try:
                self.conn.send(Close())
                if self.conn.poll(60):
                    match self.conn.recv():
                        case OwnerClosed(stats):
                            self.final = stats
            except (OSError, EOFError):
                pass
        self.proc.join(timeout=10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(timeout=5)
        self.conn.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


def _end(proc: Any, conn: Connection) -> None:
    """An owner process that is not serving (a standby, or one that failed to take over): its pipe closed,
    it ends (killed if it does not)."""
    conn.close()
    proc.join(timeout=5)
    if proc.is_alive():
        proc.kill()
        proc.join(timeout=5)



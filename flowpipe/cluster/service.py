"""The controller as a named, detached Ray actor, and the calls that reach it from any host.

``submit`` starts a run's controller in the cluster (``NAMESPACE``, named after the run), so the run goes on
when the command that started it ends or loses its connection; Ray restarts a controller that dies, and the
new one takes the run over from the state it keeps in the cluster (``ClusterRun.run``). ``RunClient`` waits
for a run, stops it or asks what it does; ``runs`` lists every run of the cluster for ``flowpipe status``.
"""
from __future__ import annotations

import logging
import pickle
import threading
import time
import warnings
from typing import Any

from ..graph import GraphSpec, NodeSpec
from ..runtime.commands import Command, Forwarding, Route
from ..runtime.live import PartlyRetunedError, retune_specs, template_of
from .agent import FilePart, Span
from .controller import ClusterRun
from .report import ClusterResult
from .state import NAMESPACE, cause_of, connect, drop_state

log = logging.getLogger("flowpipe.cluster")


class Controller:
    """One run's controller (a Ray actor): runs ``ClusterRun`` in a thread and answers while it goes."""

    def __init__(self, name: str, payload: bytes, options: dict[str, Any], detach: bool = False):
        import ray

        spec: GraphSpec = pickle.loads(payload)  # noqa: S301 - from the command that submitted this run
        self.detach = detach  # no command waits for it: ``flowpipe stop`` takes its result and removes it
        with warnings.catch_warnings():  # Ray's property uses a deprecated one of its own inside
            warnings.simplefilter("ignore", DeprecationWarning)
            again = ray.get_runtime_context().was_current_actor_reconstructed
        if not again:
            drop_state(name)  # a first start: state under this name is an ended run's, not this one's
        self.run = ClusterRun(spec, name=name, detached=True, **options)
        self.outcome: ClusterResult | None = None
        self.failure: str | None = None
        self.done = threading.Event()
        threading.Thread(target=self._go, name="flowpipe:controller", daemon=True).start()

    def _go(self) -> None:
        try:
            self.outcome = self.run.run()
        except BaseException as e:
            self.failure = f"controller of run {self.run.name}: {type(e).__name__}: {e}"
            log.exception("controller failed")
        finally:
            self.done.set()

    def result(self, timeout: float = 1.0) -> ClusterResult | str | None:
        """The run's result once it ended (a string when the controller itself failed), else None."""
        if not self.done.wait(timeout):
            return None
        return self.outcome if self.outcome is not None else self.failure

    def status(self) -> dict[str, Any]:
        return self.run.status()

    def stop(self, now: bool = False) -> None:
        self.run.abort() if now else self.run.interrupt()

    def command(self, command: Command) -> Any:
        """A command on the run's streams (``runtime/commands.py``), applied to its live control, which sends
        it to the host agents its route names."""
        return command.apply(self.run.live)

    def file(self, host: str, path: str, span: Span = None) -> FilePart | None:
        return self.run.live.file(host, path, span)

    def pid(self) -> int:
        import os

        return os.getpid()

    def detached(self) -> bool:
        return self.detach

    def forget(self) -> None:
        """The run's kept state dropped (its client has its result; the actor is killed next)."""
        drop_state(self.run.name)


class RunClient:
    """A run of the cluster, reached by name from any host."""

    def __init__(self, name: str, handle: Any):
        self.name, self.handle = name, handle
        self._signals = 0

    def call(self, method: str, *args: Any, timeout: float = 60.0, **kw: Any) -> Any:
        """One call to the controller, waiting out a restart of it (Ray brings it back, and it takes over)."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        deadline = time.monotonic() + timeout
        while True:
            try:
                return ray.get(getattr(self.handle, method).remote(*args, **kw), timeout=timeout)
            except (RayActorError, GetTimeoutError):  # ActorUnavailableError and ActorDiedError are both
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def wait(self, progress: Any = None, poll_s: float = 0.5, remove: bool = True) -> ClusterResult:
        """Waits for the run's end (reporting frames by fate to ``progress``); with ``remove``, the run and
        its kept state are gone after. Signals (``interrupt``) are passed on between polls."""
        told = 0
        while True:
            if self._signals > told:
                told = self._signals
                self.call("stop", now=told > 1)
            got = self.call("result", poll_s)
            if got is not None and remove:
                self.remove()
            if isinstance(got, ClusterResult):
                return got
            if isinstance(got, str):
                raise RuntimeError(got)
            if progress is not None:
                progress(self.status()["frames"])

    def status(self) -> dict[str, Any]:
        return self.call("status")  # type: ignore[no-any-return]

    def placed(self, timeout: float = 120.0, poll_s: float = 0.2) -> dict[str, Any]:
        """The run's status once its streams are placed and its hosts have opened their graphs, or once it
        has ended trying (``error`` says why): what a detached run is left running on."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.status()
            if got["phase"] != "placing" or time.monotonic() > deadline:
                return got
            time.sleep(poll_s)

    def stop(self, now: bool = False) -> None:
        self.call("stop", now=now)

    def interrupt(self) -> None:
        """For ``interrupts_stop``: the first signal drains the run on every host, a second stops it now."""
        self._signals += 1

    def remove(self) -> None:
        """The controller and its kept state gone (its agents were stopped when the run ended)."""
        import ray

        self.call("forget", timeout=10.0)
        ray.kill(self.handle, no_restart=True)


def submit(spec: GraphSpec, address: str | None, name: str, detach: bool = False, **options: Any) -> RunClient:
    """Starts run ``name`` of ``spec`` in the cluster at ``address``: its controller is a detached actor on
    this host (elsewhere when this host is gone), restarted by Ray if it dies."""
    ray = connect(address)
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    try:
        ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        pass
    else:
        raise ValueError(f"a run named {name!r} is already in the cluster (flowpipe status --cluster)")
    here = ray.get_runtime_context().get_node_id()
    handle = ray.remote(Controller).options(
        name=name, namespace=NAMESPACE, lifetime="detached", max_restarts=-1, max_concurrency=8, num_cpus=0,
        scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=True),
    ).remote(name, pickle.dumps(spec), options, detach)
    return RunClient(name, handle)


def attach(address: str | None, name: str) -> RunClient:
    ray = connect(address)
    try:
        return RunClient(name, ray.get_actor(name, namespace=NAMESPACE))
    except ValueError:
        raise ValueError(f"no run named {name!r} in the cluster at {address} (flowpipe status --cluster)") from None


def runs(address: str | None) -> list[dict[str, Any]]:
    """Every flowpipe run of the cluster, as its controller describes it (a controller that does not answer
    within a few seconds: listed as such)."""
    ray = connect(address)
    out = []
    for found in ray.util.list_named_actors(all_namespaces=True):
        if found["namespace"] != NAMESPACE or "/" in found["name"]:
            continue  # host agents are named RUN/agentN
        client = RunClient(found["name"], ray.get_actor(found["name"], namespace=NAMESPACE))
        try:
            out.append(client.call("status", timeout=5.0))
        except Exception as e:  # noqa: BLE001
            out.append({"name": found["name"], "phase": f"not answering ({type(e).__name__})", "hosts": [],
                        "streams": {}, "frames": {}})
    return out




class ClusterStreams(Forwarding):
    """A cluster run's streams as ``flowpipe serve`` reaches them (the interface of ``Runner.live``): each
    command goes to its controller, which sends it on to the hosts (``ClusterRun.live``)."""

    def __init__(self, client: RunClient, spec: GraphSpec):
        self.client, self.spec = client, spec
        self.closed = False  # the run ended: its controller is gone

    def template(self, like: str | None) -> NodeSpec:
        return template_of(self.spec, like)

    def _ask(self, method: str, *args: Any) -> Any:
        from ray.exceptions import RayTaskError

        try:
            return self.client.call(method, *args)
        except RayTaskError as e:  # the controller's answer: the same error here
            raise cause_of(e) from None

    def forward(self, command: Command) -> Any:
        """``command`` to the controller; once the run has ended, what no place answers (no picture, no
        streams, no events) for a question about the streams."""
        if self.closed and command.route in (Route.HOLDER, Route.EACH):
            return command.merge([])
        return self._ask("command", command)

    def file(self, host: str, path: str, span: Span = None) -> FilePart | None:
        """An event's snapshot or clip (``span`` of it: ``HostAgent.file``), read on ``host`` (the address its
        events name) while the run goes."""
        return None if self.closed else self._ask("file", host, path, span)  # type: ignore[no-any-return]

    def retune(self, changes: dict[str, dict[str, Any]]) -> None:
        """Nodes' configs changed on every host, and for hosts that take over a lost one's streams; this copy of
        the graph (what new streams copy) changes with them."""
        if self.closed:
            raise RuntimeError("the run has ended")
        configs = retune_specs(self.spec, changes)
        partly: PartlyRetunedError | None = None
        try:
            super().retune(changes)
        except PartlyRetunedError as e:  # the run's graph has it: so does this copy
            partly = e
        self.spec.configure(configs)
        if partly is not None:
            raise partly


class ClusterInstance:
    """A run on the cluster as an executor (``flowpipe.runtime.executor``): ``run()`` waits for its result,
    ``stop()`` drains it, ``live`` adds and removes streams."""

    def __init__(self, spec: GraphSpec, address: str | None, name: str, max_frames: int | None = None):
        self.spec = spec
        self.client = submit(spec, address, name, max_frames=max_frames)
        self.live = ClusterStreams(self.client, spec)
        self.done = False
        self.interrupted = False
        self.started_at = time.time()
        self.pids: list[int] = []  # its processes are on the cluster's hosts
        self._last: dict[str, Any] = {"in": 0, "out": 0, "dropped": 0, "failed": 0}
        self._streams: dict[str, int] = {}

    def interrupt(self) -> None:
        self.interrupted = True
        self.client.interrupt()

    def abort(self) -> None:
        self.interrupted = True
        self.client.stop(now=True)

    @property
    def per_stream(self) -> dict[str, int]:
        if not self.done:
            streams = self.client.call("status").get("streams") or {}
            self._streams = {s: row["frames"] for s, row in streams.items()}
        return dict(self._streams)

    @property
    def running(self) -> bool:
        return not self.done and self.client.call("status")["phase"] == "running"

    def snapshot(self) -> dict[str, Any]:
        if not self.done:
            self._last = self.client.call("status")["frames"]
        return dict(self._last)

    def run(self) -> ClusterResult:
        try:
            result = self.client.wait()
            self._last = dict(result.frames)
            return result
        finally:
            self.done = self.live.closed = True

    def stop(self) -> None:
        self.client.stop()


__all__ = ["ClusterInstance", "ClusterStreams", "Controller", "RunClient", "attach", "runs", "submit"]

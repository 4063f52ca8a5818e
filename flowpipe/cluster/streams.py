"""A cluster run's live control: commands (``runtime/commands.py``) sent to its host agents, each applied there
to the host's own run (``HostAgent.command``). A stream added while the run goes is placed on a host with room
for it, in an agent of its own (its resources reserved in Ray's accounting); a change of configs goes to every
host at once, and into the graph agents started later are given."""
from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any

from ..graph import NodeSpec
from ..runtime.commands import Add, Answer, Command, OnStream, Retune, Routing
from ..runtime.live import PartlyRetunedError, retune_specs, template_of
from .agent import FilePart, Span
from .fleet import Fleet
from .placement import PlacementError, StreamNeed, place
from .state import AgentRecord, RunState, cause_of, hosts_of

log = logging.getLogger("flowpipe.cluster")
RETUNE_TIMEOUT_S = 75.0  # a host agent takes a change of configs within this (its processes' 60 s and more), or
# is named as not having it


class HostStreams(Routing):
    """The streams of a run over hosts, as ``LiveControl`` (``ClusterRun.live``): each command goes to the
    host agents its route names."""

    def __init__(self, state: RunState, fleet: Fleet):
        self.state, self.fleet = state, fleet

    def template(self, like: str | None) -> NodeSpec:
        return template_of(self.state.spec, like)

    def to_new(self, command: Add) -> None:
        self.place(command)

    def place(self, command: Add, start: int = 0, generation: int = 0, without: str | None = None) -> None:
        """Places a new stream like source ``command.like`` on a host with room for it and starts it there, in
        an agent of its own. A stream of a lost host is added again the same way (``start``: its first frame
        there; ``without``: the host lost)."""
        if not self.state.placing.acquire(timeout=30):
            raise RuntimeError("streams of a lost host are being placed again: try again")
        try:
            self._place(command, start, generation, without)
        finally:
            self.state.placing.release()

    def _place(self, command: Add, start: int, generation: int, without: str | None) -> None:
        st, stream = self.state, command.stream
        if st.phase != "running" or st.stop:
            raise RuntimeError("the run is not running")
        if self._holder(stream) is not None or any(n.id == stream for n in st.spec.nodes) or \
                any(s.stream == stream for s in st.spec.sources()):
            raise ValueError(f"a stream or node named {stream!r} is already in the graph")
        like = template_of(st.spec, command.like).id
        need = st.added_need(stream)
        hosts = {h.host_id: h for h in hosts_of(st.ray) if h.host_id != without}
        needs = {n.stream: n for n in st.needs()}
        for other in st.running():
            if other.host_id in hosts:
                for s in other.sources:
                    hosts[other.host_id].take(needs[s])
                for s in other.added:
                    hosts[other.host_id].take(StreamNeed(s, need.resources, need.labels))
        try:
            where = place([need], list(hosts.values()))
        except PlacementError as e:
            raise ValueError(str(e)) from None
        agent = self.fleet.agent(where[stream], [], need.resources, {stream: start}, generation, None)
        st.ray.get(agent.handle.begin.remote(agent.info["opened"]))
        from ray.exceptions import RayTaskError

        try:
            st.ray.get(agent.handle.command.remote(replace(command, like=like)))
        except RayTaskError as e:  # the stream's own error (a bad setting, a camera that does not open)
            agent.handle.stop.remote(now=True)
            raise cause_of(e) from None
        agent.added.append(stream)
        agent.start[stream] = start
        agent.recipes[stream] = {"like": like, "config": command.config}
        st.save()

    def again(self, a: AgentRecord, start: dict[str, int]) -> None:
        """The streams added to lost agent ``a``, each placed again as it was added, after its last frame
        (``start``: by stream)."""
        for s in (s for s in a.added if s not in a.removed):
            t0, noticed = time.perf_counter(), time.time()
            recipe = a.recipes.get(s, {})
            moved: dict[str, Any] = {"host": a.address, "streams": [s], "resume_at": {s: start[s]}, "why": "lost",
                                     "added": True, "noticed_at": round(noticed, 3), "replaced_in_s": None}
            try:
                self.place(Add(s, recipe.get("like"), recipe.get("config")), start=start[s],
                           generation=a.generation + 1, without=a.host_id)
                moved["replaced_in_s"] = round(time.perf_counter() - t0, 3)
            except Exception as e:  # noqa: BLE001 - the others go on
                log.error("host %s: stream %s added at run time not placed again: %s", a.address, s, e)
                moved["error"] = f"{type(e).__name__}: {e}"
            self.state.replacements.append(moved)

    def to_added(self, command: OnStream) -> Any:
        """The agent the stream was added to answers; it had that stream alone, and ends (its account kept)."""
        st = self.state
        with st.placing:  # (not placed again by a host lost while it drains)
            a = next((a for a in st.running() if command.stream in a.added and command.stream not in a.removed),
                     None)
            if a is None:
                return command.merge([])
            a.removed.append(command.stream)
        value = st.ray.get(a.handle.command.remote(command))
        a.handle.stop.remote(now=False)
        return command.merge([Answer(value, {"host": a.address})])

    def _holder(self, stream: str) -> AgentRecord | None:
        """The agent running ``stream`` now, or None."""
        return next((a for a in self.state.running() if a.holds(stream)), None)

    def to_holder(self, command: OnStream) -> Any:
        """The host running the stream answers."""
        a = self._holder(command.stream)
        if a is None:
            return command.merge([])
        return command.merge([Answer(self.state.ray.get(a.handle.command.remote(command)), {"host": a.address})])

    def to_each(self, command: Command) -> Any:
        """Every running host answers, at once."""
        live = self.state.running()
        got = self.state.ray.get([a.handle.command.remote(command) for a in live])
        return command.merge([Answer(value, {"host": a.address}) for a, value in zip(live, got)])

    def to_all(self, command: Retune) -> None:
        """Nodes' configs changed on every host (``LiveControl.retune``), and in the graph agents started from
        now on get (a lost host's streams placed again, a rebalance). Hosts are asked at once, outside the
        placing lock (a lost host is placed again meanwhile); if none took it and one refused, every one is as
        it was; if some took it, the change stands, and the hosts that did not are named
        (``PartlyRetunedError``)."""
        st, changes = self.state, command.changes
        if st.phase != "running":
            raise RuntimeError("the run is not running")
        if not st.placing.acquire(timeout=30):
            raise RuntimeError("a lost host's streams are being placed again; try again")
        try:
            new = retune_specs(st.spec, changes)
            old = {nid: st.spec.node(nid).config for nid in new}
            kept = {nid: dict(f) for nid, f in st.retuned.items()}
            st.configure(new)
            for nid, fields in changes.items():
                st.retuned.setdefault(nid, {}).update(fields)
            st.save()  # a controller that takes over has it, whatever the hosts answer
            live = [a for a in st.running() if a.handle is not None]
        finally:
            st.placing.release()
        took, refused, missed = self._ask_all(live, command)
        if not took and (refused or missed):
            with st.placing:
                st.configure(old)
                st.retuned = kept
                st.save()
            raise refused[0] if refused else RuntimeError(f"no host took the change: {'; '.join(missed)}")
        if missed or refused:
            why = "; ".join(missed + [str(e) for e in refused])
            raise PartlyRetunedError(f"{why} (hosts {', '.join(took)} and those started from now on have the change)")

    def _ask_all(self, live: list[AgentRecord], command: Retune) -> tuple[list[str], list[Exception], list[str]]:
        """``command`` on every agent in ``live`` at once, within one deadline: the hosts that took it (all or,
        over several processes, some of theirs), the refusals, and the others (not answering, failing) by
        name; a host lost or draining meanwhile is passed over (its streams start from the graph as changed)."""
        ray = self.state.ray
        refs = {a.handle.command.remote(command): a for a in live}
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=RETUNE_TIMEOUT_S)
        took: list[str] = []
        refused: list[Exception] = []
        missed = [f"host {refs[r].address}: no answer in {RETUNE_TIMEOUT_S:.0f}s" for r in refs if r not in ready]
        for ref in ready:
            a = refs[ref]
            try:
                ray.get(ref)
                took.append(a.address)
            except ray.exceptions.RayActorError:
                continue
            except Exception as e:  # noqa: BLE001 - sorted below
                err = cause_of(e)
                if isinstance(err, PartlyRetunedError):
                    took.append(a.address)
                    missed.append(f"host {a.address}: {err}")
                elif isinstance(err, ValueError):
                    refused.append(err)
                elif "not running" not in str(err):
                    missed.append(f"host {a.address}: {err}")
        return took, refused, missed

    def file(self, host: str, path: str, span: Span = None) -> FilePart | None:
        """An event's snapshot or clip (``span`` of it: ``HostAgent.file``) from the running host agent at
        ``host`` that raised it (None: no such agent, or no event of its names ``path``)."""
        for a in self.state.running():
            if a.address == host:
                try:
                    got = self.state.ray.get(a.handle.file.remote(path, span))
                except Exception:  # noqa: BLE001, S112 - an agent going away: it has no file to give
                    continue
                if got is not None:
                    return got  # type: ignore[no-any-return]
        return None


__all__ = ["RETUNE_TIMEOUT_S", "HostStreams"]

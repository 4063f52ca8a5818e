"""Graph templates and their running instances, for ``flowpipe serve``.

A template is a graph file in one of the served folders; an instance is a template started with
parameters, running in this process (one ``Runner`` in a thread) until it is stopped or its streams end.
Streams are added to and removed from a running instance (``Runner.live``). Every path a graph writes is
confined to the instance's folder under the output directory, but for what a stream leaves for its next run
(an MQTT outbox), kept per template and parameters under ``state/``.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import secrets
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import GraphError
from ..graph import GraphSpec, NodeSpec, load_graph, parse_yaml
from ..graph.load import parameter_uses
from ..node import set_setting, setting
from ..registry import lookup
from ..runtime import journal
from ..runtime.context import Resume, Share
from ..runtime.executor import Executor, executor
from ..runtime.journal import Journal
from ..runtime.live import PartlyRetunedError
from ..runtime.shards import resolve_processes, tail_records
from ..sample import SAMPLES
from .events import EventIndex
from .state import read as read_state
from .state import resolved, unsaid
from .state import write as write_state

SAID = ("flowpipe serve writes no secret; a password given as {FLOWPIPE_CAM_NAME}, a variable of the server's "
        "environment, is restored")
PREVIEW = "_preview"  # the node an instance adds that keeps each stream's newest picture for the console
URI_SCHEMES = ("rtsp://", "rtsps://", "http://", "https://", "srt://", "udp://", "tcp://")


class RequestError(ValueError):
    """What the client asked cannot be done: a one-line reason (HTTP 4xx)."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def graph_error(e: GraphError, template: Template) -> str:
    """The first problems, the template named by its file's name (a client never learns the server's paths)."""
    return for_client("; ".join(str(d) for d in e.diagnostics[:3]), template)


def for_client(text: str, template: Template) -> str:
    """``text`` (an error) with the template's path on the server replaced by its file's name."""
    for shown in {str(template.path.resolve()), str(template.path)}:
        text = text.replace(shown, template.path.name)
    return text


log = logging.getLogger("flowpipe.serve")
JOURNAL = "events.jsonl"  # an instance's event journal, in its folder (``GraphSpec.journal``)


@dataclass
class Template:
    name: str
    path: Path
    description: str
    params: dict[str, Any]
    sources: list[str]
    uses: dict[str, list[tuple[str | None, str]]] = field(default_factory=dict)  # parameter -> where it lands
    text: str = ""  # the file as read (an instance keeps it: the file may change or go while it runs)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "parameters": self.params,
                "sources": self.sources}


def find_templates(folders: list[Path]) -> dict[str, Template]:
    """Every valid graph file (``*.yaml``) in ``folders``, by file stem; the first folder wins a name."""
    out: dict[str, Template] = {}
    for folder in folders:
        for path in sorted(folder.glob("*.yaml")):
            if path.stem in out:
                continue
            if path.stem == "status":  # /pipelines/status lists the instances
                log.warning("%s: a template may not be named 'status' (the path that lists instances); not served",
                            path)
                continue
            try:
                spec = load_graph(str(path))
            except GraphError:
                continue  # not a graph flowpipe can run here (shown by flowpipe validate)
            text = path.read_text(encoding="utf-8")
            out[path.stem] = Template(path.stem, path, _description(text), dict(spec.params),
                                      [s.id for s in spec.templates() + spec.sources()],
                                      parameter_uses(parse_yaml(text, str(path))), text)
    return out


def _description(text: str, most: int = 400) -> str:
    """A graph file's description: its opening comment's first paragraph, whole sentences up to ``most``
    characters (the first sentence whole, however long)."""
    para = []
    for ln in text.splitlines():
        if not ln.startswith("#") or not ln[1:].strip():
            break
        para.append(ln[1:].strip())
    words = " ".join(para)
    ends = [i + 1 for i, ch in enumerate(words) if ch == "." and (i + 1 == len(words) or words[i + 1] == " ")]
    fit = [i for i in ends if i <= most]
    return words[: (fit[-1] if fit else ends[0] if ends else len(words))].strip()


@dataclass
class Instance:
    """One running graph."""

    id: str
    template: str
    spec: GraphSpec
    runner: Executor
    folder: Path
    source: Template  # the template as it was started (what its parameters are rendered from)
    parameters: dict[str, Any] = field(default_factory=dict)  # every parameter's value now
    own: dict[str, dict[str, Any]] = field(default_factory=dict)  # stream -> the zones and lines it has its own
    added: dict[str, dict[str, Any]] = field(default_factory=dict)  # stream -> the request that added it
    given: dict[str, str] = field(default_factory=dict)  # a URI read with its password, -> the URI as given
    processes: int | str = 1  # as it was asked for
    sources_run: bool = True  # its graph's own sources run (it was started with no streams named)
    generation: int = 0  # how many times a server restarted it (its recordings go to new files each time)
    started_at: float = field(default_factory=time.time)
    ended_at: float | None = None  # when the run returned: a finished instance's elapsed time and rate stand still
    result: Any = None
    thread: threading.Thread | None = None
    stopping: bool = False
    _seen: dict[str, list[tuple[float, int]]] = field(default_factory=dict, init=False, repr=False)
    _status_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _status: dict[str, Any] = field(default_factory=dict, init=False, repr=False)
    _status_at: float = field(default=-1e9, init=False, repr=False)
    retuning: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)  # one change at a time
    # every event seen, by (stream, id, state), as it stood last: a finished run's (its processes gone) stay listed
    _events: dict[tuple[Any, Any, Any], dict[str, Any]] = field(default_factory=dict, init=False, repr=False)
    _events_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _unindexed: list[dict[str, Any]] = field(default_factory=list, init=False, repr=False)  # new or changed since
    _held: dict[tuple[Any, Any, Any], dict[str, Any]] = field(default_factory=dict, init=False, repr=False)
    KEEP_EVENTS = 200  # listed (the console)
    UNINDEXED_MAX = 100_000  # new or changed, waiting for the index (which takes them every second)

    @property
    def state(self) -> str:
        if self.result is None:
            return "STOPPING" if self.stopping else ("RUNNING" if self.runner.running else "STARTING")
        if self.result.error is not None:
            return "ERROR"
        return "ABORTED" if self.stopping else "COMPLETED"

    def stale(self, stream: str | None = None) -> None:
        """The next status is computed afresh (a stream was added or removed); a removed ``stream``'s rate
        is forgotten."""
        with self._status_lock:
            self._status_at = -1e9
            if stream is not None:
                self._seen.pop(stream, None)

    FRESH_S = 0.25  # a status this recent answers every caller: 200 clients polling cost the video nothing

    def status(self, fresh: bool = False) -> dict[str, Any]:
        """What the instance does now (at most ``FRESH_S`` old unless ``fresh``)."""
        with self._status_lock:
            if fresh or self.result is not None or time.monotonic() - self._status_at > self.FRESH_S:
                self._status, self._status_at = self._compute_status(), time.monotonic()
            return self._status

    def _compute_status(self) -> dict[str, Any]:
        r = self.runner
        snap = r.snapshot()
        elapsed = (self.ended_at or time.time()) - self.started_at
        frames = {k: snap[k] for k in ("in", "out", "dropped", "failed")}
        return {"id": self.id, "pipeline": self.template, "state": self.state, "elapsed_s": round(elapsed, 1),
                "frames": frames, "avg_fps": round(frames["out"] / elapsed, 1) if elapsed > 0 else 0.0,
                "streams": self.streams(), "output_dir": str(self.folder),
                "error": for_client(str(self.result.error), self.source)
                if self.result is not None and self.result.error else None}

    def events(self) -> list[dict[str, Any]]:
        """The instance's newest events, oldest first: those its run holds now (each as it stands: a clip named
        in it since), with those seen before and no longer held, as after the run has ended."""
        fresh = self.runner.live.events()
        with self._events_lock:
            held = {}  # what the run holds now, as it stands: the next look tells a change from these
            for e in fresh:
                key = (e.get("stream"), e.get("id"), e.get("state"))
                if self._held.get(key) != e:
                    self._unindexed.append(e)
                    del self._unindexed[:-self.UNINDEXED_MAX]
                held[key] = e
                self._events.pop(key, None)
                self._events[key] = e
            self._held = held
            while len(self._events) > self.KEEP_EVENTS:
                self._events.pop(next(iter(self._events)))
            got = [dict(e) for e in self._events.values()]
        return sorted(got, key=lambda e: e.get("at", 0.0))

    def unindexed(self) -> list[dict[str, Any]]:
        """The events new or changed since the last call (as ``events`` found them): what the event index
        has yet to take."""
        with self._events_lock:
            got, self._unindexed = self._unindexed, []
        return got

    def streams(self) -> list[dict[str, Any]]:
        """Every stream of the instance: its own sources' and those added, with their rate now (0 for one
        that failed, ended or was removed: none of its frames come now)."""
        out = self.runner.live.states()
        for row in out:
            row.pop("added_at")
            row["uri"] = self.given.get(row["uri"], row["uri"])
            live = row["state"] in ("running", "reconnecting")
            row["fps"] = round(self._rate(row["stream"], row["out"]), 1) if live else 0.0
        return out

    def _rate(self, stream: str, out: int) -> float:
        """Frames per second over the last seconds (the rate now, not since the start)."""
        seen = self._seen.setdefault(stream, [])
        now = time.monotonic()
        seen.append((now, out))
        while len(seen) > 2 and now - seen[1][0] > 3.0:
            seen.pop(0)
        (t0, n0) = seen[0]
        return (out - n0) / (now - t0) if now - t0 > 0.2 else 0.0



class Instances:
    """The running graphs of one ``flowpipe serve``: what runs is saved in ``state`` (default
    ``OUTPUT_DIR/instances.json``) at each change, and every event they raise in the event index
    (``OUTPUT_DIR/events.sqlite``; ``events_keep_days``, ``events_keep``: its retention, ``EventIndex``)."""

    INDEX_EVERY_S = 1.0  # how often running instances' new events go into the index

    def __init__(self, folders: list[Path], output_dir: Path, media_dir: Path | None = None,
                 max_instances: int = 16, cluster: str | None = None, state: Path | None = None,
                 events_keep_days: float | None = None, events_keep: int | None = 100_000):
        self.cluster = cluster  # instances run on this Ray cluster (their controller serves their streams)
        self.folders = folders
        self.output_dir = output_dir.resolve()
        self.media_dir = media_dir.resolve() if media_dir else None
        self.max_instances = max_instances
        self.saved_at = (state or self.output_dir / "instances.json").absolute()  # for the next start (``restore``)
        self.templates = find_templates(folders)
        self.instances: dict[str, Instance] = {}
        self._lock = threading.Lock()
        self.closing = False  # the server is going down: what runs stays saved for its next start
        self.events = EventIndex(self.output_dir / "events.sqlite", events_keep_days, events_keep)
        self._indexing_lock = threading.Lock()
        self.index_journals()
        self._indexer: threading.Thread | None = None
        self._unsaved: str | None = None  # why the last save failed (said once until one succeeds)

    def save(self) -> None:
        """Each running instance's template, parameters (as changed since), processes, the streams added to it and
        their own zones and lines, written whole (``state.write``: a file renamed over the last): a host that
        restarts comes back with the same pipelines and cameras (``restore``). A password in a URI is not
        written (``state.unsaid``; the instance or stream says so); a file that cannot be written is said in the
        log, the last one kept."""
        if self.closing:
            return
        with self._lock:
            running = [i for i in self.instances.values() if i.result is None and not i.stopping]
            doc = [_saved(i) for i in running]
            try:
                write_state(self.saved_at, doc)
            except OSError as e:
                if self._unsaved is None:
                    log.error("%s: cannot be written (%s): what runs now is not saved for the next start; the file "
                              "keeps what was saved last", self.saved_at, os.strerror(e.errno) if e.errno else e)
                self._unsaved = str(e)
                return
            if self._unsaved is not None:
                log.info("%s: written again", self.saved_at)
                self._unsaved = None

    def restore(self) -> list[Instance]:
        """The instances the last ``flowpipe serve`` with this state ran (``save``), started again under their ids
        with their parameters, streams and each stream's own zones and lines; one that cannot start is said in
        the log and left out (its template gone, a camera's address no longer allowed, its password not saved).
        A state file that is not one ``save`` wrote raises ``StateError`` (and is left as it is)."""
        doc = read_state(self.saved_at)
        if not doc:
            return []
        back = []
        for saved in doc:
            try:
                if saved.get("unsaved"):
                    raise RequestError(f"its parameter {saved['unsaved'][0]!r} is a URI whose password was not "
                                       f"saved ({SAID})")
                streams, left = [], set()
                for req in saved.get("streams", []):
                    if req.get("unsaved"):
                        log.warning("instance %s (%s): stream %s not restored: its URI's password was not saved "
                                    "(%s)", saved["id"], saved["template"], req.get("id"), SAID)
                        left.add(req.get("id"))
                        continue
                    streams.append(req)
                first = [] if saved.get("sources_run", True) else streams  # named at the start: its own are patterns
                if not saved.get("sources_run", True) and not first:
                    raise RequestError("none of its streams is restored")
                inst = self.start(saved["template"], saved["parameters"], first, saved.get("processes", 1),
                                  iid=saved["id"], generation=int(saved.get("generation", 0)) + 1)
                for req in streams[len(first):]:
                    self.add_stream(inst, req)
                for stream, own in saved.get("own", {}).items():
                    if stream not in left:
                        self.retune(inst, own, stream)
            except (RequestError, KeyError, TypeError, AttributeError) as e:
                log.warning("instance %s (%s) not restored: %s", saved.get("id"), saved.get("template"), e)
                continue
            back.append(inst)
        self.save()
        return back

    def close(self) -> None:
        """The event index closed, once its indexer has ended (the server has stopped its instances)."""
        indexer = self._indexer
        if indexer is not None:
            indexer.join(self.INDEX_EVERY_S * 5)
        self.events.close()

    def folder_of(self, iid: str) -> Path:
        """The folder of instance ``iid``: running, or one whose events the index keeps (its files outlive it)."""
        inst = self.instances.get(iid)
        if inst is not None:
            return inst.folder
        if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", iid) and self.events.knows(iid):
            return self.output_dir / iid
        raise RequestError(f"no instance {iid!r}", 404)

    def index(self, inst: Instance) -> None:
        """``inst``'s events not yet in the index put there: what its run's event journal holds past what was
        read of it, then the changes ``Instance.events`` last found (a node that journals none: one isolated in
        a process of its own, a cluster's hosts)."""
        self._index_journal(inst.id, inst.template, inst.folder, inst.unindexed())

    def _index_journal(self, iid: str, pipeline: str, folder: Path, polled: list[dict[str, Any]]) -> None:
        path = folder / JOURNAL
        with self._indexing_lock:  # (the indexer and a run's end: one reads past the other's offset, in turn)
            try:
                at = self.events.journaled(path)
                if not polled and (not path.exists() or path.stat().st_size <= at):
                    return  # nothing new: neither read nor written, each second
                records, end = journal.read(path, at)
                # what the run held at the last look, then the journal read since: the newer version last
                new = polled + [r for r in records if "state" in r]  # (a server's own line names the pipeline)
                self.events.add(iid, pipeline, folder, new, journal=(path, end) if path.exists() else None)
            except (sqlite3.Error, OSError) as e:
                log.error("%s: event(s) of instance %s not indexed: %s", self.events.path, iid, e)

    def _journal_read(self, inst: Instance) -> None:
        """A run that ended writes no more to its journal: read whole into the index, it goes (so a journal
        grows only while its run lasts; a server killed before this reads it at its next start)."""
        path = inst.folder / JOURNAL
        with self._indexing_lock:
            try:
                if path.exists() and self.events.journaled(path) >= path.stat().st_size:
                    self.events.forget_journal(path)  # (first: a journal there again is read from its start)
                    path.unlink()
            except (sqlite3.Error, OSError) as e:
                log.warning("%s: kept (%s)", path, e)

    def index_journals(self) -> None:
        """At start: what every instance's event journal in the output folder holds past what the index read of
        it (the events a run raised in its last second before the server was killed, whatever ran then)."""
        for path in sorted(self.output_dir.glob(f"*/{JOURNAL}")):
            try:
                if path.stat().st_size <= self.events.journaled(path):
                    continue
                with open(path, "rb") as f:  # its first line, the server's own: which template the instance ran
                    head, _ = journal.read_lines(f.readline())
            except (OSError, sqlite3.Error) as e:  # one that cannot be read keeps no server from starting
                log.error("%s: not read into the event index: %s", path, e)
                continue
            pipeline = next((str(r["pipeline"]) for r in head if "pipeline" in r and "state" not in r), "?")
            self._index_journal(path.parent.name, pipeline, path.parent, [])

    def _watch_events(self) -> None:
        """The indexer runs while any instance does (started with the first)."""
        with self._lock:
            if self._indexer is None:
                self._indexer = threading.Thread(target=self._indexing, name="flowpipe:serve:events", daemon=True)
                self._indexer.start()

    def _indexing(self) -> None:
        """Every running instance's new events into the index, each ``INDEX_EVERY_S``, until none runs."""
        while True:
            time.sleep(self.INDEX_EVERY_S)
            with self._lock:
                running = [i for i in self.instances.values() if i.result is None]
                if not running:
                    self._indexer = None
                    return
            for inst in running:
                try:
                    inst.events()
                except Exception as e:  # noqa: BLE001 - a run going down answers no more; its end indexes the last
                    log.debug("instance %s: its events could not be read: %s", inst.id, e)
                    continue
                self.index(inst)

    def state_of(self, template: str, parameters: dict[str, Any]) -> Path:
        """Where instances of ``template`` started with ``parameters`` keep what a stream leaves for its next
        run: one folder per template and parameters (another input is another pipeline)."""
        key = hashlib.sha256(json.dumps(parameters, sort_keys=True, default=str).encode()).hexdigest()[:12]
        return self.output_dir / "state" / template / key

    def reload(self) -> None:
        self.templates = find_templates(self.folders)

    def get(self, instance_id: str) -> Instance:
        inst = self.instances.get(instance_id)
        if inst is None:
            raise RequestError(f"no instance {instance_id!r}", 404)
        return inst

    def start(self, name: str, parameters: dict[str, Any], streams: list[dict[str, Any]],
              processes: int | str = 1, iid: str | None = None, generation: int = 0) -> Instance:
        """An instance of template ``name``; ``generation`` > 0: one a restarted server starts again, whose
        streams go on after the last frame its records hold (a file source seeks there), appending to its
        records and writing its recordings to new files."""
        template = self.templates.get(name)
        if template is None:
            raise RequestError(f"no pipeline template {name!r}; templates: {', '.join(sorted(self.templates))}", 404)
        with self._lock:
            if sum(1 for i in self.instances.values() if i.result is None) >= self.max_instances:
                raise RequestError(f"{self.max_instances} instances are running: stop one first", 429)
        unknown = sorted(set(parameters) - set(template.params))
        if unknown:
            raise RequestError(f"pipeline {name!r} has no parameter {unknown[0]!r}; parameters: "
                             f"{', '.join(sorted(template.params)) or 'none'}")
        if "input" in parameters and isinstance(parameters["input"], str):
            parameters = dict(parameters, input=self.source_uri(parameters["input"]))
        for req in streams:  # each stream's address checked before anything starts
            _reads(self.source_uri(req["uri"]))
        values = {**template.params, **parameters}
        # a password read from the environment is the graph's, never the API's nor the state file's
        reads = {k: r for k, v in values.items() if isinstance(v, str) and (r := _reads(v)) != v}
        try:
            spec = load_graph(str(template.path), {**parameters, **reads}, text=template.text or None)
        except GraphError as e:
            raise RequestError(f"pipeline {name!r}: {graph_error(e, template)}") from None
        iid = iid if iid is not None and iid not in self.instances else secrets.token_hex(4)
        folder = self.output_dir / iid
        self._confine(spec, folder, self.state_of(name, {**template.params, **parameters}),
                      per_stream=bool(streams))
        if self.cluster is None:  # the run's processes journal its events here as they happen (``index``)
            spec.journal = str(folder / JOURNAL)
        if streams:
            for s in spec.sources():
                s.template = True  # the request names the streams: the graph's own sources are their pattern
        _add_preview(spec)
        try:
            spec.processes = resolve_processes(spec, processes)
        except GraphError as e:
            raise RequestError(graph_error(e, template)) from None
        share = None
        if generation and self.cluster is None:  # a cluster's hosts keep their own state
            share = Share(resume=Resume(generation, last_recorded(spec)))
        runner = executor(spec, spec.processes, cluster=self.cluster, name=f"serve-{iid}", share=share)
        inst = Instance(iid, name, spec, runner, folder, template, {**template.params, **parameters},
                        processes=processes, sources_run=not streams, generation=generation)
        inst.given.update({r: values[k] for k, r in reads.items()})
        inst.thread = threading.Thread(target=self._run, args=(inst,), name=f"flowpipe:serve:{iid}", daemon=True)
        with self._lock:
            self.instances[iid] = inst
        if spec.journal is not None:  # the server's own first line: which template (``index_journals``); the
            head = Journal(spec.journal)  # run's end takes the journal away (``_journal_read``)
            head.append({"pipeline": name, "instance": iid, "started": round(time.time(), 3)})
            head.close()
        inst.thread.start()
        self._watch_events()
        deadline = time.monotonic() + 60
        while not runner.running and inst.result is None and time.monotonic() < deadline:
            time.sleep(0.05)
        try:
            if inst.result is not None and inst.result.error is not None:
                raise RequestError(f"pipeline {name!r} failed to start: {for_client(str(inst.result.error), template)}",
                                   422)
            for req in streams:
                self.add_stream(inst, req)
        except RequestError:  # a start refused leaves nothing running, nor listed
            self.stop(inst)
            raise
        self.save()
        return inst

    def _run(self, inst: Instance) -> None:
        result = inst.runner.run()
        inst.ended_at = time.time()
        if result.error is not None:  # the server's log says it too, whoever asks for the status
            log.error("instance %s (%s): %s", inst.id, inst.template, for_client(str(result.error), inst.source))
        try:
            inst.events()  # what its nodes held at the end, before anyone asks (a run of processes keeps none)
        except Exception as e:  # noqa: BLE001 - the run's result matters more than its last events
            log.warning("instance %s: its last events could not be read: %s", inst.id, e)
        self.index(inst)
        self._journal_read(inst)
        inst.result = result
        self.save()  # it ended: a restart does not run it again

    def stop(self, inst: Instance, timeout: float = 30.0) -> dict[str, Any]:
        inst.stopping = inst.result is None
        inst.runner.stop()
        if inst.thread is not None:
            inst.thread.join(timeout)
        status = inst.status(fresh=True)
        with self._lock:
            self.instances.pop(inst.id, None)
        self.save()
        return status

    def add_stream(self, inst: Instance, req: dict[str, Any]) -> dict[str, Any]:
        sid, like = req["id"], req.get("like")
        options = dict(req.get("options") or {})
        src = self.source_uri(req["uri"])
        options["uri"] = _reads(src)
        if options["uri"] != src:
            inst.given[options["uri"]] = src
        try:
            template = inst.runner.live.template(like)
        except ValueError as e:
            raise RequestError(str(e)) from None
        if "uri" not in type(template.config).model_fields:
            options.pop("uri")
        if any(s["stream"] == sid and s["state"] in ("failed", "ended") for s in inst.streams()):
            # a camera that failed, added again: in its place, its account kept, its own zones and lines too
            with contextlib.suppress(KeyError):  # (over processes, one that ended with its process is gone)
                inst.runner.live.remove(sid)
            inst.stale(sid)
        try:
            inst.runner.live.add(sid, like=template.id, config=options)
        except KeyError as e:
            raise RequestError(str(e.args[0])) from None
        except ValueError as e:
            raise RequestError(str(e), 409 if "already in the graph" in str(e) else 400) from None
        except RuntimeError as e:
            raise RequestError(f"instance {inst.id}: {e}", 409) from None
        inst.stale()  # the next status shows it
        inst.added[sid] = {**req, "options": req.get("options") or {}}
        self.save()
        return next(s for s in inst.streams() if s["stream"] == sid)

    def remove_stream(self, inst: Instance, sid: str) -> dict[str, Any]:
        try:
            account: dict[str, Any] = inst.runner.live.remove(sid)
            inst.stale(sid)  # the next status shows it gone
        except KeyError:
            raise RequestError(f"instance {inst.id} has no added stream {sid!r}", 404) from None
        with inst.retuning:  # its own zones and lines go with it (a camera added again under its id starts anew)
            mine = inst.own.get(sid)
            if mine and inst.result is None:
                try:
                    self._retune(inst, dict.fromkeys(mine), sid, check=False)
                except RequestError as e:
                    log.warning("instance %s: stream %s's own zones and lines stay in its graph: %s", inst.id, sid, e)
            inst.own.pop(sid, None)
        inst.added.pop(sid, None)
        self.save()
        return account

    def parameters(self, inst: Instance, stream: str | None = None) -> list[dict[str, Any]]:
        """Every parameter of the instance: its value now, whether it can change while the instance runs
        (and why not), and the shape it draws over the picture (``line``, ``polygon``) where it is one. With
        ``stream``: the values it has of its own (``own``), those the template's own ``streams`` entry for it
        sets (``template``; the others are the instance's), and whether each can be that camera's own
        (``per_stream``)."""
        uses = inst.source.uses
        if stream is not None:
            self._known_stream(inst, stream)
        out = []
        own = inst.own.get(stream or "", {})
        rendered: GraphSpec | None = None  # the template as the instance's values render it, where it is needed
        for name, value in inst.parameters.items():
            fixed = why_fixed(inst.spec, uses, name)
            row = {"name": name, "value": own.get(name, value), "tunable": fixed is None, "fixed": fixed}
            if stream is not None:
                where = shapes_of(inst.spec, uses, name)
                row |= {"own": name in own, "template": False,
                        "per_stream": fixed is None and _points(value) and isinstance(where, list)}
                if row["per_stream"] and name not in own and isinstance(where, list):
                    rendered = rendered or self._rendered(inst)
                    given = _template_own(rendered, where, stream)
                    if given is not None:
                        row |= {"value": given, "template": True}
            row["shape"] = shape_of(row["value"])
            out.append(row)
        return out

    @staticmethod
    def _rendered(inst: Instance) -> GraphSpec:
        """The instance's template as its parameters render it now."""
        try:
            return load_graph(str(inst.source.path), inst.parameters, text=inst.source.text or None)
        except GraphError as e:  # the template's file changed under the instance
            raise RequestError(f"pipeline {inst.template!r}: {graph_error(e, inst.source)}", 409) from None

    def _known_stream(self, inst: Instance, stream: str) -> None:
        names = sorted({str(s["stream"]) for s in inst.runner.live.states()})
        if stream not in names:
            raise RequestError(f"instance {inst.id} has no stream {stream!r}; streams: {', '.join(names) or 'none'}",
                               404)

    def retune(self, inst: Instance, parameters: dict[str, Any], stream: str | None = None) -> list[dict[str, Any]]:
        """Changes parameters of a running instance: each must land only on fields its nodes can change while
        they run (zones, lines, rules, thresholds); the instance's every process and host takes them from its
        next frame. With ``stream``: that camera's own zones and lines (each parameter must set only zones'
        and lines' shapes), the other cameras' as they were. The parameters as they are after (``stream``'s).
        One change at a time per instance: each is rendered from the values the one before left."""
        with inst.retuning:
            out = self._retune(inst, parameters, stream)
        self.save()
        return out

    def _retune(self, inst: Instance, parameters: dict[str, Any], stream: str | None,
                check: bool = True) -> list[dict[str, Any]]:
        """``retune``; with ``stream``, a parameter given None is no longer that camera's own (``check``:
        whether the stream must be running, False for one on its way out)."""
        template = inst.source
        unknown = sorted(set(parameters) - set(inst.parameters))
        if unknown:
            raise RequestError(f"pipeline {inst.template!r} has no parameter {unknown[0]!r}; parameters: "
                               f"{', '.join(sorted(inst.parameters)) or 'none'}")
        for name in parameters:
            fixed = why_fixed(inst.spec, template.uses, name)
            if fixed is not None:
                raise RequestError(f"parameter {name!r} cannot change while the instance runs: {fixed}", 409)
        if stream is not None:
            if check:
                self._known_stream(inst, stream)
            for name in parameters:
                why = shapes_of(inst.spec, template.uses, name)
                if isinstance(why, str) or not _points(inst.parameters[name]):
                    raise RequestError(f"parameter {name!r} cannot be one camera's own (stream {stream!r}): "
                                       f"{why if isinstance(why, str) else 'its value is no zone or line'}; "
                                       "expected one that is the whole of an analytics node's zone or line", 409)
        values = {**inst.parameters, **parameters} if stream is None else inst.parameters
        own = {s: dict(v) for s, v in inst.own.items()}
        if stream is not None:
            _own_values(own.setdefault(stream, {}), parameters)
        try:
            spec = load_graph(str(template.path), values, text=template.text or None)
            given = {k: v for k, v in parameters.items() if v is not None}
            if stream is not None and given:  # each value checked where it lands, as the instance's own would be
                load_graph(str(template.path), {**values, **given}, text=template.text or None)
        except GraphError as e:
            raise RequestError(f"pipeline {inst.template!r}: {graph_error(e, template)}") from None
        changes: dict[str, dict[str, Any]] = {}
        for name in parameters if stream is None else ():
            for node, key in template.uses.get(name, []):
                assert node is not None
                fld = key.split(".")[1]
                changes.setdefault(node, {}).update(spec.node(node).config.model_dump(by_alias=True, include={fld}))
        # a node this change touches that has (or had) a camera's own values gets its streams rebuilt
        touched = {n for name in parameters for n, _ in template.uses.get(name, [])}
        shaped = {n for ps in [*own.values(), *inst.own.values()] for name in ps
                  for n, _ in template.uses.get(name, [])}
        for node in touched & shaped - {None}:
            assert node is not None
            changes.setdefault(node, {})["streams"] = _own_shapes(spec, node, template.uses, own)
        if inst.result is not None:
            raise RequestError(f"instance {inst.id} has ended", 409)
        try:
            inst.runner.live.retune(changes)
        except PartlyRetunedError as e:  # in the run's graph, and most of its parts: its parameters say so
            self._took(inst, parameters, stream)
            raise RequestError(f"instance {inst.id}: not every part took the change: {e}", 503) from None
        except (ValueError, KeyError, RuntimeError) as e:
            raise RequestError(f"instance {inst.id}: {e.args[0] if e.args else e}", 409) from None
        self._took(inst, parameters, stream)
        return self.parameters(inst, stream if check else None)  # (a stream on its way out lists no values)

    @staticmethod
    def _took(inst: Instance, parameters: dict[str, Any], stream: str | None) -> None:
        if stream is None:
            inst.parameters.update(parameters)
            return
        if not _own_values(inst.own.setdefault(stream, {}), parameters):
            del inst.own[stream]

    def source_uri(self, uri: str) -> str:
        """A URI a stream may read: a network stream, 'sample', or a file inside the media folder."""
        if uri in SAMPLES:
            return uri
        if uri.lower().startswith(URI_SCHEMES):
            if any(c in uri for c in "\n\r\t ") or len(uri) > 2048 or not _host_of(uri):
                raise RequestError(f"malformed URI {uri[:80]!r}: expected scheme://host[:port]/path")
            return uri
        if "://" in uri:
            raise RequestError(f"URI scheme not served: {uri.split('://', 1)[0]!r}; expected one of "
                             f"{', '.join(s[:-3] for s in URI_SCHEMES)}, a file in the media folder, or one of "
                             f"{', '.join(SAMPLES)}")
        if self.media_dir is None:
            raise RequestError("files are not served (start flowpipe serve with --media-dir); expected a network "
                             f"URI or one of {', '.join(SAMPLES)}")
        path = Path(os.path.normpath(self.media_dir / uri))  # by name: links the folder holds are its own
        if not path.is_relative_to(self.media_dir):
            raise RequestError(f"path outside the media folder: {uri!r}", 403)
        if not path.is_file():
            raise RequestError(f"no file {uri!r} in the media folder", 404)
        return str(path)

    def _confine(self, spec: GraphSpec, folder: Path, state: Path, per_stream: bool = False) -> None:
        """Every output path of the graph goes inside the instance's folder, but for what a stream leaves for
        its next run (``state``: an MQTT outbox), which goes in ``state`` (the template's with these
        parameters, under the output folder's ``state/``: the next instance started so sends what a stopped
        one could not); one that would leave them is an error, not a write elsewhere. ``per_stream`` (the
        request names the streams): every stream's video carries its name (``NAME-{stream}.mp4``), the first
        one's too."""
        for node, key, kind, path in spec.outputs():
            p = Path(path)
            if p.is_absolute() or ".." in p.parts:
                raise RequestError(f"node {node.id!r}: output path {path!r} leaves the output folder; expected "
                                   "a relative path", 403)
            if per_stream and kind == "video" and "{stream}" not in path:
                p = p.with_name(f"{p.stem}-{{stream}}{p.suffix}")
            set_setting(node.config, key, str((state if kind == "state" else folder) / p))


def _reads(uri: str) -> str:
    """``uri`` as a source reads it: each ``{FLOWPIPE_CAM_NAME}`` in it read from the server's environment."""
    try:
        return resolved(uri)
    except KeyError as e:
        raise RequestError(f"URI names {{{e.args[0]}}}, which the server's environment does not set; expected it "
                           "set where flowpipe serve runs") from None


def _saved(inst: Instance) -> dict[str, Any]:
    """What the state file keeps of ``inst``: no password (``unsaved`` names the parameters, and marks the
    streams, whose URI had one left out: they are not restored; a template's own value is its file's to keep,
    and left for it to give again)."""
    parameters, unsaved = {}, []
    for name, value in inst.parameters.items():
        kept, cut = unsaid(value) if isinstance(value, str) else (value, False)
        if cut and value == inst.source.params.get(name):
            continue
        parameters[name] = kept
        if cut:
            unsaved.append(name)
    streams = []
    for req in inst.added.values():
        uri, cut = unsaid(req["uri"])
        streams.append({**req, "uri": uri, "unsaved": True} if cut else req)
    doc = {"id": inst.id, "template": inst.template, "parameters": parameters, "processes": inst.processes,
           "sources_run": inst.sources_run, "streams": streams, "own": inst.own, "generation": inst.generation}
    return {**doc, "unsaved": unsaved} if unsaved else doc


def last_recorded(spec: GraphSpec) -> dict[str, int]:
    """Per stream, the frame after the last one the graph's records files hold (read over their tails): where
    a restarted instance's streams go on."""
    out: dict[str, int] = {}
    for s in spec.nodes:
        for key, kind in s.contract.files.items():
            path = setting(s.config, key) if kind == "records" else None
            if isinstance(path, str) and path != "-" and os.path.isfile(path):
                for stream, frame in tail_records(path):
                    out[stream] = max(out.get(stream, 0), frame + 1)
    return out


def _host_of(uri: str) -> str | None:
    """The host a network URI names (None: none, or a port that is no number)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(uri)
        parts.port  # noqa: B018 - raises on a port that is no number
    except ValueError:
        return None
    return parts.hostname


def why_fixed(spec: GraphSpec, uses_of: dict[str, list[tuple[str | None, str]]], name: str) -> str | None:
    """Why parameter ``name`` cannot change while ``spec`` runs, given where each parameter of its template
    lands (``uses_of``); None: it lands only on fields their nodes declare tunable (never a file they write)."""
    uses = uses_of.get(name, [])
    if not uses:
        return "the graph does not use it"
    for node, key in uses:
        if node is None:
            return f"it sets the graph's {key}"
        found = next((s for s in spec.nodes if s.id == node), None)
        if found is None:
            return f"it sets node {node!r}, which is not running"
        head, _, rest = key.partition(".")
        if head != "config":
            return f"it sets {key!r} of node {node!r}"
        fld = rest.split(".")[0]
        if fld not in found.contract.retunable:
            return f"it sets node {node!r} ({found.type}) config.{fld}; start a new instance with it"
        if found.isolation == "process":
            return f"it sets node {node!r}, which runs in a process of its own (isolation: process)"
    return None


def shapes_of(spec: GraphSpec, uses_of: dict[str, list[tuple[str | None, str]]],
              name: str) -> list[tuple[str, str, str, str]] | str:
    """Where parameter ``name`` sets zones' and lines' shapes, each (node, ``zones`` or ``lines``, its name,
    ``polygon`` or ``points``), so a stream can have its own (the node's ``streams``); else why not."""
    out = []
    for node, key in uses_of.get(name, []):
        parts = key.split(".")
        found = next((s for s in spec.nodes if s.id == node), None)
        if found is None or len(parts) != 4 or parts[0] != "config" or (parts[1], parts[3]) not in (
                ("zones", "polygon"), ("lines", "points")) or "streams" not in found.contract.retunable:
            return f"it sets {key} of node {node!r}" if node is not None else f"it sets the graph's {key}"
        out.append((found.id, parts[1], parts[2], parts[3]))
    return out or "the graph does not use it"


def _own_shapes(spec: GraphSpec, node: str, uses_of: dict[str, list[tuple[str | None, str]]],
                own: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Node ``node``'s ``streams`` with each stream's own parameters (``own``: stream -> parameter -> value)
    put in: its own zone or line is the node's of that name (as the instance's parameters render it now)
    with its own shape, over what the template's own ``streams`` say."""
    cfg = spec.node(node).config.model_dump(by_alias=True)
    streams: dict[str, Any] = cfg["streams"]
    for stream, values in own.items():
        for name, value in values.items():
            where = shapes_of(spec, uses_of, name)  # a list: own values are only ever shapes
            for n, kind, shape, field_ in where if isinstance(where, list) else []:
                if n != node:
                    continue
                mine = streams.setdefault(stream, {"zones": {}, "lines": {}})
                base = mine[kind].get(shape) or cfg[kind].get(shape) or {}
                mine[kind][shape] = {**base, field_: value}
    return streams


def _template_own(spec: GraphSpec, where: list[tuple[str, str, str, str]], stream: str) -> Any:
    """The shape the template's own ``streams`` entry for ``stream`` gives where a parameter lands (``where``,
    from ``shapes_of``), over the parameter's value for that camera; None where it gives none."""
    for node, kind, shape, field_ in where:
        mine = getattr(spec.node(node).config, "streams", {}).get(stream)
        found = getattr(mine, kind, {}).get(shape) if mine is not None else None
        if found is not None:
            return [list(p) for p in getattr(found, field_)]
    return None


def _own_values(mine: dict[str, Any], parameters: dict[str, Any]) -> dict[str, Any]:
    """A camera's own values with ``parameters`` put in (None: no longer its own)."""
    for name, value in parameters.items():
        if value is None:
            mine.pop(name, None)
        else:
            mine[name] = value
    return mine


def _points(value: Any) -> bool:
    """Whether ``value`` is a zone's or line's points (two or more x, y pairs, in fractions or pixels)."""
    return isinstance(value, list) and len(value) >= 2 and all(
        isinstance(p, list | tuple) and len(p) == 2 and all(isinstance(v, int | float) for v in p) for p in value)


def shape_of(value: Any) -> str | None:
    """``line`` or ``polygon`` for a list of two or more points in fractions of the picture, the way zones and
    lines are given (a console draws them over the picture), else None."""
    if not _points(value) or not all(0 <= v <= 1 for p in value for v in p):
        return None
    return "line" if len(value) == 2 else "polygon"


def _add_preview(spec: GraphSpec) -> None:
    """A node that keeps each stream's newest picture (for the console), fed what the first video writer
    or preview of the graph gets (blurred faces, drawn boxes), else the source's frames."""
    feed: tuple[str, str] | None = None
    for node in spec.nodes:
        if node.contract.final_picture:
            feed = node.inputs["frame"][0]
            break
    if feed is None:
        first = (spec.templates() + spec.sources())[0]
        feed = (first.id, next(iter(first.cls.outputs)))
    cls = lookup("preview")
    spec.add(NodeSpec(PREVIEW, "preview", cls, cls.Config(), {"frame": [feed]}, queue=2,
                      thread="own"))  # its JPEGs beside the graph, not in a stage's thread

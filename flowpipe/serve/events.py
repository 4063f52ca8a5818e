"""The event history of ``flowpipe serve``: every event its instances raise, one row each, in a SQLite file
beside their folders (``OUTPUT_DIR/events.sqlite``, WAL journal), kept across restarts, as Frigate keeps its
events.

A row is one event record as an analytics node raised it (a begin, an end, an instant), keyed by the instance,
its stream, the event's id and state, the frame it was raised on and when (``at``, the wall clock): the same
record seen again (each look at a run lists its newest events) updates its row (a clip named in it since),
and a restarted run, whose event ids and frames begin again, adds rows of its own. Its snapshot and clip are
kept as paths inside the instance's folder. Retention deletes rows only: the files are the graph's, kept and
deleted by its own ``snapshots_keep_s``/``_mb`` and clips' ``keep_s``/``_mb`` (a snapshot or a clip may be
several events').
"""
from __future__ import annotations

import json
import math
import sqlite3
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    instance TEXT NOT NULL, pipeline TEXT NOT NULL, stream TEXT NOT NULL, id TEXT NOT NULL, state TEXT NOT NULL,
    frame INTEGER NOT NULL, at REAL NOT NULL, kind TEXT, rule TEXT, host TEXT,
    snapshot TEXT, clip TEXT,  -- inside the instance's folder
    record TEXT NOT NULL,  -- the event as it stood when last seen (JSON)
    PRIMARY KEY (instance, stream, id, state, frame, at));
CREATE INDEX IF NOT EXISTS events_at ON events (at);
CREATE TABLE IF NOT EXISTS journals (path TEXT PRIMARY KEY, offset INTEGER NOT NULL);  -- read up to there
CREATE INDEX IF NOT EXISTS events_instance_at ON events (instance, at);
"""
UPSERT = """
INSERT INTO events VALUES (:instance, :pipeline, :stream, :id, :state, :frame, :at, :kind, :rule, :host, :snapshot,
                           :clip, :record)
ON CONFLICT DO UPDATE SET record = excluded.record, snapshot = coalesce(excluded.snapshot, snapshot),
                          clip = coalesce(excluded.clip, clip)
"""
FILTERS = {"instance": "instance = ?", "stream": "stream = ?", "kind": "kind = ?", "rule": "rule = ?",
           "after": "at > ?", "before": "at < ?"}


class EventIndexError(ValueError):
    """The index file cannot be opened as one ``flowpipe serve`` made: one line naming it."""


class EventIndex:
    """The events of every instance of one output folder, in ``path``; ``keep_days``: rows of events raised
    longer ago are deleted, ``keep``: the oldest rows beyond this many (None: no such limit)."""

    def __init__(self, path: Path, keep_days: float | None = None, keep: int | None = 100_000):
        self.path, self.keep_days, self.keep = path, keep_days, keep
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(path, check_same_thread=False, timeout=10)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")  # WAL: what was committed survives the process's death
            self._db.executescript(SCHEMA)
            with self._db:
                self._retain()
        except sqlite3.DatabaseError as e:
            raise EventIndexError(f"{path}: {e}; expected the event index flowpipe serve makes (move it away: "
                                  "a new one is made)") from None

    def add(self, instance: str, pipeline: str, folder: Path, events: list[dict[str, Any]],
            journal: tuple[Path, int] | None = None) -> None:
        """``events`` of ``instance`` (of template ``pipeline``, its files in ``folder``): each a new row, or
        its row as the record stands now; then the rules of retention. ``journal``: the run's event journal
        they were read from and the offset read up to, kept in the same transaction (``journaled``)."""
        rows = [_row(instance, pipeline, folder, e) for e in events]
        if not rows and journal is None:
            return
        with self._lock, self._db:
            self._db.executemany(UPSERT, rows)
            if journal is not None:
                self._db.execute("INSERT INTO journals VALUES (?, ?) ON CONFLICT DO UPDATE SET offset = "
                                 "excluded.offset", (str(journal[0]), journal[1]))
            self._retain()

    def forget_journal(self, path: Path) -> None:
        """The journal ``path`` was read whole and removed: a new one there is read from its start."""
        with self._lock, self._db:
            self._db.execute("DELETE FROM journals WHERE path = ?", (str(path),))

    def journaled(self, path: Path) -> int:
        """How far the event journal ``path`` has been read into the index (0: not yet)."""
        with self._lock:
            got = self._db.execute("SELECT offset FROM journals WHERE path = ?", (str(path),)).fetchone()
        return int(got[0]) if got else 0

    def find(self, limit: int = 50, **where: Any) -> list[dict[str, Any]]:
        """The newest ``limit`` events, newest first, those ``where`` names (``FILTERS``: None is any); each
        the record with its ``instance`` and ``pipeline``, its snapshot and clip relative to the instance's
        folder."""
        clauses = [(FILTERS[k], v) for k, v in where.items() if v is not None]
        sql = ("SELECT instance, pipeline, snapshot, clip, record FROM events"  # noqa: S608 - clauses are FILTERS'
               + (" WHERE " + " AND ".join(c for c, _ in clauses) if clauses else "")
               + " ORDER BY at DESC, rowid DESC LIMIT ?")
        with self._lock:
            got = self._db.execute(sql, [v for _, v in clauses] + [limit]).fetchall()
        return [{**json.loads(record), "instance": iid, "pipeline": pipeline, "snapshot": snapshot, "clip": clip}
                for iid, pipeline, snapshot, clip, record in got]

    def knows(self, instance: str) -> bool:
        """Whether any event of ``instance`` is kept."""
        with self._lock:
            return self._db.execute("SELECT 1 FROM events WHERE instance = ? LIMIT 1", (instance,)).fetchone() \
                is not None

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _retain(self) -> None:
        if self.keep_days is not None:
            self._db.execute("DELETE FROM events WHERE at < ?", (time.time() - self.keep_days * 86400,))
        if self.keep is not None:
            (n,) = self._db.execute("SELECT count(*) FROM events").fetchone()
            if n > self.keep:
                self._db.execute("DELETE FROM events WHERE rowid IN (SELECT rowid FROM events ORDER BY at, rowid "
                                 "LIMIT ?)", (n - self.keep,))


def event_key(e: dict[str, Any]) -> tuple[str, ...]:
    """An event record's identity within its instance, as the index keys its rows (``_row``)."""
    return tuple(str(e.get(k)) for k in ("stream", "id", "state", "frame", "at"))


def _row(instance: str, pipeline: str, folder: Path, e: dict[str, Any]) -> dict[str, Any]:
    record = {k: v for k, v in e.items() if k not in ("snapshot", "clip")}
    host = e.get("host")
    return {"instance": instance, "pipeline": pipeline, "stream": str(e.get("stream")), "id": str(e.get("id")),
            "state": str(e.get("state")), "frame": _number(e.get("frame"), int, -1),
            "at": _number(e.get("at"), float, 0.0), "kind": e.get("kind"), "rule": e.get("rule"),
            "host": host if isinstance(host, str) else None, "snapshot": inside(folder, e.get("snapshot")),
            "clip": inside(folder, e.get("clip")), "record": json.dumps(record, default=str)}


def _number(value: Any, kind: type, default: Any) -> Any:
    try:
        return kind(value)
    except (TypeError, ValueError, OverflowError):
        return default


def inside(folder: Path, path: Any) -> str | None:
    """``path`` relative to ``folder`` where it is a path inside it (links and '..' resolved), else None."""
    if not isinstance(path, str):
        return None
    try:
        return Path(path).resolve().relative_to(folder.resolve()).as_posix()
    except (ValueError, OSError):
        return None


def when(text: str, name: str) -> float:
    """A time a client gives (``after``, ``before``) in seconds since the epoch: seconds, or ISO 8601 (UTC
    where it names no offset); ``ValueError`` naming ``name`` otherwise."""
    try:
        t = float(text)
    except ValueError:
        try:
            d = datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(f"{name}: {text[:40]!r} is no time; expected seconds since the epoch or ISO 8601 "
                             "(2025-01-31T12:00:00Z)") from None
        try:
            t = (d if d.tzinfo else d.replace(tzinfo=timezone.utc)).timestamp()
        except (OverflowError, OSError, ValueError):
            t = math.inf
    if not math.isfinite(t):
        raise ValueError(f"{name}: {text[:40]!r} is no time; expected a finite number of seconds since the epoch")
    return t

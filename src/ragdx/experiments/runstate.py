"""The durable state of a run: an SQLite database in the run folder (``run.db``).

Every query is an item. A worker claims one under a lease (a deadline), writes a draft
checkpoint, and publishes it; every state change is one ``BEGIN IMMEDIATE`` transaction, so
workers in several processes never claim the same item at once, and a worker killed at any
point leaves the items it held to be taken again when their lease expires. Drafts are kept
after publication or failure, for inspection. The life of an item (docs/durable.md):

    queued -> leased -> drafted -> published
                 ^         |
                 |         +-> failed (evidence_changed_or_expired) -> queued on --retry-failed
                 +-- lease expired without a draft

A damaged ``run.db`` is refused, naming it (:class:`~ragdx.errors.StoreError`, exit 2): a file
that is not an SQLite database, one missing a table (it is never created again empty: a run
whose items are gone would report nothing left to do), a page that fails to read. A draft
checkpoint whose contents are damaged is never trusted: a recovering worker discards it and runs
the item again (:class:`_DamagedCheckpoint`); a published item's is refused, naming the item.
Checkpoints hold the run's own results pickled, and are read back by an unpickler that builds
only ragdx's dataclasses and enums (a pickle from elsewhere cannot run code).
"""

from __future__ import annotations

import enum
import importlib
import io
import json
import os
import pickle
import socket
import sqlite3
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, is_dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from ragdx.errors import StoreError
from ragdx.store._common import is_lock, use_wal
from ragdx.types import ChoiceEnum

__all__ = ["ItemState", "Claim", "Draft", "ItemRecord", "RunState", "damaged", "worker_id"]

_TABLES = ("run", "items", "checkpoints", "events")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS run (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS items (
    n INTEGER PRIMARY KEY, query_id TEXT NOT NULL UNIQUE, state TEXT NOT NULL, worker TEXT,
    lease_until REAL, attempts INTEGER NOT NULL DEFAULT 0, reason TEXT NOT NULL DEFAULT '',
    published_seq INTEGER UNIQUE, updated_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS checkpoints (
    id INTEGER PRIMARY KEY, n INTEGER NOT NULL REFERENCES items(n), attempt INTEGER NOT NULL,
    worker TEXT NOT NULL, created_at TEXT NOT NULL, index_version INTEGER NOT NULL,
    trace TEXT NOT NULL, diagnosis TEXT NOT NULL, objects BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS checkpoints_n ON checkpoints(n);
CREATE INDEX IF NOT EXISTS items_state ON items(state, n);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY, at TEXT NOT NULL, n INTEGER, worker TEXT, event TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT '');
"""

#: the published items, each joined with its latest draft checkpoint (what was published)
_PUBLISHED = ("FROM items i JOIN checkpoints c ON c.id = (SELECT MAX(id) FROM checkpoints WHERE n = i.n) "
              "WHERE i.state = 'published'")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class _DamagedCheckpoint(StoreError):
    """A draft checkpoint whose trace, diagnosis or results cannot be read back."""


class _Restricted(pickle.Unpickler):
    """Builds only ragdx's own dataclasses and enums (and sets): what a checkpoint holds."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "builtins" and name in ("set", "frozenset"):
            return super().find_class(module, name)
        if module.split(".")[0] == "ragdx" and "." not in name:
            found = getattr(importlib.import_module(module), name, None)
            if isinstance(found, type) and (is_dataclass(found) or issubclass(found, enum.Enum)):
                return found
        raise pickle.UnpicklingError(f"{module}.{name} is not a ragdx result type")


def _unpickle(data: Any) -> Any:
    """A checkpoint's results, or :class:`pickle.UnpicklingError`-family errors when damaged."""
    if not isinstance(data, bytes):
        raise pickle.UnpicklingError(f"results stored as {type(data).__name__}, not bytes")
    return _Restricted(io.BytesIO(data)).load()


_DAMAGED = (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError,
            ImportError, RecursionError, MemoryError, UnicodeDecodeError, OverflowError)


class _Rows(list):
    """A query's rows, all fetched (a damaged page fails inside :meth:`_Guarded.execute`)."""

    def fetchone(self) -> Any:
        return self[0] if self else None

    def fetchall(self) -> list:
        return list(self)


class _Guarded:
    """``run.db``'s connection: an SQLite error that is damage (not a lock, not a constraint) is a
    :class:`StoreError` naming ``run.db``."""

    def __init__(self, db: sqlite3.Connection, path: Path) -> None:
        self.raw, self.path = db, path

    def execute(self, sql: str, params: Sequence[Any] = ()) -> _Rows:
        with self.guard():
            return _Rows(self.raw.execute(sql, params).fetchall())

    def executemany(self, sql: str, rows: Any) -> None:
        with self.guard():
            self.raw.executemany(sql, rows)

    @contextmanager
    def guard(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.DatabaseError as exc:
            waiting = is_lock(exc)
            if waiting or isinstance(exc, sqlite3.IntegrityError):
                raise
            raise damaged(self.path, str(exc)) from None


def damaged(path: Path, what: str) -> StoreError:
    """The error for a damaged ``run.db``: it names the file and what is wrong."""
    return StoreError(f"{path}: the run database is damaged: {what}; restore it or start the run again in "
                      "another folder")


class ItemState(ChoiceEnum):
    """Where an item of a durable run stands."""

    QUEUED = "queued"
    LEASED = "leased"
    DRAFTED = "drafted"
    PUBLISHED = "published"
    FAILED = "failed"


def worker_id() -> str:
    """A worker's id: the host, the process and a random part (a pid can be reused)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


@dataclass(frozen=True, slots=True)
class Claim:
    """An item a worker holds under a lease; ``recover``: it holds a dead worker's draft, to be
    rechecked and published or failed, not recomputed."""

    n: int
    query_id: str
    attempt: int
    recover: bool


@dataclass(frozen=True, slots=True)
class Draft:
    """A draft checkpoint: the item's trace (with the evidence its answer cites) and diagnosis as
    the JSON lines publication appends, the store's index version, and the in-memory results the
    report is built from."""

    n: int
    attempt: int
    worker: str
    created_at: str
    index_version: int
    trace_line: str
    diagnosis_line: str
    objects: tuple[Any, ...]

    @property
    def trace(self) -> dict[str, Any]:
        return json.loads(self.trace_line)

    @property
    def diagnosis(self) -> dict[str, Any]:
        return json.loads(self.diagnosis_line)


@dataclass(frozen=True, slots=True)
class ItemRecord:
    """One item as ``ragdx run --inspect`` lists it."""

    n: int
    query_id: str
    state: ItemState
    worker: str | None
    lease_until: float | None
    attempts: int
    reason: str
    checkpoints: int


class RunState:
    """A run's ``run.db``: opened by each worker process (one connection each).

    Args:
        path: the database file (created with its folder when missing, if ``create``).
        wait: seconds a transaction waits for another worker's to finish (the summary files are
            written inside one).
        create: make a new run database when there is none (else a missing or empty file is
            refused and nothing is written).

    Raises:
        StoreError: naming ``path``: not an SQLite database, not a run database, one missing a
            table, or (without ``create``) missing or empty.
    """

    def __init__(self, path: Path, *, wait: float = 600.0, create: bool = True) -> None:
        self.path = path
        fresh = not path.is_file() or path.stat().st_size == 0
        if fresh and not create:
            raise StoreError(f"{path}: {'empty' if path.is_file() else 'not found'}: not a run database of "
                             "'ragdx run'")
        path.parent.mkdir(parents=True, exist_ok=True)
        raw = None
        try:
            raw = sqlite3.connect(str(path), isolation_level=None, timeout=wait)
            self._db = _Guarded(raw, path)
            use_wal(self._db, wait)
            # NORMAL: a commit may be lost with the machine, never half-kept; the published files are then
            # cut back to the last commit kept, or written again from the drafts held here (append_published)
            self._db.execute("PRAGMA synchronous=NORMAL")
            # checked and created under the write lock: two workers starting one run together find
            # either no table (and one of them creates them all) or every table, never a half-made file
            with self.transaction() as db:
                found = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
                if not found and not create:
                    raise StoreError(f"{path}: empty: not a run database of 'ragdx run'")
                if found and "run" not in found:
                    raise StoreError(f"{path}: not a run database of 'ragdx run' (it has no 'run' table)")
                missing = [t for t in _TABLES if t not in found]
                if found and missing:
                    raise damaged(path, f"its {', '.join(missing)} table{'s are' if len(missing) > 1 else ' is'} "
                                  "missing")
                if not found:
                    for statement in filter(str.strip, _SCHEMA.split(";")):
                        db.execute(statement)
        except BaseException:
            if raw is not None:
                raw.close()
            raise

    def close(self) -> None:
        self._db.raw.close()

    def __enter__(self) -> "RunState":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[_Guarded]:
        """One write transaction, holding the database's write lock from its start."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    # -- the run --------------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        """The run's record (fingerprint, invocation, ...; not the sizes); a value that is not JSON
        is damage."""
        found = {}
        for key, value in self._db.execute("SELECT key, value FROM run WHERE key != 'sizes'"):  # sizes(): repairable
            try:
                found[key] = json.loads(value)
            except (TypeError, ValueError, RecursionError):
                raise damaged(self.path, f"its run record {key!r} is not JSON") from None
        return found

    def check_items(self, count: int | None = None) -> None:
        """Refuse a run database whose items were damaged: other than ``count`` of them (the
        queries submitted, by default as recorded), or one in a state no worker takes or
        publishes (it would be dropped without a word)."""
        if count is None:
            count = self.info().get("items")
        held = self._db.execute("SELECT COUNT(*) FROM items").fetchone()[0]
        if type(count) is int and held != count:  # noqa: E721 (a run from before the count was kept has none)
            raise damaged(self.path, f"it holds {held} items, but the run has {count} queries")
        bad = self._db.execute(f"SELECT n, state FROM items WHERE state NOT IN ({', '.join('?' * len(ItemState))}) "
                               "OR typeof(n) != 'integer' OR typeof(query_id) != 'text' LIMIT 1",
                               [s.value for s in ItemState]).fetchone()
        if bad is not None:
            raise damaged(self.path, f"item {bad[0]!r} has the state {bad[1]!r} (valid states are "
                                     f"{', '.join(s.value for s in ItemState)})")

    def submitted(self) -> bool:
        return self._db.execute("SELECT 1 FROM run WHERE key = 'fingerprint'").fetchone() is not None

    def submit(self, query_ids: Sequence[str], info: Mapping[str, Any]) -> bool:
        """Record the run (``info``: its fingerprint and how to resume it) and queue every query,
        unless another worker did first. Returns whether this call submitted."""
        with self.transaction() as db:
            if db.execute("SELECT 1 FROM run WHERE key = 'fingerprint'").fetchone():
                return False
            at = _now()
            db.executemany("INSERT INTO run VALUES (?, ?)",
                           [(k, json.dumps(v)) for k, v in {**info, "sizes": [0, 0], "submitted_at": at,
                                                            "items": len(query_ids)}.items()])
            db.executemany("INSERT INTO items (n, query_id, state, updated_at) VALUES (?, ?, 'queued', ?)",
                           [(n, q, at) for n, q in enumerate(query_ids)])
            db.execute("INSERT INTO events (at, event, detail) VALUES (?, 'submitted', ?)",
                       (at, f"{len(query_ids)} items"))
        return True

    def retry_failed(self, worker: str) -> int:
        """Queue every failed item again (its drafts stay); returns how many."""
        with self.transaction() as db:
            failed = [r[0] for r in db.execute("SELECT n FROM items WHERE state = 'failed'")]
            db.execute("UPDATE items SET state = 'queued', worker = NULL, lease_until = NULL, reason = '', "
                       "updated_at = ? WHERE state = 'failed'", (_now(),))
            self._events(db, [(n, worker, "retried", "") for n in failed])
        return len(failed)

    # -- items ----------------------------------------------------------------------------
    def claim(self, worker: str, lease_seconds: float) -> Claim | None:
        """Take the first item that is queued or whose lease expired, under a new lease."""
        with self.transaction() as db:
            now = time.time()
            row = db.execute(
                "SELECT n, query_id, state, worker, attempts FROM items WHERE state = 'queued' OR "
                "(state IN ('leased', 'drafted') AND lease_until < ?) ORDER BY n LIMIT 1", (now,)).fetchone()
            if row is None:
                return None
            n, query_id, state, old, attempts = row
            recover = state == ItemState.DRAFTED.value
            attempt = attempts if recover else attempts + 1
            db.execute("UPDATE items SET state = ?, worker = ?, lease_until = ?, attempts = ?, updated_at = ? "
                       "WHERE n = ?", (ItemState.DRAFTED.value if recover else ItemState.LEASED.value, worker,
                                       now + lease_seconds, attempt, _now(), n))
            events = [(n, worker, "claimed", f"attempt {attempt}")]
            if state != ItemState.QUEUED.value:
                events.insert(0, (n, old, "lease_expired", f"{state}; taken by {worker}"))
            self._events(db, events)
        return Claim(n, query_id, attempt, recover)

    def wait_hint(self) -> tuple[int, float | None]:
        """How many items other workers hold, and the seconds until the first of their leases ends."""
        count, first = self._db.execute(
            "SELECT COUNT(*), MIN(lease_until) FROM items WHERE state IN ('leased', 'drafted')").fetchone()
        return count, None if first is None else max(0.0, first - time.time())

    def write_draft(self, claim: Claim, worker: str, index_version: int, trace_line: str, diagnosis_line: str,
                    objects: tuple[Any, ...]) -> Draft | None:
        """Keep a draft checkpoint, if ``worker`` still holds the item (a worker whose lease
        expired and was taken by another discards its work). Returns it, or None if discarded."""
        with self.transaction() as db:
            if not self._holds(db, claim.n, worker, ItemState.LEASED):
                self._events(db, [(claim.n, worker, "draft_discarded", "the lease was taken by another worker")])
                return None
            at = _now()
            db.execute("INSERT INTO checkpoints (n, attempt, worker, created_at, index_version, trace, diagnosis, "
                       "objects) VALUES (?,?,?,?,?,?,?,?)",
                       (claim.n, claim.attempt, worker, at, index_version, trace_line, diagnosis_line,
                        pickle.dumps(objects, protocol=pickle.HIGHEST_PROTOCOL)))
            db.execute("UPDATE items SET state = 'drafted', updated_at = ? WHERE n = ?", (at, claim.n))
            self._events(db, [(claim.n, worker, "drafted", f"index version {index_version}")])
        return Draft(claim.n, claim.attempt, worker, at, index_version, trace_line, diagnosis_line, objects)

    def draft(self, n: int) -> Draft | None:
        """An item's latest draft checkpoint.

        Raises:
            _DamagedCheckpoint: its trace or diagnosis is not a JSON object, or its results do not
                read back.
        """
        row = self._db.execute(
            "SELECT n, attempt, worker, created_at, index_version, trace, diagnosis, objects FROM checkpoints "
            "WHERE n = ? ORDER BY id DESC LIMIT 1", (n,)).fetchone()
        if row is None:
            return None
        self._check_lines(n, row[5], row[6], self._query_id(n))
        if not isinstance(row[4], int):
            raise _DamagedCheckpoint(f"{self.path}: the checkpoint of item {n} is damaged: its index version is "
                                    f"{row[4]!r}")
        return Draft(*row[:7], self._results(n, row[7]))

    def _query_id(self, n: int) -> Any:
        row = self._db.execute("SELECT query_id FROM items WHERE n = ?", (n,)).fetchone()
        return None if row is None else row[0]

    def _check_lines(self, n: int, trace: Any, diagnosis: Any, query_id: Any) -> None:
        """A checkpoint's trace and diagnosis must each be one line holding a JSON object of the
        item's query (``query_id`` in a trace, ``id`` in a diagnosis)."""
        for what, text, key in (("trace", trace, "query_id"), ("diagnosis", diagnosis, "id")):
            try:
                obj = json.loads(text) if isinstance(text, str) and "\n" not in text else None
            except (ValueError, RecursionError):
                obj = None
            if not isinstance(obj, dict):
                raise _DamagedCheckpoint(f"{self.path}: the checkpoint of item {n} is damaged: its {what} is not "
                                        "one line of a JSON object")
            if obj.get(key) != query_id:
                raise _DamagedCheckpoint(f"{self.path}: the checkpoint of item {n} is damaged: its {what}'s {key} "
                                        f"is {_short(obj.get(key))}, not the item's {_short(query_id)}")

    def _results(self, n: int, data: Any) -> tuple[Any, ...]:
        try:
            objects = _unpickle(data)
        except _DAMAGED as exc:
            raise _DamagedCheckpoint(f"{self.path}: the checkpoint of item {n} is damaged: its results "
                                    f"do not read back ({type(exc).__name__}: {str(exc)[:200]})") from None
        if not isinstance(objects, tuple) or len(objects) != 4:
            raise _DamagedCheckpoint(f"{self.path}: the checkpoint of item {n} is damaged: its results "
                                    f"are a {type(objects).__name__}, not the four results of a query")
        return objects

    def discard_draft(self, n: int, worker: str, reason: str) -> None:
        """A held item's damaged draft: the item is run again (state ``leased``); the draft stays."""
        with self.transaction() as db:
            db.execute("UPDATE items SET state = 'leased', updated_at = ? WHERE n = ? AND worker = ?",
                       (_now(), n, worker))
            self._events(db, [(n, worker, "draft_damaged", reason)])

    def published(self) -> list[tuple[int, int, tuple[Any, ...]]]:
        """The published items' query number, index version and results, in query order.

        Raises:
            _DamagedCheckpoint: a published item's results do not read back.
        """
        return [(n, version, self._results(n, objects)) for n, version, objects in self._db.execute(
            f"SELECT c.n, c.index_version, c.objects {_PUBLISHED} ORDER BY i.n")]

    def index_versions(self) -> list[int]:
        """The index versions the published items' drafts were made at."""
        return [v for (v,) in self._db.execute(
            f"SELECT DISTINCT c.index_version {_PUBLISHED} ORDER BY 1")]

    def published_lines(self) -> list[tuple[str, str]]:
        """Every published item's trace and diagnosis, as published: in publication order.

        Raises:
            _DamagedCheckpoint: a published item's trace or diagnosis is not one line of a JSON object.
        """
        rows = self._db.execute(f"SELECT c.n, c.trace, c.diagnosis, i.query_id {_PUBLISHED} ORDER BY i.published_seq")
        for n, trace, diagnosis, query_id in rows:
            self._check_lines(n, trace, diagnosis, query_id)
        return [(t, d) for _, t, d, _ in rows]

    @contextmanager
    def publishing(self, n: int, worker: str) -> Iterator[tuple[int, ...] | None]:
        """Publish an item ``worker`` holds as drafted: yields the published files' committed
        sizes (None if the worker no longer holds it), and commits the sizes the caller sets with
        :meth:`set_sizes` together with the item's new state, in one transaction."""
        with self.transaction() as db:
            if not self._holds(db, n, worker, ItemState.DRAFTED):
                yield None
                return
            yield self.sizes()
            db.execute("UPDATE items SET state = 'published', lease_until = NULL, updated_at = ?, published_seq = "
                       "(SELECT COALESCE(MAX(published_seq), 0) + 1 FROM items) WHERE n = ?", (_now(), n))
            self._events(db, [(n, worker, "published", "")])

    def sizes(self) -> tuple[int, ...] | None:
        """The published files' sizes at the last publication committed; None if the record is
        damaged (the files are then written again from the checkpoints)."""
        row = self._db.execute("SELECT value FROM run WHERE key = 'sizes'").fetchone()
        try:
            sizes = json.loads(row[0])
        except (TypeError, ValueError, RecursionError):
            return None
        if not (isinstance(sizes, list) and len(sizes) == 2
                and all(type(v) is int and v >= 0 for v in sizes)):  # noqa: E721 (True is no size)
            return None
        return tuple(sizes)

    def set_sizes(self, sizes: tuple[int, ...]) -> None:
        """Inside a transaction: the published files' sizes after this publication or repair."""
        self._db.execute("INSERT OR REPLACE INTO run VALUES ('sizes', ?)", (json.dumps(list(sizes)),))

    def fail(self, n: int, worker: str, reason: str) -> bool:
        """Fail an item ``worker`` holds: it is not published, and its drafts stay."""
        with self.transaction() as db:
            if not self._holds(db, n, worker, ItemState.DRAFTED):
                return False
            db.execute("UPDATE items SET state = 'failed', lease_until = NULL, reason = ?, updated_at = ? "
                       "WHERE n = ?", (reason, _now(), n))
            self._events(db, [(n, worker, "failed", reason)])
        return True

    def _holds(self, db: _Guarded, n: int, worker: str, state: ItemState) -> bool:
        return db.execute("SELECT 1 FROM items WHERE n = ? AND worker = ? AND state = ?",
                          (n, worker, state.value)).fetchone() is not None

    def _events(self, db: _Guarded, rows: list[tuple[int, str | None, str, str]]) -> None:
        at = _now()
        db.executemany("INSERT INTO events (at, n, worker, event, detail) VALUES (?,?,?,?,?)",
                       [(at, *r) for r in rows])

    def summarised(self) -> bool:
        """Whether the folder's summary files were written since the last change of any item."""
        last = self._db.execute("SELECT event FROM events ORDER BY id DESC LIMIT 1").fetchone()
        return last is not None and last[0] == "summarised"

    def note_summarised(self, worker: str) -> None:
        """Inside a transaction: the summary files now show every item's state."""
        self._events(self._db, [(None, worker, "summarised", "")])

    # -- reading --------------------------------------------------------------------------
    def counts(self) -> dict[ItemState, int]:
        found = dict(self._db.execute("SELECT state, COUNT(*) FROM items GROUP BY state").fetchall())
        return {s: found.get(s.value, 0) for s in ItemState}

    def items(self) -> list[ItemRecord]:
        return [ItemRecord(n, q, ItemState.parse(s), w, lease, attempts, reason, drafts) for n, q, s, w, lease,
                attempts, reason, drafts in self._db.execute(
                    "SELECT n, query_id, state, worker, lease_until, attempts, reason, "
                    "(SELECT COUNT(*) FROM checkpoints c WHERE c.n = items.n) FROM items ORDER BY n")]

    def checkpoints(self) -> list[dict[str, Any]]:
        """Every draft checkpoint kept (without its contents)."""
        return [{"item": n, "query_id": q, "attempt": a, "worker": w, "created_at": at, "index_version": v}
                for n, q, a, w, at, v in self._db.execute(
                    "SELECT c.n, i.query_id, c.attempt, c.worker, c.created_at, c.index_version FROM checkpoints c "
                    "JOIN items i ON i.n = c.n ORDER BY c.id")]

    def events(self, event: str | None = None) -> list[tuple[int | None, str | None, str, str]]:
        """The run's history: (item, worker, event, detail), oldest first."""
        sql = "SELECT n, worker, event, detail FROM events"
        return [tuple(r) for r in (self._db.execute(sql + " WHERE event = ? ORDER BY id", (event,)) if event
                                   else self._db.execute(sql + " ORDER BY id"))]

"""The server's durable store (``DATA/serve.db``, SQLite): every accepted request's spans, the
traces they make up, and each trace's diagnosis and signals.

A request is acknowledged only after its spans are committed (WAL, ``synchronous=FULL``: the
commit is on disk when ``add`` returns), so a crash, even ``kill -9``, loses no acknowledged
span; a trace whose diagnosis had not been saved is diagnosed when the server starts again.

Tables: ``requests`` (one row per accepted request), ``spans`` (one row per span, its record as
JSON), ``traces`` (per trace id: when first and last seen, whether its root span arrived, how many
spans it has, ``open`` or ``done``) and ``results`` (per trace: the diagnosis, the signals).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Sequence

from ragdx.traces.openinference import SpanRecord
from ragdx.errors import StoreError
from ragdx.store._common import use_wal

__all__ = ["Spool", "RESULT_COLUMNS"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS requests (id INTEGER PRIMARY KEY, received REAL NOT NULL, bytes INTEGER NOT NULL,
    spans INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS spans (request INTEGER NOT NULL, trace_id TEXT NOT NULL, record TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS spans_trace ON spans (trace_id);
CREATE TABLE IF NOT EXISTS traces (trace_id TEXT PRIMARY KEY, first_seen REAL NOT NULL, last_seen REAL NOT NULL,
    root INTEGER NOT NULL, spans INTEGER NOT NULL, state TEXT NOT NULL, system TEXT);
CREATE INDEX IF NOT EXISTS traces_open ON traces (state, last_seen);
CREATE TABLE IF NOT EXISTS results (trace_id TEXT PRIMARY KEY, seen REAL NOT NULL, done_at REAL NOT NULL,
    query_id TEXT, labelled INTEGER NOT NULL, question TEXT, outcome TEXT, first_failure TEXT, system TEXT,
    diagnosis TEXT, trace TEXT, abstained INTEGER, claims INTEGER, claims_supported INTEGER,
    retrieval_score REAL, evidence_changed INTEGER, recheck TEXT, error TEXT);
CREATE INDEX IF NOT EXISTS results_seen ON results (seen);
"""
RESULT_COLUMNS = ("trace_id", "seen", "done_at", "query_id", "labelled", "question", "outcome", "first_failure",
                  "system", "diagnosis", "trace", "abstained", "claims", "claims_supported", "retrieval_score",
                  "evidence_changed", "recheck", "error")
_JSON_COLUMNS = ("diagnosis", "trace", "recheck")


def _record_json(span: SpanRecord) -> str:
    return json.dumps([span.span_id, span.parent_id, span.name, span.kind, span.start, span.end,
                       span.attributes], separators=(",", ":"), default=str)


class _Ticket:
    """One request waiting for its group commit."""

    __slots__ = ("spans", "system", "size", "number", "done", "error")

    def __init__(self, spans: Sequence[SpanRecord], system: str | None, size: int) -> None:
        self.spans, self.system, self.size = spans, system, size
        self.number, self.done, self.error = 0, False, None


class Spool:
    """The server's SQLite file; safe to use from several threads (a connection per thread)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._local = threading.local()
        self._turn = threading.Condition()
        self._pending: list[_Ticket] = []
        self._writing = False
        self._writer: sqlite3.Connection | None = None
        try:
            self._conn().executescript(_SCHEMA)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: not a ragdx serve database ({exc})") from None

    def _connect(self, **kwargs: Any) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=60, isolation_level=None, **kwargs)
        use_wal(conn, 60.0)
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA cache_size=-1024")  # 1 MiB a connection: the web threads each hold one
        return conn

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._connect()
        return conn

    def close(self) -> None:
        """Close this thread's connection (and the writer's, if this thread leads no commit)."""
        with self._turn:
            if self._writer is not None and not self._writing:
                self._writer.close()
                self._writer = None
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def add(self, spans: Sequence[SpanRecord], system: str | None, size: int) -> int:
        """Store one request's spans, committed to disk before returning; each trace they touch is
        (re)opened for diagnosis. Returns the request's number.

        Requests that arrive together are written in one transaction (group commit): the first
        writes every request waiting, the others wait for its commit, so one disk sync serves
        them all. A failed transaction fails every request in it (none is acknowledged).
        """
        ticket = _Ticket(spans, system, size)
        with self._turn:
            self._pending.append(ticket)
            while not ticket.done:
                if self._writing:
                    self._turn.wait()
                    continue
                self._writing = True
                batch, self._pending = self._pending, []
                self._turn.release()
                try:
                    self._write(batch)
                except BaseException as exc:  # every request of the batch is refused
                    for t in batch:
                        t.error = exc
                finally:
                    self._turn.acquire()
                    self._writing = False
                    for t in batch:
                        t.done = True
                    self._turn.notify_all()
        if ticket.error is not None:
            raise ticket.error
        return ticket.number

    def _write(self, batch: Sequence["_Ticket"]) -> None:
        now = time.time()
        if self._writer is None:  # one connection for every group commit, whichever thread leads it
            self._writer = self._connect(check_same_thread=False)
        conn = self._writer
        conn.execute("BEGIN IMMEDIATE")
        try:
            touched: dict[str, list[Any]] = {}
            for ticket in batch:
                ticket.number = conn.execute("INSERT INTO requests (received, bytes, spans) VALUES (?, ?, ?)",
                                             (now, ticket.size, len(ticket.spans))).lastrowid
                conn.executemany("INSERT INTO spans (request, trace_id, record) VALUES (?, ?, ?)",
                                 [(ticket.number, s.trace_id, _record_json(s)) for s in ticket.spans])
                for s in ticket.spans:
                    t = touched.setdefault(s.trace_id, [0, 0, ticket.system])
                    t[0] += 1
                    t[1] |= s.parent_id is None
            conn.executemany(
                "INSERT INTO traces (trace_id, first_seen, last_seen, root, spans, state, system) "
                "VALUES (?, ?, ?, ?, ?, 'open', ?) ON CONFLICT (trace_id) DO UPDATE SET last_seen = excluded.last_seen, "
                "root = max(root, excluded.root), spans = spans + excluded.spans, state = 'open', "
                "system = coalesce(system, excluded.system)",
                [(tid, now, now, root, n, system) for tid, (n, root, system) in touched.items()])
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def open_traces(self) -> int:
        return self._conn().execute("SELECT count(*) FROM traces WHERE state = 'open'").fetchone()[0]

    def ready(self, settle: float, orphan_after: float, limit: int = 200) -> list[tuple[str, int, str | None, float]]:
        """Open traces to diagnose: those whose root span arrived and that received nothing for
        ``settle`` seconds, and those without a root that received nothing for ``orphan_after``.
        Each with its span count (to save its result only if no span arrived meanwhile), its
        system and when it was first seen."""
        now = time.time()
        return self._conn().execute(
            "SELECT trace_id, spans, system, first_seen FROM traces WHERE state = 'open' AND "
            "((root = 1 AND last_seen <= ?) OR last_seen <= ?) ORDER BY last_seen LIMIT ?",
            (now - settle, now - orphan_after, limit)).fetchall()

    def spans(self, trace_id: str) -> list[SpanRecord]:
        """A trace's spans; a span's ``line`` is the number of the request that brought it."""
        out = []
        for request, record in self._conn().execute(
                "SELECT request, record FROM spans WHERE trace_id = ? ORDER BY rowid", (trace_id,)):
            span_id, parent, name, kind, start, end, attrs = json.loads(record)
            out.append(SpanRecord(request, trace_id, span_id, parent, name, kind, start, end, attrs))
        return out

    def save(self, trace_id: str, spans: int, result: dict[str, Any]) -> bool:
        """Store a trace's result and close it, unless spans arrived since it was read (then it
        stays open and is diagnosed again). Returns whether it was saved."""
        return self.save_many([(trace_id, spans, result)]) == 1

    def save_many(self, results: Sequence[tuple[str, int, dict[str, Any]]]) -> int:
        """:meth:`save` for several traces in one transaction; returns how many were saved."""
        now, rows = time.time(), []
        for trace_id, spans, result in results:
            row = {c: result.get(c) for c in RESULT_COLUMNS}
            row["trace_id"], row["done_at"] = trace_id, now
            for c in _JSON_COLUMNS:
                if row[c] is not None:
                    row[c] = json.dumps(row[c], default=str)
            rows.append((trace_id, spans, [row[c] for c in RESULT_COLUMNS]))
        conn = self._conn()
        saved = 0
        conn.execute("BEGIN IMMEDIATE")
        try:
            for trace_id, spans, values in rows:
                if conn.execute("UPDATE traces SET state = 'done' WHERE trace_id = ? AND spans = ? AND "
                                "state = 'open'", (trace_id, spans)).rowcount:
                    conn.execute(f"INSERT OR REPLACE INTO results ({', '.join(RESULT_COLUMNS)}) VALUES "
                                 f"({', '.join('?' * len(RESULT_COLUMNS))})", values)
                    saved += 1
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return saved

    def results(self, where: str = "1", params: Iterable[Any] = (), limit: int | None = None,
                offset: int = 0) -> list[dict[str, Any]]:
        """Result rows (JSON columns read), oldest first; ``limit`` of them from ``offset``."""
        sql = f"SELECT {', '.join(RESULT_COLUMNS)} FROM results WHERE {where} ORDER BY seen, trace_id"
        if limit is not None:
            sql += f" LIMIT {int(limit)} OFFSET {int(offset)}"
        out = []
        for values in self._conn().execute(sql, tuple(params)):
            row = dict(zip(RESULT_COLUMNS, values))
            for c in _JSON_COLUMNS:
                if row[c] is not None:
                    row[c] = json.loads(row[c])
            out.append(row)
        return out

    def counts(self) -> dict[str, int]:
        conn = self._conn()
        one = lambda sql: conn.execute(sql).fetchone()[0]  # noqa: E731
        # rows are never deleted, so the largest rowid is the count, read without a scan
        return {"requests": one("SELECT coalesce(max(rowid), 0) FROM requests"),
                "spans": one("SELECT coalesce(max(rowid), 0) FROM spans"),
                "traces": one("SELECT count(*) FROM traces"),
                "open": one("SELECT count(*) FROM traces WHERE state = 'open'"),
                "diagnosed": one("SELECT count(*) FROM results"),
                "set_aside": one("SELECT count(*) FROM results WHERE error IS NOT NULL")}

    def trace_ids(self) -> list[str]:
        return [r[0] for r in self._conn().execute("SELECT trace_id FROM traces ORDER BY first_seen")]

    def windows(self, width: float) -> list[dict[str, Any]]:
        """Per window of ``width`` seconds (by when a trace was first seen), newest first: traces,
        labelled ones, outcomes supported, abstentions among answers, claims checked and supported,
        the mean retrieval score, answers whose cited evidence changed, traces that failed to read."""
        keys = ("start", "traces", "labelled", "supported", "abstained", "answers", "claims", "claims_supported",
                "retrieval_score", "evidence_changed", "rechecked", "errors")
        rows = self._conn().execute(
            "SELECT CAST(seen / ? AS INTEGER) * ? AS w, count(*), sum(labelled), sum(outcome = 'supported'), "
            "sum(abstained), count(abstained), sum(claims), sum(claims_supported), avg(retrieval_score), "
            "sum(evidence_changed), count(evidence_changed), sum(error IS NOT NULL) FROM results "
            "GROUP BY w ORDER BY w DESC", (width, width)).fetchall()
        return [dict(zip(keys, r)) for r in rows]

    def first_failures(self, width: float) -> dict[float, dict[str, int]]:
        """Per window: how many labelled traces first failed at each stage."""
        out: dict[float, dict[str, int]] = {}
        for w, stage, n in self._conn().execute(
                "SELECT CAST(seen / ? AS INTEGER) * ? AS w, first_failure, count(*) FROM results "
                "WHERE labelled = 1 AND first_failure IS NOT NULL GROUP BY w, first_failure", (width, width)):
            out.setdefault(w, {})[stage] = n
        return out

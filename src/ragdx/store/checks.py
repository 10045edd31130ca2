"""The stores' checks of themselves: ``verify`` (every invariant: each chunk's text is its span of
its version's parsed text, every chunk's section exists, every version has access groups, the
BM25 statistics are exact) and ``audit`` (what ``ragdx index verify --live`` reports: deleted
documents still reachable, orphan rows, and notes on versions and spaces kept beside the live
ones). Both return the problems found; an empty list is a consistent store.

SQLite adds its own integrity and foreign-key checks and FTS5's integrity check; PostgreSQL
recounts its BM25 statistics from the chunk rows.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

from ragdx.store.embeddings import vec_table
from ragdx.types import SpaceState

if TYPE_CHECKING:
    from ragdx.store.postgres import PostgresStore
    from ragdx.store.sqlite import SQLiteStore


def sqlite_fts_problems(self: SQLiteStore) -> list[str]:
    """FTS5's own integrity check of the BM25 index against the chunks table."""
    try:
        with self.transaction():
            self._db.execute("INSERT INTO chunks_fts (chunks_fts, rank) VALUES ('integrity-check', 1)")
    except sqlite3.DatabaseError as exc:
        return [f"the BM25 index disagrees with the chunks table: {exc}"]
    return []


def pg_fts_problems(self: PostgresStore) -> list[str]:
    """The BM25 statistics recounted from the chunk rows: any difference is a problem."""
    problems = []
    recount = self._one("SELECT count(*), coalesce(sum(length), 0) FROM {s}.chunks")
    kept = self._one("SELECT coalesce(sum(n_rows), 0), coalesce(sum(n_tokens), 0) FROM {s}.corpus")
    if tuple(map(int, recount)) != tuple(map(int, kept)):
        problems.append(f"the BM25 statistics count {kept[0]} rows and {kept[1]} tokens; the chunks "
                        f"hold {recount[0]} and {recount[1]}")
    wrong = self._all("SELECT coalesce(t.term, d.term), t.n, d.df FROM (SELECT k AS term, count(*) AS n "
                      "FROM {s}.chunks, jsonb_object_keys(tf) k GROUP BY k) t FULL JOIN (SELECT term, "
                      "sum(df) AS df FROM (SELECT term, df FROM {s}.term_df UNION ALL SELECT term, df FROM "
                      "{s}.term_delta) u GROUP BY term HAVING sum(df) <> 0) d ON d.term = t.term "
                      "WHERE t.n IS DISTINCT FROM d.df ORDER BY 1 LIMIT 5")
    problems += [f"the BM25 statistics say {df} rows hold {term!r}; {n or 0} do"
                 for term, n, df in wrong]
    stale = self._one("SELECT count(*) FROM {s}.chunks WHERE terms <> array_to_tsvector("
                      "ARRAY(SELECT jsonb_object_keys(tf)))")
    if stale and stale[0]:
        problems.append(f"{stale[0]} chunks' tsvector disagrees with their term frequencies")
    return problems


def sqlite_verify(self: SQLiteStore) -> list[str]:
    """Check the store's invariants; returns the problems found (empty when consistent).

    Checks SQLite's own integrity, that every chunk's text is exactly its span of its
    version's parsed text, that every chunk's section exists, and that every version has
    access groups.
    """
    problems = [r[0] for r in self._db.execute("PRAGMA integrity_check") if r[0] != "ok"]
    problems += self.fts_problems()
    problems += [f"foreign key violation in {r[0]}" for r in self._db.execute("PRAGMA foreign_key_check")]
    texts: dict[tuple[str, str], str] = {}
    for cid, doc_id, version, start, end, text, section_id in self._db.execute(
            "SELECT id, doc_id, version, start, end, text, section_id FROM chunks"):
        key = (doc_id, version)
        if key not in texts:
            texts[key] = self.texts(doc_id, version)[1]
        if texts[key][start:end] != text:
            problems.append(f"chunk {cid} of {doc_id}@{version}: text is not parsed_text[{start}:{end}]")
    problems += [f"chunk {r[0]}: section {r[1]} missing" for r in self._db.execute(
        "SELECT id, section_id FROM chunks WHERE section_id NOT IN (SELECT id FROM sections)")]
    problems += [f"{r[0]}@{r[1]}: no access groups" for r in self._db.execute(
        "SELECT doc_id, version FROM documents d WHERE NOT EXISTS (SELECT 1 FROM acl a "
        "WHERE a.doc_id = d.doc_id AND a.version = d.version)")]
    return problems


def pg_verify(self: PostgresStore) -> list[str]:
    """Check the store's invariants; returns the problems found (empty when consistent):
    every chunk's text is its span of its version's parsed text, every chunk's section
    exists, every version has access groups and chunk rows belong to a stored version, and
    the BM25 statistics are exact."""
    problems = self.fts_problems()
    for cid, doc_id, version, ok in self._all(
            "SELECT c.id, c.doc_id, c.version, substr(d.parsed_text, c.start_at + 1, c.end_at - c.start_at) "
            "= c.text FROM {s}.chunks c LEFT JOIN {s}.documents d ON d.doc_id = c.doc_id AND "
            "d.version = c.version WHERE d.doc_id IS NULL OR substr(d.parsed_text, c.start_at + 1, "
            "c.end_at - c.start_at) <> c.text"):
        problems.append(f"chunk {cid} of {doc_id}@{version}: " + (
            "no such version stored" if ok is None else "text is not its span of the parsed text"))
    problems += [f"chunk {r[0]}: section {r[1]} missing" for r in self._all(
        "SELECT c.id, c.section_id FROM {s}.chunks c WHERE NOT EXISTS (SELECT 1 FROM {s}.sections s "
        "WHERE s.id = c.section_id AND s.doc_id = c.doc_id)")]
    problems += [f"{r[0]}@{r[1]}: no access groups" for r in self._all(
        "SELECT d.doc_id, d.version FROM {s}.documents d WHERE NOT EXISTS (SELECT 1 FROM {s}.acl a "
        "WHERE a.doc_id = d.doc_id AND a.version = d.version AND cardinality(a.groups) > 0)")]
    return problems


def sqlite_audit(self: SQLiteStore) -> tuple[list[str], list[str]]:
    """Audit the live index (``ragdx index verify --live``): problems, then notes.

    Problems: documents deleted but still stored or searchable (a version, a chunk, a
    keyword-index row, a vector), chunks without a document, vectors without a chunk or of a
    space that was never registered, and FTS5's own integrity check. Notes: superseded and
    expired versions still indexed (searchable only by a question naming their version, or
    with ``retrieval.versions = "all"``), and vectors of spaces that are not live (kept for a
    rollback, or built beside the live one).
    """
    q = self._db.execute
    problems: list[str] = _unreachable_rows(self)
    indexed = q("SELECT COUNT(*) FROM chunks_fts_docsize f WHERE NOT EXISTS (SELECT 1 FROM chunks c "
                "WHERE c.rowid = f.id)").fetchone()[0]
    if indexed:
        problems.append(f"{indexed} keyword-index rows of chunks no longer stored (deleted text still searchable)")
    lost = q("SELECT COUNT(*) FROM vectors v WHERE NOT EXISTS (SELECT 1 FROM chunks c "
             "WHERE c.rowid = v.chunk_rowid)").fetchone()[0]
    if lost:
        problems.append(f"{lost} vectors without a chunk")
    problems += [f"{n} vectors of space {sid}, which is not registered" for sid, n in q(
        "SELECT space_id, COUNT(*) FROM vectors WHERE space_id NOT IN (SELECT id FROM spaces) "
        "GROUP BY space_id ORDER BY space_id")]
    problems += self.fts_problems()
    notes = _old_versions_indexed(self)
    notes += [f"{n} vectors of space {sid}, which is not live ({state})" for sid, state, n in q(
        "SELECT s.id, s.state, COUNT(*) FROM vectors v JOIN spaces s ON s.id = v.space_id "
        "WHERE s.state != 'active' GROUP BY s.id ORDER BY s.id")]
    return problems, notes + _held_index_versions(self)


def pg_audit(self: PostgresStore) -> tuple[list[str], list[str]]:
    """Audit the live index (``ragdx index verify --live``): problems, then notes, as
    :meth:`ragdx.store.sqlite.SQLiteStore.audit` gives them.

    Problems: documents deleted but still stored or searchable (a version, a chunk, a
    vector) or held by an index version, chunks without a document version, vectors and
    statement vectors without a chunk, and the BM25 statistics recounted (:meth:`fts_problems`).
    Notes: superseded and expired versions still indexed, vectors of spaces that are not live,
    and index versions held beside the live one."""
    problems = _unreachable_rows(self)
    # without foreign keys across partitions, what SQLite's cascades guarantee is checked here
    problems += [f"deleted document {doc_id} is still held by index version {index_id}" for doc_id, index_id in self._all(
        "SELECT DISTINCT s.doc_id, s.index_id FROM {s}.staged_versions s JOIN {s}.tombstones t ON t.doc_id = s.doc_id "
        "ORDER BY 1, 2")]
    problems += [f"{n} statement vectors of space {space_id} without a chunk" for space_id, n in self._all(
        "SELECT v.space_id, count(*) FROM {s}.statement_vectors v WHERE NOT EXISTS (SELECT 1 FROM {s}.chunks c "
        "WHERE c.rowid = v.chunk_rowid AND c.doc_id = v.doc_id) GROUP BY 1 ORDER BY 1")]
    notes: list[str] = []
    for n, space_id, state in self._all("SELECT n, id, state FROM {s}.spaces ORDER BY n"):
        table = vec_table(n)
        lost = self._one(f"SELECT count(*) FROM {{s}}.{table} v WHERE NOT EXISTS (SELECT 1 FROM "
                         f"{{s}}.chunks c WHERE c.rowid = v.chunk_rowid AND c.doc_id = v.doc_id)")[0]
        if lost:
            problems.append(f"{lost} vectors of space {space_id} without a chunk")
        if state != SpaceState.ACTIVE.value:
            count = self._one(f"SELECT count(*) FROM {{s}}.{table}")[0]
            if count:
                notes.append(f"{count} vectors of space {space_id}, which is not live ({state})")
    problems += self.fts_problems()
    return problems, _old_versions_indexed(self) + notes + _held_index_versions(self)


# -- both --------------------------------------------------------------------------------------
def _unreachable_rows(self: SQLiteStore | PostgresStore) -> list[str]:
    """Documents deleted but still stored or chunked, and chunks without a document version."""
    problems = []
    for doc_id, in self._all("SELECT doc_id FROM {s}.tombstones ORDER BY doc_id"):
        stored = self._one("SELECT count(*) FROM {s}.documents WHERE doc_id = %s", (doc_id,))[0]
        chunks = self._one("SELECT count(*) FROM {s}.chunks WHERE doc_id = %s", (doc_id,))[0]
        if stored or chunks:
            problems.append(f"deleted document {doc_id} is still reachable: {stored} versions, {chunks} chunks")
    orphans = self._one("SELECT count(*), min(c.id) FROM {s}.chunks c WHERE NOT EXISTS (SELECT 1 FROM "
                        "{s}.documents d WHERE d.doc_id = c.doc_id AND d.version = c.version)")
    if orphans[0]:
        problems.append(f"{orphans[0]} chunks without a document version (first: {orphans[1]})")
    return problems


def _held_index_versions(self: SQLiteStore | PostgresStore) -> list[str]:
    """A note per index version held beside the live one (built, verified, retired, or being built)."""
    return [f"index version {v.id} ({v.state}) held beside the live one: {v.chunks} chunks of "
            f"{v.versions} versions, invisible to queries" for v in self.index_versions()
            if v.state is not SpaceState.ACTIVE]


def _old_versions_indexed(self: SQLiteStore | PostgresStore) -> list[str]:
    """A note per status other than current: how many such versions (and chunks) are still indexed."""
    return [f"{n} {status} versions still indexed ({int(c)} chunks): searchable only by a question naming "
            "their version" for status, n, c in self._all(
                "SELECT status, count(*), sum(n) FROM (SELECT d.status, d.doc_id, d.version, count(c.id) AS n "
                "FROM {s}.documents d LEFT JOIN {s}.chunks c ON c.doc_id = d.doc_id AND c.version = d.version "
                "WHERE d.status <> 'current' GROUP BY d.status, d.doc_id, d.version) v GROUP BY status "
                "ORDER BY status")]

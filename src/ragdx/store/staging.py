"""Index versions in the SQLite store (docs/ingest.md, "Index versions"): an index built beside the
live one, held in the ``staged_*`` tables and invisible to queries until a switch swaps the two in
one transaction, kept after it for a rollback.

The live index is the chunks table (with FTS5 and the vectors that follow it). Staging writes do
not bump ``index_version`` and are not logged: nothing a query or a cache reads changes until the
switch, which logs one change of no document. A PostgreSQL store keeps no index versions beside
the live one (docs/postgres.md), so this concern has one dialect.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

from ragdx.errors import StoreError
from ragdx.store._common import OpenMode, decoding, now
from ragdx.store.documents import (
    SQLITE_CHUNK_COLUMNS, SQLITE_SECTION_COLUMNS, SQLITE_STORED_CHUNK_COLUMNS, SQLITE_VERSION_COLUMNS,
)
from ragdx.store.lexical import FTS_BM25_B, FTS_BM25_K1, FTS_TOKENIZER
from ragdx.types import (
    Chunk, IndexSettings, IndexVersion, KeywordSettings, ParsedDocument, Section, SpaceState, StoredVersion,
)

if TYPE_CHECKING:
    from ragdx.store.sqlite import SQLiteStore


#: The index version a store starts with: the chunks as ingested (its chunker and parsers are
#: whatever each ingest used; only a version built with 'ragdx index build --chunks' fixes them).
INITIAL_INDEX = "ix_0"


def index_settings(chunker: str | None, parsers: Mapping[str, str] | None,
                   retain_superseded: int | None) -> IndexSettings:
    """An index version's settings with this store's keyword index (FTS5's tokenizer, k1 and b):
    the chunker config's JSON, the parser of each format and the retention (None each: as ingested,
    all)."""
    return IndexSettings(chunker, None if parsers is None else tuple(sorted(parsers.items())),
                         KeywordSettings(FTS_TOKENIZER, FTS_BM25_K1, FTS_BM25_B, retain_superseded))








def _prefixed(alias: str, columns: str) -> str:
    return ", ".join(f"{alias}.{c.strip()}" for c in columns.split(","))


def _sqlite_staging(self: SQLiteStore, sql: str, args: tuple | list = ()) -> sqlite3.Cursor:
    if not self._in_tx:
        raise StoreError("store writes must happen inside store.transaction()")
    return self._db.execute(sql, args)


def sqlite_index_versions(self: SQLiteStore, counted: bool = True) -> list[IndexVersion]:
    """Every index version, oldest first, with how many document versions and chunks it holds
    (the live one: the chunks table; ``counted=False``: 0 and 0, without scanning the chunks)."""
    return [self._counted(v) if counted else v for v in self._index_rows()]


@decoding("index_versions")
def _sqlite_index_rows(self: SQLiteStore, where: str = "", args: tuple = ()) -> list[IndexVersion]:
    """Index versions without their counts (reading them scans the chunks)."""
    if self._schema < 2:  # a store of schema 1 opened read-only: its live index only
        initial = IndexVersion(INITIAL_INDEX, index_settings(None, None, None), SpaceState.ACTIVE, 0, 0, "", "")
        return [initial] if not where or where == "WHERE state = 'active'" else []
    return [IndexVersion(iid, IndexSettings.from_json(body), SpaceState(state), 0, 0, created, updated)
            for iid, body, state, created, updated in self._db.execute(
                f"SELECT id, body, state, created_at, updated_at FROM index_versions {where} "
                "ORDER BY created_at, CAST(SUBSTR(id, 4) AS INTEGER)", args).fetchall()]


def _sqlite_counted(self: SQLiteStore, version: IndexVersion) -> IndexVersion:
    table, where, args = ("chunks", "", ()) if version.state is SpaceState.ACTIVE else \
        ("staged_chunks", "WHERE index_id = ?", (version.id,))
    versions, chunks = self._db.execute(
        f"SELECT COUNT(DISTINCT doc_id || '@' || version), COUNT(*) FROM {table} {where}", args).fetchone()
    return replace(version, versions=versions, chunks=chunks)


def sqlite_index_version_of(self: SQLiteStore, index_id: str, counted: bool = True) -> IndexVersion | None:
    """One index version, with its counts unless not ``counted`` (None: no such version)."""
    found = self._index_rows("WHERE id = ?", (index_id,))
    return (self._counted(found[0]) if counted else found[0]) if found else None


def sqlite_live_index(self: SQLiteStore) -> IndexVersion:
    """The index version queries search (without its counts: ``index_version_of`` has them)."""
    return self._index_rows("WHERE state = 'active'")[0]


def sqlite_register_index(self: SQLiteStore, settings: IndexSettings) -> str:
    """Record a new index version (state ``building``); returns its id (``ix_N``)."""
    row = self._db.execute("SELECT value FROM meta WHERE key = 'index_seq'").fetchone()
    number = int(row[0]) + 1 if row else 1
    self._staging("INSERT OR REPLACE INTO meta VALUES ('index_seq', ?)", (str(number),))
    self._staging("INSERT INTO index_versions VALUES (?, ?, 'building', ?, ?)",
                  (f"ix_{number}", settings.to_json(), now(), now()))
    return f"ix_{number}"


def sqlite_set_index_state(self: SQLiteStore, index_id: str, state: SpaceState, *, was: SpaceState | None = None) -> bool:
    """Set an index version's state (only if it is ``was``, when given). Returns whether it was set."""
    where, args = ("AND state = ?", (SpaceState.parse(was, what="index state"),)) if was is not None else ("", ())
    return self._staging(f"UPDATE index_versions SET state = ?, updated_at = ? WHERE id = ? {where}",
                         (SpaceState.parse(state, what="index state"), now(), index_id, *args)).rowcount == 1


def sqlite_drop_index(self: SQLiteStore, index_id: str) -> bool:
    """Delete an index version that is not live, with everything it holds (its parses,
    sections, chunks and vectors follow by cascade), in the caller's transaction. Returns
    whether one was deleted. Nothing live changes, so the index version counter does not move."""
    return self._staging("DELETE FROM index_versions WHERE id = ? AND state != 'active'",
                         (index_id,)).rowcount == 1


def sqlite_stage_version(self: SQLiteStore, index_id: str, doc_id: str, version: str, parsed: ParsedDocument,
                         sections: Sequence[Section], chunks: Sequence[Chunk], chunker_config: str) -> None:
    """Hold a version's parsed text, sections and chunks in an index version beside the live one."""
    self._staging("DELETE FROM staged_versions WHERE index_id = ? AND doc_id = ? AND version = ?",
                  (index_id, doc_id, version))
    self._staging("INSERT INTO staged_versions VALUES (?,?,?,?,?,?,?)",
                  (index_id, doc_id, version, parsed.parser, json.dumps(list(parsed.warnings)),
                   chunker_config, parsed.text))
    self._insert_rows("staged_", (index_id,), sections, chunks, chunker_config)


def sqlite_stage_unindexed(self: SQLiteStore, index_id: str, doc_id: str, version: str) -> None:
    """Hold a version in an index version without chunks (its retention leaves it out): its
    stored parse is kept as it is."""
    self._staging("INSERT OR REPLACE INTO staged_versions SELECT ?, doc_id, version, parser, "
                  "parse_warnings, chunker_config, parsed_text FROM documents WHERE doc_id = ? "
                  "AND version = ?", (index_id, doc_id, version))


def sqlite_stage_from_live(self: SQLiteStore, index_id: str, chunker_config: str, parsers: Sequence[tuple[str, str]],
                           versions: Sequence[tuple[str, str]]) -> int:
    """Copy into an index version the live chunks (sections, vectors) of those ``versions``
    that the live index chunked with this chunker config and parsed with these ``(format,
    parser)`` pairs: what a rebuild would make again. Returns how many versions were copied."""
    if not parsers or not versions:
        return 0
    self._db.execute("CREATE TEMP TABLE IF NOT EXISTS ragdx_stage (doc_id TEXT, version TEXT)")
    self._db.execute("DELETE FROM temp.ragdx_stage")
    pairs = ",".join("(?, ?)" for _ in parsers)
    self._db.executemany("INSERT INTO temp.ragdx_stage VALUES (?, ?)", versions)
    self._db.execute(
        "DELETE FROM temp.ragdx_stage WHERE NOT EXISTS (SELECT 1 FROM documents d WHERE d.doc_id = "
        "ragdx_stage.doc_id AND d.version = ragdx_stage.version AND d.chunker_config = ? AND "
        f"(d.format, d.parser) IN (VALUES {pairs}) AND EXISTS (SELECT 1 FROM chunks c WHERE "
        "c.doc_id = d.doc_id AND c.version = d.version))", (chunker_config, *[x for p in parsers for x in p]))
    copied = self._db.execute("SELECT COUNT(*) FROM temp.ragdx_stage").fetchone()[0]
    self._copy_live(index_id, "JOIN temp.ragdx_stage t ON t.doc_id = x.doc_id AND t.version = x.version")
    return copied


def _sqlite_copy_live(self: SQLiteStore, index_id: str, only: str = "") -> None:
    """Copy the live parses, sections, chunks and vectors into an index version's staged
    tables: of every stored version, or of those ``only`` (a JOIN on ``x``) keeps."""
    self._staging(f"INSERT OR REPLACE INTO staged_versions SELECT ?, x.doc_id, x.version, x.parser, "
                  f"x.parse_warnings, x.chunker_config, x.parsed_text FROM documents x {only}", (index_id,))
    self._staging(f"INSERT INTO staged_sections SELECT ?, {_prefixed('x', SQLITE_SECTION_COLUMNS)} "
                  f"FROM sections x {only}", (index_id,))
    self._staging(f"INSERT INTO staged_chunks (index_id, {SQLITE_STORED_CHUNK_COLUMNS}) SELECT ?, "
                  f"{_prefixed('x', SQLITE_STORED_CHUNK_COLUMNS)} FROM chunks x {only}", (index_id,))
    self._staging(f"INSERT INTO staged_vectors SELECT ?, x.doc_id, x.version, x.id, v.space_id, "
                  f"v.input_hash, v.vector, v.window_end FROM chunks x {only} JOIN vectors v ON "
                  "v.chunk_rowid = x.rowid", (index_id,))


def sqlite_stage_vectors(self: SQLiteStore, index_id: str, space_id: str, rows: Sequence[tuple[str, str, bytes, int | None]]) -> None:
    """Hold vectors of an index version's chunks: ``(chunk_id, input_hash, bytes, window_end)``."""
    self._db.executemany(
        "INSERT OR REPLACE INTO staged_vectors SELECT index_id, doc_id, version, id, ?, ?, ?, ? "
        "FROM staged_chunks WHERE index_id = ? AND id = ?",
        [(space_id, h, vector, end, index_id, cid) for cid, h, vector, end in rows])


def sqlite_staged_chunks(self: SQLiteStore, index_id: str, without_vector_in: str | None = None) -> list[Chunk]:
    """An index version's chunks that are not duplicates (those without a vector in a space)."""
    where, args = "", ()
    if without_vector_in is not None:
        where, args = ("AND NOT EXISTS (SELECT 1 FROM staged_vectors v WHERE v.index_id = c.index_id "
                       "AND v.space_id = ? AND v.chunk_id = c.id)"), (without_vector_in,)
    columns = _prefixed("c", SQLITE_CHUNK_COLUMNS)
    return [self._chunk_row(r) for r in self._db.execute(
        f"SELECT {columns} FROM staged_chunks c WHERE c.index_id = ? AND c.duplicate_of IS NULL "
        f"{where} ORDER BY c.doc_id, c.version, c.ord", (index_id, *args))]


def sqlite_unstaged_versions(self: SQLiteStore, index_id: str) -> list[StoredVersion]:
    """Stored versions an index version lacks: not held at all (ingested after it was built),
    or current and held without chunks."""
    rows = self._db.execute(
        f"SELECT {_prefixed('d', SQLITE_VERSION_COLUMNS)} FROM documents d WHERE NOT EXISTS "
        "(SELECT 1 FROM staged_versions s WHERE s.index_id = ? AND s.doc_id = d.doc_id AND "
        "s.version = d.version) OR (d.status = 'current' AND NOT EXISTS (SELECT 1 FROM staged_chunks c "
        "WHERE c.index_id = ? AND c.doc_id = d.doc_id AND c.version = d.version)) ORDER BY d.seq",
        (index_id, index_id)).fetchall()
    return [self._version_row(r) for r in rows]


def sqlite_parse_configs(self: SQLiteStore, index_id: str | None = None) -> list[tuple[str, str, str, int]]:
    """How the versions of the live index (or of an index version) were parsed and chunked:
    ``(chunker_config, format, parser, versions)``, most versions first."""
    table, where, args = ("documents", "", ()) if index_id is None else \
        ("staged_versions s JOIN documents d ON d.doc_id = s.doc_id AND d.version = s.version",
         "WHERE s.index_id = ?", (index_id,))
    columns = "chunker_config, format, parser" if index_id is None else "s.chunker_config, d.format, s.parser"
    return [tuple(r) for r in self._db.execute(
        f"SELECT {columns}, COUNT(*) FROM {table} {where} GROUP BY 1, 2, 3 ORDER BY 4 DESC, 1, 2", args)]


def sqlite_switch_index(self: SQLiteStore, index_id: str) -> str:
    """Make an index version live, in the caller's transaction: the live chunks, sections,
    parses and vectors move into the staged tables under the live version's id (kept for a
    rollback), the version's own move in, and every other version is dropped. Document
    rows, access groups, statuses and tombstones are not touched: they are live in both.

    Returns:
        The id of the version replaced (now ``retired``).
    """
    old = self.live_index().id
    if old == index_id:
        return old
    chunks, sections = SQLITE_STORED_CHUNK_COLUMNS, SQLITE_SECTION_COLUMNS
    self._staging("DELETE FROM staged_versions WHERE index_id = ?", (old,))
    self._copy_live(old)
    self._write("DELETE FROM chunks")  # the FTS5 trigger and the vectors' cascade follow
    self._write("DELETE FROM sections")
    self._write("UPDATE documents SET (parser, parse_warnings, chunker_config, parsed_text) = "
                "(SELECT parser, parse_warnings, chunker_config, parsed_text FROM staged_versions s "
                "WHERE s.index_id = ? AND s.doc_id = documents.doc_id AND s.version = documents.version) "
                "WHERE EXISTS (SELECT 1 FROM staged_versions s WHERE s.index_id = ? AND "
                "s.doc_id = documents.doc_id AND s.version = documents.version)", (index_id, index_id))
    self._write(f"INSERT INTO sections SELECT {sections} FROM staged_sections WHERE index_id = ?", (index_id,))
    self._write(f"INSERT INTO chunks ({chunks}) SELECT {chunks} FROM staged_chunks WHERE index_id = ? "
                "ORDER BY doc_id, version, ord", (index_id,))
    self._write("INSERT INTO vectors SELECT c.rowid, s.space_id, s.input_hash, s.vector, s.window_end "
                "FROM staged_vectors s JOIN chunks c ON c.id = s.chunk_id WHERE s.index_id = ? "
                "AND s.space_id IN (SELECT id FROM spaces)", (index_id,))
    # a version being built (or whose build was stopped) is kept: its build goes on beside
    self._staging("DELETE FROM index_versions WHERE id NOT IN (?, ?) AND state != 'building'", (old, index_id))
    self._staging("DELETE FROM staged_versions WHERE index_id = ?", (index_id,))
    self.set_index_state(old, SpaceState.RETIRED)
    self.set_index_state(index_id, SpaceState.ACTIVE)
    self.log("index", None, None, f"switched {old} -> {index_id}")
    return old


def sqlite_apply_retention(self: SQLiteStore, doc_ids: Sequence[str] | None = None) -> list[tuple[str, str]]:
    """Take out of the live index the superseded and expired versions beyond the newest
    ``retain_superseded`` of each document (the live index version's setting): their chunks
    (and vectors) are deleted, so N, average length and document frequencies are those of
    the versions kept; the versions' text stays stored (recheck, evidence, a rollback).

    Returns:
        The ``(doc_id, version)`` pairs taken out (each logged).
    """
    if self._schema < 2:
        return []
    keep = self.live_index().retain_superseded
    if keep is None:
        return []
    where, args = "", ()
    if doc_ids is not None:
        if not doc_ids:
            return []
        where, args = f"AND doc_id IN ({','.join('?' * len(doc_ids))})", tuple(doc_ids)
    gone = [(d, v) for d, v in self._db.execute(
        "SELECT doc_id, version FROM (SELECT doc_id, version, ROW_NUMBER() OVER (PARTITION BY doc_id "
        f"ORDER BY seq DESC) AS n FROM documents WHERE status != 'current' {where}) r WHERE n > ? AND "
        "EXISTS (SELECT 1 FROM chunks c WHERE c.doc_id = r.doc_id AND c.version = r.version) "
        "ORDER BY doc_id, version", (*args, keep)).fetchall()]
    for doc_id, version in gone:
        self._write("DELETE FROM chunks WHERE doc_id = ? AND version = ?", (doc_id, version))
        self.log("unindex", doc_id, version, f"beyond the {keep} newest superseded or expired "
                 "versions kept indexed")
    return gone


def sqlite_materialize(self: SQLiteStore, index_id: str, path: Path) -> "SQLiteStore":
    """A new store at ``path`` holding an index version as its live index (the documents it
    holds, their access groups and tombstones): what ``ragdx index verify`` searches and
    checks."""
    type(self)(path, OpenMode.CREATE).close()
    self._db.execute("ATTACH DATABASE ? AS shadow", (str(path),))
    try:
        self._db.execute("BEGIN")
        try:
            held = ("EXISTS (SELECT 1 FROM staged_versions s WHERE s.index_id = :i AND "
                    "s.doc_id = x.doc_id AND s.version = x.version)")
            self._db.execute(
                "INSERT INTO shadow.documents SELECT x.doc_id, x.version, x.seq, x.content_hash, x.path, "
                "x.title, x.format, x.status, x.updated_at, x.metadata, s.parser, s.parse_warnings, "
                "s.chunker_config, x.raw_text, s.parsed_text, x.ingested_at FROM documents x JOIN "
                "staged_versions s ON s.doc_id = x.doc_id AND s.version = x.version WHERE s.index_id = :i",
                {"i": index_id})
            self._db.execute(f"INSERT INTO shadow.acl SELECT x.* FROM acl x WHERE {held}", {"i": index_id})
            self._db.execute("INSERT INTO shadow.tombstones SELECT * FROM tombstones")
            self._db.execute(f"INSERT INTO shadow.sections SELECT {SQLITE_SECTION_COLUMNS} FROM "
                             "staged_sections WHERE index_id = :i", {"i": index_id})
            self._db.execute(f"INSERT INTO shadow.chunks ({SQLITE_STORED_CHUNK_COLUMNS}) SELECT "
                             f"{SQLITE_STORED_CHUNK_COLUMNS} FROM staged_chunks WHERE index_id = :i "
                             "ORDER BY doc_id, version, ord", {"i": index_id})
            self._db.execute("UPDATE shadow.meta SET value = '1' WHERE key = 'index_version'")
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
    finally:
        self._db.execute("DETACH DATABASE shadow")
    return type(self)(path, OpenMode.WRITE)

"""Index versions (docs/ingest.md, "Index versions"): an index built beside the live one, held in
the ``staged_*`` tables and invisible to queries until a switch swaps the two in one transaction,
kept after it for a rollback. Both stores have them, the SQL side by side (``sqlite_``, ``pg_``,
and the functions both share, written in PostgreSQL's form).

The live index is the chunks table (with FTS5 or the BM25 postings, and the vectors that follow
it). Staging writes do not bump ``index_version`` and are not logged: nothing a query or a cache
reads changes until the switch, which logs one change of no document.

On PostgreSQL the staged tables are the coordinator's own, unpartitioned even when the store is
sharded: a switch sends the version's rows to the live tables through the store's write path
(tokens, BM25 statistics and postings, row ids, vectors), which puts each on its shard.
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

import numpy as np

from ragdx.errors import StoreError
from ragdx.store._common import OpenMode, decoding, now
from ragdx.store.documents import (
    PG_CHUNK_COLUMNS, PG_VERSIONS, SQLITE_CHUNK_COLUMNS, SQLITE_SECTION_COLUMNS, SQLITE_STORED_CHUNK_COLUMNS,
    SQLITE_VERSION_COLUMNS, chunk_values, section_values,
)
from ragdx.store.lexical import FTS_BM25_B, FTS_BM25_K1, FTS_TOKENIZER
from ragdx.types import (
    Chunk, IndexSettings, IndexVersion, KeywordSettings, ParsedDocument, Section, SpaceState, StoredVersion,
)

if TYPE_CHECKING:
    from ragdx.store.postgres import PostgresStore
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
    """A write to the staged side (not logged, and no change of ``index_version``)."""
    if not self._in_tx:
        raise StoreError("store writes must happen inside store.transaction()")
    return self._db.execute(sql.replace("{s}.", "").replace("%s", "?"), args)


def _pg_staging(self: PostgresStore, sql: str, args: Sequence[Any] | dict = ()) -> Any:
    """A write to the staged side (not logged, and no change of ``index_version``)."""
    if not self._writing():
        raise StoreError("store writes must happen inside store.transaction()")
    self._flush()  # the statement may read rows this transaction buffered
    return self._tx.execute(sql.replace("{s}", self.schema), args)


def index_versions(self: SQLiteStore | PostgresStore, counted: bool = True) -> list[IndexVersion]:
    """Every index version, oldest first, with how many document versions and chunks it holds
    (the live one: the chunks table; ``counted=False``: 0 and 0, without scanning the chunks)."""
    return [self._counted(v) if counted else v for v in self._index_rows()]


@decoding("index_versions")
def _index_rows(self: SQLiteStore | PostgresStore, where: str = "", args: tuple = ()) -> list[IndexVersion]:
    """Index versions without their counts (reading them scans the chunks)."""
    return [IndexVersion(iid, IndexSettings.from_json(body), SpaceState(state), 0, 0, created, updated)
            for iid, body, state, created, updated in self._all(
                f"SELECT id, body, state, created_at, updated_at FROM {{s}}.index_versions {where} "
                "ORDER BY created_at, CAST(SUBSTR(id, 4) AS INTEGER)", args)]


def _sqlite_index_rows(self: SQLiteStore, where: str = "", args: tuple = ()) -> list[IndexVersion]:
    if self._schema < 2:  # a store of schema 1 opened read-only: its live index only
        initial = IndexVersion(INITIAL_INDEX, index_settings(None, None, None), SpaceState.ACTIVE, 0, 0, "", "")
        return [initial] if not where or where == "WHERE state = 'active'" else []
    return _index_rows(self, where, args)


def _counted(self: SQLiteStore | PostgresStore, version: IndexVersion) -> IndexVersion:
    table, where, args = ("chunks", "", ()) if version.state is SpaceState.ACTIVE else \
        ("staged_chunks", "WHERE index_id = %s", (version.id,))
    versions, chunks = self._one(
        f"SELECT COUNT(DISTINCT doc_id || '@' || version), COUNT(*) FROM {{s}}.{table} {where}", args)
    return replace(version, versions=versions, chunks=chunks)


def index_version_of(self: SQLiteStore | PostgresStore, index_id: str, counted: bool = True) -> IndexVersion | None:
    """One index version, with its counts unless not ``counted`` (None: no such version)."""
    found = self._index_rows("WHERE id = %s", (index_id,))
    return (self._counted(found[0]) if counted else found[0]) if found else None


def live_index(self: SQLiteStore | PostgresStore) -> IndexVersion:
    """The index version queries search (without its counts: ``index_version_of`` has them)."""
    return self._index_rows("WHERE state = 'active'")[0]


def register_index(self: SQLiteStore | PostgresStore, settings: IndexSettings) -> str:
    """Record a new index version (state ``building``); returns its id (``ix_N``)."""
    row = self._one("SELECT value FROM {s}.meta WHERE key = 'index_seq'")
    number = int(row[0]) + 1 if row else 1
    self._staging("INSERT INTO {s}.meta VALUES ('index_seq', %s) ON CONFLICT (key) DO UPDATE "
                  "SET value = excluded.value", (str(number),))
    self._staging("INSERT INTO {s}.index_versions VALUES (%s, %s, 'building', %s, %s)",
                  (f"ix_{number}", settings.to_json(), now(), now()))
    return f"ix_{number}"


def set_index_state(self: SQLiteStore | PostgresStore, index_id: str, state: SpaceState, *,
                    was: SpaceState | None = None) -> bool:
    """Set an index version's state (only if it is ``was``, when given). Returns whether it was set."""
    where, args = ("AND state = %s", (SpaceState.parse(was, what="index state").value,)) \
        if was is not None else ("", ())
    return self._staging(f"UPDATE {{s}}.index_versions SET state = %s, updated_at = %s WHERE id = %s {where}",
                         (SpaceState.parse(state, what="index state").value, now(), index_id, *args)).rowcount == 1


def drop_index(self: SQLiteStore | PostgresStore, index_id: str) -> bool:
    """Delete an index version that is not live, with everything it holds (its parses,
    sections, chunks and vectors follow by cascade), in the caller's transaction. Returns
    whether one was deleted. Nothing live changes, so the index version counter does not move."""
    return self._staging("DELETE FROM {s}.index_versions WHERE id = %s AND state != 'active'",
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


def parse_configs(self: SQLiteStore | PostgresStore, index_id: str | None = None) -> list[tuple[str, str, str, int]]:
    """How the versions of the live index (or of an index version) were parsed and chunked:
    ``(chunker_config, format, parser, versions)``, most versions first."""
    table, where, args = ("{s}.documents", "", ()) if index_id is None else \
        ("{s}.staged_versions s JOIN {s}.documents d ON d.doc_id = s.doc_id AND d.version = s.version",
         "WHERE s.index_id = %s", (index_id,))
    columns = "chunker_config, format, parser" if index_id is None else "s.chunker_config, d.format, s.parser"
    return [tuple(r) for r in self._all(
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


def apply_retention(self: SQLiteStore | PostgresStore, doc_ids: Sequence[str] | None = None) -> list[tuple[str, str]]:
    """Take out of the live index the superseded and expired versions beyond the newest
    ``retain_superseded`` of each document (the live index version's setting): their chunks
    (and vectors) are deleted, so N, average length and document frequencies are those of
    the versions kept; the versions' text stays stored (recheck, evidence, a rollback).

    Returns:
        The ``(doc_id, version)`` pairs taken out (each logged).
    """
    keep = self.live_index().retain_superseded  # a store of SQLite schema 1: None
    if keep is None:
        return []
    where, args = "", ()
    if doc_ids is not None:
        if not doc_ids:
            return []
        where, args = f"AND doc_id IN ({','.join(['%s'] * len(doc_ids))})", tuple(doc_ids)
    gone = [(d, v) for d, v in self._all(
        "SELECT doc_id, version FROM (SELECT doc_id, version, ROW_NUMBER() OVER (PARTITION BY doc_id "
        f"ORDER BY seq DESC) AS n FROM {{s}}.documents WHERE status != 'current' {where}) r WHERE n > %s AND "
        "EXISTS (SELECT 1 FROM {s}.chunks c WHERE c.doc_id = r.doc_id AND c.version = r.version) "
        "ORDER BY doc_id, version", (*args, keep))]
    for doc_id, version in gone:
        self._unindex(doc_id, version)
        self.log("unindex", doc_id, version, f"beyond the {keep} newest superseded or expired "
                 "versions kept indexed")
    return gone


def _sqlite_unindex(self: SQLiteStore, doc_id: str, version: str) -> None:
    """Delete a version's chunks from the live index (its vectors follow by cascade)."""
    self._write("DELETE FROM chunks WHERE doc_id = ? AND version = ?", (doc_id, version))


def _pg_unindex(self: PostgresStore, doc_id: str, version: str) -> None:
    """Delete a version's chunks and vectors from the live index (its sections stay, as in SQLite)."""
    self._flush()
    self._drop_pending(lambda d, v: (d, v) == (doc_id, version))
    for table in [*self._chunk_derived(), "chunks"]:
        self._write(f"DELETE FROM {{s}}.{table} WHERE doc_id = %s AND version = %s", (doc_id, version))


#: the temporary folders of SQLite verify's scratch stores (in the system's temporary folder)
_SCRATCH_FOLDER = "ragdx-verify-"


@contextmanager
def sqlite_materialized(self: SQLiteStore, index_id: str) -> Iterator[SQLiteStore]:
    """A new store holding an index version as its live index (the documents it holds, their
    access groups and tombstones): what ``ragdx index verify`` searches and checks. It is a file
    in a temporary folder, deleted when the block ends. While it lives, this process holds a lock
    on a file in the folder; folders nobody holds (a verify killed before it could delete its
    own) are deleted first."""
    _drop_scratch_folders()
    with tempfile.TemporaryDirectory(prefix=_SCRATCH_FOLDER) as tmp, open(Path(tmp) / "held", "w") as held:
        _lock(held)
        shadow = _sqlite_materialize(self, index_id, Path(tmp) / "candidate.db")
        try:
            yield shadow
        finally:
            shadow.close()


def _lock(handle: Any, wait: bool = True) -> bool:
    """Lock an open file for this process (whether it was locked; no locks where fcntl is missing)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: scratch folders are left to the system
        return False
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    return True


def _drop_scratch_folders(older: float = 600.0) -> list[Path]:
    """Delete the scratch folders of SQLite verifies that no process holds: those a killed verify
    left (one killed before it took its lock counts when older than ``older`` seconds)."""
    import shutil
    import time
    dropped = []
    for folder in Path(tempfile.gettempdir()).glob(f"{_SCRATCH_FOLDER}*"):
        try:
            if (folder / "held").exists():
                with open(folder / "held") as held:
                    if not _lock(held, wait=False):
                        continue
            elif time.time() - folder.stat().st_mtime < older:
                continue
            shutil.rmtree(folder)
            dropped.append(folder)
        except OSError:  # another process's, or gone meanwhile
            continue
    return dropped


def _sqlite_materialize(self: SQLiteStore, index_id: str, path: Path) -> "SQLiteStore":
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


# -- PostgreSQL -------------------------------------------------------------------------------

_PG_SECTION_COLUMNS = "id, doc_id, version, start_at, end_at, heading_path, level, parent_id"
#: a chunk's stored columns without its row id and tokens (:func:`ragdx.store.documents.chunk_values`)
_PG_STORED_CHUNK_COLUMNS = ("id, doc_id, version, ord, start_at, end_at, text, kind, heading_path, section_id, "
                            "prefix, header_start, header_end, token_count, prev_id, next_id, duplicate_of, "
                            "over_limit, config_id")
#: versions per batch when an index version's rows are read back (a switch, a verify)
_PG_BATCH = 200
_PG_STAGED_TABLES = ("staged_versions", "staged_sections", "staged_chunks", "staged_vectors")


def pg_stage_version(self: PostgresStore, index_id: str, doc_id: str, version: str, parsed: ParsedDocument,
                     sections: Sequence[Section], chunks: Sequence[Chunk], chunker_config: str) -> None:
    """Hold a version's parsed text, sections and chunks in an index version beside the live one."""
    self._staging("DELETE FROM {s}.staged_versions WHERE index_id = %s AND doc_id = %s AND version = %s",
                  (index_id, doc_id, version))
    self._staging("INSERT INTO {s}.staged_versions VALUES (%s, %s, %s, %s, %s, %s, %s)",
                  (index_id, doc_id, version, parsed.parser, json.dumps(list(parsed.warnings)),
                   chunker_config, parsed.text))
    cursor, s = self._tx.cursor(), self.schema
    if sections:
        cursor.executemany(f"INSERT INTO {s}.staged_sections (index_id, {_PG_SECTION_COLUMNS}) VALUES "
                           f"({', '.join(['%s'] * 9)})", [(index_id, *section_values(x)) for x in sections])
    if chunks:
        cursor.executemany(f"INSERT INTO {s}.staged_chunks (index_id, {_PG_STORED_CHUNK_COLUMNS}) VALUES "
                           f"({', '.join(['%s'] * 20)})", [(index_id, *chunk_values(i, c)) for i, c in enumerate(chunks)])
        self._staging("INSERT INTO {s}.configs VALUES (%s, 'chunker', %s) ON CONFLICT (id) DO NOTHING",
                      (chunks[0].config_id, chunker_config))


def pg_stage_unindexed(self: PostgresStore, index_id: str, doc_id: str, version: str) -> None:
    """Hold a version in an index version without chunks (its retention leaves it out): its
    stored parse is kept as it is."""
    key = (index_id, doc_id, version)
    self._staging("DELETE FROM {s}.staged_versions WHERE index_id = %s AND doc_id = %s AND version = %s", key)
    self._staging("INSERT INTO {s}.staged_versions SELECT %s, doc_id, version, parser, parse_warnings, "
                  "chunker_config, parsed_text FROM {s}.documents WHERE doc_id = %s AND version = %s", key)


def pg_stage_from_live(self: PostgresStore, index_id: str, chunker_config: str, parsers: Sequence[tuple[str, str]],
                       versions: Sequence[tuple[str, str]]) -> int:
    """Copy into an index version the live chunks (sections, vectors) of those ``versions``
    that the live index chunked with this chunker config and parsed with these ``(format,
    parser)`` pairs: what a rebuild would make again. Returns how many versions were copied."""
    if not parsers or not versions:
        return 0
    same = self._all(
        "SELECT d.doc_id, d.version FROM unnest(%s::text[], %s::text[]) AS w(doc_id, version) JOIN "
        "{s}.documents d ON d.doc_id = w.doc_id AND d.version = w.version WHERE d.chunker_config = %s AND "
        "(d.format, d.parser) IN (SELECT * FROM unnest(%s::text[], %s::text[])) AND EXISTS (SELECT 1 FROM "
        "{s}.chunks c WHERE c.doc_id = d.doc_id AND c.version = d.version)",
        ([d for d, _ in versions], [v for _, v in versions], chunker_config,
         [f for f, _ in parsers], [p for _, p in parsers]))
    if same:
        _pg_copy_live(self, index_id, same)
    return len(same)


def _pg_copy_live(self: PostgresStore, index_id: str, versions: Sequence[tuple[str, str]] | None = None) -> None:
    """Copy the live parses, sections, chunks and vectors into an index version's staged tables:
    of every stored version, or of these ``versions``."""
    only, args = "", ()
    if versions is not None:
        only = ("JOIN unnest(%s::text[], %s::text[]) AS w(doc_id, version) ON w.doc_id = x.doc_id "
                "AND w.version = x.version")
        args = ([d for d, _ in versions], [v for _, v in versions])
    self._flush()
    self._staging("INSERT INTO {s}.staged_versions SELECT %s, x.doc_id, x.version, x.parser, x.parse_warnings, "
                  f"x.chunker_config, x.parsed_text FROM {{s}}.documents x {only}", (index_id, *args))
    self._staging(f"INSERT INTO {{s}}.staged_sections (index_id, {_PG_SECTION_COLUMNS}) SELECT %s, "
                  f"{_prefixed('x', _PG_SECTION_COLUMNS)} FROM {{s}}.sections x {only}", (index_id, *args))
    self._staging(f"INSERT INTO {{s}}.staged_chunks (index_id, {_PG_STORED_CHUNK_COLUMNS}) SELECT %s, "
                  f"{_prefixed('x', _PG_STORED_CHUNK_COLUMNS)} FROM {{s}}.chunks x {only}", (index_id, *args))
    for space_id, n in self._all("SELECT id, n FROM {s}.spaces"):
        self._staging(f"INSERT INTO {{s}}.staged_vectors SELECT %s, x.doc_id, x.version, x.id, %s, v.input_hash, "
                      f"v.embedding::real[], v.window_end FROM {{s}}.chunks x {only} JOIN {{s}}.vec_{n} v "
                      "ON v.chunk_rowid = x.rowid AND v.doc_id = x.doc_id", (index_id, space_id, *args))


def pg_stage_vectors(self: PostgresStore, index_id: str, space_id: str,
                     rows: Sequence[tuple[str, str, bytes, int | None]]) -> None:
    """Hold vectors of an index version's chunks: ``(chunk_id, input_hash, bytes, window_end)``."""
    if not self._writing():
        raise StoreError("store writes must happen inside store.transaction()")
    self._tx.cursor().executemany(
        f"INSERT INTO {self.schema}.staged_vectors SELECT index_id, doc_id, version, id, %s, %s, %s::real[], %s "
        f"FROM {self.schema}.staged_chunks WHERE index_id = %s AND id = %s ON CONFLICT (index_id, space_id, "
        "chunk_id) DO UPDATE SET input_hash = EXCLUDED.input_hash, vector = EXCLUDED.vector, "
        "window_end = EXCLUDED.window_end",
        [(space_id, h, np.frombuffer(vector, np.float32).tolist(), end, index_id, cid)
         for cid, h, vector, end in rows])


def _pg_analyzed(self: PostgresStore) -> None:
    """Refresh the planner's statistics of the staged tables before a read that joins them: a build
    or a switch changes tens of thousands of their rows at once, long before autovacuum looks, and
    on stale statistics the planner joins them by nested loops (the chunks lacking a vector, at
    5,370 staged chunks: 3.6 s against 6 ms after ANALYZE; at 27,342, a rollback took 82 s)."""
    if self.mode is not OpenMode.READ:
        with self._conn() as conn:
            conn.execute(f"ANALYZE {', '.join(f'{self.schema}.{t}' for t in _PG_STAGED_TABLES)}")


def pg_staged_chunks(self: PostgresStore, index_id: str, without_vector_in: str | None = None) -> list[Chunk]:
    """An index version's chunks that are not duplicates (those without a vector in a space)."""
    _pg_analyzed(self)
    where, args = "", ()
    if without_vector_in is not None:
        where, args = ("AND NOT EXISTS (SELECT 1 FROM {s}.staged_vectors v WHERE v.index_id = c.index_id "
                       "AND v.space_id = %s AND v.chunk_id = c.id)"), (without_vector_in,)
    return [self._chunk_row(r) for r in self._all(
        f"SELECT {PG_CHUNK_COLUMNS} FROM {{s}}.staged_chunks c WHERE c.index_id = %s AND c.duplicate_of IS NULL "
        f"{where} ORDER BY c.doc_id, c.version, c.ord", (index_id, *args))]


def pg_unstaged_versions(self: PostgresStore, index_id: str) -> list[StoredVersion]:
    """Stored versions an index version lacks: not held at all (ingested after it was built),
    or current and held without chunks."""
    _pg_analyzed(self)
    return [self._version_row(r) for r in self._all(
        PG_VERSIONS + " WHERE NOT EXISTS (SELECT 1 FROM {s}.staged_versions s WHERE s.index_id = %s AND "
        "s.doc_id = d.doc_id AND s.version = d.version) OR (d.status = 'current' AND NOT EXISTS (SELECT 1 "
        "FROM {s}.staged_chunks c WHERE c.index_id = %s AND c.doc_id = d.doc_id AND c.version = d.version)) "
        "ORDER BY d.seq", (index_id, index_id))]


def pg_switch_index(self: PostgresStore, index_id: str) -> str:
    """Make an index version live, in the caller's transaction: the live chunks, sections,
    parses and vectors move into the staged tables under the live version's id (kept for a
    rollback), the version's own go live through the store's write path (tokens, BM25
    statistics, postings and row ids made again; each row to its shard), and every other
    version is dropped. Document rows, access groups, statuses and tombstones are not touched:
    they are live in both.

    Returns:
        The id of the version replaced (now ``retired``).
    """
    old = self.live_index().id
    if old == index_id:
        return old
    self._staging("DELETE FROM {s}.staged_versions WHERE index_id = %s", (old,))
    _pg_copy_live(self, old)
    self._drop_pending(lambda doc_id, version: True)
    # the new chunks have no statement vectors until the next ingest or 'ragdx index build' (as in SQLite)
    for table in [*self._chunk_derived(), "chunks", "sections"]:
        self._write(f"DELETE FROM {{s}}.{table}")  # the statistics' trigger follows the chunks
    self._write("UPDATE {s}.documents d SET parser = x.parser, parse_warnings = x.parse_warnings, "
                "chunker_config = x.chunker_config, parsed_text = x.parsed_text FROM {s}.staged_versions x "
                "WHERE x.index_id = %s AND x.doc_id = d.doc_id AND x.version = d.version", (index_id,))
    for batch in _pg_staged_batches(self, index_id):
        for _, _, config, sections, chunks in batch:
            self._buffer_chunks(sections, chunks, config)
    spaces = [space_id for (space_id,) in self._all("SELECT id FROM {s}.spaces")]
    for space_id in spaces:
        after = ""
        while True:
            rows = self._all("SELECT chunk_id, input_hash, vector, window_end FROM {s}.staged_vectors WHERE "
                             "index_id = %s AND space_id = %s AND chunk_id > %s ORDER BY chunk_id LIMIT 2000",
                             (index_id, space_id, after))
            if not rows:
                break
            self.write_vectors(space_id, [(cid, h, np.asarray(v, np.float32).tobytes(), end)
                                          for cid, h, v, end in rows])
            after = rows[-1][0]
    # a version being built (or whose build was stopped) is kept: its build goes on beside
    self._staging("DELETE FROM {s}.index_versions WHERE id NOT IN (%s, %s) AND state != 'building'",
                  (old, index_id))
    self._staging("DELETE FROM {s}.staged_versions WHERE index_id = %s", (index_id,))
    self.set_index_state(old, SpaceState.RETIRED)
    self.set_index_state(index_id, SpaceState.ACTIVE)
    self.log("index", None, None, f"switched {old} -> {index_id}")
    return old


def _pg_staged_batches(self: PostgresStore, index_id: str) -> Iterator[list[tuple[str, str, str, list[Section], list[Chunk]]]]:
    """An index version's versions in the order they were stored, a batch at a time: each one's
    ``(doc_id, version, chunker config, sections, chunks)``, read back from the staged tables."""
    _pg_analyzed(self)
    held = self._all("SELECT x.doc_id, x.version, x.chunker_config FROM {s}.staged_versions x JOIN {s}.documents d "
                     "ON d.doc_id = x.doc_id AND d.version = x.version WHERE x.index_id = %s ORDER BY d.seq",
                     (index_id,))
    for at in range(0, len(held), _PG_BATCH):
        batch = held[at:at + _PG_BATCH]
        keys = ([d for d, _, _ in batch], [v for _, v, _ in batch])
        pick = ("JOIN unnest(%s::text[], %s::text[]) AS w(doc_id, version) ON w.doc_id = x.doc_id AND "
                "w.version = x.version WHERE x.index_id = %s")
        sections: dict[tuple[str, str], list[Section]] = {}
        for row in self._all(f"SELECT {_prefixed('x', _PG_SECTION_COLUMNS)} FROM {{s}}.staged_sections x {pick} "
                             "ORDER BY x.start_at, x.level", (*keys, index_id)):
            sections.setdefault((row[1], row[2]), []).append(self._section_row(row))
        chunks: dict[tuple[str, str], list[Chunk]] = {}
        columns = PG_CHUNK_COLUMNS.replace("c.", "x.")
        for row in self._all(f"SELECT {columns} FROM {{s}}.staged_chunks x {pick} ORDER BY x.ord", (*keys, index_id)):
            chunks.setdefault((row[1], row[2]), []).append(self._chunk_row(row))
        yield [(d, v, config, sections.get((d, v), []), chunks.get((d, v), [])) for d, v, config in batch]


def pg_fill(self: PostgresStore, shadow: PostgresStore, index_id: str) -> None:
    """Write into ``shadow``, in one transaction, the versions an index version holds (in the
    order they were stored) with its parses, sections and chunks, their documents' attributes
    and access groups, and the tombstones."""
    stored = {(v.document.doc_id, v.document.version): v.document for v in self.versions()}
    with shadow.transaction():
        for batch in _pg_staged_batches(self, index_id):
            texts = {(d, v): rest for d, v, *rest in self._all(
                "SELECT x.doc_id, x.version, d.raw_text, x.parser, x.parse_warnings, x.parsed_text FROM "
                "{s}.staged_versions x JOIN unnest(%s::text[], %s::text[]) AS w(doc_id, version) ON "
                "w.doc_id = x.doc_id AND w.version = x.version JOIN {s}.documents d ON d.doc_id = x.doc_id "
                "AND d.version = x.version WHERE x.index_id = %s",
                ([b[0] for b in batch], [b[1] for b in batch], index_id))}
            for doc_id, version, config, sections, chunks in batch:
                document = stored[(doc_id, version)]
                raw, parser, warnings, parsed = texts[(doc_id, version)]
                shadow.insert_version(document, raw, ParsedDocument(parsed, (), document.title, document.format,
                                                                    parser, tuple(json.loads(warnings))),
                                      tuple(sections), tuple(chunks), config)
        for row in self._all("SELECT doc_id, deleted_at, versions FROM {s}.tombstones"):
            shadow._write("INSERT INTO {s}.tombstones VALUES (%s, %s, %s)", row)

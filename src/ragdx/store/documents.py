"""Documents in the stores: each version's row (text, status, parse), its sections and chunks,
the tombstones of deleted documents and the update log; written inside a store's transaction,
read by id, by version, in reading order.

The two dialects differ where the backends do: SQLite names the span columns ``start``/``end``
and takes ``?``; PostgreSQL names them ``start_at``/``end_at``, takes ``%s``, buffers a
transaction's chunks and writes them by ``COPY`` (:func:`_pg_flush_chunks`), and reads a
version's groups by a join rather than a second query.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Sequence

from ragdx.errors import InputError, StoreError
from ragdx.store._attributes import attribute_changes
from ragdx.store._common import decoding, now
from ragdx.store.tokens import chunk_terms, tsv_lexeme
from ragdx.types import Chunk, ChunkKind, Document, DocStatus, LogEntry, ParsedDocument, Section, StoredVersion

if TYPE_CHECKING:
    from ragdx.store.postgres import PostgresStore
    from ragdx.store.sqlite import SQLiteStore

#: The stored columns of a chunk and a section (the live tables, and the staged ones after ``index_id``).
SQLITE_STORED_CHUNK_COLUMNS = ("id, doc_id, version, ord, start, end, text, kind, heading_path, section_id, "
                         "prefix, header_start, header_end, token_count, prev_id, next_id, "
                         "duplicate_of, over_limit, config_id")
SQLITE_SECTION_COLUMNS = "id, doc_id, version, start, end, heading_path, level, parent_id"
SQLITE_VERSION_COLUMNS = ("doc_id, version, seq, content_hash, path, title, format, status, "
                    "updated_at, metadata, parser, parse_warnings, chunker_config, ingested_at")
SQLITE_CHUNK_COLUMNS = ("id, doc_id, version, start, end, text, kind, heading_path, section_id, "
                        "prefix, header_start, header_end, token_count, prev_id, next_id, "
                        "duplicate_of, over_limit, config_id")
#: a chunk's columns on the alias ``c`` (what :func:`_chunk_row` decodes)
SQLITE_CHUNK_COLUMNS_C = ", ".join("c." + c.strip() for c in SQLITE_CHUNK_COLUMNS.split(","))

PG_SECTION_TYPES = ("id text, doc_id text, version text, start_at int, end_at int, heading_path text, "
                  "level int, parent_id text")
PG_CHUNK_TYPES = ("rowid bigint, id text, doc_id text, version text, ord int, start_at int, end_at int, "
                "text text, kind text, heading_path text, section_id text, prefix text, header_start int, "
                "header_end int, token_count int, prev_id text, next_id text, duplicate_of text, "
                "over_limit boolean, config_id text, lexemes text[], tf jsonb, length int")
PG_CHUNK_SELECT = ("rowid, id, doc_id, version, ord, start_at, end_at, text, kind, heading_path, section_id, "
                 "prefix, header_start, header_end, token_count, prev_id, next_id, duplicate_of, "
                 "over_limit, config_id, array_to_tsvector(lexemes), tf, length")
PG_CHUNK_COLUMNS = ("c.id, c.doc_id, c.version, c.start_at, c.end_at, c.text, c.kind, c.heading_path, "
                  "c.section_id, c.prefix, c.header_start, c.header_end, c.token_count, c.prev_id, "
                  "c.next_id, c.duplicate_of, c.over_limit, c.config_id")
# a search hit's chunk row, its rowid and its version's status, read by the statement that
# found it (``{sfx}``: a part's tables, or none on one server): so a search on every shard
# takes one round trip, not one for its hits, one for their chunks and one for their statuses
PG_HIT_COLUMNS = PG_CHUNK_COLUMNS + ", c.rowid, coalesce(d.status, 'current')"
PG_HIT_STATUS = ("LEFT JOIN {{s}}.documents{sfx} d ON d.doc_id = c.doc_id AND d.version = c.version")
PG_VERSION_COLUMNS = ("d.doc_id, d.version, d.seq, d.content_hash, d.path, d.title, d.format, d.status, "
                    "d.updated_at, d.metadata, d.parser, d.parse_warnings, d.chunker_config, "
                    "d.ingested_at, a.groups")
PG_VERSIONS = ("SELECT " + PG_VERSION_COLUMNS + " FROM {s}.documents d LEFT JOIN {s}.acl a "
             "ON a.doc_id = d.doc_id AND a.version = d.version")
#: a section's columns, named alike in both stores (what :func:`_section_row` decodes)
SQLITE_SECTION_SELECT = ("SELECT id, doc_id, version, start AS start_at, end AS end_at, heading_path, level, "
                         "parent_id FROM {s}.sections")
PG_SECTION_SELECT = "SELECT id, doc_id, version, start_at, end_at, heading_path, level, parent_id FROM {s}.sections"


def sqlite_insert_version(self: SQLiteStore, document: Document, raw_text: str, parsed: ParsedDocument,
                          sections: tuple[Section, ...], chunks: tuple[Chunk, ...],
                          chunker_config: str) -> None:
    """Store a new document version with its text, access groups, sections and chunks."""
    seq = self._db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM documents").fetchone()[0]
    self._write(
        "INSERT INTO documents VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (document.doc_id, document.version, seq, document.content_hash, document.path,
         document.title, document.format, document.status.value, document.updated_at,
         json.dumps(dict(document.metadata), sort_keys=True), parsed.parser,
         json.dumps(list(parsed.warnings)), chunker_config, raw_text, parsed.text, now()))
    self._write_acl(document)
    self._write_chunks(document, sections, chunks, chunker_config)
    self._db.execute("DELETE FROM tombstones WHERE doc_id = ?", (document.doc_id,))
    self.log("add", document.doc_id, document.version,
             f"{len(chunks)} chunks, status {document.status.value}, acl {list(document.acl)}")


def pg_insert_version(self: PostgresStore, document: Document, raw_text: str, parsed: ParsedDocument,
                      sections: tuple[Section, ...], chunks: tuple[Chunk, ...],
                      chunker_config: str) -> None:
    """Store a new document version with its text, access groups, sections and chunks."""
    if self._tx is None:
        raise StoreError("store writes must happen inside store.transaction()")
    # the version's rows are buffered, as its chunks are: no round trip per version
    self._buffer(
        "INSERT INTO {s}.documents VALUES (%s,%s,nextval('{s}.doc_seq'),%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
        (document.doc_id, document.version, document.content_hash, document.path, document.title,
         document.format, document.status.value, document.updated_at,
         json.dumps(dict(document.metadata), sort_keys=True), parsed.parser,
         json.dumps(list(parsed.warnings)), chunker_config, raw_text, parsed.text, now()))
    self._buffer("INSERT INTO {s}.acl VALUES (%s, %s, %s)",
                 (document.doc_id, document.version, sorted(set(document.acl))))
    self._buffer("DELETE FROM {s}.tombstones WHERE doc_id = %s", (document.doc_id,))
    self.log("add", document.doc_id, document.version,
             f"{len(chunks)} chunks, status {document.status.value}, acl {list(document.acl)}")
    self._write_chunks(document, sections, chunks, chunker_config, new=True)


def _sqlite_write_chunks(self: SQLiteStore, document: Document, sections: tuple[Section, ...],
                         chunks: tuple[Chunk, ...], chunker_config: str) -> None:
    key = (document.doc_id, document.version)
    self._write("DELETE FROM chunks WHERE doc_id = ? AND version = ?", key)
    self._write("DELETE FROM sections WHERE doc_id = ? AND version = ?", key)
    self._insert_rows("", (), sections, chunks, chunker_config)


def _pg_write_chunks(self: PostgresStore, document: Document, sections: tuple[Section, ...],
                     chunks: tuple[Chunk, ...], chunker_config: str, *, new: bool = False) -> None:
    """Buffer a version's sections and chunks (written by :meth:`_flush_chunks`); ``new``: the
    version has no rows yet, so there are none to delete first."""
    key = (document.doc_id, document.version)
    if not new:
        self._flush()  # the rows to delete may still be buffered
        self._drop_pending(lambda doc_id, version: (doc_id, version) == key)
        for table in self._chunk_derived():
            self._write(f"DELETE FROM {{s}}.{table} WHERE doc_id = %s AND version = %s", key)
        self._write("DELETE FROM {s}.chunks WHERE doc_id = %s AND version = %s", key)
        self._write("DELETE FROM {s}.sections WHERE doc_id = %s AND version = %s", key)
    self._buffer_chunks(sections, chunks, chunker_config)


def _pg_buffer_chunks(self: PostgresStore, sections: Sequence[Section], chunks: Sequence[Chunk],
                      chunker_config: str) -> None:
    """Buffer sections and chunks of one version that has none stored: their rows, tokens,
    row ids and postings (the one place a PostgreSQL chunk row is built)."""
    self._changed = True
    self._pending_sections += [
        {"id": s.id, "doc_id": s.doc_id, "version": s.version, "start_at": s.start, "end_at": s.end,
         "heading_path": json.dumps(list(s.heading_path)), "level": s.level, "parent_id": s.parent_id}
        for s in sections]
    if not chunks:
        return
    first = self._rowids(len(chunks))
    for i, c in enumerate(chunks):
        lexemes, tf, length = chunk_terms(c)
        self._pending_chunks.append((first + i, *chunk_values(i, c), lexemes, tf, length))
        self._fresh[c.id] = (first + i, c.doc_id, c.version)
        if c.duplicate_of is None:  # a duplicate counts in the statistics, but is never returned
            self._pending_postings.append((first + i, tf, length))
    if chunks[0].config_id not in self._tx_configs:
        self._tx_configs.add(chunks[0].config_id)
        self._write("INSERT INTO {s}.configs VALUES (%s, 'chunker', %s) ON CONFLICT (id) DO NOTHING",
                    (chunks[0].config_id, chunker_config))
    if len(self._pending_chunks) >= self.flush_rows:
        self._flush()


def section_values(s: Section) -> tuple:
    """A section's stored columns, in the order of ``SQLITE_SECTION_COLUMNS`` (PostgreSQL's alike)."""
    return (s.id, s.doc_id, s.version, s.start, s.end, json.dumps(list(s.heading_path)), s.level, s.parent_id)


def chunk_values(ord_: int, c: Chunk) -> tuple:
    """A chunk's stored columns, in the order of ``SQLITE_STORED_CHUNK_COLUMNS`` (PostgreSQL's alike,
    without the row id and the token columns)."""
    return (c.id, c.doc_id, c.version, ord_, c.start, c.end, c.text, c.kind.value,
            json.dumps(list(c.heading_path)), c.section_id, c.prefix, c.header[0] if c.header else None,
            c.header[1] if c.header else None, c.token_count, c.prev_id, c.next_id, c.duplicate_of,
            bool(c.over_limit), c.config_id)


def _sqlite_insert_rows(self: SQLiteStore, table_prefix: str, key: tuple, sections: Sequence[Section],
                        chunks: Sequence[Chunk], chunker_config: str) -> None:
    """Insert sections and chunks into the live tables (``table_prefix`` "") or an index
    version's (``"staged_"``, ``key`` its ``(index_id,)``): the one place their rows are built."""
    lead = "index_id, " if key else ""
    self._db.executemany(
        f"INSERT INTO {table_prefix}sections ({lead}{SQLITE_SECTION_COLUMNS}) VALUES "
        f"({','.join('?' * (len(key) + 8))})", [(*key, *section_values(s)) for s in sections])
    self._db.executemany(
        f"INSERT INTO {table_prefix}chunks ({lead}{SQLITE_STORED_CHUNK_COLUMNS}) VALUES "
        f"({','.join('?' * (len(key) + 19))})", [(*key, *chunk_values(i, c)) for i, c in enumerate(chunks)])
    if chunks:
        self._db.execute("INSERT OR IGNORE INTO configs VALUES (?, 'chunker', ?)",
                         (chunks[0].config_id, chunker_config))


def sqlite_delete_document(self: SQLiteStore, doc_id: str) -> list[str]:
    """Delete every version of a document: its text, chunks and sections are removed, and a
    tombstone records the deletion.

    Returns:
        The versions deleted.

    Raises:
        InputError: no document with that id is stored.
    """
    versions = [r[0] for r in self._db.execute(
        "SELECT version FROM documents WHERE doc_id = ? ORDER BY seq", (doc_id,))]
    if not versions:
        raise InputError(f"no document {doc_id!r} in the store", field="doc_id")
    self._write("DELETE FROM documents WHERE doc_id = ?", (doc_id,))
    self._write("INSERT OR REPLACE INTO tombstones VALUES (?,?,?)",
                (doc_id, now(), json.dumps(versions)))
    self.log("delete", doc_id, None, f"versions {versions}")
    return versions


def pg_delete_document(self: PostgresStore, doc_id: str) -> list[str]:
    """Delete every version of a document (text, chunks, sections, vectors) and leave a
    tombstone.

    Raises:
        InputError: no document with that id is stored.
    """
    versions = [r[0] for r in self._all("SELECT version FROM {s}.documents WHERE doc_id = %s "
                                        "ORDER BY seq", (doc_id,))]
    if not versions:
        raise InputError(f"no document {doc_id!r} in the store", field="doc_id")
    self._drop_pending(lambda doc, version: doc == doc_id)
    # its rows in index versions beside the live one go with it (SQLite: by cascade)
    for table in [*self._chunk_derived(), "chunks", "sections", "acl", "documents",
                  "staged_versions"]:
        self._write(f"DELETE FROM {{s}}.{table} WHERE doc_id = %s", (doc_id,))
    self._write("INSERT INTO {s}.tombstones VALUES (%s, %s, %s) ON CONFLICT (doc_id) DO UPDATE "
                "SET deleted_at = EXCLUDED.deleted_at, versions = EXCLUDED.versions",
                (doc_id, now(), json.dumps(versions)))
    self.log("delete", doc_id, None, f"versions {versions}")
    return versions


def sqlite_log(self: SQLiteStore, op: str, doc_id: str | None, version: str | None, detail: str) -> None:
    self._write("INSERT INTO log (at, index_version, op, doc_id, version, detail) "
                "VALUES (?,?,?,?,?,?)", (now(), self.index_version + 1, op, doc_id, version, detail))


def pg_log(self: PostgresStore, op: str, doc_id: str | None, version: str | None, detail: str) -> None:
    self._buffer("INSERT INTO {s}.log (at, index_version, op, doc_id, version, detail) "
                "VALUES (%s, %s, %s, %s, %s, %s)",
                (now(), self._next_index_version(), op, doc_id, version, detail))


@decoding("documents")
def _sqlite_version_row(self: SQLiteStore, row: tuple) -> StoredVersion:
    (doc_id, version, seq, content_hash, path, title, fmt, status, updated_at, metadata,
     parser, warnings, chunker_config, ingested_at) = row
    acl = tuple(r[0] for r in self._db.execute(
        "SELECT grp FROM acl WHERE doc_id = ? AND version = ? ORDER BY grp", (doc_id, version)))
    document = Document(doc_id, version, content_hash, path, title, acl, DocStatus(status),
                        updated_at, json.loads(metadata), fmt)
    return StoredVersion(document, seq, parser, tuple(json.loads(warnings)), chunker_config,
                         ingested_at)


@decoding("documents")
def _pg_version_row(self: PostgresStore, row: tuple) -> StoredVersion:
    (doc_id, version, seq, content_hash, path, title, fmt, status, updated_at, metadata,
     parser, warnings, chunker_config, ingested_at, groups) = row
    document = Document(doc_id, version, content_hash, path, title, tuple(sorted(groups or ())),
                        DocStatus(status), updated_at, json.loads(metadata), fmt)
    return StoredVersion(document, seq, parser, tuple(json.loads(warnings)), chunker_config,
                         ingested_at)


def sqlite_version(self: SQLiteStore, doc_id: str, version: str) -> StoredVersion | None:
    row = self._db.execute(f"SELECT {SQLITE_VERSION_COLUMNS} FROM documents "
                           "WHERE doc_id = ? AND version = ?", (doc_id, version)).fetchone()
    return self._version_row(row) if row else None


def pg_version(self: PostgresStore, doc_id: str, version: str) -> StoredVersion | None:
    row = self._one(PG_VERSIONS + " WHERE d.doc_id = %s AND d.version = %s", (doc_id, version))
    return self._version_row(row) if row else None


def sqlite_versions(self: SQLiteStore, doc_id: str | None = None) -> list[StoredVersion]:
    """Stored versions in ingestion order, of one document or of all."""
    where, args = ("WHERE doc_id = ?", (doc_id,)) if doc_id is not None else ("", ())
    rows = self._db.execute(f"SELECT {SQLITE_VERSION_COLUMNS} FROM documents {where} "
                            "ORDER BY seq", args).fetchall()
    return [self._version_row(r) for r in rows]


def pg_versions(self: PostgresStore, doc_id: str | None = None) -> list[StoredVersion]:
    """Stored versions in ingestion order, of one document or of all."""
    where, args = (" WHERE d.doc_id = %s", (doc_id,)) if doc_id is not None else ("", ())
    return [self._version_row(r) for r in self._all(PG_VERSIONS + where + " ORDER BY d.seq", args)]


def sqlite_version_labels(self: SQLiteStore) -> frozenset[str]:
    """The version labels the store holds, of any document and status."""
    return frozenset(r[0] for r in self._db.execute("SELECT DISTINCT version FROM documents"))


def pg_version_labels(self: PostgresStore) -> frozenset[str]:
    """The version labels the store holds, of any document and status."""
    return frozenset(r[0] for r in self._all("SELECT DISTINCT version FROM {s}.documents"))


def sqlite_versions_of(self: SQLiteStore, doc_ids: Sequence[str]) -> dict[str, list[StoredVersion]]:
    """The stored versions of each of these documents, in ingestion order (an empty list for one
    with none): what :meth:`versions` gives per document, for a batch at once."""
    out: dict[str, list[StoredVersion]] = {doc_id: [] for doc_id in doc_ids}
    ids = list(out)
    for i in range(0, len(ids), 500):
        batch = ids[i:i + 500]
        rows = self._db.execute(f"SELECT {SQLITE_VERSION_COLUMNS} FROM documents WHERE doc_id IN "
                                f"({','.join('?' * len(batch))}) ORDER BY seq", batch).fetchall()
        for row in rows:
            out[row[0]].append(self._version_row(row))
    return out


def pg_versions_of(self: PostgresStore, doc_ids: Sequence[str]) -> dict[str, list[StoredVersion]]:
    """The stored versions of each of these documents, in ingestion order (an empty list for one
    with none), in one statement: what :meth:`versions` gives per document, for a batch at once."""
    out: dict[str, list[StoredVersion]] = {doc_id: [] for doc_id in doc_ids}
    if out:
        for row in self._all(PG_VERSIONS + " WHERE d.doc_id = ANY(%s) ORDER BY d.seq", (list(out),)):
            out[row[0]].append(self._version_row(row))
    return out


def sqlite_chunks_by_id(self: SQLiteStore, ids: list[str]) -> dict[str, Chunk]:
    out: dict[str, Chunk] = {}
    for i in range(0, len(ids), 500):
        batch = ids[i:i + 500]
        marks = ",".join("?" * len(batch))
        for row in self._db.execute(f"SELECT {SQLITE_CHUNK_COLUMNS} FROM chunks WHERE id IN ({marks})",
                                    batch):
            chunk = self._chunk_row(row)
            out[chunk.id] = chunk
    return out


def pg_chunks_by_id(self: PostgresStore, ids: list[str]) -> dict[str, Chunk]:
    if not ids:
        return {}
    rows = self._all(f"SELECT {PG_CHUNK_COLUMNS} FROM {{s}}.chunks c WHERE c.id = ANY(%s)", (list(ids),))
    return {chunk.id: chunk for chunk in map(self._chunk_row, rows)}


def sqlite_counts(self: SQLiteStore) -> dict[str, int]:
    """How many documents, versions, chunks and sections the store holds."""
    q = self._db.execute
    return {"documents": q("SELECT COUNT(DISTINCT doc_id) FROM documents").fetchone()[0],
            "versions": q("SELECT COUNT(*) FROM documents").fetchone()[0],
            "chunks": q("SELECT COUNT(*) FROM chunks").fetchone()[0],
            "sections": q("SELECT COUNT(*) FROM sections").fetchone()[0],
            "deleted": q("SELECT COUNT(*) FROM tombstones").fetchone()[0]}


def pg_counts(self: PostgresStore) -> dict[str, int]:
    """How many documents, versions, chunks and sections the store holds."""
    row = self._one("SELECT (SELECT count(DISTINCT doc_id) FROM {s}.documents), "
                    "(SELECT count(*) FROM {s}.documents), (SELECT count(*) FROM {s}.chunks), "
                    "(SELECT count(*) FROM {s}.sections), (SELECT count(*) FROM {s}.tombstones)")
    return dict(zip(("documents", "versions", "chunks", "sections", "deleted"), row))


def sqlite_version_statuses(self: SQLiteStore) -> dict[tuple[str, str], str]:
    """Every stored version's status (``current``, ``superseded``, ``expired``)."""
    return {(d, v): s for d, v, s in self._db.execute("SELECT doc_id, version, status FROM documents")}


def _pg_rowids(self: PostgresStore, n: int) -> int:
    """The first of ``n`` new chunk rows' ids, from a block of the sequence this transaction
    reserved (one round trip per block; the rest of a block is skipped at commit)."""
    if self._rowid_block is None or self._rowid_block[0] + n > self._rowid_block[1]:
        size = max(n, self.flush_rows)
        first = self._tx.execute(f"SELECT s, setval('{self.schema}.chunk_rowid', s + %s - 1) FROM "
                                 f"(SELECT nextval('{self.schema}.chunk_rowid') AS s) x", (size,)).fetchone()[0]
        self._rowid_block = [first, first + size]
        if self._tx_first_rowid is None:
            self._tx_first_rowid = first
    first = self._rowid_block[0]
    self._rowid_block[0] += n
    return first


def _pg_buffer(self: PostgresStore, sql: str, args: Sequence[Any]) -> None:
    """Write a row of a version's own tables (documents, acl, tombstones, log) with the
    transaction's next flush: any statement or read of those tables, a flush of the chunks,
    or the commit sends the buffered rows first: each statement's rows in the order they were
    buffered, the statements in the order each was first buffered (a version's documents row
    before its acl row)."""
    if self._tx is None:
        raise StoreError("store writes must happen inside store.transaction()")
    self._changed = True
    self._pending_rows.setdefault(sql.replace("{s}", self.schema), []).append(args)


def _pg_flush_rows(self: PostgresStore) -> None:
    """Send the buffered version rows: one pipelined batch per statement, one round trip."""
    pending, self._pending_rows = self._pending_rows, {}
    if pending:
        with self._tx.pipeline(), self._tx.cursor() as cursor:
            for sql, rows in pending.items():
                cursor.executemany(sql, rows)


def _pg_flush_chunks(self: PostgresStore) -> None:
    """Write the buffered sections and chunks: chunks by COPY on one server (the statistics
    trigger runs once for them all), through postgres_fdw's batched inserts sharded."""
    sections, self._pending_sections = self._pending_sections, []
    chunks, self._pending_chunks = self._pending_chunks, []
    self._insert("sections", PG_SECTION_TYPES, sections)
    if not chunks:
        return
    if list(self._parts.values()) != [None]:
        names = [c.split()[0] for c in PG_CHUNK_TYPES.split(", ")]
        self._insert("chunks", PG_CHUNK_TYPES, [dict(zip(names, row)) for row in chunks], PG_CHUNK_SELECT)
        return
    with self._tx.cursor().copy(f"COPY {self.schema}.chunks FROM STDIN") as copy:
        for row in chunks:
            copy.write_row((*row[:20], " ".join(map(tsv_lexeme, row[20])), json.dumps(row[21]), row[22]))


def replace_chunks(self: SQLiteStore | PostgresStore, document: Document, parsed: ParsedDocument,
                   sections: tuple[Section, ...], chunks: tuple[Chunk, ...],
                   chunker_config: str) -> None:
    """Re-chunk a stored version (a new parser or chunker config); the text is unchanged."""
    self._write("UPDATE {s}.documents SET parser = %s, parse_warnings = %s, chunker_config = %s, "
                "parsed_text = %s WHERE doc_id = %s AND version = %s",
                (parsed.parser, json.dumps(list(parsed.warnings)), chunker_config, parsed.text,
                 document.doc_id, document.version))
    self._write_chunks(document, sections, chunks, chunker_config)
    self.log("rechunk", document.doc_id, document.version, f"{len(chunks)} chunks")


def update_attributes(self: SQLiteStore | PostgresStore, document: Document) -> list[str]:
    """Update a stored version's acl, status, title, path, metadata and updated_at.

    Returns:
        The names of the attributes that changed (each logged).
    """
    old = self.version(document.doc_id, document.version)
    if old is None:
        raise StoreError(f"no stored version {document.version!r} of {document.doc_id!r}")
    changed = []
    for name, detail in attribute_changes(old.document, document):
        changed.append(name)
        self.log(name, document.doc_id, document.version, detail)
    if changed:
        self._write("UPDATE {s}.documents SET status = %s, title = %s, path = %s, metadata = %s, "
                    "updated_at = %s WHERE doc_id = %s AND version = %s",
                    (document.status.value, document.title, document.path,
                     json.dumps(dict(document.metadata), sort_keys=True), document.updated_at,
                     document.doc_id, document.version))
        if "acl" in changed:
            self._write_acl(document)
    return changed


def set_status(self: SQLiteStore | PostgresStore, doc_id: str, version: str, status: DocStatus, reason: str) -> None:
    self._write("UPDATE {s}.documents SET status = %s WHERE doc_id = %s AND version = %s",
                (DocStatus(status).value, doc_id, version))
    self.log("status", doc_id, version, f"-> {DocStatus(status).value}: {reason}")


def _pg_next_index_version(self: PostgresStore) -> int:
    """The index version this transaction commits (read once per transaction)."""
    if not self._writing():
        return self.index_version + 1
    if self._tx_index_version is None:
        self._tx_index_version = self.index_version + 1
    return self._tx_index_version


def latest(self: SQLiteStore | PostgresStore, doc_id: str) -> StoredVersion | None:
    """The current version ingested last, or else the version ingested last."""
    found = self.versions(doc_id)
    current = [v for v in found if v.document.status is DocStatus.CURRENT]
    return (current or found or [None])[-1]


def doc_ids(self: SQLiteStore | PostgresStore) -> list[str]:
    return [r[0] for r in self._all("SELECT doc_id FROM {s}.documents GROUP BY doc_id ORDER BY min(seq)")]


def texts(self: SQLiteStore | PostgresStore, doc_id: str, version: str) -> tuple[str, str]:
    """The raw source text and the parsed text of a version."""
    row = self._one("SELECT raw_text, parsed_text FROM {s}.documents WHERE doc_id = %s AND "
                    "version = %s", (doc_id, version))
    if row is None:
        raise InputError(f"no version {version!r} of document {doc_id!r} in the store")
    return row[0], row[1]


@decoding("chunks")
def _chunk_row(self: SQLiteStore | PostgresStore, row: tuple) -> Chunk:
    (cid, doc_id, version, start, end, text, kind, path, section_id, prefix, hs, he, tokens,
     prev_id, next_id, dup, over, config_id) = row[:18]
    return Chunk(cid, doc_id, version, start, end, text, ChunkKind(kind), tuple(json.loads(path)),
                 section_id, prefix, (hs, he) if hs is not None else None, tokens, prev_id,
                 next_id, dup, bool(over), config_id)


def chunks(self: SQLiteStore | PostgresStore, doc_id: str | None = None, version: str | None = None) -> list[Chunk]:
    """Chunks in reading order, of one version, of every version of a document, or of all."""
    clauses, args = [], []
    if doc_id is not None:
        clauses.append("c.doc_id = %s")
        args.append(doc_id)
    if version is not None:
        clauses.append("c.version = %s")
        args.append(version)
    where = (" WHERE " + " AND ".join(clauses)) if clauses else ""
    return [self._chunk_row(r) for r in self._all(
        f"SELECT {self._CHUNK_COLUMNS_C} FROM {{s}}.chunks c{where} ORDER BY c.doc_id, c.version, c.ord", args)]


def chunk_count(self: SQLiteStore | PostgresStore, doc_id: str, version: str) -> int:
    return self._one("SELECT count(*) FROM {s}.chunks WHERE doc_id = %s AND version = %s",
                     (doc_id, version))[0]


def _pg_hit_row(self: PostgresStore, row: tuple) -> tuple[int, Chunk, str]:
    """A row of :data:`PG_HIT_COLUMNS`: the chunk's rowid, the chunk, its version's status."""
    return row[18], self._chunk_row(row), row[19]


@decoding("sections")
def _section_row(self: SQLiteStore | PostgresStore, row: tuple) -> Section:
    return Section(row[0], row[1], row[2], row[3], row[4], tuple(json.loads(row[5])), row[6], row[7])


def section(self: SQLiteStore | PostgresStore, section_id: str) -> Section | None:
    row = self._one(self._SECTION_SELECT + " WHERE id = %s", (section_id,))
    return self._section_row(row) if row else None


def sections(self: SQLiteStore | PostgresStore, doc_id: str, version: str) -> list[Section]:
    return [self._section_row(r) for r in self._all(
        self._SECTION_SELECT + " WHERE doc_id = %s AND version = %s ORDER BY start_at, level", (doc_id, version))]


def neighbours(self: SQLiteStore | PostgresStore, chunk_id: str, n: int = 1) -> list[Chunk]:
    """The chunk with up to ``n`` chunks on each side, in reading order (small-to-big)."""
    row = self._one("SELECT doc_id, version, ord FROM {s}.chunks WHERE id = %s", (chunk_id,))
    if row is None:
        raise InputError(f"no chunk {chunk_id!r} in the store")
    return [self._chunk_row(r) for r in self._all(
        f"SELECT {self._CHUNK_COLUMNS_C} FROM {{s}}.chunks c WHERE c.doc_id = %s AND c.version = %s "
        "AND c.ord BETWEEN %s AND %s ORDER BY c.ord", (row[0], row[1], row[2] - n, row[2] + n))]


@decoding("tombstones")
def tombstone(self: SQLiteStore | PostgresStore, doc_id: str) -> tuple[str, list[str]] | None:
    """When a deleted document was deleted, and which versions it had."""
    row = self._one("SELECT deleted_at, versions FROM {s}.tombstones WHERE doc_id = %s", (doc_id,))
    return (row[0], json.loads(row[1])) if row else None


def log_entries(self: SQLiteStore | PostgresStore, since: int = 0) -> list[LogEntry]:
    return [LogEntry(*r) for r in self._all(
        "SELECT seq, at, index_version, op, doc_id, version, detail FROM {s}.log WHERE seq > %s "
        "ORDER BY seq", (since,))]


def pg_chunks_in_order(self: PostgresStore) -> list[Chunk]:
    """Every chunk, in the order it was stored."""
    return [self._chunk_row(r) for r in self._all(f"SELECT {PG_CHUNK_COLUMNS} FROM {{s}}.chunks c "
                                                  "ORDER BY c.rowid")]

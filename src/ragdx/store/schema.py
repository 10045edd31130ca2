"""The stores' schemas, side by side: what each backend's tables are, how a store is set up, and
how an existing one is checked (and, for SQLite, migrated) when it is opened.

- SQLite (schema :data:`SQLITE_SCHEMA_VERSION`): one file; the DDL below, FTS5 over the chunks
  kept by triggers, the ``staged_*`` tables of index versions and the statement vectors. A store
  of an older schema gets the tables the later ones added when opened for writing
  (:func:`_sqlite_migrate`), and is read as it is until then.
- PostgreSQL with pgvector (schema :data:`PG_SCHEMA_VERSION`): coordinator tables, per-document
  tables (hash-partitioned by ``doc_id`` when sharded, each part a ``postgres_fdw`` foreign table
  on its shard: :func:`sharded_table_ddl`) and per-part BM25 statistics kept by triggers
  (:data:`_STATS_TRIGGER`), and the coordinator's tables of index versions (:data:`_PG_STAGED`).
  A store of schema 3 gets the index versions' tables when opened for writing (:func:`_pg_migrate`);
  an older one is refused.
"""

from __future__ import annotations

import functools
import logging
import re
import sqlite3
import uuid
from typing import TYPE_CHECKING, Any

from ragdx.errors import StoreError
from ragdx.store._common import OpenMode, now
from ragdx.store.lexical import FTS_TOKENIZER
from ragdx.store.shards import _server_conninfo
from ragdx.store.staging import INITIAL_INDEX, index_settings

if TYPE_CHECKING:
    from ragdx.store.postgres import PostgresStore
    from ragdx.store.sqlite import SQLiteStore

log = logging.getLogger("ragdx.store")

# -- SQLite -----------------------------------------------------------------------------------


SQLITE_SCHEMA_VERSION = 3  # 2: index versions built beside the live one (index_versions, staged_*);
# 3: each chunk's statement vectors in a space (statement_vectors)


#: the columns a section and a chunk have, live and staged in an index version alike (the staged
#: tables add ``index_id``; a switch copies rows between them column by column)
_SECTION_COLUMN_DDL = """    doc_id TEXT NOT NULL,
    version TEXT NOT NULL,
    start INTEGER NOT NULL,
    end INTEGER NOT NULL,
    heading_path TEXT NOT NULL,
    level INTEGER NOT NULL,
    parent_id TEXT,
"""
_CHUNK_COLUMN_DDL = """    doc_id TEXT NOT NULL,
    version TEXT NOT NULL,
    ord INTEGER NOT NULL,
    start INTEGER NOT NULL,
    end INTEGER NOT NULL,
    text TEXT NOT NULL,
    kind TEXT NOT NULL,
    heading_path TEXT NOT NULL,
    section_id TEXT NOT NULL,
    prefix TEXT NOT NULL,
    header_start INTEGER,
    header_end INTEGER,
    token_count INTEGER NOT NULL,
    prev_id TEXT,
    next_id TEXT,
    duplicate_of TEXT,
    over_limit INTEGER NOT NULL,
    config_id TEXT NOT NULL,
"""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS documents (
    doc_id TEXT NOT NULL,
    version TEXT NOT NULL,
    seq INTEGER NOT NULL,
    content_hash TEXT NOT NULL,
    path TEXT NOT NULL,
    title TEXT NOT NULL,
    format TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('current', 'superseded', 'expired')),
    updated_at TEXT,
    metadata TEXT NOT NULL,
    parser TEXT NOT NULL,
    parse_warnings TEXT NOT NULL,
    chunker_config TEXT NOT NULL,
    raw_text TEXT NOT NULL,
    parsed_text TEXT NOT NULL,
    ingested_at TEXT NOT NULL,
    PRIMARY KEY (doc_id, version)
);
CREATE TABLE IF NOT EXISTS acl (
    doc_id TEXT NOT NULL,
    version TEXT NOT NULL,
    grp TEXT NOT NULL,
    PRIMARY KEY (doc_id, version, grp),
    FOREIGN KEY (doc_id, version) REFERENCES documents (doc_id, version) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS acl_by_group ON acl (grp);
CREATE TABLE IF NOT EXISTS sections (
    id TEXT PRIMARY KEY,
{section_columns}    FOREIGN KEY (doc_id, version) REFERENCES documents (doc_id, version) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS sections_by_doc ON sections (doc_id, version);
CREATE TABLE IF NOT EXISTS chunks (
    rowid INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
{chunk_columns}    FOREIGN KEY (doc_id, version) REFERENCES documents (doc_id, version) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS chunks_by_doc ON chunks (doc_id, version, ord);
CREATE TABLE IF NOT EXISTS configs (id TEXT PRIMARY KEY, kind TEXT NOT NULL, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS log (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL,
    index_version INTEGER NOT NULL,
    op TEXT NOT NULL,
    doc_id TEXT,
    version TEXT,
    detail TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS tombstones (
    doc_id TEXT PRIMARY KEY,
    deleted_at TEXT NOT NULL,
    versions TEXT NOT NULL
);
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(
    prefix, text, content='chunks', content_rowid='rowid', tokenize='{tokenizer}'
);
CREATE TRIGGER IF NOT EXISTS chunks_fts_insert AFTER INSERT ON chunks BEGIN
    INSERT INTO chunks_fts (rowid, prefix, text) VALUES (new.rowid, new.prefix, new.text);
END;
CREATE TRIGGER IF NOT EXISTS chunks_fts_delete AFTER DELETE ON chunks BEGIN
    INSERT INTO chunks_fts (chunks_fts, rowid, prefix, text)
        VALUES ('delete', old.rowid, old.prefix, old.text);
END;
CREATE TABLE IF NOT EXISTS spaces (
    id TEXT PRIMARY KEY,
    body TEXT NOT NULL,
    backend TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('building', 'built', 'verified', 'active', 'retired')),
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS vectors (
    chunk_rowid INTEGER NOT NULL REFERENCES chunks (rowid) ON DELETE CASCADE,
    space_id TEXT NOT NULL REFERENCES spaces (id),
    input_hash TEXT NOT NULL,
    vector BLOB NOT NULL,
    window_end INTEGER,
    PRIMARY KEY (space_id, chunk_rowid)
);
CREATE INDEX IF NOT EXISTS vectors_by_input ON vectors (space_id, input_hash);
CREATE INDEX IF NOT EXISTS vectors_by_chunk ON vectors (chunk_rowid);
CREATE TABLE IF NOT EXISTS statement_vectors (
    chunk_rowid INTEGER NOT NULL REFERENCES chunks (rowid) ON DELETE CASCADE,
    space_id TEXT NOT NULL REFERENCES spaces (id),
    statements_hash TEXT NOT NULL,
    vectors BLOB NOT NULL,
    PRIMARY KEY (space_id, chunk_rowid)
);
CREATE INDEX IF NOT EXISTS statement_vectors_by_chunk ON statement_vectors (chunk_rowid);
CREATE INDEX IF NOT EXISTS statement_vectors_by_hash ON statement_vectors (space_id, statements_hash);
CREATE TABLE IF NOT EXISTS index_versions (
    id TEXT PRIMARY KEY,
    body TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('building', 'built', 'verified', 'active', 'retired')),
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS staged_versions (
    index_id TEXT NOT NULL REFERENCES index_versions (id) ON DELETE CASCADE,
    doc_id TEXT NOT NULL,
    version TEXT NOT NULL,
    parser TEXT NOT NULL,
    parse_warnings TEXT NOT NULL,
    chunker_config TEXT NOT NULL,
    parsed_text TEXT NOT NULL,
    PRIMARY KEY (index_id, doc_id, version),
    FOREIGN KEY (doc_id, version) REFERENCES documents (doc_id, version) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS staged_versions_by_doc ON staged_versions (doc_id, version);
CREATE TABLE IF NOT EXISTS staged_sections (
    index_id TEXT NOT NULL,
    id TEXT NOT NULL,
{section_columns}    PRIMARY KEY (index_id, id),
    FOREIGN KEY (index_id, doc_id, version) REFERENCES staged_versions (index_id, doc_id, version)
        ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS staged_sections_by_doc ON staged_sections (index_id, doc_id, version);
CREATE TABLE IF NOT EXISTS staged_chunks (
    index_id TEXT NOT NULL,
    id TEXT NOT NULL,
{chunk_columns}    PRIMARY KEY (index_id, id),
    FOREIGN KEY (index_id, doc_id, version) REFERENCES staged_versions (index_id, doc_id, version)
        ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS staged_chunks_by_doc ON staged_chunks (index_id, doc_id, version, ord);
CREATE TABLE IF NOT EXISTS staged_vectors (
    index_id TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    version TEXT NOT NULL,
    chunk_id TEXT NOT NULL,
    space_id TEXT NOT NULL,
    input_hash TEXT NOT NULL,
    vector BLOB NOT NULL,
    window_end INTEGER,
    PRIMARY KEY (index_id, space_id, chunk_id),
    FOREIGN KEY (index_id, doc_id, version) REFERENCES staged_versions (index_id, doc_id, version)
        ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS staged_vectors_by_doc ON staged_vectors (index_id, doc_id, version);
"""


def sqlite_ddl() -> str:
    """The whole store's DDL."""
    return _SCHEMA.format(tokenizer=FTS_TOKENIZER, section_columns=_SECTION_COLUMN_DDL,
                          chunk_columns=_CHUNK_COLUMN_DDL)

#: The tables and indexes each schema added (an older store gets them when opened for writing).
_ADDED = {2: ("index_versions", "staged_"), 3: ("statement_vectors",)}


@functools.lru_cache(maxsize=1)
def _expected_schema() -> dict[tuple[str, str], tuple[str, ...]]:
    """Every table (with its columns), index and trigger a whole store has: the schema as built in
    memory."""
    db = sqlite3.connect(":memory:")
    try:
        for statement in _sqlite_statements(sqlite_ddl()):
            db.execute(statement)
        return {(kind, name): tuple(r[1] for r in db.execute(f'PRAGMA table_info("{name}")'))
                for kind, name in db.execute("SELECT type, name FROM sqlite_master "
                                             "WHERE name NOT LIKE 'sqlite_%'").fetchall()}
    finally:
        db.close()


def _sqlite_statements(script: str) -> list[str]:
    """Split a script into complete statements (a trigger body holds semicolons of its own)."""
    statements, buffer = [], ""
    for piece in script.split(";"):
        buffer += piece + ";"
        if sqlite3.complete_statement(buffer):
            if buffer.strip(" \n;"):
                statements.append(buffer.strip())
            buffer = ""
    return statements


def _sqlite_check_schema(self: SQLiteStore) -> None:
    """Refuse anything but a ragdx store of a known schema, whole (no table, column, index or
    trigger missing); an empty file is a store yet to be set up (unless opened to read)."""
    found = {(kind, name) for kind, name in self._db.execute(
        "SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")}
    if not found:
        if self.mode is not OpenMode.CREATE:
            raise StoreError(f"{self.path}: an empty file, not a ragdx store")
        return
    if ("table", "meta") not in found:
        tables = sorted(name for kind, name in found if kind == "table")
        raise StoreError(f"{self.path}: not a ragdx store (a SQLite database with the tables "
                         f"{', '.join(tables[:6])}{', ...' if len(tables) > 6 else ''}); ragdx "
                         "neither reads nor adds to it")
    row = self._db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    version = row[0] if row else None
    if not (isinstance(version, str) and version.isdigit() and version.isascii()):
        raise StoreError(f"{self.path}: damaged store: schema_version is {version!r}, not a "
                         "number")
    if int(version) > SQLITE_SCHEMA_VERSION:
        raise StoreError(f"{self.path}: store schema {version} is newer than this ragdx "
                         f"({SQLITE_SCHEMA_VERSION}); upgrade ragdx")
    row = self._db.execute("SELECT value FROM meta WHERE key='index_version'").fetchone()
    if row is None or not (isinstance(row[0], str) and row[0].isdigit() and row[0].isascii()):
        raise StoreError(f"{self.path}: damaged store: index_version is "
                         f"{row[0] if row else None!r}, not a number")
    expected = _expected_schema()
    later = tuple(name for since, names in _ADDED.items() if int(version) < since for name in names)
    if later:  # migrated when opened for writing (_init_schema)
        expected = {k: v for k, v in expected.items() if not k[1].startswith(later)}
    self._schema = int(version)
    for kind, name in sorted(set(expected) - found):
        raise StoreError(f"{self.path}: damaged store: the {kind} {name!r} is missing")
    for (kind, name), columns in expected.items():
        if kind != "table":
            continue
        have = [r[1] for r in self._db.execute(f'PRAGMA table_info("{name}")')]
        lost = [c for c in columns if c not in have]
        if lost:
            raise StoreError(f"{self.path}: damaged store: table {name!r} has no column "
                             f"{lost[0]!r}")


def _sqlite_init_schema(self: SQLiteStore) -> None:
    """Set up a new store (opened for writing), and check an existing one's integrity."""
    if self._db.execute("SELECT COUNT(*) FROM sqlite_master WHERE name = 'meta'").fetchone()[0]:
        try:
            problems = [line for r in self._db.execute("PRAGMA quick_check") if r[0] != "ok"
                        for line in r[0].splitlines() if not line.startswith("***")]
        except sqlite3.DatabaseError as exc:  # a page too damaged to check
            problems = [str(exc)]
        if problems:
            raise StoreError(f"{self.path}: the store fails SQLite's integrity check "
                             f"({'; '.join(problems[:2])}{'; ...' if len(problems) > 2 else ''}); "
                             "nothing was written to it: restore a copy or ingest into a new store")
        if self._schema < SQLITE_SCHEMA_VERSION:
            self._migrate()
        self._give_id()
        return
    with self.transaction():
        # statement by statement: executescript would commit our transaction
        for statement in _sqlite_statements(sqlite_ddl()):
            self._db.execute(statement)
        self._db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)",
                         (str(SQLITE_SCHEMA_VERSION),))
        self._db.execute("INSERT OR IGNORE INTO meta VALUES ('index_version', '0')")
        self._db.execute("INSERT OR IGNORE INTO meta VALUES ('store_id', ?)", (uuid.uuid4().hex,))
        self._add_initial_index()
    self._schema = SQLITE_SCHEMA_VERSION


def _sqlite_migrate(self: SQLiteStore) -> None:
    """Bring a store of an older schema up to this one, in one transaction (a killed process
    leaves the old schema, migrated again at the next write). 1 -> 2: the tables of index
    versions, and the live index recorded as :data:`INITIAL_INDEX`; 2 -> 3: the statement vectors'
    table (empty: ``ragdx index build`` fills it)."""
    log.info("%s: migrating the store from schema %d to %d", self.path, self._schema, SQLITE_SCHEMA_VERSION)
    with self.transaction():
        row = self._db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if int(row[0]) >= SQLITE_SCHEMA_VERSION:  # another writer migrated it since we read it
            self._schema = int(row[0])
            return
        for statement in _sqlite_statements(sqlite_ddl()):
            self._db.execute(statement)  # IF NOT EXISTS: only what is new is made
        self._add_initial_index()
        self._db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SQLITE_SCHEMA_VERSION),))
    self._schema = SQLITE_SCHEMA_VERSION


def _sqlite_give_id(self: SQLiteStore) -> None:
    """Give a store made before store ids its id, once, under the write lock (a writer that
    gave it one meanwhile wins: INSERT OR IGNORE). The id is not something a query sees, so
    the index version stays."""
    if self.store_id is None:
        with self.transaction():
            self._db.execute("INSERT OR IGNORE INTO meta VALUES ('store_id', ?)", (uuid.uuid4().hex,))


def _sqlite_add_initial_index(self: SQLiteStore) -> None:
    body = index_settings(None, None, None).to_json()
    self._db.execute("INSERT OR IGNORE INTO index_versions VALUES (?, ?, 'active', ?, ?)",
                     (INITIAL_INDEX, body, now(), now()))


# -- PostgreSQL -------------------------------------------------------------------------------


PG_SCHEMA_VERSION = 4  # 2: term deltas folded into term_df once per transaction; 3: BM25 postings;
# 4: index versions built beside the live one (index_versions, staged_*, on the coordinator) and
# each chunk's statement vectors (statement_vectors, per document)


# per-document tables: (name, columns, indexes on a local copy); {s} is the schema, {t} the table
_DOC_TABLES: dict[str, tuple[str, tuple[str, ...]]] = {
    "documents": ("doc_id text NOT NULL, version text NOT NULL, seq bigint NOT NULL, "
                  "content_hash text NOT NULL, path text NOT NULL, title text NOT NULL, "
                  "format text NOT NULL, status text NOT NULL, updated_at text, metadata text NOT NULL, "
                  "parser text NOT NULL, parse_warnings text NOT NULL, chunker_config text NOT NULL, "
                  "raw_text text NOT NULL, parsed_text text NOT NULL, ingested_at text NOT NULL",
                  ("ALTER TABLE {s}.{t} ADD PRIMARY KEY (doc_id, version)",)),
    "acl": ("doc_id text NOT NULL, version text NOT NULL, groups text[] NOT NULL",
            ("ALTER TABLE {s}.{t} ADD PRIMARY KEY (doc_id, version)",)),
    "sections": ("id text NOT NULL, doc_id text NOT NULL, version text NOT NULL, start_at int NOT NULL, "
                 "end_at int NOT NULL, heading_path text NOT NULL, level int NOT NULL, parent_id text",
                 ("ALTER TABLE {s}.{t} ADD PRIMARY KEY (id)",
                  "CREATE INDEX ON {s}.{t} (doc_id, version)")),
    "chunks": ("rowid bigint NOT NULL, id text NOT NULL, doc_id text NOT NULL, version text NOT NULL, "
               "ord int NOT NULL, start_at int NOT NULL, end_at int NOT NULL, text text NOT NULL, "
               "kind text NOT NULL, heading_path text NOT NULL, section_id text NOT NULL, "
               "prefix text NOT NULL, header_start int, header_end int, token_count int NOT NULL, "
               "prev_id text, next_id text, duplicate_of text, over_limit boolean NOT NULL, "
               "config_id text NOT NULL, terms tsvector NOT NULL, tf jsonb NOT NULL, length int NOT NULL",
               ("ALTER TABLE {s}.{t} ADD PRIMARY KEY (rowid)",
                "CREATE UNIQUE INDEX ON {s}.{t} (id)",
                "CREATE INDEX ON {s}.{t} (doc_id, version, ord)")),
    # each chunk's statement vectors in a space, as in SQLite (docs/pipeline.md, "Statement vectors")
    "statement_vectors": ("chunk_rowid bigint NOT NULL, doc_id text NOT NULL, version text NOT NULL, "
                          "space_id text NOT NULL, statements_hash text NOT NULL, vectors bytea NOT NULL",
                          ("ALTER TABLE {s}.{t} ADD PRIMARY KEY (space_id, chunk_rowid)",
                           "CREATE INDEX ON {s}.{t} (space_id, statements_hash)",
                           "CREATE INDEX ON {s}.{t} (doc_id, version)")),
}
# per-part statistics tables
_STAT_TABLES = {
    "term_df": ("part int NOT NULL, term text NOT NULL, df bigint NOT NULL",
                ("ALTER TABLE {s}.{t} ADD PRIMARY KEY (term)",)),
    "term_delta": ("part int NOT NULL, term text NOT NULL, df bigint NOT NULL", ()),
    "corpus": ("part int NOT NULL, n_rows bigint NOT NULL, n_tokens bigint NOT NULL, folds bigint NOT NULL",
               ()),
    # one row per term and segment (what one flush wrote): the rows holding the term, ascending,
    # with their frequencies and lengths, as little-endian arrays (see _Postings)
    "postings": ("part int NOT NULL, seg bigint NOT NULL, term text NOT NULL, rowids bytea NOT NULL, "
                 "freqs bytea NOT NULL, lengths bytea NOT NULL",
                 ("CREATE INDEX ON {s}.{t} (term) INCLUDE (seg)",)),
}

_COORDINATOR = """
CREATE TABLE {s}.meta (key text PRIMARY KEY, value text NOT NULL);
CREATE TABLE {s}.configs (id text PRIMARY KEY, kind text NOT NULL, body text NOT NULL);
CREATE TABLE {s}.log (seq bigserial PRIMARY KEY, at text NOT NULL, index_version bigint NOT NULL,
    op text NOT NULL, doc_id text, version text, detail text NOT NULL);
CREATE TABLE {s}.tombstones (doc_id text PRIMARY KEY, deleted_at text NOT NULL, versions text NOT NULL);
CREATE TABLE {s}.spaces (id text PRIMARY KEY, n serial UNIQUE, dim int NOT NULL, body text NOT NULL,
    backend text NOT NULL, state text NOT NULL CHECK (state IN ('building', 'built', 'verified', 'active', 'retired')),
    created_at text NOT NULL, updated_at text NOT NULL);
CREATE TABLE {s}.partitions (part int PRIMARY KEY, server text);
CREATE SEQUENCE {s}.chunk_rowid;
CREATE SEQUENCE {s}.doc_seq;
CREATE SEQUENCE {s}.postings_seg;
"""


def _staged_columns(table: str) -> str:
    """The columns of a live per-document table that an index version's copy of a row keeps
    (a chunk's row id and its token columns are made again when it goes live)."""
    derived = ("rowid ", "terms ", "tf ", "length ")
    return ", ".join(c.strip() for c in _DOC_TABLES[table][0].split(",") if not c.strip().startswith(derived))


# Index versions built beside the live one (docs/ingest.md, "Index versions"; store/staging.py):
# on the coordinator, unpartitioned, whether or not the store is sharded. A version goes live
# through the store's own write path, which sends each row to its shard.
_PG_STAGED = """
CREATE TABLE IF NOT EXISTS {s}.index_versions (id text PRIMARY KEY, body text NOT NULL,
    state text NOT NULL CHECK (state IN ('building', 'built', 'verified', 'active', 'retired')),
    created_at text NOT NULL, updated_at text NOT NULL);
CREATE TABLE IF NOT EXISTS {s}.staged_versions (
    index_id text NOT NULL REFERENCES {s}.index_versions (id) ON DELETE CASCADE,
    doc_id text NOT NULL, version text NOT NULL, parser text NOT NULL, parse_warnings text NOT NULL,
    chunker_config text NOT NULL, parsed_text text NOT NULL, PRIMARY KEY (index_id, doc_id, version));
CREATE INDEX IF NOT EXISTS staged_versions_by_doc ON {s}.staged_versions (doc_id, version);
CREATE TABLE IF NOT EXISTS {s}.staged_sections (index_id text NOT NULL, {sections},
    PRIMARY KEY (index_id, id), FOREIGN KEY (index_id, doc_id, version)
    REFERENCES {s}.staged_versions (index_id, doc_id, version) ON DELETE CASCADE);
CREATE INDEX IF NOT EXISTS staged_sections_by_doc ON {s}.staged_sections (index_id, doc_id, version);
CREATE TABLE IF NOT EXISTS {s}.staged_chunks (index_id text NOT NULL, {chunks},
    PRIMARY KEY (index_id, id), FOREIGN KEY (index_id, doc_id, version)
    REFERENCES {s}.staged_versions (index_id, doc_id, version) ON DELETE CASCADE);
CREATE INDEX IF NOT EXISTS staged_chunks_by_doc ON {s}.staged_chunks (index_id, doc_id, version, ord);
CREATE TABLE IF NOT EXISTS {s}.staged_vectors (index_id text NOT NULL, doc_id text NOT NULL,
    version text NOT NULL, chunk_id text NOT NULL, space_id text NOT NULL, input_hash text NOT NULL,
    vector real[] NOT NULL, window_end int, PRIMARY KEY (index_id, space_id, chunk_id),
    FOREIGN KEY (index_id, doc_id, version) REFERENCES {s}.staged_versions (index_id, doc_id, version)
    ON DELETE CASCADE);
CREATE INDEX IF NOT EXISTS staged_vectors_by_doc ON {s}.staged_vectors (index_id, doc_id, version)
"""


def _pg_add_staged(conn: Any, schema: str) -> None:
    """Create the tables of index versions, and record the live index as :data:`INITIAL_INDEX`
    (idempotent), in the caller's transaction."""
    ddl = _PG_STAGED.format(s=schema, sections=_staged_columns("sections"), chunks=_staged_columns("chunks"))
    for statement in _pg_statements(ddl):
        conn.execute(statement)
    conn.execute(f"INSERT INTO {schema}.index_versions VALUES (%s, %s, 'active', %s, %s) ON CONFLICT (id) "
                 "DO NOTHING", (INITIAL_INDEX, index_settings(None, None, None).to_json(), now(), now()))

# The statistics follow the chunk rows in two steps. A statement trigger on the chunks appends
# each statement's term counts to ``term_delta`` (insert-only: +1 per row inserted, -1 per row
# deleted) and adds its rows and tokens to ``corpus``; before every commit the store bumps
# ``corpus.folds``, whose trigger folds the deltas into ``term_df`` in one upsert per term and
# empties ``term_delta``. Upserting ``term_df`` per statement instead rewrote a frequent term's
# row once per document, and inside one long ingest transaction each rewrite walks the chain of
# that row's earlier versions (docs/benchmarks.md). Reads add both tables, so the statistics are
# exact inside a writing transaction too; every commit leaves ``term_delta`` empty.
_STATS_TRIGGER = """
CREATE FUNCTION {s}.{t}_stats() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        INSERT INTO {s}.term_delta{sfx} (part, term, df)
            SELECT {part}, k, -count(*) FROM old_rows, jsonb_object_keys(old_rows.tf) k GROUP BY k;
        UPDATE {s}.corpus{sfx} SET n_rows = n_rows - (SELECT count(*) FROM old_rows),
            n_tokens = n_tokens - (SELECT coalesce(sum(length), 0) FROM old_rows);
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO {s}.term_delta{sfx} (part, term, df)
            SELECT {part}, k, count(*) FROM new_rows, jsonb_object_keys(new_rows.tf) k GROUP BY k;
        UPDATE {s}.corpus{sfx} SET n_rows = n_rows + (SELECT count(*) FROM new_rows),
            n_tokens = n_tokens + (SELECT coalesce(sum(length), 0) FROM new_rows);
    END IF;
    RETURN NULL;
END $fn$;
CREATE TRIGGER {t}_ins AFTER INSERT ON {s}.{t} REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {s}.{t}_stats();
CREATE TRIGGER {t}_del AFTER DELETE ON {s}.{t} REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {s}.{t}_stats();
CREATE TRIGGER {t}_upd AFTER UPDATE ON {s}.{t} REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {s}.{t}_stats();
CREATE FUNCTION {s}.term_delta{sfx}_fold() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    INSERT INTO {s}.term_df{sfx} (part, term, df)
        SELECT {part}, term, sum(df) FROM {s}.term_delta{sfx} GROUP BY term HAVING sum(df) <> 0
    ON CONFLICT (term) DO UPDATE SET df = {s}.term_df{sfx}.df + EXCLUDED.df;
    DELETE FROM {s}.term_df{sfx} d WHERE d.df <= 0
        AND d.term IN (SELECT term FROM {s}.term_delta{sfx} WHERE df < 0);
    DELETE FROM {s}.term_delta{sfx};
    RETURN NULL;
END $fn$;
CREATE TRIGGER term_delta{sfx}_fold AFTER UPDATE OF folds ON {s}.corpus{sfx}
    FOR EACH STATEMENT EXECUTE FUNCTION {s}.term_delta{sfx}_fold();
"""


def _pg_statements(script: str) -> list[str]:
    """Split a script at semicolons outside dollar-quoted bodies."""
    out, buffer, quoted = [], "", False
    for piece in re.split(r"(\$fn\$|;)", script):
        if piece == "$fn$":
            quoted = not quoted
        if piece == ";" and not quoted:
            if buffer.strip():
                out.append(buffer.strip())
            buffer = ""
        else:
            buffer += piece
    if buffer.strip():
        out.append(buffer.strip())
    return out


def local_part_ddl(schema: str, part: int | None) -> list[str]:
    """The statements creating one part's tables on the server that holds it: the per-document
    tables with their indexes, the statistics tables and their triggers. ``part`` None: the one
    unsharded copy, named like the coordinator's tables."""
    sfx = "" if part is None else f"_p{part}"
    out = [ddl for name in {**_DOC_TABLES, **_STAT_TABLES} for ddl in _table_ddl(schema, name, sfx)]
    out.append(f"INSERT INTO {schema}.corpus{sfx} VALUES ({part or 0}, 0, 0, 0)")
    out += _pg_statements(_STATS_TRIGGER.format(s=schema, t="chunks" + sfx, sfx=sfx, part=part or 0))
    return out


def _table_ddl(schema: str, name: str, sfx: str) -> list[str]:
    """One per-document or statistics table of a part (``sfx``: ``_p<n>``, or "" unsharded), with its indexes."""
    columns, indexes = {**_DOC_TABLES, **_STAT_TABLES}[name]
    return [f"CREATE TABLE {schema}.{name}{sfx} ({columns})",
            *[ddl.format(s=schema, t=name + sfx) for ddl in indexes]]


def sharded_table_ddl(schema: str, name: str, columns: str, parts: dict[int, Any], *,
                      by_doc: bool = True) -> list[str]:
    """The coordinator's side of a sharded table: a parent partitioned by hash of ``doc_id``
    (``by_doc``) or by its ``part`` column, and each part a foreign table on its shard."""
    out = [f"CREATE TABLE {schema}.{name} ({columns}) PARTITION BY "
           + ("HASH (doc_id)" if by_doc else "LIST (part)")]
    for part, server in parts.items():
        bound = f"WITH (MODULUS {len(parts)}, REMAINDER {part})" if by_doc else f"IN ({part})"
        out.append(f"CREATE FOREIGN TABLE {schema}.{name}_p{part} PARTITION OF {schema}.{name} "
                   f"FOR VALUES {bound} SERVER {server} "
                   f"OPTIONS (schema_name '{schema}', table_name '{name}_p{part}')")
    return out


def _pg_setup(self: PostgresStore, conn: Any) -> None:
    """Check (or, in mode ``create``, set up) the schema and the extensions."""
    s = self.schema
    have = conn.execute("SELECT 1 FROM information_schema.tables WHERE table_schema = %s "
                        "AND table_name = 'meta'", (s,)).fetchone()
    if have is None:
        other = conn.execute("SELECT count(*) FROM information_schema.tables WHERE table_schema = %s",
                             (s,)).fetchone()[0]
        if other:
            raise StoreError(f"{self.where}: the schema {s!r} holds {other} tables but no ragdx "
                             "store; ragdx neither reads nor adds to it (name another schema with "
                             "options=-csearch_path=NAME)")
        if self.mode is not OpenMode.CREATE:
            raise StoreError(f"{self.where}: no ragdx store in the schema {s!r} (check the DSN; "
                             "'ragdx ingest' creates one)")
        self._create(conn, parts=None)
        return
    self._require_vector(conn)
    row = conn.execute(f"SELECT value FROM {s}.meta WHERE key = 'schema_version'").fetchone()
    version = row[0] if row else None
    if not (isinstance(version, str) and version.isdigit()):
        raise StoreError(f"{self.where}: damaged store: schema_version is {version!r}, not a number")
    if int(version) < 3:
        raise StoreError(f"{self.where}: store schema {version} predates the BM25 postings of schema 3, "
                         f"which this ragdx (schema {PG_SCHEMA_VERSION}) reads; re-create it "
                         "('python -m ragdx.store.pg_admin drop DSN', then ingest again)")
    if int(version) > PG_SCHEMA_VERSION:
        raise StoreError(f"{self.where}: store schema {version} is newer than this ragdx "
                         f"({PG_SCHEMA_VERSION}); upgrade ragdx")
    if int(version) < PG_SCHEMA_VERSION:
        if self.mode is OpenMode.READ:
            raise StoreError(f"{self.where}: store schema {version} is older than this ragdx's "
                             f"({PG_SCHEMA_VERSION}: index versions); open it once for writing to migrate it")
        self._migrate(conn)
    if self.mode is not OpenMode.READ and conn.execute(
            f"SELECT 1 FROM {s}.meta WHERE key = 'store_id'").fetchone() is None:
        with conn.transaction():  # a store made before ids gets one, once, under the writers' lock
            self._take_write_lock(conn)
            conn.execute(f"INSERT INTO {s}.meta VALUES ('store_id', %s) ON CONFLICT (key) DO NOTHING",
                         (uuid.uuid4().hex,))


def _pg_require_vector(self: PostgresStore, conn: Any) -> None:
    """Make sure pgvector is enabled, and put its schema on the connection's search path."""
    row = conn.execute("SELECT extnamespace::regnamespace::text FROM pg_extension "
                       "WHERE extname = 'vector'").fetchone()
    if row is not None:
        self._vector_schema = row[0]
        conn.execute(f"SET search_path = {self.schema}, {row[0]}")
        return
    available = conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone()
    if not available:
        raise StoreError(f"{self.where}: the pgvector extension is not installed on this server "
                         "(Debian: apt-get install postgresql-15-pgvector, or scripts/pg_install.sh)")
    try:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector SCHEMA public")
    except Exception as exc:  # psycopg.Error: no right to create it
        raise StoreError(f"{self.where}: pgvector is installed but not enabled in this database, "
                         f"and it cannot be enabled here ({str(exc).strip()}): run 'CREATE "
                         "EXTENSION vector' as its owner") from None
    self._require_vector(conn)


def _pg_create(self: PostgresStore, conn: Any, parts: dict[int, str] | None) -> None:
    """Set up a new store: ``parts`` maps each hash part to its foreign server (None: one
    unsharded server).

    Raises:
        StoreError: the role may not create the schema (naming the grant that would let it).
    """
    import psycopg
    self._require_vector(conn)
    s = self.schema
    try:
        with conn.transaction():
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")
            for statement in _pg_statements(_COORDINATOR.format(s=s)):
                conn.execute(statement)
            if parts is None:
                for statement in local_part_ddl(s, None):
                    conn.execute(statement)
                conn.execute(f"INSERT INTO {s}.partitions VALUES (0, NULL)")
            else:
                for name, (columns, _) in {**_DOC_TABLES, **_STAT_TABLES}.items():
                    for statement in sharded_table_ddl(s, name, columns, parts, by_doc=name in _DOC_TABLES):
                        conn.execute(statement)
                conn.cursor().executemany(f"INSERT INTO {s}.partitions VALUES (%s, %s)", list(parts.items()))
            _pg_add_staged(conn, s)
            conn.execute(f"INSERT INTO {s}.meta VALUES ('schema_version', %s), ('index_version', '0'), "
                         "('store_id', %s)", (str(PG_SCHEMA_VERSION), uuid.uuid4().hex))
    except psycopg.errors.InsufficientPrivilege as exc:
        user, db = conn.info.user, conn.info.dbname
        raise StoreError(f"{self.where}: the role {user!r} may not create the store's schema {s!r} in the database "
                         f"{db!r} ({str(exc).splitlines()[0]}); nothing was made: ask the database's owner to run "
                         f"'GRANT CREATE ON DATABASE {db} TO {user}', or name a schema that exists "
                         "(options=-csearch_path=NAME)") from None


def _pg_migrate(self: PostgresStore, conn: Any) -> None:
    """Schema 3 -> 4 in one transaction under the writers' lock (a killed process leaves schema
    3, migrated again at the next open for writing): the tables of index versions, the live
    index recorded as :data:`INITIAL_INDEX`, and the statement vectors' table (empty: the next
    ingest or ``ragdx index build`` fills it). Nothing a query reads changes."""
    s = self.schema
    with conn.transaction():
        self._take_write_lock(conn)
        row = conn.execute(f"SELECT value FROM {s}.meta WHERE key = 'schema_version'").fetchone()
        if int(row[0]) >= PG_SCHEMA_VERSION:  # another writer migrated it meanwhile
            return
        log.info("%s: migrating the store from schema %s to %d", self.where, row[0], PG_SCHEMA_VERSION)
        _pg_add_staged(conn, s)
        _pg_add_doc_table(conn, s, "statement_vectors", self.where)
        conn.execute(f"UPDATE {s}.meta SET value = %s WHERE key = 'schema_version'", (str(PG_SCHEMA_VERSION),))


def _pg_add_doc_table(conn: Any, schema: str, name: str, where: str) -> None:
    """Add a per-document table to a store made before it, in the caller's transaction on the
    coordinator: sharded, each part's table is made on its shard first (committed there at once,
    made again if a killed migration left it)."""
    import psycopg
    if conn.execute("SELECT to_regclass(%s)", (f"{schema}.{name}",)).fetchone()[0] is not None:
        return  # there already
    parts = dict(conn.execute(f"SELECT part, server FROM {schema}.partitions ORDER BY part").fetchall())
    if list(parts.values()) == [None]:
        for statement in _table_ddl(schema, name, ""):
            conn.execute(statement)
        return
    for server in sorted(set(parts.values())):
        with psycopg.connect(_server_conninfo(conn, server, where), autocommit=True) as shard, shard.transaction():
            for part in (p for p, s in parts.items() if s == server):
                shard.execute(f"DROP TABLE IF EXISTS {schema}.{name}_p{part}")
                for statement in _table_ddl(schema, name, f"_p{part}"):
                    shard.execute(statement)
    for statement in sharded_table_ddl(schema, name, _DOC_TABLES[name][0], parts):
        conn.execute(statement)

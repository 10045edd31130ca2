"""The authoritative store: one SQLite file (WAL mode) holding every document version's exact text,
its access groups and status, its sections and chunks, the configs that produced them, and an
update log.

Writes happen inside :meth:`SQLiteStore.transaction`; a failure or a killed process leaves the
file exactly as before the transaction (SQLite's atomic commit). Every committed write bumps the
store's ``index_version``, which caches and run manifests record.
"""

from __future__ import annotations

import functools
import json
import logging
import sqlite3
import threading
import uuid
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from ragdx._faults import fault_point
from ragdx.errors import InputError, StoreError
from ragdx.store._attributes import attribute_changes
from ragdx.store.keyword import KeywordIndex, reload_all
from ragdx.types import (
    ChoiceEnum, Chunk, ChunkKind, Document, DocStatus, EmbeddingSpace, IndexSettings, IndexVersion, KeywordSettings,
    LogEntry, ParsedDocument, Section, SpaceState, StoredVersion, VectorBatch, VersionFilter,
)

log = logging.getLogger("ragdx.store")

SCHEMA_VERSION = 2  # 2: index versions built beside the live one (index_versions, staged_*)

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


def _schema() -> str:
    """The whole store's DDL."""
    return _SCHEMA.format(tokenizer=FTS_TOKENIZER, section_columns=_SECTION_COLUMN_DDL,
                          chunk_columns=_CHUNK_COLUMN_DDL)

#: Tables and indexes that schema 2 added (a store of schema 1 gets them when opened for writing).
_SINCE_2 = ("index_versions", "staged_")
#: The index version a store starts with: the chunks as ingested (its chunker and parsers are
#: whatever each ingest used; only a version built with 'ragdx index build --chunks' fixes them).
INITIAL_INDEX = "ix_0"

#: FTS5's tokenizer for the BM25 channel: Porter stemming over Unicode 6.1 word characters.
FTS_TOKENIZER = "porter unicode61 remove_diacritics 2"
#: FTS5's bm25() uses these constants; they cannot be changed from SQL (recorded in manifests).
FTS_BM25_K1 = 1.2
FTS_BM25_B = 0.75


def index_settings(chunker: str | None, parsers: Mapping[str, str] | None,
                   retain_superseded: int | None) -> IndexSettings:
    """An index version's settings with this store's keyword index (FTS5's tokenizer, k1 and b):
    the chunker config's JSON, the parser of each format and the retention (None each: as ingested,
    all)."""
    return IndexSettings(chunker, None if parsers is None else tuple(sorted(parsers.items())),
                         KeywordSettings(FTS_TOKENIZER, FTS_BM25_K1, FTS_BM25_B, retain_superseded))


def match_expression(terms: Sequence[str]) -> str | None:
    """An FTS5 MATCH expression: every term quoted as a string, joined by OR (FTS5's implicit
    operator is AND, which would demand every word of a question); None if there is no term.
    Quoting means no question can carry FTS5 syntax (``"``, ``*``, ``NEAR``, ``-``, ``:``,
    ``AND``/``OR``/``NOT``, parentheses) into the query."""
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms) if terms else None


class _Tokenizer:
    """The store's FTS5 tokenizer on any text: an in-memory FTS5 table, kept for the process."""

    def __init__(self) -> None:
        self._db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        self._db.execute(f"CREATE VIRTUAL TABLE t USING fts5(x, tokenize='{FTS_TOKENIZER}')")
        self._db.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
        self._lock = threading.Lock()

    def __call__(self, texts: Sequence[str]) -> dict[str, tuple[str, ...]]:
        """Each text's tokens in order."""
        tokens: dict[int, list[tuple[int, str]]] = {}
        with self._lock:
            self._db.execute("BEGIN")
            try:
                self._db.executemany("INSERT INTO t (rowid, x) VALUES (?, ?)", enumerate(texts))
                for term, doc, offset in self._db.execute("SELECT term, doc, offset FROM v"):
                    tokens.setdefault(doc, []).append((offset, term))
            finally:
                self._db.execute("ROLLBACK")
        return {text: tuple(t for _, t in sorted(tokens.get(i, []))) for i, text in enumerate(texts)}


@functools.lru_cache(maxsize=1)
def _tokenizer() -> _Tokenizer:
    return _Tokenizer()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _decoding(table: str) -> Callable[[Callable], Callable]:
    """A method that decodes rows of ``table``: a row that does not decode (a value outside its
    choices, JSON that does not parse) is a damaged store, said with a :class:`StoreError`."""
    def wrap(method: Callable) -> Callable:
        @functools.wraps(method)
        def decode(self: "SQLiteStore", *args: Any, **kwargs: Any) -> Any:
            try:
                return method(self, *args, **kwargs)
            except (ValueError, TypeError, KeyError) as exc:
                raise StoreError(f"{self.path}: damaged store: a row of the table {table} cannot be "
                                 f"read ({exc})") from None
        return decode
    return wrap


def _prefixed(alias: str, columns: str) -> str:
    return ", ".join(f"{alias}.{c.strip()}" for c in columns.split(","))


class OpenMode(ChoiceEnum):
    """How a store is opened.

    - ``read``: an existing ragdx store, read-only. Nothing is set up or migrated and no lock is
      taken, so readers work while another process writes (WAL readers see the last commit).
    - ``write``: an existing ragdx store, for writing; its schema is brought up to date and it
      must pass SQLite's quick integrity check first.
    - ``create``: like ``write``, and a missing file becomes a new store.
    """

    READ = "read"
    WRITE = "write"
    CREATE = "create"


class SQLiteStore:
    """The authoritative store in one SQLite file.

    Args:
        path: the database file.
        mode: :class:`OpenMode` (default ``create``: a missing file becomes a new store).
        wait: how long a write waits for another process's write to finish, in seconds.

    Raises:
        StoreError: no store at ``path`` (modes ``read`` and ``write``), a file that is not a
            ragdx store (another SQLite database, a damaged or newer schema), or, opened for
            writing, a file that fails SQLite's integrity check.
    """

    def __init__(self, path: str | Path, mode: OpenMode | str = OpenMode.CREATE, *,
                 wait: float = 30.0) -> None:
        self.path = Path(path)
        self.mode = OpenMode.parse(mode, what="store mode")
        self.wait = wait
        if self.path.is_dir():
            raise InputError("the store path is a directory; give a file such as store.db",
                             file=str(self.path))
        exists = self.path.exists()
        if not exists and self.mode is not OpenMode.CREATE:
            raise StoreError(f"{self.path}: no store here (check the path; 'ragdx ingest' creates "
                             "a store)")
        if exists and not self.path.is_file():
            raise StoreError(f"{self.path}: not a regular file, so not a store")
        self._created = not exists
        self._lock = threading.RLock()
        self._in_tx = False
        self._readable: dict[tuple[str, ...], tuple[int, frozenset[int]]] = {}
        self._token_total: tuple[int | None, int] = (None, 0)
        self._keyword: KeywordIndex | None = None
        self._token_cache: dict[str, tuple[str, ...]] = {}
        self._schema = SCHEMA_VERSION
        try:
            if self.mode is OpenMode.READ:
                self._db = sqlite3.connect(self.path.resolve().as_uri() + "?mode=ro", uri=True,
                                           isolation_level=None, check_same_thread=False)
            else:
                self._db = sqlite3.connect(str(self.path), isolation_level=None,
                                           check_same_thread=False, timeout=1.0)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: cannot open the store: {exc}") from None
        try:
            self._db.execute("PRAGMA foreign_keys=ON")
            self._check_schema()
            if self.mode is not OpenMode.READ:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
                self._init_schema()
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise StoreError(f"{self.path}: cannot open the store: {exc}") from None
        except BaseException:
            self._db.close()
            raise

    # -- lifecycle --------------------------------------------------------------------------
    def _check_schema(self) -> None:
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
        if int(version) > SCHEMA_VERSION:
            raise StoreError(f"{self.path}: store schema {version} is newer than this ragdx "
                             f"({SCHEMA_VERSION}); upgrade ragdx")
        row = self._db.execute("SELECT value FROM meta WHERE key='index_version'").fetchone()
        if row is None or not (isinstance(row[0], str) and row[0].isdigit() and row[0].isascii()):
            raise StoreError(f"{self.path}: damaged store: index_version is "
                             f"{row[0] if row else None!r}, not a number")
        expected = _expected_schema()
        if int(version) < 2:  # migrated when opened for writing (_init_schema)
            expected = {k: v for k, v in expected.items() if not k[1].startswith(_SINCE_2)}
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

    def _init_schema(self) -> None:
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
            if self._schema < SCHEMA_VERSION:
                self._migrate()
            self._give_id()
            return
        with self.transaction():
            # statement by statement: executescript would commit our transaction
            for statement in _statements(_schema()):
                self._db.execute(statement)
            self._db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)",
                             (str(SCHEMA_VERSION),))
            self._db.execute("INSERT OR IGNORE INTO meta VALUES ('index_version', '0')")
            self._db.execute("INSERT OR IGNORE INTO meta VALUES ('store_id', ?)", (uuid.uuid4().hex,))
            self._add_initial_index()
        self._schema = SCHEMA_VERSION

    def _migrate(self) -> None:
        """Bring a store of an older schema up to this one, in one transaction (a killed process
        leaves the old schema, migrated again at the next write). 1 -> 2: the tables of index
        versions, and the live index recorded as :data:`INITIAL_INDEX`."""
        log.info("%s: migrating the store from schema %d to %d", self.path, self._schema, SCHEMA_VERSION)
        with self.transaction():
            row = self._db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if int(row[0]) >= SCHEMA_VERSION:  # another writer migrated it since we read it
                self._schema = int(row[0])
                return
            for statement in _statements(_schema()):
                self._db.execute(statement)  # IF NOT EXISTS: only what is new is made
            self._add_initial_index()
            self._db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
        self._schema = SCHEMA_VERSION

    def _give_id(self) -> None:
        """Give a store made before store ids its id, once, under the write lock (a writer that
        gave it one meanwhile wins: INSERT OR IGNORE). The id is not something a query sees, so
        the index version stays."""
        if self.store_id is None:
            with self.transaction():
                self._db.execute("INSERT OR IGNORE INTO meta VALUES ('store_id', ?)", (uuid.uuid4().hex,))

    def _add_initial_index(self) -> None:
        body = index_settings(None, None, None).to_json()
        self._db.execute("INSERT OR IGNORE INTO index_versions VALUES (?, ?, 'active', ?, ?)",
                         (INITIAL_INDEX, body, _now(), _now()))

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "SQLiteStore":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        # a store this process created and that a failure left empty is removed: a failed
        # command leaves no store behind (an ingest whose manifest is missing, say)
        remove = exc_type is not None and self._created and self._is_empty()
        self.close()
        if remove:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{self.path}{suffix}").unlink(missing_ok=True)

    def _is_empty(self) -> bool:
        try:
            return self.index_version == 0
        except (sqlite3.DatabaseError, TypeError):
            return False

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One atomic write. Nested calls join the outer transaction.

        Everything written inside commits together, or not at all; the commit bumps
        ``index_version`` when anything changed.
        """
        with self._lock:
            if self._in_tx:
                yield
                return
            self._begin()
            self._in_tx = True
            self._changed = False
            try:
                yield
                if self._changed:
                    self._db.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 "
                                     "WHERE key = 'index_version'")
                fault_point("commit")
                self._db.execute("COMMIT")
                fault_point("committed")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            finally:
                self._in_tx = False

    def _begin(self) -> None:
        """Take the write lock; while another process writes, wait up to ``wait`` seconds."""
        if self.mode is OpenMode.READ:
            raise StoreError(f"{self.path}: the store was opened read-only; open it with "
                             "mode='write' to change it")
        try:
            self._db.execute("BEGIN IMMEDIATE")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
        log.warning("%s: another process is writing to this store; waiting up to %g s for it "
                    "to finish", self.path, self.wait)
        self._db.execute(f"PRAGMA busy_timeout = {max(0, int(self.wait * 1000))}")
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            raise StoreError(f"{self.path}: another process is still writing to this store after "
                             f"{self.wait:g} s; nothing was written: try again when it has "
                             "finished") from None
        finally:
            self._db.execute("PRAGMA busy_timeout = 1000")

    def _write(self, sql: str, args: tuple | list = ()) -> sqlite3.Cursor:
        if not self._in_tx:
            raise StoreError("store writes must happen inside store.transaction()")
        self._changed = True
        return self._db.execute(sql, args)

    @property
    def store_id(self) -> str | None:
        """A random id (32 hex digits) given to the store when it was created, never reused: a
        cache or an answer bound to a store replaced at the same path knows it is not this
        store's. A store made before ids gets one when first opened for writing; until then
        (opened read-only) it is None."""
        row = self._db.execute("SELECT value FROM meta WHERE key='store_id'").fetchone()
        return row[0] if row else None

    @property
    def in_write_transaction(self) -> bool:
        """Whether this connection is inside its own :meth:`transaction`: what it reads then
        includes writes that may still be rolled back, so no cache takes them as a generation."""
        return self._in_tx

    @property
    def index_version(self) -> int:
        """A counter bumped by every committed change; caches are bound to it."""
        return int(self._db.execute("SELECT value FROM meta WHERE key='index_version'").fetchone()[0])

    # -- writes -----------------------------------------------------------------------------
    def insert_version(self, document: Document, raw_text: str, parsed: ParsedDocument,
                       sections: tuple[Section, ...], chunks: tuple[Chunk, ...],
                       chunker_config: str) -> None:
        """Store a new document version with its text, access groups, sections and chunks."""
        seq = self._db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM documents").fetchone()[0]
        self._write(
            "INSERT INTO documents VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (document.doc_id, document.version, seq, document.content_hash, document.path,
             document.title, document.format, document.status.value, document.updated_at,
             json.dumps(dict(document.metadata), sort_keys=True), parsed.parser,
             json.dumps(list(parsed.warnings)), chunker_config, raw_text, parsed.text, _now()))
        self._write_acl(document)
        self._write_chunks(document, sections, chunks, chunker_config)
        self._db.execute("DELETE FROM tombstones WHERE doc_id = ?", (document.doc_id,))
        self.log("add", document.doc_id, document.version,
                 f"{len(chunks)} chunks, status {document.status.value}, acl {list(document.acl)}")

    def _write_acl(self, document: Document) -> None:
        self._write("DELETE FROM acl WHERE doc_id = ? AND version = ?",
                    (document.doc_id, document.version))
        for group in sorted(set(document.acl)):
            self._write("INSERT INTO acl VALUES (?,?,?)", (document.doc_id, document.version, group))

    #: The stored columns of a chunk and a section (the live tables, and the staged ones after ``index_id``).
    _STORED_CHUNK_COLUMNS = ("id, doc_id, version, ord, start, end, text, kind, heading_path, section_id, "
                             "prefix, header_start, header_end, token_count, prev_id, next_id, "
                             "duplicate_of, over_limit, config_id")
    _SECTION_COLUMNS = "id, doc_id, version, start, end, heading_path, level, parent_id"

    def _write_chunks(self, document: Document, sections: tuple[Section, ...],
                      chunks: tuple[Chunk, ...], chunker_config: str) -> None:
        key = (document.doc_id, document.version)
        self._write("DELETE FROM chunks WHERE doc_id = ? AND version = ?", key)
        self._write("DELETE FROM sections WHERE doc_id = ? AND version = ?", key)
        self._insert_rows("", (), sections, chunks, chunker_config)

    def _insert_rows(self, table_prefix: str, key: tuple, sections: Sequence[Section],
                     chunks: Sequence[Chunk], chunker_config: str) -> None:
        """Insert sections and chunks into the live tables (``table_prefix`` "") or an index
        version's (``"staged_"``, ``key`` its ``(index_id,)``): the one place their rows are built."""
        lead = "index_id, " if key else ""
        self._db.executemany(
            f"INSERT INTO {table_prefix}sections ({lead}{self._SECTION_COLUMNS}) VALUES "
            f"({','.join('?' * (len(key) + 8))})",
            [(*key, s.id, s.doc_id, s.version, s.start, s.end, json.dumps(list(s.heading_path)), s.level,
              s.parent_id) for s in sections])
        self._db.executemany(
            f"INSERT INTO {table_prefix}chunks ({lead}{self._STORED_CHUNK_COLUMNS}) VALUES "
            f"({','.join('?' * (len(key) + 19))})",
            [(*key, c.id, c.doc_id, c.version, i, c.start, c.end, c.text, c.kind.value,
              json.dumps(list(c.heading_path)), c.section_id, c.prefix,
              c.header[0] if c.header else None, c.header[1] if c.header else None, c.token_count,
              c.prev_id, c.next_id, c.duplicate_of, int(c.over_limit), c.config_id)
             for i, c in enumerate(chunks)])
        if chunks:
            self._db.execute("INSERT OR IGNORE INTO configs VALUES (?, 'chunker', ?)",
                             (chunks[0].config_id, chunker_config))

    def replace_chunks(self, document: Document, parsed: ParsedDocument,
                       sections: tuple[Section, ...], chunks: tuple[Chunk, ...],
                       chunker_config: str) -> None:
        """Re-chunk a stored version (a new parser or chunker config); the text is unchanged."""
        self._write("UPDATE documents SET parser = ?, parse_warnings = ?, chunker_config = ?, "
                    "parsed_text = ? WHERE doc_id = ? AND version = ?",
                    (parsed.parser, json.dumps(list(parsed.warnings)), chunker_config, parsed.text,
                     document.doc_id, document.version))
        self._write_chunks(document, sections, chunks, chunker_config)
        self.log("rechunk", document.doc_id, document.version, f"{len(chunks)} chunks")

    def update_attributes(self, document: Document) -> list[str]:
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
            self._write("UPDATE documents SET status = ?, title = ?, path = ?, metadata = ?, "
                        "updated_at = ? WHERE doc_id = ? AND version = ?",
                        (document.status.value, document.title, document.path,
                         json.dumps(dict(document.metadata), sort_keys=True), document.updated_at,
                         document.doc_id, document.version))
            self._write_acl(document)
        return changed

    def set_status(self, doc_id: str, version: str, status: DocStatus, reason: str) -> None:
        self._write("UPDATE documents SET status = ? WHERE doc_id = ? AND version = ?",
                    (status.value, doc_id, version))
        self.log("status", doc_id, version, f"-> {status.value}: {reason}")

    def delete_document(self, doc_id: str) -> list[str]:
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
                    (doc_id, _now(), json.dumps(versions)))
        self.log("delete", doc_id, None, f"versions {versions}")
        return versions

    def log(self, op: str, doc_id: str | None, version: str | None, detail: str) -> None:
        self._write("INSERT INTO log (at, index_version, op, doc_id, version, detail) "
                    "VALUES (?,?,?,?,?,?)", (_now(), self.index_version + 1, op, doc_id, version, detail))

    # -- reads ------------------------------------------------------------------------------
    @_decoding("documents")
    def _version_row(self, row: tuple) -> StoredVersion:
        (doc_id, version, seq, content_hash, path, title, fmt, status, updated_at, metadata,
         parser, warnings, chunker_config, ingested_at) = row
        acl = tuple(r[0] for r in self._db.execute(
            "SELECT grp FROM acl WHERE doc_id = ? AND version = ? ORDER BY grp", (doc_id, version)))
        document = Document(doc_id, version, content_hash, path, title, acl, DocStatus(status),
                            updated_at, json.loads(metadata), fmt)
        return StoredVersion(document, seq, parser, tuple(json.loads(warnings)), chunker_config,
                             ingested_at)

    _VERSION_COLUMNS = ("doc_id, version, seq, content_hash, path, title, format, status, "
                        "updated_at, metadata, parser, parse_warnings, chunker_config, ingested_at")

    def version(self, doc_id: str, version: str) -> StoredVersion | None:
        row = self._db.execute(f"SELECT {self._VERSION_COLUMNS} FROM documents "
                               "WHERE doc_id = ? AND version = ?", (doc_id, version)).fetchone()
        return self._version_row(row) if row else None

    def versions(self, doc_id: str | None = None) -> list[StoredVersion]:
        """Stored versions in ingestion order, of one document or of all."""
        where, args = ("WHERE doc_id = ?", (doc_id,)) if doc_id is not None else ("", ())
        rows = self._db.execute(f"SELECT {self._VERSION_COLUMNS} FROM documents {where} "
                                "ORDER BY seq", args).fetchall()
        return [self._version_row(r) for r in rows]

    def latest(self, doc_id: str) -> StoredVersion | None:
        """The current version ingested last, or else the version ingested last."""
        found = self.versions(doc_id)
        current = [v for v in found if v.document.status is DocStatus.CURRENT]
        return (current or found or [None])[-1]

    def doc_ids(self) -> list[str]:
        return [r[0] for r in self._db.execute(
            "SELECT doc_id FROM documents GROUP BY doc_id ORDER BY MIN(seq)")]

    def texts(self, doc_id: str, version: str) -> tuple[str, str]:
        """The raw source text and the parsed text of a version."""
        row = self._db.execute("SELECT raw_text, parsed_text FROM documents "
                               "WHERE doc_id = ? AND version = ?", (doc_id, version)).fetchone()
        if row is None:
            raise InputError(f"no version {version!r} of document {doc_id!r} in the store")
        return row[0], row[1]

    _CHUNK_COLUMNS = ("id, doc_id, version, start, end, text, kind, heading_path, section_id, "
                      "prefix, header_start, header_end, token_count, prev_id, next_id, "
                      "duplicate_of, over_limit, config_id")

    @_decoding("chunks")
    def _chunk_row(self, row: tuple) -> Chunk:
        (cid, doc_id, version, start, end, text, kind, path, section_id, prefix, hs, he, tokens,
         prev_id, next_id, dup, over, config_id) = row
        return Chunk(cid, doc_id, version, start, end, text, ChunkKind(kind), tuple(json.loads(path)),
                     section_id, prefix, (hs, he) if hs is not None else None, tokens, prev_id,
                     next_id, dup, bool(over), config_id)

    def chunks(self, doc_id: str | None = None, version: str | None = None) -> list[Chunk]:
        """Chunks in reading order, of one version, of every version of a document, or of all."""
        clauses, args = [], []
        if doc_id is not None:
            clauses.append("doc_id = ?")
            args.append(doc_id)
        if version is not None:
            clauses.append("version = ?")
            args.append(version)
        where = ("WHERE " + " AND ".join(clauses)) if clauses else ""
        return [self._chunk_row(r) for r in self._db.execute(
            f"SELECT {self._CHUNK_COLUMNS} FROM chunks {where} ORDER BY doc_id, version, ord", args)]

    def chunk_count(self, doc_id: str, version: str) -> int:
        return self._db.execute("SELECT COUNT(*) FROM chunks WHERE doc_id = ? AND version = ?",
                                (doc_id, version)).fetchone()[0]

    def chunks_by_id(self, ids: list[str]) -> dict[str, Chunk]:
        out: dict[str, Chunk] = {}
        for i in range(0, len(ids), 500):
            batch = ids[i:i + 500]
            marks = ",".join("?" * len(batch))
            for row in self._db.execute(f"SELECT {self._CHUNK_COLUMNS} FROM chunks WHERE id IN ({marks})",
                                        batch):
                chunk = self._chunk_row(row)
                out[chunk.id] = chunk
        return out

    @_decoding("sections")
    def section(self, section_id: str) -> Section | None:
        row = self._db.execute("SELECT id, doc_id, version, start, end, heading_path, level, parent_id "
                               "FROM sections WHERE id = ?", (section_id,)).fetchone()
        if row is None:
            return None
        return Section(row[0], row[1], row[2], row[3], row[4], tuple(json.loads(row[5])), row[6], row[7])

    def sections(self, doc_id: str, version: str) -> list[Section]:
        rows = self._db.execute("SELECT id FROM sections WHERE doc_id = ? AND version = ? "
                                "ORDER BY start, level", (doc_id, version)).fetchall()
        return [s for s in (self.section(r[0]) for r in rows) if s is not None]

    def neighbours(self, chunk_id: str, n: int = 1) -> list[Chunk]:
        """The chunk with up to ``n`` chunks on each side, in reading order (small-to-big)."""
        found = self.chunks_by_id([chunk_id])
        if chunk_id not in found:
            raise InputError(f"no chunk {chunk_id!r} in the store")
        centre = found[chunk_id]
        ords = self._db.execute("SELECT ord FROM chunks WHERE id = ?", (chunk_id,)).fetchone()[0]
        rows = self._db.execute(
            f"SELECT {self._CHUNK_COLUMNS} FROM chunks WHERE doc_id = ? AND version = ? "
            "AND ord BETWEEN ? AND ? ORDER BY ord", (centre.doc_id, centre.version, ords - n, ords + n))
        return [self._chunk_row(r) for r in rows]

    @_decoding("tombstones")
    def tombstone(self, doc_id: str) -> tuple[str, list[str]] | None:
        """When a deleted document was deleted, and which versions it had."""
        row = self._db.execute("SELECT deleted_at, versions FROM tombstones WHERE doc_id = ?",
                               (doc_id,)).fetchone()
        return (row[0], json.loads(row[1])) if row else None

    def log_entries(self, since: int = 0) -> list[LogEntry]:
        return [LogEntry(*r) for r in self._db.execute(
            "SELECT seq, at, index_version, op, doc_id, version, detail FROM log WHERE seq > ? "
            "ORDER BY seq", (since,))]

    def counts(self) -> dict[str, int]:
        """How many documents, versions, chunks and sections the store holds."""
        q = self._db.execute
        return {"documents": q("SELECT COUNT(DISTINCT doc_id) FROM documents").fetchone()[0],
                "versions": q("SELECT COUNT(*) FROM documents").fetchone()[0],
                "chunks": q("SELECT COUNT(*) FROM chunks").fetchone()[0],
                "sections": q("SELECT COUNT(*) FROM sections").fetchone()[0],
                "deleted": q("SELECT COUNT(*) FROM tombstones").fetchone()[0]}

    # -- access --------------------------------------------------------------------------
    def readable(self, groups: tuple[str, ...], doc_id: str, version: str) -> bool:
        """Whether a principal with these groups may read this version (checked on every read)."""
        marks = ",".join("?" * len(groups))
        return self._db.execute(
            f"SELECT 1 FROM acl WHERE doc_id = ? AND version = ? AND grp IN ({marks}) LIMIT 1",
            (doc_id, version, *groups)).fetchone() is not None

    # -- lexical search ---------------------------------------------------------------------
    def readable_rowids(self, groups: tuple[str, ...], versions: VersionFilter | None = None) -> frozenset[int]:
        """Row ids of the searchable chunks (not duplicates) that these groups may read, of the
        versions the filter allows (all when None); cached until the store changes (bound to
        ``index_version``)."""
        readable = self._readable_rowids(groups)
        if versions is None or not versions.current_only:
            return readable
        key = ("versions", versions.named)
        cached = self._readable.get(key)
        if cached is None or cached[0] != self.index_version:
            rows = frozenset(r[0] for r in self._db.execute(
                "SELECT c.rowid, c.version, d.status FROM chunks c JOIN documents d ON d.doc_id = c.doc_id "
                "AND d.version = c.version WHERE c.duplicate_of IS NULL") if versions.allows(r[1], r[2]))
            cached = (self.index_version, rows)
            self._readable[key] = cached
        return readable & cached[1]

    def _readable_rowids(self, groups: tuple[str, ...]) -> frozenset[int]:
        key = (tuple(sorted(set(groups))), self.index_version)
        cached = self._readable.get(key[0])
        if cached is not None and cached[0] == key[1]:
            return cached[1]
        marks = ",".join("?" * len(key[0]))
        rows = frozenset(r[0] for r in self._db.execute(
            "SELECT c.rowid FROM chunks c WHERE c.duplicate_of IS NULL AND EXISTS (SELECT 1 FROM acl a "
            f"WHERE a.doc_id = c.doc_id AND a.version = c.version AND a.grp IN ({marks}))", key[0]))
        self._readable[key[0]] = (key[1], rows)
        return rows

    def keyword_statistics(self, terms: Sequence[str]) -> tuple[int, float, dict[str, int]]:
        """What FTS5's ``bm25()`` scores with: the index's row count, its average row length in
        tokens (every column), and how many rows hold each of ``terms`` (tokens as the index holds
        them). A cache asks, to score a changed document's chunks for a cached question."""
        self._db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.ragdx_cache_vocab USING "
                         "fts5vocab(main, 'chunks_fts', 'row')")
        version = self.index_version
        if self._token_total[0] != version:
            total = self._db.execute("SELECT COALESCE(SUM(cnt), 0) FROM temp.ragdx_cache_vocab").fetchone()[0]
            self._token_total = (version, total)
        rows = self._db.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
        found = {t: self._db.execute("SELECT doc FROM temp.ragdx_cache_vocab WHERE term = ?", (t,)).fetchone()
                 for t in dict.fromkeys(terms)}
        return rows, self._token_total[1] / max(rows, 1), {t: r[0] if r else 0 for t, r in found.items()}

    @property
    def bm25_config(self) -> dict[str, object]:
        """How the keyword index scores (FTS5 fixes k1 and b)."""
        return {"tokenizer": FTS_TOKENIZER, "k1": FTS_BM25_K1, "b": FTS_BM25_B, "operator": "OR"}

    def bm25(self, terms: Sequence[str], groups: tuple[str, ...], limit: int,
             weights: tuple[float, float] = (0.5, 1.0),
             versions: VersionFilter | None = None) -> list[tuple[Chunk, float]]:
        """BM25 search among the chunks the groups may read: the best ``limit`` readable chunks,
        ranked and scored as FTS5's ``bm25()`` ranks them (:meth:`fts5_bm25`), with the access
        and version filters inside the search. Scores are ``-bm25()``: higher is better; ties go
        to the older row.

        The search runs on a posting matrix mirrored from FTS5's index
        (:class:`~ragdx.store.keyword.KeywordIndex`), checked against the store's
        ``index_version`` in the query's own read transaction and brought up to date before it
        answers, so a change committed by any process is in the next query's N, lengths and
        document frequencies. Inside this store's own write transaction, or for a term FTS5
        splits into several tokens, FTS5 answers itself.

        Args:
            terms: the query's terms, matched with OR semantics (:func:`match_expression`).
            groups: the principal's access groups.
            limit: how many to return.
            weights: bm25() column weights for the prefix and the text (a weight scales term
                frequency; lengths and document frequencies count every column).
            versions: which versions may be returned (None: every version).
        """
        if not terms:
            return []
        with self._lock:
            if self._in_tx:  # our uncommitted writes: only FTS5 sees them
                return self.fts5_bm25(terms, groups, limit, weights, versions)
            self._db.execute("BEGIN")  # one snapshot for the generation, the search and the rows
            try:
                index = self._keyword_index()
                tokens = self._query_tokens(terms)
                if tokens is None:
                    return self.fts5_bm25(terms, groups, limit, weights, versions)
                allowed = self._search_mask(index, groups, versions)
                hits = index.search(index.phrases(tokens), weights, allowed, limit)
                return self._hit_chunks(hits)
            finally:
                self._db.execute("COMMIT")

    def fts5_bm25(self, terms: Sequence[str], groups: tuple[str, ...], limit: int,
                  weights: tuple[float, float] = (0.5, 1.0),
                  versions: VersionFilter | None = None) -> list[tuple[Chunk, float]]:
        """:meth:`bm25` answered by FTS5 itself (``MATCH`` and ``bm25()`` in SQL): the reference
        the posting matrix is checked against.

        FTS5 ranks its matches; unreadable ones are skipped, fetching four times deeper until
        ``limit`` readable ones are found or the matches run out.
        """
        match = match_expression(terms)
        if match is None:
            return []
        allowed = self.readable_rowids(groups, versions)
        fetch = max(limit * 4, 64)
        while True:
            rows = self._db.execute(
                "SELECT rowid, -bm25(chunks_fts, ?, ?) AS score FROM chunks_fts WHERE chunks_fts "
                "MATCH ? ORDER BY score DESC, rowid LIMIT ?", (*weights, match, fetch)).fetchall()
            hits = [(rowid, score) for rowid, score in rows if rowid in allowed][:limit]
            if len(hits) == limit or len(rows) < fetch:
                break
            fetch *= 4
        return self._hit_chunks(hits)

    def _hit_chunks(self, hits: list[tuple[int, float]]) -> list[tuple[Chunk, float]]:
        columns = ", ".join("c." + c.strip() for c in self._CHUNK_COLUMNS.split(","))
        by_rowid = {}
        for i in range(0, len(hits), 500):
            batch = [rowid for rowid, _ in hits[i:i + 500]]
            for row in self._db.execute(f"SELECT c.rowid, {columns} FROM chunks c WHERE c.rowid IN "
                                        f"({','.join('?' * len(batch))})", batch):
                by_rowid[row[0]] = self._chunk_row(row[1:])
        return [(by_rowid[rowid], score) for rowid, score in hits]

    def _keyword_index(self) -> KeywordIndex:
        """The posting matrix at the store's current generation (call inside a read transaction)."""
        generation = self.index_version
        index = self._keyword
        if index is not None and index.generation != generation and reload_all(self.log_entries(index.log_seq)):
            index = None  # an index version was switched: every chunk is new
        if index is not None and index.generation != generation:
            try:
                index.patch(self._db, generation, FTS_TOKENIZER)
            except StoreError as exc:  # the log did not name every change: read it all again
                log.warning("%s: rebuilding the keyword index (%s)", self.path, exc)
                index = None
        if index is None:
            index = self._keyword = KeywordIndex.build(self._db, generation, FTS_BM25_K1, FTS_BM25_B)
        return index

    def _query_tokens(self, terms: Sequence[str]) -> list[str | None] | None:
        """Each term's FTS5 token (None: it has none), or None if a term has several (a phrase
        the posting matrix does not match)."""
        missing = [t for t in dict.fromkeys(terms) if t not in self._token_cache]
        if missing:
            if len(self._token_cache) > 100_000:
                self._token_cache.clear()
            self._token_cache.update(_tokenizer()(missing))
        found = [self._token_cache[t] for t in terms]
        if any(len(tokens) > 1 for tokens in found):
            return None
        return [tokens[0] if tokens else None for tokens in found]

    def _search_mask(self, index: KeywordIndex, groups: tuple[str, ...],
                     versions: VersionFilter | None) -> Any:
        """The mirror's rows these groups may read and the filter allows (cached for the
        generation: per groups, and per set of versions the question names)."""
        who = tuple(sorted(set(groups)))
        readable = index.cached(("acl", who), lambda: index.key_mask(self._readable_versions(who)))
        if versions is None or not versions.current_only:
            return index.cached(("rows", who), lambda: index.row_mask(readable))
        current, others = index.cached(("status",), lambda: self._status_masks(index))
        named = tuple(i for i, version in others if versions.names(version)) if versions.named else ()
        def make() -> Any:
            flags = current.copy()
            flags[list(named)] = True
            return index.row_mask(readable & flags)
        return index.cached(("rows", who, named), make)

    def _readable_versions(self, groups: tuple[str, ...]) -> list[tuple[str, str]]:
        marks = ",".join("?" * len(groups))
        return self._db.execute(f"SELECT DISTINCT doc_id, version FROM acl WHERE grp IN ({marks})",
                                groups).fetchall()

    def _status_masks(self, index: KeywordIndex) -> tuple[Any, list[tuple[int, str]]]:
        """The mirror's current versions as flags, and its other versions (index, label)."""
        rows = self._db.execute("SELECT doc_id, version, status FROM documents").fetchall()
        current = index.key_mask((d, v) for d, v, status in rows if status == DocStatus.CURRENT.value)
        others = [(index.key_ids[(d, v)], v) for d, v, status in rows
                  if status != DocStatus.CURRENT.value and (d, v) in index.key_ids]
        return current, others

    # -- vectors and embedding spaces ------------------------------------------------------
    def register_space(self, space: EmbeddingSpace, backend: str) -> None:
        """Record an embedding space (state ``building``) if it is new."""
        if self._db.execute("SELECT 1 FROM spaces WHERE id = ?", (space.id,)).fetchone():
            return
        body = json.dumps({k: getattr(space, k) for k in space.__slots__}, sort_keys=True)
        self._write("INSERT INTO spaces VALUES (?,?,?,'building',?,?)",
                    (space.id, body, backend, _now(), _now()))
        self.log("space", None, None, f"registered {space.id} ({space.model_id}, {backend})")

    @_decoding("spaces")
    def spaces(self) -> list[tuple[EmbeddingSpace, str, SpaceState, int]]:
        """Every registered space: the space, its backend, its state and its vector count."""
        out = []
        for sid, body, backend, state in self._db.execute(
                "SELECT id, body, backend, state FROM spaces ORDER BY created_at, id"):
            count = self._db.execute("SELECT COUNT(*) FROM vectors WHERE space_id = ?",
                                     (sid,)).fetchone()[0]
            out.append((EmbeddingSpace(**json.loads(body)), backend, SpaceState(state), count))
        return out

    def space_state(self, space_id: str) -> SpaceState | None:
        row = self._db.execute("SELECT state FROM spaces WHERE id = ?", (space_id,)).fetchone()
        return SpaceState(row[0]) if row else None

    def set_space_state(self, space_id: str, state: SpaceState, reason: str) -> None:
        self._write("UPDATE spaces SET state = ?, updated_at = ? WHERE id = ?",
                    (state, _now(), space_id))
        self.log("space", None, None, f"{space_id} -> {state}: {reason}")

    @_decoding("spaces")
    def active_space(self) -> EmbeddingSpace | None:
        """The space the dense channel searches, if any."""
        row = self._db.execute("SELECT body FROM spaces WHERE state = 'active'").fetchone()
        return EmbeddingSpace(**json.loads(row[0])) if row else None

    def vectors_by_input(self, space_id: str, hashes: list[str]) -> dict[str, tuple[bytes, int | None]]:
        """Stored vectors of this space whose input text has these hashes (to skip re-encoding)."""
        out: dict[str, tuple[bytes, int | None]] = {}
        for i in range(0, len(hashes), 500):
            batch = hashes[i:i + 500]
            marks = ",".join("?" * len(batch))
            for h, vector, end in self._db.execute(
                    f"SELECT input_hash, vector, window_end FROM vectors WHERE space_id = ? "
                    f"AND input_hash IN ({marks})", (space_id, *batch)):
                out[h] = (vector, end)
        return out

    def write_vectors(self, space_id: str, rows: list[tuple[str, str, bytes, int | None]]) -> None:
        """Store vectors: ``(chunk_id, input_hash, float32 bytes, window_end)`` per chunk.

        ``window_end`` is how many characters of the chunk's text the encoder read before its
        window was full, or ``None`` when it read all of it.
        """
        if rows:
            self._changed = True
        self._db.executemany(
            "INSERT OR REPLACE INTO vectors SELECT rowid, ?, ?, ?, ? FROM chunks WHERE id = ?",
            [(space_id, h, vector, end, cid) for cid, h, vector, end in rows])

    def chunks_without_vectors(self, space_id: str) -> list[Chunk]:
        columns = ", ".join("c." + c.strip() for c in self._CHUNK_COLUMNS.split(","))
        return [self._chunk_row(r) for r in self._db.execute(
            f"SELECT {columns} FROM chunks c WHERE c.duplicate_of IS NULL AND NOT EXISTS ("
            "SELECT 1 FROM vectors v WHERE v.space_id = ? AND v.chunk_rowid = c.rowid) "
            "ORDER BY c.rowid", (space_id,))]

    def vector_table(self, space_id: str) -> tuple[list[str], list[tuple[str, str]], list[bytes], list[int | None]]:
        """Every searchable vector of a space: chunk ids, (doc_id, version), vector bytes and
        window ends, in chunk order. Duplicate chunks are left out."""
        ids, docs, blobs, ends = [], [], [], []
        for cid, doc_id, version, blob, end in self._db.execute(
                "SELECT c.id, c.doc_id, c.version, v.vector, v.window_end FROM vectors v "
                "JOIN chunks c ON c.rowid = v.chunk_rowid WHERE v.space_id = ? "
                "AND c.duplicate_of IS NULL ORDER BY c.rowid", (space_id,)):
            ids.append(cid)
            docs.append((doc_id, version))
            blobs.append(blob)
            ends.append(end)
        return ids, docs, blobs, ends

    def vector_rows(self, space_id: str, doc_ids: Sequence[str] | None = None,
                    batch: int = 50_000) -> Iterator[VectorBatch]:
        """A space's vectors in batches, without holding them all, in row order; of every
        document, or of ``doc_ids`` only. Duplicates are included (flagged), so the rows match
        :meth:`vector_count`."""
        columns = "c.rowid, c.doc_id, c.version, c.duplicate_of IS NOT NULL, v.vector"
        if doc_ids is None:
            cursor = self._db.execute(f"SELECT {columns} FROM vectors v JOIN chunks c ON c.rowid = v.chunk_rowid "
                                      "WHERE v.space_id = ? ORDER BY v.chunk_rowid", (space_id,))
        else:  # from the documents' chunks (CROSS JOIN keeps that order), not a scan of every vector
            cursor = self._db.execute(
                f"SELECT {columns} FROM chunks c CROSS JOIN vectors v ON v.space_id = ? AND v.chunk_rowid = c.rowid "
                f"WHERE c.doc_id IN ({','.join('?' * len(doc_ids))}) ORDER BY c.rowid", (space_id, *doc_ids))
        while rows := cursor.fetchmany(batch):
            yield VectorBatch(tuple(r[0] for r in rows), tuple((r[1], r[2]) for r in rows),
                              tuple(bool(r[3]) for r in rows), tuple(r[4] for r in rows))

    def vector_count(self, space_id: str) -> int:
        """How many vectors a space holds (duplicates' included)."""
        return self._db.execute("SELECT COUNT(*) FROM vectors WHERE space_id = ?", (space_id,)).fetchone()[0]

    def vectors_at(self, space_id: str, rowids: Sequence[int]) -> dict[int, tuple[str, str, str, bytes]]:
        """The chunk id, doc_id, version and float32 bytes of a space's vectors at these chunk
        row ids (those still stored)."""
        out: dict[int, tuple[str, str, str, bytes]] = {}
        for i in range(0, len(rowids), 500):
            batch = list(rowids[i:i + 500])
            for rowid, chunk_id, doc_id, version, vector in self._db.execute(
                    "SELECT v.chunk_rowid, c.id, c.doc_id, c.version, v.vector FROM vectors v JOIN chunks c "
                    f"ON c.rowid = v.chunk_rowid WHERE v.space_id = ? AND v.chunk_rowid IN ({','.join('?' * len(batch))})",
                    (space_id, *batch)):
                out[rowid] = (chunk_id, doc_id, version, vector)
        return out

    def version_statuses(self) -> dict[tuple[str, str], str]:
        """Every stored version's status (``current``, ``superseded``, ``expired``)."""
        return {(d, v): s for d, v, s in self._db.execute("SELECT doc_id, version, status FROM documents")}

    def window_end(self, space_id: str, chunk_id: str) -> int | None:
        """How many characters of a chunk the encoder of a space read (None: all of it)."""
        row = self._db.execute("SELECT v.window_end FROM vectors v JOIN chunks c ON "
                               "c.rowid = v.chunk_rowid WHERE v.space_id = ? AND c.id = ?",
                               (space_id, chunk_id)).fetchone()
        return row[0] if row else None

    def chunk_vectors(self, space_id: str, doc_id: str, version: str | None = None) -> list[bytes]:
        """The float32 vectors of a space for one document's searchable chunks (of one version,
        or of all): what a cache asks when the document changed."""
        where, args = ("AND c.version = ?", (version,)) if version is not None else ("", ())
        return [r[0] for r in self._db.execute(
            "SELECT v.vector FROM chunks c JOIN vectors v ON v.chunk_rowid = c.rowid AND v.space_id = ? "
            f"WHERE c.doc_id = ? {where} AND c.duplicate_of IS NULL", (space_id, doc_id, *args))]

    def acl_table(self) -> dict[tuple[str, str], frozenset[str]]:
        """Every version's access groups."""
        out: dict[tuple[str, str], set[str]] = {}
        for doc_id, version, grp in self._db.execute("SELECT doc_id, version, grp FROM acl"):
            out.setdefault((doc_id, version), set()).add(grp)
        return {k: frozenset(v) for k, v in out.items()}

    def fts_problems(self) -> list[str]:
        """FTS5's own integrity check of the BM25 index against the chunks table."""
        try:
            with self.transaction():
                self._db.execute("INSERT INTO chunks_fts (chunks_fts, rank) VALUES ('integrity-check', 1)")
        except sqlite3.DatabaseError as exc:
            return [f"the BM25 index disagrees with the chunks table: {exc}"]
        return []

    def verify(self) -> list[str]:
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

    def audit(self) -> tuple[list[str], list[str]]:
        """Audit the live index (``ragdx index verify --live``): problems, then notes.

        Problems: documents deleted but still stored or searchable (a version, a chunk, a
        keyword-index row, a vector), chunks without a document, vectors without a chunk or of a
        space that was never registered, and FTS5's own integrity check. Notes: superseded and
        expired versions still indexed (searchable only by a question naming their version, or
        with ``retrieval.versions = "all"``), and vectors of spaces that are not live (kept for a
        rollback, or built beside the live one).
        """
        q = self._db.execute
        problems: list[str] = []
        for doc_id, versions in q("SELECT doc_id, versions FROM tombstones").fetchall():
            stored = q("SELECT COUNT(*) FROM documents WHERE doc_id = ?", (doc_id,)).fetchone()[0]
            chunks = q("SELECT COUNT(*) FROM chunks WHERE doc_id = ?", (doc_id,)).fetchone()[0]
            if stored or chunks:
                problems.append(f"deleted document {doc_id} is still reachable: {stored} versions, {chunks} chunks")
        orphans = q("SELECT COUNT(*), MIN(id) FROM chunks c WHERE NOT EXISTS (SELECT 1 FROM documents d "
                    "WHERE d.doc_id = c.doc_id AND d.version = c.version)").fetchone()
        if orphans[0]:
            problems.append(f"{orphans[0]} chunks without a document version (first: {orphans[1]})")
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
        notes = [f"{n} {status} versions still indexed ({c} chunks): searchable only by a question naming "
                 "their version" for status, n, c in q(
                     "SELECT d.status, COUNT(DISTINCT d.doc_id || '@' || d.version), COUNT(c.id) FROM documents d "
                     "LEFT JOIN chunks c ON c.doc_id = d.doc_id AND c.version = d.version "
                     "WHERE d.status != 'current' GROUP BY d.status ORDER BY d.status")]
        notes += [f"{n} vectors of space {sid}, which is not live ({state})" for sid, state, n in q(
            "SELECT s.id, s.state, COUNT(*) FROM vectors v JOIN spaces s ON s.id = v.space_id "
            "WHERE s.state != 'active' GROUP BY s.id ORDER BY s.id")]
        notes += [f"index version {v.id} ({v.state}) held beside the live one: {v.chunks} chunks of "
                  f"{v.versions} versions, invisible to queries" for v in self.index_versions()
                  if v.state is not SpaceState.ACTIVE]
        return problems, notes

    # -- index versions (docs/ingest.md, "Index versions") -----------------------------------
    # The live index is the chunks table (with FTS5 and the vectors that follow it); every other
    # version is held in the staged_* tables, invisible to queries, until a switch swaps the two
    # in one transaction. Staging writes do not bump index_version and are not logged: nothing a
    # query or a cache reads changes until the switch, which logs one change of no document.

    def _staging(self, sql: str, args: tuple | list = ()) -> sqlite3.Cursor:
        if not self._in_tx:
            raise StoreError("store writes must happen inside store.transaction()")
        return self._db.execute(sql, args)

    def index_versions(self, counted: bool = True) -> list[IndexVersion]:
        """Every index version, oldest first, with how many document versions and chunks it holds
        (the live one: the chunks table; ``counted=False``: 0 and 0, without scanning the chunks)."""
        return [self._counted(v) if counted else v for v in self._index_rows()]

    @_decoding("index_versions")
    def _index_rows(self, where: str = "", args: tuple = ()) -> list[IndexVersion]:
        """Index versions without their counts (reading them scans the chunks)."""
        if self._schema < 2:  # a store of schema 1 opened read-only: its live index only
            initial = IndexVersion(INITIAL_INDEX, index_settings(None, None, None), SpaceState.ACTIVE, 0, 0, "", "")
            return [initial] if not where or where == "WHERE state = 'active'" else []
        return [IndexVersion(iid, IndexSettings.from_json(body), SpaceState(state), 0, 0, created, updated)
                for iid, body, state, created, updated in self._db.execute(
                    f"SELECT id, body, state, created_at, updated_at FROM index_versions {where} "
                    "ORDER BY created_at, CAST(SUBSTR(id, 4) AS INTEGER)", args).fetchall()]

    def _counted(self, version: IndexVersion) -> IndexVersion:
        table, where, args = ("chunks", "", ()) if version.state is SpaceState.ACTIVE else \
            ("staged_chunks", "WHERE index_id = ?", (version.id,))
        versions, chunks = self._db.execute(
            f"SELECT COUNT(DISTINCT doc_id || '@' || version), COUNT(*) FROM {table} {where}", args).fetchone()
        return replace(version, versions=versions, chunks=chunks)

    def index_version_of(self, index_id: str, counted: bool = True) -> IndexVersion | None:
        """One index version, with its counts unless not ``counted`` (None: no such version)."""
        found = self._index_rows("WHERE id = ?", (index_id,))
        return (self._counted(found[0]) if counted else found[0]) if found else None

    def live_index(self) -> IndexVersion:
        """The index version queries search (without its counts: ``index_version_of`` has them)."""
        return self._index_rows("WHERE state = 'active'")[0]

    def register_index(self, settings: IndexSettings) -> str:
        """Record a new index version (state ``building``); returns its id (``ix_N``)."""
        row = self._db.execute("SELECT value FROM meta WHERE key = 'index_seq'").fetchone()
        number = int(row[0]) + 1 if row else 1
        self._staging("INSERT OR REPLACE INTO meta VALUES ('index_seq', ?)", (str(number),))
        self._staging("INSERT INTO index_versions VALUES (?, ?, 'building', ?, ?)",
                      (f"ix_{number}", settings.to_json(), _now(), _now()))
        return f"ix_{number}"

    def set_index_state(self, index_id: str, state: SpaceState, *, was: SpaceState | None = None) -> bool:
        """Set an index version's state (only if it is ``was``, when given). Returns whether it was set."""
        where, args = ("AND state = ?", (SpaceState.parse(was, what="index state"),)) if was is not None else ("", ())
        return self._staging(f"UPDATE index_versions SET state = ?, updated_at = ? WHERE id = ? {where}",
                             (SpaceState.parse(state, what="index state"), _now(), index_id, *args)).rowcount == 1

    def drop_index(self, index_id: str) -> bool:
        """Delete an index version that is not live, with everything it holds (its parses,
        sections, chunks and vectors follow by cascade), in the caller's transaction. Returns
        whether one was deleted. Nothing live changes, so the index version counter does not move."""
        return self._staging("DELETE FROM index_versions WHERE id = ? AND state != 'active'",
                             (index_id,)).rowcount == 1

    def stage_version(self, index_id: str, doc_id: str, version: str, parsed: ParsedDocument,
                      sections: Sequence[Section], chunks: Sequence[Chunk], chunker_config: str) -> None:
        """Hold a version's parsed text, sections and chunks in an index version beside the live one."""
        self._staging("DELETE FROM staged_versions WHERE index_id = ? AND doc_id = ? AND version = ?",
                      (index_id, doc_id, version))
        self._staging("INSERT INTO staged_versions VALUES (?,?,?,?,?,?,?)",
                      (index_id, doc_id, version, parsed.parser, json.dumps(list(parsed.warnings)),
                       chunker_config, parsed.text))
        self._insert_rows("staged_", (index_id,), sections, chunks, chunker_config)

    def stage_unindexed(self, index_id: str, doc_id: str, version: str) -> None:
        """Hold a version in an index version without chunks (its retention leaves it out): its
        stored parse is kept as it is."""
        self._staging("INSERT OR REPLACE INTO staged_versions SELECT ?, doc_id, version, parser, "
                      "parse_warnings, chunker_config, parsed_text FROM documents WHERE doc_id = ? "
                      "AND version = ?", (index_id, doc_id, version))

    def stage_from_live(self, index_id: str, chunker_config: str, parsers: Sequence[tuple[str, str]],
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

    def _copy_live(self, index_id: str, only: str = "") -> None:
        """Copy the live parses, sections, chunks and vectors into an index version's staged
        tables: of every stored version, or of those ``only`` (a JOIN on ``x``) keeps."""
        self._staging(f"INSERT OR REPLACE INTO staged_versions SELECT ?, x.doc_id, x.version, x.parser, "
                      f"x.parse_warnings, x.chunker_config, x.parsed_text FROM documents x {only}", (index_id,))
        self._staging(f"INSERT INTO staged_sections SELECT ?, {_prefixed('x', self._SECTION_COLUMNS)} "
                      f"FROM sections x {only}", (index_id,))
        self._staging(f"INSERT INTO staged_chunks (index_id, {self._STORED_CHUNK_COLUMNS}) SELECT ?, "
                      f"{_prefixed('x', self._STORED_CHUNK_COLUMNS)} FROM chunks x {only}", (index_id,))
        self._staging(f"INSERT INTO staged_vectors SELECT ?, x.doc_id, x.version, x.id, v.space_id, "
                      f"v.input_hash, v.vector, v.window_end FROM chunks x {only} JOIN vectors v ON "
                      "v.chunk_rowid = x.rowid", (index_id,))

    def stage_vectors(self, index_id: str, space_id: str, rows: Sequence[tuple[str, str, bytes, int | None]]) -> None:
        """Hold vectors of an index version's chunks: ``(chunk_id, input_hash, bytes, window_end)``."""
        self._db.executemany(
            "INSERT OR REPLACE INTO staged_vectors SELECT index_id, doc_id, version, id, ?, ?, ?, ? "
            "FROM staged_chunks WHERE index_id = ? AND id = ?",
            [(space_id, h, vector, end, index_id, cid) for cid, h, vector, end in rows])

    def staged_chunks(self, index_id: str, without_vector_in: str | None = None) -> list[Chunk]:
        """An index version's chunks that are not duplicates (those without a vector in a space)."""
        where, args = "", ()
        if without_vector_in is not None:
            where, args = ("AND NOT EXISTS (SELECT 1 FROM staged_vectors v WHERE v.index_id = c.index_id "
                           "AND v.space_id = ? AND v.chunk_id = c.id)"), (without_vector_in,)
        columns = _prefixed("c", self._CHUNK_COLUMNS)
        return [self._chunk_row(r) for r in self._db.execute(
            f"SELECT {columns} FROM staged_chunks c WHERE c.index_id = ? AND c.duplicate_of IS NULL "
            f"{where} ORDER BY c.doc_id, c.version, c.ord", (index_id, *args))]

    def unstaged_versions(self, index_id: str) -> list[StoredVersion]:
        """Stored versions an index version lacks: not held at all (ingested after it was built),
        or current and held without chunks."""
        rows = self._db.execute(
            f"SELECT {_prefixed('d', self._VERSION_COLUMNS)} FROM documents d WHERE NOT EXISTS "
            "(SELECT 1 FROM staged_versions s WHERE s.index_id = ? AND s.doc_id = d.doc_id AND "
            "s.version = d.version) OR (d.status = 'current' AND NOT EXISTS (SELECT 1 FROM staged_chunks c "
            "WHERE c.index_id = ? AND c.doc_id = d.doc_id AND c.version = d.version)) ORDER BY d.seq",
            (index_id, index_id)).fetchall()
        return [self._version_row(r) for r in rows]

    def parse_configs(self, index_id: str | None = None) -> list[tuple[str, str, str, int]]:
        """How the versions of the live index (or of an index version) were parsed and chunked:
        ``(chunker_config, format, parser, versions)``, most versions first."""
        table, where, args = ("documents", "", ()) if index_id is None else \
            ("staged_versions s JOIN documents d ON d.doc_id = s.doc_id AND d.version = s.version",
             "WHERE s.index_id = ?", (index_id,))
        columns = "chunker_config, format, parser" if index_id is None else "s.chunker_config, d.format, s.parser"
        return [tuple(r) for r in self._db.execute(
            f"SELECT {columns}, COUNT(*) FROM {table} {where} GROUP BY 1, 2, 3 ORDER BY 4 DESC, 1, 2", args)]

    def switch_index(self, index_id: str) -> str:
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
        chunks, sections = self._STORED_CHUNK_COLUMNS, self._SECTION_COLUMNS
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

    def apply_retention(self, doc_ids: Sequence[str] | None = None) -> list[tuple[str, str]]:
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

    def materialize(self, index_id: str, path: Path) -> "SQLiteStore":
        """A new store at ``path`` holding an index version as its live index (the documents it
        holds, their access groups and tombstones): what ``ragdx index verify`` searches and
        checks."""
        SQLiteStore(path, OpenMode.CREATE).close()
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
                self._db.execute(f"INSERT INTO shadow.sections SELECT {self._SECTION_COLUMNS} FROM "
                                 "staged_sections WHERE index_id = :i", {"i": index_id})
                self._db.execute(f"INSERT INTO shadow.chunks ({self._STORED_CHUNK_COLUMNS}) SELECT "
                                 f"{self._STORED_CHUNK_COLUMNS} FROM staged_chunks WHERE index_id = :i "
                                 "ORDER BY doc_id, version, ord", {"i": index_id})
                self._db.execute("UPDATE shadow.meta SET value = '1' WHERE key = 'index_version'")
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        finally:
            self._db.execute("DETACH DATABASE shadow")
        return SQLiteStore(path, OpenMode.WRITE)


@functools.lru_cache(maxsize=1)
def _expected_schema() -> dict[tuple[str, str], tuple[str, ...]]:
    """Every table (with its columns), index and trigger a whole store has: the schema as built in
    memory."""
    db = sqlite3.connect(":memory:")
    try:
        for statement in _statements(_schema()):
            db.execute(statement)
        return {(kind, name): tuple(r[1] for r in db.execute(f'PRAGMA table_info("{name}")'))
                for kind, name in db.execute("SELECT type, name FROM sqlite_master "
                                             "WHERE name NOT LIKE 'sqlite_%'").fetchall()}
    finally:
        db.close()


def _statements(script: str) -> list[str]:
    """Split a script into complete statements (a trigger body holds semicolons of its own)."""
    statements, buffer = [], ""
    for piece in script.split(";"):
        buffer += piece + ";"
        if sqlite3.complete_statement(buffer):
            if buffer.strip(" \n;"):
                statements.append(buffer.strip())
            buffer = ""
    return statements


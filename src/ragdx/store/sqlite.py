"""The authoritative store: one SQLite file (WAL mode) holding every document version's exact text,
its access groups and status, its sections and chunks, the configs that produced them, and an
update log.

Writes happen inside :meth:`SQLiteStore.transaction`; a failure or a killed process leaves the
file exactly as before the transaction (SQLite's atomic commit). Every committed write bumps the
store's ``index_version``, which caches and run manifests record.

This module holds how the store connects and how a transaction runs; each concern's SQL (schema,
documents, access, BM25, embeddings, checks, index versions) lives in its own module beside
PostgreSQL's, and the class assigns its methods from them (docs/api.md, "Where each store's code
lives").
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from ragdx._faults import fault_point
from ragdx.errors import InputError, StoreError
from ragdx.store._common import OpenMode, is_lock, use_wal
from ragdx.store.keyword import KeywordIndex
from ragdx.store import acl, checks, documents, embeddings, lexical, schema, staging
from ragdx.store.lexical import FTS_BM25_B, FTS_BM25_K1, FTS_TOKENIZER, match_expression
from ragdx.store.schema import SQLITE_SCHEMA_VERSION as SCHEMA_VERSION
from ragdx.store.staging import INITIAL_INDEX, index_settings

__all__ = ["SQLiteStore", "OpenMode", "SCHEMA_VERSION", "INITIAL_INDEX", "FTS_TOKENIZER", "FTS_BM25_K1",
           "FTS_BM25_B", "index_settings", "match_expression"]

log = logging.getLogger("ragdx.store")


def _dialect(sql: str) -> str:
    """A statement written for both stores (``{s}.table``, ``%s``) in SQLite's form."""
    return sql.replace("{s}.", "").replace("%s", "?")


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
        self.where = str(self.path)  # how messages name the store
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
                use_wal(self._db, self.wait)
                self._db.execute("PRAGMA synchronous=NORMAL")
                self._init_schema()
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise StoreError(f"{self.path}: cannot open the store: {exc}") from None
        except BaseException:
            self._db.close()
            raise

    # -- lifecycle --------------------------------------------------------------------------

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
            if not is_lock(exc):
                raise
        log.warning("%s: another process is writing to this store; waiting up to %g s for it "
                    "to finish", self.path, self.wait)
        self._db.execute(f"PRAGMA busy_timeout = {max(0, int(self.wait * 1000))}")
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if not is_lock(exc):
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
        return self._db.execute(_dialect(sql), args)

    # the statements both stores share are written in PostgreSQL's form (``{s}.`` before a table,
    # ``%s`` for a value: see the concern modules); these read them here
    def _all(self, sql: str, args: tuple | list = ()) -> list[tuple]:
        return self._db.execute(_dialect(sql), args).fetchall()

    def _one(self, sql: str, args: tuple | list = ()) -> tuple | None:
        return self._db.execute(_dialect(sql), args).fetchone()

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

    # The concerns: each store method below is a function of the module named (docs/api.md,
    # "Where each store's code lives"); its first parameter is this store.

    # -- the schema: set up, checked, migrated when opened (store/schema.py) ---------------------------
    _check_schema = schema._sqlite_check_schema
    _init_schema = schema._sqlite_init_schema
    _migrate = schema._sqlite_migrate
    _give_id = schema._sqlite_give_id
    _add_initial_index = schema._sqlite_add_initial_index

    # -- documents: versions, sections, chunks, tombstones, the log (store/documents.py) ---------------
    insert_version = documents.sqlite_insert_version
    _write_chunks = documents._sqlite_write_chunks
    _insert_rows = documents._sqlite_insert_rows
    replace_chunks = documents.replace_chunks
    update_attributes = documents.update_attributes
    set_status = documents.set_status
    delete_document = documents.sqlite_delete_document
    log = documents.sqlite_log
    _version_row = documents._sqlite_version_row
    version = documents.sqlite_version
    versions = documents.sqlite_versions
    versions_of = documents.sqlite_versions_of
    version_labels = documents.sqlite_version_labels
    latest = documents.latest
    doc_ids = documents.doc_ids
    texts = documents.texts
    _chunk_row = documents._chunk_row
    chunks = documents.chunks
    _CHUNK_COLUMNS_C = documents.SQLITE_CHUNK_COLUMNS_C  # what _chunk_row decodes
    chunk_count = documents.chunk_count
    chunks_by_id = documents.sqlite_chunks_by_id
    _section_row = documents._section_row
    _SECTION_SELECT = documents.SQLITE_SECTION_SELECT  # what _section_row decodes
    section = documents.section
    sections = documents.sections
    neighbours = documents.neighbours
    tombstone = documents.tombstone
    log_entries = documents.log_entries
    counts = documents.sqlite_counts
    version_statuses = documents.sqlite_version_statuses

    # -- access: groups, and what a principal may read (store/acl.py) ----------------------------------
    _write_acl = acl._sqlite_write_acl
    readable = acl.sqlite_readable
    readable_rowids = acl.sqlite_readable_rowids
    _readable_rowids = acl._sqlite_readable_rowids
    _readable_versions = acl._sqlite_readable_versions
    acl_table = acl.sqlite_acl_table

    # -- the keyword channel: BM25 and its statistics (store/lexical.py) -------------------------------
    keyword_statistics = lexical.sqlite_keyword_statistics
    document_frequency = lexical.sqlite_document_frequency
    bm25_config = property(lexical.bm25_config)
    bm25 = lexical.sqlite_bm25
    fts5_bm25 = lexical.sqlite_fts5_bm25
    _hit_chunks = lexical._sqlite_hit_chunks
    _keyword_index = lexical._sqlite_keyword_index
    _query_tokens = lexical._sqlite_query_tokens
    _search_mask = lexical._sqlite_search_mask
    _status_masks = lexical._sqlite_status_masks

    # -- embedding spaces, vectors, dense search (store/embeddings.py) ---------------------------------
    register_space = embeddings.sqlite_register_space
    spaces = embeddings.sqlite_spaces
    space_state = embeddings.sqlite_space_state
    set_space_state = embeddings.sqlite_set_space_state
    active_space = embeddings.sqlite_active_space
    vectors_by_input = embeddings.sqlite_vectors_by_input
    write_vectors = embeddings.sqlite_write_vectors
    chunks_without_vectors = embeddings.sqlite_chunks_without_vectors
    vector_table = embeddings.sqlite_vector_table
    vector_rows = embeddings.sqlite_vector_rows
    vector_count = embeddings.sqlite_vector_count
    vectors_at = embeddings.sqlite_vectors_at
    window_end = embeddings.sqlite_window_end
    chunk_vectors = embeddings.sqlite_chunk_vectors
    write_statement_vectors = embeddings.sqlite_write_statement_vectors
    statement_vectors = embeddings.sqlite_statement_vectors
    statement_vectors_by_hash = embeddings.sqlite_statement_vectors_by_hash
    chunks_without_statement_vectors = embeddings.sqlite_chunks_without_statement_vectors

    # -- the store's checks of itself (store/checks.py) ------------------------------------------------
    fts_problems = checks.sqlite_fts_problems
    verify = checks.sqlite_verify
    audit = checks.sqlite_audit

    # -- index versions beside the live one (store/staging.py) -----------------------------------------
    _staging = staging._sqlite_staging
    index_versions = staging.index_versions
    _index_rows = staging._sqlite_index_rows
    _counted = staging._counted
    index_version_of = staging.index_version_of
    live_index = staging.live_index
    register_index = staging.register_index
    set_index_state = staging.set_index_state
    drop_index = staging.drop_index
    stage_version = staging.sqlite_stage_version
    stage_unindexed = staging.sqlite_stage_unindexed
    stage_from_live = staging.sqlite_stage_from_live
    _copy_live = staging._sqlite_copy_live
    stage_vectors = staging.sqlite_stage_vectors
    staged_chunks = staging.sqlite_staged_chunks
    unstaged_versions = staging.sqlite_unstaged_versions
    parse_configs = staging.parse_configs
    switch_index = staging.sqlite_switch_index
    apply_retention = staging.apply_retention
    _unindex = staging._sqlite_unindex
    materialized = staging.sqlite_materialized

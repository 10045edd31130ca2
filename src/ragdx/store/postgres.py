"""The store on PostgreSQL with pgvector (extra ``pg``): the same :class:`~ragdx.protocols.Store`
as :class:`~ragdx.store.sqlite.SQLiteStore`, on one server or sharded across several.

Layout (docs/postgres.md). Everything lives in one schema (``ragdx`` unless the DSN's
``options=-csearch_path=NAME`` names another):

- coordinator tables: ``meta`` (schema and index versions), ``configs``, ``log``, ``tombstones``,
  ``spaces`` (one row per embedding space) and ``partitions`` (which server holds each part);
- per-document tables, hash-partitioned by ``doc_id`` when sharded: ``documents`` (one row per
  version, with its status), ``acl`` (one row per version: its groups, an array), ``sections``,
  ``chunks`` (with a ``tsvector`` of the chunk's FTS5 tokens, and the tokens' frequencies per
  column) and one ``vec_<n>`` table per embedding space (a ``vector(dim)`` column under an HNSW
  index built after the first load);
- per-part BM25 statistics, kept exact by triggers in the same transaction as the chunk rows:
  ``term_df`` (rows holding each term), ``term_delta`` (the transaction's changes to it, folded
  in before commit) and ``corpus`` (rows and tokens); ``postings`` (per term and segment, the
  rows holding it with their frequencies and lengths, as arrays).

Access groups and statuses are never stored on chunk or vector rows: an access change rewrites
one ``acl`` row, and no HNSW-indexed row is touched (re-inserting a vector into the graph is what
makes in-place ACL updates slow). Retrieval joins ``acl`` at query time.

The keyword channel ranks by FTS5's own BM25 (Robertson & Zaragoza, "The Probabilistic
Relevance Framework: BM25 and Beyond", 2009, in FTS5's variant: ``fts5Bm25Function``): the same
tokens (:mod:`ragdx.store.tokens`), k1 = 1.2, b = 0.75, column weights on term frequencies, the
row length over both columns, and N, avgdl and document frequencies over every row, computed in
SQL from the statistics tables, scored from the postings with MaxScore pruning (:func:`ragdx.store.lexical._pg_bm25`).
PostgreSQL's own ``ts_rank`` is not used: it is no BM25.

Sharded, the coordinator's per-document tables are partitioned by hash of ``doc_id`` into parts
that are ``postgres_fdw`` foreign tables on the shard servers (created with ``extensions
'vector'``). A search is sent to every shard at once, over connections of ragdx's own (one
thread per shard, :func:`ragdx.store.shards._pg_fan`), and merged here with the statistics of every
part. Writes go
through the coordinator in one transaction; postgres_fdw commits the shards' transactions when
the coordinator commits (not two-phase: a shard failing at that very moment can leave the others
committed; see docs/postgres.md).

This module holds the connections, the transaction and its buffered writes; each concern's SQL
lives in its own module beside SQLite's, and the class assigns its methods from them (docs/api.md,
"Where each store's code lives").
"""

from __future__ import annotations

import json
import logging
import math
import re
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence


from ragdx._faults import fault_point
from ragdx.errors import InputError, MissingExtraError, StoreError
from ragdx.store import acl, checks, documents, embeddings, lexical, schema, shards, staging
from ragdx.store._common import OpenMode
from ragdx.store.lexical import FTS5_MIN_IDF
from ragdx.store.schema import PG_SCHEMA_VERSION as SCHEMA_VERSION

__all__ = ["PostgresStore", "is_dsn", "FTS5_MIN_IDF", "SCHEMA_VERSION"]  # and setup_shards, drop_store (pg_admin)

log = logging.getLogger("ragdx.store")

_LOCK_KEY = 0x72616764  # "ragd": the advisory lock writers of one schema take
_NAME = re.compile(r"[a-z_][a-z0-9_]{0,40}")


def is_dsn(store: object) -> bool:
    """Whether a ``--store`` value is a PostgreSQL connection URI rather than a file path."""
    return isinstance(store, str) and store.startswith(("postgresql://", "postgres://"))


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise MissingExtraError("pg", "the PostgreSQL store (psycopg 3)") from None
    return psycopg


def _redact(dsn: str) -> str:
    """The DSN without its password, for messages: a URI's (``user:PASSWORD@``) or a connection
    string's (``password=PASSWORD``, quoted or not)."""
    dsn = re.sub(r"(://[^:/@]+):[^@/]*@", r"\1:***@", dsn)
    return re.sub(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", r"\1***", dsn)


def _schema_of(dsn: str) -> str:
    """The schema named by the DSN's ``options=-csearch_path=NAME``, or ``ragdx``."""
    from psycopg.conninfo import conninfo_to_dict
    options = str(conninfo_to_dict(dsn).get("options") or "")
    found = re.search(r"-c\s*search_path\s*=\s*([^\s,]+)", options)
    schema = found.group(1) if found else "ragdx"
    if not _NAME.fullmatch(schema):
        raise InputError(f"the schema {schema!r} in the DSN's search_path is not a plain lower-case "
                         "SQL name (letters, digits, underscore)", field="store")
    return schema


_BUFFERED = re.compile(r"\{s\}\.(chunks|sections|corpus|term_d|postings|vec_)")
#: the tables of the buffered version rows (:meth:`PostgresStore._buffer`)
_BUFFERED_ROWS = re.compile(r"\{s\}\.(documents|acl|tombstones|log)\b")


class PostgresStore:
    """The store in a PostgreSQL database (pgvector), on one server or sharded.

    Args:
        dsn: a ``postgresql://`` connection URI; the schema is ``ragdx`` unless its
            ``options=-csearch_path=NAME`` names another.
        mode: :class:`~ragdx.store.sqlite.OpenMode` (``create``: a missing schema is set up).
        wait: how long a write waits for another writer of the same store, in seconds.
        connect_timeout: seconds to wait for the server.
        statement_timeout: seconds after which any one statement is cancelled.
        pool_size: connections kept open for reads (writes hold one for their transaction).
        hnsw_m: the HNSW graph's links per node (pgvector's ``m``), for indexes built from now on.
        hnsw_ef_construction: the candidate list while building the graph (``ef_construction``).
        hnsw_ef_search: the candidate list while searching it (``hnsw.ef_search``).
        flush_rows: a writing transaction buffers chunks' postings and vectors, and writes them
            with ``COPY`` every this many (and at commit).

    Raises:
        StoreError: the server is unreachable or refuses the login; pgvector is not installed
            on it; the schema is missing (modes ``read``, ``write``), not a ragdx store, or newer.
        MissingExtraError: psycopg is not installed (extra ``pg``).
    """

    def __init__(self, dsn: str, mode: OpenMode | str = OpenMode.CREATE, *, wait: float = 30.0,
                 connect_timeout: float = 5.0, statement_timeout: float = 120.0,
                 pool_size: int = 4, hnsw_m: int = 16, hnsw_ef_construction: int = 64,
                 hnsw_ef_search: int = 200, flush_rows: int = 10000) -> None:
        psycopg = _psycopg()
        from psycopg_pool import ConnectionPool
        self.dsn, self.where = dsn, _redact(dsn)
        self.mode = OpenMode.parse(mode, what="store mode")
        self.wait, self.statement_timeout = wait, statement_timeout
        self.schema = _schema_of(dsn)
        self._lock = threading.RLock()
        self._tx: Any = None
        self._tx_thread: int | None = None
        self._changed = False
        self._fresh: dict[str, tuple[int, str, str]] = {}  # chunk id -> rowid, doc, version (this tx)
        self._vector_schema = "public"
        for name, value, low in (("hnsw_m", hnsw_m, 2), ("hnsw_ef_construction", hnsw_ef_construction, 4),
                                 ("hnsw_ef_search", hnsw_ef_search, 1), ("flush_rows", flush_rows, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise InputError(f"{name} must be a whole number >= {low}, not {value!r}", field=name)
        self.hnsw_m, self.hnsw_ef_construction = hnsw_m, max(hnsw_ef_construction, 2 * hnsw_m)
        self.hnsw_ef_search, self.flush_rows = hnsw_ef_search, flush_rows
        # what a writing transaction buffered (written by _flush): postings of its chunks, as
        # (rowid, term frequencies, length), and vectors per table, by chunk row
        self._pending_postings: list[tuple[int, dict[str, list[int]], int]] = []
        self._pending_vectors: dict[str, dict[int, tuple]] = {}
        self._pending_keys: set[tuple[str, str]] = set()  # the versions of the buffered vectors
        self._pending_chunks: list[tuple] = []
        self._pending_sections: list[dict] = []
        # statements on the versions' own tables (documents, acl, tombstones, log), each with its
        # rows' arguments in order: sent together by _flush_rows, one round trip, not one a version
        self._pending_rows: dict[str, list[Sequence[Any]]] = {}
        self._tx_configs: set[str] = set()
        self._rowid_block: list[int] | None = None  # the reserved chunk rows: next, end
        self._tx_index_version: int | None = None
        # table -> [rows before the transaction, rows it wrote, the chunk rows it wrote]
        self._tx_vectors: dict[str, list] = {}
        self._tx_first_rowid: int | None = None  # the first chunk row this transaction stored
        self._space_tables: dict[str, tuple[str, int]] = {}  # space id -> vector table, dim
        self._shard_pools: dict[str, Any] = {}
        self._pools_lock = threading.Lock()
        self._fan_pool: Any = None
        self._connect_args = {"connect_timeout": max(1, int(math.ceil(connect_timeout))),
                              "application_name": "ragdx"}
        try:
            first = psycopg.connect(dsn, autocommit=True, **self._connect_args)
        except psycopg.OperationalError as exc:
            raise StoreError(f"{self.where}: cannot connect to PostgreSQL: {_reason(exc)} (is the "
                             "server running? 'make pg' starts a local one)") from None
        except psycopg.ProgrammingError as exc:
            raise StoreError(f"{self.where}: not a valid PostgreSQL DSN: {exc}") from None
        try:
            self._setup(first)
        finally:
            first.close()
        self._pool = ConnectionPool(dsn, min_size=1, max_size=max(1, pool_size), open=True,
                                    kwargs={"autocommit": True, **self._connect_args},
                                    configure=self._configure, timeout=max(connect_timeout, wait),
                                    name=f"ragdx:{self.schema}")
        self._parts = self.partitions()

    # -- connections -----------------------------------------------------------------------
    def _configure(self, conn: Any) -> None:
        conn.execute(f"SET search_path = {self.schema}, {self._vector_schema}")
        conn.execute(f"SET statement_timeout = {int(self.statement_timeout * 1000)}")
        conn.execute("SET enable_partitionwise_join = on")
        conn.execute("SET enable_partitionwise_aggregate = on")
        # no JIT: an HNSW search's cost estimate (the whole index) is over jit_above_cost, and
        # compiling its expressions took 12 to 30 ms of a 3 ms index scan (EXPLAIN ANALYZE)
        conn.execute("SET jit = off")
        # a plan per execution: psycopg prepares a statement run five times, and PostgreSQL then
        # switches to a generic plan, blind to the array's size in "rowid = ANY($1)": the access
        # check of 216 rows took 36 ms by it against 2 ms by a custom plan
        conn.execute("SET plan_cache_mode = force_custom_plan")
        conn.execute("SET hnsw.iterative_scan = strict_order")
        conn.execute(f"SET hnsw.ef_search = {int(self.hnsw_ef_search)}")
        if self.mode is OpenMode.READ:
            conn.execute("SET default_transaction_read_only = on")

    @contextmanager
    def _conn(self) -> Iterator[Any]:
        """The transaction's connection on the thread that writes, else one from the pool."""
        if self._tx is not None and self._tx_thread == threading.get_ident():
            yield self._tx
            return
        with self._pool.connection() as conn:
            yield conn

    def _all(self, sql: str, args: Sequence[Any] | dict | None = None) -> list[tuple]:
        if self._pending_rows and self._writing() and _BUFFERED_ROWS.search(sql):
            self._flush_rows()  # a read inside the writing transaction sees its buffered rows
        if (self._pending_chunks or self._pending_sections) and self._writing() and _BUFFERED.search(sql):
            self._flush()
        with self._conn() as conn:
            return conn.execute(sql.replace("{s}", self.schema), args).fetchall()

    def _one(self, sql: str, args: Sequence[Any] | dict | None = None) -> tuple | None:
        rows = self._all(sql, args)
        return rows[0] if rows else None

    def close(self) -> None:
        self._pool.close()
        for pool in self._shard_pools.values():
            pool.close()
        if self._fan_pool is not None:
            self._fan_pool.shutdown()

    def __enter__(self) -> "PostgresStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transactions ---------------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One atomic write; nested calls join the outer one. Writers of one store take turns
        (an advisory lock, waited for up to ``wait`` seconds); the commit bumps ``index_version``
        when anything changed."""
        with self._lock:
            if self._tx is not None:
                yield
                return
            if self.mode is OpenMode.READ:
                raise StoreError(f"{self.where}: the store was opened read-only; open it with "
                                 "mode='write' to change it")
            conn = self._pool.getconn()
            committed = False
            try:
                conn.execute("BEGIN")
                self._take_write_lock(conn)
                self._tx, self._tx_thread, self._changed = conn, threading.get_ident(), False
                yield
                self._flush()
                if self._changed:
                    self._fold_statistics(conn)
                    conn.execute(f"UPDATE {self.schema}.meta SET value = (value::bigint + 1)::text "
                                 "WHERE key = 'index_version'")
                fault_point("commit")
                conn.execute("COMMIT")
                fault_point("committed")
                committed = self._changed
            except BaseException:
                self._space_tables.clear()  # a space registered by this transaction is gone
                if not conn.closed:
                    conn.execute("ROLLBACK")
                raise
            finally:
                self._tx, self._tx_thread = None, None
                self._fresh.clear()
                self._pending_postings.clear()
                self._pending_vectors.clear()
                self._pending_keys.clear()
                self._pending_chunks.clear()
                self._pending_sections.clear()
                self._pending_rows.clear()
                self._tx_configs.clear()
                self._rowid_block = self._tx_index_version = None
                written, self._tx_vectors, self._tx_first_rowid = self._tx_vectors, {}, None
                self._pool.putconn(conn)
            if committed:
                self._analyze()
                self._build_hnsw(sorted(written))
                self._compact_postings()

    def _take_write_lock(self, conn: Any) -> None:
        """Take the lock writers of this store take in turn (for this transaction), waiting up to
        ``wait`` seconds."""
        psycopg = _psycopg()
        conn.execute(f"SET LOCAL lock_timeout = {max(1, int(self.wait * 1000))}")
        try:
            conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_LOCK_KEY, self.schema))
        except psycopg.errors.LockNotAvailable:
            raise StoreError(f"{self.where}: another process is still writing to this store "
                             f"after {self.wait:g} s; nothing was written: try again when it "
                             "has finished") from None
        conn.execute("SET LOCAL lock_timeout = 0")

    def _write(self, sql: str, args: Sequence[Any] | dict | None = None) -> None:
        if self._tx is None:
            raise StoreError("store writes must happen inside store.transaction()")
        self._changed = True
        if self._pending_rows and _BUFFERED_ROWS.search(sql):
            self._flush_rows()  # the buffered rows go first: the statement may read or change them
        self._tx.execute(sql.replace("{s}", self.schema), args)

    def _insert(self, table: str, columns: str, rows: list[dict], select: str = "*") -> None:
        """Insert many rows in one statement (a statement trigger fires once, and postgres_fdw
        sends the rows to the shards in batches): the rows travel as one JSON array, read back
        with ``columns`` as their types; ``select`` may convert them."""
        if not rows:
            return
        self._write(f"INSERT INTO {{s}}.{table} SELECT {select} FROM jsonb_to_recordset(%s::jsonb) "
                    f"AS r({columns})", (json.dumps(rows),))

    # -- buffered writes: postings and vectors by COPY --------------------------------------
    def _flush(self) -> None:
        """Write what the transaction buffered (before its commit, and before a read inside it)."""
        self._flush_rows()  # the versions first: their chunks refer to them
        if self._pending_chunks or self._pending_sections:
            self._flush_chunks()
        if self._pending_postings:
            self._flush_postings()
        for table in list(self._pending_vectors):
            self._flush_vectors(table)

    def _drop_pending(self, gone: Callable[[str, str], bool]) -> None:
        """Forget buffered vectors of versions whose chunks are being deleted (their postings
        go stale with the chunk rows, and are never returned)."""
        if not any(gone(*key) for key in self._pending_keys):
            return
        for table, pending in self._pending_vectors.items():
            if any(gone(v[1], v[2]) for v in pending.values()):
                self._pending_vectors[table] = {k: v for k, v in pending.items() if not gone(v[1], v[2])}

    def _writing(self) -> bool:
        return self._tx is not None and self._tx_thread == threading.get_ident()

    # -- reads on every part ----------------------------------------------------------------

    @property
    def index_version(self) -> int:
        """A counter bumped by every committed change; caches are bound to it."""
        return int(self._one("SELECT value FROM {s}.meta WHERE key = 'index_version'")[0])

    @property
    def store_id(self) -> str | None:
        """A random id (32 hex digits) given to the store when it was created, never reused (a
        store dropped and made again in the same schema gets another); a store made before ids
        gets one when first opened for writing, and is None until then."""
        row = self._one("SELECT value FROM {s}.meta WHERE key = 'store_id'")
        return row[0] if row else None

    # The concerns: each store method below is a function of the module named (docs/api.md,
    # "Where each store's code lives"); its first parameter is this store.

    # -- the schema: set up, checked, migrated when opened (store/schema.py) ---------------------------
    _setup = schema._pg_setup
    _require_vector = schema._pg_require_vector
    _create = schema._pg_create
    _migrate = schema._pg_migrate

    # -- documents: versions, sections, chunks, tombstones, the log (store/documents.py) ---------------
    insert_version = documents.pg_insert_version
    _write_chunks = documents._pg_write_chunks
    _buffer_chunks = documents._pg_buffer_chunks
    _rowids = documents._pg_rowids
    _flush_chunks = documents._pg_flush_chunks
    _buffer = documents._pg_buffer
    _flush_rows = documents._pg_flush_rows
    replace_chunks = documents.replace_chunks
    update_attributes = documents.update_attributes
    set_status = documents.set_status
    delete_document = documents.pg_delete_document
    log = documents.pg_log
    _next_index_version = documents._pg_next_index_version
    _version_row = documents._pg_version_row
    version = documents.pg_version
    versions = documents.pg_versions
    versions_of = documents.pg_versions_of
    version_labels = documents.pg_version_labels
    latest = documents.latest
    doc_ids = documents.doc_ids
    texts = documents.texts
    _chunk_row = documents._chunk_row
    _CHUNK_COLUMNS_C = documents.PG_CHUNK_COLUMNS  # what _chunk_row decodes
    chunks = documents.chunks
    chunk_count = documents.chunk_count
    chunks_by_id = documents.pg_chunks_by_id
    _hit_row = documents._pg_hit_row
    _section_row = documents._section_row
    _SECTION_SELECT = documents.PG_SECTION_SELECT  # what _section_row decodes
    section = documents.section
    sections = documents.sections
    neighbours = documents.neighbours
    tombstone = documents.tombstone
    log_entries = documents.log_entries
    counts = documents.pg_counts
    chunks_in_order = documents.pg_chunks_in_order

    # -- access: groups, and what a principal may read (store/acl.py) ----------------------------------
    readable = acl.pg_readable
    _write_acl = acl._pg_write_acl
    readable_many = acl.pg_readable_many
    acl_table = acl.pg_acl_table

    # -- the keyword channel: BM25 and its statistics (store/lexical.py) -------------------------------
    _flush_postings = lexical._pg_flush_postings
    _fold_statistics = lexical._pg_fold_statistics
    _compact_postings = lexical._pg_compact_postings
    bm25_config = property(lexical.bm25_config)
    bm25_statistics = lexical.pg_bm25_statistics
    bm25 = lexical.pg_bm25
    document_frequency = lexical.pg_document_frequency
    _with_versions = lexical._pg_with_versions
    _bm25 = lexical._pg_bm25
    _postings = lexical._pg_postings
    _statistics_and_postings = lexical._pg_statistics_and_postings
    _postings_of_rows = lexical._pg_postings_of_rows
    _score = staticmethod(lexical._pg_score)
    _readable_top = lexical._pg_readable_top

    # -- embedding spaces, vectors, dense search (store/embeddings.py) ---------------------------------
    _flush_vectors = embeddings._pg_flush_vectors
    _build_hnsw = embeddings._pg_build_hnsw
    _vec_tables = embeddings._pg_vec_tables
    _chunk_derived = embeddings._pg_chunk_derived
    register_space = embeddings.pg_register_space
    _space_table = embeddings._pg_space_table
    spaces = embeddings.pg_spaces
    space_state = embeddings.pg_space_state
    set_space_state = embeddings.pg_set_space_state
    active_space = embeddings.pg_active_space
    vectors_by_input = embeddings.pg_vectors_by_input
    write_vectors = embeddings.pg_write_vectors
    chunks_without_vectors = embeddings.pg_chunks_without_vectors
    write_statement_vectors = embeddings.pg_write_statement_vectors
    statement_vectors = embeddings.pg_statement_vectors
    statement_vectors_by_hash = embeddings.pg_statement_vectors_by_hash
    chunks_without_statement_vectors = embeddings.pg_chunks_without_statement_vectors
    vector_table = embeddings.pg_vector_table
    vector_search = embeddings.pg_vector_search
    _vector_search = embeddings._pg_vector_search
    window_end = embeddings.pg_window_end

    # -- the store's checks of itself (store/checks.py) ------------------------------------------------
    fts_problems = checks.pg_fts_problems
    audit = checks.pg_audit
    verify = checks.pg_verify

    # -- index versions beside the live one (store/staging.py) -----------------------------------------
    _staging = staging._pg_staging
    index_versions = staging.index_versions
    _index_rows = staging._index_rows
    _counted = staging._counted
    index_version_of = staging.index_version_of
    live_index = staging.live_index
    register_index = staging.register_index
    set_index_state = staging.set_index_state
    drop_index = staging.drop_index
    stage_version = staging.pg_stage_version
    stage_unindexed = staging.pg_stage_unindexed
    stage_from_live = staging.pg_stage_from_live
    stage_vectors = staging.pg_stage_vectors
    staged_chunks = staging.pg_staged_chunks
    unstaged_versions = staging.pg_unstaged_versions
    parse_configs = staging.parse_configs
    switch_index = staging.pg_switch_index
    apply_retention = staging.apply_retention
    _unindex = staging._pg_unindex

    @contextmanager
    def materialized(self, index_id: str) -> Iterator["PostgresStore"]:
        """A scratch store holding an index version as its live index, in a schema of its own on
        the same servers and sharded as this one is (what ``ragdx index verify`` checks), dropped
        when the block ends (:func:`ragdx.store.pg_admin.scratch_store`)."""
        from ragdx.store.pg_admin import scratch_store
        with scratch_store(self) as shadow:
            staging.pg_fill(self, shadow, index_id)
            shadow._analyze_all()  # searched at once: the latency check times it
            yield shadow

    # -- shards: parts, fan-out (store/shards.py) ------------------------------------------------------
    _parts_of = shards._pg_parts_of
    partitions = shards.pg_partitions
    _shard_conninfo = shards._pg_shard_conninfo
    _on_each_shard = shards._pg_on_each_shard
    _on_servers = shards._pg_on_servers
    _shard_pool = shards._pg_shard_pool
    _fan = shards._pg_fan
    _analyze = shards._pg_analyze
    _analyze_all = shards._pg_analyze_all


def _reason(exc: Exception) -> str:
    """A connection error's first line, without libpq's "connection failed:" preamble."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return (lines[0] if lines else type(exc).__name__).removeprefix("connection failed: ")


def __getattr__(name: str) -> Any:
    """``setup_shards`` and ``drop_store`` live in :mod:`ragdx.store.pg_admin` (creating and removing
    stores), and are still imported from here."""
    if name in ("setup_shards", "drop_store"):
        from ragdx.store import pg_admin
        return getattr(pg_admin, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

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
SQL from the statistics tables, scored from the postings with MaxScore pruning (:meth:`PostgresStore._bm25`).
PostgreSQL's own ``ts_rank`` is not used: it is no BM25.

Sharded, the coordinator's per-document tables are partitioned by hash of ``doc_id`` into parts
that are ``postgres_fdw`` foreign tables on the shard servers (created with ``extensions
'vector'``). A search is sent to every shard at once, over connections of ragdx's own (one
thread per shard, :meth:`PostgresStore._fan`), and merged here with the statistics of every
part. Writes go
through the coordinator in one transaction; postgres_fdw commits the shards' transactions when
the coordinator commits (not two-phase: a shard failing at that very moment can leave the others
committed; see docs/postgres.md).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
import re
import threading
import time
import uuid
from collections import Counter
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from ragdx.errors import InputError, MissingExtraError, StoreError
from ragdx.store._attributes import attribute_changes
from ragdx.store.keyword import IDF_FLOOR, fts5_idf
from ragdx.store.sqlite import FTS_BM25_B, FTS_BM25_K1, FTS_TOKENIZER, OpenMode
from ragdx.store.tokens import fts5_tokens
from ragdx.types import (
    Chunk, ChunkKind, Document, DocStatus, EmbeddingSpace, LogEntry, ParsedDocument, Section,
    SpaceState, StoredVersion, VersionFilter,
)

__all__ = ["PostgresStore", "is_dsn", "setup_shards", "FTS5_MIN_IDF"]

log = logging.getLogger("ragdx.store")

SCHEMA_VERSION = 3  # 2: term deltas folded into term_df once per transaction; 3: BM25 postings
#: FTS5 replaces an idf <= 0 (a term in more than half the rows) by this.
FTS5_MIN_IDF = IDF_FLOOR  # fts5_idf's floor (store/keyword.py), under the name tests know
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


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _redact(dsn: str) -> str:
    """The DSN without its password, for messages."""
    return re.sub(r"(://[^:/@]+):[^@/]*@", r"\1:***@", dsn)


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


# -- the schema ------------------------------------------------------------------------------

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
_VEC_COLUMNS = ("chunk_rowid bigint NOT NULL, doc_id text NOT NULL, version text NOT NULL, "
                "input_hash text NOT NULL, embedding vector({dim}) NOT NULL, window_end int")
# the HNSW index is built after the first load, not row by row (PostgresStore._build_hnsw)
_VEC_INDEXES = ("ALTER TABLE {s}.{t} ADD PRIMARY KEY (chunk_rowid)",
                "CREATE INDEX ON {s}.{t} (input_hash)")

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


def _statements(script: str) -> list[str]:
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
    out = []
    for name, (columns, indexes) in {**_DOC_TABLES, **_STAT_TABLES}.items():
        table = name + sfx
        out.append(f"CREATE TABLE {schema}.{table} ({columns})")
        out += [ddl.format(s=schema, t=table) for ddl in indexes]
    out.append(f"INSERT INTO {schema}.corpus{sfx} VALUES ({part or 0}, 0, 0, 0)")
    out += _statements(_STATS_TRIGGER.format(s=schema, t="chunks" + sfx, sfx=sfx, part=part or 0))
    return out


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


def vec_table(n: int) -> str:
    return f"vec_{n}"


def _vec_ddl(schema: str, table: str, dim: int) -> list[str]:
    return [f"CREATE TABLE {schema}.{table} ({_VEC_COLUMNS.format(dim=dim)})",
            *[ddl.format(s=schema, t=table) for ddl in _VEC_INDEXES]]


def _lexeme(token: str) -> str:
    """A token as a tsvector lexeme (PostgreSQL refuses lexemes of 2 KB and more: those are
    replaced by their hash, in the index and in queries alike)."""
    return token if len(token.encode()) < 2000 else "#" + hashlib.sha1(token.encode()).hexdigest()


def chunk_terms(chunk: Chunk) -> tuple[list[str], dict[str, list[int]], int]:
    """A chunk's distinct lexemes, its term frequencies ``term -> [in prefix, in text]`` and its
    length in tokens over both columns (what FTS5 indexes for the chunk)."""
    prefix, text = fts5_tokens(chunk.prefix), fts5_tokens(chunk.text)
    tf: dict[str, list[int]] = {}
    for column, tokens in enumerate((prefix, text)):
        for token, n in Counter(tokens).items():
            tf.setdefault(token, [0, 0])[column] = n
    return sorted({_lexeme(t) for t in tf}), tf, len(prefix) + len(text)


class _Postings:
    """One term's postings: the rows holding it (ascending), its frequency in each row's prefix
    and text, and each row's length, stored as little-endian arrays (``bytea``: int64 rows,
    int32 pairs of frequencies, int32 lengths)."""

    __slots__ = ("rowids", "freqs", "lengths")

    def __init__(self, rowids: np.ndarray, freqs: np.ndarray, lengths: np.ndarray) -> None:
        self.rowids, self.freqs, self.lengths = rowids, freqs, lengths

    @staticmethod
    def encode(hits: list[tuple[int, int, int, int]]) -> tuple[bytes, bytes, bytes]:
        """``(rowid, in prefix, in text, length)`` per row as the three arrays."""
        hits.sort()
        table = np.asarray(hits, dtype=np.int64)
        return (table[:, 0].astype("<i8").tobytes(), table[:, 1:3].astype("<i4").tobytes(),
                table[:, 3].astype("<i4").tobytes())

    def encoded(self) -> tuple[bytes, bytes, bytes]:
        return (self.rowids.astype("<i8").tobytes(), self.freqs.astype("<i4").tobytes(),
                self.lengths.astype("<i4").tobytes())

    @classmethod
    def decode(cls, rowids: bytes, freqs: bytes, lengths: bytes) -> "_Postings":
        return cls(np.frombuffer(rowids, "<i8"), np.frombuffer(freqs, "<i4").reshape(-1, 2),
                   np.frombuffer(lengths, "<i4"))

    @classmethod
    def concat(cls, lists: Sequence["_Postings"]) -> "_Postings":
        """One list of several segments' or parts' (each row is in one of them)."""
        if len(lists) == 1:
            return lists[0]
        rowids = np.concatenate([p.rowids for p in lists])
        order = np.argsort(rowids, kind="stable")
        return cls(rowids[order], np.concatenate([p.freqs for p in lists])[order],
                   np.concatenate([p.lengths for p in lists])[order])

    def keep(self, live: np.ndarray) -> "_Postings":
        """Only the rows in ``live`` (sorted)."""
        at = np.minimum(np.searchsorted(live, self.rowids), max(live.size - 1, 0))
        mask = live[at] == self.rowids if live.size else np.zeros(self.rowids.size, bool)
        return _Postings(self.rowids[mask], self.freqs[mask], self.lengths[mask])


_BUFFERED = re.compile(r"\{s\}\.(chunks|sections|corpus|term_d|postings|vec_)")


def _tsv_lexeme(token: str) -> str:
    """A lexeme quoted for tsvector's text input."""
    return "'" + token.replace("\\", "\\\\").replace("'", "''") + "'"


def _vector_text(blob: bytes) -> str:
    return "[" + ",".join(map(repr, np.frombuffer(blob, np.float32).tolist())) + "]"


def _decoding(table: str) -> Callable[[Callable], Callable]:
    """A method that decodes rows of ``table``: a row that does not decode is a damaged store."""
    def wrap(method: Callable) -> Callable:
        @functools.wraps(method)
        def decode(self: "PostgresStore", *args: Any, **kwargs: Any) -> Any:
            try:
                return method(self, *args, **kwargs)
            except (ValueError, TypeError, KeyError) as exc:
                raise StoreError(f"{self.where}: damaged store: a row of the table {table} cannot "
                                 f"be read ({exc})") from None
        return decode
    return wrap


_SECTION_TYPES = ("id text, doc_id text, version text, start_at int, end_at int, heading_path text, "
                  "level int, parent_id text")
_CHUNK_TYPES = ("rowid bigint, id text, doc_id text, version text, ord int, start_at int, end_at int, "
                "text text, kind text, heading_path text, section_id text, prefix text, header_start int, "
                "header_end int, token_count int, prev_id text, next_id text, duplicate_of text, "
                "over_limit boolean, config_id text, lexemes text[], tf jsonb, length int")
_CHUNK_SELECT = ("rowid, id, doc_id, version, ord, start_at, end_at, text, kind, heading_path, section_id, "
                 "prefix, header_start, header_end, token_count, prev_id, next_id, duplicate_of, "
                 "over_limit, config_id, array_to_tsvector(lexemes), tf, length")
_CHUNK_COLUMNS = ("c.id, c.doc_id, c.version, c.start_at, c.end_at, c.text, c.kind, c.heading_path, "
                  "c.section_id, c.prefix, c.header_start, c.header_end, c.token_count, c.prev_id, "
                  "c.next_id, c.duplicate_of, c.over_limit, c.config_id")
_VERSION_COLUMNS = ("d.doc_id, d.version, d.seq, d.content_hash, d.path, d.title, d.format, d.status, "
                    "d.updated_at, d.metadata, d.parser, d.parse_warnings, d.chunker_config, "
                    "d.ingested_at, a.groups")


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
                 hnsw_ef_search: int = 100, flush_rows: int = 10000) -> None:
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
        self._tx_configs: set[str] = set()
        self._rowid_block: list[int] | None = None  # the reserved chunk rows: next, end
        self._tx_index_version: int | None = None
        # table -> [rows before the transaction, rows it wrote, the chunk rows it wrote]
        self._tx_vectors: dict[str, list] = {}
        self._tx_first_rowid: int | None = None  # the first chunk row this transaction stored
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
        if (self._pending_chunks or self._pending_sections) and self._writing() and _BUFFERED.search(sql):
            self._flush()  # a read inside the writing transaction sees its buffered rows
        with self._conn() as conn:
            return conn.execute(sql.replace("{s}", self.schema), args).fetchall()

    def _one(self, sql: str, args: Sequence[Any] | dict | None = None) -> tuple | None:
        rows = self._all(sql, args)
        return rows[0] if rows else None

    def _setup(self, conn: Any) -> None:
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
        if int(version) < SCHEMA_VERSION:
            raise StoreError(f"{self.where}: store schema {version} predates this ragdx's "
                             f"({SCHEMA_VERSION}: BM25 postings); re-create it "
                             "('python -m ragdx.store.pg_admin drop DSN', then ingest again)")
        if int(version) > SCHEMA_VERSION:
            raise StoreError(f"{self.where}: store schema {version} is newer than this ragdx "
                             f"({SCHEMA_VERSION}); upgrade ragdx")
        if self.mode is not OpenMode.READ and conn.execute(
                f"SELECT 1 FROM {s}.meta WHERE key = 'store_id'").fetchone() is None:
            with conn.transaction():  # a store made before ids gets one, once, under the writers' lock
                self._take_write_lock(conn)
                conn.execute(f"INSERT INTO {s}.meta VALUES ('store_id', %s) ON CONFLICT (key) DO NOTHING",
                             (uuid.uuid4().hex,))

    def _require_vector(self, conn: Any) -> None:
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

    def _create(self, conn: Any, parts: dict[int, str] | None) -> None:
        """Set up a new store: ``parts`` maps each hash part to its foreign server (None: one
        unsharded server)."""
        self._require_vector(conn)
        s = self.schema
        with conn.transaction():
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")
            for statement in _statements(_COORDINATOR.format(s=s)):
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
            conn.execute(f"INSERT INTO {s}.meta VALUES ('schema_version', %s), ('index_version', '0'), "
                         "('store_id', %s)", (str(SCHEMA_VERSION), uuid.uuid4().hex))

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

    # -- shards ----------------------------------------------------------------------------
    def partitions(self) -> dict[int, str | None]:
        """Each hash part and the foreign server holding it (None: this server)."""
        return dict(self._all("SELECT part, server FROM {s}.partitions ORDER BY part"))

    def _shard_conninfo(self, server: str) -> str:
        """How to reach a shard, from its foreign server and user mapping on the coordinator."""
        with self._conn() as conn:
            return _server_conninfo(conn, server, self.where)

    def _on_each_shard(self, statements: Callable[[int], list[str]]) -> None:
        """Run DDL on every shard for each part it holds (committed at once, idempotently: an
        empty table left by a failed transaction on the coordinator is harmless)."""
        psycopg = _psycopg()
        by_server: dict[str, list[int]] = {}
        for part, server in self.partitions().items():
            if server is not None:
                by_server.setdefault(server, []).append(part)
        for server, parts in by_server.items():
            with psycopg.connect(self._shard_conninfo(server), autocommit=True, **self._connect_args) as conn:
                with conn.transaction():
                    for part in parts:
                        for statement in statements(part):
                            conn.execute(statement)

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
                    # fold this transaction's term deltas into term_df (the trigger on corpus.folds,
                    # on each part's server): once per transaction, not once per document
                    conn.execute(f"UPDATE {self.schema}.corpus SET folds = folds + 1")
                    conn.execute(f"UPDATE {self.schema}.meta SET value = (value::bigint + 1)::text "
                                 "WHERE key = 'index_version'")
                conn.execute("COMMIT")
                committed = self._changed
            except BaseException:
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

    def _parts_of(self, rowids: list[int]) -> dict[int, int]:
        """Each chunk row's part (hash of its doc_id, chosen by PostgreSQL's partitioning)."""
        if list(self._parts.values()) == [None]:
            return dict.fromkeys(rowids, 0)
        rows = self._tx.execute(f"SELECT rowid, tableoid::regclass::text FROM {self.schema}.chunks "
                                "WHERE rowid = ANY(%s)", (rowids,)).fetchall()
        return {rowid: int(name.rsplit("_p", 1)[1]) for rowid, name in rows}

    def _flush_postings(self) -> None:
        """The buffered chunks' postings as one new segment: per part and term, one row of the
        rows holding it (ascending), their frequencies in the prefix and the text, and their
        lengths, written with COPY."""
        pending, self._pending_postings = self._pending_postings, []
        part_of = self._parts_of([rowid for rowid, _, _ in pending])
        by_term: dict[tuple[int, str], list[tuple[int, int, int, int]]] = {}
        for rowid, tf, length in pending:
            part = part_of[rowid]
            for term, (in_prefix, in_text) in tf.items():
                by_term.setdefault((part, term), []).append((rowid, in_prefix, in_text, length))
        seg = self._tx.execute(f"SELECT nextval('{self.schema}.postings_seg')").fetchone()[0]
        sharded = list(self._parts.values()) != [None]
        by_table: dict[str, list[tuple]] = {}
        for (part, term), hits in by_term.items():
            table = f"postings_p{part}" if sharded else "postings"
            by_table.setdefault(table, []).append((part, seg, term, *_Postings.encode(hits)))
        for table, rows in by_table.items():
            with self._tx.cursor().copy(f"COPY {self.schema}.{table} (part, seg, term, rowids, freqs, lengths) "
                                        "FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
        self._changed = True

    def _flush_vectors(self, table: str) -> None:
        """Write a space's buffered vectors with COPY. On one server, a transaction that writes
        at least as many vectors as the table held before drops the HNSW index first: it is
        built again after the commit (:meth:`_build_hnsw`), faster than inserting each vector
        into the graph."""
        pending = self._pending_vectors.pop(table, {})
        if not pending:
            return
        s = self.schema
        state = self._tx_vectors.get(table)
        if state is None:
            before = self._tx.execute(f"SELECT count(*) FROM {s}.{table}").fetchone()[0]
            state = self._tx_vectors[table] = [before, 0, set()]
        state[1] += len(pending)
        state[2].update(pending)
        if list(self._parts.values()) == [None] and state[1] >= state[0]:
            self._tx.execute(f"DROP INDEX IF EXISTS {s}.{table}_hnsw")
        with self._tx.cursor().copy(f"COPY {s}.{table} (chunk_rowid, doc_id, version, input_hash, embedding, "
                                    "window_end) FROM STDIN") as copy:
            for rowid, doc_id, version, h, blob, end in pending.values():
                copy.write_row((rowid, doc_id, version, h, _vector_text(blob), end))
        self._changed = True

    def _build_hnsw(self, tables: list[str]) -> None:
        """Build the HNSW index of each vector table (each part's, sharded) that lacks one,
        after the load that filled it (``m`` and ``ef_construction`` as the store was opened
        with). Until it exists, an HNSW search sorts every vector: exact, and slower."""
        def build(conn: Any, name: str) -> None:
            if conn.execute("SELECT to_regclass(%s)", (f"{self.schema}.{name}_hnsw",)).fetchone()[0]:
                return
            started = time.perf_counter()
            conn.execute(f"CREATE INDEX IF NOT EXISTS {name}_hnsw ON {self.schema}.{name} USING hnsw "
                         f"(embedding vector_ip_ops) WITH (m = {int(self.hnsw_m)}, "
                         f"ef_construction = {int(self.hnsw_ef_construction)})")
            log.info("built the HNSW index of %s in %.1f s", name, time.perf_counter() - started)
        for table in tables:
            if list(self._parts.values()) == [None]:
                with self._pool.connection() as conn:
                    build(conn, table)
            else:
                self._on_servers(lambda conn, parts: [build(conn, f"{table}_p{p}") for p in parts])

    def _compact_postings(self, most: int = 16) -> None:
        """Merge the postings' segments into one when there are more than ``most`` (each write
        transaction adds one): the rows of deleted or re-chunked chunks are dropped then."""
        segments = self._one("SELECT count(DISTINCT seg) FROM {s}.postings")[0]
        if segments <= most:
            return
        started = time.perf_counter()
        with self.transaction():
            conn = self._tx
            seg = conn.execute(f"SELECT nextval('{self.schema}.postings_seg')").fetchone()[0]
            for part, server in self._parts.items():
                table = "postings" if server is None else f"postings_p{part}"
                chunks = "chunks" if server is None else f"chunks_p{part}"
                live = np.asarray([r for (r,) in conn.execute(
                    f"SELECT rowid FROM {self.schema}.{chunks} WHERE duplicate_of IS NULL")], np.int64)
                merged: dict[str, list[_Postings]] = {}
                for term, rowids, freqs, lengths in conn.execute(
                        f"SELECT term, rowids, freqs, lengths FROM {self.schema}.{table} ORDER BY term, seg",
                        binary=True):
                    merged.setdefault(term, []).append(_Postings.decode(rowids, freqs, lengths))
                conn.execute(f"DELETE FROM {self.schema}.{table}")
                with conn.cursor().copy(f"COPY {self.schema}.{table} (part, seg, term, rowids, freqs, lengths) "
                                        "FROM STDIN") as copy:
                    for term, lists in merged.items():
                        kept = _Postings.concat(lists).keep(live)
                        if kept.rowids.size:
                            copy.write_row((part, seg, term, *kept.encoded()))
            self._changed = True
        log.info("merged %d postings segments in %.1f s", segments, time.perf_counter() - started)

    # -- reads on every part ----------------------------------------------------------------
    def _on_servers(self, job: Callable[[Any, list[int]], Any]) -> list[Any]:
        """``job(connection, parts)`` on each shard server for the parts it holds, the servers
        in parallel (threads, each with a connection of its own): ragdx's fan-out."""
        by_server: dict[str, list[int]] = {}
        for part, server in self._parts.items():
            by_server.setdefault(server, []).append(part)
        if self._fan_pool is None:
            from concurrent.futures import ThreadPoolExecutor
            self._fan_pool = ThreadPoolExecutor(max_workers=len(by_server), thread_name_prefix="ragdx-shard")

        def run(server: str, parts: list[int]) -> Any:
            pool = self._shard_pool(server)
            with pool.connection() as conn:
                return job(conn, parts)
        futures = [self._fan_pool.submit(run, server, parts) for server, parts in by_server.items()]
        return [f.result() for f in futures]

    def _shard_pool(self, server: str) -> Any:
        with self._pools_lock:  # not self._lock: a writer holds that while it fans out
            pool = self._shard_pools.get(server)
            if pool is None:
                from psycopg_pool import ConnectionPool
                pool = self._shard_pools[server] = ConnectionPool(
                    self._shard_conninfo(server), min_size=1, max_size=self._pool.max_size,
                    kwargs={"autocommit": True, **self._connect_args}, configure=self._configure,
                    open=True, name=f"ragdx:{self.schema}:{server}")
            return pool

    def _fan(self, sql: Callable[[str], str], args: Sequence[Any] | dict | None = None, *,
             binary: bool = False, no_sort: bool = False) -> list[tuple]:
        """The rows of ``sql(suffix)`` over every part (``suffix`` names a part's tables: ``""``
        on one server, ``_p<n>`` sharded). Sharded, each shard server answers for its parts,
        all servers at once; inside this thread's writing transaction, its connection to the
        coordinator reads them all (through postgres_fdw), so the transaction's rows are seen.
        ``no_sort``: the planner may not sort (``enable_sort`` off for this query), so an
        ``ORDER BY`` that an index serves is read from the index."""
        if self._writing():
            self._flush()  # this transaction's buffered rows are read too

        def run(conn: Any, query: str) -> list[tuple]:
            query = query.replace("{s}", self.schema)
            if not no_sort:
                return conn.cursor(binary=binary).execute(query, args).fetchall()
            with conn.transaction():  # (a savepoint inside the writing transaction)
                conn.execute("SET LOCAL enable_sort = off")
                rows = conn.cursor(binary=binary).execute(query, args).fetchall()
                conn.execute("SET LOCAL enable_sort = on")
            return rows
        if list(self._parts.values()) == [None]:
            with self._conn() as conn:
                return run(conn, sql(""))

        def union(parts: list[int]) -> str:
            return " UNION ALL ".join(f"({sql(f'_p{p}')})" for p in parts)
        if self._writing():
            return run(self._tx, union(list(self._parts)))
        found = self._on_servers(lambda conn, parts: run(conn, union(parts)))
        return [row for rows in found for row in rows]

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

    # -- writes ---------------------------------------------------------------------------
    def insert_version(self, document: Document, raw_text: str, parsed: ParsedDocument,
                       sections: tuple[Section, ...], chunks: tuple[Chunk, ...],
                       chunker_config: str) -> None:
        """Store a new document version with its text, access groups, sections and chunks."""
        if self._tx is None:
            raise StoreError("store writes must happen inside store.transaction()")
        self._next_index_version()
        # one round trip for the version's rows (pipeline mode; the chunks are buffered)
        with self._tx.pipeline():
            self._write(
                "INSERT INTO {s}.documents VALUES (%s,%s,nextval('{s}.doc_seq'),%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
                (document.doc_id, document.version, document.content_hash, document.path, document.title,
                 document.format, document.status.value, document.updated_at,
                 json.dumps(dict(document.metadata), sort_keys=True), parsed.parser,
                 json.dumps(list(parsed.warnings)), chunker_config, raw_text, parsed.text, _now()))
            self._write("INSERT INTO {s}.acl VALUES (%s, %s, %s)",
                        (document.doc_id, document.version, sorted(set(document.acl))))
            self._write("DELETE FROM {s}.tombstones WHERE doc_id = %s", (document.doc_id,))
            self.log("add", document.doc_id, document.version,
                     f"{len(chunks)} chunks, status {document.status.value}, acl {list(document.acl)}")
        self._write_chunks(document, sections, chunks, chunker_config, new=True)

    def _vec_tables(self) -> list[str]:
        return [vec_table(n) for (n,) in self._all("SELECT n FROM {s}.spaces ORDER BY n")]

    def _write_chunks(self, document: Document, sections: tuple[Section, ...],
                      chunks: tuple[Chunk, ...], chunker_config: str, *, new: bool = False) -> None:
        """Buffer a version's sections and chunks (written by :meth:`_flush_chunks`); ``new``: the
        version has no rows yet, so there are none to delete first."""
        key = (document.doc_id, document.version)
        if not new:
            self._flush()  # the rows to delete may still be buffered
            self._drop_pending(lambda doc_id, version: (doc_id, version) == key)
            for table in self._vec_tables():
                self._write(f"DELETE FROM {{s}}.{table} WHERE doc_id = %s AND version = %s", key)
            self._write("DELETE FROM {s}.chunks WHERE doc_id = %s AND version = %s", key)
            self._write("DELETE FROM {s}.sections WHERE doc_id = %s AND version = %s", key)
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
            self._pending_chunks.append((
                first + i, c.id, c.doc_id, c.version, i, c.start, c.end, c.text, c.kind.value,
                json.dumps(list(c.heading_path)), c.section_id, c.prefix, c.header[0] if c.header else None,
                c.header[1] if c.header else None, c.token_count, c.prev_id, c.next_id, c.duplicate_of,
                c.over_limit, c.config_id, lexemes, tf, length))
            self._fresh[c.id] = (first + i, c.doc_id, c.version)
            if c.duplicate_of is None:  # a duplicate counts in the statistics, but is never returned
                self._pending_postings.append((first + i, tf, length))
        if chunks[0].config_id not in self._tx_configs:
            self._tx_configs.add(chunks[0].config_id)
            self._write("INSERT INTO {s}.configs VALUES (%s, 'chunker', %s) ON CONFLICT (id) DO NOTHING",
                        (chunks[0].config_id, chunker_config))
        if len(self._pending_chunks) >= self.flush_rows:
            self._flush()

    def _rowids(self, n: int) -> int:
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

    def _flush_chunks(self) -> None:
        """Write the buffered sections and chunks: chunks by COPY on one server (the statistics
        trigger runs once for them all), through postgres_fdw's batched inserts sharded."""
        sections, self._pending_sections = self._pending_sections, []
        chunks, self._pending_chunks = self._pending_chunks, []
        self._insert("sections", _SECTION_TYPES, sections)
        if not chunks:
            return
        if list(self._parts.values()) != [None]:
            names = [c.split()[0] for c in _CHUNK_TYPES.split(", ")]
            self._insert("chunks", _CHUNK_TYPES, [dict(zip(names, row)) for row in chunks], _CHUNK_SELECT)
            return
        with self._tx.cursor().copy(f"COPY {self.schema}.chunks FROM STDIN") as copy:
            for row in chunks:
                copy.write_row((*row[:20], " ".join(_tsv_lexeme(x) for x in row[20]), json.dumps(row[21]), row[22]))

    def replace_chunks(self, document: Document, parsed: ParsedDocument,
                       sections: tuple[Section, ...], chunks: tuple[Chunk, ...],
                       chunker_config: str) -> None:
        """Re-chunk a stored version (a new parser or chunker config); the text is unchanged."""
        self._write("UPDATE {s}.documents SET parser = %s, parse_warnings = %s, chunker_config = %s, "
                    "parsed_text = %s WHERE doc_id = %s AND version = %s",
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
            self._write("UPDATE {s}.documents SET status = %s, title = %s, path = %s, metadata = %s, "
                        "updated_at = %s WHERE doc_id = %s AND version = %s",
                        (document.status.value, document.title, document.path,
                         json.dumps(dict(document.metadata), sort_keys=True), document.updated_at,
                         document.doc_id, document.version))
            if "acl" in changed:
                self._write("UPDATE {s}.acl SET groups = %s WHERE doc_id = %s AND version = %s",
                            (sorted(set(document.acl)), document.doc_id, document.version))
        return changed

    def set_status(self, doc_id: str, version: str, status: DocStatus, reason: str) -> None:
        self._write("UPDATE {s}.documents SET status = %s WHERE doc_id = %s AND version = %s",
                    (DocStatus(status).value, doc_id, version))
        self.log("status", doc_id, version, f"-> {DocStatus(status).value}: {reason}")

    def delete_document(self, doc_id: str) -> list[str]:
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
        for table in [*self._vec_tables(), "chunks", "sections", "acl", "documents"]:
            self._write(f"DELETE FROM {{s}}.{table} WHERE doc_id = %s", (doc_id,))
        self._write("INSERT INTO {s}.tombstones VALUES (%s, %s, %s) ON CONFLICT (doc_id) DO UPDATE "
                    "SET deleted_at = EXCLUDED.deleted_at, versions = EXCLUDED.versions",
                    (doc_id, _now(), json.dumps(versions)))
        self.log("delete", doc_id, None, f"versions {versions}")
        return versions

    def log(self, op: str, doc_id: str | None, version: str | None, detail: str) -> None:
        self._write("INSERT INTO {s}.log (at, index_version, op, doc_id, version, detail) "
                    "VALUES (%s, %s, %s, %s, %s, %s)",
                    (_now(), self._next_index_version(), op, doc_id, version, detail))

    def _next_index_version(self) -> int:
        """The index version this transaction commits (read once per transaction)."""
        if not self._writing():
            return self.index_version + 1
        if self._tx_index_version is None:
            self._tx_index_version = self.index_version + 1
        return self._tx_index_version

    # -- reads ----------------------------------------------------------------------------
    @_decoding("documents")
    def _version_row(self, row: tuple) -> StoredVersion:
        (doc_id, version, seq, content_hash, path, title, fmt, status, updated_at, metadata,
         parser, warnings, chunker_config, ingested_at, groups) = row
        document = Document(doc_id, version, content_hash, path, title, tuple(sorted(groups or ())),
                            DocStatus(status), updated_at, json.loads(metadata), fmt)
        return StoredVersion(document, seq, parser, tuple(json.loads(warnings)), chunker_config,
                             ingested_at)

    _VERSIONS = ("SELECT " + _VERSION_COLUMNS + " FROM {s}.documents d LEFT JOIN {s}.acl a "
                 "ON a.doc_id = d.doc_id AND a.version = d.version")

    def version(self, doc_id: str, version: str) -> StoredVersion | None:
        row = self._one(self._VERSIONS + " WHERE d.doc_id = %s AND d.version = %s", (doc_id, version))
        return self._version_row(row) if row else None

    def versions(self, doc_id: str | None = None) -> list[StoredVersion]:
        """Stored versions in ingestion order, of one document or of all."""
        where, args = (" WHERE d.doc_id = %s", (doc_id,)) if doc_id is not None else ("", ())
        return [self._version_row(r) for r in self._all(self._VERSIONS + where + " ORDER BY d.seq", args)]

    def latest(self, doc_id: str) -> StoredVersion | None:
        """The current version ingested last, or else the version ingested last."""
        found = self.versions(doc_id)
        current = [v for v in found if v.document.status is DocStatus.CURRENT]
        return (current or found or [None])[-1]

    def doc_ids(self) -> list[str]:
        return [r[0] for r in self._all("SELECT doc_id FROM {s}.documents GROUP BY doc_id ORDER BY min(seq)")]

    def texts(self, doc_id: str, version: str) -> tuple[str, str]:
        """The raw source text and the parsed text of a version."""
        row = self._one("SELECT raw_text, parsed_text FROM {s}.documents WHERE doc_id = %s AND "
                        "version = %s", (doc_id, version))
        if row is None:
            raise InputError(f"no version {version!r} of document {doc_id!r} in the store")
        return row[0], row[1]

    @_decoding("chunks")
    def _chunk_row(self, row: tuple) -> Chunk:
        (cid, doc_id, version, start, end, text, kind, path, section_id, prefix, hs, he, tokens,
         prev_id, next_id, dup, over, config_id) = row[:18]
        return Chunk(cid, doc_id, version, start, end, text, ChunkKind(kind), tuple(json.loads(path)),
                     section_id, prefix, (hs, he) if hs is not None else None, tokens, prev_id,
                     next_id, dup, bool(over), config_id)

    def chunks(self, doc_id: str | None = None, version: str | None = None) -> list[Chunk]:
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
            f"SELECT {_CHUNK_COLUMNS} FROM {{s}}.chunks c{where} ORDER BY c.doc_id, c.version, c.ord", args)]

    def chunk_count(self, doc_id: str, version: str) -> int:
        return self._one("SELECT count(*) FROM {s}.chunks WHERE doc_id = %s AND version = %s",
                         (doc_id, version))[0]

    def chunks_by_id(self, ids: list[str]) -> dict[str, Chunk]:
        if not ids:
            return {}
        rows = self._all(f"SELECT {_CHUNK_COLUMNS} FROM {{s}}.chunks c WHERE c.id = ANY(%s)", (list(ids),))
        return {chunk.id: chunk for chunk in map(self._chunk_row, rows)}

    def _chunks_by_rowid(self, rowids: list[int]) -> dict[int, Chunk]:
        if not rowids:
            return {}
        rows = self._fan(lambda sfx: f"SELECT {_CHUNK_COLUMNS}, c.rowid FROM {{s}}.chunks{sfx} c "
                         "WHERE c.rowid = ANY(%(r)s)", {"r": list(rowids)})
        return {row[18]: self._chunk_row(row) for row in rows}

    @_decoding("sections")
    def _section_row(self, row: tuple) -> Section:
        return Section(row[0], row[1], row[2], row[3], row[4], tuple(json.loads(row[5])), row[6], row[7])

    _SECTION = "SELECT id, doc_id, version, start_at, end_at, heading_path, level, parent_id FROM {s}.sections"

    def section(self, section_id: str) -> Section | None:
        row = self._one(self._SECTION + " WHERE id = %s", (section_id,))
        return self._section_row(row) if row else None

    def sections(self, doc_id: str, version: str) -> list[Section]:
        return [self._section_row(r) for r in self._all(
            self._SECTION + " WHERE doc_id = %s AND version = %s ORDER BY start_at, level", (doc_id, version))]

    def neighbours(self, chunk_id: str, n: int = 1) -> list[Chunk]:
        """The chunk with up to ``n`` chunks on each side, in reading order (small-to-big)."""
        row = self._one("SELECT doc_id, version, ord FROM {s}.chunks WHERE id = %s", (chunk_id,))
        if row is None:
            raise InputError(f"no chunk {chunk_id!r} in the store")
        return [self._chunk_row(r) for r in self._all(
            f"SELECT {_CHUNK_COLUMNS} FROM {{s}}.chunks c WHERE c.doc_id = %s AND c.version = %s "
            "AND c.ord BETWEEN %s AND %s ORDER BY c.ord", (row[0], row[1], row[2] - n, row[2] + n))]

    @_decoding("tombstones")
    def tombstone(self, doc_id: str) -> tuple[str, list[str]] | None:
        """When a deleted document was deleted, and which versions it had."""
        row = self._one("SELECT deleted_at, versions FROM {s}.tombstones WHERE doc_id = %s", (doc_id,))
        return (row[0], json.loads(row[1])) if row else None

    def log_entries(self, since: int = 0) -> list[LogEntry]:
        return [LogEntry(*r) for r in self._all(
            "SELECT seq, at, index_version, op, doc_id, version, detail FROM {s}.log WHERE seq > %s "
            "ORDER BY seq", (since,))]

    def counts(self) -> dict[str, int]:
        """How many documents, versions, chunks and sections the store holds."""
        row = self._one("SELECT (SELECT count(DISTINCT doc_id) FROM {s}.documents), "
                        "(SELECT count(*) FROM {s}.documents), (SELECT count(*) FROM {s}.chunks), "
                        "(SELECT count(*) FROM {s}.sections), (SELECT count(*) FROM {s}.tombstones)")
        return dict(zip(("documents", "versions", "chunks", "sections", "deleted"), row))

    # -- access ---------------------------------------------------------------------------
    def readable(self, groups: tuple[str, ...], doc_id: str, version: str) -> bool:
        """Whether a principal with these groups may read this version (checked on every read)."""
        return self._one("SELECT 1 FROM {s}.acl WHERE doc_id = %s AND version = %s AND groups && %s",
                         (doc_id, version, list(groups))) is not None

    def readable_many(self, groups: tuple[str, ...], keys: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        """Which of these (doc_id, version) pairs the groups may read, in one query."""
        keys = list(dict.fromkeys(keys))
        if not keys or not groups:
            return set()
        rows = self._all("SELECT a.doc_id, a.version FROM {s}.acl a JOIN unnest(%s::text[], %s::text[]) "
                         "k(doc_id, version) ON a.doc_id = k.doc_id AND a.version = k.version "
                         "WHERE a.groups && %s",
                         ([k[0] for k in keys], [k[1] for k in keys], list(groups)))
        return {(r[0], r[1]) for r in rows}

    def acl_table(self) -> dict[tuple[str, str], frozenset[str]]:
        """Every version's access groups."""
        return {(d, v): frozenset(g) for d, v, g in self._all("SELECT doc_id, version, groups FROM {s}.acl")}

    # -- lexical search -------------------------------------------------------------------
    @property
    def bm25_config(self) -> dict[str, object]:
        """How the keyword channel scores: FTS5's tokens, k1 and b, computed in SQL."""
        return {"tokenizer": FTS_TOKENIZER, "k1": FTS_BM25_K1, "b": FTS_BM25_B, "operator": "OR"}

    def bm25_statistics(self, tokens: Sequence[str]) -> tuple[int, int, dict[str, int]]:
        """The BM25 statistics over every part: rows, tokens, and rows holding each token."""
        # every commit leaves term_delta empty: only the writing transaction has deltas to add
        writing = self._writing()
        if not writing:
            n_rows = n_tokens = 0
            df: dict[str, int] = {}
            for term, n, tokens in self._fan(
                    lambda sfx: f"SELECT NULL::text, n_rows, n_tokens FROM {{s}}.corpus{sfx} UNION ALL "
                    f"SELECT term, df, 0 FROM {{s}}.term_df{sfx} WHERE term = ANY(%(t)s)", {"t": sorted(set(tokens))}):
                if term is None:
                    n_rows, n_tokens = n_rows + n, n_tokens + tokens
                else:
                    df[term] = df.get(term, 0) + n
            return int(n_rows), int(n_tokens), {t: int(n) for t, n in df.items() if n > 0}
        n_rows, n_tokens = self._one("SELECT coalesce(sum(n_rows), 0), coalesce(sum(n_tokens), 0) "
                                     "FROM {s}.corpus")
        delta = " UNION ALL SELECT term, df FROM {s}.term_delta WHERE term = ANY(%(t)s)" if writing else ""
        df = dict(self._all("SELECT term, sum(df) FROM (SELECT term, df FROM {s}.term_df WHERE term = "
                            f"ANY(%(t)s){delta}) d GROUP BY term HAVING sum(df) > 0",
                            {"t": sorted(set(tokens))}))
        return int(n_rows), int(n_tokens), {t: int(n) for t, n in df.items()}

    def bm25(self, terms: Sequence[str], groups: tuple[str, ...], limit: int,
             weights: tuple[float, float] = (0.5, 1.0),
             versions: VersionFilter | None = None) -> list[tuple[Chunk, float]]:
        """:meth:`_bm25` among the versions the filter allows (every version when None)."""
        return self._with_versions(lambda n: self._bm25(terms, groups, n, weights), limit, versions)

    def _with_versions(self, search: Any, limit: int, versions: VersionFilter | None) -> list[tuple[Chunk, float]]:
        """``search(n)``'s best ``limit`` hits of the versions the filter allows: the search runs
        deeper (x4 each time) until it has enough of them or runs out (statuses live in their own
        table, never on the chunk rows, so a status change rewrites no indexed row)."""
        if versions is None or not versions.current_only:
            return search(limit)
        fetch = limit
        while True:
            found = search(fetch)
            docs = sorted({c.doc_id for c, _ in found})
            status = {(d, v): s for d, v, s in self._fan(
                lambda sfx: f"SELECT doc_id, version, status FROM {{s}}.documents{sfx} WHERE doc_id = ANY(%(d)s)",
                {"d": docs})} if docs else {}
            kept = [(c, score) for c, score in found
                    if versions.allows(c.version, status.get((c.doc_id, c.version), "current"))]
            if len(kept) >= limit or len(found) < fetch:
                return kept[:limit]
            fetch *= 4

    def _bm25(self, terms: Sequence[str], groups: tuple[str, ...], limit: int,
              weights: tuple[float, float] = (0.5, 1.0)) -> list[tuple[Chunk, float]]:
        """BM25 among the chunks the groups may read, as FTS5's ``bm25()`` scores it: the best
        ``limit`` readable, non-duplicate chunks holding any term, higher scores first, ties to
        the older row.

        Each term of the question is one phrase (its FTS5 tokens); a phrase's idf is
        ``log((N - n + 0.5) / (n + 0.5))`` (1e-6 where that is <= 0) over every row, and its
        frequency in a row adds each column's weight per occurrence.

        Scored from the postings with MaxScore pruning (Turtle & Flood, "Query evaluation:
        strategies and optimizations", IP&M 31(6), 1995): a phrase adds less than
        ``idf * (k1 + 1)`` to any row, so the most frequent phrases, whose bounds add up to less
        than the ``limit``-th best readable score of the others, cannot bring a row into the
        top on their own. Their postings (the longest) are never read: only the rows that the
        other phrases put within their bounds of the top get their frequencies, from the
        chunks' ``tf``. The final scores are computed phrase by phrase in the query's order,
        as FTS5 adds them, so they are its floats.

        Args:
            terms: the query's terms (OR).
            groups: the principal's access groups.
            limit: how many to return.
            weights: the prefix's and the text's weights on term frequencies.
        """
        phrases = [token for term in terms for token in fts5_tokens(term)]
        if not phrases or not groups or limit <= 0:
            return []
        if self._writing():
            self._flush()
        n_rows, n_tokens, df = self.bm25_statistics(phrases)
        present = [t for t in dict.fromkeys(phrases) if df.get(t)]
        if not n_rows or not present:
            return []
        avgdl = n_tokens / n_rows
        idf = {t: fts5_idf(n_rows, df[t]) for t in present}
        k1 = FTS_BM25_K1
        # a phrase's bound, once per occurrence in the query; the rarest phrases are read first
        bound = {t: idf[t] * (k1 + 1.0) * phrases.count(t) for t in present}
        skipped: list[str] = []
        if min(weights) >= 0:
            held = 0.0
            for t in sorted(present, key=lambda t: (-df[t], t)):
                # a phrase held by over an eighth of the rows is worth skipping
                if df[t] * 8 < n_rows or df[t] < 4 * limit or len(skipped) == len(present) - 1:
                    break
                held += bound[t]
                skipped.append(t)
        read = [t for t in present if t not in skipped]
        postings = self._postings(read)
        checked: dict[int, bool] = {}
        if skipped:
            rows, partial = self._score(postings, phrases, idf, weights, avgdl)
            top = self._readable_top(rows, partial, limit, groups, checked)
            theta = float(partial[np.searchsorted(rows, top[-1])]) if len(top) == limit else 0.0
            margin = sum(bound[t] for t in skipped) * (1 + 1e-9)
            if theta > margin:
                keep = (partial + margin) * (1 + 1e-12) >= theta
                rows = rows[keep]
                postings = {t: p.keep(rows) for t, p in postings.items()}
                postings.update(self._postings_of_rows(skipped, rows, postings))
            else:  # the frequent phrases may decide: read them too
                postings.update(self._postings(skipped))
        rows, score = self._score(postings, phrases, idf, weights, avgdl)
        found = self._readable_top(rows, score, limit, groups, checked)
        chunks = self._chunks_by_rowid(found)
        at = np.searchsorted(rows, found)
        return [(chunks[rowid], float(score[i])) for rowid, i in zip(found, at) if rowid in chunks]

    def _postings(self, tokens: list[str]) -> dict[str, _Postings]:
        """The postings of these tokens, over every segment and part."""
        if not tokens:
            return {}
        lists: dict[str, list[_Postings]] = {}
        for term, rowids, freqs, lengths in self._fan(
                lambda sfx: f"SELECT term, rowids, freqs, lengths FROM {{s}}.postings{sfx} WHERE term = ANY(%(t)s)",
                {"t": tokens}, binary=True):
            lists.setdefault(term, []).append(_Postings.decode(rowids, freqs, lengths))
        return {term: _Postings.concat(found) for term, found in lists.items()}

    def _postings_of_rows(self, tokens: list[str], rows: np.ndarray,
                          known: dict[str, _Postings]) -> dict[str, _Postings]:
        """The postings of these tokens restricted to these rows, read from the chunks' ``tf``
        (the rows' lengths from ``known``)."""
        if not rows.size:
            return {t: _Postings(rows, np.zeros((0, 2), np.int32), np.zeros(0, np.int32)) for t in tokens}
        length = np.zeros(rows.size, np.int64)
        for p in known.values():
            length[np.searchsorted(rows, p.rowids)] = p.lengths
        picks = ", ".join(f"c.tf -> %(t{i})s" for i in range(len(tokens)))
        args: dict[str, Any] = {"r": rows.tolist(), **{f"t{i}": t for i, t in enumerate(tokens)}}
        found = sorted(self._fan(lambda sfx: f"SELECT c.rowid, {picks} FROM {{s}}.chunks{sfx} c "
                                 "WHERE c.rowid = ANY(%(r)s)", args))
        out = {}
        for i, token in enumerate(tokens):
            hits = [(r[0], r[i + 1]) for r in found if r[i + 1] is not None]
            rowids = np.asarray([h[0] for h in hits], np.int64)
            out[token] = _Postings(rowids, np.asarray([h[1] for h in hits], np.int64).reshape(-1, 2),
                                   length[np.searchsorted(rows, rowids)])
        return out

    @staticmethod
    def _score(postings: dict[str, _Postings], phrases: list[str], idf: dict[str, float],
               weights: tuple[float, float], avgdl: float) -> tuple[np.ndarray, np.ndarray]:
        """The rows holding any of these postings' tokens (ascending) and their BM25 over those
        tokens, added phrase by phrase in the query's order (FTS5's fts5Bm25Function)."""
        if not postings:
            return np.zeros(0, np.int64), np.zeros(0)
        rows = np.unique(np.concatenate([p.rowids for p in postings.values()]))
        length = np.zeros(rows.size, np.float64)
        for p in postings.values():
            length[np.searchsorted(rows, p.rowids)] = p.lengths
        k1, b = FTS_BM25_K1, FTS_BM25_B
        norm = k1 * (1 - b + b * length / avgdl)
        score = np.zeros(rows.size)
        w = np.asarray(weights, np.float64)
        for token in phrases:
            p = postings.get(token)
            if p is None or not p.rowids.size:
                continue  # a phrase a row does not hold adds 0.0, as in FTS5
            at = np.searchsorted(rows, p.rowids)
            f = np.multiply(p.freqs[:, 0], w[0], dtype=np.float64)
            f += np.multiply(p.freqs[:, 1], w[1], dtype=np.float64)
            score[at] += idf[token] * ((f * (k1 + 1.0)) / (f + norm[at]))
        return rows, score

    def _readable_top(self, rows: np.ndarray, score: np.ndarray, limit: int, groups: tuple[str, ...],
                      checked: dict[int, bool]) -> list[int]:
        """The best ``limit`` rows by (score descending, rowid) that still exist, are no
        duplicates and that the groups may read: checked best first, a batch at a time."""
        want = 2 * limit + 16
        while True:
            n = min(want, rows.size)
            if n < rows.size:
                kth = np.partition(score, rows.size - n)[rows.size - n]
                idx = np.flatnonzero(score >= kth)
            else:
                idx = np.arange(rows.size)
            idx = idx[np.lexsort((rows[idx], -score[idx]))]
            ask = [int(r) for r in rows[idx] if int(r) not in checked]
            if ask:
                ok = {r for (r,) in self._fan(
                    lambda sfx: f"SELECT c.rowid FROM {{s}}.chunks{sfx} c JOIN {{s}}.acl{sfx} a ON a.doc_id = "
                    "c.doc_id AND a.version = c.version WHERE c.rowid = ANY(%(r)s) AND c.duplicate_of IS NULL "
                    "AND a.groups && %(g)s::text[]", {"r": ask, "g": list(groups)})}
                checked.update((r, r in ok) for r in ask)
            top = [int(r) for r in rows[idx] if checked[int(r)]][:limit]
            if len(top) == limit or n == rows.size:
                return top
            want *= 4

    def _top(self, select: str, order: str, limit: int, args: dict, *, table: str = "",
             no_sort: bool = False) -> list[tuple]:
        """The top ``limit`` rows of a query over every part: ``select`` names its tables
        ``VEC`` (the space's ``table``) and ``ACL``, and yields ``rowid`` and ``score`` first.

        Sharded, each part's top ``limit`` is found on its shard (join, filter, ``ORDER BY`` and
        ``LIMIT``), the shards at once (:meth:`_fan`), and merged here by (score, rowid). Each
        part's list is its exact top, so the merge is the exact top of the whole table."""
        def on(sfx: str) -> str:
            return (select.replace("ACL", f"{{s}}.acl{sfx}").replace("VEC", f"{{s}}.{table}{sfx}")
                    + f" ORDER BY {order} LIMIT {int(limit)}")
        rows = self._fan(on, args, no_sort=no_sort, binary=True)  # binary: the vectors' floats as they are
        rows.sort(key=lambda r: (-r[1], r[0]))
        return rows[:limit]

    def _analyze(self) -> None:
        """Refresh the coordinator's statistics of the shards' tables when they grew by a tenth
        since last time: without row counts, the planner would fetch every row of a part to sort
        it locally rather than ship the sort and limit to the shard."""
        if list(self._parts.values()) == [None]:
            return
        rows = int(self._one("SELECT coalesce(sum(n_rows), 0) FROM {s}.corpus")[0])
        last = self._one("SELECT value FROM {s}.meta WHERE key = 'analyzed_rows'")
        if last is not None and rows <= int(last[0]) * 1.1:
            return
        with self._pool.connection() as conn:
            conn.execute(f"ANALYZE {', '.join(f'{self.schema}.{t}' for t in ['chunks', 'acl', *self._vec_tables()])}")
            conn.execute(f"INSERT INTO {self.schema}.meta VALUES ('analyzed_rows', %s) ON CONFLICT (key) "
                         "DO UPDATE SET value = EXCLUDED.value", (str(rows),))

    # -- vectors and embedding spaces ----------------------------------------------------
    def register_space(self, space: EmbeddingSpace, backend: str) -> None:
        """Record an embedding space (state ``building``) if it is new, with its vector table."""
        if self._one("SELECT 1 FROM {s}.spaces WHERE id = %s", (space.id,)):
            return
        if self._tx is None:
            raise StoreError("store writes must happen inside store.transaction()")
        body = json.dumps({k: getattr(space, k) for k in space.__slots__}, sort_keys=True)
        n = self._tx.execute(f"INSERT INTO {self.schema}.spaces (id, dim, body, backend, state, created_at, "
                             "updated_at) VALUES (%s, %s, %s, %s, 'building', %s, %s) RETURNING n",
                             (space.id, space.dim, body, backend, _now(), _now())).fetchone()[0]
        self._changed = True
        table, s = vec_table(n), self.schema
        parts = self.partitions()
        if list(parts.values()) == [None]:
            for statement in _vec_ddl(s, table, space.dim):
                self._tx.execute(statement)
        else:
            self._on_each_shard(lambda part: [f"DROP TABLE IF EXISTS {s}.{table}_p{part}",
                                              *_vec_ddl(s, f"{table}_p{part}", space.dim)])
            for statement in sharded_table_ddl(s, table, _VEC_COLUMNS.format(dim=space.dim), parts):
                self._tx.execute(statement)
        self.log("space", None, None, f"registered {space.id} ({space.model_id}, {backend})")

    def _space_table(self, space_id: str) -> tuple[str, int] | None:
        row = self._one("SELECT n, dim FROM {s}.spaces WHERE id = %s", (space_id,))
        return (vec_table(row[0]), row[1]) if row else None

    @_decoding("spaces")
    def spaces(self) -> list[tuple[EmbeddingSpace, str, SpaceState, int]]:
        """Every registered space: the space, its backend, its state and its vector count."""
        if self._writing():
            self._flush()
        out = []
        for n, body, backend, state in self._all("SELECT n, body, backend, state FROM {s}.spaces "
                                                  "ORDER BY created_at, id"):
            count = self._one(f"SELECT count(*) FROM {{s}}.{vec_table(n)}")[0]
            out.append((EmbeddingSpace(**json.loads(body)), backend, SpaceState(state), count))
        return out

    def space_state(self, space_id: str) -> SpaceState | None:
        row = self._one("SELECT state FROM {s}.spaces WHERE id = %s", (space_id,))
        return SpaceState(row[0]) if row else None

    def set_space_state(self, space_id: str, state: SpaceState, reason: str) -> None:
        state = SpaceState.parse(state, what="space state")
        self._write("UPDATE {s}.spaces SET state = %s, updated_at = %s WHERE id = %s",
                    (state.value, _now(), space_id))
        self.log("space", None, None, f"{space_id} -> {state}: {reason}")

    @_decoding("spaces")
    def active_space(self) -> EmbeddingSpace | None:
        """The space the dense channel searches, if any."""
        row = self._one("SELECT body FROM {s}.spaces WHERE state = 'active'")
        return EmbeddingSpace(**json.loads(row[0])) if row else None

    def vectors_by_input(self, space_id: str, hashes: list[str]) -> dict[str, tuple[bytes, int | None]]:
        """Stored vectors of this space whose input text has these hashes (to skip re-encoding)."""
        if self._writing():
            self._flush()
        found = self._space_table(space_id)
        if found is None or not hashes:
            return {}
        rows = self._all(f"SELECT DISTINCT ON (input_hash) input_hash, embedding::real[], window_end "
                         f"FROM {{s}}.{found[0]} WHERE input_hash = ANY(%s)", (list(hashes),))
        return {h: (np.asarray(v, np.float32).tobytes(), end) for h, v, end in rows}

    def write_vectors(self, space_id: str, rows: list[tuple[str, str, bytes, int | None]]) -> None:
        """Store vectors: ``(chunk_id, input_hash, float32 bytes, window_end)`` per chunk (a
        chunk's earlier vector in the space is replaced)."""
        if not rows:
            return
        found = self._space_table(space_id)
        if found is None:
            raise StoreError(f"no embedding space {space_id!r} is registered")
        missing = [cid for cid, *_ in rows if cid not in self._fresh]
        if missing:
            for cid, rowid, doc_id, version in self._all(
                    "SELECT id, rowid, doc_id, version FROM {s}.chunks WHERE id = ANY(%s)", (missing,)):
                self._fresh[cid] = (rowid, doc_id, version)
        known = [(self._fresh[cid], h, blob, end) for cid, h, blob, end in rows if cid in self._fresh]
        table = found[0]
        # a chunk stored before this transaction may have a vector already; this transaction's
        # own chunks have none but the buffered one, replaced below
        flushed = self._tx_vectors.get(table, [0, 0, set()])[2]
        older = [rowid for (rowid, _, _), *_ in known
                 if rowid < (self._tx_first_rowid or rowid + 1) or rowid in flushed]
        if older:
            self._write(f"DELETE FROM {{s}}.{table} WHERE chunk_rowid = ANY(%s)", (older,))
        self._changed = True
        pending = self._pending_vectors.setdefault(table, {})
        for (rowid, doc_id, version), h, blob, end in known:
            pending[rowid] = (rowid, doc_id, version, h, blob, end)
            self._pending_keys.add((doc_id, version))
        if len(pending) >= self.flush_rows:
            self._flush_vectors(table)

    def chunks_without_vectors(self, space_id: str) -> list[Chunk]:
        if self._writing():
            self._flush()
        found = self._space_table(space_id)
        if found is None:
            return [c for c in self.chunks_in_order() if c.duplicate_of is None]
        return [self._chunk_row(r) for r in self._all(
            f"SELECT {_CHUNK_COLUMNS} FROM {{s}}.chunks c WHERE c.duplicate_of IS NULL AND NOT EXISTS ("
            f"SELECT 1 FROM {{s}}.{found[0]} v WHERE v.chunk_rowid = c.rowid AND v.doc_id = c.doc_id) "
            "ORDER BY c.rowid")]

    def chunks_in_order(self) -> list[Chunk]:
        """Every chunk, in the order it was stored."""
        return [self._chunk_row(r) for r in self._all(f"SELECT {_CHUNK_COLUMNS} FROM {{s}}.chunks c "
                                                      "ORDER BY c.rowid")]

    def vector_table(self, space_id: str) -> tuple[list[str], list[tuple[str, str]], list[bytes], list[int | None]]:
        """Every searchable vector of a space: chunk ids, (doc_id, version), vector bytes and
        window ends, in chunk order. Duplicate chunks are left out."""
        if self._writing():
            self._flush()
        ids, docs, blobs, ends = [], [], [], []
        found = self._space_table(space_id)
        if found is None:
            return ids, docs, blobs, ends
        for cid, doc_id, version, vector, end in self._all(
                f"SELECT c.id, c.doc_id, c.version, v.embedding::real[], v.window_end FROM {{s}}.{found[0]} v "
                "JOIN {s}.chunks c ON c.rowid = v.chunk_rowid AND c.doc_id = v.doc_id "
                "WHERE c.duplicate_of IS NULL ORDER BY c.rowid"):
            ids.append(cid)
            docs.append((doc_id, version))
            blobs.append(np.asarray(vector, np.float32).tobytes())
            ends.append(end)
        return ids, docs, blobs, ends

    def vector_search(self, space_id: str, vector: np.ndarray, groups: tuple[str, ...], k: int, *,
                      exact: bool = True, versions: VersionFilter | None = None) -> list[tuple[Chunk, float]]:
        """:meth:`_vector_search` among the versions the filter allows (every version when None)."""
        return self._with_versions(lambda n: self._vector_search(space_id, vector, groups, n, exact=exact),
                                   k, versions)

    def _vector_search(self, space_id: str, vector: np.ndarray, groups: tuple[str, ...], k: int, *,
                       exact: bool = True) -> list[tuple[Chunk, float]]:
        """The ``k`` readable chunks whose vectors have the highest dot product with ``vector``,
        best first, ties to the older row.

        Args:
            space_id: the embedding space.
            vector: the query's vector in that space.
            groups: the principal's access groups (filtered inside the search).
            k: how many.
            exact: compare with every readable vector (as the embedded store does); False: walk
                the HNSW index (pgvector's iterative scan, so filtering never starves the list).
        """
        found = self._space_table(space_id)
        if found is None or not groups or k <= 0:
            return []
        query = _vector_text(np.ascontiguousarray(vector, dtype=np.float32).tobytes())
        # inner_product() is no index operator, so ordering by it compares every row; "<#>" (the
        # negative inner product) is what the HNSW index serves
        # (one key only: a second one would keep the planner from the index's order)
        order = "score DESC, rowid" if exact else "v.embedding <#> %(q)s::vector"
        # a few more than k, re-scored below as the embedded store scores (numpy, float32): the
        # server sums a dot product in another order, so two near-equal scores can swap
        deeper = k + max(16, k // 4)
        if self._writing():
            self._flush()
        select = "SELECT v.chunk_rowid AS rowid, inner_product(v.embedding, %(q)s::vector) AS score, v.embedding::real[] "
        if exact:
            select += ("FROM VEC v JOIN ACL a ON a.doc_id = v.doc_id AND a.version = v.version "
                       "WHERE a.groups && %(groups)s::text[]")
        else:
            # the access check as a scalar subquery, which the planner cannot turn into a join: so
            # the plan is the index's ordered scan, filtered row by row (pgvector's iterative scan
            # goes on until the limit is met); as a join, the planner sorted every vector
            select += ("FROM VEC v WHERE (SELECT a.groups FROM ACL a WHERE a.doc_id = v.doc_id AND "
                       "a.version = v.version) && %(groups)s::text[]")
        rows = self._top(select, order, deeper, {"q": query, "groups": list(groups)}, table=found[0],
                         no_sort=not exact)
        if not rows:
            return []
        rows.sort()
        rowids = [r[0] for r in rows]
        matrix = np.asarray([r[2] for r in rows], dtype=np.float32)
        scores = matrix @ np.asarray(vector, dtype=np.float32)
        ranked = sorted(range(len(rowids)), key=lambda i: (-scores[i], rowids[i]))[:k]
        chunks = self._chunks_by_rowid([rowids[i] for i in ranked])
        return [(chunks[rowids[i]], float(scores[i])) for i in ranked if rowids[i] in chunks]

    def window_end(self, space_id: str, chunk_id: str) -> int | None:
        """How many characters of a chunk the encoder of a space read (None: all of it)."""
        if self._writing():
            self._flush()
        found = self._space_table(space_id)
        if found is None:
            return None
        row = self._one(f"SELECT v.window_end FROM {{s}}.{found[0]} v JOIN {{s}}.chunks c ON "
                        "c.rowid = v.chunk_rowid AND c.doc_id = v.doc_id WHERE c.id = %s", (chunk_id,))
        return row[0] if row else None

    # -- checks ---------------------------------------------------------------------------
    def fts_problems(self) -> list[str]:
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

    def audit(self) -> tuple[list[str], list[str]]:
        """Audit the live index (``ragdx index verify --live``): problems, then notes, as
        :meth:`ragdx.store.sqlite.SQLiteStore.audit` gives them.

        Problems: documents deleted but still stored or searchable (a version, a chunk, a
        vector), chunks without a document version, vectors without a chunk, and the BM25
        statistics recounted (:meth:`fts_problems`). Notes: superseded and expired versions still
        indexed, and vectors of spaces that are not live. A PostgreSQL store keeps no index
        versions beside the live one (docs/postgres.md)."""
        problems: list[str] = []
        for doc_id, in self._all("SELECT doc_id FROM {s}.tombstones ORDER BY doc_id"):
            stored = self._one("SELECT count(*) FROM {s}.documents WHERE doc_id = %s", (doc_id,))[0]
            chunks = self._one("SELECT count(*) FROM {s}.chunks WHERE doc_id = %s", (doc_id,))[0]
            if stored or chunks:
                problems.append(f"deleted document {doc_id} is still reachable: {stored} versions, {chunks} chunks")
        orphans = self._one("SELECT count(*), min(c.id) FROM {s}.chunks c WHERE NOT EXISTS (SELECT 1 FROM "
                            "{s}.documents d WHERE d.doc_id = c.doc_id AND d.version = c.version)")
        if orphans[0]:
            problems.append(f"{orphans[0]} chunks without a document version (first: {orphans[1]})")
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
        notes = [f"{n} {status} versions still indexed ({c} chunks): searchable only by a question naming "
                 "their version" for status, n, c in self._all(
                     "SELECT d.status, count(DISTINCT (d.doc_id, d.version)), count(c.id) FROM {s}.documents d "
                     "LEFT JOIN {s}.chunks c ON c.doc_id = d.doc_id AND c.version = d.version "
                     "WHERE d.status <> 'current' GROUP BY d.status ORDER BY d.status")] + notes
        return problems, notes

    def verify(self) -> list[str]:
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


def _server_conninfo(conn: Any, server: str, where: str) -> str:
    """How to reach a shard, from its foreign server and user mapping on the coordinator."""
    from psycopg.conninfo import make_conninfo
    row = conn.execute("SELECT s.srvoptions, u.umoptions FROM pg_foreign_server s LEFT JOIN "
                       "pg_user_mappings u ON u.srvid = s.oid AND u.usename = current_user "
                       "WHERE s.srvname = %s", (server,)).fetchone()
    if row is None:
        raise StoreError(f"{where}: the shard server {server!r} recorded in the store is "
                         "not defined on the coordinator")
    options = dict(o.split("=", 1) for o in (row[0] or []) + (row[1] or []))
    keep = {k: v for k, v in options.items() if k in ("host", "port", "dbname", "user", "password")}
    return make_conninfo("", **keep)


def _reason(exc: Exception) -> str:
    """A connection error's first line, without libpq's "connection failed:" preamble."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return (lines[0] if lines else type(exc).__name__).removeprefix("connection failed: ")


def _options(options: dict[str, str]) -> str:
    """An OPTIONS list of quoted literals (DDL takes no parameters)."""
    return ", ".join(f"{key} '{str(value).replace(chr(39), chr(39) * 2)}'" for key, value in options.items())


def setup_shards(dsn: str, shards: Sequence[str], *, parts_per_shard: int = 2) -> PostgresStore:
    """Create a sharded store: the coordinator at ``dsn`` records each shard as a
    ``postgres_fdw`` server (``extensions 'vector'``, so pgvector's operators run on the shard)
    and spreads ``parts_per_shard`` hash parts per shard over them, round robin.

    Args:
        dsn: the coordinator's DSN (its schema must not hold a store yet).
        shards: each shard server's DSN (the same user must be able to log in on each).
        parts_per_shard: hash parts per shard (more parts spread better when a shard is added).

    Returns:
        The store, open for writing.

    Raises:
        StoreError: a server is unreachable or lacks pgvector, or the schema already holds a store.
    """
    psycopg = _psycopg()
    from psycopg.conninfo import conninfo_to_dict
    if not shards:
        raise InputError("a sharded store needs at least one shard DSN", field="shards")
    schema = _schema_of(dsn)
    probe = PostgresStore.__new__(PostgresStore)
    probe.dsn, probe.where, probe.schema, probe.mode = dsn, _redact(dsn), schema, OpenMode.CREATE
    try:
        coordinator = psycopg.connect(dsn, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        raise StoreError(f"{_redact(dsn)}: cannot connect to PostgreSQL: {_reason(exc)}") from None
    with coordinator:
        if coordinator.execute("SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND "
                               "table_name = 'meta'", (schema,)).fetchone():
            raise StoreError(f"{_redact(dsn)}: the schema {schema!r} already holds a store; shards are "
                             "set up when a store is created")
        coordinator.execute("CREATE EXTENSION IF NOT EXISTS postgres_fdw SCHEMA public")
        parts: dict[int, str] = {}
        servers = []
        for i, shard in enumerate(shards):
            info = conninfo_to_dict(shard)
            where = _redact(shard)
            try:
                with psycopg.connect(shard, autocommit=True, connect_timeout=5) as conn:
                    probe.where = where
                    PostgresStore._require_vector(probe, conn)
                    conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
                    conn.execute(f"CREATE SCHEMA {schema}")
                    dbname = conn.info.dbname
                    conn.execute(f"ALTER DATABASE {dbname} SET hnsw.iterative_scan = 'strict_order'")
                    conn.execute(f"ALTER DATABASE {dbname} SET hnsw.ef_search = 200")
            except psycopg.OperationalError as exc:
                raise StoreError(f"{where}: cannot connect to the shard: {_reason(exc)}") from None
            server = f"ragdx_{schema}_shard{i + 1}"
            options = {"host": info.get("host") or "127.0.0.1", "port": str(info.get("port") or 5432),
                       "dbname": info.get("dbname") or "postgres"}
            coordinator.execute(f"DROP SERVER IF EXISTS {server} CASCADE")
            # fdw_tuple_cost 0.2: PostgreSQL 17's default (0.01 before), so the planner ships ORDER BY and
            # LIMIT to the shard rather than fetch every row of a part to sort it here
            options.update(extensions="vector", fetch_size="200", batch_size="200", fdw_tuple_cost="0.2")
            coordinator.execute(f"CREATE SERVER {server} FOREIGN DATA WRAPPER postgres_fdw "
                                f"OPTIONS ({_options(options)})")
            mapping = {"user": info.get("user") or coordinator.info.user}
            if info.get("password"):
                mapping["password"] = info["password"]
            coordinator.execute(f"CREATE USER MAPPING FOR CURRENT_USER SERVER {server} "
                                f"OPTIONS ({_options(mapping)})")
            servers.append((server, shard))
        for part in range(len(shards) * parts_per_shard):
            parts[part] = servers[part % len(servers)][0]
        for server, shard in servers:
            with psycopg.connect(shard, autocommit=True, connect_timeout=5) as conn, conn.transaction():
                for part in (p for p, s in parts.items() if s == server):
                    for statement in local_part_ddl(schema, part):
                        conn.execute(statement)
        probe._create(coordinator, parts)
    return PostgresStore(dsn, OpenMode.WRITE)


def drop_store(dsn: str) -> None:
    """Remove a store: its schema on the coordinator and on every shard, and its shard servers.
    Reads only the ``partitions`` table, so a store of an older schema version can be dropped.

    Raises:
        StoreError: the server is unreachable, or its schema holds no ragdx store.
    """
    psycopg = _psycopg()
    schema, where = _schema_of(dsn), _redact(dsn)
    try:
        coordinator = psycopg.connect(dsn, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        raise StoreError(f"{where}: cannot connect to PostgreSQL: {_reason(exc)}") from None
    with coordinator as conn:
        if not conn.execute("SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND "
                            "table_name = 'partitions'", (schema,)).fetchone():
            raise StoreError(f"{where}: no ragdx store in the schema {schema!r}")
        servers = [r[0] for r in conn.execute(f"SELECT DISTINCT server FROM {schema}.partitions "
                                              "WHERE server IS NOT NULL ORDER BY 1")]
        shards = [_server_conninfo(conn, server, where) for server in servers]
        for conninfo in shards:
            with psycopg.connect(conninfo, autocommit=True, connect_timeout=5) as shard:
                shard.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        for server in servers:
            conn.execute(f"DROP SERVER IF EXISTS {server} CASCADE")

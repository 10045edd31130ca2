"""The store on PostgreSQL with pgvector (extra ``pg``): the same :class:`~ragdx.protocols.Store`
as :class:`~ragdx.store.sqlite.SQLiteStore`, on one server or sharded across several.

Layout (docs/postgres.md). Everything lives in one schema (``ragdx`` unless the DSN's
``options=-csearch_path=NAME`` names another):

- coordinator tables: ``meta`` (schema and index versions), ``configs``, ``log``, ``tombstones``,
  ``spaces`` (one row per embedding space) and ``partitions`` (which server holds each part);
- per-document tables, hash-partitioned by ``doc_id`` when sharded: ``documents`` (one row per
  version, with its status), ``acl`` (one row per version: its groups, an array), ``sections``,
  ``chunks`` (with a ``tsvector`` of the chunk's FTS5 tokens under a GIN index, and the tokens'
  frequencies per column) and one ``vec_<n>`` table per embedding space (a ``vector(dim)``
  column under an HNSW index);
- per-part BM25 statistics, kept exact by triggers in the same transaction as the chunk rows:
  ``term_df`` (rows holding each term), ``term_delta`` (the transaction's changes to it, folded
  in before commit) and ``corpus`` (rows and tokens).

Access groups and statuses are never stored on chunk or vector rows: an access change rewrites
one ``acl`` row, and no HNSW-indexed row is touched (re-inserting a vector into the graph is what
makes in-place ACL updates slow). Retrieval joins ``acl`` at query time.

The keyword channel ranks by FTS5's own BM25 (Robertson & Zaragoza, "The Probabilistic
Relevance Framework: BM25 and Beyond", 2009, in FTS5's variant: ``fts5Bm25Function``): the same
tokens (:mod:`ragdx.store.tokens`), k1 = 1.2, b = 0.75, column weights on term frequencies, the
row length over both columns, and N, avgdl and document frequencies over every row, computed in
SQL from the statistics tables; the GIN index finds the rows holding any term. PostgreSQL's own
``ts_rank`` is not used: it is no BM25.

Sharded, the coordinator's per-document tables are partitioned by hash of ``doc_id`` into parts
that are ``postgres_fdw`` foreign tables on the shard servers (created with ``extensions
'vector'``, so pgvector's operators are shipped): a search is one SQL query whose plan runs a
sorted scan on every part remotely and merges them (partitionwise join with ``acl``). Writes go
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

SCHEMA_VERSION = 2  # 2: term deltas folded into term_df once per transaction
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
                "CREATE INDEX ON {s}.{t} (doc_id, version, ord)",
                "CREATE INDEX ON {s}.{t} USING gin (terms)")),
}
# per-part statistics tables
_STAT_TABLES = {
    "term_df": ("part int NOT NULL, term text NOT NULL, df bigint NOT NULL",
                ("ALTER TABLE {s}.{t} ADD PRIMARY KEY (term)",)),
    "term_delta": ("part int NOT NULL, term text NOT NULL, df bigint NOT NULL", ()),
    "corpus": ("part int NOT NULL, n_rows bigint NOT NULL, n_tokens bigint NOT NULL, folds bigint NOT NULL",
               ()),
}
_VEC_COLUMNS = ("chunk_rowid bigint NOT NULL, doc_id text NOT NULL, version text NOT NULL, "
                "input_hash text NOT NULL, embedding vector({dim}) NOT NULL, window_end int")
_VEC_INDEXES = ("ALTER TABLE {s}.{t} ADD PRIMARY KEY (chunk_rowid)",
                "CREATE INDEX ON {s}.{t} (input_hash)",
                "CREATE INDEX ON {s}.{t} USING hnsw (embedding vector_ip_ops)")

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


def _tsquery(tokens: Sequence[str]) -> str:
    """An OR of the tokens as quoted tsquery lexemes (no token can carry tsquery syntax)."""
    return " | ".join("'" + _lexeme(t).replace("\\", "\\\\").replace("'", "''") + "'"
                      for t in dict.fromkeys(tokens))


def chunk_terms(chunk: Chunk) -> tuple[list[str], dict[str, list[int]], int]:
    """A chunk's distinct lexemes, its term frequencies ``term -> [in prefix, in text]`` and its
    length in tokens over both columns (what FTS5 indexes for the chunk)."""
    prefix, text = fts5_tokens(chunk.prefix), fts5_tokens(chunk.text)
    tf: dict[str, list[int]] = {}
    for column, tokens in enumerate((prefix, text)):
        for token, n in Counter(tokens).items():
            tf.setdefault(token, [0, 0])[column] = n
    return sorted({_lexeme(t) for t in tf}), tf, len(prefix) + len(text)


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

    Raises:
        StoreError: the server is unreachable or refuses the login; pgvector is not installed
            on it; the schema is missing (modes ``read``, ``write``), not a ragdx store, or newer.
        MissingExtraError: psycopg is not installed (extra ``pg``).
    """

    def __init__(self, dsn: str, mode: OpenMode | str = OpenMode.CREATE, *, wait: float = 30.0,
                 connect_timeout: float = 5.0, statement_timeout: float = 120.0,
                 pool_size: int = 4) -> None:
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
        conn.execute("SET hnsw.ef_search = 200")
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
                             f"({SCHEMA_VERSION}: BM25 term statistics kept as deltas); re-create it "
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
                self._pool.putconn(conn)
            if committed:
                self._analyze()

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
        self._write(
            "INSERT INTO {s}.documents VALUES (%s,%s,nextval('{s}.doc_seq'),%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
            (document.doc_id, document.version, document.content_hash, document.path, document.title,
             document.format, document.status.value, document.updated_at,
             json.dumps(dict(document.metadata), sort_keys=True), parsed.parser,
             json.dumps(list(parsed.warnings)), chunker_config, raw_text, parsed.text, _now()))
        self._write_acl(document)
        self._write_chunks(document, sections, chunks, chunker_config)
        self._write("DELETE FROM {s}.tombstones WHERE doc_id = %s", (document.doc_id,))
        self.log("add", document.doc_id, document.version,
                 f"{len(chunks)} chunks, status {document.status.value}, acl {list(document.acl)}")

    def _write_acl(self, document: Document) -> None:
        self._write("DELETE FROM {s}.acl WHERE doc_id = %s AND version = %s",
                    (document.doc_id, document.version))
        self._write("INSERT INTO {s}.acl VALUES (%s, %s, %s)",
                    (document.doc_id, document.version, sorted(set(document.acl))))

    def _vec_tables(self) -> list[str]:
        return [vec_table(n) for (n,) in self._all("SELECT n FROM {s}.spaces ORDER BY n")]

    def _write_chunks(self, document: Document, sections: tuple[Section, ...],
                      chunks: tuple[Chunk, ...], chunker_config: str) -> None:
        key = (document.doc_id, document.version)
        for table in self._vec_tables():
            self._write(f"DELETE FROM {{s}}.{table} WHERE doc_id = %s AND version = %s", key)
        self._write("DELETE FROM {s}.chunks WHERE doc_id = %s AND version = %s", key)
        self._write("DELETE FROM {s}.sections WHERE doc_id = %s AND version = %s", key)
        self._insert("sections", _SECTION_TYPES, [
            {"id": s.id, "doc_id": s.doc_id, "version": s.version, "start_at": s.start, "end_at": s.end,
             "heading_path": json.dumps(list(s.heading_path)), "level": s.level, "parent_id": s.parent_id}
            for s in sections])
        if not chunks:
            return
        first = self._tx.execute(f"SELECT nextval('{self.schema}.chunk_rowid')").fetchone()[0]
        self._tx.execute(f"SELECT setval('{self.schema}.chunk_rowid', %s)", (first + len(chunks) - 1,))
        rows = []
        for i, c in enumerate(chunks):
            lexemes, tf, length = chunk_terms(c)
            rows.append({"rowid": first + i, "id": c.id, "doc_id": c.doc_id, "version": c.version, "ord": i,
                         "start_at": c.start, "end_at": c.end, "text": c.text, "kind": c.kind.value,
                         "heading_path": json.dumps(list(c.heading_path)), "section_id": c.section_id,
                         "prefix": c.prefix, "header_start": c.header[0] if c.header else None,
                         "header_end": c.header[1] if c.header else None, "token_count": c.token_count,
                         "prev_id": c.prev_id, "next_id": c.next_id, "duplicate_of": c.duplicate_of,
                         "over_limit": c.over_limit, "config_id": c.config_id, "lexemes": lexemes,
                         "tf": tf, "length": length})
            self._fresh[c.id] = (first + i, c.doc_id, c.version)
        self._insert("chunks", _CHUNK_TYPES, rows, _CHUNK_SELECT)
        self._write("INSERT INTO {s}.configs VALUES (%s, 'chunker', %s) ON CONFLICT (id) DO NOTHING",
                    (chunks[0].config_id, chunker_config))

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
                    (_now(), self.index_version + 1, op, doc_id, version, detail))

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
        rows = self._all(f"SELECT {_CHUNK_COLUMNS}, c.rowid FROM {{s}}.chunks c WHERE c.rowid = ANY(%s)",
                         (list(rowids),))
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
        n_rows, n_tokens = self._one("SELECT coalesce(sum(n_rows), 0), coalesce(sum(n_tokens), 0) "
                                     "FROM {s}.corpus")
        # every commit leaves term_delta empty: only the writing transaction has deltas to add
        writing = self._tx is not None and self._tx_thread == threading.get_ident()
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
            status = {(d, v): s for d, v, s in self._all(
                "SELECT doc_id, version, status FROM {s}.documents WHERE doc_id = ANY(%s)", (docs,))} if docs else {}
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

        Args:
            terms: the query's terms (OR).
            groups: the principal's access groups.
            limit: how many to return.
            weights: the prefix's and the text's weights on term frequencies.
        """
        phrases = [token for term in terms for token in fts5_tokens(term)]
        if not phrases or not groups or limit <= 0:
            return []
        n_rows, n_tokens, df = self.bm25_statistics(phrases)
        if not n_rows or not any(df.get(t) for t in phrases):
            return []
        avgdl = n_tokens / n_rows
        args: dict[str, Any] = {"k1": FTS_BM25_K1, "k1p1": FTS_BM25_K1 + 1.0, "b": FTS_BM25_B,
                                "avgdl": avgdl, "wp": float(weights[0]), "wt": float(weights[1]),
                                "q": _tsquery(phrases), "groups": list(groups)}
        parts = []
        for i, token in enumerate(phrases):
            n = df.get(token, 0)
            args[f"t{i}"], args[f"idf{i}"] = token, fts5_idf(n_rows, n)
            freq = (f"(coalesce((c.tf -> %(t{i})s ->> 0)::float8, 0) * %(wp)s::float8 + "
                    f"coalesce((c.tf -> %(t{i})s ->> 1)::float8, 0) * %(wt)s::float8)")
            # fts5Bm25Function's very expression, in its order of evaluation
            parts.append(f"%(idf{i})s::float8 * (({freq} * %(k1p1)s::float8) / ({freq} + %(k1)s::float8 * "
                         f"(1.0::float8 - %(b)s::float8 + %(b)s::float8 * c.length::float8 / %(avgdl)s::float8)))")
        score = "0.0::float8 + " + " + ".join(parts)
        rows = self._all(self._top(
            f"SELECT c.rowid AS rowid, {score} AS score FROM CHUNKS c JOIN ACL a ON "
            "a.doc_id = c.doc_id AND a.version = c.version WHERE c.terms @@ %(q)s::tsquery AND "
            "c.duplicate_of IS NULL AND a.groups && %(groups)s::text[]", "score DESC, rowid", limit), args)
        chunks = self._chunks_by_rowid([r[0] for r in rows])
        return [(chunks[rowid], float(score)) for rowid, score in rows]

    def _top(self, select: str, order: str, limit: int, *, table: str = "") -> str:
        """A top-``limit`` query over every part: ``select`` names its tables ``CHUNKS``,
        ``ACL`` and ``VEC`` (the space's ``table``) and yields ``rowid`` and ``score``.

        Sharded, it becomes one subquery per part, each a join of that part's foreign tables
        that postgres_fdw ships to the part's server whole, filter, ``ORDER BY`` and ``LIMIT``
        included; the coordinator merges the parts' top lists. Each part's list is its exact top
        by (score, rowid), so the merge is the exact top of the whole table."""
        def on(sfx: str) -> str:
            return (select.replace("CHUNKS", f"{{s}}.chunks{sfx}").replace("ACL", f"{{s}}.acl{sfx}")
                    .replace("VEC", f"{{s}}.{table}{sfx}"))
        if list(self._parts.values()) == [None]:
            return f"{on('')} ORDER BY {order} LIMIT {int(limit)}"
        # a literal LIMIT: postgres_fdw ships it to the shard (a top-k sort there), a parameter not
        subqueries = [f"({on(f'_p{part}')} ORDER BY {order} LIMIT {int(limit)})" for part in self._parts]
        return (f"SELECT rowid, score FROM ({' UNION ALL '.join(subqueries)}) u "
                f"ORDER BY score DESC, rowid LIMIT {int(limit)}")

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
        self._write(f"DELETE FROM {{s}}.{table} WHERE chunk_rowid = ANY(%s)", ([k[0][0] for k in known],))
        self._insert(table, "chunk_rowid bigint, doc_id text, version text, input_hash text, embedding text, "
                     "window_end int", [{"chunk_rowid": rowid, "doc_id": doc_id, "version": version,
                                         "input_hash": h, "embedding": _vector_text(blob), "window_end": end}
                                        for (rowid, doc_id, version), h, blob, end in known],
                     "chunk_rowid, doc_id, version, input_hash, embedding::vector, window_end")

    def chunks_without_vectors(self, space_id: str) -> list[Chunk]:
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
        order = "score DESC, rowid" if exact else "v.embedding <#> %(q)s::vector, rowid"
        # a few more than k, re-scored below as the embedded store scores (numpy, float32): the
        # server sums a dot product in another order, so two near-equal scores can swap
        deeper = k + max(16, k // 4)
        rows = self._all(self._top(
            "SELECT v.chunk_rowid AS rowid, inner_product(v.embedding, %(q)s::vector) AS score "
            "FROM VEC v JOIN ACL a ON a.doc_id = v.doc_id AND a.version = v.version "
            "WHERE a.groups && %(groups)s::text[]", order, deeper, table=found[0]),
            {"q": query, "groups": list(groups)})
        if not rows:
            return []
        rowids = sorted(r[0] for r in rows)
        matrix = np.asarray([v for (v,) in self._all(
            f"SELECT embedding::real[] FROM {{s}}.{found[0]} WHERE chunk_rowid = ANY(%s) ORDER BY chunk_rowid",
            (rowids,))], dtype=np.float32)
        scores = matrix @ np.asarray(vector, dtype=np.float32)
        ranked = sorted(range(len(rowids)), key=lambda i: (-scores[i], rowids[i]))[:k]
        chunks = self._chunks_by_rowid([rowids[i] for i in ranked])
        return [(chunks[rowids[i]], float(scores[i])) for i in ranked if rowids[i] in chunks]

    def window_end(self, space_id: str, chunk_id: str) -> int | None:
        """How many characters of a chunk the encoder of a space read (None: all of it)."""
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

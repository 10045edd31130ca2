"""Embedding spaces and their vectors in the stores: which spaces are registered and in what
state, each chunk's vector in a space (keyed by its input's hash, so unchanged text is never
encoded twice), each chunk's statement vectors (the sentence reranker and the
extractive generator read them instead of encoding; a PostgreSQL store has none, and they
encode), and the dense search.

SQLite keeps every space's vectors in one ``vectors`` table (float32 bytes), searched in numpy
(:mod:`ragdx.store.vectors`). PostgreSQL keeps one ``vec_<n>`` table per space (pgvector's
``vector(dim)``, under an HNSW index built after the first load), buffers a transaction's vectors
and writes them by ``COPY`` (:func:`_pg_flush_vectors`), and searches in SQL with the access
check inside the search (:func:`_pg_vector_search`).
"""

from __future__ import annotations

import json
import logging
import math
import time
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import numpy as np

from ragdx.errors import StoreError
from ragdx.store import documents
from ragdx.store._common import decoding, now
from ragdx.store.schema import sharded_table_ddl
from ragdx.types import Chunk, EmbeddingSpace, SpaceState, VectorBatch, VersionFilter

if TYPE_CHECKING:
    from ragdx.store.postgres import PostgresStore
    from ragdx.store.sqlite import SQLiteStore

log = logging.getLogger("ragdx.store")


_VEC_COLUMNS = ("chunk_rowid bigint NOT NULL, doc_id text NOT NULL, version text NOT NULL, "
                "input_hash text NOT NULL, embedding vector({dim}) NOT NULL, window_end int")
# the HNSW index is built after the first load, not row by row (PostgresStore._build_hnsw)
_VEC_INDEXES = ("ALTER TABLE {s}.{t} ADD PRIMARY KEY (chunk_rowid)",
                "CREATE INDEX ON {s}.{t} (input_hash)")


def vec_table(n: int) -> str:
    return f"vec_{n}"


def _vec_ddl(schema: str, table: str, dim: int) -> list[str]:
    return [f"CREATE TABLE {schema}.{table} ({_VEC_COLUMNS.format(dim=dim)})",
            *[ddl.format(s=schema, t=table) for ddl in _VEC_INDEXES]]


def _vector_text(blob: bytes) -> str:
    return "[" + ",".join(map(repr, np.frombuffer(blob, np.float32).tolist())) + "]"


def _vector_binary(blob: bytes) -> bytes:
    """A float32 vector in pgvector's binary form (``vector_recv``: the dimension and a zero as
    big-endian int16, then the floats big-endian): what a binary ``COPY`` hands the column,
    bit for bit, with no decimal text to print and parse (a third of the time a vector took to
    store as text)."""
    values = np.frombuffer(blob, np.float32)
    return values.size.to_bytes(2, "big") + b"\0\0" + values.astype(">f4").tobytes()


def sqlite_register_space(self: SQLiteStore, space: EmbeddingSpace, backend: str) -> None:
    """Record an embedding space (state ``building``) if it is new."""
    if self._db.execute("SELECT 1 FROM spaces WHERE id = ?", (space.id,)).fetchone():
        return
    body = json.dumps({k: getattr(space, k) for k in space.__slots__}, sort_keys=True)
    self._write("INSERT INTO spaces VALUES (?,?,?,'building',?,?)",
                (space.id, body, backend, now(), now()))
    self.log("space", None, None, f"registered {space.id} ({space.model_id}, {backend})")


def pg_register_space(self: PostgresStore, space: EmbeddingSpace, backend: str) -> None:
    """Record an embedding space (state ``building``) if it is new, with its vector table."""
    if self._one("SELECT 1 FROM {s}.spaces WHERE id = %s", (space.id,)):
        return
    if self._tx is None:
        raise StoreError("store writes must happen inside store.transaction()")
    body = json.dumps({k: getattr(space, k) for k in space.__slots__}, sort_keys=True)
    n = self._tx.execute(f"INSERT INTO {self.schema}.spaces (id, dim, body, backend, state, created_at, "
                         "updated_at) VALUES (%s, %s, %s, %s, 'building', %s, %s) RETURNING n",
                         (space.id, space.dim, body, backend, now(), now())).fetchone()[0]
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


@decoding("spaces")
def sqlite_spaces(self: SQLiteStore) -> list[tuple[EmbeddingSpace, str, SpaceState, int]]:
    """Every registered space: the space, its backend, its state and its vector count."""
    out = []
    for sid, body, backend, state in self._db.execute(
            "SELECT id, body, backend, state FROM spaces ORDER BY created_at, id"):
        count = self._db.execute("SELECT COUNT(*) FROM vectors WHERE space_id = ?",
                                 (sid,)).fetchone()[0]
        out.append((EmbeddingSpace(**json.loads(body)), backend, SpaceState(state), count))
    return out


@decoding("spaces")
def pg_spaces(self: PostgresStore) -> list[tuple[EmbeddingSpace, str, SpaceState, int]]:
    """Every registered space: the space, its backend, its state and its vector count."""
    if self._writing():
        self._flush()
    out = []
    for n, body, backend, state in self._all("SELECT n, body, backend, state FROM {s}.spaces "
                                              "ORDER BY created_at, id"):
        count = self._one(f"SELECT count(*) FROM {{s}}.{vec_table(n)}")[0]
        out.append((EmbeddingSpace(**json.loads(body)), backend, SpaceState(state), count))
    return out


def sqlite_space_state(self: SQLiteStore, space_id: str) -> SpaceState | None:
    row = self._db.execute("SELECT state FROM spaces WHERE id = ?", (space_id,)).fetchone()
    return SpaceState(row[0]) if row else None


def pg_space_state(self: PostgresStore, space_id: str) -> SpaceState | None:
    row = self._one("SELECT state FROM {s}.spaces WHERE id = %s", (space_id,))
    return SpaceState(row[0]) if row else None


def sqlite_set_space_state(self: SQLiteStore, space_id: str, state: SpaceState, reason: str) -> None:
    self._write("UPDATE spaces SET state = ?, updated_at = ? WHERE id = ?",
                (state, now(), space_id))
    self.log("space", None, None, f"{space_id} -> {state}: {reason}")


def pg_set_space_state(self: PostgresStore, space_id: str, state: SpaceState, reason: str) -> None:
    state = SpaceState.parse(state, what="space state")
    self._write("UPDATE {s}.spaces SET state = %s, updated_at = %s WHERE id = %s",
                (state.value, now(), space_id))
    self.log("space", None, None, f"{space_id} -> {state}: {reason}")


@decoding("spaces")
def sqlite_active_space(self: SQLiteStore) -> EmbeddingSpace | None:
    """The space the dense channel searches, if any."""
    row = self._db.execute("SELECT body FROM spaces WHERE state = 'active'").fetchone()
    return EmbeddingSpace(**json.loads(row[0])) if row else None


@decoding("spaces")
def pg_active_space(self: PostgresStore) -> EmbeddingSpace | None:
    """The space the dense channel searches, if any."""
    row = self._one("SELECT body FROM {s}.spaces WHERE state = 'active'")
    return EmbeddingSpace(**json.loads(row[0])) if row else None


def sqlite_vectors_by_input(self: SQLiteStore, space_id: str, hashes: list[str]) -> dict[str, tuple[bytes, int | None]]:
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


def pg_vectors_by_input(self: PostgresStore, space_id: str, hashes: list[str]) -> dict[str, tuple[bytes, int | None]]:
    """Stored vectors of this space whose input text has these hashes (to skip re-encoding)."""
    if self._writing():
        self._flush()
    found = self._space_table(space_id)
    if found is None or not hashes:
        return {}
    rows = self._all(f"SELECT DISTINCT ON (input_hash) input_hash, embedding::real[], window_end "
                     f"FROM {{s}}.{found[0]} WHERE input_hash = ANY(%s)", (list(hashes),))
    return {h: (np.asarray(v, np.float32).tobytes(), end) for h, v, end in rows}


def sqlite_write_vectors(self: SQLiteStore, space_id: str, rows: list[tuple[str, str, bytes, int | None]]) -> None:
    """Store vectors: ``(chunk_id, input_hash, float32 bytes, window_end)`` per chunk.

    ``window_end`` is how many characters of the chunk's text the encoder read before its
    window was full, or ``None`` when it read all of it.
    """
    if rows:
        self._changed = True
    self._db.executemany(
        "INSERT OR REPLACE INTO vectors SELECT rowid, ?, ?, ?, ? FROM chunks WHERE id = ?",
        [(space_id, h, vector, end, cid) for cid, h, vector, end in rows])


def pg_write_vectors(self: PostgresStore, space_id: str, rows: list[tuple[str, str, bytes, int | None]]) -> None:
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


def _sqlite_chunks_without(self: SQLiteStore, table: str, space_id: str) -> list[Chunk]:
    """The searchable chunks with no row of ``table`` (``vectors``, ``statement_vectors``) in a
    space, in chunk order."""
    columns = documents.SQLITE_CHUNK_COLUMNS_C
    return [self._chunk_row(r) for r in self._db.execute(
        f"SELECT {columns} FROM chunks c WHERE c.duplicate_of IS NULL AND NOT EXISTS ("
        f"SELECT 1 FROM {table} v WHERE v.space_id = ? AND v.chunk_rowid = c.rowid) "
        "ORDER BY c.rowid", (space_id,))]


def sqlite_chunks_without_vectors(self: SQLiteStore, space_id: str) -> list[Chunk]:
    return _sqlite_chunks_without(self, "vectors", space_id)


def sqlite_write_statement_vectors(self: SQLiteStore, space_id: str, rows: Sequence[tuple[str, str, bytes]]) -> None:
    """Store each chunk's statement vectors in a space: ``(chunk_id, statements_hash, float32
    bytes)``, the bytes every statement's vector in the chunk's order (:func:`ragdx.text.statements`),
    the hash that of the statements' texts (a chunk's earlier ones in the space are replaced).
    They go with the chunk: deleted, or replaced by a re-chunk, with it. The index version
    stays: they are what a question would encode, so no result a cache holds changes."""
    self._db.executemany(
        "INSERT OR REPLACE INTO statement_vectors SELECT rowid, ?, ?, ? FROM chunks WHERE id = ?",
        [(space_id, h, blob, cid) for cid, h, blob in rows])


def sqlite_statement_vectors(self: SQLiteStore, space_id: str, chunk_ids: Sequence[str]) -> dict[str, tuple[str, bytes]]:
    """The stored statement vectors of these chunks in a space: chunk id -> (statements hash,
    float32 bytes), for the chunks that have them (none in a store of schema 2 not yet written)."""
    out: dict[str, tuple[str, bytes]] = {}
    if self._schema < 3:
        return out
    ids = list(dict.fromkeys(chunk_ids))
    for i in range(0, len(ids), 500):
        batch = ids[i:i + 500]
        # from the chunks (CROSS JOIN keeps that order): joined the other way, SQLite walked every
        # vector of the space by its (space_id, statements_hash) index, 0.5 s for 75 chunks
        for cid, h, blob in self._db.execute(
                "SELECT c.id, s.statements_hash, s.vectors FROM chunks c CROSS JOIN statement_vectors s "
                f"ON s.space_id = ? AND s.chunk_rowid = c.rowid WHERE c.id IN ({','.join('?' * len(batch))})",
                (space_id, *batch)):
            out[cid] = (h, blob)
    return out


def sqlite_statement_vectors_by_hash(self: SQLiteStore, space_id: str, hashes: Sequence[str]) -> dict[str, bytes]:
    """Stored statement vectors of a space under these statements hashes (another version's
    chunk of the same text: reused, not encoded again)."""
    out: dict[str, bytes] = {}
    for i in range(0, len(hashes), 500):
        batch = list(hashes[i:i + 500])
        for h, blob in self._db.execute(
                f"SELECT statements_hash, vectors FROM statement_vectors WHERE space_id = ? AND statements_hash "
                f"IN ({','.join('?' * len(batch))})", (space_id, *batch)):
            out[h] = blob
    return out


def sqlite_chunks_without_statement_vectors(self: SQLiteStore, space_id: str) -> list[Chunk]:
    """The searchable chunks with no statement vectors in a space, in chunk order."""
    return _sqlite_chunks_without(self, "statement_vectors", space_id)


def pg_write_statement_vectors(self: PostgresStore, space_id: str, rows: Sequence[tuple[str, str, bytes]]) -> None:
    """Store each chunk's statement vectors in a space, as :func:`sqlite_write_statement_vectors`
    does (on the chunk's shard, sharded). The index version stays."""
    if not rows:
        return
    if not self._writing():
        raise StoreError("store writes must happen inside store.transaction()")
    self._flush()  # the chunks written by this transaction, and their row ids
    missing = [cid for cid, _, _ in rows if cid not in self._fresh]
    for cid, rowid, doc_id, version in self._all(
            "SELECT id, rowid, doc_id, version FROM {s}.chunks WHERE id = ANY(%s)", (missing,)) if missing else ():
        self._fresh[cid] = (rowid, doc_id, version)
    known = [(self._fresh[cid], h, blob) for cid, h, blob in rows if cid in self._fresh]
    s = self.schema
    self._tx.execute(f"DELETE FROM {s}.statement_vectors WHERE space_id = %s AND chunk_rowid = ANY(%s)",
                     (space_id, [rowid for (rowid, _, _), _, _ in known]))
    with self._tx.cursor().copy(f"COPY {s}.statement_vectors (chunk_rowid, doc_id, version, space_id, "
                                "statements_hash, vectors) FROM STDIN") as copy:
        for (rowid, doc_id, version), h, blob in known:
            copy.write_row((rowid, doc_id, version, space_id, h, blob))


def pg_statement_vectors(self: PostgresStore, space_id: str, chunk_ids: Sequence[str]) -> dict[str, tuple[str, bytes]]:
    """The stored statement vectors of these chunks in a space: chunk id -> (statements hash,
    float32 bytes), for the chunks that have them."""
    ids = list(dict.fromkeys(chunk_ids))
    if not ids:
        return {}
    if self._writing():
        self._flush()
    return {cid: (h, bytes(blob)) for cid, h, blob in self._all(
        "SELECT c.id, v.statements_hash, v.vectors FROM {s}.chunks c JOIN {s}.statement_vectors v ON "
        "v.chunk_rowid = c.rowid AND v.doc_id = c.doc_id WHERE v.space_id = %s AND c.id = ANY(%s)", (space_id, ids))}


def pg_statement_vectors_by_hash(self: PostgresStore, space_id: str, hashes: Sequence[str]) -> dict[str, bytes]:
    """Stored statement vectors of a space under these statements hashes (another version's
    chunk of the same text: reused, not encoded again)."""
    if not hashes:
        return {}
    return {h: bytes(blob) for h, blob in self._all(
        "SELECT DISTINCT ON (statements_hash) statements_hash, vectors FROM {s}.statement_vectors "
        "WHERE space_id = %s AND statements_hash = ANY(%s)", (space_id, list(hashes)))}


def pg_chunks_without_statement_vectors(self: PostgresStore, space_id: str) -> list[Chunk]:
    """The searchable chunks with no statement vectors in a space, in chunk order."""
    if self._writing():
        self._flush()
    return [self._chunk_row(r) for r in self._all(
        f"SELECT {documents.PG_CHUNK_COLUMNS} FROM {{s}}.chunks c WHERE c.duplicate_of IS NULL AND NOT EXISTS ("
        "SELECT 1 FROM {s}.statement_vectors v WHERE v.space_id = %s AND v.chunk_rowid = c.rowid AND "
        "v.doc_id = c.doc_id) ORDER BY c.rowid", (space_id,))]


def pg_chunks_without_vectors(self: PostgresStore, space_id: str) -> list[Chunk]:
    if self._writing():
        self._flush()
    found = self._space_table(space_id)
    if found is None:
        return [c for c in self.chunks_in_order() if c.duplicate_of is None]
    return [self._chunk_row(r) for r in self._all(
        f"SELECT {documents.PG_CHUNK_COLUMNS} FROM {{s}}.chunks c WHERE c.duplicate_of IS NULL AND NOT EXISTS ("
        f"SELECT 1 FROM {{s}}.{found[0]} v WHERE v.chunk_rowid = c.rowid AND v.doc_id = c.doc_id) "
        "ORDER BY c.rowid")]


def sqlite_vector_table(self: SQLiteStore, space_id: str) -> tuple[list[str], list[tuple[str, str]], list[bytes], list[int | None]]:
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


def pg_vector_table(self: PostgresStore, space_id: str) -> tuple[list[str], list[tuple[str, str]], list[bytes], list[int | None]]:
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


def sqlite_vector_rows(self: SQLiteStore, space_id: str, doc_ids: Sequence[str] | None = None,
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


def sqlite_vector_count(self: SQLiteStore, space_id: str) -> int:
    """How many vectors a space holds (duplicates' included)."""
    return self._db.execute("SELECT COUNT(*) FROM vectors WHERE space_id = ?", (space_id,)).fetchone()[0]


def sqlite_vectors_at(self: SQLiteStore, space_id: str, rowids: Sequence[int]) -> dict[int, tuple[str, str, str, bytes]]:
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


def sqlite_window_end(self: SQLiteStore, space_id: str, chunk_id: str) -> int | None:
    """How many characters of a chunk the encoder of a space read (None: all of it)."""
    row = self._db.execute("SELECT v.window_end FROM vectors v JOIN chunks c ON "
                           "c.rowid = v.chunk_rowid WHERE v.space_id = ? AND c.id = ?",
                           (space_id, chunk_id)).fetchone()
    return row[0] if row else None


def pg_window_end(self: PostgresStore, space_id: str, chunk_id: str) -> int | None:
    """How many characters of a chunk the encoder of a space read (None: all of it)."""
    if self._writing():
        self._flush()
    found = self._space_table(space_id)
    if found is None:
        return None
    row = self._one(f"SELECT v.window_end FROM {{s}}.{found[0]} v JOIN {{s}}.chunks c ON "
                    "c.rowid = v.chunk_rowid AND c.doc_id = v.doc_id WHERE c.id = %s", (chunk_id,))
    return row[0] if row else None


def sqlite_chunk_vectors(self: SQLiteStore, space_id: str, doc_id: str, version: str | None = None) -> list[bytes]:
    """The float32 vectors of a space for one document's searchable chunks (of one version,
    or of all): what a cache asks when the document changed."""
    where, args = ("AND c.version = ?", (version,)) if version is not None else ("", ())
    return [r[0] for r in self._db.execute(
        "SELECT v.vector FROM chunks c JOIN vectors v ON v.chunk_rowid = c.rowid AND v.space_id = ? "
        f"WHERE c.doc_id = ? {where} AND c.duplicate_of IS NULL", (space_id, doc_id, *args))]


def _pg_space_table(self: PostgresStore, space_id: str) -> tuple[str, int] | None:
    """A space's vector table and dimension. Neither changes once the space is registered
    (spaces are never dropped), so each is read once per store (the transaction that
    registers one forgets it when it rolls back): not once per document or query."""
    found = self._space_tables.get(space_id)
    if found is None:
        row = self._one("SELECT n, dim FROM {s}.spaces WHERE id = %s", (space_id,))
        if row is None:
            return None
        found = self._space_tables[space_id] = (vec_table(row[0]), row[1])
    return found


def pg_vector_search(self: PostgresStore, space_id: str, vector: np.ndarray, groups: tuple[str, ...], k: int, *,
                     exact: bool = True, versions: VersionFilter | None = None) -> list[tuple[Chunk, float]]:
    """:meth:`_vector_search` among the versions the filter allows (every version when None)."""
    return self._with_versions(lambda n: self._vector_search(space_id, vector, groups, n, exact=exact),
                               k, versions)


def _pg_vector_search(self: PostgresStore, space_id: str, vector: np.ndarray, groups: tuple[str, ...], k: int, *,
                      exact: bool = True) -> list[tuple[Chunk, float, str]]:
    """The ``k`` readable chunks whose vectors have the highest dot product with ``vector``,
    best first, ties to the older row, each with its score and its version's status.

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
    # the vector itself, binary (pgvector's vector_send: read below without a list of floats)
    select = "SELECT v.chunk_rowid AS rowid, inner_product(v.embedding, %(q)s::vector) AS score, v.embedding "
    if exact:
        select += ("FROM VEC v JOIN ACL a ON a.doc_id = v.doc_id AND a.version = v.version "
                   "WHERE a.groups && %(groups)s::text[]")
    else:
        # the access check as a scalar subquery, which the planner cannot turn into a join: so
        # the plan is the index's ordered scan, filtered row by row (pgvector's iterative scan
        # goes on until the limit is met); as a join, the planner sorted every vector
        select += ("FROM VEC v WHERE (SELECT a.groups FROM ACL a WHERE a.doc_id = v.doc_id AND "
                   "a.version = v.version) && %(groups)s::text[]")
    # the search, then each hit's chunk row and status, in one statement per part: its top
    # ``deeper`` rows are found first (join, filter, ORDER BY and LIMIT, the index's order
    # kept), and only those join the chunks
    def on(sfx: str, offset: int = 0, limit: int = deeper) -> str:
        inner = (select.replace("ACL", f"{{s}}.acl{sfx}").replace("VEC", f"{{s}}.{found[0]}{sfx}")
                 + f" ORDER BY {order} LIMIT {int(limit)} OFFSET {int(offset)}")
        return (f"SELECT t.score, t.embedding, {documents.PG_HIT_COLUMNS}, {int(sfx[2:] or 0)} FROM ({inner}) t "
                f"JOIN {{s}}.chunks{sfx} c ON c.rowid = t.rowid " + documents.PG_HIT_STATUS.format(sfx=sfx))
    args = {"q": query, "groups": list(groups)}
    parts = len(self._parts)
    # sharded, each part's list is its top in the index's order, so the merge is the top of
    # the whole table. A part holds about 1/parts of the merged top: each first sends its top
    # 1.5 x deeper / parts only (each row costs the walk, the access check, the vector and the
    # chunk row: at k 100 and four parts, 47 rows instead of 125), and a part whose list was
    # cut at or above the merged top's last score sends the rest of its ``deeper`` (its walk
    # again, the same order, skipping the rows sent): so the rows are those of ``deeper`` from
    # every part, in two rounds only when one part holds much of the top; binary: the
    # vectors' floats as they are
    first = deeper if parts == 1 or self._writing() else min(deeper, math.ceil(1.5 * deeper / parts))
    rows = self._fan(lambda sfx: on(sfx, limit=first), args, no_sort=not exact, binary=True)
    rows.sort(key=lambda r: (-r[0], r[20]))
    if first < deeper:
        sent: dict[int, list[float]] = {}
        for r in rows:
            sent.setdefault(r[-1], []).append(r[0])
        cut = rows[deeper - 1][0] if len(rows) >= deeper else None
        more = sorted(p for p, scores in sent.items() if len(scores) == first and (cut is None or scores[-1] >= cut))
        if more:
            rows += self._fan(lambda sfx: on(sfx, offset=first, limit=deeper - first), args,
                              no_sort=not exact, binary=True, parts=more)
            rows.sort(key=lambda r: (-r[0], r[20]))
    rows = sorted(rows[:deeper], key=lambda r: r[20])
    if not rows:
        return []
    hits = [self._hit_row(r[2:-1]) for r in rows]
    matrix = np.stack([np.frombuffer(r[1], ">f4", offset=4) for r in rows]).astype(np.float32)
    scores = matrix @ np.asarray(vector, dtype=np.float32)
    ranked = sorted(range(len(hits)), key=lambda i: (-scores[i], hits[i][0]))[:k]
    return [(hits[i][1], float(scores[i]), hits[i][2]) for i in ranked]


def _pg_vec_tables(self: PostgresStore) -> list[str]:
    return [vec_table(n) for (n,) in self._all("SELECT n FROM {s}.spaces ORDER BY n")]


def _pg_chunk_derived(self: PostgresStore) -> list[str]:
    """The tables whose rows belong to a chunk (its vectors in each space, its statement vectors):
    deleted with it, since no foreign key across partitions deletes them (SQLite: by cascade)."""
    return [*self._vec_tables(), "statement_vectors"]


def _pg_flush_vectors(self: PostgresStore, table: str) -> None:
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
                                "window_end) FROM STDIN (FORMAT BINARY)") as copy:
        # "bytea": psycopg writes the bytes as they are, and the server reads them with the
        # column's own binary input (binary COPY names no types)
        copy.set_types(["int8", "text", "text", "text", "bytea", "int4"])
        for rowid, doc_id, version, h, blob, end in pending.values():
            copy.write_row((rowid, doc_id, version, h, _vector_binary(blob), end))
    self._changed = True


def _pg_build_hnsw(self: PostgresStore, tables: list[str]) -> None:
    """Build the HNSW index of each vector table (each part's, sharded) that lacks one,
    after the load that filled it (``m`` and ``ef_construction`` as the store was opened
    with). Until it exists, an HNSW search sorts every vector: exact, and slower."""
    def build(conn: Any, name: str) -> None:
        if conn.execute("SELECT to_regclass(%s)", (f"{self.schema}.{name}_hnsw",)).fetchone()[0]:
            return
        started = time.perf_counter()
        with conn.transaction():
            # the graph is built in memory while it fits (at 100,000 vectors of 384 dimensions it
            # needs about 250 MB); past maintenance_work_mem pgvector goes on on disk, many
            # times slower
            conn.execute("SET LOCAL maintenance_work_mem = '1GB'")
            # the store's own maintenance, not a search: 100,000 vectors take minutes on a loaded
            # machine, past the statement_timeout meant for searches
            conn.execute("SET LOCAL statement_timeout = 0")
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

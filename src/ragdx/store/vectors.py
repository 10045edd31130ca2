"""Exact nearest-neighbour search over one embedding space's stored vectors, with numpy.

The matrix is loaded from the store and bound to the store's ``index_version``: any change to
the store (an edit, a deletion, an access change) makes the next search reload it, so a cached
matrix never serves deleted or revoked content. Access groups filter rows *before* ranking.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from ragdx.errors import MissingExtraError, SpaceMismatchError
from ragdx.protocols import Store, VectorRowStore
from ragdx.store.keyword import key_id, reload_all
from ragdx.types import EmbeddingSpace, VectorBatch, VersionFilter


@dataclass(frozen=True, slots=True, eq=False)
class DenseIndex:
    """One space's vectors as a matrix, with each row's chunk, document version and groups."""

    space_id: str
    index_version: int
    chunk_ids: tuple[str, ...]
    docs: tuple[tuple[str, str], ...]
    matrix: np.ndarray
    window_ends: tuple[int | None, ...]
    group_rows: dict[str, np.ndarray]  # group -> boolean mask over rows
    statuses: tuple[str, ...] = ()     # each row's version status (current, superseded, expired)
    _version_rows: dict = field(default_factory=dict)  # VersionFilter -> boolean mask over rows

    @classmethod
    def load(cls, store: Store, space_id: str, dim: int) -> "DenseIndex":
        version = store.index_version
        ids, docs, blobs, ends = store.vector_table(space_id)
        matrix = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(ids), dim) \
            if ids else np.zeros((0, dim), np.float32)
        acl = store.acl_table()
        groups: dict[str, np.ndarray] = {}
        for row, key in enumerate(docs):
            for group in acl.get(key, ()):
                groups.setdefault(group, np.zeros(len(ids), dtype=bool))[row] = True
        status = {(v.document.doc_id, v.document.version): v.document.status.value for v in store.versions()}
        return cls(space_id, version, tuple(ids), tuple(docs), matrix, tuple(ends), groups,
                   tuple(status.get(tuple(key), "current") for key in docs))

    def allowed(self, groups: tuple[str, ...], versions: VersionFilter | None = None) -> np.ndarray:
        """Rows a principal with these groups may read, of the versions the filter allows."""
        mask = np.zeros(len(self.chunk_ids), dtype=bool)
        for group in groups:
            if group in self.group_rows:
                mask |= self.group_rows[group]
        if versions is not None and versions.current_only:
            rows = self._version_rows.get(versions)
            if rows is None:
                rows = np.array([versions.allows(v, s) for (_, v), s in zip(self.docs, self.statuses)],
                                dtype=bool)
                self._version_rows[versions] = rows
            mask &= rows
        return mask

    def search(self, query: np.ndarray, groups: tuple[str, ...], k: int,
               versions: VersionFilter | None = None) -> list[tuple[int, float]]:
        """The ``k`` readable rows (of the versions the filter allows) with the highest dot
        product, best first; ties by row order.

        Returns:
            ``(row, score)`` pairs.
        """
        allowed = self.allowed(groups, versions)
        n = int(allowed.sum())
        if not n or k <= 0:
            return []
        # score every row, then rule out the unreadable ones before ranking (no copy of the matrix)
        scores = self.matrix @ query.astype(np.float32)
        scores[~allowed] = -np.inf
        k = min(k, n)
        top = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.flatnonzero(allowed)
        order = sorted(top.tolist(), key=lambda i: (-scores[i], i))
        return [(i, float(scores[i])) for i in order]

    def nearest(self, query: np.ndarray, groups: tuple[str, ...], k: int,
                versions: VersionFilter | None = None) -> list[tuple[str, float]]:
        """:meth:`search` as ``(chunk_id, score)`` pairs."""
        return [(self.chunk_ids[row], score) for row, score in self.search(query, groups, k, versions)]


class HnswIndex:
    """Approximate search over a :class:`DenseIndex` with an HNSW graph (hnswlib, extra ``ann``).

    Malkov & Yashunin, "Efficient and robust approximate nearest neighbor search using
    Hierarchical Navigable Small World graphs", IEEE TPAMI 2020. Access groups filter *inside*
    the graph search (hnswlib's filter callback), so the top ``k`` are the best readable rows
    the graph finds. Its recall against exact search is measured (bench/retrieval/ann_recall.py), never
    assumed.

    Args:
        dense: the exact index whose rows it indexes.
        m: graph degree.
        ef_construction: candidate list size while building.
        ef: candidate list size while searching (at least ``k``).
    """

    def __init__(self, dense: DenseIndex, *, m: int = 16, ef_construction: int = 200, ef: int = 100,
                 seed: int = 0) -> None:
        try:
            import hnswlib
        except ImportError:
            raise MissingExtraError("ann", "approximate dense search (retrieval.dense.search = 'hnsw')") from None
        self.dense, self.ef = dense, ef
        self.space_id, self.index_version = dense.space_id, dense.index_version
        n, dim = dense.matrix.shape
        self._index = hnswlib.Index(space="ip", dim=dim)
        self._index.init_index(max_elements=max(n, 1), M=m, ef_construction=ef_construction,
                               random_seed=seed)
        if n:
            self._index.add_items(dense.matrix, np.arange(n))

    @property
    def chunk_ids(self) -> tuple[str, ...]:
        return self.dense.chunk_ids

    def search(self, query: np.ndarray, groups: tuple[str, ...], k: int,
               versions: VersionFilter | None = None) -> list[tuple[int, float]]:
        allowed = self.dense.allowed(groups, versions)
        n = int(allowed.sum())
        if not n or k <= 0:
            return []
        k = min(k, n)
        self._index.set_ef(max(self.ef, k))
        labels, distances = self._index.knn_query(query.astype(np.float32)[None, :], k=k,
                                                  filter=lambda row: bool(allowed[row]))
        # hnswlib's "ip" distance is 1 - dot product
        return sorted(((int(r), 1.0 - float(d)) for r, d in zip(labels[0], distances[0])),
                      key=lambda pair: (-pair[1], pair[0]))

    def nearest(self, query: np.ndarray, groups: tuple[str, ...], k: int,
                versions: VersionFilter | None = None) -> list[tuple[str, float]]:
        """:meth:`search` as ``(chunk_id, score)`` pairs."""
        return [(self.chunk_ids[row], score) for row, score in self.search(query, groups, k, versions)]


class _Rows:
    """One published state of a :class:`QuantizedIndex`: its arrays, the tables its masks are
    made from, and the store generation they hold. A search reads one state throughout; a
    refresh builds the next one (sharing the arrays it does not change, writing only rows the
    old state holds as unfilled) and publishes it in one assignment."""

    def __init__(self, dim: int, capacity: int) -> None:
        self.codes = np.zeros((capacity, dim), np.int8)
        self.scale = np.zeros(capacity, np.float32)
        self.bits = np.zeros((-(-dim // 64), capacity), np.uint64)  # sign bits, word by word
        self.rowid = np.zeros(capacity, np.int64)
        self.key = np.zeros(capacity, np.int32)  # index into keys: the row's (doc_id, version)
        self.duplicate = np.zeros(capacity, bool)
        self.dead = np.ones(capacity, bool)  # dropped by a patch, or room not filled yet
        self.size = 0  # rows filled
        self.keys: list[tuple[str, str]] = []
        self.key_ids: dict[tuple[str, str], int] = {}
        self.acl: dict[tuple[str, str], frozenset[str]] = {}
        self.status: dict[tuple[str, str], str] = {}
        self.masks: dict[object, np.ndarray] = {}
        self.index_version, self.log_seq = -1, 0

    def fork(self) -> "_Rows":
        """The next state: the arrays shared, except ``dead`` (a patch marks rows of it) and the
        key tables (a patch adds keys)."""
        new = object.__new__(_Rows)
        new.__dict__.update(self.__dict__)
        new.dead, new.keys, new.key_ids, new.masks = self.dead.copy(), list(self.keys), dict(self.key_ids), {}
        return new

    @property
    def live(self) -> int:
        return int(self.size - self.dead[:self.size].sum())

    def add(self, batches: Iterable[VectorBatch], dim: int) -> None:
        for batch in batches:
            n = len(batch)
            if self.size + n > self.rowid.size:  # a patch, or rows written since they were counted
                self._grow(self.size + n)
            matrix = np.frombuffer(b"".join(batch.vectors), dtype=np.float32).reshape(n, dim)
            at = slice(self.size, self.size + n)
            scale = np.abs(matrix).max(axis=1) / 127.0
            scale[scale == 0] = 1.0
            self.codes[at] = np.rint(matrix / scale[:, None])
            self.scale[at] = scale
            self.bits[:, at] = _sign_words(matrix).T
            self.rowid[at] = batch.rowids
            self.key[at] = np.fromiter((key_id(self.keys, self.key_ids, d) for d in batch.docs), np.int32, n)
            self.duplicate[at] = batch.duplicate
            self.dead[at] = False
            self.size += n

    def _grow(self, need: int) -> None:
        """New, larger arrays (the old ones stay as they are for a search still reading them)."""
        capacity = max(need, self.rowid.size + self.rowid.size // 16)
        for name in ("codes", "scale", "rowid", "key", "duplicate", "dead"):
            old = getattr(self, name)
            grown = (np.ones if name == "dead" else np.zeros)((capacity,) + old.shape[1:], old.dtype)
            grown[:old.shape[0]] = old
            setattr(self, name, grown)
        bits = np.zeros((self.bits.shape[0], capacity), np.uint64)
        bits[:, :self.bits.shape[1]] = self.bits
        self.bits = bits



class QuantizedIndex:
    """Dense search in bounded memory: every vector held as a sign bit per dimension (1/32 of
    float32) and as int8 codes (1/4), three passes per query, the last one exact.

    1. Hamming distance between the query's and each row's sign bits (binary quantization,
       Charikar, "Similarity estimation techniques from rounding algorithms", STOC 2002) keeps a
       shortlist of the readable rows nearer than the distance where ``max(16 * pool, rows / 50)``
       rows are reached, and every row at that distance (so which rows pass depends on the rows,
       never on where a patch put them in the arrays);
    2. their int8 codes (per-vector symmetric scalar quantization, Jacob et al., "Quantization
       and Training of Neural Networks for Efficient Integer-Arithmetic-Only Inference", CVPR
       2018: a row v is held as ``round(v / s)``, ``s = max|v| / 127``) estimate the dot product
       and keep ``pool = max(4 * k, k + 32)`` candidates, equal estimates to the older row;
    3. the candidates' float32 vectors are read back from the store and ranked by their exact dot
       product, ties to the older row, as :class:`DenseIndex` ranks. A row whose chunk the store
       now holds for another document version (a row id reused since the last refresh) is not
       returned.

    The scores returned are exact, and a result differs from exact search only when a true
    top-``k`` row falls out of a shortlist. What that costs in recall is measured
    (bench/scale/million_chunks.py), never assumed; :meth:`scan` is the exact search, streamed.

    The index is bound to the store's ``index_version``: when the store changed, the documents
    its update log names since the last refresh are dropped and read again, access groups and
    version statuses are read again in full, and the row count is checked against the store's
    (the log-driven rule of :func:`~ragdx.store.keyword.reload_all`, a row count that differs
    or too many dead rows mean everything is read again). So an edit, a deletion or an access
    change is in the next search, and no deleted or revoked row is served. Inside the store's
    own write transaction the index reads the uncommitted rows but does not hold itself up to
    date with them (they may be rolled back): the next refresh outside reads everything again.

    A refresh builds the next state and publishes it in one assignment; a search reads one
    state throughout, so a search in another thread never sees a half-patched index.

    Args:
        store: a store that reads its vectors in batches and by row.
        space_id: the space.
        dim: its dimension.
    """

    BLOCK = 65_536  # rows whose Hamming distances or int8 estimates are computed at a time
    BATCH = 8_192  # rows read from the store at a time
    SHORTLIST = 50  # the Hamming shortlist keeps at least 1/SHORTLIST of the readable rows
    DEAD_KEPT = 4_096  # dead rows kept (or an eighth of the rows, if more) before reading all again

    def __init__(self, store: VectorRowStore, space_id: str, dim: int) -> None:
        self.store, self.space_id, self.dim = store, space_id, dim
        self._rows = _Rows(dim, 0)
        self._refreshing = threading.Lock()

    @classmethod
    def load(cls, store: VectorRowStore, space_id: str, dim: int) -> "QuantizedIndex":
        index = cls(store, space_id, dim)
        index.refresh()
        return index

    @property
    def index_version(self) -> int:
        """The store generation the index holds (-1: none, read everything at the next refresh)."""
        return self._rows.index_version

    @property
    def log_seq(self) -> int:
        return self._rows.log_seq

    @property
    def size(self) -> int:
        """Rows filled (dead ones included)."""
        return self._rows.size

    @property
    def codes(self) -> np.ndarray:
        return self._rows.codes

    @property
    def rows(self) -> int:
        """The live rows (duplicates' included)."""
        return self._rows.live

    @property
    def nbytes(self) -> int:
        """Memory held by the codes and the per-row arrays."""
        r = self._rows
        return sum(a.nbytes for a in (r.codes, r.scale, r.bits, r.rowid, r.key, r.duplicate, r.dead))

    def refresh(self) -> None:
        """Bring the index up to the store's ``index_version`` (a no-op when it is)."""
        with self._refreshing:
            current = self._rows
            version = self.store.index_version
            in_write = self.store.in_write_transaction
            if version == current.index_version and not in_write:
                return
            # the log is read before the vectors: a change committed in between is read again next time
            entries = self.store.log_entries(current.log_seq)
            seq = max([current.log_seq] + [e.seq for e in entries])
            contiguous = not entries or entries[0].seq == current.log_seq + 1
            new = None
            if current.index_version >= 0 and contiguous and not reload_all(entries):
                new = current.fork()
                if not self._patch(new, entries):
                    new = None
            if new is None:
                new = _Rows(self.dim, self.store.vector_count(self.space_id))
                new.add(self.store.vector_rows(self.space_id, batch=self.BATCH), self.dim)
            new.acl, new.status = self.store.acl_table(), self.store.version_statuses()
            # uncommitted rows are searched but never taken as the store's generation: a rollback
            # would leave them, and the log seqs they used, behind
            new.index_version, new.log_seq = (-1, 0) if in_write else (version, seq)
            self._rows = new

    def _patch(self, new: _Rows, entries: list) -> bool:
        """Drop and read again the documents the log entries name; False when the result does
        not hold the store's row count (a change the log did not name) or too many rows are dead
        (more than :attr:`DEAD_KEPT` and an eighth)."""
        doc_ids = sorted({e.doc_id for e in entries if e.doc_id is not None})
        if doc_ids:
            wanted = set(doc_ids)
            gone = np.array([doc_id in wanted for doc_id, _ in new.keys], bool)
            new.dead[:new.size] |= gone[new.key[:new.size]]
            for i in range(0, len(doc_ids), 500):
                new.add(self.store.vector_rows(self.space_id, doc_ids[i:i + 500], batch=self.BATCH), self.dim)
        dead = new.size - new.live
        return new.live == self.store.vector_count(self.space_id) and dead <= max(new.size // 8, self.DEAD_KEPT)

    def allowed(self, groups: tuple[str, ...], versions: VersionFilter | None = None,
                rows: _Rows | None = None) -> np.ndarray:
        """Per row: live, not a duplicate, readable by these groups and of a version the filter
        allows (cached until the next change)."""
        r = rows if rows is not None else self._rows
        who = frozenset(groups)
        named = versions if versions is not None and versions.current_only else None
        cached = r.masks.get((who, named))
        if cached is None:
            flags = np.array([_may_search(r.acl, r.status, key, who, named) for key in r.keys], bool)
            readable = flags[r.key] if flags.size else np.zeros(r.key.size, bool)
            cached = r.masks[(who, named)] = readable & ~r.duplicate & ~r.dead
        return cached

    def hamming(self, query: np.ndarray, rows: _Rows | None = None) -> np.ndarray:
        """Every row's Hamming distance between its sign bits and the query's."""
        bits = (rows if rows is not None else self._rows).bits
        q = _sign_words(query[None, :])[0]
        out = np.empty(bits.shape[1], np.uint16)
        for start in range(0, bits.shape[1], self.BLOCK):
            block = bits[:, start:start + self.BLOCK]  # word by word: contiguous rows of words
            count = _popcount(block[0] ^ q[0]).astype(np.uint16)
            for word in range(1, q.size):
                count += _popcount(block[word] ^ q[word])
            out[start:start + self.BLOCK] = count
        return out

    def _shortlist(self, distance: np.ndarray, allowed: np.ndarray, size: int) -> np.ndarray:
        """The allowed rows nearer in Hamming distance than the distance at which ``size`` rows are
        reached, and every allowed row at that distance (at least ``size`` rows; which ones
        depends on the rows only, not on their places in the arrays). The distances are small
        integers: a histogram finds the cut, no sort."""
        counts = np.bincount(distance[allowed], minlength=self.dim + 1)
        cut = int(np.searchsorted(np.cumsum(counts), size))  # the distance where the list fills
        return np.flatnonzero(allowed & (distance <= cut))

    def sizes(self, readable: int, k: int) -> tuple[int, int]:
        """The int8 pool and the Hamming shortlist's least size for ``readable`` rows and ``k``."""
        pool = min(readable, max(4 * k, k + 32))
        return pool, min(readable, max(16 * pool, readable // self.SHORTLIST))

    def nearest(self, query: np.ndarray, groups: tuple[str, ...], k: int,
                versions: VersionFilter | None = None) -> list[tuple[str, float]]:
        """The ``k`` readable chunks (of the versions the filter allows) with the highest dot
        product, best first, ties to the older row: ``(chunk_id, exact score)`` pairs."""
        return self.search(query, groups, k, versions)[0]

    def search(self, query: np.ndarray, groups: tuple[str, ...], k: int,
               versions: VersionFilter | None = None) -> tuple[list[tuple[str, float]], dict[str, int]]:
        """:meth:`nearest`, and what each pass held: ``readable`` rows, the Hamming
        ``shortlist`` (every readable row when it is not cut) and the int8 ``pool``."""
        r = self._rows  # one state for the whole search
        allowed = self.allowed(groups, versions, r)
        n = int(allowed.sum())
        if not n or k <= 0:
            return [], {"readable": n, "shortlist": 0, "pool": 0}
        q = query.astype(np.float32)
        pool, short = self.sizes(n, k)
        rows = self._shortlist(self.hamming(q, r), allowed, short) if short < n else np.flatnonzero(allowed)
        held = {"readable": n, "shortlist": int(rows.size), "pool": pool}
        estimate = np.empty(rows.size, np.float32)
        for start in range(0, rows.size, self.BLOCK):  # a float32 copy of a block of codes at a time
            at = rows[start:start + self.BLOCK]
            estimate[start:start + at.size] = (r.codes[at].astype(np.float32) @ q) * r.scale[at]
        if pool < rows.size:  # the best estimates, equal ones to the older row (identical vectors tie)
            rows = rows[np.lexsort((r.rowid[rows], -estimate))[:pool]]
        expected = {int(r.rowid[i]): r.keys[r.key[i]] for i in rows}
        stored = self.store.vectors_at(self.space_id, list(expected))
        # a row id reused by another document's chunk since the refresh is not this row
        rowids = sorted(i for i, (_, doc_id, version, _) in stored.items() if (doc_id, version) == expected[i])
        if not rowids:
            return [], held
        exact = np.frombuffer(b"".join(stored[i][3] for i in rowids), dtype=np.float32).reshape(
            len(rowids), self.dim) @ q
        order = sorted(range(len(rowids)), key=lambda i: (-exact[i], rowids[i]))[:k]
        return [(stored[rowids[i]][0], float(exact[i])) for i in order], held

    def scan(self, query: np.ndarray, groups: tuple[str, ...], k: int,
             versions: VersionFilter | None = None) -> list[tuple[str, float]]:
        """Exact search, streamed: every stored vector read in batches of :attr:`BATCH` rows and
        scored in float32, the best ``k`` readable rows kept (memory: a batch and ``k`` rows).
        Ranked as :meth:`nearest` and :class:`DenseIndex` rank; slow on a large store (the
        diagnosis's deep search uses it, so a rank it reports is the exact rank)."""
        r = self._rows
        who = frozenset(groups)
        named = versions if versions is not None and versions.current_only else None
        q = query.astype(np.float32)
        best_ids, best_scores = np.zeros(0, np.int64), np.zeros(0, np.float32)
        for batch in self.store.vector_rows(self.space_id, batch=self.BATCH):
            keep = np.array([not dup and _may_search(r.acl, r.status, key, who, named)
                             for key, dup in zip(batch.docs, batch.duplicate)], bool)
            if not keep.any():
                continue
            scores = (np.frombuffer(b"".join(batch.vectors), dtype=np.float32).reshape(len(batch), self.dim) @ q)[keep]
            best_ids = np.concatenate([best_ids, np.asarray(batch.rowids, np.int64)[keep]])
            best_scores = np.concatenate([best_scores, scores])
            if best_ids.size > k:
                top = np.lexsort((best_ids, -best_scores))[:k]
                best_ids, best_scores = best_ids[top], best_scores[top]
        order = np.lexsort((best_ids, -best_scores))[:max(k, 0)]
        names = self.store.vectors_at(self.space_id, best_ids[order].tolist())
        return [(names[int(i)][0], float(s)) for i, s in zip(best_ids[order], best_scores[order])
                if int(i) in names]


def _may_search(acl: dict, status: dict, key: tuple[str, str], who: frozenset[str],
                versions: VersionFilter | None) -> bool:
    """Whether a version is readable by these groups, stored, and one the filter allows."""
    return bool(acl.get(key, frozenset()) & who) and key in status and (
        versions is None or versions.allows(key[1], status[key]))


_BYTE_BITS = np.array([bin(i).count("1") for i in range(256)], np.uint8)


def _popcount(words: np.ndarray) -> np.ndarray:
    """Set bits of each uint64 (uint8)."""
    if hasattr(np, "bitwise_count"):  # numpy >= 2.0
        return np.bitwise_count(words)
    as_bytes = np.ascontiguousarray(words).view(np.uint8).reshape(words.size, 8)
    return _BYTE_BITS[as_bytes].sum(axis=1, dtype=np.uint8)


def _sign_words(matrix: np.ndarray) -> np.ndarray:
    """Each row's sign bits (1: positive), packed into uint64 words, zero-padded."""
    packed = np.packbits(matrix > 0, axis=1)
    pad = -packed.shape[1] % 8
    if pad:
        packed = np.pad(packed, ((0, 0), (0, pad)))
    return np.ascontiguousarray(packed).view(np.uint64)


def check_space(query_space: EmbeddingSpace, index_space: EmbeddingSpace | None, stage: str) -> None:
    """Refuse to compare vectors of two spaces.

    Raises:
        SpaceMismatchError: no active space, or a different one, naming the fields that differ.
    """
    if index_space is None:
        raise SpaceMismatchError(f"{stage}: the store has no active embedding space; ingest with the "
                                 "dense channel on, or run 'ragdx index build' then 'index switch'")
    if query_space.id != index_space.id:
        differ = [f"{k}: {getattr(query_space, k)!r} vs {getattr(index_space, k)!r}"
                  for k in query_space.__slots__ if getattr(query_space, k) != getattr(index_space, k)]
        raise SpaceMismatchError(
            f"{stage}: the query encoder's space {query_space.id} is not the index's space "
            f"{index_space.id} ({'; '.join(differ)}); vectors of two spaces are never compared: run with "
            f"the retrieval.dense settings the store was ingested with (--set or --config), or build this "
            f"encoder's index beside it ('ragdx index build', then 'ragdx index switch')")

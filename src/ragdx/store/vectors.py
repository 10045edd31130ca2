"""Exact nearest-neighbour search over one embedding space's stored vectors, with numpy.

The matrix is loaded from the store and bound to the store's ``index_version``: any change to
the store (an edit, a deletion, an access change) makes the next search reload it, so a cached
matrix never serves deleted or revoked content. Access groups filter rows *before* ranking.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ragdx.errors import MissingExtraError, SpaceMismatchError
from ragdx.protocols import Store, VectorRowStore
from ragdx.types import EmbeddingSpace, VersionFilter


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
    the graph finds. Its recall against exact search is measured (bench/ann_recall.py), never
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


class QuantizedIndex:
    """Dense search in bounded memory: every vector held as a sign bit per dimension (1/32 of
    float32) and as int8 codes (1/4), three passes per query, the last one exact.

    1. Hamming distance between the query's and each row's sign bits (binary quantization,
       Charikar, "Similarity estimation techniques from rounding algorithms", STOC 2002) keeps a
       shortlist of ``max(16 * pool, rows / 50)`` readable rows;
    2. their int8 codes (per-vector symmetric scalar quantization, Jacob et al., "Quantization
       and Training of Neural Networks for Efficient Integer-Arithmetic-Only Inference", CVPR
       2018: a row v is held as ``round(v / s)``, ``s = max|v| / 127``) estimate the dot product
       and keep ``pool = max(4 * k, k + 32)`` candidates;
    3. the candidates' float32 vectors are read back from the store and ranked by their exact dot
       product, ties to the older row, as :class:`DenseIndex` ranks.

    The scores returned are exact, and a result differs from exact search only when a true
    top-``k`` row falls out of a shortlist. What that costs in recall is measured
    (bench/million_chunks.py), never assumed.

    The index is bound to the store's ``index_version``: when the store changed, the documents
    its update log names since the last refresh are dropped and read again, access groups and
    version statuses are read again in full, and the row count is checked against the store's
    (a change the log did not name, an entry naming no document such as an index version
    switched in, or a gap in the log, means everything is read again). So an
    edit, a deletion or an access change is in the next search, and no deleted or revoked row is
    served.

    Args:
        store: a store that reads its vectors in batches and by row.
        space_id: the space.
        dim: its dimension.
    """

    BLOCK = 65_536  # rows whose Hamming distances are computed at a time
    BATCH = 8_192  # rows read from the store at a time
    SHORTLIST = 50  # the Hamming shortlist keeps at least 1/SHORTLIST of the readable rows
    DEAD_KEPT = 4_096  # dead rows kept (or an eighth of the rows, if more) before reading all again

    def __init__(self, store: VectorRowStore, space_id: str, dim: int) -> None:
        self.store, self.space_id, self.dim = store, space_id, dim
        self.index_version = -1
        self.log_seq = 0
        self._clear(0)

    def _clear(self, capacity: int) -> None:
        self.codes = np.zeros((capacity, self.dim), np.int8)
        self.scale = np.zeros(capacity, np.float32)
        self.bits = np.zeros((-(-self.dim // 64), capacity), np.uint64)  # sign bits, word by word
        self.rowid = np.zeros(capacity, np.int64)
        self.key = np.zeros(capacity, np.int32)  # index into keys: the row's (doc_id, version)
        self.duplicate = np.zeros(capacity, bool)
        self.dead = np.ones(capacity, bool)  # dropped by a patch, or room not filled yet
        self.size = 0  # rows filled
        self.keys: list[tuple[str, str]] = []
        self._key_ids: dict[tuple[str, str], int] = {}
        self._acl: dict[tuple[str, str], frozenset[str]] = {}
        self._status: dict[tuple[str, str], str] = {}
        self._masks: dict[object, np.ndarray] = {}

    @classmethod
    def load(cls, store: VectorRowStore, space_id: str, dim: int) -> "QuantizedIndex":
        index = cls(store, space_id, dim)
        index.refresh()
        return index

    @property
    def rows(self) -> int:
        """The live rows (duplicates' included)."""
        return int(self.size - self.dead[:self.size].sum())

    @property
    def nbytes(self) -> int:
        """Memory held by the codes and the per-row arrays."""
        return sum(a.nbytes for a in (self.codes, self.scale, self.bits, self.rowid, self.key,
                                      self.duplicate, self.dead))

    def refresh(self) -> None:
        """Bring the index up to the store's ``index_version`` (a no-op when it is)."""
        version = self.store.index_version
        if version == self.index_version:
            return
        # the log is read before the vectors: a change committed in between is read again next time
        entries = self.store.log_entries(self.log_seq)
        seq = max([self.log_seq] + [e.seq for e in entries])
        contiguous = not entries or entries[0].seq == self.log_seq + 1
        if not (self.index_version >= 0 and contiguous and self._patch(entries)):
            self._clear(self.store.vector_count(self.space_id))
            self._add(self.store.vector_rows(self.space_id, batch=self.BATCH))
        self.index_version, self.log_seq = version, seq
        self._acl, self._status = self.store.acl_table(), self.store.version_statuses()
        self._masks = {}

    def _patch(self, entries: list) -> bool:
        """Drop and read again the documents the log entries name; False when an entry names no
        document (but a space's), the result does not hold the store's row count (a change the
        log did not name) or too many rows are dead
        (more than :attr:`DEAD_KEPT` and an eighth)."""
        if any(e.doc_id is None and e.op != "space" for e in entries):
            return False  # a change of the whole index (an index version switched in): read it all
        doc_ids = sorted({e.doc_id for e in entries if e.doc_id is not None})
        if doc_ids:
            wanted = set(doc_ids)
            gone = np.array([doc_id in wanted for doc_id, _ in self.keys], bool)
            self.dead[:self.size] |= gone[self.key[:self.size]]
            for i in range(0, len(doc_ids), 500):
                self._add(self.store.vector_rows(self.space_id, doc_ids[i:i + 500], batch=self.BATCH))
        dead = self.size - self.rows
        return self.rows == self.store.vector_count(self.space_id) and dead <= max(self.size // 8, self.DEAD_KEPT)

    def _add(self, batches) -> None:
        for ids, docs, duplicate, blobs in batches:
            n = len(ids)
            if self.size + n > self.rowid.size:  # a patch, or rows written since they were counted
                self._grow(self.size + n)
            matrix = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(n, self.dim)
            at = slice(self.size, self.size + n)
            scale = np.abs(matrix).max(axis=1) / 127.0
            scale[scale == 0] = 1.0
            self.codes[at] = np.rint(matrix / scale[:, None])
            self.scale[at] = scale
            self.bits[:, at] = _sign_words(matrix).T
            self.rowid[at] = ids
            self.key[at] = np.fromiter((self._key_id(d) for d in docs), np.int32, n)
            self.duplicate[at] = duplicate
            self.dead[at] = False
            self.size += n

    def _grow(self, need: int) -> None:
        capacity = max(need, self.rowid.size + self.rowid.size // 16)
        for name in ("codes", "scale", "rowid", "key", "duplicate", "dead"):
            old = getattr(self, name)
            new = np.ones if name == "dead" else np.zeros
            grown = new((capacity,) + old.shape[1:], old.dtype)
            grown[:old.shape[0]] = old
            setattr(self, name, grown)
        bits = np.zeros((self.bits.shape[0], capacity), np.uint64)
        bits[:, :self.bits.shape[1]] = self.bits
        self.bits = bits

    def _key_id(self, key: tuple[str, str]) -> int:
        found = self._key_ids.get(key)
        if found is None:
            found = self._key_ids[key] = len(self.keys)
            self.keys.append(key)
        return found

    def allowed(self, groups: tuple[str, ...], versions: VersionFilter | None = None) -> np.ndarray:
        """Per row: live, not a duplicate, readable by these groups and of a version the filter
        allows (cached until the next change)."""
        who = frozenset(groups)
        named = versions if versions is not None and versions.current_only else None
        cached = self._masks.get((who, named))
        if cached is None:
            acl, status = self._acl, self._status
            flags = np.array([bool(acl.get(key, frozenset()) & who) and key in status
                              and (named is None or named.allows(key[1], status[key]))
                              for key in self.keys], bool)
            readable = flags[self.key] if flags.size else np.zeros(self.key.size, bool)
            cached = self._masks[(who, named)] = readable & ~self.duplicate & ~self.dead
        return cached

    def hamming(self, query: np.ndarray) -> np.ndarray:
        """Every row's Hamming distance between its sign bits and the query's."""
        q = _sign_words(query[None, :])[0]
        out = np.empty(self.rowid.size, np.uint16)
        for start in range(0, self.rowid.size, self.BLOCK):
            block = self.bits[:, start:start + self.BLOCK]  # word by word: contiguous rows of words
            count = _popcount(block[0] ^ q[0]).astype(np.uint16)
            for word in range(1, q.size):
                count += _popcount(block[word] ^ q[word])
            out[start:start + self.BLOCK] = count
        return out

    def _shortlist(self, distance: np.ndarray, allowed: np.ndarray, size: int) -> np.ndarray:
        """The ``size`` allowed rows nearest in Hamming distance, ties to the older row (the
        distances are small integers: a histogram finds the cut, no sort)."""
        counts = np.bincount(distance[allowed], minlength=self.bits.shape[0] * 64 + 1)
        cut = int(np.searchsorted(np.cumsum(counts), size))  # the distance where the list fills
        below = np.flatnonzero(allowed & (distance < cut))
        at_cut = np.flatnonzero(allowed & (distance == cut))[:size - below.size]
        return np.concatenate([below, at_cut])

    def nearest(self, query: np.ndarray, groups: tuple[str, ...], k: int,
                versions: VersionFilter | None = None) -> list[tuple[str, float]]:
        """The ``k`` readable chunks (of the versions the filter allows) with the highest dot
        product, best first, ties to the older row: ``(chunk_id, exact score)`` pairs."""
        allowed = self.allowed(groups, versions)
        n = int(allowed.sum())
        if not n or k <= 0:
            return []
        q = query.astype(np.float32)
        pool = min(n, max(4 * k, k + 32))
        short = min(n, max(16 * pool, n // self.SHORTLIST))
        rows = self._shortlist(self.hamming(q), allowed, short) if short < n else np.flatnonzero(allowed)
        estimate = (self.codes[rows].astype(np.float32) @ q) * self.scale[rows]
        if pool < rows.size:  # the best estimates, equal ones to the older row (identical vectors tie)
            rows = rows[np.lexsort((self.rowid[rows], -estimate))[:pool]]
        stored = self.store.vectors_at(self.space_id, self.rowid[rows].tolist())
        if not stored:
            return []
        rowids = sorted(stored)
        exact = np.frombuffer(b"".join(stored[r][1] for r in rowids), dtype=np.float32).reshape(
            len(rowids), self.dim) @ q
        order = sorted(range(len(rowids)), key=lambda i: (-exact[i], rowids[i]))[:k]
        return [(stored[rowids[i]][0], float(exact[i])) for i in order]


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
            f"{index_space.id} ({'; '.join(differ)}); vectors of two spaces are never compared")

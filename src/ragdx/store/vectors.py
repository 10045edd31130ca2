"""Exact nearest-neighbour search over one embedding space's stored vectors, with numpy.

The matrix is loaded from the store and bound to the store's ``index_version``: any change to
the store (an edit, a deletion, an access change) makes the next search reload it, so a cached
matrix never serves deleted or revoked content. Access groups filter rows *before* ranking.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ragdx.errors import MissingExtraError, SpaceMismatchError
from ragdx.protocols import Store
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

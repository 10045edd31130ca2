"""The dense channel: nearest neighbours of the question's vector in the store's active space.

A query is searched only against vectors of the very space its encoder produces (model,
weights, dimension, normalisation, prompts, window); anything else is refused, since vectors
of two spaces are not comparable even when their dimensions agree. Exact search (numpy) is the
default; approximate search (hnswlib) is optional and its recall is measured, not assumed.

A store that searches its own vectors (:class:`~ragdx.protocols.VectorSearchStore`, such as
the PostgreSQL store) is asked directly; the vectors of any other store are loaded into an
in-memory index.
"""

from __future__ import annotations

import time

from ragdx.protocols import Encoder, Store, VectorSearchStore
from ragdx.stages._access import readable_only
from ragdx.store.vectors import DenseIndex, HnswIndex, check_space
from ragdx.types import Candidate, Provenance, Query, Ranked, StageKind, VersionFilter


class DenseRetriever:
    """Dense retrieval over the store's active embedding space, filtered by access groups.

    Args:
        store: the store.
        encoder: encodes the question; its space must be the store's active space.
        top_k: how many candidates to return.
        search: ``exact`` (numpy) or ``hnsw`` (approximate, extra ``ann``).
        name: the channel's name in traces.
        current_only: search the versions in force and those the question names (False: all).
    """

    kind = StageKind.RETRIEVAL

    def __init__(self, store: Store, encoder: Encoder, *, top_k: int = 100,
                 search: str = "exact", name: str = "dense", current_only: bool = True) -> None:
        self.store = store
        self.current_only = current_only
        self.encoder = encoder
        self.top_k = top_k
        self.search = search
        self.name = name
        # the loaded index, one slot shared with every deeper() copy: a copy (governance's probe,
        # the diagnosis's deeper search) must not load a second copy of every vector
        self._slot: list[DenseIndex | HnswIndex | None] = [None]

    def index(self) -> DenseIndex | HnswIndex:
        """The active space's index, rebuilt whenever the store changed (an edit, a deletion or
        an access change bumps the store's index version)."""
        space = self.store.active_space()
        check_space(self.encoder.space, space, self.name)
        assert space is not None
        index = self._slot[0]
        if index is None or index.space_id != space.id or index.index_version != self.store.index_version:
            exact = DenseIndex.load(self.store, space.id, space.dim)
            index = self._slot[0] = HnswIndex(exact) if self.search == "hnsw" else exact
        return index

    @property
    def config(self) -> dict[str, object]:
        space = self.encoder.space
        return {"top_k": self.top_k, "space": space.id, "model": space.model_id,
                "weights_hash": space.weights_hash, "dim": space.dim, "search": self.search,
                "versions": "current and named" if self.current_only else "all"}

    def deeper(self, top_k: int) -> "DenseRetriever":
        """The same channel, returning ``top_k`` candidates."""
        copy = DenseRetriever(self.store, self.encoder, top_k=top_k, search=self.search, name=self.name,
                              current_only=self.current_only)
        copy._slot = self._slot
        return copy

    def run(self, query: Query) -> Ranked:
        started = time.perf_counter()
        versions = VersionFilter.for_question(query.question, current_only=self.current_only)
        if isinstance(self.store, VectorSearchStore):
            space = self.store.active_space()
            check_space(self.encoder.space, space, self.name)
            assert space is not None
            vector = self.encoder.encode([query.question], kind="query").vectors[0]
            hits = self.store.vector_search(space.id, vector, query.principal.groups, self.top_k,
                                            exact=self.search == "exact", versions=versions)
        else:
            index = self.index()
            vector = self.encoder.encode([query.question], kind="query").vectors[0]
            rows = index.search(vector, query.principal.groups, self.top_k, versions)
            chunks = self.store.chunks_by_id([index.chunk_ids[row] for row, _ in rows])
            hits = [(chunks[index.chunk_ids[row]], score) for row, score in rows]
        found = readable_only(self.store, query.principal, self.name, query.id, hits)
        items = tuple(
            Candidate(c.id, c.doc_id, c.version, c.start, c.end, rank, score,
                      (Provenance(self.name, rank, score),))
            for rank, (c, score) in enumerate(found, start=1))
        return Ranked(self.name, self.kind, items, (), self.config, time.perf_counter() - started)

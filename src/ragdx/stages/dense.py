"""The dense channel: nearest neighbours of the question's vector in the store's active space.

A query is searched only against vectors of the very space its encoder produces (model,
weights, dimension, normalisation, prompts, window); anything else is refused, since vectors
of two spaces are not comparable even when their dimensions agree. Exact search (numpy) is the
default for a space of up to :data:`EXACT_UP_TO` vectors; above it (``search = "auto"``), the
bounded index holds sign bits and int8 codes and rescores its candidates exactly from the store
(:class:`~ragdx.store.vectors.QuantizedIndex`), under a third of float32's memory. Approximate search
(hnswlib) is optional. What the bounded and approximate indexes cost in recall is measured
(bench/scale/million_chunks.py, bench/retrieval/ann_recall.py), not assumed.

A store that searches its own vectors (:class:`~ragdx.protocols.VectorSearchStore`, such as
the PostgreSQL store) is asked directly; the vectors of any other store are loaded into an
in-memory index.
"""

from __future__ import annotations

import time

from ragdx.errors import ConfigError
from ragdx.protocols import Encoder, Store, VectorRowStore, VectorSearchStore
from ragdx.stages._access import readable_only
from ragdx.store.vectors import DenseIndex, HnswIndex, QuantizedIndex, check_space
from ragdx.types import Candidate, EmbeddingSpace, Provenance, Query, Ranked, StageKind, VersionFilter

#: ``search = "auto"`` searches exactly (float32 in memory) up to this many vectors, and with the
#: bounded (quantized) index above (docs/benchmarks.md, "Dense search in bounded memory").
EXACT_UP_TO = 100_000


class DenseRetriever:
    """Dense retrieval over the store's active embedding space, filtered by access groups.

    Args:
        store: the store.
        encoder: encodes the question; its space must be the store's active space.
        top_k: how many candidates to return.
        search: ``auto`` (``exact`` up to :data:`EXACT_UP_TO` vectors, ``quantized`` above),
            ``exact`` (float32 numpy), ``quantized`` (sign bits and int8 codes in memory,
            candidates rescored exactly from the store) or ``hnsw`` (approximate, extra ``ann``).
        name: the channel's name in traces.
        current_only: search the versions in force and those the question names (False: all).
        exact: rank by an exhaustive exact search whatever ``search`` is (the diagnosis's deep
            search: a rank it reports is one exact search gives).

    The trace's config says what ran: ``searched`` (``exact``, ``quantized``, ``hnsw`` or
    ``exact scan``) and, for the bounded index, the ``readable`` rows, the Hamming
    ``shortlist`` and the int8 ``pool`` of that query.
    """

    kind = StageKind.RETRIEVAL

    def __init__(self, store: Store, encoder: Encoder, *, top_k: int = 100,
                 search: str = "auto", name: str = "dense", current_only: bool = True,
                 exact: bool = False) -> None:
        self.store = store
        self.current_only = current_only
        self.encoder = encoder
        self.top_k = top_k
        self.search = search
        self.name = name
        self.exact = exact
        if search == "quantized" and not isinstance(store, (VectorRowStore, VectorSearchStore)):
            raise ConfigError(f"{name}: search 'quantized' needs a store that reads its vectors by row "
                              f"(VectorRowStore, such as the SQLite store); {type(store).__name__} does not; "
                              "choices: auto, exact, hnsw")
        # the loaded index, one slot shared with every deeper() copy: a copy (governance's probe,
        # the diagnosis's deeper search) must not load a second copy of every vector
        self._slot: list[DenseIndex | HnswIndex | QuantizedIndex | None] = [None]

    def index(self) -> DenseIndex | HnswIndex | QuantizedIndex:
        """The active space's index, brought up to date whenever the store changed (an edit, a
        deletion or an access change bumps the store's index version): the bounded index is
        patched, the others are loaded again."""
        space = self.store.active_space()
        check_space(self.encoder.space, space, self.name)
        assert space is not None
        index = self._slot[0]
        if isinstance(index, QuantizedIndex) and index.space_id == space.id:
            index.refresh()
        elif index is None or index.space_id != space.id or index.index_version != self.store.index_version:
            index = self._slot[0] = self._load(space)
        return index

    def _load(self, space: EmbeddingSpace) -> DenseIndex | HnswIndex | QuantizedIndex:
        search = self.search
        if search == "auto" and not isinstance(self.store, VectorRowStore):
            search = "exact"
        if search == "auto":
            search = "quantized" if self.store.vector_count(space.id) > EXACT_UP_TO else "exact"
        if search == "quantized":
            return QuantizedIndex.load(self.store, space.id, space.dim)
        exact = DenseIndex.load(self.store, space.id, space.dim)
        return HnswIndex(exact) if search == "hnsw" else exact

    @property
    def config(self) -> dict[str, object]:
        space = self.encoder.space
        return {"top_k": self.top_k, "space": space.id, "model": space.model_id,
                "weights_hash": space.weights_hash, "dim": space.dim, "search": self.search,
                "versions": "current and named" if self.current_only else "all"}

    def deeper(self, top_k: int, exact: bool = False) -> "DenseRetriever":
        """The same channel, returning ``top_k`` candidates (``exact``: by an exhaustive exact
        search, even where the channel's own search is bounded or approximate)."""
        copy = DenseRetriever(self.store, self.encoder, top_k=top_k, search=self.search, name=self.name,
                              current_only=self.current_only, exact=exact)
        copy._slot = self._slot
        return copy

    def warm_up(self) -> None:
        """Load the encoder's model and, for a store read into memory, the vectors now rather than
        at the first query."""
        self.encoder.encode(["warm up"], kind="query")
        if not isinstance(self.store, VectorSearchStore):
            self.index()

    def run(self, query: Query) -> Ranked:
        started = time.perf_counter()
        versions = VersionFilter.for_question(query.question, current_only=self.current_only,
                                               known=self.store.version_labels())
        if isinstance(self.store, VectorSearchStore):
            space = self.store.active_space()
            check_space(self.encoder.space, space, self.name)
            assert space is not None
            vector = self.encoder.encode([query.question], kind="query").vectors[0]
            exact = self.exact or self.search != "hnsw"
            hits = self.store.vector_search(space.id, vector, query.principal.groups, self.top_k,
                                            exact=exact, versions=versions)
            ran: dict[str, object] = {"searched": "exact" if exact else "hnsw"}
        else:
            index = self.index()
            vector = self.encoder.encode([query.question], kind="query").vectors[0]
            groups = query.principal.groups
            if isinstance(index, QuantizedIndex) and self.exact:
                nearest, ran = index.scan(vector, groups, self.top_k, versions), {"searched": "exact scan"}
            elif isinstance(index, QuantizedIndex):
                nearest, held = index.search(vector, groups, self.top_k, versions)
                ran = {"searched": "quantized", **held}
            elif isinstance(index, HnswIndex) and self.exact:
                nearest, ran = index.dense.nearest(vector, groups, self.top_k, versions), {"searched": "exact"}
            else:
                nearest = index.nearest(vector, groups, self.top_k, versions)
                ran = {"searched": "hnsw" if isinstance(index, HnswIndex) else "exact"}
            chunks = self.store.chunks_by_id([chunk_id for chunk_id, _ in nearest])
            hits = [(chunks[chunk_id], score) for chunk_id, score in nearest if chunk_id in chunks]
        found = readable_only(self.store, query.principal, self.name, query.id, hits)
        items = tuple(
            Candidate(c.id, c.doc_id, c.version, c.start, c.end, rank, score,
                      (Provenance(self.name, rank, score),))
            for rank, (c, score) in enumerate(found, start=1))
        return Ranked(self.name, self.kind, items, (), self.config | ran, time.perf_counter() - started)

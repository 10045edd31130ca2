"""Adapters that turn a user's plain function into a stage, so it can join a pipeline.

A user's own stage needs no adapter when it is a class with ``name``, ``kind`` and ``run`` (the
protocols of :mod:`ragdx.protocols`); these cover the common case of a function.
"""

from __future__ import annotations

import time
from typing import Callable, Mapping, Sequence

from ragdx.errors import InputError
from ragdx.protocols import Store
from ragdx.stages._access import readable_only
from ragdx.types import Candidate, Provenance, Query, Ranked, StageKind

__all__ = ["FunctionRetriever"]


class FunctionRetriever:
    """A retrieval channel from a function ``(query, top_k) -> [(chunk_id, score), ...]`` (best
    first), over a store's chunks: a hosted search service, another index, a rule.

    The function is given the whole :class:`~ragdx.types.Query`, principal included, so it can
    filter by access inside its search; every chunk it returns is checked again against the
    store's access table, as ragdx's own channels are (an unreadable one is removed and logged).
    A chunk id the store does not hold is an error naming the channel and the id.

    Args:
        store: the store holding the chunks.
        search: the function.
        name: the channel's name in traces.
        top_k: how many candidates to ask for.
        config: settings to record in traces (the function's own, if any).
    """

    kind = StageKind.RETRIEVAL

    def __init__(self, store: Store, search: Callable[[Query, int], Sequence[tuple[str, float]]], *,
                 name: str = "custom", top_k: int = 100, config: Mapping[str, object] | None = None) -> None:
        self.store, self.search, self.name, self.top_k = store, search, name, top_k
        self._config = dict(config or {})

    @property
    def config(self) -> dict[str, object]:
        return {"top_k": self.top_k, "function": getattr(self.search, "__qualname__", repr(self.search))} \
            | self._config

    def deeper(self, top_k: int, exact: bool = False) -> "FunctionRetriever":
        """The same function, asked for ``top_k`` candidates (``exact`` is the function's own
        business: it is asked as it is)."""
        return FunctionRetriever(self.store, self.search, name=self.name, top_k=top_k, config=self._config)

    def run(self, query: Query) -> Ranked:
        started = time.perf_counter()
        hits = list(self.search(query, self.top_k))[: self.top_k]
        chunks = self.store.chunks_by_id([chunk_id for chunk_id, _ in hits])
        unknown = [chunk_id for chunk_id, _ in hits if chunk_id not in chunks]
        if unknown:
            raise InputError(f"retriever {self.name!r} returned chunk id {unknown[0]!r}, which the store does "
                             f"not hold ({len(unknown)} unknown of {len(hits)}), for query {query.id!r}")
        found = readable_only(self.store, query.principal, self.name, query.id,
                              [(chunks[chunk_id], float(score)) for chunk_id, score in hits])
        items = tuple(Candidate(c.id, c.doc_id, c.version, c.start, c.end, rank, score,
                                (Provenance(self.name, rank, score),))
                      for rank, (c, score) in enumerate(found, start=1))
        return Ranked(self.name, self.kind, items, (), self.config, time.perf_counter() - started)

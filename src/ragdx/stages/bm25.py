"""The lexical channel: Okapi BM25 through SQLite FTS5's ``bm25()``.

Robertson & Zaragoza, "The Probabilistic Relevance Framework: BM25 and Beyond", Foundations and
Trends in IR 3(4), 2009. FTS5 fixes k1 = 1.2 and b = 0.75 and weighs columns (here the chunk's
retrieval prefix and its text). A question is matched with OR semantics over its terms (FTS5's
implicit operator is AND, which would demand every word of a natural-language question), and
every term is quoted, so no question can carry FTS5 syntax (``"``, ``*``, ``NEAR``, ``-``, ``:``,
``AND``/``OR``/``NOT``, parentheses) into the query.
"""

from __future__ import annotations

import re
import time

from ragdx.stages._access import readable_only
from ragdx.protocols import Store
from ragdx.types import Candidate, Provenance, Query, Ranked, StageKind, VersionFilter

# unicode61 splits on everything that is not a letter or a digit (underscore included)
_TERM = re.compile(r"[^\W_]+")


def query_terms(text: str) -> list[str]:
    """The distinct terms of a question, in order, as FTS5's unicode61 tokenizer splits them."""
    seen: dict[str, None] = {}
    for term in _TERM.findall(text):
        seen.setdefault(term.lower(), None)
    return list(seen)


class BM25Retriever:
    """BM25 over the store's FTS5 index, filtered by the principal's access groups.

    Args:
        store: the store (its FTS5 index is kept in step with every change, in the same
            transaction).
        top_k: how many candidates to return.
        prefix_weight: bm25() weight of the chunk's retrieval prefix (title, headings).
        text_weight: bm25() weight of the chunk's text.
        name: the channel's name in traces.
        current_only: search the versions in force and those the question names (False: all).
    """

    kind = StageKind.RETRIEVAL

    def __init__(self, store: Store, *, top_k: int = 100, prefix_weight: float = 0.5,
                 text_weight: float = 1.0, name: str = "bm25", current_only: bool = True) -> None:
        self.store = store
        self.current_only = current_only
        self.top_k = top_k
        self.weights = (prefix_weight, text_weight)
        self.name = name

    @property
    def config(self) -> dict[str, object]:
        return {"top_k": self.top_k, "prefix_weight": self.weights[0], "text_weight": self.weights[1],
                **self.store.bm25_config, "versions": "current and named" if self.current_only else "all"}

    def deeper(self, top_k: int, exact: bool = False) -> "BM25Retriever":
        """The same channel, returning ``top_k`` candidates (its search is exact either way)."""
        return BM25Retriever(self.store, top_k=top_k, prefix_weight=self.weights[0],
                             text_weight=self.weights[1], name=self.name, current_only=self.current_only)

    def run(self, query: Query) -> Ranked:
        """Rank the readable chunks for ``query.question``."""
        started = time.perf_counter()
        found = self.store.bm25(query_terms(query.question), query.principal.groups, self.top_k, self.weights,
                                VersionFilter.for_question(query.question, current_only=self.current_only,
                                                            known=self.store.version_labels()))
        found = readable_only(self.store, query.principal, self.name, query.id, found)
        items = tuple(
            Candidate(c.id, c.doc_id, c.version, c.start, c.end, rank, score,
                      (Provenance(self.name, rank, score),))
            for rank, (c, score) in enumerate(found, start=1))
        return Ranked(self.name, self.kind, items, (), self.config, time.perf_counter() - started)

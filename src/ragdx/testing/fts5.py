"""FTS5's tokens for questions, and bm25s configured as FTS5's ``bm25()``: the reference that
ragdx's BM25 channel is checked against (tests/parity) and benchmarked against
(bench/retrieval/bm25_vs_bm25s.py). Needs the ``parity`` extra (PyStemmer, bm25s). The tokenizer itself,
FTS5's ``porter unicode61 remove_diacritics 2`` in Python, is :mod:`ragdx.store.tokens`
(re-exported here).
"""

from __future__ import annotations

from typing import Any

from ragdx.errors import MissingExtraError
from ragdx.stages.bm25 import query_terms
from ragdx.store.sqlite import FTS_BM25_B, FTS_BM25_K1
from ragdx.store.tokens import fold, fts5_porter, fts5_tokens

__all__ = ["fold", "fts5_porter", "fts5_tokens", "fts5_query_tokens", "indexed_fields",
           "reference_bm25"]


def fts5_query_tokens(question: str) -> list[str]:
    """One token per phrase of ragdx's MATCH expression: the question's distinct raw terms, each
    tokenized. Two terms with one stem ("run running") stay two phrases, counted twice, in FTS5
    and bm25s alike."""
    return [token for term in query_terms(question) for token in fts5_tokens(term)]


def indexed_fields(db_path: Any) -> tuple[dict[tuple[int, str], list[str]], list[int]]:
    """FTS5's own tokens of a store's chunks, read from its index (``fts5vocab``): ``(rowid,
    column) -> terms in order``, and the chunk rowids in order. What :func:`fts5_tokens` must match."""
    import sqlite3
    db = sqlite3.connect(str(db_path))
    try:
        db.execute("CREATE VIRTUAL TABLE temp.vocab USING fts5vocab(main, 'chunks_fts', 'instance')")
        indexed: dict[tuple[int, str], list[tuple[int, str]]] = {}
        for term, rowid, column, offset in db.execute("SELECT term, doc, col, offset FROM temp.vocab"):
            indexed.setdefault((rowid, column), []).append((offset, term))
        rowids = [r for (r,) in db.execute("SELECT rowid FROM chunks ORDER BY rowid")]
    finally:
        db.close()
    return {key: [term for _, term in sorted(terms)] for key, terms in indexed.items()}, rowids


def reference_bm25(dtype: str = "float64", *, idf_floor: float | None = None, **options: Any) -> Any:
    """bm25s configured as FTS5's bm25(): ATIRE's term-frequency part (with k1 + 1), Robertson's
    idf, k1 = 1.2, b = 0.75.

    As bm25s ships, one formula difference remains: it sets an idf that is not positive (a term in
    half the rows or more) to 0 where FTS5 uses 1e-6. ``idf_floor=1e-6`` gives bm25s FTS5's floor
    too (:data:`ragdx.store.keyword.IDF_FLOOR`), so the two compute one formula and may differ
    only by arithmetic; None keeps bm25s's own idf."""
    try:
        import bm25s
    except ImportError:
        raise MissingExtraError("parity", "the bm25s reference") from None
    if idf_floor is None:
        return bm25s.BM25(method="atire", idf_method="robertson", k1=FTS_BM25_K1, b=FTS_BM25_B,
                          dtype=dtype, **options)
    return _floored_bm25(bm25s, idf_floor)(method="atire", idf_method="robertson", k1=FTS_BM25_K1,
                                           b=FTS_BM25_B, dtype=dtype, **options)


def _floored_bm25(bm25s: Any, floor: float) -> type:
    """A bm25s.BM25 whose Robertson idf is floored at ``floor`` where it is not positive, as
    FTS5's is. bm25s looks its idf function up by name while it builds the index; the subclass
    swaps that look-up for the build alone."""
    import math

    def idf(df: int, N: int) -> float:
        value = math.log((N - df + 0.5) / (df + 0.5))
        return value if value > 0 else floor

    class FlooredBM25(bm25s.BM25):
        def build_index_from_ids(self, *args: Any, **kwargs: Any) -> Any:
            select = bm25s._select_idf_scorer
            bm25s._select_idf_scorer = lambda method: idf
            try:
                return super().build_index_from_ids(*args, **kwargs)
            finally:
                bm25s._select_idf_scorer = select

    return FlooredBM25

"""FTS5's tokens for questions, and bm25s configured as FTS5's ``bm25()``: the reference that
ragdx's BM25 channel is checked against (tests/parity) and benchmarked against
(bench/bm25_vs_bm25s.py). Needs the ``parity`` extra (PyStemmer, bm25s). The tokenizer itself,
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


def reference_bm25(dtype: str = "float64", **options: Any) -> Any:
    """bm25s configured as FTS5's bm25(): ATIRE's term-frequency part (with k1 + 1), Robertson's
    idf, k1 = 1.2, b = 0.75. The one formula difference: bm25s sets a negative idf to 0 where
    FTS5 uses 1e-6."""
    try:
        import bm25s
    except ImportError:
        raise MissingExtraError("parity", "the bm25s reference") from None
    return bm25s.BM25(method="atire", idf_method="robertson", k1=FTS_BM25_K1, b=FTS_BM25_B,
                      dtype=dtype, **options)

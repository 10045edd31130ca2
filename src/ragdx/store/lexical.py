"""The keyword channel in the stores: BM25 as FTS5's ``bm25()`` scores it (Robertson & Zaragoza,
"The Probabilistic Relevance Framework: BM25 and Beyond", 2009, in FTS5's variant:
``fts5Bm25Function``), with the access and version filters inside the search.

- SQLite: FTS5 holds the index; a posting matrix mirrored from it
  (:class:`~ragdx.store.keyword.KeywordIndex`) answers outside a write transaction, and FTS5
  itself (:func:`sqlite_fts5_bm25`) inside one and for terms it splits into several tokens.
- PostgreSQL: the same tokens (:mod:`ragdx.store.tokens`), N, avgdl and document frequencies
  kept exact by triggers (``term_df``, ``term_delta``, ``corpus``), scored from the ``postings``
  arrays with MaxScore pruning (:func:`_pg_bm25`). PostgreSQL's ``ts_rank`` is not used: it is
  no BM25.
"""

from __future__ import annotations

import functools
import logging
import sqlite3
import threading
import time
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ragdx.errors import StoreError
from ragdx.store import documents
from ragdx.store.keyword import IDF_FLOOR, KeywordIndex, fts5_idf, reload_all
from ragdx.store.tokens import fts5_tokens
from ragdx.types import Chunk, DocStatus, VersionFilter

if TYPE_CHECKING:
    from ragdx.store.postgres import PostgresStore
    from ragdx.store.sqlite import SQLiteStore

log = logging.getLogger("ragdx.store")


#: FTS5's tokenizer for the BM25 channel: Porter stemming over Unicode 6.1 word characters.
FTS_TOKENIZER = "porter unicode61 remove_diacritics 2"
#: FTS5's bm25() uses these constants; they cannot be changed from SQL (recorded in manifests).
FTS_BM25_K1 = 1.2
FTS_BM25_B = 0.75


#: FTS5 replaces an idf <= 0 (a term in more than half the rows) by this.
FTS5_MIN_IDF = IDF_FLOOR  # fts5_idf's floor (store/keyword.py), under the name tests know


def match_expression(terms: Sequence[str]) -> str | None:
    """An FTS5 MATCH expression: every term quoted as a string, joined by OR (FTS5's implicit
    operator is AND, which would demand every word of a question); None if there is no term.
    Quoting means no question can carry FTS5 syntax (``"``, ``*``, ``NEAR``, ``-``, ``:``,
    ``AND``/``OR``/``NOT``, parentheses) into the query."""
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms) if terms else None


class _Tokenizer:
    """The store's FTS5 tokenizer on any text: an in-memory FTS5 table, kept for the process."""

    def __init__(self) -> None:
        self._db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        self._db.execute(f"CREATE VIRTUAL TABLE t USING fts5(x, tokenize='{FTS_TOKENIZER}')")
        self._db.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
        self._lock = threading.Lock()

    def __call__(self, texts: Sequence[str]) -> dict[str, tuple[str, ...]]:
        """Each text's tokens in order."""
        tokens: dict[int, list[tuple[int, str]]] = {}
        with self._lock:
            self._db.execute("BEGIN")
            try:
                self._db.executemany("INSERT INTO t (rowid, x) VALUES (?, ?)", enumerate(texts))
                for term, doc, offset in self._db.execute("SELECT term, doc, offset FROM v"):
                    tokens.setdefault(doc, []).append((offset, term))
            finally:
                self._db.execute("ROLLBACK")
        return {text: tuple(t for _, t in sorted(tokens.get(i, []))) for i, text in enumerate(texts)}


@functools.lru_cache(maxsize=1)
def _tokenizer() -> _Tokenizer:
    return _Tokenizer()



class _Postings:
    """One term's postings: the rows holding it (ascending), its frequency in each row's prefix
    and text, and each row's length, stored as little-endian arrays (``bytea``: int64 rows,
    int32 pairs of frequencies, int32 lengths)."""

    __slots__ = ("rowids", "freqs", "lengths")

    def __init__(self, rowids: np.ndarray, freqs: np.ndarray, lengths: np.ndarray) -> None:
        self.rowids, self.freqs, self.lengths = rowids, freqs, lengths

    @staticmethod
    def encode(hits: list[tuple[int, int, int, int]]) -> tuple[bytes, bytes, bytes]:
        """``(rowid, in prefix, in text, length)`` per row as the three arrays."""
        hits.sort()
        table = np.asarray(hits, dtype=np.int64)
        return (table[:, 0].astype("<i8").tobytes(), table[:, 1:3].astype("<i4").tobytes(),
                table[:, 3].astype("<i4").tobytes())

    def encoded(self) -> tuple[bytes, bytes, bytes]:
        return (self.rowids.astype("<i8").tobytes(), self.freqs.astype("<i4").tobytes(),
                self.lengths.astype("<i4").tobytes())

    @classmethod
    def decode(cls, rowids: bytes, freqs: bytes, lengths: bytes) -> "_Postings":
        return cls(np.frombuffer(rowids, "<i8"), np.frombuffer(freqs, "<i4").reshape(-1, 2),
                   np.frombuffer(lengths, "<i4"))

    @classmethod
    def concat(cls, lists: Sequence["_Postings"]) -> "_Postings":
        """One list of several segments' or parts' (each row is in one of them)."""
        if len(lists) == 1:
            return lists[0]
        rowids = np.concatenate([p.rowids for p in lists])
        order = np.argsort(rowids, kind="stable")
        return cls(rowids[order], np.concatenate([p.freqs for p in lists])[order],
                   np.concatenate([p.lengths for p in lists])[order])

    def keep(self, live: np.ndarray) -> "_Postings":
        """Only the rows in ``live`` (sorted)."""
        at = np.minimum(np.searchsorted(live, self.rowids), max(live.size - 1, 0))
        mask = live[at] == self.rowids if live.size else np.zeros(self.rowids.size, bool)
        return _Postings(self.rowids[mask], self.freqs[mask], self.lengths[mask])


def sqlite_keyword_statistics(self: SQLiteStore, terms: Sequence[str]) -> tuple[int, float, dict[str, int]]:
    """What FTS5's ``bm25()`` scores with: the index's row count, its average row length in
    tokens (every column), and how many rows hold each of ``terms`` (tokens as the index holds
    them). A cache asks, to score a changed document's chunks for a cached question."""
    self._db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.ragdx_cache_vocab USING "
                     "fts5vocab(main, 'chunks_fts', 'row')")
    version = self.index_version
    if self._token_total[0] != version:
        total = self._db.execute("SELECT COALESCE(SUM(cnt), 0) FROM temp.ragdx_cache_vocab").fetchone()[0]
        self._token_total = (version, total)
    rows = self._db.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
    found = {t: self._db.execute("SELECT doc FROM temp.ragdx_cache_vocab WHERE term = ?", (t,)).fetchone()
             for t in dict.fromkeys(terms)}
    return rows, self._token_total[1] / max(rows, 1), {t: r[0] if r else 0 for t, r in found.items()}


def sqlite_document_frequency(self: SQLiteStore, words: Sequence[str]) -> tuple[int, dict[str, int]]:
    """How many documents the store holds (any version or status), and for each of ``words``
    how many of them have a chunk holding it. A word FTS5 indexes as several tokens, or none,
    counts 0."""
    self._db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.ragdx_instance_vocab USING "
                     "fts5vocab(main, 'chunks_fts', 'instance')")
    total = self._db.execute("SELECT COUNT(DISTINCT doc_id) FROM documents").fetchone()[0]
    found = {}
    split = _tokenizer()(list(dict.fromkeys(words)))  # FTS5's own tokens (no PyStemmer needed)
    for word in dict.fromkeys(words):
        tokens = split[word]
        found[word] = 0 if len(tokens) != 1 else self._db.execute(
            "SELECT COUNT(DISTINCT c.doc_id) FROM temp.ragdx_instance_vocab v JOIN chunks c ON c.rowid = v.doc "
            "WHERE v.term = ?", (tokens[0],)).fetchone()[0]
    return int(total), found


def pg_document_frequency(self: PostgresStore, words: Sequence[str]) -> tuple[int, dict[str, int]]:
    """:func:`sqlite_document_frequency` on PostgreSQL: the parts hold whole documents (they are
    partitioned by ``doc_id``), so their counts add up."""
    total = sum(int(n) for n, in self._fan(lambda sfx: f"SELECT count(DISTINCT doc_id) FROM {{s}}.documents{sfx}", {}))
    found = {}
    for word in dict.fromkeys(words):
        tokens = fts5_tokens(word)
        found[word] = 0 if len(tokens) != 1 else sum(int(n) for n, in self._fan(
            lambda sfx: f"SELECT count(DISTINCT doc_id) FROM {{s}}.chunks{sfx} WHERE tf ? %(t)s",
            {"t": tokens[0]}))
    return total, found


def sqlite_bm25(self: SQLiteStore, terms: Sequence[str], groups: tuple[str, ...], limit: int,
                weights: tuple[float, float] = (0.5, 1.0),
                versions: VersionFilter | None = None) -> list[tuple[Chunk, float]]:
    """BM25 search among the chunks the groups may read: the best ``limit`` readable chunks,
    ranked and scored as FTS5's ``bm25()`` ranks them (:meth:`fts5_bm25`), with the access
    and version filters inside the search. Scores are ``-bm25()``: higher is better; ties go
    to the older row.

    The search runs on a posting matrix mirrored from FTS5's index
    (:class:`~ragdx.store.keyword.KeywordIndex`), checked against the store's
    ``index_version`` in the query's own read transaction and brought up to date before it
    answers, so a change committed by any process is in the next query's N, lengths and
    document frequencies. Inside this store's own write transaction, or for a term FTS5
    splits into several tokens, FTS5 answers itself.

    Args:
        terms: the query's terms, matched with OR semantics (:func:`match_expression`).
        groups: the principal's access groups.
        limit: how many to return.
        weights: bm25() column weights for the prefix and the text (a weight scales term
            frequency; lengths and document frequencies count every column).
        versions: which versions may be returned (None: every version).
    """
    if not terms:
        return []
    with self._lock:
        if self._in_tx:  # our uncommitted writes: only FTS5 sees them
            return self.fts5_bm25(terms, groups, limit, weights, versions)
        self._db.execute("BEGIN")  # one snapshot for the generation, the search and the rows
        try:
            index = self._keyword_index()
            tokens = self._query_tokens(terms)
            if tokens is None:
                return self.fts5_bm25(terms, groups, limit, weights, versions)
            allowed = self._search_mask(index, groups, versions)
            hits = index.search(index.phrases(tokens), weights, allowed, limit)
            return self._hit_chunks(hits)
        finally:
            self._db.execute("COMMIT")


def pg_bm25(self: PostgresStore, terms: Sequence[str], groups: tuple[str, ...], limit: int,
            weights: tuple[float, float] = (0.5, 1.0),
            versions: VersionFilter | None = None) -> list[tuple[Chunk, float]]:
    """:meth:`_bm25` among the versions the filter allows (every version when None)."""
    return self._with_versions(lambda n: self._bm25(terms, groups, n, weights), limit, versions)


def sqlite_fts5_bm25(self: SQLiteStore, terms: Sequence[str], groups: tuple[str, ...], limit: int,
                     weights: tuple[float, float] = (0.5, 1.0),
                     versions: VersionFilter | None = None) -> list[tuple[Chunk, float]]:
    """:meth:`bm25` answered by FTS5 itself (``MATCH`` and ``bm25()`` in SQL): the reference
    the posting matrix is checked against.

    FTS5 ranks its matches; unreadable ones are skipped, fetching four times deeper until
    ``limit`` readable ones are found or the matches run out.
    """
    match = match_expression(terms)
    if match is None:
        return []
    allowed = self.readable_rowids(groups, versions)
    fetch = max(limit * 4, 64)
    while True:
        rows = self._db.execute(
            "SELECT rowid, -bm25(chunks_fts, ?, ?) AS score FROM chunks_fts WHERE chunks_fts "
            "MATCH ? ORDER BY score DESC, rowid LIMIT ?", (*weights, match, fetch)).fetchall()
        hits = [(rowid, score) for rowid, score in rows if rowid in allowed][:limit]
        if len(hits) == limit or len(rows) < fetch:
            break
        fetch *= 4
    return self._hit_chunks(hits)


def _sqlite_hit_chunks(self: SQLiteStore, hits: list[tuple[int, float]]) -> list[tuple[Chunk, float]]:
    columns = documents.SQLITE_CHUNK_COLUMNS_C
    by_rowid = {}
    for i in range(0, len(hits), 500):
        batch = [rowid for rowid, _ in hits[i:i + 500]]
        for row in self._db.execute(f"SELECT c.rowid, {columns} FROM chunks c WHERE c.rowid IN "
                                    f"({','.join('?' * len(batch))})", batch):
            by_rowid[row[0]] = self._chunk_row(row[1:])
    return [(by_rowid[rowid], score) for rowid, score in hits]


def _sqlite_keyword_index(self: SQLiteStore) -> KeywordIndex:
    """The posting matrix at the store's current generation (call inside a read transaction)."""
    generation = self.index_version
    index = self._keyword
    if index is not None and index.generation != generation and reload_all(self.log_entries(index.log_seq)):
        index = None  # an index version was switched: every chunk is new
    if index is not None and index.generation != generation:
        try:
            index.patch(self._db, generation, FTS_TOKENIZER)
        except StoreError as exc:  # the log did not name every change: read it all again
            log.warning("%s: rebuilding the keyword index (%s)", self.path, exc)
            index = None
    if index is None:
        index = self._keyword = KeywordIndex.build(self._db, generation, FTS_BM25_K1, FTS_BM25_B)
    return index


def _sqlite_query_tokens(self: SQLiteStore, terms: Sequence[str]) -> list[str | None] | None:
    """Each term's FTS5 token (None: it has none), or None if a term has several (a phrase
    the posting matrix does not match)."""
    missing = [t for t in dict.fromkeys(terms) if t not in self._token_cache]
    if missing:
        if len(self._token_cache) > 100_000:
            self._token_cache.clear()
        self._token_cache.update(_tokenizer()(missing))
    found = [self._token_cache[t] for t in terms]
    if any(len(tokens) > 1 for tokens in found):
        return None
    return [tokens[0] if tokens else None for tokens in found]


def _sqlite_search_mask(self: SQLiteStore, index: KeywordIndex, groups: tuple[str, ...],
                        versions: VersionFilter | None) -> Any:
    """The mirror's rows these groups may read and the filter allows (cached for the
    generation: per groups, and per set of versions the question names)."""
    who = tuple(sorted(set(groups)))
    readable = index.cached(("acl", who), lambda: index.key_mask(self._readable_versions(who)))
    if versions is None or not versions.current_only:
        return index.cached(("rows", who), lambda: index.row_mask(readable))
    current, others = index.cached(("status",), lambda: self._status_masks(index))
    named = tuple(i for i, version in others if versions.names(version)) if versions.named else ()
    def make() -> Any:
        flags = current.copy()
        flags[list(named)] = True
        return index.row_mask(readable & flags)
    return index.cached(("rows", who, named), make)


def _sqlite_status_masks(self: SQLiteStore, index: KeywordIndex) -> tuple[Any, list[tuple[int, str]]]:
    """The mirror's current versions as flags, and its other versions (index, label)."""
    rows = self._db.execute("SELECT doc_id, version, status FROM documents").fetchall()
    current = index.key_mask((d, v) for d, v, status in rows if status == DocStatus.CURRENT.value)
    others = [(index.key_ids[(d, v)], v) for d, v, status in rows
              if status != DocStatus.CURRENT.value and (d, v) in index.key_ids]
    return current, others


def bm25_config(self: SQLiteStore | PostgresStore) -> dict[str, object]:
    """How the keyword channel scores: FTS5's tokenizer, k1 and b (FTS5 fixes them; PostgreSQL
    computes them in SQL), with OR semantics."""
    return {"tokenizer": FTS_TOKENIZER, "k1": FTS_BM25_K1, "b": FTS_BM25_B, "operator": "OR"}


def pg_bm25_statistics(self: PostgresStore, tokens: Sequence[str]) -> tuple[int, int, dict[str, int]]:
    """The BM25 statistics over every part: rows, tokens, and rows holding each token."""
    # every commit leaves term_delta empty: only the writing transaction has deltas to add
    writing = self._writing()
    if not writing:
        n_rows = n_tokens = 0
        df: dict[str, int] = {}
        for term, n, tokens in self._fan(
                lambda sfx: f"SELECT NULL::text, n_rows, n_tokens FROM {{s}}.corpus{sfx} UNION ALL "
                f"SELECT term, df, 0 FROM {{s}}.term_df{sfx} WHERE term = ANY(%(t)s)", {"t": sorted(set(tokens))}):
            if term is None:
                n_rows, n_tokens = n_rows + n, n_tokens + tokens
            else:
                df[term] = df.get(term, 0) + n
        return int(n_rows), int(n_tokens), {t: int(n) for t, n in df.items() if n > 0}
    n_rows, n_tokens = self._one("SELECT coalesce(sum(n_rows), 0), coalesce(sum(n_tokens), 0) "
                                 "FROM {s}.corpus")
    delta = " UNION ALL SELECT term, df FROM {s}.term_delta WHERE term = ANY(%(t)s)" if writing else ""
    df = dict(self._all("SELECT term, sum(df) FROM (SELECT term, df FROM {s}.term_df WHERE term = "
                        f"ANY(%(t)s){delta}) d GROUP BY term HAVING sum(df) > 0",
                        {"t": sorted(set(tokens))}))
    return int(n_rows), int(n_tokens), {t: int(n) for t, n in df.items()}


def _pg_with_versions(self: PostgresStore, search: Any, limit: int, versions: VersionFilter | None) -> list[tuple[Chunk, float]]:
    """``search(n)``'s best ``limit`` hits of the versions the filter allows: the search runs
    deeper (x4 each time) until it has enough of them or runs out. ``search`` yields (chunk,
    score, its version's status), the status read with the chunk row (statuses live in their
    own table, never on the chunk rows, so a status change rewrites no indexed row)."""
    if versions is None or not versions.current_only:
        return [(c, score) for c, score, _ in search(limit)]
    fetch = limit
    while True:
        found = search(fetch)
        kept = [(c, score) for c, score, status in found if versions.allows(c.version, status)]
        if len(kept) >= limit or len(found) < fetch:
            return kept[:limit]
        fetch *= 4


def _pg_bm25(self: PostgresStore, terms: Sequence[str], groups: tuple[str, ...], limit: int,
             weights: tuple[float, float] = (0.5, 1.0)) -> list[tuple[Chunk, float, str]]:
    """BM25 among the chunks the groups may read, as FTS5's ``bm25()`` scores it: the best
    ``limit`` readable, non-duplicate chunks holding any term, higher scores first, ties to
    the older row.

    Each term of the question is one phrase (its FTS5 tokens); a phrase's idf is
    ``log((N - n + 0.5) / (n + 0.5))`` (1e-6 where that is <= 0) over every row, and its
    frequency in a row adds each column's weight per occurrence.

    Scored from the postings with MaxScore pruning (Turtle & Flood, "Query evaluation:
    strategies and optimizations", IP&M 31(6), 1995): a phrase adds less than
    ``idf * (k1 + 1)`` to any row, so the most frequent phrases, whose bounds add up to less
    than the ``limit``-th best readable score of the others, cannot bring a row into the
    top on their own. Their postings (the longest) are never read: only the rows that the
    other phrases put within their bounds of the top get their frequencies, from the
    chunks' ``tf``. The final scores are computed phrase by phrase in the query's order,
    as FTS5 adds them, so they are its floats.

    Args:
        terms: the query's terms (OR).
        groups: the principal's access groups.
        limit: how many to return.
        weights: the prefix's and the text's weights on term frequencies.

    Returns:
        (chunk, score, its version's status) per hit, best first.
    """
    phrases = [token for term in terms for token in fts5_tokens(term)]
    if not phrases or not groups or limit <= 0:
        return []
    sent: dict[str, _Postings] | None = None
    if self._writing():
        self._flush()
        n_rows, n_tokens, df = self.bm25_statistics(phrases)
    else:
        n_rows, n_tokens, df, sent, unsent = self._statistics_and_postings(phrases, limit)
    present = [t for t in dict.fromkeys(phrases) if df.get(t)]
    if not n_rows or not present:
        return []
    avgdl = n_tokens / n_rows
    idf = {t: fts5_idf(n_rows, df[t]) for t in present}
    k1 = FTS_BM25_K1
    # a phrase's bound, once per occurrence in the query; the rarest phrases are read first
    bound = {t: idf[t] * (k1 + 1.0) * phrases.count(t) for t in present}
    skipped: list[str] = []
    if min(weights) >= 0:
        held = 0.0
        for t in sorted(present, key=lambda t: (-df[t], t)):
            # a phrase held by over an eighth of the rows is worth skipping
            if df[t] * 8 < n_rows or df[t] < 4 * limit or len(skipped) == len(present) - 1:
                break
            held += bound[t]
            skipped.append(t)
    read = [t for t in present if t not in skipped]
    if sent is None:
        postings = self._postings(read)
    else:  # what the statistics' statement sent, and the rest of what is read
        postings = {t: sent[t] for t in read if t in sent and t not in unsent}
        if missing := [t for t in read if t in unsent]:
            postings.update(self._postings(missing))
    checked: dict[int, tuple[Chunk, str] | None] = {}  # rowid -> (chunk, status) if readable
    if skipped:
        rows, partial = self._score(postings, phrases, idf, weights, avgdl)
        top = self._readable_top(rows, partial, limit, groups, checked)
        theta = float(partial[np.searchsorted(rows, top[-1])]) if len(top) == limit else 0.0
        margin = sum(bound[t] for t in skipped) * (1 + 1e-9)
        if theta > margin:
            keep = (partial + margin) * (1 + 1e-12) >= theta
            rows = rows[keep]
            postings = {t: p.keep(rows) for t, p in postings.items()}
            postings.update(self._postings_of_rows(skipped, rows, postings))
        else:  # the frequent phrases may decide: read them too
            postings.update(self._postings(skipped))
    rows, score = self._score(postings, phrases, idf, weights, avgdl)
    found = self._readable_top(rows, score, limit, groups, checked)
    at = np.searchsorted(rows, found)
    return [(checked[rowid][0], float(score[i]), checked[rowid][1]) for rowid, i in zip(found, at)]


def _pg_statistics_and_postings(self: PostgresStore, tokens: Sequence[str], limit: int
                                ) -> tuple[int, int, dict[str, int], dict[str, _Postings], set[str]]:
    """The BM25 statistics over every part (rows, tokens, rows holding each token), and in the
    same round trip the postings a search will likely read: each part sends a token's postings
    when the token is rare there (MaxScore skips only tokens held by an eighth of the rows
    and by at least ``4 * limit``, see :func:`_pg_bm25`; a part holding about its share of a
    token's rows, it tests its rows times the parts against ``4 * limit``). Which postings are
    sent changes how many round trips a search takes, never its result: the search reads
    what it needs and was not sent. Outside a writing transaction.

    Returns:
        rows, tokens, document frequencies, the postings sent (of a token some part did not
        send: that part's are missing), and the tokens some part holds but did not send.
    """
    terms = sorted(set(tokens))
    n_rows = n_tokens = 0
    df: dict[str, int] = {}
    lists: dict[str, list[_Postings]] = {}
    unsent: set[str] = set()
    # one row per part (term NULL), per part and token (rowids NULL; sent or not), per
    # sent postings segment
    for term, n, k, rowids, freqs, lengths in self._fan(
            lambda sfx: f"WITH d AS (SELECT term, df, df * 8 < (SELECT n_rows FROM {{s}}.corpus{sfx}) "
            f"OR df * %(parts)s < %(few)s AS sent FROM {{s}}.term_df{sfx} WHERE term = ANY(%(t)s)) "
            f"SELECT NULL::text, n_rows, n_tokens, NULL::bytea, NULL::bytea, NULL::bytea FROM {{s}}.corpus{sfx} "
            "UNION ALL SELECT term, df, sent::int::bigint, NULL, NULL, NULL FROM d "
            f"UNION ALL SELECT p.term, -1, 0, p.rowids, p.freqs, p.lengths FROM {{s}}.postings{sfx} p "
            "JOIN d ON d.term = p.term AND d.sent", {"t": terms, "few": 4 * limit, "parts": len(self._parts)},
            binary=True):
        if term is None:
            n_rows, n_tokens = n_rows + n, n_tokens + k
        elif n >= 0:
            df[term] = df.get(term, 0) + n
            if not k and n > 0:
                unsent.add(term)
        else:
            lists.setdefault(term, []).append(_Postings.decode(rowids, freqs, lengths))
    postings = {term: _Postings.concat(found) for term, found in lists.items()}
    return int(n_rows), int(n_tokens), {t: int(n) for t, n in df.items() if n > 0}, postings, unsent


def _pg_postings(self: PostgresStore, tokens: list[str]) -> dict[str, _Postings]:
    """The postings of these tokens, over every segment and part."""
    if not tokens:
        return {}
    lists: dict[str, list[_Postings]] = {}
    for term, rowids, freqs, lengths in self._fan(
            lambda sfx: f"SELECT term, rowids, freqs, lengths FROM {{s}}.postings{sfx} WHERE term = ANY(%(t)s)",
            {"t": tokens}, binary=True):
        lists.setdefault(term, []).append(_Postings.decode(rowids, freqs, lengths))
    return {term: _Postings.concat(found) for term, found in lists.items()}


def _pg_postings_of_rows(self: PostgresStore, tokens: list[str], rows: np.ndarray,
                         known: dict[str, _Postings]) -> dict[str, _Postings]:
    """The postings of these tokens restricted to these rows, read from the chunks' ``tf``
    (the rows' lengths from ``known``)."""
    if not rows.size:
        return {t: _Postings(rows, np.zeros((0, 2), np.int32), np.zeros(0, np.int32)) for t in tokens}
    length = np.zeros(rows.size, np.int64)
    for p in known.values():
        length[np.searchsorted(rows, p.rowids)] = p.lengths
    picks = ", ".join(f"c.tf -> %(t{i})s" for i in range(len(tokens)))
    args: dict[str, Any] = {"r": rows.tolist(), **{f"t{i}": t for i, t in enumerate(tokens)}}
    found = sorted(self._fan(lambda sfx: f"SELECT c.rowid, {picks} FROM {{s}}.chunks{sfx} c "
                             "WHERE c.rowid = ANY(%(r)s)", args))
    out = {}
    for i, token in enumerate(tokens):
        hits = [(r[0], r[i + 1]) for r in found if r[i + 1] is not None]
        rowids = np.asarray([h[0] for h in hits], np.int64)
        out[token] = _Postings(rowids, np.asarray([h[1] for h in hits], np.int64).reshape(-1, 2),
                               length[np.searchsorted(rows, rowids)])
    return out


def _pg_score(postings: dict[str, _Postings], phrases: list[str], idf: dict[str, float],
              weights: tuple[float, float], avgdl: float) -> tuple[np.ndarray, np.ndarray]:
    """The rows holding any of these postings' tokens (ascending) and their BM25 over those
    tokens, added phrase by phrase in the query's order (FTS5's fts5Bm25Function)."""
    if not postings:
        return np.zeros(0, np.int64), np.zeros(0)
    rows = np.unique(np.concatenate([p.rowids for p in postings.values()]))
    length = np.zeros(rows.size, np.float64)
    for p in postings.values():
        length[np.searchsorted(rows, p.rowids)] = p.lengths
    k1, b = FTS_BM25_K1, FTS_BM25_B
    norm = k1 * (1 - b + b * length / avgdl)
    score = np.zeros(rows.size)
    w = np.asarray(weights, np.float64)
    for token in phrases:
        p = postings.get(token)
        if p is None or not p.rowids.size:
            continue  # a phrase a row does not hold adds 0.0, as in FTS5
        at = np.searchsorted(rows, p.rowids)
        f = np.multiply(p.freqs[:, 0], w[0], dtype=np.float64)
        f += np.multiply(p.freqs[:, 1], w[1], dtype=np.float64)
        score[at] += idf[token] * ((f * (k1 + 1.0)) / (f + norm[at]))
    return rows, score


def _pg_readable_top(self: PostgresStore, rows: np.ndarray, score: np.ndarray, limit: int, groups: tuple[str, ...],
                     checked: dict[int, tuple[Chunk, str] | None]) -> list[int]:
    """The best ``limit`` rows by (score descending, rowid) that still exist, are no
    duplicates and that the groups may read: checked best first, a batch at a time. The
    check reads each readable row's chunk and status too (into ``checked``), in the same
    round trip."""
    want = 2 * limit + 16
    while True:
        n = min(want, rows.size)
        if n < rows.size:
            kth = np.partition(score, rows.size - n)[rows.size - n]
            idx = np.flatnonzero(score >= kth)
        else:
            idx = np.arange(rows.size)
        idx = idx[np.lexsort((rows[idx], -score[idx]))]
        ask = [int(r) for r in rows[idx] if int(r) not in checked]
        if ask:
            ok = {rowid: (chunk, status) for rowid, chunk, status in map(self._hit_row, self._fan(
                lambda sfx: f"SELECT {documents.PG_HIT_COLUMNS} FROM {{s}}.chunks{sfx} c JOIN {{s}}.acl{sfx} a ON "
                "a.doc_id = c.doc_id AND a.version = c.version " + documents.PG_HIT_STATUS.format(sfx=sfx) +
                " WHERE c.rowid = ANY(%(r)s) AND c.duplicate_of IS NULL AND a.groups && %(g)s::text[]",
                {"r": ask, "g": list(groups)}))}
            checked.update((r, ok.get(r)) for r in ask)
        top = [int(r) for r in rows[idx] if checked[int(r)] is not None][:limit]
        if len(top) == limit or n == rows.size:
            return top
        want *= 4


def _pg_fold_statistics(self: PostgresStore, conn: Any) -> None:
    """Fold the writing transaction's term deltas into ``term_df`` (the trigger on
    ``corpus.folds``, on each part's server): once per transaction, not once per document."""
    conn.execute(f"UPDATE {self.schema}.corpus SET folds = folds + 1")


def _pg_flush_postings(self: PostgresStore) -> None:
    """The buffered chunks' postings as one new segment: per part and term, one row of the
    rows holding it (ascending), their frequencies in the prefix and the text, and their
    lengths, written with COPY."""
    pending, self._pending_postings = self._pending_postings, []
    part_of = self._parts_of([rowid for rowid, _, _ in pending])
    by_term: dict[tuple[int, str], list[tuple[int, int, int, int]]] = {}
    for rowid, tf, length in pending:
        part = part_of[rowid]
        for term, (in_prefix, in_text) in tf.items():
            by_term.setdefault((part, term), []).append((rowid, in_prefix, in_text, length))
    seg = self._tx.execute(f"SELECT nextval('{self.schema}.postings_seg')").fetchone()[0]
    sharded = list(self._parts.values()) != [None]
    by_table: dict[str, list[tuple]] = {}
    for (part, term), hits in by_term.items():
        table = f"postings_p{part}" if sharded else "postings"
        by_table.setdefault(table, []).append((part, seg, term, *_Postings.encode(hits)))
    for table, rows in by_table.items():
        with self._tx.cursor().copy(f"COPY {self.schema}.{table} (part, seg, term, rowids, freqs, lengths) "
                                    "FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
    self._changed = True


def _pg_compact_postings(self: PostgresStore, most: int = 16) -> None:
    """Merge the postings' segments into one when there are more than ``most`` (each write
    transaction adds one): the rows of deleted or re-chunked chunks are dropped then."""
    segments = self._one("SELECT count(DISTINCT seg) FROM {s}.postings")[0]
    if segments <= most:
        return
    started = time.perf_counter()
    with self.transaction():
        conn = self._tx
        seg = conn.execute(f"SELECT nextval('{self.schema}.postings_seg')").fetchone()[0]
        for part, server in self._parts.items():
            table = "postings" if server is None else f"postings_p{part}"
            chunks = "chunks" if server is None else f"chunks_p{part}"
            live = np.asarray([r for (r,) in conn.execute(
                f"SELECT rowid FROM {self.schema}.{chunks} WHERE duplicate_of IS NULL")], np.int64)
            merged: dict[str, list[_Postings]] = {}
            for term, rowids, freqs, lengths in conn.execute(
                    f"SELECT term, rowids, freqs, lengths FROM {self.schema}.{table} ORDER BY term, seg",
                    binary=True):
                merged.setdefault(term, []).append(_Postings.decode(rowids, freqs, lengths))
            conn.execute(f"DELETE FROM {self.schema}.{table}")
            with conn.cursor().copy(f"COPY {self.schema}.{table} (part, seg, term, rowids, freqs, lengths) "
                                    "FROM STDIN") as copy:
                for term, lists in merged.items():
                    kept = _Postings.concat(lists).keep(live)
                    if kept.rowids.size:
                        copy.write_row((part, seg, term, *kept.encoded()))
        self._changed = True
    log.info("merged %d postings segments in %.1f s", segments, time.perf_counter() - started)

"""The keyword channel's posting matrix: FTS5's own index of the chunks, mirrored into numpy arrays
and scored at query time with exactly FTS5's ``bm25()``.

Robertson & Zaragoza, "The Probabilistic Relevance Framework: BM25 and Beyond", Foundations and
Trends in IR 3(4), 2009; the formula as SQLite's ``fts5_aux.c`` computes it: for each phrase i of
the query, in order,

    score += idf_i * (f_i * (k1 + 1)) / (f_i + k1 * (1 - b + b * D / avgdl)),
    idf_i = log((N - n_i + 0.5) / (n_i + 0.5)), floored to 1e-6 when not positive,

where f_i is the phrase's column-weighted frequency in the row, D the row's length in tokens
(every column), avgdl the mean length over all N rows of the FTS5 table and n_i the number of rows
holding the phrase. A question's OR expression matches half the rows through its common words, and
FTS5 scores every match; here a first pass chooses the rows that can still reach the top, and
only those are scored in full (float64, phrase by phrase in the query's order), so the top
``limit`` and their scores are FTS5's. The first pass is MaxScore (:meth:`KeywordIndex._max_score`):
a floor under the ``limit``-th score from a few rows of the rarest phrases, then the postings of
only the phrases whose bounds could lift a row past it; when those are too many, one dense pass
over every row with float32 parts, the floor (or the ``limit``-th partial sum) choosing the rows.
The phrases whose idf is floored (they hold at most 1e-6 each) only ever add their bound.

The tokens are FTS5's, read from its index (``fts5vocab``): no tokenizer is re-implemented, so
the matrix holds what SQLite matches. The mirror is bound to the store's ``index_version``: the
store reads it in the same read transaction as the query and, when the store changed (in this
process or another), the documents the update log names since the mirror's last entry are
re-read, re-tokenized by an in-memory FTS5 table with the same tokenizer, and patched in before
the query is answered. N and the total length are then checked against FTS5's own record of them.
Nothing is kept on disk: a killed process loses only its mirror, and the store's atomic commits
are what the next query reads.
"""

from __future__ import annotations

import math
import sqlite3
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from ragdx.errors import StoreError

__all__ = ["KeywordIndex", "IDF_FLOOR", "fts5_idf"]

#: FTS5's floor for a phrase's idf when more than half the rows hold it.
IDF_FLOOR = 1e-6


def fts5_idf(rows: int, hits: int) -> float:
    """FTS5's idf of a phrase held by ``hits`` of ``rows`` rows: ln((N - n + 0.5) / (n + 0.5)),
    :data:`IDF_FLOOR` when that is not positive (fts5_aux.c, ``fts5Bm25GetData``). The keyword
    mirror, the cache's rescoring and the PostgreSQL store's bm25 all use it."""
    value = math.log((rows - hits + 0.5) / (hits + 0.5))
    return value if value > 0.0 else IDF_FLOOR
#: Up to this many postings, a query's first use of a pair of column weights computes every
#: posting's BM25 part at once (4 bytes each: a million chunks hold some 45 M postings); above
#: it, each term's on its first use.
WHOLE_PARTS = 64_000_000
#: The parts are float32, each within a relative 2**-24 of its float64 value: sums of them
#: choose the candidates with this much room (relative), and the candidates are scored again
#: in float64 from the counts, as FTS5 scores them.
SLACK = 1e-6
#: MaxScore scores the rare phrases' postings on their own while they hold at most this share
#: of the rows' count; past it, one dense pass over every row is cheaper.
SPARSE_SHARE = 0.125
#: Postings of rows added by a patch go to a delta segment, merged into the main one when it
#: holds more than this share of the main's postings: an edit then copies the delta, not the
#: tens of millions of postings of a large store (the next query after an edit at a million
#: chunks spent seconds moving them).
DELTA_SHARE = 1 / 16
#: Below this many postings in a query's phrases, the dense pass costs less than MaxScore's fixed
#: cost (a few dozen numpy calls) and decides alone.
MAX_SCORE_POSTINGS = 250_000
_COLUMNS = ("prefix", "text")  # chunks_fts's columns, in FTS5's order (the bm25() weights')


def _varints(blob: bytes) -> list[int]:
    """SQLite's variable-length integers (big-endian groups of 7 bits; a 9th byte holds 8)."""
    out, i = [], 0
    while i < len(blob):
        value = 0
        for j in range(9):
            byte = blob[i]
            i += 1
            if j == 8:
                value = (value << 8) | byte
                break
            value = (value << 7) | (byte & 0x7F)
            if byte < 0x80:
                break
        out.append(value)
    return out


def fts5_totals(db: sqlite3.Connection, table: str = "chunks_fts") -> tuple[int, int]:
    """FTS5's own row count and total length (tokens, every column): its "averages" record."""
    row = db.execute(f"SELECT block FROM {table}_data WHERE id = 1").fetchone()
    if row is None or not row[0]:
        return 0, 0
    values = _varints(bytes(row[0]))
    return values[0], sum(values[1:1 + len(_COLUMNS)])



def key_id(keys: list[tuple[str, str]], ids: dict[tuple[str, str], int], key: tuple[str, str]) -> int:
    """A (doc_id, version) pair's number in ``keys``, appended (and numbered in ``ids``) if new:
    the keyword mirror and the bounded dense index number their rows' versions so."""
    found = ids.get(key)
    if found is None:
        found = ids[key] = len(keys)
        keys.append(key)
    return found


def reload_all(entries: Iterable[Any]) -> bool:
    """The update log's rule, shared by the keyword mirror and the dense channel's bounded index
    (:class:`~ragdx.store.vectors.QuantizedIndex`): an entry naming no document that is not an
    embedding space's (an index version switched in: every chunk is new) means everything is read
    again; any other entry names the documents to read again.

    Args:
        entries: the log's entries (:class:`~ragdx.types.LogEntry`, or anything with ``op`` and ``doc_id``).
    """
    return any(e.doc_id is None and e.op != "space" for e in entries)

@dataclass(frozen=True, slots=True)
class _Postings:
    """Postings of a set of rows: (term, rowid) pairs sorted by term then rowid, with the term's
    count in each column."""

    terms: list[str]
    term: np.ndarray  # index into terms, per posting
    rowid: np.ndarray
    tf: np.ndarray  # (postings, 2): counts in the prefix and the text


def _read_postings(db: sqlite3.Connection, vocab: str) -> _Postings:
    """Every (term, row, column) count of an FTS5 ``instance`` vocabulary table, in one pass over
    its index: the rows of each term are concatenated in SQL, so Python touches terms, not
    token occurrences. Each term's occurrences are reduced to its postings as they arrive, so
    the build never holds the token occurrences (a million chunks hold some 70 M) at once, and
    the postings are kept in 8 bytes each (row ids as int32 while they fit, counts as uint16)
    until they are put together."""
    terms: list[str] = []
    counts: list[int] = []
    rows: list[np.ndarray] = []
    tfs: list[np.ndarray] = []
    wide = False  # a row id beyond int32
    for term, joined in db.execute(
            f"SELECT term, group_concat(doc * 2 + (col = 'text')) FROM {vocab} GROUP BY term"):
        if not joined:
            continue
        cells = np.array(joined.split(","), dtype=np.int64)  # rowid * 2 + column, one per occurrence
        if cells.size > 1 and not bool(np.all(cells[1:] >= cells[:-1])):
            cells.sort()  # group_concat's order is the scan's in practice, not promised
        boundary = np.r_[True, cells[1:] != cells[:-1]]
        cell = cells[boundary]
        n = np.diff(np.r_[np.flatnonzero(boundary), cells.size])
        rowid = cell >> 1
        first = np.r_[True, rowid[1:] != rowid[:-1]]
        tf = np.zeros((int(first.sum()), 2), np.int64)
        tf[np.cumsum(first) - 1, cell & 1] = n
        rowid = rowid[first]
        wide = wide or int(rowid[-1]) > np.iinfo(np.int32).max
        terms.append(term)
        counts.append(rowid.size)
        rows.append(rowid if wide else rowid.astype(np.int32))
        # a term repeated 65,535 times in one field of one chunk: kept exact, in a wider type
        tfs.append(tf.astype(np.uint16) if tf.max() <= np.iinfo(np.uint16).max else tf)
    if not terms:
        return _Postings([], np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, 2), np.int32))
    rowids = np.concatenate(rows, dtype=np.int64)
    rows.clear()
    tf_all = np.concatenate(tfs, dtype=np.int32)
    tfs.clear()
    term = np.repeat(np.arange(len(terms), dtype=np.int32), counts)
    return _Postings(terms, term, rowids, tf_all)


class KeywordIndex:
    """FTS5's index of the chunks as a posting matrix (CSR by term), with each row's length,
    document version and duplicate flag; searched with :meth:`search`.

    Built with :meth:`build` inside a read transaction of the store, and kept current with
    :meth:`patch`.
    """

    def __init__(self, k1: float, b: float) -> None:
        self.k1, self.b = k1, b
        self.generation = -1
        self.log_seq = 0
        self.terms: dict[str, int] = {}
        self.indptr = np.zeros(1, np.int64)
        self.pos = np.zeros(0, np.int32)
        self.tf = np.zeros((2, 0), np.float32)  # per posting: count in the prefix, in the text
        # the delta segment (:data:`DELTA_SHARE`): the same layout, for rows added since the last
        # merge; their positions are above every main posting's, so a term's postings are its
        # main ones then its delta ones, ascending
        self.d_indptr = np.zeros(1, np.int64)
        self.d_pos = np.zeros(0, np.int32)
        self.d_tf = np.zeros((2, 0), np.float32)
        self.rowid = np.zeros(0, np.int64)
        self.length = np.zeros(0, np.int64)
        self.key = np.zeros(0, np.int32)  # index into keys: the row's (doc_id, version)
        self.duplicate = np.zeros(0, bool)
        self.keys: list[tuple[str, str]] = []
        self.key_ids: dict[tuple[str, str], int] = {}
        self.total = 0  # tokens of the live rows
        self.dead = np.zeros(0, bool)  # buried rows: deleted from the store, postings kept for now
        self.buried = 0
        self.patched = False  # changed since it was built
        self._masks: dict[object, Any] = {}  # what is derived from this generation
        self._cached = 0  # postings whose BM25 part is in _masks

    # -- building and patching ------------------------------------------------------------------
    @classmethod
    def build(cls, db: sqlite3.Connection, generation: int, k1: float, b: float) -> "KeywordIndex":
        """The whole mirror from the store (call inside a read transaction)."""
        index = cls(k1, b)
        db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.ragdx_vocab USING "
                   "fts5vocab(main, chunks_fts, 'instance')")
        rows = _chunk_rows(db, "")
        postings = _read_postings(db, "temp.ragdx_vocab")
        index._append(rows, postings)
        index.generation = generation
        index.log_seq = _last_log_seq(db)
        index.check(db)
        return index

    def patch(self, db: sqlite3.Connection, generation: int, tokenizer: str) -> None:
        """Bring the mirror up to ``generation``: the documents the update log names since the
        mirror's last entry are dropped and read again (call inside a read transaction)."""
        entries = db.execute("SELECT seq, doc_id FROM log WHERE seq > ?", (self.log_seq,)).fetchall()
        doc_ids = sorted({doc_id for _, doc_id in entries if doc_id is not None})
        if doc_ids:
            gone = np.zeros(len(self.keys), bool)
            wanted = set(doc_ids)
            gone[[i for i, (doc_id, _) in enumerate(self.keys) if doc_id in wanted]] = True
            self._bury(gone[self.key])
            for i in range(0, len(doc_ids), 500):
                batch = doc_ids[i:i + 500]
                marks = ",".join("?" * len(batch))
                rows = _chunk_rows(db, f"WHERE doc_id IN ({marks})", batch, texts=True)
                self._append(rows, _tokenize(rows, tokenizer))
        self.generation = generation
        self.patched = True
        self.log_seq = max([self.log_seq] + [seq for seq, _ in entries])
        self._masks.clear()
        self._cached = 0
        self.check(db)

    def check(self, db: sqlite3.Connection) -> None:
        """The mirror's N and total length must be FTS5's own, else it disagrees with the store."""
        found = fts5_totals(db)
        if found != (self.rows, self.total):
            raise StoreError(f"the keyword index mirror ({self.rows} rows, {self.total} tokens) "
                             f"disagrees with FTS5 ({found[0]} rows, {found[1]} tokens)")

    @property
    def rows(self) -> int:
        """N: the rows of the FTS5 table (the live ones)."""
        return self.rowid.size - self.buried

    def _bury(self, gone: np.ndarray) -> None:
        """Take the rows (positions) flagged in ``gone`` out of every statistic and result, at
        the cost of their number (their postings stay until an eighth of the rows are buried,
        then :meth:`_compact` drops them all at once)."""
        gone = gone & ~self.dead
        if not gone.any():
            return
        self.dead |= gone
        self.buried += int(gone.sum())
        self.total -= int(self.length[gone].sum())
        if self.buried * 8 > self.rowid.size:
            self._compact()

    def _compact(self) -> None:
        """Drop the buried rows and their postings; positions keep their order."""
        self._merge()
        keep_row = ~self.dead
        remap = np.cumsum(keep_row) - 1
        keep = keep_row[self.pos]
        kept = np.r_[0, np.cumsum(keep)]
        self.indptr = kept[self.indptr]
        self.pos = remap[self.pos[keep]].astype(np.int32)
        self.tf = self.tf[:, keep]
        self.rowid, self.length = self.rowid[keep_row], self.length[keep_row]
        self.dead, self.buried = np.zeros(self.rowid.size, bool), 0
        self.key, self.duplicate = self.key[keep_row], self.duplicate[keep_row]

    def _append(self, rows: "_Rows", postings: _Postings) -> None:
        """Add rows (new positions after the existing ones) and their postings."""
        if not rows.rowid.size:
            return
        order = np.argsort(rows.rowid, kind="stable")
        rowid = rows.rowid[order]
        at = np.searchsorted(rowid, postings.rowid)
        if postings.rowid.size and (at.max() >= rowid.size or np.any(rowid[at] != postings.rowid)):
            raise StoreError("the keyword index holds rows the chunks table does not: the store's "
                             "FTS5 index is damaged ('ragdx verify' says more)")
        base = self.rowid.size
        length = np.zeros(rowid.size, np.int64)
        for column in (0, 1):  # one column at a time: no per-posting sum of both held at once
            length += np.bincount(at, weights=postings.tf[:, column], minlength=rowid.size).astype(np.int64)
        at += base  # each posting's position in the index (in place: tens of millions of postings)
        key_ids = np.fromiter((self._key_id(k) for k in rows.keys), np.int32, len(rows.keys))
        self.rowid = np.r_[self.rowid, rowid]
        self.length = np.r_[self.length, length]
        self.key = np.r_[self.key, key_ids[rows.key[order]]].astype(np.int32)
        self.duplicate = np.r_[self.duplicate, rows.duplicate[order]]
        self.dead = np.r_[self.dead, np.zeros(rowid.size, bool)]
        self.total += int(length.sum())
        # term ids in this index's vocabulary, new terms appended
        ids = np.fromiter((self.terms.setdefault(t, len(self.terms)) for t in postings.terms),
                          np.int64, len(postings.terms))
        if np.array_equal(ids, np.arange(ids.size)):  # a build: the terms are this index's first, in order
            term = postings.term
        else:
            term = ids[postings.term] if postings.term.size else np.zeros(0, np.int64)
        n_terms = len(self.terms)
        if term.size > 1 and not bool(np.all(term[1:] >= term[:-1])):
            order = np.argsort(term, kind="stable")  # already by rowid within a term
            term, pos, tf = term[order], at[order], postings.tf[order]
            del order
        else:  # already in term order (a build reads them so): no copy
            pos, tf = at, postings.tf
        del at
        if self.pos.size:  # a patch: into the delta, merged when it has grown
            self.d_indptr, self.d_pos, self.d_tf = _with_postings(self.d_indptr, self.d_pos, self.d_tf, term, pos,
                                                                  tf.T, n_terms)
            self.indptr = _padded(self.indptr, n_terms)
            if self.d_pos.size > self.pos.size * DELTA_SHARE:
                self._merge()
        else:
            self.indptr, self.pos, self.tf = _with_postings(self.indptr, self.pos, self.tf, term, pos, tf.T, n_terms)
            self.d_indptr = _padded(self.d_indptr, n_terms)

    def _merge(self) -> None:
        """Move the delta segment's postings into the main segment."""
        if not self.d_pos.size:
            return
        n_terms = len(self.terms)
        term = np.repeat(np.arange(n_terms, dtype=np.int64), np.diff(self.d_indptr))
        self.indptr, self.pos, self.tf = _with_postings(self.indptr, self.pos, self.tf, term, self.d_pos,
                                                        self.d_tf, n_terms)
        self.d_indptr = np.zeros(n_terms + 1, np.int64)
        self.d_pos, self.d_tf = np.zeros(0, np.int32), np.zeros((2, 0), np.float32)

    def _key_id(self, key: tuple[str, str]) -> int:
        return key_id(self.keys, self.key_ids, key)

    # -- access and versions ------------------------------------------------------------------
    def cached(self, key: object, make: Callable[[], object]) -> Any:
        """A value derived from this generation of the mirror (an access mask, say), made once."""
        found = self._masks.get(key)
        if found is None:
            found = self._masks[key] = make()
        return found

    def key_mask(self, keys: Iterable[tuple[str, str]]) -> np.ndarray:
        """A flag per (doc_id, version) this mirror knows: whether it is among ``keys``."""
        flags = np.zeros(len(self.keys), bool)
        flags[[self.key_ids[k] for k in keys if k in self.key_ids]] = True
        return flags

    def row_mask(self, key_flags: np.ndarray) -> np.ndarray:
        """The rows a search may return: of the flagged (doc_id, version) keys, not duplicates."""
        return key_flags[self.key] & ~self.duplicate & ~self.dead

    # -- search ---------------------------------------------------------------------------------
    def phrases(self, tokens: Sequence[str | None]) -> list[int]:
        """Each phrase's term id, -1 for a term no row holds (any more)."""
        ids = [self.terms.get(t, -1) if t is not None else -1 for t in tokens]
        return [t if t >= 0 and self.hits(t) > 0 else -1 for t in ids]

    def hits(self, t: int) -> int:
        """n: how many live rows hold the term."""
        held = self._count(t)
        if not self.buried:
            return held
        return held - int(self.cached(("buried", t), lambda: np.count_nonzero(self.dead[self._postings(t)])))

    def search(self, phrases: Sequence[int], weights: tuple[float, float], allowed: np.ndarray,
               limit: int) -> list[tuple[int, float]]:
        """The best ``limit`` allowed rows holding any phrase, by FTS5's bm25() (higher is better;
        ties to the lower rowid): ``(rowid, score)`` pairs.

        Args:
            phrases: term ids in the query's phrase order (-1: a term no row holds).
            weights: the columns' weights (prefix, text).
            allowed: the rows that may be returned (:meth:`mask`).
            limit: how many to return.
        """
        n = self.rowid.size
        if not self.rows or limit <= 0:
            return []
        avgdl = self.total / self.rows
        idf = []
        for t in phrases:
            hits = self.hits(t) if t >= 0 else 0
            idf.append(fts5_idf(self.rows, hits))
        present = [i for i, t in enumerate(phrases) if t >= 0]
        strong = [i for i in present if idf[i] > IDF_FLOOR]
        weak = [i for i in present if idf[i] <= IDF_FLOOR]
        norm = self._norm(avgdl)
        w = np.asarray(weights, np.float64)
        floor = 0.0
        if min(weights) >= 0:
            found, floor = self._max_score(phrases, idf, present, w, norm, allowed, limit)
            if found is not None:
                return found
        # first pass, over every row: the phrases that are not floored, from their float32 parts;
        # the rows that can still reach the top are then scored in full as FTS5 scores them
        if strong:
            partial = np.bincount(
                np.concatenate([self._postings(phrases[i]) for i in strong]),
                np.concatenate([idf[i] * self._part(phrases[i], w, norm) for i in strong]), minlength=n)
        else:
            partial = np.zeros(n)
        # a floored phrase adds at most 1e-6 * (k1 + 1) to a row (a little more, for rounding)
        floored = len(weak) * IDF_FLOOR * (self.k1 + 1.0) * (1 + 1e-9)
        reach = floor - floored - SLACK * floor - 1e-12
        if reach > 0:  # MaxScore's floor under the limit-th score: the rows that can reach it
            candidates = np.flatnonzero(partial >= reach)
            candidates = candidates[allowed[candidates]]
            return self._rank(candidates, self._score(candidates, phrases, idf, w, norm), limit)
        # (with a negative weight, a share can be negative: only the full pass below is exact)
        positive = np.flatnonzero(partial > 0) if min(weights) >= 0 else np.zeros(0, np.int64)
        positive = positive[allowed[positive]]
        if positive.size >= limit:
            values = partial[positive]
            kth = np.partition(values, positive.size - limit)[positive.size - limit]
            margin = floored + SLACK * kth + 1e-12
            if kth > margin:
                candidates = positive[values >= kth - margin]
                return self._rank(candidates, self._score(candidates, phrases, idf, w, norm), limit)
        # the common words decide some of the top: every row holding any phrase is scored
        held = np.zeros(n, bool)
        for i in present:
            held[self._postings(phrases[i])] = True
        candidates = np.flatnonzero(held & allowed)
        return self._rank(candidates, self._score(candidates, phrases, idf, w, norm), limit)

    def _max_score(self, phrases: Sequence[int], idf: list[float], present: list[int], w: np.ndarray,
                   norm: np.ndarray, allowed: np.ndarray,
                   limit: int) -> tuple[list[tuple[int, float]] | None, float]:
        """The top ``limit`` by MaxScore (Turtle & Flood, "Query evaluation: strategies and
        optimizations", IP&M 31(6), 1995), or None when the phrases that must be read hold more
        postings than :data:`SPARSE_SHARE` of the rows, or fewer than ``limit`` allowed rows hold
        the rarest phrases (the full pass decides then); and the floor ``theta`` (0.0 if none).

        A phrase adds less than ``idf * (k1 + 1)`` to any row (``f / (f + norm) < 1`` for weights
        that are not negative). First a floor under the true ``limit``-th score, ``theta``: the
        ``limit``-th best full score of a few rows that hold the rarest phrases. Then the rarest
        phrases are *essential* until the other phrases' bounds add up to less than ``theta``:
        a row holding no essential phrase scores below that sum, so cannot reach the top (nor
        tie it). The rows holding an essential phrase are summed from its postings; then each
        other phrase, rarest first, is looked up for the rows still able to reach ``theta``
        only. The rows left are scored in full as FTS5 scores them.
        """
        order = sorted(present, key=lambda i: (-idf[i], i))  # the highest bound first
        if not order:
            return [], 0.0
        ceiling = self.k1 + 1.0
        left = [0.0] * (len(order) + 1)  # left[j]: the bounds of order[j:] added up
        for j in range(len(order) - 1, -1, -1):
            left[j] = left[j + 1] + idf[order[j]] * ceiling
        sizes = np.cumsum([self._count(phrases[i]) for i in order])
        if sizes[-1] < MAX_SCORE_POSTINGS:
            return None, 0.0
        budget = self.rowid.size * SPARSE_SHARE
        # the floor: the best rows of the rarest phrases (by their sums there), scored in full
        seed = min(int(np.searchsorted(sizes, 8 * limit)) + 1, len(order))
        if seed > 1 and sizes[seed - 1] > budget:
            seed = 1
        rows, partial = self._sums(phrases, idf, order[:seed], w, norm, allowed)
        if rows.size < limit:
            if seed == len(order):  # every row holding a phrase is here
                return self._rank(rows, self._score(rows, phrases, idf, w, norm), limit), 0.0
            return None, 0.0
        best = rows if rows.size <= 4 * limit else rows[np.argpartition(-partial, 4 * limit)[:4 * limit]]
        full = self._score(best, phrases, idf, w, norm)
        theta = float(np.partition(full, full.size - limit)[full.size - limit])
        theta -= SLACK * (theta + left[0]) + 1e-12  # room for sums of float32 parts
        if theta <= 0:
            return None, 0.0
        essential = next(j for j in range(1, len(order) + 1) if left[j] * (1 + SLACK) < theta)
        if sizes[essential - 1] > budget:
            return None, theta
        if essential != seed:
            rows, partial = self._sums(phrases, idf, order[:essential], w, norm, allowed)
        # the other phrases looked up for the rows left only, each dropping the rows that can no
        # longer reach theta
        for j in range(essential, len(order) + 1):
            keep = partial + left[j] * (1 + SLACK) >= theta
            rows, partial = rows[keep], partial[keep]
            if j == len(order) or rows.size <= limit:
                break
            partial = partial + self._share(phrases[order[j]], idf[order[j]], rows, w, norm)
        return self._rank(rows, self._score(rows, phrases, idf, w, norm), limit), theta

    def _count(self, t: int) -> int:
        """The term's postings, buried rows' included."""
        return int(self.indptr[t + 1] - self.indptr[t] + self.d_indptr[t + 1] - self.d_indptr[t])

    def _postings(self, t: int) -> np.ndarray:
        """The term's rows (positions, ascending)."""
        lo, hi, d_lo, d_hi = self._bounds(t)
        if d_lo == d_hi:
            return self.pos[lo:hi]
        return np.concatenate((self.pos[lo:hi], self.d_pos[d_lo:d_hi]))

    def _term(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        """The term's rows (positions, ascending) and their counts (prefix, text), shape (2, n)."""
        lo, hi, d_lo, d_hi = self._bounds(t)
        if d_lo == d_hi:
            return self.pos[lo:hi], self.tf[:, lo:hi]
        return (np.concatenate((self.pos[lo:hi], self.d_pos[d_lo:d_hi])),
                np.concatenate((self.tf[:, lo:hi], self.d_tf[:, d_lo:d_hi]), axis=1))

    def _bounds(self, t: int) -> tuple[int, int, int, int]:
        return (int(self.indptr[t]), int(self.indptr[t + 1]), int(self.d_indptr[t]), int(self.d_indptr[t + 1]))

    def _sums(self, phrases: Sequence[int], idf: list[float], which: Sequence[int], w: np.ndarray,
              norm: np.ndarray, allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The allowed rows holding any of the phrases ``which`` (positions, ascending) and the
        sum of those phrases' shares in each."""
        pos = [self._postings(phrases[i]) for i in which]
        part = [idf[i] * self._part(phrases[i], w, norm) for i in which]
        if len(which) == 1:
            rows, partial = pos[0], part[0]
        else:
            rows, inverse = np.unique(np.concatenate(pos), return_inverse=True)
            partial = np.bincount(inverse, np.concatenate(part), minlength=rows.size)
        keep = allowed[rows]
        return rows[keep], partial[keep]

    def _norm(self, avgdl: float) -> np.ndarray:
        """k1 * (1 - b + b * D / avgdl) per row, as FTS5 computes it (cached per generation)."""
        found = self._masks.get(("norm",))
        if found is None:
            found = self._masks[("norm",)] = self.k1 * (1 - self.b + self.b * self.length / avgdl)
        return found

    def _part(self, t: int, w: np.ndarray, norm: np.ndarray) -> np.ndarray:
        """A term's postings' BM25 part without the idf, in float32 (cached per generation and
        weights: for every posting at once up to :data:`WHOLE_PARTS` postings in a mirror as
        built, a few million at a time, else term by term, at most the matrix's size again;
        after a patch, term by term, so that the query after an edit pays for its own terms
        only)."""
        if self.pos.size <= WHOLE_PARTS and not self.patched and not self.d_pos.size:
            key = ("parts", float(w[0]), float(w[1]))
            every = self._masks.get(key)
            if every is None:
                every = np.empty(self.pos.size, np.float32)
                step = 1 << 22  # (float64 temporaries of this many postings at a time)
                for lo in range(0, self.pos.size, step):
                    sl = slice(lo, lo + step)
                    every[sl] = self._contribution(1.0, self._freq(self.tf[:, sl], w), norm[self.pos[sl]])
                self._masks[key] = every
            return every[self.indptr[t]:self.indptr[t + 1]]
        key = ("part", t, float(w[0]), float(w[1]))
        found = self._masks.get(key)
        if found is None:
            if self._cached > self.pos.size:
                self._masks = {k: v for k, v in self._masks.items() if k[0] != "part"}
                self._cached = 0
            pos, tf = self._term(t)
            found = self._contribution(1.0, self._freq(tf, w), norm[pos]).astype(np.float32)
            self._masks[key] = found
            self._cached += found.size
        return found

    @staticmethod
    def _freq(tf: np.ndarray, w: np.ndarray) -> np.ndarray:
        """The column-weighted frequency of postings from their counts ``tf`` (prefix, text;
        shape (2, n)), in float64 (FTS5 adds a column's weight per occurrence: the same sum for
        weights such as 0.5 and 1, within rounding for others)."""
        f = np.multiply(tf[0], w[0], dtype=np.float64)
        f += np.multiply(tf[1], w[1], dtype=np.float64)
        return f

    def _contribution(self, idf: float, f: np.ndarray, norm: np.ndarray) -> np.ndarray:
        return idf * ((f * (self.k1 + 1.0)) / (f + norm))

    def _score(self, rows: np.ndarray, phrases: Sequence[int], idf: list[float], w: np.ndarray,
               norm: np.ndarray) -> np.ndarray:
        """Full scores of the rows (positions, ascending), phrase by phrase in the query's order."""
        score = np.zeros(rows.size)
        row_norm = norm[rows]
        for i, t in enumerate(phrases):
            if t >= 0:
                score += self._share(t, idf[i], rows, w, norm, row_norm)
        return score

    def _share(self, t: int, idf: float, rows: np.ndarray, w: np.ndarray, norm: np.ndarray,
               row_norm: np.ndarray | None = None) -> np.ndarray:
        """A phrase's share of the score of each row (positions), 0.0 where it does not hold it."""
        pos, tf = self._term(t)
        # a row without the phrase has f = 0, so adds 0.0 exactly, as in FTS5
        if rows.size * 16 < pos.size:  # a few rows: found by binary search
            at = np.minimum(np.searchsorted(pos, rows), pos.size - 1)
            f = self._freq(tf[:, at], w) * (pos[at] == rows)
        else:  # many: the postings laid over every row, then read at the rows
            spread = self.cached(("spread",), lambda: np.zeros(self.rowid.size))
            spread[pos] = self._freq(tf, w)
            f = spread[rows]
            spread[pos] = 0.0
        return idf * ((f * (self.k1 + 1.0)) / (f + (norm[rows] if row_norm is None else row_norm)))

    def _rank(self, rows: np.ndarray, score: np.ndarray, limit: int) -> list[tuple[int, float]]:
        rowid = self.rowid[rows]
        order = np.lexsort((rowid, -score))[:limit]
        return list(zip(rowid[order].tolist(), score[order].tolist()))


def _padded(indptr: np.ndarray, n_terms: int) -> np.ndarray:
    """A CSR ``indptr`` extended to ``n_terms`` terms (the new ones empty)."""
    return np.r_[indptr, np.full(n_terms + 1 - indptr.size, indptr[-1])]


def _with_postings(indptr: np.ndarray, pos: np.ndarray, tf: np.ndarray, term: np.ndarray, new_pos: np.ndarray,
                   new_tf: np.ndarray, n_terms: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A CSR segment (``indptr``, ``pos``, ``tf`` of shape (2, n)) with postings added after each
    of their term's: ``term`` ascending, and ``new_pos`` above the segment's positions and
    ascending within a term; ``new_tf`` of shape (2, m)."""
    ends = _padded(indptr, n_terms)[1:]
    # counted first: bincount's int64 copy of ``term`` then comes before the copies below (at a
    # build, tens of millions of postings), not on top of them
    counts = np.diff(np.r_[0, ends]) + np.bincount(term, minlength=n_terms)
    if pos.size:
        where = ends[term]  # each new posting goes after its term's existing ones
        pos = _insert_sorted(pos, where, new_pos.astype(np.int32))
        tf = _insert_sorted(tf, where, new_tf.astype(np.float32))
    else:
        pos, tf = new_pos.astype(np.int32), np.ascontiguousarray(new_tf, dtype=np.float32)
    return np.r_[0, np.cumsum(counts)], pos, tf


def _insert_sorted(old: np.ndarray, where: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``np.insert(old, where, values, axis=-1)`` for sorted ``where``: the old entries are copied
    slice by slice between the distinct insertion points (an edit inserts a few thousand postings
    into tens of millions; numpy's insert moves every old entry through a boolean mask)."""
    points = np.unique(where)
    if points.size > 4096:
        return np.insert(old, where, values, axis=-1)
    n, m = old.shape[-1], where.size
    out = np.empty(old.shape[:-1] + (n + m,), old.dtype)
    out[..., where + np.arange(m)] = values
    bounds = np.r_[0, points, n]
    shifts = np.r_[0, np.searchsorted(where, points, side="right")]  # new entries before each slice
    for start, end, shift in zip(bounds[:-1].tolist(), bounds[1:].tolist(), shifts.tolist()):
        out[..., start + shift:end + shift] = old[..., start:end]
    return out


@dataclass(frozen=True, slots=True)
class _Rows:
    """Chunk rows: rowid, an index into ``keys`` ((doc_id, version)), the duplicate flag, and
    (when read for tokenizing) the prefix and text."""

    rowid: np.ndarray
    key: np.ndarray
    duplicate: np.ndarray
    keys: list[tuple[str, str]]
    prefix: list[str]
    text: list[str]


def _chunk_rows(db: sqlite3.Connection, where: str, args: Sequence[object] = (), *,
                texts: bool = False) -> _Rows:
    keys: list[tuple[str, str]] = []
    rowids, key_of, dup, prefixes, bodies = [], [], [], [], []
    if texts:
        for rowid, doc_id, version, is_dup, prefix, text in db.execute(
                "SELECT rowid, doc_id, version, duplicate_of IS NOT NULL, prefix, text FROM chunks "
                f"{where} ORDER BY doc_id, version, rowid", args):
            if not keys or keys[-1] != (doc_id, version):
                keys.append((doc_id, version))
            rowids.append(rowid)
            key_of.append(len(keys) - 1)
            dup.append(is_dup)
            prefixes.append(prefix)
            bodies.append(text)
        return _Rows(np.array(rowids, np.int64), np.array(key_of, np.int64), np.array(dup, bool),
                     keys, prefixes, bodies)
    # one row per version, its chunks' rowids and flags concatenated in SQL
    parts_r, parts_d = [], []
    for doc_id, version, joined, flags in db.execute(
            f"SELECT doc_id, version, group_concat(rowid), group_concat(duplicate_of IS NOT NULL) "
            f"FROM chunks {where} GROUP BY doc_id, version", args):
        keys.append((doc_id, version))
        parts_r.append(np.array(joined.split(","), np.int64))
        parts_d.append(np.array(flags.split(","), np.int8).astype(bool))
    if not keys:
        return _Rows(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, bool), [], [], [])
    lengths = [len(p) for p in parts_r]
    return _Rows(np.concatenate(parts_r), np.repeat(np.arange(len(keys)), lengths),
                 np.concatenate(parts_d), keys, [], [])


@contextmanager
def fts5_tokenized(rows: Iterable[tuple[int, str, str]], tokenizer: str) -> Iterator[sqlite3.Connection]:
    """Rows ``(rowid, prefix, text)`` tokenized as FTS5 tokenizes the store's chunks: an in-memory
    FTS5 table ``t`` with the store's tokenizer holding them under their rowids, and its
    vocabulary ``v`` (``fts5vocab`` 'instance': term, doc, col, offset). The keyword mirror's
    patch and the cache's rescoring of a changed chunk tokenize with it."""
    db = sqlite3.connect(":memory:")
    try:
        db.execute(f"CREATE VIRTUAL TABLE t USING fts5(prefix, text, tokenize='{tokenizer}')")
        db.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
        db.executemany("INSERT INTO t (rowid, prefix, text) VALUES (?,?,?)", rows)
        yield db
    finally:
        db.close()


def _tokenize(rows: _Rows, tokenizer: str) -> _Postings:
    """The rows' postings as FTS5 tokenizes them (:func:`fts5_tokenized`)."""
    with fts5_tokenized(zip(rows.rowid.tolist(), rows.prefix, rows.text), tokenizer) as db:
        return _read_postings(db, "v")


def _last_log_seq(db: sqlite3.Connection) -> int:
    return db.execute("SELECT COALESCE(MAX(seq), 0) FROM log").fetchone()[0]

"""The result cache: stage outputs kept in an SQLite file beside the store, each entry bound to
the documents it depends on, and invalidated from the store's update log (docs/formats.md,
"The result cache").

An entry is found by its key (the question, the principal's access groups, sorted, and a hash
of the pipeline's settings) and is valid at the index version the cache was last brought up
to date with (:meth:`SQLiteCache.sync`). Bringing it up to date reads the store's log since then
and drops exactly the entries a change could alter:

- every entry that read the changed document (a ranked item, a dropped item or a context unit
  of it): an edit, a deletion, an access or status change, a re-chunk;
- every entry the changed document's content could now enter (a new document, a new version, a
  document an access change made readable): an entry whose question shares a term with one of
  the document's chunks, as FTS5 tokenizes them (``porter unicode61 remove_diacritics 2``); an
  entry of a dense channel whose list was not full, or whose lowest score a chunk vector of the
  document reaches; an entry of a channel of unknown kind;
- a withheld entry (its best match was a source the asker may not read), on any change;
- every entry, when the log cannot say what changed (an embedding space registered or switched,
  a log that does not continue the one last read: another store at this path).

Corpus statistics are not a dependency: a change to another document moves BM25's document
count, average length and document frequencies by a little, and a cached list keeps the scores
it was computed with.

The cache reads the store only through the :class:`~ragdx.protocols.Store` protocol (plus
``chunk_vectors`` when the store has it; without it any new content invalidates the dense
entries), so any store can have one. Payloads are Python pickles written by ragdx itself: open
only cache files you (or your own processes) made, as you would any pickle.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import pickle
import sqlite3
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from ragdx.errors import StoreError
from ragdx.store._common import use_wal
from ragdx.protocols import Store
from ragdx.store.keyword import fts5_idf, fts5_tokenized
from ragdx.store.lexical import FTS_BM25_B, FTS_BM25_K1, FTS_TOKENIZER, _tokenizer
from ragdx.types import CacheEntry, CacheKind, Dependencies

__all__ = ["CacheKind", "Dependencies", "CacheEntry", "SQLiteCache", "fts5_terms", "cache_key", "listed_counts"]

log = logging.getLogger("ragdx.cache")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS entries (
    id INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    key TEXT NOT NULL,
    question TEXT NOT NULL,
    scope TEXT NOT NULL,
    made_at INTEGER NOT NULL,
    seconds REAL NOT NULL,
    open INTEGER NOT NULL,
    any_change INTEGER NOT NULL,
    payload BLOB NOT NULL,
    created_at REAL NOT NULL,
    UNIQUE (kind, key)
);
CREATE TABLE IF NOT EXISTS deps (entry INTEGER NOT NULL, doc_id TEXT NOT NULL, PRIMARY KEY (doc_id, entry));
CREATE INDEX IF NOT EXISTS deps_by_entry ON deps (entry);
CREATE TABLE IF NOT EXISTS terms (entry INTEGER NOT NULL, term TEXT NOT NULL, PRIMARY KEY (term, entry));
CREATE INDEX IF NOT EXISTS terms_by_entry ON terms (entry);
CREATE TABLE IF NOT EXISTS bm25 (
    entry INTEGER PRIMARY KEY, floor REAL NOT NULL, weights TEXT NOT NULL, phrases TEXT NOT NULL,
    listed TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS dense (
    entry INTEGER PRIMARY KEY, space TEXT NOT NULL, floor REAL NOT NULL, vector BLOB NOT NULL);
"""


def cache_key(question: str, groups: Sequence[str], settings_hash: str) -> str:
    """An entry's key: the question, the access groups (a set, sorted) and the settings' hash."""
    body = json.dumps([question, sorted(set(groups)), settings_hash])
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def fts5_terms(texts: Iterable[str]) -> set[str]:
    """The distinct terms FTS5's tokenizer (the SQLite store's) makes of ``texts``: stemmed,
    lower-cased and folded as the keyword index holds them."""
    return {term for tokens in _tokenizer()(list(texts)).values() for term in tokens}


@dataclass
class _Meta:
    version: int = -1
    seq: int = 0
    last: str = ""
    store: str = ""


class SQLiteCache:
    """The result cache in one SQLite file (WAL mode), shared by every process that opens it.

    Args:
        path: the cache file (``ragdx`` puts it beside the store: ``store.db.cache``).

    Raises:
        StoreError: the file cannot be opened or is not a ragdx cache.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.RLock()
        try:
            self._db = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False,
                                       timeout=10.0)
            use_wal(self._db, 10.0)
            self._db.execute("PRAGMA synchronous=NORMAL")
            found = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if found and "entries" not in found:
                raise StoreError(f"{self.path}: not a ragdx cache (a SQLite database with the tables "
                                 f"{', '.join(sorted(found)[:6])}); remove it or choose another cache.path")
            with self._write():
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        self._db.execute(statement)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: cannot open the cache: {exc}") from None

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "SQLiteCache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _write(self) -> Iterator[None]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def _meta(self) -> _Meta:
        rows = dict(self._db.execute("SELECT key, value FROM meta"))
        return _Meta(int(rows.get("version", -1)), int(rows.get("seq", 0)), rows.get("last", ""),
                     rows.get("store", ""))

    def _set_meta(self, meta: _Meta) -> None:
        self._db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                             [("version", str(meta.version)), ("seq", str(meta.seq)), ("last", meta.last),
                              ("store", meta.store)])

    @property
    def synced_version(self) -> int:
        """The store's index version the entries are valid at (-1: never brought up to date)."""
        return self._meta().version

    def __len__(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM entries").fetchone()[0]

    def entries(self) -> list[tuple[str, str, tuple[str, ...], int, tuple[str, ...]]]:
        """Every entry: its kind, question, access groups, index version made at, and documents read."""
        out = []
        for eid, kind, question, scope, made_at in self._db.execute(
                "SELECT id, kind, question, scope, made_at FROM entries ORDER BY id").fetchall():
            docs = tuple(r[0] for r in self._db.execute("SELECT doc_id FROM deps WHERE entry = ? ORDER BY doc_id",
                                                        (eid,)))
            out.append((kind, question, tuple(json.loads(scope)), made_at, docs))
        return out

    # -- invalidation ---------------------------------------------------------------------
    def sync(self, store: Store) -> int:
        """Bring the cache up to date with ``store``: drop every entry a change logged since the
        last sync could alter (module docstring). Returns how many entries were dropped.

        Unchanged, this costs two reads of the store (its index version, and its log from the
        last line read on, which must still be there: else the store was replaced)."""
        now = store.index_version
        meta = self._meta()
        new, continues = self._since(store, meta, now)
        if meta.version == now and continues and not new:
            return 0
        with self._write():
            meta = self._meta()  # another process may have synced meanwhile
            new, continues = self._since(store, meta, now)
            if meta.version == now and continues and not new:
                return 0
            newest = max([now] + [c.index_version for c in new])
            explained = bool(new) and newest == max(c.index_version for c in new)
            if not (continues and explained) or any(c.doc_id is None for c in new):
                dropped = self._drop_all()  # the log cannot say what changed
            else:
                dropped = self._drop(self._affected(store, new))
            last = new[-1] if new else (store.log_entries(0) or [None])[-1]
            self._set_meta(_Meta(newest, last.seq if last is not None else 0,
                                 _mark(last) if last is not None else "", _store_id(store)))
        if dropped:
            log.debug("%s: %d cache entries invalidated (index version %d -> %d)", self.path, dropped,
                      meta.version, newest)
        return dropped

    @staticmethod
    def _since(store: Store, meta: _Meta, now: int) -> tuple[list[Any], bool]:
        """The log lines after the last one read, and whether this is the store the cache was
        synced with (its id, and the log still holding the last line read)."""
        if meta.version < 0 or meta.version > now or meta.store != _store_id(store):
            return [], False
        if meta.seq == 0:
            return store.log_entries(0), meta.last == ""
        changes = store.log_entries(meta.seq - 1)
        return changes[1:], bool(changes) and _mark(changes[0]) == meta.last

    def _drop_all(self) -> int:
        count = len(self)
        for table in ("entries", "deps", "terms", "bm25", "dense"):
            self._db.execute(f"DELETE FROM {table}")
        return count

    def _drop(self, ids: set[int]) -> int:
        rows = [(i,) for i in sorted(ids)]
        self._db.executemany("DELETE FROM entries WHERE id = ?", rows)
        self._db.executemany("DELETE FROM deps WHERE entry = ?", rows)
        self._db.executemany("DELETE FROM terms WHERE entry = ?", rows)
        self._db.executemany("DELETE FROM bm25 WHERE entry = ?", rows)
        self._db.executemany("DELETE FROM dense WHERE entry = ?", rows)
        return len(rows)

    def _affected(self, store: Store, changes: Sequence[Any]) -> set[int]:
        """The entries the logged changes could alter."""
        docs = sorted({c.doc_id for c in changes})
        hit = set(self._ids_where("deps", "doc_id", docs))
        hit |= {r[0] for r in self._db.execute("SELECT id FROM entries WHERE any_change = 1")}
        grown = {(c.doc_id, c.version) for c in changes if c.op != "delete"}
        chunks = [chunk for doc_id, version in sorted(grown, key=str)
                  for chunk in store.chunks(doc_id, version)]
        if not chunks:
            return hit
        hit |= {r[0] for r in self._db.execute("SELECT id FROM entries WHERE open = 1")}
        hit |= self._keyword_reached(store, chunks, hit)
        hit |= self._dense_reached(store, sorted(grown, key=str))
        return hit

    def _ids_where(self, table: str, column: str, values: Sequence[str]) -> Iterator[int]:
        for i in range(0, len(values), 500):
            batch = values[i:i + 500]
            yield from (r[0] for r in self._db.execute(
                f"SELECT DISTINCT entry FROM {table} WHERE {column} IN ({','.join('?' * len(batch))})", batch))

    def _keyword_reached(self, store: Store, chunks: Sequence[Any], already: set[int]) -> set[int]:
        """Entries a keyword channel of which the new chunks could enter: they match a term of the
        question, and the list was not full, or a new chunk scores at least as high as the lowest
        of the listed chunks (both scored as FTS5's BM25 scores them with the index's statistics
        after the change: what enters is decided against those, not against the scores the list
        was cached with)."""
        rows = _chunk_tokens(chunks)
        candidates = set(self._ids_where("terms", "term", sorted({t for counts, _ in rows for t in counts}))) - already
        if not candidates:
            return set()
        stats = getattr(store, "keyword_statistics", None)
        full = {r[0]: r[1:] for r in self._db.execute(
            f"SELECT entry, weights, phrases, listed FROM bm25 WHERE entry IN ({','.join('?' * len(candidates))})",
            sorted(candidates))} if stats is not None else {}
        out = {e for e in candidates if e not in full}  # a list that was not full: any match enters
        if not full:
            return out
        n_rows, avgdl, df = stats(sorted({t for _, p, _ in full.values() for t in json.loads(p)}))
        for entry, (weights, phrases, listed) in full.items():
            score = functools.partial(_bm25, json.loads(phrases), weights=tuple(json.loads(weights)),
                                      n_rows=n_rows, avgdl=avgdl, df=df)
            lowest = min(score({t: tuple(c) for t, c in counts.items()}, size) for counts, size in json.loads(listed))
            if max(score(*row) for row in rows) >= lowest - 1e-9:
                out.add(entry)
        return out

    def _dense_reached(self, store: Store, grown: Sequence[tuple[str, str | None]]) -> set[int]:
        """Dense entries whose lowest score a chunk vector of the grown versions reaches."""
        rows = self._db.execute("SELECT entry, space, floor, vector FROM dense").fetchall()
        if not rows:
            return set()
        vectors_of = getattr(store, "chunk_vectors", None)
        if vectors_of is None:  # the store cannot say: any new content may enter
            return {r[0] for r in rows}
        out: set[int] = set()
        for space in {r[1] for r in rows}:
            blobs = [b for doc_id, version in grown for b in vectors_of(space, doc_id, version)]
            if not blobs:
                continue
            matrix = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), -1)
            for entry, entry_space, floor, vector in rows:
                if entry_space == space and float(np.max(matrix @ np.frombuffer(vector, np.float32))) >= floor:
                    out.add(entry)
        return out

    # -- reads and writes -----------------------------------------------------------------
    def get(self, kind: CacheKind, key: str) -> CacheEntry | None:
        """The entry under ``key``, if any (call :meth:`sync` first: entries are valid at
        :attr:`synced_version`)."""
        row = self._db.execute("SELECT payload, made_at, seconds FROM entries WHERE kind = ? AND key = ?",
                               (kind.value, key)).fetchone()
        if row is None:
            return None
        try:
            payload = pickle.loads(row[0])
        except Exception as exc:  # written by another ragdx version: a miss, replaced on put
            log.warning("%s: a cache entry cannot be read (%s); it is recomputed", self.path, exc)
            return None
        return CacheEntry(kind, payload, row[1], row[2])

    def discard(self, kind: CacheKind, key: str) -> None:
        """Drop one entry (an answer whose recheck failed)."""
        with self._write():
            ids = {r[0] for r in self._db.execute("SELECT id FROM entries WHERE kind = ? AND key = ?",
                                                  (kind.value, key))}
            self._drop(ids)

    def put(self, kind: CacheKind, key: str, payload: Any, deps: Dependencies, *, question: str,
            groups: Sequence[str], made_at: int, seconds: float, store: Store) -> bool:
        """Keep a result made at index version ``made_at``; kept only when the cache and the
        store are both still at that version (else a change may have come between, and the
        result is not kept). Returns whether it was kept."""
        blob = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
        spaces = {space for space, _, _ in deps.dense}
        is_open = deps.open or len(spaces) > 1  # dense channels of two spaces: any new content
        try:
            with self._write():
                if self._meta().version != made_at or store.index_version != made_at:
                    return False
                self._drop({r[0] for r in self._db.execute(
                    "SELECT id FROM entries WHERE kind = ? AND key = ?", (kind.value, key))})
                eid = self._db.execute(
                    "INSERT INTO entries (kind, key, question, scope, made_at, seconds, open, any_change, "
                    "payload, created_at) VALUES (?,?,?,?,?,?,?,?,?,?)",
                    (kind.value, key, question, json.dumps(sorted(set(groups))), made_at, seconds,
                     int(is_open), int(deps.any_change), blob, time.time())).lastrowid
                self._db.executemany("INSERT INTO deps VALUES (?, ?)", [(eid, d) for d in sorted(deps.docs)])
                self._db.executemany("INSERT INTO terms VALUES (?, ?)", [(eid, t) for t in sorted(deps.terms)])
                if deps.keyword is not None:
                    floor, weights, phrases, listed = deps.keyword
                    self._db.execute("INSERT INTO bm25 VALUES (?,?,?,?,?)", (
                        eid, floor, json.dumps(list(weights)), json.dumps(list(phrases)), json.dumps(list(listed))))
                if len(spaces) == 1:
                    space, _, vector = deps.dense[0]
                    self._db.execute("INSERT INTO dense VALUES (?,?,?,?)",
                                     (eid, space, min(floor for _, floor, _ in deps.dense), vector))
            return True
        except sqlite3.OperationalError as exc:  # another process holds the cache: not kept, no harm
            log.debug("%s: result not cached: %s", self.path, exc)
            return False


def _mark(entry: Any) -> str:
    """A log line's identity (its seq, time, version, operation and document)."""
    return json.dumps([entry.seq, entry.at, entry.index_version, entry.op, entry.doc_id, entry.version])



def _store_id(store: Store) -> str:
    """The store's id, when it has one (a store made before ids, or another backend: "")."""
    return str(getattr(store, "store_id", None) or "")


_K1, _B = FTS_BM25_K1, FTS_BM25_B


def _chunk_tokens(chunks: Sequence[Any]) -> list[tuple[dict[str, tuple[int, int]], int]]:
    """Each chunk's tokens as FTS5 indexes its two columns (prefix, text): per term the number of
    instances in each column, and the row's size in tokens."""
    counts: list[dict[str, list[int]]] = [{} for _ in chunks]
    sizes = [0] * len(chunks)
    with fts5_tokenized([(n, c.prefix, c.text) for n, c in enumerate(chunks, start=1)], FTS_TOKENIZER) as db:
        for term, row, column in db.execute("SELECT term, doc, col FROM v"):
            counts[row - 1].setdefault(term, [0, 0])[0 if column == "prefix" else 1] += 1
            sizes[row - 1] += 1
    return [({t: (a, b) for t, (a, b) in c.items()}, size) for c, size in zip(counts, sizes)]


def listed_counts(chunks: Sequence[Any], phrases: Sequence[str]) -> tuple[tuple[dict[str, tuple[int, int]], int], ...]:
    """For each chunk, its counts of ``phrases`` in each column (prefix, text) and its length in
    tokens: what its BM25 score for the question needs besides the index's statistics (kept with
    a full keyword list, so a change is checked without reading the listed chunks again)."""
    wanted = set(phrases)
    return tuple(({t: c for t, c in counts.items() if t in wanted}, size) for counts, size in _chunk_tokens(chunks))


def _bm25(phrases: Sequence[str], counts: dict[str, tuple[int, int]], size: int, *, weights: tuple[float, float],
          n_rows: int, avgdl: float, df: dict[str, int]) -> float:
    """FTS5's ``bm25()`` of one row (negated, as the store's scores are: higher is better), as
    fts5_aux.c computes it: per phrase, idf = ln((N - n + 0.5) / (n + 0.5)) (:data:`~ragdx.store.keyword.IDF_FLOOR` when not
    positive, :func:`~ragdx.store.keyword.fts5_idf`) times f (k1 + 1) / (f + k1 (1 - b + b D / avgdl)), f the column-weighted count."""
    score = 0.0
    for phrase in phrases:
        prefix, text = counts.get(phrase, (0, 0))
        freq = weights[0] * prefix + weights[1] * text
        if not freq:
            continue
        hits = df.get(phrase, 0)
        score += fts5_idf(n_rows, hits) * freq * (_K1 + 1) / (freq + _K1 * (1 - _B + _B * size / avgdl))
    return score

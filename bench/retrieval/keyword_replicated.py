"""The keyword mirror's search at a million rows, without building a million-chunk store: the dev
set's mirror replicated in memory, against bm25s over the same tokens replicated alike.

Reproduce, from the repository root (a few minutes; about 5 GB of memory at 15 copies)::

    .venv/bin/python bench/quality/quality.py                       # once: the dev set's store
    nice -n 10 .venv/bin/python bench/retrieval/keyword_replicated.py --before HEAD~1

The dev set's store (``bench/.cache/devset/store.db``, 70,594 chunks) is read once: its keyword
mirror is built (``KeywordIndex.build``, as the store's first keyword query builds it), and its
chunks' prefix + text tokenized as FTS5 does (``fts5_tokens``). Both are then replicated
``--copies`` times (15: 1,058,910 rows and 44 M postings, as ``bench/scale/million_chunks.py``
replicates the store): the mirror's postings, lengths, versions and duplicate flags in memory,
and bm25s's corpus as the same token lists again. Every copy ties every score with its original,
as in the million-chunk store.

Timed, per question (``--queries`` runs of 12 words from random chunks, bench/scale/million_chunks.py's
questions), 20 to warm up, CPU time of this process (wall time on a shared machine measures the
other jobs too; both engines are single-threaded here):

- ragdx: ``KeywordIndex.search`` at top 10 with both columns weighted 1 and the duplicates masked
  out: the search alone (what ``BM25Retriever.run`` adds, the query's tokens, the chunk rows and
  the read-time access check, is timed by bench/scale/million_chunks.py);
- ``--before REV``: the same, with ``src/ragdx/store/keyword.py`` as it was at git revision REV
  (the same mirror arrays);
- bm25s: ``retrieve`` at top 10 with the duplicates masked out (``method="atire"``, float32, numpy
  backend, as bench/retrieval/bm25_vs_bm25s.py), on the same questions' FTS5 tokens.

Agreement: each engine's top-10 scores, sorted, against ragdx's (relative difference; copies tie,
so which copy is listed differs). The top 10s of ``--before`` must equal ragdx's exactly.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _common, and the areas
from _common import REPO, code_version, machine, module_at, peak_rss_mb, write_result  # noqa: E402
from scale.million_chunks import make_questions  # noqa: E402

STORE = REPO / "bench" / ".cache" / "devset" / "store.db"


def replicate(base, cls, copies: int):
    """``base`` (a built KeywordIndex) as ``copies`` copies of its rows, in a ``cls`` index."""
    n, counts = base.rowid.size, np.diff(base.indptr)
    index = cls(base.k1, base.b)
    index.terms, index.indptr = base.terms, base.indptr * copies
    term = np.repeat(np.arange(counts.size), counts)
    local = np.arange(base.pos.size) - base.indptr[term]
    index.pos = np.empty(base.pos.size * copies, np.int32)
    index.tf = np.empty((2, base.pos.size * copies), np.float32)
    for k in range(copies):  # each term's postings: copy 0's rows, then copy 1's, ... (ascending)
        dest = copies * base.indptr[term] + k * counts[term] + local
        index.pos[dest] = base.pos + k * n
        index.tf[:, dest] = base.tf
    step = int(base.rowid.max()) + 1
    index.rowid = np.concatenate([base.rowid + k * step for k in range(copies)])
    index.length, index.key = np.tile(base.length, copies), np.tile(base.key, copies)
    index.duplicate, index.dead = np.tile(base.duplicate, copies), np.zeros(n * copies, bool)
    index.total, index.keys, index.key_ids = base.total * copies, base.keys, base.key_ids
    return index


def timed(fn, items) -> tuple[dict, list]:
    for item in items[:20]:
        fn(item)
    ms, out = [], []
    for item in items:
        t = time.process_time()
        out.append(fn(item))
        ms.append((time.process_time() - t) * 1000)
    ms.sort()
    return {"cpu_p50_ms": statistics.median(ms), "cpu_p95_ms": ms[round(0.95 * (len(ms) - 1))],
            "cpu_mean_ms": statistics.fmean(ms), "n": len(ms)}, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, default=STORE)
    ap.add_argument("--copies", type=int, default=15)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--before", metavar="REV", help="also time keyword.py as it was at this git revision")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "keyword_replicated.json")
    args = ap.parse_args()
    from retrieval.bm25_vs_bm25s import Rows
    from ragdx.stages.bm25 import query_terms
    from ragdx.store import keyword
    from ragdx.store.sqlite import FTS_BM25_B, FTS_BM25_K1, SQLiteStore
    from ragdx.testing.fts5 import fts5_query_tokens, fts5_tokens, reference_bm25

    questions = make_questions(args.store, args.queries, args.seed)
    store = SQLiteStore(args.store, "read")
    db = sqlite3.connect(f"file:{args.store}?mode=ro", uri=True)
    db.execute("BEGIN")
    base = keyword.KeywordIndex.build(db, 0, FTS_BM25_K1, FTS_BM25_B)
    tokens = [store._query_tokens(query_terms(q)) for q in questions]
    db.execute("COMMIT")
    db.close()
    store.close()
    result: dict = {"benchmark": "keyword_replicated",
                    "command": " ".join(["bench/retrieval/keyword_replicated.py"] + sys.argv[1:]),
                    "code": code_version(), "machine": machine(), "store": str(args.store),
                    "copies": args.copies, "seed_rows": int(base.rowid.size)}
    engines = [("ragdx", keyword)] + ([(f"ragdx at {args.before}", module_at(args.before, "src/ragdx/store/keyword.py"))] if args.before else [])
    tops: dict[str, list] = {}
    for name, module in engines:
        index = replicate(base, module.KeywordIndex, args.copies)
        allowed = ~index.duplicate & ~index.dead
        phrases = [index.phrases(t) for t in tokens]
        result["rows"], result["postings"] = int(index.rowid.size), int(index.pos.size)
        result[name], tops[name] = timed(lambda i: index.search(phrases[i], (1.0, 1.0), allowed, 10),
                                         list(range(len(questions))))
        print(f"{name}: {result[name]}", file=sys.stderr, flush=True)
        del index
    if args.before:
        result["before_identical_top10"] = sum(a == b for a, b in zip(tops["ragdx"], tops[engines[1][0]]))
    rows = Rows.load(args.store)
    corpus = [fts5_tokens(p + "\n" + t) for p, t in zip(rows.prefixes, rows.texts)] * args.copies
    model = reference_bm25("float32", backend="numpy")
    model.index(corpus, show_progress=False)
    del corpus
    mask = np.tile(~rows.duplicate, args.copies).astype(model.dtype)
    query_tokens = [fts5_query_tokens(q) for q in questions]

    def bm25s(i: int) -> list[float]:
        found = model.retrieve([query_tokens[i]], k=10, weight_mask=mask, show_progress=False, n_threads=0)
        return sorted((s for s in found.scores[0].tolist() if s > 0), reverse=True)
    result["bm25s"], theirs = timed(bm25s, list(range(len(questions))))
    diffs = [max((abs(a - b) / max(abs(a), 1e-9) for a, b in zip([s for _, s in ours], bm)), default=0.0)
             if len(ours) == len(bm) else float("inf") for ours, bm in zip(tops["ragdx"], theirs)]
    result["agreement"] = {"same_top10_scores": sum(d < 1e-5 for d in diffs), "queries": len(diffs),
                           "max_rel_diff": max(diffs)}
    result["ragdx_over_bm25s_p50"] = result["ragdx"]["cpu_p50_ms"] / result["bm25s"]["cpu_p50_ms"]
    result["peak_rss_mb"] = peak_rss_mb()
    lines = [f"{result['rows']:,} rows ({args.copies} copies of {result['seed_rows']:,}), "
             f"{result['postings']:,} postings; CPU ms per question at top 10"]
    for name in [e for e, _ in engines] + ["bm25s"]:
        r = result[name]
        lines.append(f"  {name:<24} p50 {r['cpu_p50_ms']:7.2f}  p95 {r['cpu_p95_ms']:7.2f}  mean {r['cpu_mean_ms']:7.2f}")
    lines.append(f"  ragdx / bm25s p50 x{result['ragdx_over_bm25s_p50']:.2f}; same top-10 scores "
                 f"{result['agreement']['same_top10_scores']}/{len(diffs)}"
                 + (f"; identical to {args.before}: {result['before_identical_top10']}/{len(diffs)}" if args.before else ""))
    write_result(args.out, result, "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

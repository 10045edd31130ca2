"""ragdx's BM25 channel (SQLite FTS5) against bm25s on the full Python 3.11 docs: query latency,
indexing time, agreement and recall, side by side in one run.

Reproduce, from the repository root::

    .venv/bin/python bench/retrieval/bm25_vs_bm25s.py

(needs ``bm25s`` and ``PyStemmer`` in the venv, and ``apt-get install python3-doc``.)

Both engines score the same thing. All ~530 HTML pages are ingested and chunked by ragdx with
the dense channel off. ragdx runs ``BM25Retriever`` with both columns weighted 1, which makes
FTS5's ``bm25()`` Okapi BM25 over each chunk's prefix + text (a zero weight would still count the
prefix in FTS5's lengths and document frequencies; tests/parity/test_bm25_parity.py). bm25s indexes
the same chunks' prefix + text tokens, tokenized as FTS5 does (:func:`fts5_tokens`, checked here
token for token against FTS5's own index), with ``method="atire"`` (the ``k1 + 1`` factor),
``idf_method="robertson"``, k1 = 1.2, b = 0.75, its default float32 scores and numpy backend (no
numba). Chunks ragdx marks as duplicates are in both indexes (FTS5 counts them) and out of both
results (a zero ``weight_mask`` in bm25s).

What it measures:

- indexing: ragdx's whole ingest (read, parse, chunk, store, FTS5 by trigger, one transaction);
  FTS5 alone (``INSERT INTO chunks_fts(chunks_fts) VALUES('rebuild')``, re-tokenizing every
  chunk); bm25s's tokenization and ``index()``; the median of ``--repeat`` runs each (the
  ingest runs once);
- latency, for ``--queries`` questions at top_k 10 and 100: ragdx's ``BM25Retriever.run`` (the
  store's posting matrix mirrored from FTS5's index with the access and version filters inside,
  the chunk rows, the read-time access check) against ``fts5_query_tokens`` + ``bm25s.retrieve``
  + the chunk ids; 20 questions to warm up, then the two engines alternate query by query; p50,
  p95 and mean in milliseconds, of wall-clock and of CPU time (the process's: SQLite and numpy
  run in it; other jobs on a shared machine inflate wall time, hardly CPU time);
- exactness: the posting matrix against FTS5's own SQL (``SQLiteStore.fts5_bm25``) on every
  question, weights (1, 1), (0.5, 1) and (0, 1): identical top 10s, ids and scores;
- agreement: overlap@10 of the two top-10 lists, how many are identical, and the same top 1;
- recall@10 on two labelled query sets made from the corpus: *heading* queries (a section
  heading that occurs once in the corpus, section numbers stripped; relevant: that section's
  chunks) and *known-item* queries (12 consecutive words of a chunk; relevant: every chunk whose
  text holds them). Recall@10 is found / min(relevant, 10), hit@10 whether any was found. Both
  engines are scored, and ragdx's other weightings: the default (prefix 0.5) and text only.

A table goes to stdout, progress to stderr, everything to ``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sqlite3
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import numpy as np

from ragdx.config import load_settings
from ragdx.build import build_ingestor
from ragdx.stages.bm25 import BM25Retriever, query_terms
from ragdx.store.sqlite import FTS_BM25_B, FTS_BM25_K1, SQLiteStore, match_expression
from ragdx.testing.fts5 import fts5_porter, fts5_query_tokens, fts5_tokens, indexed_fields, reference_bm25
from ragdx.types import Principal, Query, VersionFilter

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _common, and the areas
from _common import (  # noqa: E402
    Stopwatch, missing_modules, DEFAULT_HTML, REPO, code_version, html_pages, machine, missing_pages, write_manifest, write_result,
)

DEFAULT_OUT = REPO / "bench" / "results" / "bm25_vs_bm25s.json"
EVERYONE = Principal("bench", ("public",))  # the default acl of a manifest entry without one
KNOWN_ITEM_WORDS = 12
_WORD = re.compile(r"[^\W_]+")


# -- the corpus and its queries ----------------------------------------------------------------

@dataclass
class Rows:
    """The store's chunks in FTS5 rowid order."""

    ids: list[str]
    prefixes: list[str]
    texts: list[str]
    sections: list[str]
    duplicate: np.ndarray

    @classmethod
    def load(cls, db_path: Path) -> "Rows":
        db = sqlite3.connect(str(db_path))
        rows = db.execute("SELECT id, prefix, text, section_id, duplicate_of FROM chunks "
                          "ORDER BY rowid").fetchall()
        db.close()
        return cls([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows],
                   [r[3] for r in rows], np.array([r[4] is not None for r in rows]))


def check_tokenizer(db_path: Path, rows: Rows) -> dict[str, object]:
    """Compare :func:`fts5_tokens` with FTS5's own index (fts5vocab), field by field."""
    indexed, rowids = indexed_fields(db_path)
    fields = wrong = tokens = 0
    examples = []
    for i, rowid in enumerate(rowids):
        for column, text in (("prefix", rows.prefixes[i]), ("text", rows.texts[i])):
            theirs = indexed.get((rowid, column), [])
            mine = fts5_tokens(text)
            fields += 1
            tokens += len(theirs)
            if mine != theirs:
                wrong += 1
                examples.append([rows.ids[i], column])
    return {"fields": fields, "tokens": tokens, "fields_differing": wrong, "examples": examples[:5]}


_NUMBERING = re.compile(r"^\s*(\d+(\.\d+)*\.?|[A-Z]\.(\d+\.)*)\s+")


def heading_queries(db_path: Path, rows: Rows, n: int, rng: random.Random) -> list[dict]:
    """Section headings occurring once in the corpus (numbering stripped), with that section's
    readable chunks as the relevant set."""
    db = sqlite3.connect(str(db_path))
    sections = [(sid, json.loads(path)) for sid, path in db.execute("SELECT id, heading_path FROM sections")]
    db.close()
    chunks_of: dict[str, list[str]] = {}
    for chunk_id, section, dup in zip(rows.ids, rows.sections, rows.duplicate):
        if not dup:
            chunks_of.setdefault(section, []).append(chunk_id)
    headings: dict[str, list[str]] = {}
    for sid, path in sections:
        if path:
            headings.setdefault(_NUMBERING.sub("", path[-1]).strip().lower(), []).append(sid)
    usable = sorted((h, sids[0]) for h, sids in headings.items()
                    if len(sids) == 1 and len(_WORD.findall(h)) >= 2 and chunks_of.get(sids[0]))
    return [{"set": "heading", "question": h, "relevant": chunks_of[sid]}
            for h, sid in rng.sample(usable, n)]


def known_item_queries(rows: Rows, n: int, rng: random.Random) -> list[dict]:
    """Runs of 12 words from random chunks; relevant: every readable chunk holding them."""
    candidates = [i for i, t in enumerate(rows.texts)
                  if not rows.duplicate[i] and len(t.split()) >= KNOWN_ITEM_WORDS]
    queries = []
    while len(queries) < n:
        words = rows.texts[rng.choice(candidates)].split()
        start = rng.randrange(len(words) - KNOWN_ITEM_WORDS + 1)
        words = words[start:start + KNOWN_ITEM_WORDS]
        # the words as they run in the text, whatever whitespace separated them
        pattern = re.compile(r"\s+".join(map(re.escape, words)))
        relevant = [rows.ids[i] for i, t in enumerate(rows.texts)
                    if not rows.duplicate[i] and pattern.search(t)]
        queries.append({"set": "known-item", "question": " ".join(words), "relevant": relevant})
    return queries


# -- measuring -------------------------------------------------------------------------------



def ms_summary(seconds: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in seconds)
    return {"p50_ms": statistics.median(ms), "p95_ms": ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))],
            "mean_ms": statistics.fmean(ms), "max_ms": ms[-1], "n": len(ms)}


class Bm25sSearch:
    """bm25s as a search function over the store's chunks: question in, chunk ids out."""

    def __init__(self, model, rows: Rows, *, ties_by_row: int = 0) -> None:
        self.model = model
        self.ids = np.array(rows.ids, dtype=object)
        self.mask = (~rows.duplicate).astype(model.dtype)
        self.ties_by_row = ties_by_row

    def __call__(self, question: str, k: int) -> list[tuple[str, float]]:
        """The top ``k``; with ``ties_by_row`` N, bm25s's top k * N re-sorted so equal scores go
        to the older row as in ragdx (for corpora of N identical copies, where every score ties
        N ways and bm25s's own order of ties decides which copies make the top k)."""
        tokens = fts5_query_tokens(question)
        deep = min(k * self.ties_by_row, len(self.ids)) if self.ties_by_row else k
        found = self.model.retrieve([tokens], k=deep, weight_mask=self.mask, show_progress=False,
                                    n_threads=0)
        docs, scores = found.documents[0], found.scores[0]
        if self.ties_by_row:
            order = np.lexsort((docs, -scores))[:k]
            docs, scores = docs[order], scores[order]
        matched = scores > 0
        return list(zip(self.ids[docs[matched]], scores[matched].tolist()))


def ragdx_search(store: SQLiteStore, prefix_weight: float, text_weight: float):
    retrievers: dict[int, BM25Retriever] = {}

    def search(question: str, k: int) -> list[tuple[str, float]]:
        if k not in retrievers:
            retrievers[k] = BM25Retriever(store, top_k=k, prefix_weight=prefix_weight,
                                          text_weight=text_weight)
        ranked = retrievers[k].run(Query("q", question, EVERYONE))
        return [(item.chunk_id, item.score) for item in ranked.items]
    return search


def latency(engines: dict[str, object], questions: list[str], k: int) -> dict[str, dict]:
    for question in questions[:20]:  # warm caches and code paths
        for search in engines.values():
            search(question, k)
    wall: dict[str, list[float]] = {name: [] for name in engines}
    cpu: dict[str, list[float]] = {name: [] for name in engines}
    names = list(engines)
    for n, question in enumerate(questions):
        for name in names[n % 2:] + names[:n % 2]:  # alternate who goes first
            with Stopwatch() as clock:
                engines[name](question, k)
            wall[name].append(clock.wall)
            cpu[name].append(clock.cpu)
    return {name: ms_summary(wall[name]) | {"cpu": ms_summary(cpu[name])} for name in engines}


def recall(results: list[list[tuple[str, float]]], queries: list[dict], k: int = 10) -> dict[str, float]:
    rec, hit = [], []
    for found, query in zip(results, queries):
        relevant = set(query["relevant"])
        got = len(relevant & {chunk_id for chunk_id, _ in found[:k]})
        rec.append(got / min(len(relevant), k))
        hit.append(got > 0)
    return {"recall@10": statistics.fmean(rec), "hit@10": statistics.fmean(hit), "queries": len(queries)}


def agreement(a: list[list[tuple[str, float]]], b: list[list[tuple[str, float]]]) -> dict[str, float]:
    """Overlap of the top-10 lists, and whether their scores agree rank by rank (lists that
    differ while they do only order tied, or float32-tied, scores differently)."""
    overlaps, rank_rel = [], []
    for x, y in zip(a, b):
        ids_x, ids_y = {i for i, _ in x}, {i for i, _ in y}
        overlaps.append(len(ids_x & ids_y) / max(len(x), len(y)) if x or y else 1.0)
        rank_rel.append(max((abs(s - t) / max(abs(s), abs(t)) for (_, s), (_, t) in zip(x, y)),
                            default=0.0) if len(x) == len(y) else float("inf"))
    ids = [([i for i, _ in x], [i for i, _ in y]) for x, y in zip(a, b)]
    differing = [r for (x, y), r in zip(ids, rank_rel) if x != y]
    return {"overlap@10_mean": statistics.fmean(overlaps), "overlap@10_min": min(overlaps),
            "identical_lists": sum(x == y for x, y in ids),
            "same_set": sum(set(x) == set(y) for x, y in ids),
            "same_top1": sum(x[:1] == y[:1] for x, y in ids), "queries": len(a),
            "rank_by_rank_score_rel_diff_max": max(rank_rel),
            "differing_lists_rank_score_rel_diff_max": max(differing, default=0.0)}


def fts5_exactness(store: SQLiteStore, questions: list[str], k: int = 10) -> dict[str, object]:
    """The posting matrix (``SQLiteStore.bm25``) against FTS5's own SQL (``fts5_bm25``), three
    weightings, every question: how many top-k lists are identical, ids and scores bit for bit."""
    out: dict[str, object] = {}
    for weights in ((1.0, 1.0), (0.5, 1.0), (0.0, 1.0)):
        same = 0
        gap = 0.0
        for question in questions:
            terms = query_terms(question)
            versions = VersionFilter.for_question(question)
            mine = store.bm25(terms, EVERYONE.groups, k, weights, versions)
            theirs = store.fts5_bm25(terms, EVERYONE.groups, k, weights, versions)
            same += [(c.id, s) for c, s in mine] == [(c.id, s) for c, s in theirs]
            gap = max([gap] + [abs(s - t) / max(abs(t), 1e-300) for (_, s), (_, t) in zip(mine, theirs)])
        out[f"{weights[0]:g},{weights[1]:g}"] = {"identical": same, "queries": len(questions),
                                                 "max_rel_score_diff": gap}
    return out


def sql_breakdown(db_path: Path, questions: list[str]) -> dict[str, object]:
    """Where ragdx's query time goes, on a fresh connection: FTS5 alone (MATCH, bm25(), ORDER BY,
    LIMIT 10), then joined to the chunk rows, then with ragdx's duplicate and access filters (the
    SQL of ``SQLiteStore.bm25``); and how many rows each question's OR expression matches."""
    db = sqlite3.connect(str(db_path))
    score = "-bm25(chunks_fts, 1.0, 1.0) AS s"
    fts = f"SELECT rowid, {score} FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY s DESC LIMIT 10"
    join = (f"SELECT c.*, {score} FROM chunks_fts JOIN chunks c ON c.rowid = chunks_fts.rowid "
            "WHERE chunks_fts MATCH ?")
    joined = join + " ORDER BY s DESC, c.rowid LIMIT 10"
    full = (join + " AND c.duplicate_of IS NULL AND EXISTS (SELECT 1 FROM acl a WHERE a.doc_id = c.doc_id "
            "AND a.version = c.version AND a.grp IN ('public')) ORDER BY s DESC, c.rowid LIMIT 10")
    times: dict[str, list[float]] = {"fts5_only": [], "joined": [], "joined_and_filtered": []}
    matched = []
    total = db.execute("SELECT count(*) FROM chunks").fetchone()[0]
    for question in questions:
        match = match_expression(query_terms(question))
        count = db.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?", (match,))
        matched.append(count.fetchone()[0])
        for name, sql in (("fts5_only", fts), ("joined", joined), ("joined_and_filtered", full)):
            started = time.perf_counter()
            db.execute(sql, (match,)).fetchall()
            times[name].append(time.perf_counter() - started)
    db.close()
    return {name: ms_summary(t) for name, t in times.items()} | {
        "rows_matched_median": statistics.median(matched),
        "rows_matched_fraction_median": statistics.median(matched) / total,
        "questions_matching_every_row": sum(m == total for m in matched)}


def timed(fn, repeat: int) -> tuple[dict[str, object], object]:
    """Run ``fn`` ``repeat`` times: median wall and CPU seconds, each run's, and the last output."""
    wall, cpu, out = [], [], None
    for _ in range(repeat):
        with Stopwatch() as clock:
            out = fn()
        wall.append(clock.wall)
        cpu.append(clock.cpu)
    return {"wall_s": statistics.median(wall), "cpu_s": statistics.median(cpu),
            "wall_each": wall, "cpu_each": cpu}, out


def run(html_dir: Path, n_queries: int, repeat: int, seed: int) -> dict[str, object]:
    import bm25s
    pages = html_pages(html_dir)
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="ragdx-bm25-") as tmp:
        manifest, db_path = Path(tmp) / "manifest.jsonl", Path(tmp) / "store.db"
        write_manifest(pages, html_dir, manifest)
        store = SQLiteStore(db_path)
        print(f"ingesting {len(pages)} pages ...", file=sys.stderr, flush=True)
        ingestor = build_ingestor(store, load_settings(overrides=["retrieval.dense.enabled=false"]))
        ingest, report = timed(lambda: ingestor.run(manifest, allow_outside=True), 1)

        def fts5_rebuild() -> None:
            db = sqlite3.connect(str(db_path))
            db.execute("INSERT INTO chunks_fts(chunks_fts) VALUES('rebuild')")
            db.commit()
            db.close()
        fts5, _ = timed(fts5_rebuild, repeat)

        rows = Rows.load(db_path)
        print(f"{len(rows.ids)} chunks; checking the tokenizer against FTS5 ...", file=sys.stderr, flush=True)
        check = check_tokenizer(db_path, rows)

        def tokenize_all(texts: list[str]) -> list[list[str]]:
            fts5_porter.cache_clear()  # every repeat stems from scratch
            return [fts5_tokens(t) for t in texts]
        joined = [p + "\n" + t for p, t in zip(rows.prefixes, rows.texts)]
        tokenize, corpus_tokens = timed(lambda: tokenize_all(joined), repeat)

        def index(tokens):
            model = reference_bm25("float32", backend="numpy")
            model.index(tokens, show_progress=False)
            return model
        indexing, model = timed(lambda: index(corpus_tokens), repeat)
        text_model = index(tokenize_all(rows.texts))
        model64 = reference_bm25("float64")
        model64.index(corpus_tokens, show_progress=False)
        print("bm25s indexed; querying ...", file=sys.stderr, flush=True)

        queries = heading_queries(db_path, rows, n_queries // 2, rng) + \
            known_item_queries(rows, n_queries - n_queries // 2, rng)
        questions = [q["question"] for q in queries]
        engines = {"ragdx": ragdx_search(store, 1.0, 1.0), "bm25s": Bm25sSearch(model, rows)}
        latencies = {f"top_k={k}": latency(engines, questions, k) for k in (10, 100)}
        breakdown = sql_breakdown(db_path, questions)
        exactness = fts5_exactness(store, questions)

        systems = {
            "ragdx (prefix 1, text 1)": engines["ragdx"],
            "bm25s (prefix + text)": engines["bm25s"],
            "ragdx default (prefix 0.5, text 1)": ragdx_search(store, 0.5, 1.0),
            "ragdx text only (prefix 0, text 1)": ragdx_search(store, 0.0, 1.0),
            "bm25s (text only)": Bm25sSearch(text_model, rows),
            "bm25s float64 (prefix + text)": Bm25sSearch(model64, rows),
        }
        results = {name: [search(q, 10) for q in questions] for name, search in systems.items()}
        quality = {}
        for set_name in ("heading", "known-item"):
            picked = [i for i, q in enumerate(queries) if q["set"] == set_name]
            quality[set_name] = {name: recall([r[i] for i in picked], [queries[i] for i in picked])
                                 for name, r in results.items() if "float64" not in name}
        agree = {
            "ragdx (1, 1) vs bm25s (prefix + text)": agreement(results["ragdx (prefix 1, text 1)"],
                                                               results["bm25s (prefix + text)"]),
            "ragdx (1, 1) vs bm25s float64": agreement(results["ragdx (prefix 1, text 1)"],
                                                       results["bm25s float64 (prefix + text)"]),
            "ragdx (0, 1) vs bm25s (text only)": agreement(results["ragdx text only (prefix 0, text 1)"],
                                                           results["bm25s (text only)"]),
        }
        store_mb = sum(p.stat().st_size for p in Path(tmp).glob("store.db*")) / 1e6
        store.close()

    return {
        "benchmark": "bm25_vs_bm25s",
        "command": ".venv/bin/python bench/retrieval/bm25_vs_bm25s.py",
        "code": code_version(),
        "machine": machine(),
        "versions": {"bm25s": version("bm25s"), "PyStemmer": version("PyStemmer"),
                     "numpy": np.__version__, "sqlite": sqlite3.sqlite_version},
        "corpus": {"html_dir": str(html_dir), "pages": len(pages), "chunks": len(rows.ids),
                   "duplicate_chunks": int(rows.duplicate.sum()),
                   "tokens": sum(map(len, corpus_tokens)), "store_mb_with_wal": store_mb},
        "config": {"queries": len(queries), "repeat": repeat, "seed": seed,
                   "bm25s": {"method": "atire", "idf_method": "robertson", "k1": FTS_BM25_K1,
                             "b": FTS_BM25_B, "dtype": "float32", "backend": "numpy",
                             "version": bm25s.__version__},
                   "ragdx": {"prefix_weight": 1.0, "text_weight": 1.0}},
        "tokenizer_check": check,
        "indexing": {
            "ragdx_full_ingest": ingest | {"documents": report.documents},
            "fts5_rebuild": fts5, "bm25s_tokenize": tokenize, "bm25s_index": indexing,
            "bm25s_total": {"wall_s": tokenize["wall_s"] + indexing["wall_s"],
                            "cpu_s": tokenize["cpu_s"] + indexing["cpu_s"]},
        },
        "latency": latencies,
        "ragdx_sql_breakdown_top10": breakdown,
        "posting_matrix_vs_fts5_sql_top10": exactness,
        "agreement": agree,
        "quality": quality,
        "queries_sample": [{k: q[k] for k in ("set", "question")} | {"relevant": len(q["relevant"])}
                           for q in queries[:: max(1, len(queries) // 10)]],
    }


def table(r: dict) -> str:
    m, c, ix = r["machine"], r["corpus"], r["indexing"]

    def both(entry: dict) -> str:
        return f"{entry['wall_s']:6.2f} / {entry['cpu_s']:5.2f}"
    lines = [f"machine: {m['cpu_model']}, {m['nproc']} cores, Python {m['python']}; "
             f"bm25s {r['versions']['bm25s']}, SQLite {r['versions']['sqlite']}",
             f"corpus: {c['pages']} pages, {c['chunks']:,} chunks, {c['tokens']:,} tokens; "
             f"tokenizer vs FTS5: {r['tokenizer_check']['fields_differing']} of "
             f"{r['tokenizer_check']['fields']:,} fields differ", "",
             "indexing, s (wall / CPU)        ragdx / FTS5      bm25s",
             f"  whole ingest (parse, chunk, store)  {both(ix['ragdx_full_ingest'])}   -",
             f"  tokenize                                      -   {both(ix['bm25s_tokenize'])}",
             f"  tokenize + index                 {both(ix['fts5_rebuild'])}   {both(ix['bm25s_total'])}"
             "   (FTS5: 'rebuild')",
             f"  index alone                                   -   {both(ix['bm25s_index'])}", "",
             "latency, ms              wall p50   p95  mean    CPU p50   p95  mean"]
    for k, engines in r["latency"].items():
        for name, s in engines.items():
            lines.append(f"  {name:6} {k:9}  {s['p50_ms']:8.2f} {s['p95_ms']:6.2f} {s['mean_ms']:5.2f}   "
                         f"{s['cpu']['p50_ms']:8.2f} {s['cpu']['p95_ms']:6.2f} {s['cpu']['mean_ms']:5.2f}")
    b = r["ragdx_sql_breakdown_top10"]
    lines.append(f"  ragdx SQL alone, top 10, p50: FTS5 {b['fts5_only']['p50_ms']:.2f}, + chunk rows "
                 f"{b['joined']['p50_ms']:.2f}, + dup/acl filter {b['joined_and_filtered']['p50_ms']:.2f}")
    lines.append(f"  a question's OR expression matches {b['rows_matched_fraction_median']:.0%} of the rows "
                 f"(median); {b['questions_matching_every_row']} questions match every row")
    same = ", ".join(f"weights ({w}) {e['identical']}/{e['queries']}"
                     for w, e in r["posting_matrix_vs_fts5_sql_top10"].items())
    lines.append(f"  ragdx's posting matrix vs FTS5's SQL, identical top 10 (ids and scores): {same}")
    lines += ["", "agreement@10                            overlap  identical  same set  same top 1  "
              "max rel. score diff, rank by rank"]
    for name, a in r["agreement"].items():
        n = a["queries"]
        lines.append(f"  {name:38} {a['overlap@10_mean']:6.3f}  {a['identical_lists']:4}/{n}  "
                     f"{a['same_set']:4}/{n}  {a['same_top1']:4}/{n}    "
                     f"{a['rank_by_rank_score_rel_diff_max']:.1e}")
    for set_name, systems in r["quality"].items():
        n = next(iter(systems.values()))["queries"]
        lines += ["", f"{set_name} queries ({n})                        recall@10  hit@10"]
        for name, q in systems.items():
            lines.append(f"  {name:38} {q['recall@10']:7.3f}  {q['hit@10']:6.3f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--html-dir", type=Path, default=DEFAULT_HTML)
    ap.add_argument("--queries", type=int, default=200, help="questions, half of each set (default 200)")
    ap.add_argument("--repeat", type=int, default=3, help="repeats of each indexing step (default 3)")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    if args.queries < 2 or args.repeat < 1:
        ap.error("--queries must be at least 2 and --repeat at least 1")
    problem = missing_modules("bm25s", "Stemmer") or missing_pages(args.html_dir)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    result = run(args.html_dir, args.queries, args.repeat, args.seed)
    write_result(args.out, result, table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

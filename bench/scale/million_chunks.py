"""The embedded store at a million chunks: keyword search against bm25s, edits and deletes against
a bm25s rebuild, dense search in bounded memory against exact search, the whole pipeline's
latency, and each process's peak memory.

Reproduce, from the repository root (about 30 minutes on 2 busy cores; about 7 GB of disk)::

    .venv/bin/python bench/quality/quality.py          # once: the dev set's embedded store (real documents)
    .venv/bin/python bench/scale/million_chunks.py   # build (cached), then each phase in its own process

The store is built once under ``bench/.cache/million/`` and reused: the dev set's embedded store
(``bench/.cache/devset/store.db``: the Python 3.11 and 3.9 and SQLite 3.40 and 3.34 docs, 70,594
chunks with their int8-encoder vectors) is copied with SQLite's backup API, then its documents,
access groups, sections, chunks and vectors are replicated under distinct ids
(``copyN/<doc_id>``, ``<chunk id>~N``) with ``INSERT ... SELECT`` until the store holds
``--chunks`` chunks (FTS5 indexes every copied row by the store's own trigger; no chunk is
embedded again: a copy's vector is its original's). Copies tie every score with their originals,
so agreement is measured with ties ordered by row, as ragdx orders them.

Each phase runs in a fresh process, so its peak RSS is its own:

- ``ragdx``: the first keyword query (the posting mirror built), keyword p50/p95 at top 10 over
  ``--queries`` runs of 12 words from random chunks, the top 10s written for the bm25s phase;
  the dense channel's first query (the bounded index loaded), dense p50/p95, the whole
  pipeline's p50/p95 per query (the default settings with the int8 encoder), one-document edit
  and delete, each followed by the next keyword and dense query (which must see it);
- ``exact``: the exact float32 dense index over the same store (its load, p50/p95, peak RSS)
  and recall@10/@100 of the bounded index against it on the same questions;
- ``bm25s``: a full rebuild (FTS5's tokens, ``index()``) over the same chunks, its p50/p95 at
  top 10 on the same questions (float32, bm25s's default), and the overlap of its top 10s with
  ragdx's, in float32 and again with an index in float64; each list that differs is recorded with
  both sides and whether FTS5's idf floor explains it (:func:`differing`); and once more with
  bm25s given FTS5's idf floor (``reference_bm25(idf_floor=1e-6)``), so that both compute one
  formula.

A table goes to stdout, progress to stderr, everything to ``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _common, and the areas
from _common import REPO, Stopwatch, code_version, machine, peak_rss_mb, write_result  # noqa: E402

CACHE = REPO / "bench" / ".cache"
SEED_STORE = Path(os.environ.get("RAGDX_BENCH_CACHE", CACHE)) / "devset" / "store.db"
DEFAULT_STORE = Path(os.environ.get("RAGDX_BENCH_CACHE", CACHE)) / "million" / "store.db"
INT8 = Path(os.environ.get("RAGDX_BENCH_CACHE", CACHE)) / "int8" / "all-MiniLM-L6-v2-int8.onnx"
DEFAULT_OUT = REPO / "bench" / "results" / "million_chunks.json"
PHASES = ("ragdx", "exact", "bm25s")


# -- the store -------------------------------------------------------------------------------------

def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def build_store(seed: Path, path: Path, target: int) -> dict[str, object]:
    """Copy ``seed`` to ``path`` and replicate its content under distinct ids until it holds at
    least ``target`` chunks (a no-op when ``path`` already does)."""
    if path.exists():
        db = sqlite3.connect(str(path))
        have = db.execute("SELECT count(*) FROM chunks").fetchone()[0]
        db.close()
        if have >= target:
            return {"cached": True, "chunks": have}
        raise SystemExit(f"{path} holds {have} chunks, fewer than {target}: delete it to rebuild")
    path.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    partial = path.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    source = sqlite3.connect(f"file:{seed}?mode=ro", uri=True)
    db = sqlite3.connect(str(partial), isolation_level=None)
    source.backup(db)
    source.close()
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=OFF")
    base = db.execute("SELECT count(*) FROM chunks").fetchone()[0]
    copies = -(-target // base)
    max_seq = db.execute("SELECT max(seq) FROM documents").fetchone()[0]
    seed_docs = "doc_id NOT LIKE 'copy%/%'"
    for c in range(1, copies):
        t = time.perf_counter()
        p, s = f"copy{c}/", f"~{c}"
        db.execute("BEGIN")
        db.execute(f"""INSERT INTO documents SELECT ?||doc_id, version, seq + ?, content_hash, path, title,
            format, status, updated_at, metadata, parser, parse_warnings, chunker_config, raw_text,
            parsed_text, ingested_at FROM documents WHERE {seed_docs}""", (p, c * max_seq))
        db.execute(f"INSERT INTO acl SELECT ?||doc_id, version, grp FROM acl WHERE {seed_docs}", (p,))
        db.execute(f"""INSERT INTO sections SELECT id||?, ?||doc_id, version, start, end, heading_path,
            level, parent_id||? FROM sections WHERE {seed_docs}""", (s, p, s))
        db.execute(f"""INSERT INTO chunks (id, doc_id, version, ord, start, end, text, kind, heading_path,
            section_id, prefix, header_start, header_end, token_count, prev_id, next_id, duplicate_of,
            over_limit, config_id)
            SELECT id||?, ?||doc_id, version, ord, start, end, text, kind, heading_path, section_id||?,
            prefix, header_start, header_end, token_count, prev_id||?, next_id||?, duplicate_of||?,
            over_limit, config_id FROM chunks WHERE {seed_docs} ORDER BY rowid""", (s, p, s, s, s, s))
        db.execute(f"""INSERT INTO vectors SELECT n.rowid, v.space_id, v.input_hash, v.vector, v.window_end
            FROM chunks o JOIN vectors v ON v.chunk_rowid = o.rowid JOIN chunks n ON n.id = o.id||?
            WHERE o.{seed_docs}""", (s,))
        db.execute("COMMIT")
        _log(f"copy {c}/{copies - 1}: {time.perf_counter() - t:.0f} s")
    db.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'index_version'")
    db.execute("INSERT INTO log (at, index_version, op, doc_id, version, detail) VALUES "
               "(datetime('now'), (SELECT value FROM meta WHERE key = 'index_version'), 'bench', NULL, "
               "NULL, ?)", (f"replicated {copies} times by bench/scale/million_chunks.py",))
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    counts = {t: db.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
              for t in ("documents", "chunks", "vectors", "sections")}
    db.close()
    partial.rename(path)
    for suffix in ("-wal", "-shm"):
        Path(str(partial) + suffix).unlink(missing_ok=True)
    return {"cached": False, "copies": copies, "seconds": time.perf_counter() - started, **counts,
            "store_mb": path.stat().st_size / 1e6}


# -- the questions ---------------------------------------------------------------------------------

def make_questions(path: Path, n: int, seed: int) -> list[str]:
    """``n`` runs of 12 consecutive words from random searchable chunks (as bench/retrieval/bm25_incremental.py)."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    top = db.execute("SELECT max(rowid) FROM chunks").fetchone()[0]
    rng = random.Random(seed)
    questions: list[str] = []
    while len(questions) < n:
        row = db.execute("SELECT text FROM chunks WHERE rowid >= ? AND duplicate_of IS NULL ORDER BY rowid "
                         "LIMIT 1", (rng.randrange(top),)).fetchone()
        words = row[0].split() if row else []
        if len(words) >= 12:
            start = rng.randrange(len(words) - 11)
            questions.append(" ".join(words[start:start + 12]))
    db.close()
    return questions


def devset_questions(n: int, seed: int) -> list[str]:
    """Real questions for the dense channel and the pipeline: the dev set's."""
    path = SEED_STORE.parent / "queries.jsonl"
    questions = [json.loads(line)["question"] for line in path.read_text().splitlines() if line.strip()]
    return random.Random(seed).sample(questions, min(n, len(questions)))


def rss_mb() -> float:
    """The process's resident memory now (Linux), in MB; 0 where /proc is missing."""
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6
    except (OSError, ValueError):
        return 0.0


def summary(seconds: list[float]) -> dict[str, float]:
    ms = sorted(x * 1000 for x in seconds)
    return {"p50_ms": statistics.median(ms), "p95_ms": ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))],
            "mean_ms": statistics.fmean(ms), "n": len(ms)}


def timed_each(fn, items) -> tuple[dict[str, object], list]:
    wall, cpu, out = [], [], []
    for item in items:
        with Stopwatch() as clock:
            out.append(fn(item))
        wall.append(clock.wall)
        cpu.append(clock.cpu)
    return summary(wall) | {"cpu": summary(cpu)}, out


def settings_overrides() -> list[str]:
    return ["retrieval.dense.backend=onnx", f"retrieval.dense.model={INT8}"]


# -- phase: ragdx ----------------------------------------------------------------------------------

ALL_GROUPS = ("public", "staff")  # every group of the dev set: the keyword comparison reads everything


def phase_ragdx(store_path: Path, work: Path) -> dict[str, object]:
    import shutil
    from ragdx.build import build_encoder, build_pipeline
    from ragdx.config import load_settings
    from ragdx.stages.bm25 import BM25Retriever
    from ragdx.stages.dense import DenseRetriever
    from ragdx.store.sqlite import SQLiteStore
    from ragdx.types import Principal, Query

    questions = json.loads((work / "questions.json").read_text())
    copy = work / "store-edit.db"  # edits and deletes go to a copy: the cached store stays as built
    _log("copying the store for the edits ...")
    with Stopwatch() as copying:
        shutil.copyfile(store_path, copy)
    out: dict[str, object] = {"copy_s": copying.wall}
    store = SQLiteStore(copy)
    everyone, public = Principal("bench", ALL_GROUPS), Principal("bench-public", ("public",))
    bm25 = BM25Retriever(store, top_k=10, prefix_weight=1.0, text_weight=1.0, current_only=False)

    def keyword(question: str) -> list[tuple[str, float]]:
        return [(i.chunk_id, i.score) for i in bm25.run(Query("q", question, everyone)).items]

    _log("first keyword query (the posting mirror is built) ...")
    with Stopwatch() as first:
        keyword(questions["keyword"][0])
    out["keyword_first_query_s"] = first.wall
    out["rss_after_keyword_mirror_mb"] = peak_rss_mb()
    out["rss_held_after_keyword_mirror_mb"] = rss_mb()
    for q in questions["keyword"][:20]:
        keyword(q)
    out["keyword_top10"], tops = timed_each(keyword, questions["keyword"])
    (work / "ragdx_top10.json").write_text(json.dumps(tops))
    _log(f"keyword p50 {out['keyword_top10']['p50_ms']:.2f} ms")

    settings = load_settings(overrides=settings_overrides())
    encoder = build_encoder(settings.retrieval.dense)
    dense = DenseRetriever(store, encoder, top_k=100)  # search = auto: the bounded index at this size
    vectors = encoder.encode(questions["dense"], kind="query").vectors
    _log("first dense query (the bounded index is loaded) ...")
    before = rss_mb()
    with Stopwatch() as first:
        index = dense.index()
    out["dense_load_s"] = first.wall
    out["rss_held_by_dense_index_mb"] = rss_mb() - before
    out["dense_index"] = {"type": type(index).__name__, "rows": index.rows, "mb": index.nbytes / 1e6}
    for k in (10, 100):
        out[f"dense_top{k}"], found = timed_each(
            lambda v, k=k: index.nearest(v, public.groups, k, None), list(vectors))
        (work / f"dense_top{k}.json").write_text(json.dumps(found))
    out["rss_after_dense_mb"] = peak_rss_mb()
    out["rss_held_after_dense_mb"] = rss_mb()
    _log(f"dense p50 {out['dense_top10']['p50_ms']:.1f} ms")

    pipeline = build_pipeline(store, settings, encoder=encoder)
    asked = [Query(f"q{i}", q, public) for i, q in enumerate(questions["dense"])]
    for query in asked[:3]:
        pipeline.run(query)
    out["pipeline"], traces = timed_each(pipeline.run, asked)
    stage_ms: dict[str, list[float]] = {}
    for trace in traces:
        for stage in trace.stages:
            stage_ms.setdefault(stage.stage, []).append(getattr(stage, "seconds", 0.0) * 1000)
    out["pipeline_stage_p50_ms"] = {name: statistics.median(ms) for name, ms in stage_ms.items()}
    out["rss_after_pipeline_mb"] = peak_rss_mb()
    out["rss_held_after_pipeline_mb"] = rss_mb()
    _log(f"pipeline p50 {out['pipeline']['p50_ms']:.0f} ms")

    out["edits"], out["deletes"] = edit_and_delete(store, settings, encoder, bm25, dense, work)
    out["peak_rss_mb"] = peak_rss_mb()
    store.close()
    for suffix in ("", "-wal", "-shm"):
        Path(str(copy) + suffix).unlink(missing_ok=True)
    return out


def edit_and_delete(store, settings, encoder, bm25, dense, work: Path, n: int = 5) -> tuple[list, list]:
    """Edit ``n`` documents of copy 1 (a paragraph with a new word appended: a new version, parsed,
    chunked, embedded and written) and delete ``n`` others; after each, the next keyword and dense
    queries (which patch their indexes) must see it."""
    from ragdx.build import build_ingestor
    from ragdx.ingest.ingestor import delete_documents
    from ragdx.types import Principal, Query

    everyone = Principal("bench", ALL_GROUPS)
    db = sqlite3.connect(f"file:{store.path}?mode=ro", uri=True)
    counts = db.execute("SELECT doc_id, count(*) FROM chunks WHERE doc_id LIKE 'copy1/python/%' "
                        "AND version = '3.11.2' GROUP BY doc_id ORDER BY count(*), doc_id").fetchall()
    db.close()
    middle = len(counts) // 2
    targets = counts[middle - n:middle + n]
    entries = {}
    for line in (SEED_STORE.parent / "manifest.jsonl").read_text().splitlines():
        entry = json.loads(line)
        entries[entry["doc_id"]] = entry
    edits, deletes = [], []
    for i, (doc_id, n_chunks) in enumerate(targets[0::2]):
        entry = dict(entries[doc_id.removeprefix("copy1/")])
        word = f"zqxmillion{i}marker"
        page = work / f"edit{i}.html"
        html = Path(entry["path"]).read_text(encoding="utf-8", errors="replace")
        page.write_text(html.replace("</body>", f"<p>An edited paragraph: {word} appears here.</p></body>"))
        entry.update(doc_id=doc_id, path=str(page))
        entry.pop("version", None)
        manifest = work / f"edit{i}.jsonl"
        manifest.write_text(json.dumps(entry) + "\n")
        ingestor = build_ingestor(store, settings, encoder)
        with Stopwatch() as clock:
            report = ingestor.run(manifest)
        with Stopwatch() as next_keyword:
            top = bm25.run(Query("q", word, everyone)).items
        new = store.versions(doc_id)[-1].document.version
        space = store.active_space().id
        vector = np.frombuffer(store.chunk_vectors(space, doc_id, new)[-1], dtype=np.float32)
        with Stopwatch() as next_dense:
            index = dense.index()
            found = index.nearest(vector, everyone.groups, 1, None)
        edits.append({"doc_id": doc_id, "chunks_before": n_chunks, "seconds": clock.wall, "cpu_s": clock.cpu,
                      "chunks_written": report.chunks, "next_keyword_query_s": next_keyword.wall,
                      "next_keyword_query_cpu_s": next_keyword.cpu,
                      "next_dense_query_s": next_dense.wall,
                      "keyword_finds_it": bool(top) and top[0].doc_id == doc_id,
                      "new_version": new, "dense_rows_match_store": index.rows == store.vector_count(space),
                      "dense_finds_new_version": bool(found) and found[0][0] in {c.id for c in store.chunks(doc_id, new)}})
        _log(f"edit {doc_id}: {clock.wall * 1000:.0f} ms, next keyword {next_keyword.wall * 1000:.0f} ms, "
             f"next dense {next_dense.wall * 1000:.0f} ms")
    for doc_id, n_chunks in targets[1::2]:
        chunks = store.chunks(doc_id)
        question = " ".join(max((c.text for c in chunks), key=len).split()[:12])
        vector = encoder.encode([chunks[0].text], kind="passage").vectors[0]
        before_kw = doc_id in {i.doc_id for i in bm25.deeper(100).run(Query("q", question, everyone)).items} \
            if hasattr(bm25, "deeper") else None
        with Stopwatch() as clock:
            delete_documents(store, [doc_id])
        with Stopwatch() as next_keyword:
            after = bm25.run(Query("q", question, everyone)).items
        with Stopwatch() as next_dense:
            index = dense.index()
            found = index.nearest(vector, everyone.groups, 100, None)
        gone = {c.id for c in chunks}
        deletes.append({"doc_id": doc_id, "chunks": n_chunks, "seconds": clock.wall, "cpu_s": clock.cpu,
                        "next_keyword_query_s": next_keyword.wall, "next_dense_query_s": next_dense.wall,
                        "next_keyword_query_cpu_s": next_keyword.cpu,
                        "found_before_top100": before_kw,
                        "keyword_absent_after": all(i.doc_id != doc_id for i in after),
                        "dense_absent_after": not gone & {cid for cid, _ in found}})
        _log(f"delete {doc_id}: {clock.wall * 1000:.0f} ms, next keyword {next_keyword.wall * 1000:.0f} ms, "
             f"next dense {next_dense.wall * 1000:.0f} ms")
    return edits, deletes


# -- phase: exact dense ----------------------------------------------------------------------------

def phase_exact(store_path: Path, work: Path) -> dict[str, object]:
    from ragdx.build import build_encoder
    from ragdx.config import load_settings
    from ragdx.store.sqlite import SQLiteStore
    from ragdx.store.vectors import DenseIndex

    questions = json.loads((work / "questions.json").read_text())
    store = SQLiteStore(store_path, mode="read")
    space = store.active_space()
    encoder = build_encoder(load_settings(overrides=settings_overrides()).retrieval.dense)
    vectors = encoder.encode(questions["dense"], kind="query").vectors
    held = rss_mb()
    with Stopwatch() as load:
        exact = DenseIndex.load(store, space.id, space.dim)
    out_held = rss_mb() - held
    out: dict[str, object] = {"load_s": load.wall, "matrix_mb": exact.matrix.nbytes / 1e6,
                              "rss_held_by_index_mb": out_held}
    for k in (10, 100):
        timing, found = timed_each(lambda v, k=k: exact.nearest(v, ("public",), k, None), list(vectors))
        bounded = json.loads((work / f"dense_top{k}.json").read_text())
        out[f"top{k}"] = timing | {"recall": recall(bounded, found, k)}
    out["peak_rss_mb"] = peak_rss_mb()
    store.close()
    del exact
    out["distinct"] = distinct_recall(vectors)
    return out


def distinct_recall(vectors) -> dict[str, object]:
    """The bounded index against exact search on the dev set's own store (every vector distinct,
    70k of them; no copies tie), by chunk id, for the same questions."""
    from ragdx.store.sqlite import SQLiteStore
    from ragdx.store.vectors import DenseIndex, QuantizedIndex

    store = SQLiteStore(SEED_STORE, mode="read")
    space = store.active_space()
    exact, bounded = DenseIndex.load(store, space.id, space.dim), QuantizedIndex.load(store, space.id, space.dim)
    out: dict[str, object] = {"store": str(SEED_STORE), "vectors": bounded.rows}
    for k in (10, 100):
        truth = [exact.nearest(v, ("public",), k) for v in vectors]
        timing, found = timed_each(lambda v, k=k: bounded.nearest(v, ("public",), k), list(vectors))
        out[f"top{k}"] = timing | {"recall": recall(found, truth, k)}
    store.close()
    return out


def recall(found: list, truth: list, k: int) -> dict[str, float]:
    """Recall@k of ``found`` against exact ``truth``, both lists of (chunk id, score): by id, and
    tie-aware (a result counts when its exact score reaches the k-th exact score: the copies tie
    15 ways, and which copy comes first decides nothing)."""
    by_id, tie_aware = [], []
    for mine, exact in zip(found, truth):
        ids = {c for c, _ in exact}
        by_id.append(len(ids & {c for c, _ in mine}) / max(1, len(exact)))
        kth = exact[-1][1] if exact else 0.0
        tie_aware.append(sum(score >= kth - 1e-6 for _, score in mine[:k]) / max(1, len(exact)))
    return {"by_id": statistics.fmean(by_id), "tie_aware": statistics.fmean(tie_aware),
            "tie_aware_min": min(tie_aware)}


# -- phase: bm25s ----------------------------------------------------------------------------------

def phase_bm25s(store_path: Path, work: Path, copies: int) -> dict[str, object]:
    from retrieval.bm25_vs_bm25s import Bm25sSearch, Rows, agreement
    from ragdx.store.keyword import IDF_FLOOR
    from ragdx.testing.fts5 import fts5_porter, fts5_tokens, reference_bm25

    questions = json.loads((work / "questions.json").read_text())["keyword"]
    rows = Rows.load(store_path)
    texts = [p + "\n" + t for p, t in zip(rows.prefixes, rows.texts)]
    rows.prefixes, rows.texts = [], []
    fts5_porter.cache_clear()
    with Stopwatch() as tokenizing:
        tokens = [fts5_tokens(t) for t in texts]
    del texts
    with Stopwatch() as indexing:
        model = reference_bm25("float32", backend="numpy")
        model.index(tokens, show_progress=False)
    n_tokens = sum(map(len, tokens))
    _log(f"bm25s rebuilt: tokenize {tokenizing.wall:.0f} s, index {indexing.wall:.0f} s")
    plain = Bm25sSearch(model, rows)
    for q in questions[:20]:
        plain(q, 10)
    timing, _ = timed_each(lambda q: plain(q, 10), questions)
    ours = [[tuple(x) for x in top] for top in json.loads((work / "ragdx_top10.json").read_text())]
    agree32 = agreement(ours, [tie_complete(model, rows, q, 10, copies) for q in questions])
    rss = peak_rss_mb()  # bm25s's own peak, before the float64 index below is built
    # float32 scores tie passages whose exact scores differ in the 7th digit (and order them by
    # row): the agreement that counts is with bm25s in float64, as bench/retrieval/bm25_vs_bm25s.py does.
    del model, plain
    model = reference_bm25("float64", backend="numpy")
    model.index(tokens, show_progress=False)
    theirs = [tie_complete(model, rows, q, 10, copies) for q in questions]
    agree = agreement(ours, theirs)
    agree["differing"] = differing(questions, ours, theirs)
    # and bm25s given FTS5's idf floor (1e-6, not 0): the one formula, computed twice
    del model
    model = reference_bm25("float64", backend="numpy", idf_floor=IDF_FLOOR)
    model.index(tokens, show_progress=False)
    del tokens
    floored = [tie_complete(model, rows, q, 10, copies) for q in questions]
    agree_floor = agreement(ours, floored)
    agree_floor["differing"] = differing(questions, ours, floored)
    return {"chunks": len(rows.ids), "tokens": n_tokens,
            "rebuild": {"tokenize_s": tokenizing.wall, "index_s": indexing.wall,
                        "total_s": tokenizing.wall + indexing.wall,
                        "cpu_s": tokenizing.cpu + indexing.cpu},
            "top10": timing, "agreement_top10": agree, "agreement_top10_float32": agree32,
            "agreement_top10_fts5_idf": agree_floor,
            "peak_rss_mb": rss}


def differing(questions: list[str], ours: list, theirs: list) -> list[dict[str, object]]:
    """The questions whose top 10s differ, with both lists, and whether the scores agree rank by
    rank within what FTS5's idf floor can add: FTS5 gives a term held by half the rows or more
    an idf of 1e-6 where bm25s gives 0, so each such term adds up to 1e-6 * (k1 + 1) to a row in
    ragdx and nothing in bm25s (two rows tied in bm25s can differ by that much in FTS5)."""
    from ragdx.store.keyword import IDF_FLOOR
    from ragdx.store.lexical import FTS_BM25_K1
    from ragdx.testing.fts5 import fts5_query_tokens

    out = []
    for question, a, b in zip(questions, ours, theirs):
        if [i for i, _ in a] == [i for i, _ in b]:
            continue
        bound = len(set(fts5_query_tokens(question))) * IDF_FLOOR * (FTS_BM25_K1 + 1)
        gap = max((abs(s - t) for (_, s), (_, t) in zip(a, b)), default=float("inf")) if len(a) == len(b) \
            else float("inf")
        out.append({"question": question, "ragdx": a, "bm25s": b, "max_rank_score_gap": gap,
                    "idf_floor_bound": bound, "within_idf_floor": gap <= bound})
    return out


def tie_complete(model, rows, question: str, k: int, copies: int) -> list[tuple[str, float]]:
    """bm25s's top ``k`` with equal scores ordered by row, as ragdx orders them: bm25s is asked
    deeper (from ``k * copies``, doubling) until its list holds every row that ties the k-th
    score (a passage that recurs in several chunks ties them all, in every copy)."""
    from ragdx.testing.fts5 import fts5_query_tokens

    tokens, mask = fts5_query_tokens(question), (~rows.duplicate).astype(model.dtype)
    depth = k * copies
    while True:
        found = model.retrieve([tokens], k=min(depth, len(rows.ids)), weight_mask=mask, show_progress=False,
                               n_threads=0)
        docs, scores = found.documents[0], found.scores[0]
        if depth >= len(rows.ids) or scores.size <= k or scores[-1] < scores[k - 1]:
            break
        depth *= 2
    order = np.lexsort((docs, -scores))[:k]
    docs, scores = docs[order], scores[order]
    matched = scores > 0
    return list(zip(np.array(rows.ids, dtype=object)[docs[matched]], scores[matched].tolist()))


# -- running it all --------------------------------------------------------------------------------

def run_phase(phase: str, args: argparse.Namespace, work: Path) -> dict[str, object]:
    """One phase in a fresh process (its peak RSS its own), under nice."""
    command = ["nice", "-n", "5", sys.executable, __file__, "--phase", phase, "--store", str(args.store),
               "--work", str(work)]
    _log(f"phase {phase} ...")
    with Stopwatch() as clock:
        subprocess.run(command, check=True)
    result = json.loads((work / f"{phase}.json").read_text())
    result["phase_wall_s"] = clock.wall
    return result


def table(r: dict) -> str:
    g, e, b, x = r["ragdx"], r["exact"], r["bm25s"], r["store"]
    med = lambda rows, key: statistics.median(row[key] for row in rows)  # noqa: E731
    kw, bs = g["keyword_top10"], b["top10"]
    lines = [
        f"{x['chunks']:,} chunks ({x.get('copies', '?')} copies of the dev set's {x.get('seed_chunks', '?')}), "
        f"{x.get('vectors', '?'):,} vectors; bm25s over {b['chunks']:,} chunks, {b['tokens']:,} tokens",
        f"{'':<44}{'p50 ms':>9}{'p95 ms':>9}{'CPU p50':>9}",
        f"{'ragdx  top_k=10 (keyword)':<44}{kw['p50_ms']:>9.2f}{kw['p95_ms']:>9.2f}{kw['cpu']['p50_ms']:>9.2f}",
        f"{'bm25s  top_k=10':<44}{bs['p50_ms']:>9.2f}{bs['p95_ms']:>9.2f}{bs['cpu']['p50_ms']:>9.2f}",
        f"{'ragdx / bm25s':<44}{kw['p50_ms'] / bs['p50_ms']:>9.2f}{kw['p95_ms'] / bs['p95_ms']:>9.2f}",
        f"overlap@10 with bm25s float64 {b['agreement_top10']['overlap@10_mean']:.4f} "
        f"(identical lists {b['agreement_top10']['identical_lists']}/{b['agreement_top10']['queries']}); "
        f"with float32 {b['agreement_top10_float32']['overlap@10_mean']:.4f}; differing lists whose scores agree "
        f"within FTS5's idf floor: {sum(d['within_idf_floor'] for d in b['agreement_top10']['differing'])}"
        f"/{len(b['agreement_top10']['differing'])}",
        *([f"overlap@10 with bm25s float64 given FTS5's idf floor "
           f"{b['agreement_top10_fts5_idf']['overlap@10_mean']:.4f} (identical lists "
           f"{b['agreement_top10_fts5_idf']['identical_lists']}/{b['agreement_top10_fts5_idf']['queries']})"]
          if "agreement_top10_fts5_idf" in b else []),
        f"first keyword query (mirror built) {g['keyword_first_query_s']:.1f} s",
        f"bm25s rebuild {b['rebuild']['total_s']:.1f} s (tokenize {b['rebuild']['tokenize_s']:.1f}, "
        f"index {b['rebuild']['index_s']:.1f})",
        f"edit (parse, chunk, embed, write) median {med(g['edits'], 'seconds') * 1000:.0f} ms, "
        f"next keyword query {med(g['edits'], 'next_keyword_query_s') * 1000:.0f} ms, "
        f"next dense query {med(g['edits'], 'next_dense_query_s') * 1000:.0f} ms",
        f"delete median {med(g['deletes'], 'seconds') * 1000:.1f} ms, next keyword query "
        f"{med(g['deletes'], 'next_keyword_query_s') * 1000:.0f} ms, next dense query "
        f"{med(g['deletes'], 'next_dense_query_s') * 1000:.0f} ms",
        f"dense bounded ({g['dense_index']['mb']:.0f} MB, loaded in {g['dense_load_s']:.1f} s): "
        f"top10 p50 {g['dense_top10']['p50_ms']:.1f} ms, top100 p50 {g['dense_top100']['p50_ms']:.1f} ms",
        f"dense exact ({e['matrix_mb']:.0f} MB, loaded in {e['load_s']:.1f} s): "
        f"top10 p50 {e['top10']['p50_ms']:.1f} ms, top100 p50 {e['top100']['p50_ms']:.1f} ms",
        f"recall of bounded vs exact (tie-aware, the copies tie): @10 {e['top10']['recall']['tie_aware']:.4f}, "
        f"@100 {e['top100']['recall']['tie_aware']:.4f}; on the dev set's {e['distinct']['vectors']:,} distinct "
        f"vectors, by id (tie-aware): @10 {e['distinct']['top10']['recall']['by_id']:.4f} "
        f"({e['distinct']['top10']['recall']['tie_aware']:.4f}), @100 {e['distinct']['top100']['recall']['by_id']:.4f} "
        f"({e['distinct']['top100']['recall']['tie_aware']:.4f})",
        f"pipeline p50 {g['pipeline']['p50_ms']:.0f} ms, p95 {g['pipeline']['p95_ms']:.0f} ms; "
        f"stages p50 {', '.join(f'{k} {v:.1f}' for k, v in g['pipeline_stage_p50_ms'].items())}",
        f"peak RSS: ragdx query process {g['peak_rss_mb']:.0f} MB (after the keyword mirror "
        f"{g['rss_after_keyword_mirror_mb']:.0f}, after dense {g['rss_after_dense_mb']:.0f}; held after the "
        f"pipeline {g.get('rss_held_after_pipeline_mb', 0):.0f}), "
        f"exact dense {e['peak_rss_mb']:.0f} MB, bm25s {b['peak_rss_mb']:.0f} MB",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed-store", type=Path, default=SEED_STORE)
    ap.add_argument("--store", type=Path, default=DEFAULT_STORE)
    ap.add_argument("--chunks", type=int, default=1_000_000)
    ap.add_argument("--queries", type=int, default=200, help="keyword questions (12 words from chunks)")
    ap.add_argument("--dense-queries", type=int, default=100, help="dev-set questions (dense, pipeline)")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--phase", choices=("build",) + PHASES)
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--only", nargs="+", choices=PHASES, help="run these phases again and merge them into --out")
    args = ap.parse_args(argv)
    if args.phase == "build":
        print(json.dumps(build_store(args.seed_store, args.store, args.chunks)))
        return 0
    if args.phase:
        work = args.work
        if args.phase == "ragdx":
            result = phase_ragdx(args.store, work)
        elif args.phase == "exact":
            result = phase_exact(args.store, work)
        else:
            result = phase_bm25s(args.store, work, json.loads((work / "store.json").read_text())["copies"])
        (work / f"{args.phase}.json").write_text(json.dumps(result, indent=1))
        return 0
    if not args.seed_store.exists() and not args.store.exists():
        print(f"no {args.seed_store}: run bench/quality/quality.py first (it builds the dev set's store)", file=sys.stderr)
        return 2
    with Stopwatch() as building:
        built = build_store(args.seed_store, args.store, args.chunks)
    db = sqlite3.connect(f"file:{args.store}?mode=ro", uri=True)
    seed_chunks = db.execute("SELECT count(*) FROM chunks WHERE doc_id NOT LIKE 'copy%/%'").fetchone()[0]
    store_info = built | {"seed_chunks": seed_chunks, "build_s": building.wall,
                          "chunks": db.execute("SELECT count(*) FROM chunks").fetchone()[0],
                          "vectors": db.execute("SELECT count(*) FROM vectors").fetchone()[0],
                          "documents": db.execute("SELECT count(*) FROM documents").fetchone()[0],
                          "copies": db.execute("SELECT count(DISTINCT substr(doc_id, 1, instr(doc_id, '/'))) "
                                               "FROM documents WHERE doc_id LIKE 'copy%/%'").fetchone()[0] + 1,
                          "store_mb": args.store.stat().st_size / 1e6}
    db.close()
    work = args.store.parent / "work"
    work.mkdir(exist_ok=True)
    if args.only:  # the questions and the other phases' results stay as they were
        result = json.loads(args.out.read_text())
        for phase in args.only:
            result[phase] = run_phase(phase, args, work) | {"rerun": code_version()}
        write_result(args.out, result, table(result))
        return 0
    (work / "store.json").write_text(json.dumps(store_info))
    questions = {"keyword": make_questions(args.store, args.queries, args.seed),
                 "dense": devset_questions(args.dense_queries, args.seed)}
    (work / "questions.json").write_text(json.dumps(questions))
    result: dict[str, object] = {"benchmark": "million_chunks", "command": ".venv/bin/python bench/scale/million_chunks.py",
                                 "code": code_version(), "machine": machine(), "store": store_info,
                                 "load_average_start": os.getloadavg()}
    for phase in PHASES:
        result[phase] = run_phase(phase, args, work)
    result["load_average_end"] = os.getloadavg()
    write_result(args.out, result, table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

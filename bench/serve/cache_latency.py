"""The result caches (issue 15): a cache hit against a full pipeline run, and the cost of
invalidation after one edit, in a ~100k-chunk store.

Reproduce, from the repository root::

    .venv/bin/python bench/serve/cache_latency.py [--chunks 100000] [--questions 100] [--edits 3]

(needs ``apt-get install python3-doc`` for the corpus.)

The store: the ~530 HTML pages of the Python 3.11 docs ingested as many times as it takes to
come nearest ``--chunks`` chunks, under distinct doc_ids, dense channel off (as
bench/retrieval/bm25_incremental.py). The pipeline: the default one without the dense channel (BM25 top
200, RRF, governance with withholding, context, extractive generation, lexical verification).
The questions: ``--questions`` chunks of the first copy drawn at random (seed 0), each asked as
8 consecutive words of its text.

Measured, per question (medians, wall and CPU seconds of this process):

(a) the full pipeline, uncached; (b) a cache miss (the same run, plus binding the answer and
    keeping the retrieval and answer entries); (c) an answer-cache hit (sync with the store,
    look-up, evidence recheck); (d) a retrieval-cache hit (a pipeline with another context
    budget: the ranked lists are served, context, generation and verification run);
(e) invalidation: ``--edits`` times, one document of median size gains a paragraph and is
    ingested again (a new version); then ``cache.sync`` drops what the change could alter, and is
    timed; every question is asked again: a kept entry is served, and its answer (text and cited
    spans) and its context (units' spans) are compared with an uncached run's (the check that a
    kept entry was not stale; corpus statistics are not a dependency, so a kept list's deep ranks
    may differ by a near-tie); a dropped one is recomputed (so the next edit meets a full cache).
    Last, one document is deleted, likewise.

A table goes to stdout, progress to stderr, everything to ``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
import tempfile
from pathlib import Path

from ragdx.build import build_ingestor, build_pipeline
from ragdx.caching import CachedPipeline
from ragdx.config import load_settings
from ragdx.ingest.ingestor import delete_documents
from ragdx.store.cache import SQLiteCache
from ragdx.store.sqlite import SQLiteStore
from ragdx.types import Principal, Query

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _common, and the areas
from _common import (  # noqa: E402
    DEFAULT_HTML, REPO, Stopwatch, code_version, html_pages, machine, missing_pages, write_result,
)
from retrieval.bm25_incremental import edited_copy, median_documents, write_manifest  # noqa: E402

DEFAULT_OUT = REPO / "bench" / "results" / "cache_latency.json"
SETTINGS = ["retrieval.dense.enabled=false"]
ASKER = Principal("bench", ("public",))


def questions(store: SQLiteStore, n: int) -> list[str]:
    """``n`` questions: 8 consecutive words of as many chunks of the first copy, drawn at random."""
    rng = random.Random(0)
    chunks = [c for c in store.chunks() if c.doc_id.startswith("copy0/")]
    out: list[str] = []
    for chunk in rng.sample(chunks, len(chunks)):
        words = re.findall(r"[A-Za-z]{3,}", chunk.text)
        if len(words) >= 8:
            start = rng.randrange(len(words) - 7)
            out.append(" ".join(words[start:start + 8]))
        if len(out) == n:
            break
    return out


def timed(run, question: str):
    with Stopwatch() as clock:
        trace = run(Query("q", question, ASKER))
    return trace, clock


def differences(cached, fresh) -> tuple[bool, bool]:
    """Whether a served trace's answer (text and cited spans) differs from an uncached run's,
    and whether its context (the units' spans) does."""
    spans = lambda t: [u.span for u in t.context.units]  # noqa: E731
    cited = lambda t: [t.context.unit(c).span for c in t.answer.citations if t.context.unit(c)]  # noqa: E731
    return (cached.answer.text != fresh.answer.text or cited(cached) != cited(fresh)), spans(cached) != spans(fresh)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def change_round(store, plain, pipeline, asked: list[str], change) -> dict:
    """Apply one change, time the cache's sync, ask every question again and check each kept entry."""
    total = len(pipeline.cache)
    change()
    with Stopwatch() as sync:
        dropped = pipeline.cache.sync(store)
    served = answers = contexts = 0
    for q in asked:
        before = pipeline.stats.answer_hits
        trace = pipeline.run(Query("q", q, ASKER))
        if pipeline.stats.answer_hits > before:
            served += 1
            answer, context = differences(trace, plain.run(Query("q", q, ASKER)))
            answers += answer
            contexts += context
    return {"entries_before": total, "dropped": dropped, "sync_s": sync.wall, "sync_cpu_s": sync.cpu,
            "answers_served_after": served, "served_answer_differs_from_uncached": answers,
            "served_context_differs_from_uncached": contexts}


def run(html_dir: Path, target_chunks: int, n_questions: int, edits: int) -> dict:
    pages = html_pages(html_dir)
    settings = load_settings(overrides=SETTINGS)
    with tempfile.TemporaryDirectory(prefix="ragdx-cache-") as tmp_name:
        tmp = Path(tmp_name)
        db_path = tmp / "store.db"
        store = SQLiteStore(db_path)
        copies, c = 1, 0
        while c < copies:
            manifest = write_manifest(tmp / f"copy{c}.jsonl", [
                (f"copy{c}/{p.relative_to(html_dir).as_posix()}", p) for p in pages])
            build_ingestor(store, settings).run(manifest, allow_outside=True)
            if c == 0:
                copies = max(1, round(target_chunks / store.counts()["chunks"]))
            print(f"copy {c + 1}/{copies} ingested", file=sys.stderr, flush=True)
            c += 1
        counts = store.counts()
        asked = questions(store, n_questions)
        plain = build_pipeline(store, settings)
        plain.warm_up()
        pipeline = CachedPipeline(build_pipeline(store, settings), SQLiteCache(tmp / "store.db.cache"))
        budget = CachedPipeline(build_pipeline(store, load_settings(overrides=[*SETTINGS, "context.budget_tokens=1500"])),
                                pipeline.cache)
        full, miss, hit, retrieval_hit = [], [], [], []
        for n, q in enumerate(asked, start=1):
            full.append(timed(plain.run, q)[1])
            miss.append(timed(pipeline.run, q)[1])
            trace, clock = timed(pipeline.run, q)
            assert trace.cached, "the second ask must be served"
            hit.append(clock)
            trace, clock = timed(budget.run, q)
            assert "governance" in trace.cached and "context" not in trace.cached, trace.cached
            retrieval_hit.append(clock)
            print(f"\rquestion {n}/{len(asked)}", end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)
        rounds = []
        for i, (doc_id, n_chunks) in enumerate(median_documents(db_path, "copy0/", edits)):
            page = next(p for p in pages if p.relative_to(html_dir).as_posix() == doc_id.split("/", 1)[1])
            path = edited_copy(page, tmp / f"edit{i}", f"zqxedit{i}marker")
            manifest = write_manifest(tmp / f"edit{i}.jsonl", [(doc_id, path)])
            row = change_round(store, plain, pipeline, asked,
                               lambda: build_ingestor(store, settings).run(manifest, allow_outside=True))
            rounds.append({"change": "edit", "doc_id": doc_id, "chunks": n_chunks, **row})
            print(f"edit {doc_id}: {row}", file=sys.stderr, flush=True)
        victim = median_documents(db_path, "copy1/" if copies > 1 else "copy0/", edits + 1)[-1]
        row = change_round(store, plain, pipeline, asked, lambda: delete_documents(store, [victim[0]]))
        rounds.append({"change": "delete", "doc_id": victim[0], "chunks": victim[1], **row})
        print(f"delete {victim[0]}: {row}", file=sys.stderr, flush=True)
        cache_mb = sum(p.stat().st_size for p in tmp.glob("store.db.cache*")) / 1e6
        pipeline.cache.close()
        store.close()

    def stats(clocks: list) -> dict:
        return {"median_s": median([c.wall for c in clocks]), "median_cpu_s": median([c.cpu for c in clocks])}

    return {
        "benchmark": "cache_latency",
        "command": ".venv/bin/python bench/serve/cache_latency.py "
                   f"--chunks {target_chunks} --questions {n_questions} --edits {edits}",
        "code": code_version(), "machine": machine(),
        "store": {"target_chunks": target_chunks, "copies": copies, "counts": counts, "cache_mb": cache_mb},
        "questions": len(asked),
        "full_pipeline": stats(full), "cache_miss": stats(miss), "answer_hit": stats(hit),
        "retrieval_hit": stats(retrieval_hit),
        "speedup_answer_hit": median([c.wall for c in full]) / median([c.wall for c in hit]),
        "invalidation": rounds,
    }


def table(r: dict) -> str:
    m, s = r["machine"], r["store"]
    row = lambda name, x: f"{name:<44} {x['median_s'] * 1000:9.2f} {x['median_cpu_s'] * 1000:9.2f}"  # noqa: E731
    lines = [
        f"machine: {m['cpu_model']}, {m['nproc']} cores, Python {m['python']}",
        f"store: {s['counts']['chunks']:,} chunks in {s['counts']['versions']:,} versions; "
        f"{r['questions']} questions; cache file {s['cache_mb']:.1f} MB",
        "",
        f"{'per question (median)':<44} {'wall ms':>9} {'CPU ms':>9}",
        row("full pipeline, uncached", r["full_pipeline"]),
        row("cache miss (run + bind + keep both entries)", r["cache_miss"]),
        row("answer-cache hit (sync + look-up + recheck)", r["answer_hit"]),
        row("retrieval-cache hit (+ context, generation)", r["retrieval_hit"]),
        f"answer hit speed-up: {r['speedup_answer_hit']:.0f}x",
        "",
        f"{'change':<8} {'document':<34} {'chunks':>6} {'entries':>7} {'dropped':>7} {'sync ms':>8} "
        f"{'CPU ms':>7} {'served':>6} {'answer differs':>14} {'context differs':>15}",
    ]
    for x in r["invalidation"]:
        lines.append(f"{x['change']:<8} {x['doc_id'][:34]:<34} {x['chunks']:>6} {x['entries_before']:>7} "
                     f"{x['dropped']:>7} {x['sync_s'] * 1000:8.1f} {x['sync_cpu_s'] * 1000:7.1f} "
                     f"{x['answers_served_after']:>6} {x['served_answer_differs_from_uncached']:>14} "
                     f"{x['served_context_differs_from_uncached']:>15}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--html-dir", type=Path, default=DEFAULT_HTML)
    ap.add_argument("--chunks", type=int, default=100_000, help="about how many chunks (default 100000)")
    ap.add_argument("--questions", type=int, default=100, help="questions asked (default 100)")
    ap.add_argument("--edits", type=int, default=3, help="documents edited one after another (default 3)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    if min(args.chunks, args.questions, args.edits) < 1:
        ap.error("--chunks, --questions and --edits must be at least 1")
    problem = missing_pages(args.html_dir)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    result = run(args.html_dir, args.chunks, args.questions, args.edits)
    write_result(args.out, result, table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

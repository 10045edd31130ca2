"""The cost of changing ONE document in a ~100k-chunk BM25 index: ragdx (SQLite FTS5, updated in
the ingest's transaction) against a full bm25s rebuild.

Reproduce, from the repository root::

    .venv/bin/python bench/retrieval/bm25_incremental.py

(needs ``bm25s`` and ``PyStemmer`` in the venv, and ``apt-get install python3-doc``.)

The index: the ~530 HTML pages of the Python 3.11 docs ingested as many times as it takes to
come nearest ``--chunks`` chunks (default 100,000; the first copy's chunk count decides, so the
size follows the chunker), under distinct doc_ids (``copy0/library/os.html``, ...), each copy
one ingest, dense channel off, default chunking. Then, for ``--edits`` documents of median size:

(a) edit: the page gains a paragraph with a word found nowhere else, and its manifest entry is
    ingested again: a new version (parse, chunk, insert its chunks, FTS5 rows by trigger, the old
    version marked superseded, one commit). Checked: the next BM25 query finds the new word in it;
(b) delete: ``delete_documents`` on another document (every version, its chunks and their FTS5
    rows, a tombstone, one commit). Checked: 12 words of its longest chunk find it in the top 100
    before, and not after;
(c) bm25s: a full rebuild over the store's chunks (prefix + text, tokenized as FTS5 does, see
    bench/retrieval/bm25_vs_bm25s.py): tokenization and ``index()``, ``--repeat`` times. bm25s has no
    update: its index stores idf * tf-part per (chunk, term), and N, avgdl and every df change
    with any document, so a change is a rebuild.

For scale, also FTS5's own full rebuild (``INSERT INTO chunks_fts(chunks_fts) VALUES('rebuild')``).
Edits and deletes are reported as their median and each value; the ratio is the rebuild's median
over theirs. Times are wall-clock and CPU seconds of this process (SQLite and numpy run in it);
on a shared machine, compare CPU seconds. A table goes to stdout, progress to stderr, everything
to ``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import statistics
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

from ragdx.config import load_settings
from ragdx.ingest.ingestor import delete_documents
from ragdx.ingest.manifest import load_source
from ragdx.build import build_ingestor
from ragdx.stages.bm25 import BM25Retriever
from ragdx.store.sqlite import SQLiteStore
from ragdx.testing.fts5 import fts5_porter, fts5_tokens, reference_bm25
from ragdx.types import Principal, Query

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _common, and the areas
from _common import (  # noqa: E402
    Stopwatch, missing_modules, DEFAULT_HTML, REPO, code_version, html_pages, machine, missing_pages, peak_rss_mb,
    write_result,
)
from retrieval.bm25_vs_bm25s import Bm25sSearch, Rows, agreement, latency, ragdx_search  # noqa: E402

DEFAULT_OUT = REPO / "bench" / "results" / "bm25_incremental.json"
EVERYONE = Principal("bench", ("public",))
SETTINGS = ["retrieval.dense.enabled=false"]


def write_manifest(path: Path, entries: list[tuple[str, Path]]) -> Path:
    path.write_text("".join(json.dumps({"doc_id": d, "path": str(p)}) + "\n" for d, p in entries),
                    encoding="utf-8")
    return path


def edited_copy(page: Path, folder: Path, word: str) -> Path:
    html = page.read_text(encoding="utf-8")
    paragraph = f"<p>Edited for the incremental benchmark: {word} marks this version.</p>\n"
    at = html.rfind("</body>")
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / page.name
    out.write_text(html[:at] + paragraph + html[at:] if at >= 0 else html + paragraph, encoding="utf-8")
    return out


def median_documents(db_path: Path, prefix: str, n: int) -> list[tuple[str, int]]:
    """The n documents of this copy whose chunk counts are closest to the median."""
    db = sqlite3.connect(str(db_path))
    counts = db.execute(
        "SELECT doc_id, count(*) FROM chunks WHERE doc_id LIKE ? GROUP BY doc_id ORDER BY count(*), doc_id",
        (prefix + "%",)).fetchall()
    db.close()
    middle = len(counts) // 2
    return counts[max(0, middle - n // 2):max(0, middle - n // 2) + n]


def top_docs(store: SQLiteStore, question: str, k: int = 10) -> list[str]:
    ranked = BM25Retriever(store, top_k=k).run(Query("q", question, EVERYONE))
    return [item.doc_id for item in ranked.items]


def side_by_side(store: SQLiteStore, db_path: Path, model, n: int, copies: int) -> dict[str, object]:
    """Keyword latency and agreement at this size: ragdx's ``BM25Retriever`` (both columns weight
    1) against the last bm25s rebuild, on ``n`` runs of 12 words from random chunks. The copies
    tie every score ``copies`` ways: for the agreement, bm25s's ties are ordered by row as
    ragdx's are (its top ``10 * copies``, re-sorted); latency is bm25s's plain top 10."""
    rows = Rows.load(db_path)
    rng = random.Random(13)
    texts = [t for t, dup in zip(rows.texts, rows.duplicate) if not dup and len(t.split()) >= 12]
    questions = []
    for text in rng.sample(texts, n):
        words = text.split()
        start = rng.randrange(len(words) - 11)
        questions.append(" ".join(words[start:start + 12]))
    engines = {"ragdx": ragdx_search(store, 1.0, 1.0), "bm25s": Bm25sSearch(model, rows)}
    timing = latency(engines, questions, 10)
    tied = Bm25sSearch(model, rows, ties_by_row=copies)
    agree = agreement([engines["ragdx"](q, 10) for q in questions], [tied(q, 10) for q in questions])
    return {"latency_top10": timing, "agreement_top10": agree}


def run(html_dir: Path, target_chunks: int, edits: int, repeat: int, n_queries: int) -> dict[str, object]:
    pages = html_pages(html_dir)
    with tempfile.TemporaryDirectory(prefix="ragdx-bm25-inc-") as tmp_name:
        tmp = Path(tmp_name)
        db_path = tmp / "store.db"
        store = SQLiteStore(db_path)
        settings = load_settings(overrides=SETTINGS)
        build, copies, c = [], 1, 0
        while c < copies:
            manifest = write_manifest(tmp / f"copy{c}.jsonl", [
                (f"copy{c}/{p.relative_to(html_dir).as_posix()}", p) for p in pages])
            with Stopwatch() as clock:
                build_ingestor(store, settings).run(manifest, allow_outside=True)
            build.append(clock.wall)
            if c == 0:
                copies = max(1, round(target_chunks / store.counts()["chunks"]))
            print(f"copy {c + 1}/{copies} ingested in {clock.wall:.1f} s", file=sys.stderr, flush=True)
            c += 1
        chunks_before = store.counts()

        probe = "sqlite3 connection cursor execute"
        with Stopwatch() as first_query:  # the keyword mirror is built from FTS5's index here
            top_docs(store, probe)
        with Stopwatch() as warm_query:
            top_docs(store, probe)
        print(f"first keyword query {first_query.wall:.1f} s (mirror built)", file=sys.stderr, flush=True)

        targets = median_documents(db_path, "copy0/", 2 * edits)
        to_edit, to_delete = targets[0::2], targets[1::2]
        by_id = {f"copy0/{p.relative_to(html_dir).as_posix()}": p for p in pages}

        edit_rows = []
        for i, (doc_id, n_chunks) in enumerate(to_edit):
            word = f"zqxedit{i}marker"
            path = edited_copy(by_id[doc_id], tmp / f"edit{i}", word)
            manifest = write_manifest(tmp / f"edit{i}.jsonl", [(doc_id, path)])
            ingestor = build_ingestor(store, settings)
            entry = load_source(manifest)[0][0]
            with Stopwatch() as prepare:
                ingestor.prepare(entry)  # parse and chunk alone, for the breakdown
            with Stopwatch() as clock:
                report = ingestor.run(manifest, allow_outside=True)
            with Stopwatch() as next_query:  # the mirror is patched here
                found = top_docs(store, word)
            edit_rows.append({"next_query_s": next_query.wall, "doc_id": doc_id, "chunks_before": n_chunks, "seconds": clock.wall,
                              "cpu_s": clock.cpu, "parse_and_chunk_s": prepare.wall,
                              "parse_and_chunk_cpu_s": prepare.cpu, "action": report.actions[0].action,
                              "new_chunks": report.chunks, "found_by_next_query": found[:1] == [doc_id],
                              "versions_now": len(store.versions(doc_id))})
            print(f"edit {doc_id}: {clock.wall * 1000:.1f} ms", file=sys.stderr, flush=True)

        delete_rows = []
        for doc_id, n_chunks in to_delete:
            words = max((c.text for c in store.chunks(doc_id)), key=len).split()[:12]
            question = " ".join(words)  # words of its longest chunk: it is in the top 100 before
            found_before = doc_id in top_docs(store, question, 100)
            with Stopwatch() as clock:
                delete_documents(store, [doc_id])
            with Stopwatch() as next_query:
                gone = doc_id not in top_docs(store, question, 100)
            delete_rows.append({"next_query_s": next_query.wall, "doc_id": doc_id, "chunks": n_chunks, "seconds": clock.wall, "cpu_s": clock.cpu,
                                "found_before": found_before, "absent_from_next_query": gone})
            print(f"delete {doc_id}: {clock.wall * 1000:.1f} ms", file=sys.stderr, flush=True)

        store.close()
        db = sqlite3.connect(str(db_path))
        texts = [p + "\n" + t for p, t in db.execute("SELECT prefix, text FROM chunks ORDER BY rowid")]
        db.close()
        tokenize_s, index_s, rebuild_cpu = [], [], []
        for r in range(repeat):
            fts5_porter.cache_clear()
            with Stopwatch() as tokenizing:
                tokens = [fts5_tokens(t) for t in texts]
            with Stopwatch() as indexing:
                model = reference_bm25("float32", backend="numpy")
                model.index(tokens, show_progress=False)
            tokenize_s.append(tokenizing.wall)
            index_s.append(indexing.wall)
            rebuild_cpu.append(tokenizing.cpu + indexing.cpu)
            print(f"bm25s rebuild {r + 1}/{repeat}: tokenize {tokenize_s[-1]:.1f} s, "
                  f"index {index_s[-1]:.1f} s", file=sys.stderr, flush=True)
        n_tokens = sum(map(len, tokens))
        del tokens
        store = SQLiteStore(db_path, mode="read")
        queries = side_by_side(store, db_path, model, n_queries, copies)
        store.close()
        del model

        db = sqlite3.connect(str(db_path))
        with Stopwatch() as fts5_rebuild:
            db.execute("INSERT INTO chunks_fts(chunks_fts) VALUES('rebuild')")
            db.commit()
        db.close()
        store_mb = sum(p.stat().st_size for p in tmp.glob("store.db*")) / 1e6

    edit_s = statistics.median(r["seconds"] for r in edit_rows)
    delete_s = statistics.median(r["seconds"] for r in delete_rows)
    rebuild_s = statistics.median(a + b for a, b in zip(tokenize_s, index_s))
    cpu = {"edit": statistics.median(r["cpu_s"] for r in edit_rows),
           "delete": statistics.median(r["cpu_s"] for r in delete_rows),
           "rebuild": statistics.median(rebuild_cpu)}
    return {
        "benchmark": "bm25_incremental",
        "command": ".venv/bin/python bench/retrieval/bm25_incremental.py",
        "code": code_version(),
        "machine": machine(),
        "versions": {"bm25s": version("bm25s"), "PyStemmer": version("PyStemmer"),
                     "sqlite": sqlite3.sqlite_version},
        "index": {"target_chunks": target_chunks, "copies": copies, "pages_per_copy": len(pages),
                  "counts_before": chunks_before,
                  "chunks_for_bm25s": len(texts), "tokens_for_bm25s": n_tokens,
                  "build_s_each_copy": build, "store_mb_with_wal": store_mb},
        "ragdx_edit": {"median_s": edit_s, "median_cpu_s": cpu["edit"], "each": edit_rows},
        "ragdx_delete": {"median_s": delete_s, "median_cpu_s": cpu["delete"], "each": delete_rows},
        "bm25s_rebuild": {"median_s": rebuild_s, "median_cpu_s": cpu["rebuild"], "tokenize_s": tokenize_s,
                          "index_s": index_s, "cpu_each": rebuild_cpu,
                          "index_only_median_s": statistics.median(index_s)},
        "fts5_rebuild": {"wall_s": fts5_rebuild.wall, "cpu_s": fts5_rebuild.cpu},
        "keyword_mirror": {"first_query_s": first_query.wall, "warm_query_s": warm_query.wall,
                           "edit_next_query_median_s": statistics.median(r["next_query_s"] for r in edit_rows),
                           "delete_next_query_median_s": statistics.median(r["next_query_s"] for r in delete_rows)},
        "queries": queries,
        "peak_rss_mb": peak_rss_mb(),
        "ratios": {"bm25s_rebuild_over_ragdx_edit": rebuild_s / edit_s,
                   "bm25s_rebuild_over_ragdx_delete": rebuild_s / delete_s,
                   "bm25s_index_only_over_ragdx_edit": statistics.median(index_s) / edit_s,
                   "cpu_bm25s_rebuild_over_ragdx_edit": cpu["rebuild"] / cpu["edit"],
                   "cpu_bm25s_rebuild_over_ragdx_delete": cpu["rebuild"] / cpu["delete"]},
        "checks": {"edits_found": all(r["found_by_next_query"] for r in edit_rows),
                   "edits_new_version": all(r["action"] == "add" and r["versions_now"] == 2
                                            for r in edit_rows),
                   "deletes_found_before": all(r["found_before"] for r in delete_rows),
                   "deletes_absent_after": all(r["absent_from_next_query"] for r in delete_rows)},
    }


def table(r: dict) -> str:
    m, ix, e, d, b = r["machine"], r["index"], r["ragdx_edit"], r["ragdx_delete"], r["bm25s_rebuild"]
    each = lambda rows: ", ".join(f"{x['seconds'] * 1000:.0f}" for x in rows)  # noqa: E731
    lines = [
        f"machine: {m['cpu_model']}, {m['nproc']} cores, Python {m['python']}; "
        f"bm25s {r['versions']['bm25s']}, SQLite {r['versions']['sqlite']}",
        f"index: {ix['copies']} copies x {ix['pages_per_copy']} pages = {ix['chunks_for_bm25s']:,} chunks "
        f"({ix['tokens_for_bm25s']:,} tokens), store {ix['store_mb_with_wal']:.0f} MB",
        "",
        "                                                     wall s    CPU s",
        f"ragdx: edit one document (re-ingest, new version)   {e['median_s']:8.3f} {e['median_cpu_s']:8.3f}  "
        f"(median of {len(e['each'])}; each wall ms: {each(e['each'])})",
        f"       of which parse + chunk                        "
        f"{statistics.median(x['parse_and_chunk_s'] for x in e['each']):8.3f} "
        f"{statistics.median(x['parse_and_chunk_cpu_s'] for x in e['each']):8.3f}",
        f"ragdx: delete one document                          {d['median_s']:8.3f} {d['median_cpu_s']:8.3f}  "
        f"(median of {len(d['each'])}; each wall ms: {each(d['each'])})",
        f"bm25s: full rebuild (tokenize + index)              {b['median_s']:8.3f} {b['median_cpu_s']:8.3f}  "
        f"(tokenize {statistics.median(b['tokenize_s']):.2f}, index {b['index_only_median_s']:.2f} wall)",
        f"FTS5:  full rebuild, for scale                      {r['fts5_rebuild']['wall_s']:8.3f} "
        f"{r['fts5_rebuild']['cpu_s']:8.3f}",
        "",
        f"ratio: bm25s rebuild / ragdx edit   {r['ratios']['bm25s_rebuild_over_ragdx_edit']:6.0f}x wall, "
        f"{r['ratios']['cpu_bm25s_rebuild_over_ragdx_edit']:.0f}x CPU  "
        f"(index() alone: {r['ratios']['bm25s_index_only_over_ragdx_edit']:.0f}x wall)",
        f"ratio: bm25s rebuild / ragdx delete {r['ratios']['bm25s_rebuild_over_ragdx_delete']:6.0f}x wall, "
        f"{r['ratios']['cpu_bm25s_rebuild_over_ragdx_delete']:.0f}x CPU",
        "",
        f"keyword mirror: first query {r['keyword_mirror']['first_query_s']:.2f} s (built from FTS5's index), "
        f"warm {r['keyword_mirror']['warm_query_s'] * 1000:.1f} ms; the query after an edit "
        f"{r['keyword_mirror']['edit_next_query_median_s'] * 1000:.0f} ms, after a delete "
        f"{r['keyword_mirror']['delete_next_query_median_s'] * 1000:.0f} ms (patched; medians)",
        "latency, top 10, ms   wall p50    p95    CPU p50",
        *[f"  {name:6}             {s['p50_ms']:8.2f} {s['p95_ms']:6.2f} {s['cpu']['p50_ms']:9.2f}"
          for name, s in r["queries"]["latency_top10"].items()],
        f"agreement@10: overlap {r['queries']['agreement_top10']['overlap@10_mean']:.3f}, identical "
        f"{r['queries']['agreement_top10']['identical_lists']}/{r['queries']['agreement_top10']['queries']}",
        f"peak RSS of the benchmark process: {r['peak_rss_mb']:.0f} MB",
        f"checks: {r['checks']}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--html-dir", type=Path, default=DEFAULT_HTML)
    ap.add_argument("--chunks", type=int, default=100_000,
                    help="about how many chunks the index should hold (default 100000)")
    ap.add_argument("--edits", type=int, default=5, help="documents edited, and as many deleted (default 5)")
    ap.add_argument("--repeat", type=int, default=2, help="bm25s rebuilds (default 2)")
    ap.add_argument("--queries", type=int, default=200, help="questions for the latency comparison (default 200)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    if args.chunks < 1 or args.edits < 1 or args.repeat < 1:
        ap.error("--chunks, --edits and --repeat must be at least 1")
    problem = missing_modules("bm25s", "Stemmer") or missing_pages(args.html_dir)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    result = run(args.html_dir, args.chunks, args.edits, args.repeat, args.queries)
    write_result(args.out, result, table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Approximate (HNSW) against exact dense search: recall@10 and query latency, side by side.

Reproduce, from the repository root::

    .venv/bin/python bench/retrieval/ann_recall.py

(``apt-get install python3-doc`` for the corpus.) The first ``--pages`` pages of the Python 3.11
HTML docs are ingested with the dense channel on (``--backend``, default ``onnx`` when installed,
else ``sentence-transformers``) into a store kept under ``bench/.cache/`` so later runs skip the
embedding. Then ``--queries`` section headings of the corpus, encoded as queries, are searched
with the store's exact numpy index and with ``HnswIndex`` over the same vectors (M 16,
ef_construction 200) at several ``ef`` values, for a public principal. Recall@10 is the share of
the exact top 10 the approximate top 10 holds; latency is per query (p50, p95), in milliseconds.
A table goes to stdout and everything to ``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from ragdx.config import load_settings
from ragdx.build import build_encoder, build_ingestor
from ragdx.store.sqlite import SQLiteStore
from ragdx.store.vectors import DenseIndex, HnswIndex

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _common, and the areas
from _common import (  # noqa: E402
    DEFAULT_HTML, REPO, Stopwatch, code_version, html_pages, machine, missing_modules, missing_pages,
    write_manifest, write_result,
)

DEFAULT_OUT = REPO / "bench" / "results" / "ann_recall.json"
CACHE = REPO / "bench" / ".cache"
EF = (10, 20, 40, 80, 160)
GROUPS = ("public",)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def build_store(html_dir: Path, pages: int, backend: str) -> tuple[SQLiteStore, dict]:
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"ann-{pages}-{backend}.db"
    settings = load_settings(overrides=[f"retrieval.dense.backend={backend}"])
    store = SQLiteStore(path)
    info: dict = {"store": str(path), "cached": store.active_space() is not None}
    if not info["cached"]:
        manifest = CACHE / f"ann-{pages}.jsonl"
        write_manifest(html_pages(html_dir)[:pages], html_dir, manifest)
        with Stopwatch() as clock:
            report = build_ingestor(store, settings).run(manifest, allow_outside=True)
        info |= {"ingest": clock.times(), "embedding": {
            "encoded": report.embedding.encoded, "seconds": report.embedding.seconds}}
    return store, info


def run(html_dir: Path, pages: int, backend: str, n_queries: int, seed: int) -> dict:
    store, info = build_store(html_dir, pages, backend)
    space = store.active_space()
    assert space is not None
    exact = DenseIndex.load(store, space.id, space.dim)
    with Stopwatch() as build:
        approx = HnswIndex(exact, m=16, ef_construction=200)
    headings = sorted({c.heading_path[-1] for c in store.chunks() if c.heading_path})
    questions = random.Random(seed).sample(headings, min(n_queries, len(headings)))
    settings = load_settings(overrides=[f"retrieval.dense.backend={backend}"])
    vectors = build_encoder(settings.retrieval.dense).encode(questions, kind="query").vectors
    truth, exact_ms = [], []
    for v in vectors:
        t = time.perf_counter()
        hits = exact.search(v, GROUPS, 10)
        exact_ms.append((time.perf_counter() - t) * 1000)
        truth.append({row for row, _ in hits})
    rows = {"exact": {"recall@10": 1.0, "p50_ms": statistics.median(exact_ms),
                      "p95_ms": percentile(exact_ms, 0.95)}}
    for ef in EF:
        approx.ef = ef
        found, ms = [], []
        for v in vectors:
            t = time.perf_counter()
            hits = approx.search(v, GROUPS, 10)
            ms.append((time.perf_counter() - t) * 1000)
            found.append({row for row, _ in hits})
        recall = float(np.mean([len(a & b) / max(1, len(b)) for a, b in zip(found, truth)]))
        rows[f"hnsw ef={ef}"] = {"recall@10": recall, "p50_ms": statistics.median(ms),
                                 "p95_ms": percentile(ms, 0.95)}
    return {"machine": machine(), "code": code_version(), "pages": pages, "backend": backend,
            "vectors": len(exact.chunk_ids), "dim": space.dim, "queries": len(questions),
            "hnsw_build": build.times(), "store": info, "results": rows}


def table(result: dict) -> str:
    lines = [f"{result['vectors']} vectors of dim {result['dim']} ({result['backend']}), "
             f"{result['queries']} queries; HNSW build {result['hnsw_build']['wall']:.1f} s",
             f"{'':<16}{'recall@10':>10}{'p50 ms':>9}{'p95 ms':>9}"]
    for name, row in result["results"].items():
        lines.append(f"{name:<16}{row['recall@10']:>10.3f}{row['p50_ms']:>9.2f}{row['p95_ms']:>9.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--html-dir", type=Path, default=DEFAULT_HTML)
    ap.add_argument("--pages", type=int, default=530, help="how many pages to embed (default all)")
    ap.add_argument("--backend", choices=["onnx", "sentence-transformers"], default=None)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    backend = args.backend or ("onnx" if missing_modules("onnxruntime") is None else "sentence-transformers")
    problem = missing_modules("hnswlib") or missing_pages(args.html_dir)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    result = run(args.html_dir, args.pages, backend, args.queries, args.seed)
    write_result(args.out, result, table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

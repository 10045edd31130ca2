"""The embedded store against PostgreSQL on one node and sharded (a coordinator and two shards),
in the same run: ingest throughput, and hybrid query latency (BM25 top 100 + dense top 100 +
RRF, as the pipeline's retrieval runs them) p50/p95, with exact and HNSW vector search on
PostgreSQL; plus the BM25 top-10 agreement of each PostgreSQL set-up with the embedded channel.

The corpus is synthetic so its size is a parameter: documents of ten paragraphs of Zipf-
distributed words (about ten chunks each; a fifth readable by "staff" only), embedded with the
hashing encoder (384 dimensions: the vectors' size is MiniLM's, the encoder costs nothing).
Queries are 3 to 8 words drawn the same way, asked with the group "public".

    make pg                                         # the three servers, DSN printed last
    .venv/bin/python bench/pg_backends.py --chunks 100000 \
        --dsn postgresql://postgres@127.0.0.1:55432/ragdx \
        --shard postgresql://postgres@127.0.0.1:55433/ragdx --shard postgresql://postgres@127.0.0.1:55434/ragdx

Results: bench/results/pg_backends.json. Each store is made in a schema of its own
(``bench_single``, ``bench_sharded``), dropped first.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _common import REPO, code_version, label_table, machine, write_result

from ragdx.errors import StoreError
from ragdx.ingest.embed import Embedder
from ragdx.ingest.ingestor import Ingestor
from ragdx.stages.bm25 import BM25Retriever
from ragdx.stages.dense import DenseRetriever
from ragdx.stages.fuse import RRF
from ragdx.store.pg_admin import drop_store
from ragdx.store.postgres import PostgresStore, setup_shards
from ragdx.store.sqlite import SQLiteStore
from ragdx.testing.encoders import HashingEncoder
from ragdx.types import Principal, Query

SYLLABLES = ["ka", "lo", "re", "mi", "tu", "sen", "dar", "vo", "pli", "qua", "ne", "xis", "bor", "fa",
             "gu", "hel", "jin", "ost", "ur", "wy"]


def vocabulary(n: int, rng: random.Random) -> list[str]:
    words: dict[str, None] = {}
    while len(words) < n:
        words["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))] = None
    return list(words)


def make_corpus(folder: Path, documents: int, seed: int = 0) -> tuple[list[Path], list[str]]:
    """Manifests of 1,000 documents each, and the vocabulary by frequency rank."""
    rng = random.Random(seed)
    words = vocabulary(20000, rng)
    weights = np.array([1 / (r + 1) for r in range(len(words))])
    draw = np.random.default_rng(seed).choice(len(words), size=documents * 10 * 110, p=weights / weights.sum())
    pos = 0
    manifests = []
    for start in range(0, documents, 1000):
        lines = []
        for d in range(start, min(start + 1000, documents)):
            paragraphs = []
            for _ in range(10):
                n = rng.randint(80, 140)
                paragraphs.append(" ".join(words[i] for i in draw[pos:pos + n]) + ".")
                pos = (pos + n) % (len(draw) - 200)
            path = folder / f"d{d:06d}.md"
            path.write_text(f"# Document {d} {words[draw[pos]]}\n\n" + "\n\n".join(paragraphs), encoding="utf-8")
            lines.append(json.dumps({"doc_id": f"d{d:06d}", "path": path.name,
                                     "acl": ["staff"] if d % 5 == 4 else ["public"]}))
        manifest = folder / f"manifest-{start // 1000:03d}.jsonl"
        manifest.write_text("\n".join(lines) + "\n", encoding="utf-8")
        manifests.append(manifest)
    return manifests, words


def ingest(store, manifests: list[Path], encoder: HashingEncoder) -> dict:
    ingestor = Ingestor(store, embedder=Embedder(encoder))
    chunks, started = 0, time.perf_counter()
    for manifest in manifests:
        chunks += ingestor.run(manifest, allow_outside=True).chunks  # Debian's pages, where they are installed
    seconds = time.perf_counter() - started
    return {"chunks": chunks, "seconds": round(seconds, 1), "chunks_per_s": round(chunks / seconds)}


def latencies(store, encoder, questions: list[str], search: str) -> tuple[dict, list[list[str]]]:
    bm25 = BM25Retriever(store, top_k=100)
    dense = DenseRetriever(store, encoder, top_k=100, search=search)
    fuse = RRF(60.0, 50)
    times, tops = [], []
    for n, question in enumerate(questions):
        query = Query(f"q{n}", question, Principal("bench", ("public",)))
        started = time.perf_counter()
        lists = [bm25.run(query), dense.run(query)]
        fuse.run(lists)
        times.append(time.perf_counter() - started)
        tops.append([c.chunk_id for c in lists[0].items[:10]])
    warm = times[10:]  # the first queries warm caches and prepared statements
    q = statistics.quantiles(warm, n=20)
    return {"p50_ms": round(statistics.median(warm) * 1000, 1), "p95_ms": round(q[18] * 1000, 1),
            "queries": len(warm)}, tops


def agreement(a: list[list[str]], b: list[list[str]]) -> float:
    """The share of queries whose BM25 top 10 is the same list, in the same order."""
    return sum(x == y for x, y in zip(a, b)) / len(a)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=100000, help="about this many chunks")
    parser.add_argument("--dsn", required=True, help="the coordinator (and single node)")
    parser.add_argument("--shard", action="append", required=True, help="a shard's DSN (repeat)")
    parser.add_argument("--queries", type=int, default=210)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "pg_backends.json")
    args = parser.parse_args()
    encoder = HashingEncoder(dim=384)
    result: dict = {"machine": machine(), "code": code_version(), "chunks_asked": args.chunks,
                    "command": " ".join(["bench/pg_backends.py", *sys.argv[1:]])}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        manifests, words = make_corpus(folder, max(1, args.chunks // 10))
        rng = random.Random(1)
        top = words[:3000]
        questions = [" ".join(rng.choice(top) for _ in range(rng.randint(3, 8))) for _ in range(args.queries)]
        single = f"{args.dsn}?options=-csearch_path%3Dbench_single"
        sharded = f"{args.dsn}?options=-csearch_path%3Dbench_sharded"
        for dsn in (single, sharded):
            with contextlib.suppress(StoreError):  # no store there yet
                drop_store(dsn)
        stores = {"sqlite": SQLiteStore(folder / "store.db"), "pg": PostgresStore(single),
                  "pg-sharded": setup_shards(sharded, args.shard)}
        tops: dict[str, list[list[str]]] = {}
        for name, store in stores.items():
            print(f"ingesting into {name}", file=sys.stderr)
            result[name] = {"ingest": ingest(store, manifests, encoder)}
            # the machine is shared: the 1-minute load average after each phase, beside its figures
            result[name]["ingest"]["load_1min"] = round(os.getloadavg()[0], 2)
            print(f"  {result[name]['ingest']}", file=sys.stderr)
            for search in (["exact"] if name == "sqlite" else ["exact", "hnsw"]):
                print(f"querying {name} ({search})", file=sys.stderr)
                result[name][f"hybrid_{search}"], found = latencies(store, encoder, questions, search)
                result[name][f"hybrid_{search}"]["load_1min"] = round(os.getloadavg()[0], 2)
                print(f"  {result[name][f'hybrid_{search}']}", file=sys.stderr)
                tops.setdefault(name, found)
        for name in ("pg", "pg-sharded"):
            result[name]["bm25_top10_agreement"] = agreement(tops["sqlite"], tops[name])
        for store in stores.values():
            store.close()
    rows = [("chunks", str(result["sqlite"]["ingest"]["chunks"]))]
    for name in stores:
        r = result[name]
        rows.append((f"{name} ingest", f"{r['ingest']['chunks_per_s']} chunks/s ({r['ingest']['seconds']} s)"))
        for key in ("hybrid_exact", "hybrid_hnsw"):
            if key in r:
                rows.append((f"{name} {key.split('_')[1]}", f"p50 {r[key]['p50_ms']} ms, p95 {r[key]['p95_ms']} ms"))
        if "bm25_top10_agreement" in r:
            rows.append((f"{name} BM25 top-10 = embedded", f"{r['bm25_top10_agreement']:.0%} of queries"))
    write_result(args.out, result, label_table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

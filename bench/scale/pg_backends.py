"""The embedded store against PostgreSQL on one node and sharded (a coordinator and two shards),
in the same run: ingest throughput, and hybrid query latency (BM25 top 100 + dense top 100 +
RRF, as the pipeline's retrieval runs them) p50/p95, with exact and HNSW vector search on
PostgreSQL; plus the BM25 top-10 agreement of each PostgreSQL set-up with the embedded channel.
Last, one node and the shards answer the hybrid query in turn, question by question
(:func:`alternating`): the sharded p50 over one node's, both at the same load (the result's
``p50_vs_one_node``; the two phases' ratio, timed minutes apart, is ``p50_vs_one_node_sequential``).

The corpus is synthetic so its size is a parameter: documents of ten paragraphs of Zipf-
distributed words (about ten chunks each; a fifth readable by "staff" only), embedded with the
hashing encoder (384 dimensions: the vectors' size is MiniLM's, the encoder costs nothing).
Queries are 3 to 8 words drawn the same way, asked with the group "public".

Hashed bag-of-words vectors give an HNSW graph nothing to follow, so ``--vectors STORE`` draws
real ones instead: each synthetic chunk gets the all-MiniLM-L6-v2 vector of a chunk of that store
(the dev set's, ``bench/.cache/devset/store.db``: Python and SQLite manuals), chosen by a hash of
its text (with replacement, so any number of chunks can be drawn), with a little noise on three
draws in four (so a noise-free draw can repeat another's vector: about 4,100 pairs at 96,206
chunks from 70,218 vectors; ties are broken by row in every search); each query
gets the embedding of a real dev-set question (encoded once with the store's own encoder). Exact
and approximate search then rank real embeddings, and the encoder still costs nothing.

    make pg                                         # the three servers, DSN printed last
    .venv/bin/python bench/scale/pg_backends.py --chunks 100000 \
        --dsn postgresql://postgres@127.0.0.1:55432/ragdx \
        --shard postgresql://postgres@127.0.0.1:55433/ragdx --shard postgresql://postgres@127.0.0.1:55434/ragdx

Results: bench/results/pg_backends.json. Each store is made in a schema of its own
(``bench_single``, ``bench_sharded``), dropped first.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _common, and the areas
from _common import INT8, REPO, code_version, label_table, machine, write_result

from ragdx.errors import StoreError
from ragdx.ingest.embed import Embedder
from ragdx.ingest.ingestor import Ingestor
from ragdx.stages.bm25 import BM25Retriever
from ragdx.stages.dense import DenseRetriever
from ragdx.stages.fuse import RRF
from ragdx.store.pg_admin import drop_store, setup_shards
from ragdx.store.postgres import PostgresStore
from ragdx.store.sqlite import SQLiteStore
from ragdx.testing.encoders import HashingEncoder
from ragdx.types import EmbeddingSpace, Encoding, Principal, Query

#: what bench/run_all.py cannot give it: the script is skipped there
NEEDS = "a PostgreSQL server: --dsn (make pg starts one and prints it)"

SYLLABLES = ["ka", "lo", "re", "mi", "tu", "sen", "dar", "vo", "pli", "qua", "ne", "xis", "bor", "fa",
             "gu", "hel", "jin", "ost", "ur", "wy"]


def vocabulary(n: int, rng: random.Random) -> list[str]:
    words: dict[str, None] = {}
    while len(words) < n:
        words["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))] = None
    return list(words)


class DrawnEncoder:
    """Real embeddings for synthetic texts: a passage gets a stored chunk's vector (by a hash of
    its text; noise of 0.01 per dimension, renormalised, on three draws in four, chosen by the
    hash too), a query a real question's vector. Deterministic: the same text gets the same
    vector in every store."""

    def __init__(self, passages: np.ndarray, queries: np.ndarray, model: str) -> None:
        self.passages, self.queries, self.model = passages, queries, model
        self.dim = passages.shape[1]

    @property
    def space(self) -> EmbeddingSpace:
        return EmbeddingSpace(f"drawn:{self.model}", f"{len(self.passages)}x{len(self.queries)}", self.dim,
                              True, "", "", 256, "mean")

    @property
    def name(self) -> str:
        return f"drawn:{self.model}"

    def count(self, text: str) -> int:
        return len(text.split())

    def encode(self, texts, *, kind: str = "passage") -> Encoding:
        pool = self.queries if kind == "query" else self.passages
        out = np.empty((len(texts), self.dim), np.float32)
        for i, text in enumerate(texts):
            h = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
            row, reuse = h % len(pool), h // len(pool) % 4  # a chunk of the corpus reuses a vector about 1 time in 4
            v = pool[row].astype(np.float32)
            if kind != "query" and reuse:
                v = v + np.random.default_rng(h).normal(0, 0.01, self.dim).astype(np.float32)
                v /= np.linalg.norm(v)
            out[i] = v
        return Encoding(self.space, out, tuple(None for _ in texts))


def drawn_encoder(store_path: Path) -> DrawnEncoder:
    """The vectors of the store's active space, and its dev-set questions encoded by its encoder."""
    import sqlite3
    from ragdx.build import build_encoder
    from ragdx.config import load_settings
    from ragdx.queryset import load_queries
    db = sqlite3.connect(f"file:{store_path}?mode=ro", uri=True)
    space_id, config = db.execute("SELECT id, body FROM spaces WHERE state = 'active'").fetchone()
    model = json.loads(config)["model_id"]
    blobs = db.execute("SELECT vector FROM vectors WHERE space_id = ? ORDER BY rowid", (space_id,)).fetchall()
    db.close()
    passages = np.stack([np.frombuffer(b, np.float32) for (b,) in blobs])
    folder = store_path.parent
    questions = [q.question for half in ("fit", "test") for q in load_queries(folder / f"queries.{half}.jsonl")]
    settings = load_settings(overrides=["retrieval.dense.backend=onnx", f"retrieval.dense.model={INT8}"])
    queries = build_encoder(settings.retrieval.dense).encode(questions, kind="query").vectors
    print(f"drawing from {len(passages):,} stored vectors of {model} and {len(queries)} questions",
          file=sys.stderr)
    return DrawnEncoder(passages, np.asarray(queries, np.float32), model)


def make_corpus(folder: Path, documents: int, seed: int = 0) -> tuple[list[Path], list[str]]:
    """One manifest of every document (one ``ragdx ingest``, so one write transaction: a bulk
    load), and the vocabulary by frequency rank."""
    rng = random.Random(seed)
    words = vocabulary(20000, rng)
    weights = np.array([1 / (r + 1) for r in range(len(words))])
    draw = np.random.default_rng(seed).choice(len(words), size=documents * 10 * 110, p=weights / weights.sum())
    pos = 0
    lines = []
    for start in range(0, documents, 1000):
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
    manifest = folder / "manifest.jsonl"
    manifest.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return [manifest], words


def questions_of(words: list[str], n: int) -> list[str]:
    """The benchmark's questions: 3 to 8 of the 3,000 most frequent words (seeded)."""
    rng = random.Random(1)
    top = words[:3000]
    return [" ".join(rng.choice(top) for _ in range(rng.randint(3, 8))) for _ in range(n)]


def add_store_arguments(parser: argparse.ArgumentParser, queries: int, out: str) -> None:
    """The arguments of a script that queries the stores this benchmark leaves."""
    parser.add_argument("--dsn", required=True, help="the coordinator bench/scale/pg_backends.py used")
    parser.add_argument("--chunks", type=int, default=100000, help="as given to bench/scale/pg_backends.py")
    parser.add_argument("--vectors", type=Path, default=None, help="as given to bench/scale/pg_backends.py")
    parser.add_argument("--queries", type=int, default=queries)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / out)


def encoder_and_questions(args: argparse.Namespace):
    """This benchmark's encoder and questions, for ``add_store_arguments``' arguments."""
    encoder = HashingEncoder(dim=384) if args.vectors is None else drawn_encoder(args.vectors)
    with tempfile.TemporaryDirectory() as tmp:
        _, words = make_corpus(Path(tmp), max(1, args.chunks // 10))
    return encoder, questions_of(words, args.queries)


def ingest(store, manifests: list[Path], encoder) -> dict:
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


def alternating(stores: dict, encoder, questions: list[str]) -> tuple[dict[str, dict], dict[str, list]]:
    """The hybrid query (BM25 top 100 + HNSW dense top 100 + RRF) on each store in turn, question
    by question, the order swapped every question, so that every store sees the same load and is
    equally warm: per store its p50/p95 over the warm questions, and its BM25 lists (ids and scores).
    A ratio of two stores' p50s timed minutes apart moves with the load of a shared machine more
    than with the stores; timed so, it does not."""
    names = list(stores)
    channels = {name: (BM25Retriever(store, top_k=100), DenseRetriever(store, encoder, top_k=100, search="hnsw"))
                for name, store in stores.items()}
    fuse = RRF(60.0, 50)
    times: dict[str, list[float]] = {name: [] for name in names}
    lists: dict[str, list] = {name: [] for name in names}
    for n, question in enumerate(questions):
        query = Query(f"q{n}", question, Principal("bench", ("public",)))
        for name in (names if n % 2 == 0 else names[::-1]):
            bm25, dense = channels[name]
            started = time.perf_counter()
            found = [bm25.run(query), dense.run(query)]
            fuse.run(found)
            times[name].append(time.perf_counter() - started)
            lists[name].append([(c.chunk_id, c.score) for c in found[0].items])
    out = {}
    for name in names:
        warm = times[name][10:]  # the first queries warm caches and prepared statements
        out[name] = {"p50_ms": round(statistics.median(warm) * 1000, 1),
                     "p95_ms": round(statistics.quantiles(warm, n=20)[18] * 1000, 1), "queries": len(warm)}
    return out, lists


def dense_recall(dsn: str, encoder, questions: list[str], ef_search: list[int]) -> list[dict]:
    """Dense search alone (top 100, as the pipeline asks), exact and through HNSW at each
    ef_search (the store opened again with it): p50/p95 and recall@10 against exact search."""
    vectors = [encoder.encode([q], kind="query").vectors[0] for q in questions]
    out, exact = [], []
    for ef in [None, *ef_search]:
        with PostgresStore(dsn, "read", hnsw_ef_search=ef or 40) as store:
            space = store.active_space().id
            times, tops = [], []
            for vector in vectors:
                started = time.perf_counter()
                found = store.vector_search(space, vector, ("public",), 100, exact=ef is None)
                times.append(time.perf_counter() - started)
                tops.append([c.id for c, _ in found[:10]])
        if ef is None:
            exact = tops
        warm = times[10:]
        recall = statistics.mean(len(set(t) & set(e)) / max(1, len(e)) for t, e in zip(tops, exact))
        out.append({"search": "exact" if ef is None else f"hnsw ef_search={ef}",
                    "p50_ms": round(statistics.median(warm) * 1000, 1),
                    "p95_ms": round(statistics.quantiles(warm, n=20)[18] * 1000, 1),
                    "recall_at_10": round(recall, 4), "load_1min": round(os.getloadavg()[0], 2)})
        print(f"  {out[-1]}", file=sys.stderr)
    return out


def agreement(a: list[list[str]], b: list[list[str]]) -> float:
    """The share of queries whose BM25 top 10 is the same list, in the same order."""
    return sum(x == y for x, y in zip(a, b)) / len(a)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=100000, help="about this many chunks")
    parser.add_argument("--dsn", required=True, help="the coordinator (and single node)")
    parser.add_argument("--shard", action="append", required=True, help="a shard's DSN (repeat)")
    parser.add_argument("--queries", type=int, default=210)
    parser.add_argument("--parts-per-shard", type=int, default=2,
                        help="hash parts per shard in the sharded store (setup_shards; default 2, as there)")
    parser.add_argument("--ef-search", type=int, action="append", default=None,
                        help="an HNSW ef_search to measure recall@10 at (repeat; default 40, 100, 200)")
    parser.add_argument("--vectors", type=Path, default=None,
                        help="draw real vectors from this store (its active space) instead of hashing")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "pg_backends.json")
    args = parser.parse_args()
    encoder = HashingEncoder(dim=384) if args.vectors is None else drawn_encoder(args.vectors)
    result: dict = {"machine": machine(), "code": code_version(), "chunks_asked": args.chunks,
                    "vectors": encoder.name, "parts_per_shard": args.parts_per_shard,
                    "command": " ".join(["bench/scale/pg_backends.py", *sys.argv[1:]])}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        manifests, words = make_corpus(folder, max(1, args.chunks // 10))
        questions = questions_of(words, args.queries)
        single = f"{args.dsn}?options=-csearch_path%3Dbench_single"
        sharded = f"{args.dsn}?options=-csearch_path%3Dbench_sharded"
        for dsn in (single, sharded):
            with contextlib.suppress(StoreError):  # no store there yet
                drop_store(dsn)
        stores = {"sqlite": SQLiteStore(folder / "store.db"), "pg": PostgresStore(single),
                  "pg-sharded": setup_shards(sharded, args.shard, parts_per_shard=args.parts_per_shard)}
        dsns = {"pg": single, "pg-sharded": sharded}
        tops: dict[str, list[list[str]]] = {}
        dense_tops: dict[str, list[list[str]]] = {}
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
            if name in dsns:
                print(f"dense search on {name}: exact, then HNSW at each ef_search", file=sys.stderr)
                result[name]["dense"] = dense_recall(dsns[name], encoder, questions, args.ef_search or [40, 100, 200])
                dense_tops[name] = [[c.id for c, _ in store.vector_search(
                    encoder.space.id, encoder.encode([q], kind="query").vectors[0], ("public",), 10)]
                    for q in questions]
        for name in ("pg", "pg-sharded"):
            result[name]["bm25_top10_agreement"] = agreement(tops["sqlite"], tops[name])
        result["pg-sharded"]["dense_exact_top10_equal_to_one_node"] = agreement(dense_tops["pg"],
                                                                               dense_tops["pg-sharded"])
        result["pg-sharded"]["p50_vs_one_node_sequential"] = round(
            result["pg-sharded"]["hybrid_hnsw"]["p50_ms"] / result["pg"]["hybrid_hnsw"]["p50_ms"], 2)
        # the done-when's ratio: one node and the shards timed in turn, question by question
        print("one node and the shards in turn (hybrid, HNSW)", file=sys.stderr)
        turns, lists = alternating({"pg": stores["pg"], "pg-sharded": stores["pg-sharded"]}, encoder, questions)
        result["alternating"] = turns | {"load_1min": round(os.getloadavg()[0], 2),
                                         "bm25_top100_equal": agreement(lists["pg"], lists["pg-sharded"])}
        result["pg-sharded"]["p50_vs_one_node"] = round(turns["pg-sharded"]["p50_ms"] / turns["pg"]["p50_ms"], 2)
        print(f"  {result['alternating']}", file=sys.stderr)
        result["pg"]["p50_vs_embedded"] = round(
            result["pg"]["hybrid_hnsw"]["p50_ms"] / result["sqlite"]["hybrid_exact"]["p50_ms"], 2)
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
        for d in r.get("dense", []):
            rows.append((f"{name} dense {d['search']}", f"p50 {d['p50_ms']} ms, recall@10 {d['recall_at_10']}"))
    rows.append(("pg hybrid (hnsw) p50 / embedded", str(result["pg"]["p50_vs_embedded"])))
    rows.append(("pg-sharded hybrid (hnsw) p50 / one node, in turn",
                 f"{result['pg-sharded']['p50_vs_one_node']} ({result['alternating']['pg-sharded']['p50_ms']} "
                 f"against {result['alternating']['pg']['p50_ms']} ms; BM25 top 100 equal "
                 f"{result['alternating']['bm25_top100_equal']:.0%})"))
    rows.append(("pg-sharded hybrid (hnsw) p50 / one node, each in its phase",
                 str(result["pg-sharded"]["p50_vs_one_node_sequential"])))
    rows.append(("pg-sharded dense exact top 10 = one node",
                 f"{result['pg-sharded']['dense_exact_top10_equal_to_one_node']:.0%} of queries"))
    write_result(args.out, result, label_table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

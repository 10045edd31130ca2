"""The sharded dense search against a git revision's, interleaved query by query (so both see
the same load): the hybrid query as ``bench/scale/pg_backends.py`` times it (BM25 top 100 + dense top
100 + RRF) and the dense search alone (HNSW and exact, top 100), on the stores that
``bench/scale/pg_backends.py`` leaves (schemas ``bench_sharded`` and ``bench_single``: run it first,
with the same ``--chunks`` and ``--vectors``). The dense top 100 of both revisions must be the
same list.

    nice -n 10 .venv/bin/python bench/scale/pg_shard_dense.py --before pg30 --chunks 20000 \\
        --vectors bench/.cache/devset/store.db --dsn postgresql://postgres@127.0.0.1:57442/ragdx

Results: bench/results/pg_shard_dense.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _common, and the areas
from _common import code_version, machine, module_at, write_result
from scale.pg_backends import (BM25Retriever, DenseRetriever, Principal, Query, RRF, add_store_arguments,
                               encoder_and_questions)

from ragdx.store.postgres import PostgresStore

#: what bench/run_all.py cannot give it: the script is skipped there
NEEDS = "a PostgreSQL server (--dsn) and a revision to compare with (--before)"


def timed(store, before, questions: list[str], encoder, step) -> dict:
    """``step(query)`` with this revision's dense search and the one before, alternating which
    goes first: the p50 of each (the first ten queries warm up) and how many gave the same list."""
    ours = store._vector_search
    theirs = types.MethodType(before._pg_vector_search, store)
    times: dict[str, list[float]] = {"before": [], "after": []}
    same = 0
    for n, question in enumerate(questions):
        query = Query(f"q{n}", question, Principal("bench", ("public",)))
        got = {}
        for name in (("after", "before") if n % 2 else ("before", "after")):
            store._vector_search = theirs if name == "before" else ours
            started = time.perf_counter()
            got[name] = step(query)
            times[name].append(time.perf_counter() - started)
        same += got["before"] == got["after"]
    store._vector_search = ours
    return {**{f"{k}_p50_ms": round(statistics.median(v[10:]) * 1000, 1) for k, v in times.items()},
            "identical": same, "queries": len(questions), "load_1min": round(os.getloadavg()[0], 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, metavar="REV", help="the revision to compare with")
    add_store_arguments(parser, 110, "pg_shard_dense.json")
    args = parser.parse_args()
    before = module_at(args.before, "src/ragdx/store/embeddings.py")
    encoder, questions = encoder_and_questions(args)
    result: dict = {"machine": machine(), "code": code_version(), "before": args.before,
                    "command": " ".join(["bench/scale/pg_shard_dense.py", *sys.argv[1:]])}
    for schema in ("bench_sharded", "bench_single"):
        with PostgresStore(f"{args.dsn}?options=-csearch_path%3D{schema}", "read") as store:
            space = store.active_space().id
            bm25 = BM25Retriever(store, top_k=100)
            dense = DenseRetriever(store, encoder, top_k=100, search="hnsw")
            fuse = RRF(60.0, 50)

            def hybrid(query):
                lists = [bm25.run(query), dense.run(query)]
                fuse.run(lists)
                return [c.chunk_id for c in lists[1].items]

            def alone(exact: bool):
                return lambda query: [c.id for c, _ in store.vector_search(
                    space, encoder.encode([query.question], kind="query").vectors[0], ("public",), 100, exact=exact)]
            result[schema] = {"hybrid_hnsw": timed(store, before, questions, encoder, hybrid),
                              "dense_hnsw": timed(store, before, questions, encoder, alone(False)),
                              "dense_exact": timed(store, before, questions, encoder, alone(True))}
    table = "\n".join(f"{schema:14} {key:12} p50 {row['before_p50_ms']} -> {row['after_p50_ms']} ms, "
                      f"identical {row['identical']}/{row['queries']}, load {row['load_1min']}"
                      for schema in ("bench_sharded", "bench_single") for key, row in result[schema].items())
    write_result(args.out, result, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

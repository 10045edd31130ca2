"""One node against the shards on the stores ``bench/scale/pg_backends.py`` leaves (schemas
``bench_single`` and ``bench_sharded``: run it first, with the same ``--chunks`` and
``--vectors``), queried alternately question by question, so both see the same load and are
equally warm: the hybrid query as ``bench/scale/pg_backends.py`` times it (BM25 top 100 + HNSW dense
top 100 + RRF), its p50 on each, their ratio, whether the BM25 lists (ids and scores) are the
same, and the mean time per hybrid query in each kind of statement the store sends out (one
fan-out: to every shard at once, or to the one server).

    nice -n 10 .venv/bin/python bench/scale/pg_alternate.py --chunks 100000 \\
        --vectors bench/.cache/devset/store.db --dsn postgresql://postgres@127.0.0.1:57452/ragdx

Results: bench/results/pg_alternate.json.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _common, and the areas
from _common import code_version, label_table, machine, write_result
from scale.pg_backends import add_store_arguments, alternating, encoder_and_questions

from ragdx.store.postgres import PostgresStore

#: what bench/run_all.py cannot give it: the script is skipped there
NEEDS = "the stores bench/scale/pg_backends.py left on a PostgreSQL server: --dsn"

STORES = ("bench_single", "bench_sharded")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_store_arguments(parser, 210, "pg_alternate.json")
    args = parser.parse_args()
    encoder, questions = encoder_and_questions(args)
    stores = {name: PostgresStore(f"{args.dsn}?options=-csearch_path%3D{name}", "read") for name in STORES}
    spent = {name: collections.defaultdict(float) for name in STORES}  # fan-out kind -> seconds
    for name, store in stores.items():
        fan = store._fan

        def timed(*a, _fan=fan, _spent=spent[name], **k):
            started = time.perf_counter()
            try:
                return _fan(*a, **k)
            finally:
                _spent[sys._getframe(1).f_code.co_name] += time.perf_counter() - started
        store._fan = timed
    turns, lists = alternating(stores, encoder, questions)
    result: dict = {"machine": machine(), "code": code_version(), "load_1min": round(os.getloadavg()[0], 2),
                    "command": " ".join(["bench/scale/pg_alternate.py", *sys.argv[1:]])}
    for name in STORES:
        result[name] = {"hybrid_hnsw_p50_ms": turns[name]["p50_ms"], "queries": turns[name]["queries"],
                        "ms_per_query": {k: round(v / len(questions) * 1000, 1) for k, v in spent[name].items()}}
    result["sharded_p50_vs_one_node"] = round(result["bench_sharded"]["hybrid_hnsw_p50_ms"]
                                              / result["bench_single"]["hybrid_hnsw_p50_ms"], 2)
    result["bm25_lists_equal"] = sum(a == b for a, b in zip(*lists.values()))
    for store in stores.values():
        store.close()
    rows = [(f"{name} hybrid (hnsw) p50", f"{result[name]['hybrid_hnsw_p50_ms']} ms") for name in STORES]
    rows += [("sharded / one node", str(result["sharded_p50_vs_one_node"])),
             ("BM25 top 100 equal (ids, scores)", f"{result['bm25_lists_equal']}/{len(questions)}"),
             ("load (1 min)", str(result["load_1min"]))]
    rows += [(f"{name} {kind}", f"{ms} ms a query") for name in STORES
             for kind, ms in result[name]["ms_per_query"].items()]
    write_result(args.out, result, label_table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Index versions built beside the live one (issue 15): build, verify, switch and rollback times of
a new keyword index version on a realistic store, and what a retention does to BM25's statistics.

Reproduce, from the repository root (the store is the dev set's, made by bench/devset)::

    .venv/bin/python bench/scale/versioned_index.py [--store bench/.cache/devset/store.db] [--queries 100]

The store is copied to a temporary folder first (the original is not touched), opened for writing
(which migrates a schema-1 store: timed), and its dense space dropped from the copy (vectors and
space rows deleted), so that a new version needs no encoder: what is measured is the chunks and
the keyword index. Two index versions are then built, each verified (with the first
``--queries`` questions of the dev set's query set: their required spans, and their questions
timing BM25 on the candidate against the live index), switched to, queried once (the first query
rebuilds the keyword mirror), and rolled back:

(r) retention: the live chunker and parsers, ``retain_superseded = 0`` (the chunks of every
    version kept are copied from the live index in SQL; the superseded versions are left out);
(c) a new chunker: ``max_tokens`` 120 instead of 200 (every version parsed and chunked again).

Wall and CPU seconds of this process; a table to stdout, everything to ``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _common, and the areas
from _common import REPO, Stopwatch, code_version, machine, write_result  # noqa: E402

from ragdx.index import versions as indexing  # noqa: E402
from ragdx.build import build_encoder  # noqa: E402
from ragdx.config import load_settings  # noqa: E402
from ragdx.ingest.chunk import ChunkerConfig  # noqa: E402
from ragdx.queryset import load_queries  # noqa: E402
from ragdx.stages.bm25 import query_terms  # noqa: E402
from ragdx.store.sqlite import SQLiteStore  # noqa: E402

DEVSET = REPO / "bench" / ".cache" / "devset"


def statistics_of(store: SQLiteStore) -> dict[str, float]:
    n, avgdl, _ = store.keyword_statistics([])
    counts = store.counts()
    return {"rows": n, "avgdl": round(avgdl, 3), "versions": counts["versions"], "chunks": counts["chunks"]}


def cycle(store: SQLiteStore, name: str, config: ChunkerConfig, counter, retain: int | None,
          queries: list) -> dict:
    out: dict = {"name": name, "before": statistics_of(store)}
    with Stopwatch() as t:
        built = indexing.build_index(store, config, counter, retain_superseded=retain, retain_all=retain is None)
    out["build"] = t.times() | {"chunked": built.chunked, "copied": built.copied, "unindexed": built.unindexed,
                                "chunks": built.chunks}
    print(f"{name}: built {built.index_id} in {t.wall:.1f} s", file=sys.stderr)
    with Stopwatch() as t:
        check = indexing.verify_index(store, built.index_id, queries)
    out["verify"] = t.times() | {"problems": len(check.problems), "first_problems": list(check.problems[:3]),
                                 "notes": list(check.notes)}
    print(f"{name}: verified in {t.wall:.1f} s ({len(check.problems)} problems)", file=sys.stderr)
    with Stopwatch() as t:
        indexing.switch_index(store, built.index_id, force=True)
    out["switch"] = t.times()
    with Stopwatch() as t:
        store.bm25(query_terms(queries[0].question), ("public",), 10)
    out["first_query"] = t.times()
    out["after"] = statistics_of(store)
    with Stopwatch() as t:
        indexing.rollback_index(store)
    out["rollback"] = t.times()
    out["rolled_back"] = statistics_of(store)
    out["store_bytes_after"] = store.path.stat().st_size
    print(f"{name}: switched in {out['switch']['wall']:.1f} s, rolled back in {t.wall:.1f} s", file=sys.stderr)
    return out


def table(result: dict) -> str:
    lines = [f"store copy: {result['store']} ({result['live']['chunks']:,} chunks, {result['live']['versions']:,} "
             f"versions); migration to schema 2: {result['migrate']['wall']:.2f} s",
             "| version | build s (CPU) | verify s (CPU) | switch s (CPU) | first query s | rollback s (CPU) | "
             "N before -> after | avgdl before -> after | verify problems |",
             "|---|---|---|---|---|---|---|---|---|"]
    for c in result["cycles"]:
        lines.append(
            f"| {c['name']} | {c['build']['wall']:.1f} ({c['build']['cpu']:.1f}) | {c['verify']['wall']:.1f} "
            f"({c['verify']['cpu']:.1f}) | {c['switch']['wall']:.1f} ({c['switch']['cpu']:.1f}) | "
            f"{c['first_query']['wall']:.1f} | {c['rollback']['wall']:.1f} ({c['rollback']['cpu']:.1f}) | "
            f"{c['before']['rows']:,} -> {c['after']['rows']:,} | {c['before']['avgdl']} -> {c['after']['avgdl']} | "
            f"{c['verify']['problems']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", type=Path, default=DEVSET / "store.db")
    ap.add_argument("--query-set", type=Path, default=DEVSET / "queries.jsonl")
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "versioned_index.json")
    args = ap.parse_args(argv)
    if not args.store.is_file():
        print(f"error: no store at {args.store}; run bench/quality/quality.py first (it builds the dev set and "
              "ingests it; make bench runs it before this script)", file=sys.stderr)
        return 2
    queries = load_queries(args.query_set)[:args.queries]
    with tempfile.TemporaryDirectory(prefix="ragdx-bench-") as tmp:
        path = Path(tmp) / "store.db"
        shutil.copyfile(args.store, path)
        con = sqlite3.connect(path)
        con.execute("DELETE FROM vectors")
        con.execute("DELETE FROM spaces")
        con.commit()
        con.close()
        with Stopwatch() as migrate:
            store = SQLiteStore(path, "write")
        live_config = json.loads(store.parse_configs()[0][0])
        # the live chunks were counted in the dense encoder's word pieces: the same counter here
        counter = build_encoder(load_settings().retrieval.dense)
        same = ChunkerConfig(**{k: v for k, v in live_config.items() if k != "algorithm"})
        assert same.tokenizer == counter.name, (same.tokenizer, counter.name)
        result = {"store": str(args.store), "live": statistics_of(store), "migrate": migrate.times(),
                  "queries": len(queries), "machine": machine(), "code": code_version(), "cycles": []}
        result["cycles"].append(cycle(store, "retain 0 (copied)", same, counter, 0, queries))
        smaller = ChunkerConfig(max_tokens=120, overlap_tokens=same.overlap_tokens, tokenizer=same.tokenizer,
                                heading_prefix=same.heading_prefix)
        result["cycles"].append(cycle(store, "max_tokens 120 (re-chunked)", smaller, counter, None, queries))
        store.close()
    write_result(args.out, result, table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

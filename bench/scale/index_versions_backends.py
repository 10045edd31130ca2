"""Index versions on every backend, on a real corpus: the Python docs (530 HTML pages) ingested into
SQLite, one PostgreSQL node and PostgreSQL sharded over two servers (with 384-dimension hashing
vectors, so the vectors travel as they would with a real encoder, which would cost the same on
every backend), then a new index version of smaller chunks built beside the live one, verified
(on a scratch copy), switched to, and rolled back. Each step's seconds, the chunks live and held
beside, and whether each PostgreSQL store's BM25 top 10 after the switch is SQLite's, question by
question (the dev set's questions).

    make pg                                         # the three servers, DSN printed last
    .venv/bin/python bench/scale/index_versions_backends.py --dsn postgresql://postgres@127.0.0.1:55432/ragdx \\
        --shard postgresql://postgres@127.0.0.1:55433/ragdx --shard postgresql://postgres@127.0.0.1:55434/ragdx

Results: bench/results/index_versions_backends.json. The PostgreSQL stores are made in schemas of their own
(``bench_ix_single``, ``bench_ix_sharded``), dropped first and at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _common, and the areas
from _common import (
    DEFAULT_HTML, REPO, code_version, html_pages, label_table, machine, missing_pages, write_manifest, write_result,
)

from ragdx.build import build_ingestor
from ragdx.config import load_settings
from ragdx.errors import StoreError
from ragdx.index import versions as indexing
from ragdx.ingest.chunk import ChunkerConfig, RegexTokenCounter
from ragdx.ingest.embed import Embedder
from ragdx.stages.bm25 import query_terms
from ragdx.store.pg_admin import drop_store, setup_shards
from ragdx.store.postgres import PostgresStore
from ragdx.store.sqlite import SQLiteStore
from ragdx.testing.encoders import HashingEncoder

NEEDS = "a PostgreSQL server and two shards: --dsn, --shard (make pg starts them and prints them)"
SETTINGS = ["chunking.tokenizer=regex", "rerank.method=none"]
SMALLER = ChunkerConfig(max_tokens=120, tokenizer="regex:words+punct")


def questions() -> list[str]:
    """The dev set's questions (its labels are in the repository)."""
    rows = (REPO / "bench" / "devset" / "labels.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["question"] for line in rows if line.strip()]


def top10(store, asked: list[str]) -> list[list[str]]:
    return [[c.id for c, _ in store.bm25(query_terms(q), ("public",), 10)] for q in asked]


def timed(step, *args, **kwargs):
    started = time.perf_counter()
    out = step(*args, **kwargs)
    return out, round(time.perf_counter() - started, 2)


def run(store, manifest: Path, asked: list[str]) -> tuple[dict, list[list[str]]]:
    encoder = HashingEncoder(dim=384)
    settings = load_settings(overrides=SETTINGS)
    _, ingest_s = timed(build_ingestor(store, settings, encoder=encoder).run, manifest, allow_outside=True)
    embedder = Embedder(encoder, backend="HashingEncoder")
    live = store.counts()["chunks"]
    built, build_s = timed(indexing.build_index, store, SMALLER, RegexTokenCounter(), embedder=embedder)
    check, verify_s = timed(indexing.verify_index, store, built.index_id)
    if check.problems:  # recorded (the latency check times a loaded machine too); switched anyway
        print(f"  verify: {list(check.problems)}", file=sys.stderr)
    old, switch_s = timed(indexing.switch_index, store, built.index_id, embedder=embedder, force=bool(check.problems))
    after = top10(store, asked)
    problems = store.verify()
    _, rollback_s = timed(indexing.rollback_index, store, embedder=embedder)
    row = {"ingest_s": round(ingest_s, 1), "live_chunks": live, "built_chunks": built.chunks,
           "build_s": build_s, "verify_s": verify_s, "verify_problems": list(check.problems),
           "switch_s": switch_s, "rollback_s": rollback_s, "store_check_after_switch": problems,
           "rolled_back_to": store.live_index().id, "replaced": old, "load_1min": round(os.getloadavg()[0], 2)}
    return row, after


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", required=True, help="the coordinator (and single node)")
    parser.add_argument("--shard", action="append", required=True, help="a shard's DSN (repeat)")
    parser.add_argument("--html-dir", type=Path, default=DEFAULT_HTML)
    parser.add_argument("--pages", type=int, default=530, help="the first this many pages")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "index_versions_backends.json")
    args = parser.parse_args()
    missing = missing_pages(args.html_dir)
    if missing:
        print(missing, file=sys.stderr)
        return 2
    asked = questions()
    result: dict = {"machine": machine(), "code": code_version(), "questions": len(asked),
                    "chunker": json.loads(SMALLER.to_json()),
                    "command": " ".join(["bench/scale/index_versions_backends.py", *sys.argv[1:]])}
    single = f"{args.dsn}?options=-csearch_path%3Dbench_ix_single"
    sharded = f"{args.dsn}?options=-csearch_path%3Dbench_ix_sharded"
    for dsn in (single, sharded):
        with contextlib.suppress(StoreError):  # no store there yet
            drop_store(dsn)
    with tempfile.TemporaryDirectory() as tmp:
        pages = html_pages(args.html_dir)[:args.pages]
        manifest = Path(tmp) / "manifest.jsonl"
        write_manifest(pages, args.html_dir, manifest)
        result["pages"] = len(pages)
        makers = {"sqlite": lambda: SQLiteStore(Path(tmp) / "store.db"), "pg": lambda: PostgresStore(single),
                  "pg-sharded": lambda: setup_shards(sharded, args.shard)}
        tops = {}
        try:
            for name, make in makers.items():
                print(f"{name}: ingest, build, verify, switch, rollback", file=sys.stderr)
                with make() as store:
                    result[name], tops[name] = run(store, manifest, asked)
                print(f"  {result[name]}", file=sys.stderr)
        finally:
            for dsn in (single, sharded):
                with contextlib.suppress(StoreError):
                    drop_store(dsn)
    for name in ("pg", "pg-sharded"):
        result[name]["bm25_top10_as_sqlite"] = sum(a == b for a, b in zip(tops["sqlite"], tops[name])) / len(asked)
    rows = [(f"{name} {key}", str(result[name][key])) for name in makers
            for key in ("live_chunks", "built_chunks", "build_s", "verify_s", "switch_s", "rollback_s")]
    rows += [(f"{name} bm25_top10_as_sqlite", str(result[name]["bm25_top10_as_sqlite"])) for name in ("pg", "pg-sharded")]
    write_result(args.out, result, label_table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

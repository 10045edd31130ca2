"""The cost of durability: a durable run (``ragdx run``: each query claimed under a lease, its
draft checkpoint committed, its evidence rechecked, its lines published) against the single
pass (:func:`ragdx.run_pipeline`, which writes the same run folder without ``run.db``).

Reproduce, from the repository root::

    .venv/bin/python bench/diagnosis/durable_overhead.py

Two pipelines over stores on local disk, each run ``--rounds`` times alternately single pass
then durable (so machine noise cannot favour one), into fresh folders; one worker, in process:

- ``example``: the bundled example's 18 questions, repeated ``--repeat`` times (distinct ids),
  with the default settings and the dense channel off (the core install's pipeline);
- ``tiny``: the durable tests' pipeline (20 two-sentence documents, top 4, a context of 80
  tokens, no reranker), 200 generated questions: the cheapest pipeline, so the overhead is seen
  at its largest share.

Reported per configuration, in CPU seconds of this process (robust when other jobs share the
cores) and in wall seconds (which also count the commits' waits on the disk): the median of
each mode, the overhead per query ((durable - single) / queries), and the ratio durable /
single. Both modes end by writing the manifest, metrics and report, so those cost the same.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from ragdx.build import build_ingestor, build_pipeline
from ragdx.examples import example_dir
from ragdx.config import load_settings
from ragdx.experiments.durable import run_durable
from ragdx.experiments.run import run_pipeline
from ragdx.queryset import load_queries
from ragdx.store.sqlite import SQLiteStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _common, and the areas
from _common import REPO, Stopwatch, code_version, machine, write_result  # noqa: E402

DEFAULT_OUT = REPO / "bench" / "results" / "durable_overhead.json"
TINY = ["retrieval.dense.enabled=false", "chunking.tokenizer=regex", "rerank.method=none",
        "retrieval.bm25.top_k=4", "fusion.top_k=4", "rerank.top_n=3", "context.budget_tokens=80"]


def example(folder: Path, repeat: int):
    settings = load_settings(overrides=["retrieval.dense.enabled=false"])
    store = SQLiteStore(folder / "example.db")
    build_ingestor(store, settings).run(example_dir() / "manifest.jsonl")
    base = load_queries(example_dir() / "queries.jsonl")
    queries = [replace(q, id=f"{q.id}#{k}") for k in range(repeat) for q in base]
    return store, settings, queries


def tiny(folder: Path):
    corpus, lines, asked = folder / "tiny", [], []
    corpus.mkdir()
    for i in range(20):
        (corpus / f"d{i}.md").write_text(f"# Policy {i}\n\nItem {i} refunds are accepted within {i + 10} days of "
                                         f"delivery.\n\nItem {i} ships in {i % 5 + 1} days.\n", encoding="utf-8")
        lines.append(json.dumps({"doc_id": f"d{i}.md", "path": f"d{i}.md"}))
    (corpus / "m.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for k in range(200):
        i = k % 20
        asked.append(json.dumps({"id": f"q{k}", "question": f"Within how many days are item {i} refunds accepted?",
                                 "required": [[{"doc": f"d{i}.md",
                                                "quote": f"Item {i} refunds are accepted within {i + 10} days"}]]}))
    (corpus / "q.jsonl").write_text("\n".join(asked) + "\n", encoding="utf-8")
    settings = load_settings(overrides=TINY)
    store = SQLiteStore(folder / "tiny.db")
    build_ingestor(store, settings).run(corpus / "m.jsonl")
    return store, settings, load_queries(corpus / "q.jsonl")


def measure(name: str, store, settings, queries, rounds: int, folder: Path) -> dict:
    pipeline = build_pipeline(store, settings)
    pipeline.run(queries[0])  # warm caches outside the timings
    wall: dict[str, list[float]] = {"single": [], "durable": []}
    cpu: dict[str, list[float]] = {"single": [], "durable": []}
    for r in range(rounds):
        for mode in ("single", "durable"):
            out = folder / f"{name}-{mode}-{r}"
            with Stopwatch() as clock:
                if mode == "single":
                    run_pipeline(pipeline, queries, out, progress=False)
                else:
                    run_durable(pipeline, queries, out, progress=False)
            wall[mode].append(clock.wall)
            cpu[mode].append(clock.cpu)
            shutil.rmtree(out)
    n = len(queries)
    out = {"queries": n, "rounds": rounds, "wall_all": wall, "cpu_all": cpu}
    for kind, times in (("wall", wall), ("cpu", cpu)):
        s, d = statistics.median(times["single"]), statistics.median(times["durable"])
        out[kind] = {"single_s": s, "durable_s": d, "single_ms_per_query": s / n * 1000,
                     "overhead_ms_per_query": (d - s) / n * 1000, "ratio": d / s}
    return out


def table(r: dict) -> str:
    rows = [f"{'config':<8} {'clock':<5} {'queries':>7} {'single s':>9} {'durable s':>10} {'single ms/q':>12} "
            f"{'overhead ms/q':>14} {'ratio':>6}"]
    for name, m in r["configs"].items():
        for kind in ("cpu", "wall"):
            k = m[kind]
            rows.append(f"{name:<8} {kind:<5} {m['queries']:>7} {k['single_s']:>9.2f} {k['durable_s']:>10.2f} "
                        f"{k['single_ms_per_query']:>12.1f} {k['overhead_ms_per_query']:>14.2f} {k['ratio']:>6.3f}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=6, help="copies of the example's 18 questions")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="ragdx-bench-durable-"))
    try:
        configs = {}
        for name, (store, settings, queries) in (("example", example(folder, args.repeat)), ("tiny", tiny(folder))):
            with store:
                configs[name] = measure(name, store, settings, queries, args.rounds, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    result = {"machine": machine(), "code": code_version(), "configs": configs}
    write_result(args.out, result, table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

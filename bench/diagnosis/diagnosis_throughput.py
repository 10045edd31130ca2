"""Diagnosis throughput on synthetic traces, and the cost of recording traces in a real run.

Reproduce, from the repository root::

    .venv/bin/python bench/diagnosis/diagnosis_throughput.py

(1) ``--traces`` synthetic traces (default 10,000), each a query with two required groups (id
    alternatives) and four stages (two retrieval channels of 100 items, a rerank of 20, a context
    of 8) with an answer, where the evidence is lost at a random stage; timed: ``Diagnoser.run`` on
    every trace. Target: well under a second per 1,000 traces.
(2) The bundled example's 18 questions through the default pipeline, ``--repeat`` times; per
    query, the pipeline (every artifact built; that is the pipeline's output, not an extra) and
    the recording (the trace serialised to JSON and written, the query diagnosed and its
    diagnosis written) are timed apart in the same loop. The ratio (pipeline + recording) /
    pipeline is the tracing overhead.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

from ragdx.examples import example_dir
from ragdx.config import load_settings
from ragdx.diagnosis.evidence import BY_ID, EvidenceResolver, QueryEvidence, ResolvedAlternative
from ragdx.diagnosis.locate import AnswerView, ClaimView, Diagnoser, DroppedView, ItemView, StageView, TraceView
from ragdx.diagnosis.ours import diagnose_trace
from ragdx.build import build_ingestor, build_pipeline
from ragdx.queryset import load_queries
from ragdx.runfolder import json_line
from ragdx.store.sqlite import SQLiteStore
from ragdx.tracefile import trace_to_dict
from ragdx.types import Alternative, Principal, Query, StageKind

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _common, and the areas
from _common import REPO, Stopwatch, code_version, machine, write_result  # noqa: E402

DEFAULT_OUT = REPO / "bench" / "results" / "diagnosis_throughput.json"


def synthetic(n: int, seed: int) -> list[tuple[Query, QueryEvidence, TraceView]]:
    rng = random.Random(seed)
    out = []
    for q in range(n):
        gold = [f"q{q}-gold-a", f"q{q}-gold-b"]
        query = Query(f"q{q}", "?", Principal(), True, tuple((Alternative(id=g),) for g in gold))
        evidence = QueryEvidence(query.id, tuple(ResolvedAlternative(i, 0, (Alternative(id=g)), BY_ID)
                                                 for i, g in enumerate(gold)))
        noise = [f"q{q}-n{i}" for i in range(120)]
        lose_at = rng.choice(["none", "retrieval", "rerank", "context"])
        bm25 = noise[:98] + ([] if lose_at == "retrieval" else gold)
        dense = noise[20:120]
        rng.shuffle(bm25)
        rerank = (gold if lose_at not in ("retrieval", "rerank") else gold[:1]) + noise[:18]
        context = rerank[:8] if lose_at != "context" else [gold[0]] + noise[:7]
        view = TraceView(query.id, (
            StageView("bm25", StageKind.RETRIEVAL, tuple(ItemView(i, rank=r) for r, i in enumerate(bm25, 1))),
            StageView("dense", StageKind.RETRIEVAL, tuple(ItemView(i, rank=r) for r, i in enumerate(dense, 1))),
            StageView("rerank", StageKind.RERANK, tuple(ItemView(i, rank=r) for r, i in enumerate(rerank, 1)),
                      tuple(DroppedView(ItemView(i), "below the rerank cut") for i in noise[18:40])),
            StageView("ctx", StageKind.CONTEXT, tuple(ItemView(i, rank=r) for r, i in enumerate(context, 1)))),
            AnswerView("a", False, tuple(ClaimView("c", (i,), True) for i in context[:3])))
        out.append((query, evidence, view))
    return out


def run(n: int, repeat: int, seed: int) -> dict:
    cases = synthetic(n, seed)
    diagnoser = Diagnoser()
    with Stopwatch() as clock:
        outcomes = [diagnoser.run(q, e, v).first_failure for q, e, v in cases]
    counts = {str(k): outcomes.count(k) for k in sorted(set(outcomes), key=str)}
    # (2) the tracing overhead on the bundled example
    settings = load_settings()
    folder = Path(tempfile.mkdtemp(prefix="ragdx-bench-"))
    store = SQLiteStore(folder / "store.db")
    build_ingestor(store, settings).run(example_dir() / "manifest.jsonl")
    queries = load_queries(example_dir() / "queries.jsonl")
    pipeline = build_pipeline(store, settings)
    pipeline.run(queries[0])  # load the model outside the timings
    # the pipeline and the recording timed apart, query by query, in the same loop, so machine
    # noise cannot favour one of them
    pipeline_s, recording_s = [], []
    resolver = EvidenceResolver(store)  # one for the run, as ragdx run has
    with open(folder / "traces.jsonl", "w", encoding="utf-8") as traces, \
            open(folder / "diagnosis.jsonl", "w", encoding="utf-8") as diag:
        for _ in range(repeat):
            for query in queries:
                with Stopwatch() as p:
                    trace = pipeline.run(query)
                with Stopwatch() as r:
                    traces.write(json_line(trace_to_dict(trace)))  # written as ragdx run writes them
                    diag.write(json_line(diagnose_trace(pipeline, trace, resolver).to_dict()))
                pipeline_s.append(p.wall)
                recording_s.append(r.wall)
    bare_s, rec_s = sum(pipeline_s) / repeat, sum(recording_s) / repeat
    return {"machine": machine(), "code": code_version(),
            "synthetic": {"traces": n, "seconds": clock.wall, "cpu_seconds": clock.cpu,
                          "ms_per_1000": clock.cpu / n * 1000 * 1000, "first_failures": counts},
            "tracing": {"queries": len(queries), "repeat": repeat, "pipeline_s": bare_s,
                        "recording_and_diagnosis_s": rec_s, "ratio": (bare_s + rec_s) / bare_s}}


def table(r: dict) -> str:
    s, t = r["synthetic"], r["tracing"]
    return (f"diagnosis: {s['traces']} synthetic traces in {s['cpu_seconds']:.2f} CPU s = "
            f"{s['ms_per_1000']:.0f} ms per 1,000; first failures {s['first_failures']}\n"
            f"tracing: {t['queries']} queries, pipeline {t['pipeline_s']:.3f} s, writing traces and "
            f"diagnosing {t['recording_and_diagnosis_s']:.3f} s: a run with recording costs "
            f"{t['ratio']:.3f}x the bare pipeline")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    result = run(args.traces, args.repeat, args.seed)
    write_result(args.out, result, table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

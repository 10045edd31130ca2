"""``ragdx run``: the pipeline over a query set, recorded in a run folder (CONTRACTS.md).

| file | contents |
|---|---|
| ``manifest.json`` | settings, ragdx version, models and their hashes, index version, seed, inputs |
| ``traces.jsonl`` | every stage's artifacts, per query |
| ``diagnosis.jsonl`` | the first-loss diagnosis, per query |
"""

from __future__ import annotations

import hashlib
import json
import platform
import sys
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

from ragdx.config import Settings
from ragdx.diagnosis.evidence import EvidenceResolver
from ragdx.diagnosis.locate import Diagnosis
from ragdx.diagnosis.ours import diagnose_trace
from ragdx.pipeline import Pipeline
from ragdx.store.sqlite import SQLiteStore
from ragdx.tracefile import trace_to_dict
from ragdx.types import Query


@dataclass(frozen=True, slots=True)
class RunResult:
    folder: Path
    diagnoses: tuple[Diagnosis, ...]
    seconds: float


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def manifest(store: SQLiteStore, pipeline: Pipeline, settings: Settings, queries_path: Path | None) -> dict:
    from ragdx import __version__
    space = store.active_space() if pipeline.encoder is not None else None
    return {
        "ragdx_version": __version__, "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(), "settings": settings.to_dict(), "seed": settings.seed,
        "store": str(store.path), "index_version": store.index_version,
        "embedding_space": None if space is None else {
            "id": space.id, "model": space.model_id, "weights_hash": space.weights_hash,
            "dim": space.dim, "max_tokens": space.max_tokens},
        "reranker_weights": getattr(pipeline.reranker, "weights", None),
        "queries": None if queries_path is None else {"path": str(queries_path), "sha256": _sha256(queries_path)},
    }


def run(store: SQLiteStore, settings: Settings, queries: Sequence[Query], out: Path,
        queries_path: Path | None = None, progress: bool = True, oracle: str | None = None,
        encoder: Any = None) -> RunResult:
    """Run every query, diagnose it, and write the run folder.

    With ``oracle="context"``, each query is also answered from the gold context with the same
    generator and verifier; its diagnosis gains ``oracle`` (the outcome with gold evidence, and
    whether it flipped), separating upstream failures from generation failures.
    """
    started = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    pipeline = Pipeline(store, settings, encoder=encoder)
    resolver = EvidenceResolver(store)
    diagnoses = []
    with open(out / "traces.jsonl", "w", encoding="utf-8") as traces, \
            open(out / "diagnosis.jsonl", "w", encoding="utf-8") as diag:
        for n, query in enumerate(queries, start=1):
            trace = pipeline.run(query)
            diagnosis = diagnose_trace(pipeline, trace, resolver)
            if oracle == "context":
                diagnosis = _with_oracle(pipeline, trace, diagnosis, resolver)
            traces.write(json.dumps(trace_to_dict(trace)) + "\n")
            diag.write(json.dumps(diagnosis.to_dict()) + "\n")
            diagnoses.append(diagnosis)
            if progress:
                bar = "#" * (30 * n // len(queries))
                print(f"\rragdx run [{bar:<30}] {n}/{len(queries)} {query.id[:40]:<40}", end="",
                      file=sys.stderr, flush=True)
    if progress:
        print(file=sys.stderr)
    (out / "manifest.json").write_text(json.dumps(manifest(store, pipeline, settings, queries_path), indent=2)
                                       + "\n", encoding="utf-8")
    return RunResult(out, tuple(diagnoses), time.perf_counter() - started)


def _with_oracle(pipeline: Pipeline, trace, diagnosis: Diagnosis, resolver: EvidenceResolver) -> Diagnosis:
    from dataclasses import replace

    from ragdx.experiments.oracle import gold_context
    from ragdx.pipeline import Trace
    query = trace.query
    context = gold_context(pipeline.store, query, pipeline.assembler.counter, resolver)
    answer = pipeline.generator.run(query, context)
    verification = pipeline.verifier.run(query, context, answer)
    gold = Trace(query, (*trace.ranked, context, answer, verification), 0.0)
    outcome = diagnose_trace(pipeline, gold, resolver).outcome
    good = ("supported", "correct_abstention")
    flipped = (outcome in good) != (diagnosis.outcome in good)
    note = (f"with the gold context the outcome is {outcome}"
            + ("; the failure lies upstream of generation" if flipped and outcome in good else
               "; the generator fails even with complete evidence" if outcome not in good else ""))
    return replace(diagnosis, oracle={"context": outcome, "flipped": flipped}, notes=diagnosis.notes + (note,))


def summary(diagnoses: Sequence[Diagnosis]) -> str:
    """A terminal table: outcomes, and where evidence was first lost."""
    from ragdx.report.terminal import table
    outcomes = Counter(d.outcome for d in diagnoses)
    failures = Counter(d.first_failure for d in diagnoses if d.first_failure)
    rows = [(o, n) for o, n in outcomes.most_common()]
    out = table(["outcome", "queries"], rows)
    if failures:
        out += "\n\n" + table(["first failure", "queries"], failures.most_common())
    oracle = any(d.oracle for d in diagnoses)
    headers = ["query", "outcome", "first failure"] + (["gold context"] if oracle else []) + ["hypothesis"]
    rows = [(d.id, d.outcome, d.first_failure or "-")
            + ((f"{d.oracle['context']}{' (flips)' if d.oracle['flipped'] else ''}",) if oracle and d.oracle else
               ("-",) if oracle else ()) + (d.hypothesis,) for d in diagnoses]
    out += "\n\n" + table(headers, rows, max_width=70)
    return out

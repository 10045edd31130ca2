"""Running a query set through a pipeline (``ragdx run``): each query's trace, diagnosis and
metric values, written to a run folder with its manifest, metrics and report.

The pipeline may be ragdx's own (:func:`ragdx.build.build_pipeline`) or any list of stages a
user assembled (:class:`ragdx.pipeline.Pipeline`): the trace, the diagnosis and the report are
the same for both.
"""

from __future__ import annotations

import json
import time
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from ragdx.build import build_pipeline
from ragdx.config import Settings
from ragdx.diagnosis.evidence import EvidenceResolver, QueryEvidence
from ragdx.diagnosis.locate import Diagnosis
from ragdx.diagnosis.ours import diagnose_trace, view_of
from ragdx.diagnosis.records import GOOD_OUTCOMES
from ragdx.evaluation.layered import Metrics, layered, query_values
from ragdx.pipeline import Pipeline, Trace
from ragdx.progress import Progress
from ragdx.protocols import Store
from ragdx.runfolder import Executed, manifest, write_json, write_report
from ragdx.tracefile import trace_to_dict
from ragdx.types import Query

__all__ = ["RunResult", "execute", "run_pipeline", "run"]


@dataclass(frozen=True, slots=True)
class RunResult:
    folder: Path
    diagnoses: tuple[Diagnosis, ...]
    seconds: float
    metrics: Metrics


def execute(pipeline: Pipeline, queries: Sequence[Query], out: Path, produce: Callable[[Query], Trace],
            *, oracle: str | None = None, progress: bool = True, label: str = "ragdx run",
            evidence: Sequence[QueryEvidence] | None = None) -> Executed:
    """Produce each query's trace, diagnose it and compute its metric values, writing
    ``traces.jsonl`` and ``diagnosis.jsonl`` to ``out`` as it goes. ``evidence``: the queries'
    evidence already resolved against this store (an ablation resolves it once for every run)."""
    out.mkdir(parents=True, exist_ok=True)
    pipeline.warm_up()
    resolver = EvidenceResolver(pipeline.store)
    traces, diagnoses, rows, views, evidences = [], [], [], [], []
    shown = Progress(label, len(queries), unit="queries") if progress else nullcontext(None)
    with open(out / "traces.jsonl", "w", encoding="utf-8") as trace_file, \
            open(out / "diagnosis.jsonl", "w", encoding="utf-8") as diag, shown as bar:
        for n, query in enumerate(queries, start=1):
            trace = produce(query)
            resolved = evidence[n - 1] if evidence is not None else resolver.run(query)
            view = view_of(trace, pipeline.store)
            diagnosis = diagnose_trace(pipeline, trace, evidence=resolved, view=view)
            if oracle == "context":
                diagnosis = _with_oracle(pipeline, trace, diagnosis, resolver)
            trace_file.write(json.dumps(trace_to_dict(trace)) + "\n")
            diag.write(json.dumps(diagnosis.to_dict()) + "\n")
            traces.append(trace)
            diagnoses.append(diagnosis)
            views.append(view)
            evidences.append(resolved)
            rows.append(query_values(query, diagnosis, view, resolved))
            if bar is not None:
                bar.advance(1, query.id[:40])
    return Executed(tuple(traces), tuple(diagnoses), tuple(rows), tuple(views), tuple(evidences))


def run_pipeline(pipeline: Pipeline, queries: Sequence[Query], out: Path, *, queries_path: Path | None = None,
                 progress: bool = True, oracle: str | None = None) -> RunResult:
    """Run every query through ``pipeline``, diagnose it, and write the run folder.

    With ``oracle="context"``, each query is also answered from the gold context with the same
    generator and verifier; its diagnosis gains ``oracle`` (the outcome with gold evidence, and
    whether it flipped), separating upstream failures from generation failures.
    """
    started = time.perf_counter()
    done = execute(pipeline, queries, out, pipeline.run, oracle=oracle, progress=progress)
    info = manifest(pipeline, queries_path)
    write_json(out / "manifest.json", info)
    metrics = layered(done.rows)
    write_json(out / "metrics.json", metrics.to_dict())
    write_report(out, info, queries, done, metrics, pipeline.store)
    return RunResult(out, done.diagnoses, time.perf_counter() - started, metrics)


def run(store: Store, settings: Settings, queries: Sequence[Query], out: Path,
        queries_path: Path | None = None, progress: bool = True, oracle: str | None = None,
        encoder: Any = None) -> RunResult:
    """:func:`run_pipeline` with ragdx's own pipeline, as the settings describe it."""
    return run_pipeline(build_pipeline(store, settings, encoder=encoder), queries, out,
                        queries_path=queries_path, progress=progress, oracle=oracle)


def _with_oracle(pipeline: Pipeline, trace, diagnosis: Diagnosis, resolver: EvidenceResolver) -> Diagnosis:
    from ragdx.experiments.oracle import gold_context
    query = trace.query
    context = gold_context(pipeline.store, query, pipeline.assembler.counter, resolver)
    answer = pipeline.generator.run(query, context)
    verification = pipeline.verifier.run(query, context, answer)
    gold = Trace(query, (*trace.ranked, context, answer, verification), 0.0)
    outcome = diagnose_trace(pipeline, gold, resolver).outcome
    good = GOOD_OUTCOMES
    flipped = (outcome in good) != (diagnosis.outcome in good)
    note = (f"with the gold context the outcome is {outcome}"
            + ("; the failure lies upstream of generation" if flipped and outcome in good else
               "; the generator fails even with complete evidence" if outcome not in good else ""))
    return replace(diagnosis, oracle={"context": outcome.value, "flipped": flipped},
                   notes=diagnosis.notes + (note,))

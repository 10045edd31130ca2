"""Running a query set through a pipeline (``ragdx run``): each query's trace, diagnosis and
metric values, written to a run folder with its manifest, metrics and report.

The pipeline may be ragdx's own (:func:`ragdx.build.build_pipeline`) or any list of stages a
user assembled (:class:`ragdx.pipeline.Pipeline`): the trace, the diagnosis and the report are
the same for both.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from ragdx.binding import EvidenceBinding, bind_evidence
from ragdx.build import build_pipeline
from ragdx.config import Settings
from ragdx.diagnosis.evidence import EvidenceResolver, QueryEvidence
from ragdx.diagnosis.locate import Diagnosis, TraceView
from ragdx.diagnosis.ours import diagnose_trace, view_of
from ragdx.diagnosis.records import GOOD_OUTCOMES
from ragdx.evaluation.layered import Metrics, QueryValues, layered, query_values
from ragdx.pipeline import Pipeline, Trace
from ragdx.progress import Progress
from ragdx.protocols import Store
from ragdx.runfolder import Executed, json_line, manifest, write_json, write_report
from ragdx.tracefile import trace_to_dict
from ragdx.types import Query

__all__ = ["RunResult", "Answered", "answer_one", "execute", "executed", "run_pipeline", "run"]


@dataclass(frozen=True, slots=True)
class RunResult:
    folder: Path
    diagnoses: tuple[Diagnosis, ...]
    seconds: float
    metrics: Metrics


@dataclass(frozen=True, slots=True)
class Answered:
    """One query run and diagnosed: its trace (as JSON too, with the evidence its answer cites),
    the diagnosis, the trace's view, the resolved evidence and the metric values."""

    trace: Trace
    binding: EvidenceBinding
    diagnosis: Diagnosis
    view: TraceView
    evidence: QueryEvidence
    row: QueryValues

    def trace_json(self) -> dict:
        return trace_to_dict(self.trace, self.binding)


def answer_one(pipeline: Pipeline, query: Query, produce: Callable[[Query], Trace], resolver: EvidenceResolver,
               *, oracle: str | None = None, evidence: QueryEvidence | None = None,
               index_version: int | None = None) -> Answered:
    """Produce one query's trace, bind its answer to the evidence it cites, diagnose it and
    compute its metric values. ``index_version``: the store's, read before the trace was made
    (a trace made elsewhere, earlier); by default it is read now, before ``produce``."""
    if index_version is None:  # before the answer: a change while it runs shows in a recheck
        index_version = pipeline.store.index_version
    trace = produce(query)
    binding = bind_evidence(pipeline.store, query.principal, trace.context, trace.answer, index_version)
    resolved = evidence if evidence is not None else resolver.run(query)
    view = view_of(trace, pipeline.store, pipeline.channels)
    diagnosis = diagnose_trace(pipeline, trace, evidence=resolved, view=view)
    if oracle == "context":
        diagnosis = _with_oracle(pipeline, trace, diagnosis, resolver)
    return Answered(trace, binding, diagnosis, view, resolved, query_values(query, diagnosis, view, resolved))


def execute(pipeline: Pipeline, queries: Sequence[Query], out: Path, produce: Callable[[Query], Trace],
            *, oracle: str | None = None, progress: bool = True, label: str = "ragdx run",
            evidence: Sequence[QueryEvidence] | None = None, index_version: int | None = None) -> Executed:
    """Produce each query's trace, diagnose it and compute its metric values, writing
    ``traces.jsonl`` and ``diagnosis.jsonl`` to ``out`` as it goes. ``evidence``: the queries'
    evidence already resolved against this store (an ablation resolves it once for every run).
    ``index_version``: the traces were made elsewhere (``produce`` hands them over) when the store
    had this index version; the pipeline's models are not loaded here."""
    out.mkdir(parents=True, exist_ok=True)
    if index_version is None:
        pipeline.warm_up()
    resolver = EvidenceResolver(pipeline.store)
    done: list[Answered] = []
    shown = Progress(label, len(queries), unit="queries") if progress else nullcontext(None)
    with open(out / "traces.jsonl", "w", encoding="utf-8") as trace_file, \
            open(out / "diagnosis.jsonl", "w", encoding="utf-8") as diag, shown as bar:
        for n, query in enumerate(queries, start=1):
            one = answer_one(pipeline, query, produce, resolver, oracle=oracle,
                             evidence=evidence[n - 1] if evidence is not None else None,
                             index_version=index_version)
            trace_file.write(json_line(one.trace_json()))
            diag.write(json_line(one.diagnosis.to_dict()))
            done.append(one)
            if bar is not None:
                bar.advance(1, query.id[:40])
    return executed(done)


def executed(done: Sequence[Answered]) -> Executed:
    """What a run produced, as the run folder's writers take it."""
    return Executed(tuple(a.trace for a in done), tuple(a.diagnosis for a in done), tuple(a.row for a in done),
                    tuple(a.view for a in done), tuple(a.evidence for a in done))


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

"""``ragdx run``: the pipeline over a query set, recorded in a run folder (CONTRACTS.md).

| file | contents |
|---|---|
| ``manifest.json`` | settings, ragdx version, models and their hashes, index version, seed, inputs |
| ``traces.jsonl`` | every stage's artifacts, per query |
| ``diagnosis.jsonl`` | the first-loss diagnosis, per query |
| ``metrics.json`` | the layered metrics, overall and per tag, and every query's values |
| ``report.html`` | one self-contained page: funnel, outcomes, per-tag tables, drill-down |
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
from typing import Any, Callable, Sequence

from ragdx.config import Settings
from ragdx.diagnosis.evidence import EvidenceResolver, QueryEvidence
from ragdx.diagnosis.locate import Diagnosis, TraceView
from ragdx.diagnosis.ours import diagnose_trace, view_of
from ragdx.evaluation.layered import Metrics, QueryValues, layered, query_values
from ragdx.pipeline import Pipeline, Trace
from ragdx.store.sqlite import SQLiteStore
from ragdx.tracefile import trace_to_dict
from ragdx.types import Query


@dataclass(frozen=True, slots=True)
class RunResult:
    folder: Path
    diagnoses: tuple[Diagnosis, ...]
    seconds: float
    metrics: Metrics


def write_json(path: Path, obj: Any) -> None:
    """Write JSON whole or not at all (a temporary file, then an atomic rename); NaN is refused."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    tmp.replace(path)


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


@dataclass(frozen=True, slots=True)
class Executed:
    """What running a query set produced, in query order."""

    traces: tuple[Trace, ...]
    diagnoses: tuple[Diagnosis, ...]
    rows: tuple[QueryValues, ...]
    views: tuple[TraceView, ...]
    evidence: tuple[QueryEvidence, ...]


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
    with open(out / "traces.jsonl", "w", encoding="utf-8") as trace_file, \
            open(out / "diagnosis.jsonl", "w", encoding="utf-8") as diag:
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
            if progress:
                bar = "#" * (30 * n // len(queries))
                print(f"\r{label} [{bar:<30}] {n}/{len(queries)} {query.id[:40]:<40}", end="",
                      file=sys.stderr, flush=True)
    if progress:
        print(file=sys.stderr)
    return Executed(tuple(traces), tuple(diagnoses), tuple(rows), tuple(views), tuple(evidences))


def run(store: SQLiteStore, settings: Settings, queries: Sequence[Query], out: Path,
        queries_path: Path | None = None, progress: bool = True, oracle: str | None = None,
        encoder: Any = None) -> RunResult:
    """Run every query, diagnose it, and write the run folder.

    With ``oracle="context"``, each query is also answered from the gold context with the same
    generator and verifier; its diagnosis gains ``oracle`` (the outcome with gold evidence, and
    whether it flipped), separating upstream failures from generation failures.
    """
    started = time.perf_counter()
    pipeline = Pipeline(store, settings, encoder=encoder)
    done = execute(pipeline, queries, out, pipeline.run, oracle=oracle, progress=progress)
    info = manifest(store, pipeline, settings, queries_path)
    write_json(out / "manifest.json", info)
    metrics = layered(done.rows)
    write_json(out / "metrics.json", metrics.to_dict())
    write_report(out, info, queries, done, metrics, store)
    return RunResult(out, done.diagnoses, time.perf_counter() - started, metrics)


def write_report(out: Path, info: dict, queries: Sequence[Query], done: Executed, metrics: Metrics,
                 store: SQLiteStore | None, ablation: Any = None) -> Path:
    """Write ``report.html`` (self-contained) into the run folder."""
    from ragdx.report.html import render_report
    path = out / "report.html"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(render_report(info, queries, done.diagnoses, done.views, done.evidence, metrics, store,
                                 ablation), encoding="utf-8")
    tmp.replace(path)
    return path


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


_SUMMARY_METRICS = ("success", "supported", "answered", "faithfulness", "citation_support")


def summary(diagnoses: Sequence[Diagnosis], metrics: Metrics | None = None) -> str:
    """A terminal table: outcomes, where evidence was first lost, the evidence funnel and the key
    metrics, then one line per query."""
    from ragdx.report.terminal import table
    outcomes = Counter(d.outcome for d in diagnoses)
    failures = Counter(d.first_failure for d in diagnoses if d.first_failure)
    rows = [(o, n) for o, n in outcomes.most_common()]
    out = table(["outcome", "queries"], rows)
    if failures:
        out += "\n\n" + table(["first failure", "queries"], failures.most_common())
    if metrics is not None:
        m = metrics.overall.metrics
        funnel = [(name[9:], f"{a.value:.0%}", f"{int(round(a.total))}/{a.n}") for name, a in m.items()
                  if name.startswith("complete@") and a.n]
        if funnel:
            out += "\n\n" + table(["evidence complete at", "share", "queries"], funnel)
        rows = [(n, f"{m[n].value:.3f}", m[n].n) for n in _SUMMARY_METRICS if n in m and m[n].n]
        if "latency_ms total" in m:
            lat = m["latency_ms total"]
            rows.append(("latency p50 / p95 (ms)", f"{lat.p50:.0f} / {lat.p95:.0f}", lat.n))
        out += "\n\n" + table(["metric", "value", "n"], rows)
    oracle = any(d.oracle for d in diagnoses)
    headers = ["query", "outcome", "first failure"] + (["gold context"] if oracle else []) + ["hypothesis"]
    rows = [(d.id, d.outcome, d.first_failure or "-")
            + ((f"{d.oracle['context']}{' (flips)' if d.oracle['flipped'] else ''}",) if oracle and d.oracle else
               ("-",) if oracle else ()) + (d.hypothesis,) for d in diagnoses]
    out += "\n\n" + table(headers, rows, max_width=70)
    return out


def imported_metrics(out: Path, queries: dict[str, Query], diagnoses: Sequence[Diagnosis],
                     views: dict[str, TraceView], resolver: EvidenceResolver | None,
                     store: SQLiteStore | None) -> Metrics:
    """``metrics.json`` and ``report.html`` for diagnosed imported traces (``ragdx diagnose``)."""
    from ragdx.diagnosis.imports import resolve_offline
    ordered = [queries[d.id] for d in diagnoses]
    evidence = [resolve_offline(q, resolver) for q in ordered]
    view_list = [views.get(q.id) for q in ordered]
    rows = [query_values(q, d, v, e) for q, d, v, e in zip(ordered, diagnoses, view_list, evidence)]
    metrics = layered(rows)
    write_json(out / "metrics.json", metrics.to_dict())
    from ragdx import __version__
    info = {"ragdx_version": __version__, "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "store": str(store.path) if store is not None else None,
            "index_version": store.index_version if store is not None else None}
    done = Executed((), tuple(diagnoses), tuple(rows), tuple(view_list), tuple(evidence))  # type: ignore[arg-type]
    write_report(out, info, ordered, done, metrics, store)
    return metrics


def ablation_summary(result: "AblationResult") -> str:
    """A terminal table per variant: its readings, and the deltas of the key metrics."""
    from ragdx.report.terminal import table
    key = ("success", "supported", "complete@retrieval", "complete@rerank", "complete@context",
           "wrong_abstention", "hallucination", "latency_ms total")
    parts = []
    for v in result.variants:
        rows = [(c.metric, f"{c.baseline:.3f}", f"{c.variant:.3f}", f"{c.delta:+.3f}",
                 f"{c.test.p:.3g}{' *' if c.significant else ''}", c.test.test)
                for c in v.comparisons if c.metric in key]
        parts.append(f"variant {v.variant.name} ({', '.join(v.variant.overrides)}); reused: "
                     f"{', '.join(v.reused) or 'nothing'}\n"
                     + "\n".join(f"  - {r}" for r in v.readings) + "\n\n"
                     + table(["metric", "baseline", "variant", "delta", "p", "test"], rows))
    r = result.routing
    rows = [(route.key, route.choice, route.options[route.choice].queries,
             f"{route.options[route.choice].success:.2f}", f"{route.options[route.choice].latency_ms:.0f}")
            for route in r.routes]
    parts.append(table(["route (first tag)", "choice", "queries", "success", "mean ms"], rows)
                 + f"\nrouted: success {r.routed.success:.2f}, {r.routed.latency_ms:.0f} ms mean; best single "
                   f"configuration {r.best_fixed}: success {r.fixed[r.best_fixed].success:.2f}, "
                   f"{r.fixed[r.best_fixed].latency_ms:.0f} ms (chosen on the same queries: confirm on held-out ones)")
    return "\n\n".join(parts)


@dataclass(frozen=True, slots=True)
class AblationResult:
    """An ablation's folder and results: the baseline, each variant against it, the routing."""

    folder: Path
    baseline: Executed
    baseline_metrics: Metrics
    variants: tuple[Any, ...]   # experiments.ablate.VariantResult
    routing: Any                # experiments.routing.RoutingTable
    seconds: float

    def to_dict(self) -> dict:
        return {"baseline": self.baseline_metrics.to_dict(),
                "variants": {v.variant.name: v.to_dict() | {"metrics": v.metrics.to_dict()} for v in self.variants},
                "routing": self.routing.to_dict()}


def ablate(store: SQLiteStore, settings: Settings, queries: Sequence[Query], variants: Sequence[str],
           out: Path, *, force: bool = False, queries_path: Path | None = None, progress: bool = True,
           latency_budget_ms: float | None = None, encoder: Any = None) -> AblationResult:
    """Run the baseline and each variant on the same queries and index version; compare them.

    ``out/baseline/`` and ``out/<variant>/`` are run folders; ``out/`` holds the manifest, the
    metrics with every comparison, and the report.

    Raises:
        ConfigError: a malformed, empty, duplicated or multi-stage variant (before anything runs).
        StoreError: the index changed while the ablation ran.
    """
    from ragdx.errors import ConfigError, StoreError
    from ragdx.experiments.ablate import (
        VariantResult, changed_outcomes, compare, first_failures, parse_variant, readings,
    )
    from ragdx.experiments.routing import routing_table
    if not variants:
        raise ConfigError("an ablation needs at least one --variant NAME:key=value")
    parsed = [parse_variant(v, settings, force=force) for v in variants]
    names = [v.name for v, _ in parsed]
    if len(set(names)) != len(names):
        raise ConfigError(f"variant names must differ: {', '.join(n for n in names if names.count(n) > 1)}")
    started = time.perf_counter()
    index_version = store.index_version
    base_pipeline = Pipeline(store, settings, encoder=encoder)
    base = execute(base_pipeline, queries, out / "baseline", base_pipeline.run, progress=progress,
                   label="baseline")
    base_metrics = layered(base.rows)
    info = manifest(store, base_pipeline, settings, queries_path)
    write_json(out / "baseline" / "manifest.json", info)
    write_json(out / "baseline" / "metrics.json", base_metrics.to_dict())
    write_report(out / "baseline", info, queries, base, base_metrics, store)
    traces = {t.query.id: t for t in base.traces}
    results = []
    for variant, vsettings in parsed:
        a, b = settings.retrieval.dense, vsettings.retrieval.dense
        same_encoder = b.enabled and (a.model, a.backend, a.batch_size, a.query_prefix, a.passage_prefix) == \
            (b.model, b.backend, b.batch_size, b.query_prefix, b.passage_prefix)
        pipeline = Pipeline(store, vsettings, encoder=base_pipeline.encoder if same_encoder else encoder,
                            context_counter=base_pipeline.assembler.counter
                            if vsettings.context.tokenizer == settings.context.tokenizer else None)
        done = execute(pipeline, queries, out / variant.name,
                       lambda q, p=pipeline, v=variant: p.resume(traces[q.id], v.start),
                       progress=progress, label=variant.name, evidence=base.evidence)
        metrics = layered(done.rows)
        vinfo = manifest(store, pipeline, vsettings, queries_path) | {"variant": list(variant.overrides)}
        write_json(out / variant.name / "manifest.json", vinfo)
        write_json(out / variant.name / "metrics.json", metrics.to_dict())
        write_report(out / variant.name, vinfo, queries, done, metrics, store)  # its own drill-down
        comparisons = compare(base.rows, done.rows, seed=settings.seed)
        reused = sorted({s.stage for t in done.traces for s in t.stages
                         if any(s is b for b in traces[t.query.id].stages)})
        failures = first_failures(done.rows)
        results.append(VariantResult(variant, tuple(comparisons), tuple(readings(
            variant, comparisons, first_failures(base.rows), failures, latency_budget_ms=latency_budget_ms)),
            metrics, tuple(reused), failures, changed_outcomes(base.rows, done.rows)))
    if store.index_version != index_version:
        raise StoreError(f"the index changed during the ablation (version {index_version} -> "
                         f"{store.index_version}); the runs are not comparable: run it again")
    routing = routing_table({"baseline": base.rows} | {r.variant.name: r.metrics.rows for r in results})
    result = AblationResult(out, base, base_metrics, tuple(results), routing, time.perf_counter() - started)
    write_json(out / "manifest.json", info | {"variants": {r.variant.name: list(r.variant.overrides)
                                                           for r in results},
                                              "latency_budget_ms": latency_budget_ms})
    write_json(out / "metrics.json", result.to_dict())
    write_report(out, info, queries, base, base_metrics, store, result)
    return result

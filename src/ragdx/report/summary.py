"""Terminal summaries of a run and of an ablation (what ``ragdx run``, ``diagnose`` and
``ablate`` print at the end)."""

from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

from ragdx.diagnosis.records import Diagnosis
from ragdx.evaluation.layered import Metrics, metric
from ragdx.report.terminal import table

__all__ = ["summary", "ablation_summary"]

_SUMMARY_METRICS = ("success", "supported", "answered", "faithfulness", "citation_support")


def summary(diagnoses: Sequence[Diagnosis], metrics: Metrics | None = None) -> str:
    """A terminal table: outcomes, where evidence was first lost, the evidence funnel and the key
    metrics, then one line per query."""
    outcomes = Counter(d.outcome for d in diagnoses)
    failures = Counter(d.first_failure for d in diagnoses if d.first_failure)
    rows = [(o, n) for o, n in outcomes.most_common()]
    out = table(["outcome", "queries"], rows)
    if failures:
        out += "\n\n" + table(["first failure", "queries"], failures.most_common())
    if metrics is not None:
        m = metrics.overall.metrics
        funnel = [(_funnel_label(name), f"{a.value:.0%}", f"{int(round(a.total))}/{a.n}")
                  for name, a in m.items() if metric(name).layer == "evidence" and a.n]
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


def ablation_summary(result: Any) -> str:
    """A terminal table per variant: its readings, and the deltas of the key metrics."""
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


def _funnel_label(name: str) -> str:
    d = metric(name)
    return f"{d.stage}:{d.channel}" if d.channel else str(d.stage)

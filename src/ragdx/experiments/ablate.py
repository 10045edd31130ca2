"""Single-variable ablations: named variants that each change one stage's settings, run on the
same query set against the same index version, compared with the baseline by paired tests.

A variant is ``NAME:key=value[,key=value]`` (docs/evaluation.md). Each key belongs to one stage
(``retrieval.*`` to retrieval, ``context.*`` to context, ...); a variant whose keys touch more
than one stage is refused unless forced, and ``chunking.*`` always is (it changes the index,
which an ablation holds fixed). Every stage before the first one a variant changes is reused
from the baseline's traces (:meth:`~ragdx.pipeline.Pipeline.resume`): a context-budget variant
never recomputes retrieval. A variant that turns the dense channel off keeps the baseline's
context token counter, so the budget means the same thing in both.

For each variant and metric: both values, the delta, and a paired test on the queries where both
apply — the exact McNemar test for pass/fail measures, the paired randomization test for graded
ones, latencies and amounts (:mod:`ragdx.evaluation.significance`), seeded with the settings'
``seed`` and recorded. :func:`readings` then says in words what the deltas mean.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ragdx.build import build_pipeline
from ragdx.config import Settings, parse_override, with_overrides
from ragdx.errors import ConfigError, StoreError
from ragdx.evaluation.layered import GRADED, LATENCY, PASS, Metrics, QueryValues, layered, metric, percentile
from ragdx.evaluation.significance import PairedTest, bootstrap_ci, mcnemar, randomization
from ragdx.experiments.routing import routing_table
from ragdx.executors import RemotePipelines
from ragdx.experiments.run import execute
from ragdx.pipeline import Pipeline, Trace
from ragdx.protocols import Store
from ragdx.runfolder import Executed, manifest, write_json, write_report
from ragdx.types import Query, StageKind

ALPHA = 0.05
_RESERVED = {"baseline", "manifest.json", "metrics.json", "report.html"}
MATERIAL = 0.10  # a latency change smaller than this share of the baseline's is not worth a reading
_SPLIT = re.compile(r",(?=\s*[A-Za-z_][\w.]*\s*=)")
# the stage each settings section belongs to
_SECTION_STAGE = {"rewrite": StageKind.REWRITE, "retrieval": StageKind.RETRIEVAL, "fusion": StageKind.FUSION, "rerank": StageKind.RERANK,
                  "governance": StageKind.GOVERNANCE, "context": StageKind.CONTEXT,
                  "generation": StageKind.GENERATION, "verify": StageKind.CITATION}


@dataclass(frozen=True, slots=True)
class Variant:
    """A named change of settings, and the stage it starts at."""

    name: str
    overrides: tuple[str, ...]
    stages: tuple[StageKind, ...]

    @property
    def start(self) -> StageKind:
        return min(self.stages, key=lambda s: s.order)


def parse_variant(text: str, baseline: Settings, *, force: bool = False) -> tuple[Variant, Settings]:
    """``NAME:key=value[,key=value]`` -> the variant and its settings.

    Raises:
        ConfigError: a malformed variant, an unknown key or bad value, a key the ablation holds
            fixed (``chunking.*``), or (unless ``force``) keys of more than one stage.
    """
    name, sep, rest = text.partition(":")
    name = name.strip()
    if not sep or not name or not rest.strip():
        raise ConfigError(f"variant {text!r}: expected NAME:key=value[,key=value]")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name) or name.lower() in _RESERVED:
        raise ConfigError(f"variant {text!r}: the name {name!r} must start with a letter or digit, hold only "
                          f"letters, digits, '_', '-' or '.', and not be one of {', '.join(sorted(_RESERVED))} "
                          "(it names the variant's folder in the ablation folder)")
    overrides = tuple(part.strip() for part in _SPLIT.split(rest))
    stages: dict[StageKind, list[str]] = {}
    for override in overrides:
        key, _ = parse_override(override)
        section = key.split(".")[0]
        if section == "chunking":
            raise ConfigError(f"variant {name!r}: {key} changes the chunks, and so the index, which an "
                              "ablation holds fixed; ingest into a second store and compare the two runs")
        if section not in _SECTION_STAGE:
            raise ConfigError(f"variant {name!r}: {key} is not a pipeline stage setting; valid sections: "
                              + ", ".join(sorted(_SECTION_STAGE)))
        stages.setdefault(_SECTION_STAGE[section], []).append(key)
    try:
        settings = with_overrides(baseline, overrides)
    except ConfigError as exc:
        raise ConfigError(f"variant {name!r}: {exc}") from None
    if settings == baseline:
        raise ConfigError(f"variant {name!r}: {', '.join(overrides)} leaves every setting as the baseline "
                          "has it; the variant would change nothing")
    if len(stages) > 1 and not force:
        which = "; ".join(f"{s.value} ({', '.join(keys)})" for s, keys in sorted(stages.items(),
                                                                                  key=lambda kv: kv[0].order))
        raise ConfigError(f"variant {name!r} changes more than one stage: {which}. An ablation changes one "
                          "variable at a time, so the difference can be pinned on it; split it into one "
                          "variant per stage, or pass --force to run it anyway")
    return Variant(name, overrides, tuple(sorted(stages, key=lambda s: s.order))), settings


@dataclass(frozen=True, slots=True)
class Comparison:
    """One metric, baseline against variant."""

    metric: str
    baseline: float
    variant: float
    delta: float
    test: PairedTest
    ci: tuple[float, float] | None = None  # bootstrap interval of the mean delta (graded measures)

    @property
    def significant(self) -> bool:
        return self.test.p < ALPHA

    def to_dict(self) -> dict:
        out = {"metric": self.metric, "baseline": self.baseline, "variant": self.variant, "delta": self.delta,
               "test": self.test.test, "p": self.test.p, "n": self.test.n, "significant": self.significant}
        if self.test.seed is not None:
            out |= {"seed": self.test.seed, "trials": self.test.trials}
        if self.test.detail:
            out["detail"] = self.test.detail
        if self.ci is not None:
            out["ci95"] = list(self.ci)
        return out


def compare(base: Sequence[QueryValues], variant: Sequence[QueryValues], *, seed: int = 0,
            trials: int = 10_000, intervals: bool = False) -> list[Comparison]:
    """Every metric both runs have, with a paired test over the queries where both values apply.

    The values shown are over those same queries: means, and for latencies medians (the test
    and the bootstrap interval are on the mean of the per-query differences). A bootstrap
    interval is given for graded measures and latencies, and with ``intervals`` for every metric
    (a pass/fail one's is of the difference in pass rates).
    """
    by_id = {r.id: r for r in variant}
    if set(by_id) != {r.id for r in base}:
        raise ConfigError("a paired comparison needs the same queries on both sides")
    names = [n for n in base[0].values if any(n in r.values for r in variant)] if base else []
    seen = set(names)
    for r in base:
        for n in r.values:
            if n not in seen and any(n in v.values for v in variant):
                names.append(n)
                seen.add(n)
    out = []
    for name in names:
        kind = metric(name).kind
        pairs = [(r.values[name], by_id[r.id].values[name]) for r in base
                 if r.values.get(name) is not None and by_id[r.id].values.get(name) is not None]
        a = [x for x, _ in pairs]
        b = [y for _, y in pairs]
        if kind == PASS:
            a, b = [float(x > 0.5) for x in a], [float(y > 0.5) for y in b]
            test = mcnemar([x > 0.5 for x in a], [y > 0.5 for y in b])
        else:
            test = randomization(a, b, seed=seed, trials=trials)
        ci = bootstrap_ci(a, b, seed=seed, trials=trials) if intervals or kind in (GRADED, LATENCY) else None
        # the values shown are over the same paired queries the test saw (medians for latencies)
        va, vb = (percentile(a, 50), percentile(b, 50)) if kind == LATENCY else \
            ((sum(a) / len(a), sum(b) / len(b)) if pairs else (0.0, 0.0))
        out.append(Comparison(name, va, vb, vb - va, test, ci))
    return out


@dataclass(frozen=True, slots=True)
class VariantResult:
    variant: Variant
    comparisons: tuple[Comparison, ...]
    readings: tuple[str, ...]
    metrics: Metrics
    reused: tuple[str, ...] = ()  # stage outputs taken from the baseline
    first_failure: Mapping[str, int] = field(default_factory=dict)
    changed: tuple[tuple[str, str, str], ...] = ()  # (query id, baseline outcome, variant outcome)

    def comparison(self, name: str) -> Comparison | None:
        return next((c for c in self.comparisons if c.metric == name), None)

    def to_dict(self) -> dict:
        return {"name": self.variant.name, "overrides": list(self.variant.overrides),
                "stages": [s.value for s in self.variant.stages], "reused": list(self.reused),
                "readings": list(self.readings), "first_failure": dict(self.first_failure),
                "changed": [{"id": q, "baseline": a, "variant": b} for q, a, b in self.changed],
                "comparisons": [c.to_dict() for c in self.comparisons]}


def _fmt(value: float, name: str) -> str:
    kind = metric(name).kind
    if kind == LATENCY:
        return f"{value:.1f} ms"
    if kind in (PASS, GRADED):
        return f"{value:.3f}"
    return f"{value:g}"


def _change(c: Comparison) -> str:
    return f"{c.metric} {_fmt(c.baseline, c.metric)} -> {_fmt(c.variant, c.metric)} (p = {c.test.p:.3g})"


def min_flips(alpha: float = ALPHA) -> int:
    """The fewest discordant queries, all one way, that the exact McNemar test can call significant."""
    m = 1
    while 2 * 0.5 ** m >= alpha:
        m += 1
    return m


def readings(variant: Variant, comparisons: Sequence[Comparison], base_failures: Mapping[str, int],
             variant_failures: Mapping[str, int], *, latency_budget_ms: float | None = None) -> list[str]:
    """What the deltas mean, in the words an engineer would use."""
    by = {c.metric: c for c in comparisons}
    out: list[str] = []
    success = by.get("success")
    latency = by.get("latency_ms total")
    evidence = [c for c in comparisons if metric(c.metric).layer == "evidence"
                and metric(c.metric).channel is None and c.delta != 0]

    def order(c: Comparison) -> int:
        return StageKind(metric(c.metric).stage).order

    gained = [c for c in evidence if c.delta > 0]
    lost = [c for c in evidence if c.delta < 0]
    answers_same = success is not None and success.test.n > 0 and success.delta == 0 and \
        "no query changed" in success.test.detail
    if lost:
        first = min(lost, key=order)
        out.append(f"The variant loses evidence: {_change(first)}; evidence first goes missing at "
                   f"{metric(first.metric).stage}.")
    if gained and answers_same:
        last = max(gained, key=order)
        out.append(f"Evidence coverage rose ({_change(last)}) but no answer changed: the bottleneck moved "
                   "downstream, to assembly or generation.")
    elif gained:
        last = max(gained, key=order)
        out.append(f"Evidence coverage rose: {_change(last)}.")
    over_budget = latency is not None and (
        (latency_budget_ms is not None and latency.variant > latency_budget_ms) or
        (latency_budget_ms is None and latency.delta > 0 and latency.significant and latency.variant > 1.5 * latency.baseline))
    if success is not None and success.delta > 0:
        if success.significant and over_budget:
            out.append(f"Answers improved ({_change(success)}), but latency rose ({_change(latency)}): route "
                       "this variant only to the query types it helps (see the routing table).")
        elif success.significant:
            out.append(f"Answers improved: {_change(success)}.")
        else:
            out.append(f"Answers improved ({_change(success)}), but not significantly: {success.test.detail}; "
                       f"at least {min_flips()} queries would have to flip, all one way, for the exact "
                       f"McNemar test to call it at alpha {ALPHA}.")
    elif success is not None and success.delta == 0 and not answers_same and success.test.n:
        out.append(f"Answers changed both ways with no net effect ({success.test.detail}): look at the queries "
                   "that changed outcome before choosing.")
    elif success is not None and success.delta < 0:
        out.append(f"Answers got worse: {_change(success)}" + (" — significant." if success.significant else
                                                             f"; not significant ({success.test.detail})."))
    moved = {s: variant_failures.get(s, 0) - base_failures.get(s, 0)
             for s in set(base_failures) | set(variant_failures)}
    fewer = [s for s, d in moved.items() if d < 0]
    more = [s for s, d in moved.items() if d > 0]
    if fewer and more:
        out.append("First failures moved from " + ", ".join(f"{s} ({-moved[s]})" for s in sorted(fewer))
                   + " to " + ", ".join(f"{s} (+{moved[s]})" for s in sorted(more)) + ".")
    elif more:
        out.append("New first failures at " + ", ".join(f"{s} (+{moved[s]})" for s in sorted(more)) + ".")
    elif fewer:
        out.append("Fewer first failures at " + ", ".join(f"{s} ({moved[s]})" for s in sorted(fewer)) + ".")
    risky = [by[n] for n in ("hallucination", "leak", "stale") if n in by and by[n].delta > 0]
    if risky:
        out.append("It also fails in ways abstaining would not: " + "; ".join(_change(c) for c in risky)
                   + " — answering more is not being more reliable.")
    # a latency change under MATERIAL of the baseline is no practical difference, however significant
    material = latency is not None and abs(latency.delta) >= MATERIAL * max(latency.baseline, 1e-9)
    if material and latency.delta < 0 and latency.significant:
        cheaper = f"It is faster: {_change(latency)}."
        if answers_same:
            cheaper += (" No answer changed, so on this query set the cheaper setting could replace the baseline;"
                        " confirm on more queries before relying on it.")
        out.append(cheaper)
    elif material and latency.delta > 0 and latency.significant and not over_budget:
        out.append(f"It is slower: {_change(latency)}.")
    if not out and answers_same:
        out.append("No evidence measure moved and no answer changed: on this query set the variant cannot be "
                   f"told apart from the baseline ({variant.name} changes {', '.join(variant.overrides)}).")
    elif not out:
        out.append("No difference is significant and no measure moved on average.")
    return out


def changed_outcomes(base: Sequence[QueryValues], variant: Sequence[QueryValues]) -> tuple[tuple[str, str, str], ...]:
    """The queries whose outcome differs, with both outcomes, in the baseline's order."""
    by_id = {r.id: r.outcome for r in variant}
    return tuple((r.id, r.outcome, by_id[r.id]) for r in base if by_id.get(r.id, r.outcome) != r.outcome)


def first_failures(rows: Sequence[QueryValues]) -> dict[str, int]:
    return dict(Counter(r.first_failure for r in rows if r.first_failure).most_common())


@dataclass(frozen=True, slots=True)
class AblationResult:
    """An ablation's folder and results: the baseline, each variant against it, the routing."""

    folder: Path
    baseline: Executed
    baseline_metrics: Metrics
    variants: tuple["VariantResult", ...]
    routing: Any                # experiments.routing.RoutingTable
    seconds: float

    def to_dict(self) -> dict:
        return {"baseline": self.baseline_metrics.to_dict(),
                "variants": {v.variant.name: v.to_dict() | {"metrics": v.metrics.to_dict()} for v in self.variants},
                "routing": self.routing.to_dict()}


def ablate_pipelines(baseline: Pipeline, variants: Sequence[tuple[Variant, Pipeline]], queries: Sequence[Query],
                     out: Path, *, queries_path: Path | None = None, progress: bool = True,
                     latency_budget_ms: float | None = None, seed: int = 0,
                     made: Mapping[str, Sequence[Trace]] | None = None,
                     made_at: int | None = None) -> AblationResult:
    """Run the baseline pipeline and each variant pipeline on the same queries and index version,
    and compare them. Each variant resumes the baseline's traces from its ``start`` stage kind.

    The pipelines may be ragdx's own or a user's (a stage replaced or added): a variant is any
    :class:`Variant` naming the stage kinds it changes, and the pipeline that has the change.

    ``out/baseline/`` and ``out/<variant>/`` are run folders; ``out/`` holds the manifest, the
    metrics with every comparison, and the report.

    ``made``: the traces already made elsewhere (:class:`ragdx.executors.RemotePipelines`), by
    ``"baseline"`` and variant name, in the queries' order, when the index version was
    ``made_at``; this process then diagnoses and writes them, and runs nothing.

    Raises:
        ConfigError: no variant, or two with one name (before anything runs).
        StoreError: the index changed while the ablation ran.
    """
    if not variants:
        raise ConfigError("an ablation needs at least one variant")
    names = [v.name for v, _ in variants]
    if len(set(names)) != len(names):
        raise ConfigError(f"variant names must differ: {', '.join(n for n in names if names.count(n) > 1)}")
    started = time.perf_counter()
    store = baseline.store
    index_version = store.index_version if made is None else made_at
    handed = {name: {t.query.id: t for t in traces} for name, traces in (made or {}).items()}

    def produce(name: str, local: Callable[[Query], Trace]) -> Callable[[Query], Trace]:
        return local if made is None else lambda q: handed[name][q.id]
    base = execute(baseline, queries, out / "baseline", produce("baseline", baseline.run), progress=progress,
                   label="baseline", index_version=made_at if made is not None else None)
    base_metrics = layered(base.rows)
    info = manifest(baseline, queries_path)
    write_json(out / "baseline" / "manifest.json", info)
    write_json(out / "baseline" / "metrics.json", base_metrics.to_dict())
    write_report(out / "baseline", info, queries, base, base_metrics, store)
    traces = {t.query.id: t for t in base.traces}
    results = []
    for variant, pipeline in variants:
        done = execute(pipeline, queries, out / variant.name,
                       produce(variant.name, lambda q, p=pipeline, v=variant: p.resume(traces[q.id], v.start)),
                       progress=progress, label=variant.name, evidence=base.evidence,
                       index_version=made_at if made is not None else None)
        metrics = layered(done.rows)
        vinfo = manifest(pipeline, queries_path) | {"variant": list(variant.overrides)}
        write_json(out / variant.name / "manifest.json", vinfo)
        write_json(out / variant.name / "metrics.json", metrics.to_dict())
        write_report(out / variant.name, vinfo, queries, done, metrics, store)  # its own drill-down
        comparisons = compare(base.rows, done.rows, seed=seed)
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


def ablate(store: Store, settings: Settings, queries: Sequence[Query], variants: Sequence[str],
           out: Path, *, force: bool = False, queries_path: Path | None = None, progress: bool = True,
           latency_budget_ms: float | None = None, encoder: Any = None,
           remote: RemotePipelines | None = None) -> AblationResult:
    """``ragdx ablate``: variants given as ``NAME:key=value[,key=value]`` settings changes of
    ragdx's own pipeline (:func:`ablate_pipelines` does the rest).

    With ``remote``, the baseline and then every variant at once run on its executor's workers;
    this process diagnoses and writes the results, the same as a local ablation's.

    Raises:
        ConfigError: a malformed, empty, duplicated or multi-stage variant (before anything runs).
        StoreError: the index changed while the ablation ran.
    """
    if not variants:
        raise ConfigError("an ablation needs at least one --variant NAME:key=value")
    parsed = [parse_variant(v, settings, force=force) for v in variants]
    names = [v.name for v, _ in parsed]
    if len(set(names)) != len(names):
        raise ConfigError(f"variant names must differ: {', '.join(n for n in names if names.count(n) > 1)}")
    baseline = build_pipeline(store, settings, encoder=encoder)
    pipelines = []
    for variant, vsettings in parsed:
        a, b = settings.retrieval.dense, vsettings.retrieval.dense
        same_encoder = b.enabled and (a.model, a.backend, a.batch_size, a.query_prefix, a.passage_prefix) == \
            (b.model, b.backend, b.batch_size, b.query_prefix, b.passage_prefix)
        counter = baseline.assembler.counter if baseline.assembler is not None and \
            vsettings.context.tokenizer == settings.context.tokenizer else None
        pipelines.append((variant, build_pipeline(store, vsettings, context_counter=counter,
                                                  encoder=baseline.encoder if same_encoder else encoder)))
    made, made_at, started = None, None, time.perf_counter()
    if remote is not None:
        made_at = store.index_version
        base = remote.run(settings, queries)
        made = dict(zip(["baseline", *names], [base, *remote.resume(
            [(vsettings, variant.start) for variant, vsettings in parsed], base)]))
    result = ablate_pipelines(baseline, pipelines, queries, out, queries_path=queries_path, progress=progress,
                              latency_budget_ms=latency_budget_ms, seed=settings.seed, made=made, made_at=made_at)
    return replace(result, seconds=time.perf_counter() - started)

"""Layered metrics: one value per query for each measure of each stage, then aggregated overall
and per tag (``metrics.json`` of a run folder).

What is measured (a :class:`Metric`: its name, layer, kind and direction) is kept apart from how
a query's value is computed (:func:`query_values`) and how values are aggregated
(:func:`aggregate`). The layers, in pipeline order:

- ``evidence``: ``complete@STAGE`` — 1 when every required group of an answerable query is
  present at that stage (source, parsing, each retrieval channel and their union, fusion,
  rerank, governance, context). A stage a pipeline does not have (no reranker, say) loses
  nothing: it carries the previous stage's value, so variants stay comparable.
- ``ranking``: ranking measures (``R@10``, ``nDCG@10``, ``RR``, ...; :mod:`.measures`) of each
  ranked stage's list, against the chunks that hold some part of a required span.
- ``answer``: ``success`` (supported, or a correct abstention), ``supported`` (answerable
  questions answered with support), ``answered`` (did not abstain), ``faithfulness`` (supported
  claims over all claims), ``citation_support`` (over claims that cite something, the share whose
  citations support them).
- ``abstention``: ``correct_abstention``, ``wrong_abstention``, ``hallucination``, ``leak`` and
  ``stale``, each counted separately, so answering more cannot pass for being more reliable.
- ``latency``: milliseconds per stage and in total, reported as p50 and p95.
- ``cost``: prompt, completion and context tokens, and money.

A value is ``None`` where a measure does not apply to a query (faithfulness without claims,
ranking without relevant chunks); every aggregate names its denominator ``n``. A query without a
trace still counts: it fails the funnel from retrieval on and every answer measure; the
per-channel and ranking measures, which name stages it never ran, cover the traced queries (their
``n`` says how many). No aggregate is ever NaN.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from ragdx.diagnosis.evidence import QueryEvidence
from ragdx.errors import ConfigError
from ragdx.diagnosis.locate import TraceView, touching
from ragdx.diagnosis.records import GOOD_OUTCOMES, Diagnosis, Outcome
from ragdx.evaluation.measures import Measure, evaluate, parse_measure
from ragdx.types import Query, StageKind

DEFAULT_MEASURES = ("R@10", "nDCG@10", "RR")
# the evidence funnel: every stage kind up to the context, in StageKind's (the one) order
FUNNEL_KINDS = tuple(k for k in StageKind if k.order <= StageKind.CONTEXT.order)
FUNNEL = tuple(k.value for k in FUNNEL_KINDS)  # as the metrics name them: complete@STAGE
ABSTENTION = tuple(o.value for o in (Outcome.CORRECT_ABSTENTION, Outcome.WRONG_ABSTENTION,
                                     Outcome.HALLUCINATION, Outcome.LEAK, Outcome.STALE))
PASS, GRADED, LATENCY, AMOUNT = "pass", "graded", "latency", "amount"


@dataclass(frozen=True, slots=True)
class Metric:
    """What is measured: a name, its layer, how its per-query values aggregate, and which way is
    better (+1 higher, -1 lower); for the per-stage metrics, the stage (and channel, or ranking
    measure) they measure, so nothing has to be read back out of the name."""

    name: str
    layer: str
    kind: str
    better: int
    description: str
    stage: str | None = None
    channel: str | None = None
    measure: str | None = None


@dataclass(frozen=True, slots=True)
class QueryValues:
    """One query's value for each metric (``None``: does not apply), and what the report needs."""

    id: str
    tags: tuple[str, ...]
    outcome: str
    first_failure: str | None
    values: Mapping[str, float | None]
    stages_run: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Aggregate:
    """A metric over a set of queries: the mean over the ``n`` queries it applies to, with the
    sum (pass counts, amounts) and, for latencies, the 50th and 95th percentiles."""

    value: float
    n: int
    total: float = 0.0
    p50: float | None = None
    p95: float | None = None

    def to_dict(self) -> dict:
        out: dict = {"value": self.value, "n": self.n, "total": self.total}
        if self.p50 is not None:
            out |= {"p50": self.p50, "p95": self.p95}
        return out


def completeness(stage: str, channel: str | None = None) -> Metric:
    """``complete@STAGE`` (or ``complete@retrieval:CHANNEL``): every required group present."""
    where = stage if channel is None else f"{stage}:{channel}"
    return _define(Metric(f"complete@{where}", "evidence", PASS, 1,
                          f"every required group present at {where}", stage=stage, channel=channel))


def ranking(measure: Measure, stage: str) -> Metric:
    """``MEASURE STAGE``: a ranking measure of one stage's list."""
    return _define(Metric(f"{measure} {stage}", "ranking", GRADED, 1, f"{measure} of the {stage} list",
                          stage=stage, measure=str(measure)))


def latency(stage: str) -> Metric:
    """``latency_ms STAGE`` (or ``latency_ms total``)."""
    return _define(Metric(f"latency_ms {stage}", "latency", LATENCY, -1, f"milliseconds spent in {stage}",
                          stage=stage))


_DEFINED: dict[str, Metric] = {}


def _define(m: Metric) -> Metric:
    return _DEFINED.setdefault(m.name, m)


def _catalogue(names: Iterable[str]) -> dict[str, Metric]:
    """The definitions of metric names a run produced."""
    return {name: metric(name) for name in names}


_ANSWER = {
    "success": (PASS, 1, "a supported answer, or a correct abstention"),
    "supported": (PASS, 1, "an answerable question answered with support"),
    "answered": (PASS, 0, "did not abstain (neither better nor worse by itself)"),
    "faithfulness": (GRADED, 1, "supported claims over all claims"),
    "citation_support": (GRADED, 1, "over claims citing something, the share their citations support"),
}
_COST = {"prompt_tokens": "tokens sent to the generator", "completion_tokens": "tokens generated",
         "context_tokens": "tokens in the assembled context", "cost": "money spent generating"}


for _stage in FUNNEL:  # the funnel's and the total latency are known before any run defines them
    completeness(_stage)
latency("total")
for _name in ABSTENTION:
    _define(Metric(_name, "abstention", PASS, 1 if _name == Outcome.CORRECT_ABSTENTION else -1,
                   f"outcome is {_name}"))
for _name, (_kind, _better, _text) in _ANSWER.items():
    _define(Metric(_name, "answer", _kind, _better, _text))
for _name, _text in _COST.items():
    _define(Metric(_name, "cost", AMOUNT, -1, _text))


def metric(name: str) -> Metric:
    """The definition of one metric name (one a run produced).

    Raises:
        KeyError: naming the metric, when no run defined it.
    """
    found = _DEFINED.get(name) or _from_name(name)
    if found is None:
        raise KeyError(f"no metric {name!r} has been defined")
    return found


def _from_name(name: str) -> Metric | None:
    """A stage's metric defined from its name alone (``complete@bm25``, ``nDCG@10 fusion``,
    ``latency_ms rerank``): a process that reads results another process computed (a durable
    run's drafts) knows them without running a query."""
    if name.startswith("complete@"):
        stage, _, channel = name.removeprefix("complete@").partition(":")
        return completeness(stage, channel or None)
    head, _, stage = name.partition(" ")
    if not stage:
        return None
    if head == "latency_ms":
        return latency(stage)
    try:
        return ranking(parse_measure(head), stage)
    except ConfigError:
        return None


def relevant_chunks(evidence: QueryEvidence, view: TraceView | None) -> set[str]:
    """The chunks that hold some part of a required span: those the store's coverage names, and
    items of the trace that touch an alternative (ids, spans or quotes)."""
    out: set[str] = set()
    for alt in evidence.alternatives:
        if alt.coverage is not None:
            out.update(alt.coverage.full + alt.coverage.partial)
        if alt.alternative.id is not None:
            out.add(alt.alternative.id)
    if view is not None:
        items = [i for s in view.stages if s.kind is not StageKind.CONTEXT for i in s.items]
        for alt in evidence.alternatives:
            out.update(i.id for i in touching(alt, items))
    return out


def query_values(query: Query, diagnosis: Diagnosis, view: TraceView | None, evidence: QueryEvidence,
                 measures: Sequence[Measure | str] = DEFAULT_MEASURES) -> QueryValues:
    """Every metric's value for one query.

    Args:
        query: the query, with its tags and required evidence.
        diagnosis: its diagnosis (outcome, groups present per stage, losses).
        view: its trace (``None`` when no trace exists: every pass/fail measure fails).
        evidence: its resolved evidence (the relevance labels of the ranking measures).
        measures: the ranking measures, as strings or :class:`Measure` values.
    """
    values: dict[str, float | None] = {}
    groups = {a.group for a in evidence.alternatives}
    stages_run: list[str] = []
    if query.answerable and groups:
        lost_at = {l.group: l.stage for l in diagnosis.lost}
        present = {g for g in groups if lost_at.get(g) is not StageKind.SOURCE}
        survived = set(present)
        for kind in FUNNEL_KINDS:
            stage = kind.value
            if kind is StageKind.PARSING:
                present -= {g for g, where in lost_at.items() if where is StageKind.PARSING}
                survived = set(present)
            elif kind is not StageKind.SOURCE:
                # the retrieval channels together are one presence, named after their kind
                seen = [s for s in diagnosis.stages
                        if (s.name == stage if kind is StageKind.RETRIEVAL else s.kind is kind)]
                if seen:
                    # after parsing the funnel only narrows: a span cut across chunks (lost at
                    # parsing) stays lost even where two adjacent chunks together cover it
                    present = set(seen[-1].groups_present) & survived
                    for channel, held in seen[-1].channels:
                        values[completeness(stage, channel).name] = float(groups <= set(held))
                elif kind is StageKind.REWRITE:
                    continue
                elif view is None:  # no trace: nothing was retrieved
                    present = set()
                else:  # a stage this pipeline does not have loses nothing
                    values[completeness(stage).name] = float(groups <= present)
                    continue
            stages_run.append(stage)
            values[completeness(stage).name] = float(groups <= present)
        channels = [s.name for s in view.stages if s.kind is StageKind.RETRIEVAL] if view else []
        if len(channels) == 1:  # one channel: its completeness is the retrieval stage's
            values[completeness("retrieval", channels[0]).name] = values[completeness("retrieval").name]
    if view is not None:
        relevant = relevant_chunks(evidence, view)
        parsed = [m if isinstance(m, Measure) else parse_measure(m) for m in measures]
        for stage in view.stages:
            if stage.kind in (StageKind.PARSING, StageKind.CONTEXT, StageKind.REWRITE):
                continue  # lists, not rankings: a system's chunks, the context, the original's search
            run = {stage.name: {i.id: -float(i.rank if i.rank is not None else n + 1)
                                for n, i in enumerate(stage.items)}}
            scores = evaluate(parsed, {stage.name: {c: 1 for c in relevant}}, run) if relevant else {}
            for m in parsed:
                values[ranking(m, stage.name).name] = scores[str(m)][stage.name] if relevant else None
    outcome = diagnosis.outcome
    values["success"] = float(outcome in GOOD_OUTCOMES)
    values["supported"] = float(outcome is Outcome.SUPPORTED) if query.answerable else None
    answer = view.answer if view is not None else None
    values["answered"] = float(answer is not None and not answer.abstained)
    claims = answer.claims if answer is not None and not answer.abstained else ()
    checked = [c for c in claims if c.supported is not None]
    values["faithfulness"] = sum(c.supported for c in checked) / len(checked) if checked else None
    cited = [c for c in checked if c.citations]
    values["citation_support"] = sum(c.supported for c in cited) / len(cited) if cited else None
    for name in ABSTENTION:
        values[name] = float(outcome == name)
    if view is not None:
        timed = [(s.name, s.seconds) for s in view.stages if s.seconds is not None]
        if answer is not None:
            timed += [(name, seconds) for name, seconds in (("generation", answer.seconds),
                                                            ("verification", answer.verify_seconds))
                      if seconds is not None]
        for name, seconds in timed:
            values[latency(name).name] = seconds * 1000
        if timed:  # a trace without timings has no latency, rather than a latency of 0
            values[latency("total").name] = sum(seconds for _, seconds in timed) * 1000
        context = next((s for s in reversed(view.stages) if s.kind is StageKind.CONTEXT), None)
        values["context_tokens"] = float(context.config.get("tokens", 0)) if context is not None else 0.0
        values["prompt_tokens"] = float(answer.prompt_tokens) if answer else 0.0
        values["completion_tokens"] = float(answer.completion_tokens) if answer else 0.0
        values["cost"] = float(answer.cost) if answer else 0.0
    return QueryValues(query.id, query.tags, outcome, diagnosis.first_failure, values, tuple(stages_run))


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile by linear interpolation between closest ranks (numpy's default)."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def aggregate(rows: Sequence[QueryValues], name: str) -> Aggregate:
    """One metric over the queries it applies to."""
    kind = metric(name).kind
    values = [v for v in (r.values.get(name) for r in rows) if v is not None]
    if not values:
        return Aggregate(0.0, 0)
    total = float(sum(values))
    if kind == LATENCY:
        return Aggregate(total / len(values), len(values), total, percentile(values, 50), percentile(values, 95))
    return Aggregate(total / len(values), len(values), total)


@dataclass(frozen=True, slots=True)
class Block:
    """The metrics of a set of queries (all, or one tag's)."""

    queries: int
    metrics: dict[str, Aggregate]
    outcomes: dict[str, int]
    first_failure: dict[str, int]

    def to_dict(self) -> dict:
        return {"queries": self.queries, "outcomes": self.outcomes, "first_failure": self.first_failure,
                "metrics": {n: a.to_dict() for n, a in self.metrics.items()}}


def _names(rows: Sequence[QueryValues]) -> list[str]:
    seen: dict[str, None] = {}
    for r in rows:
        for n in r.values:
            seen.setdefault(n, None)
    order = {"evidence": 0, "ranking": 1, "answer": 2, "abstention": 3, "latency": 4, "cost": 5}
    catalogue = _catalogue(seen)
    return sorted(seen, key=lambda n: (order[catalogue[n].layer], list(seen).index(n)))


def block(rows: Sequence[QueryValues]) -> Block:
    return Block(len(rows), {n: aggregate(rows, n) for n in _names(rows)},
                 dict(Counter(r.outcome for r in rows).most_common()),
                 dict(Counter(r.first_failure for r in rows if r.first_failure).most_common()))


def by_tag(rows: Sequence[QueryValues]) -> dict[str, list[QueryValues]]:
    """Queries per tag (a query with several tags is in each); untagged ones under ``(untagged)``."""
    out: dict[str, list[QueryValues]] = {}
    for r in rows:
        for tag in r.tags or ("(untagged)",):
            out.setdefault(tag, []).append(r)
    return dict(sorted(out.items()))


@dataclass(frozen=True, slots=True)
class Metrics:
    """A run's layered metrics, overall and per tag, with every query's values kept."""

    overall: Block
    tags: dict[str, Block]
    rows: tuple[QueryValues, ...] = field(default=())

    def to_dict(self) -> dict:
        names = list(self.overall.metrics)
        catalogue = _catalogue(names)
        return {"format": "ragdx.metrics/1", "overall": self.overall.to_dict(),
                "by_tag": {t: b.to_dict() for t, b in self.tags.items()},
                "definitions": {n: {"layer": m.layer, "kind": m.kind, "better": m.better,
                                    "description": m.description} for n, m in catalogue.items()},
                "per_query": {r.id: {n: v for n, v in r.values.items()} for r in self.rows}}


def layered(rows: Sequence[QueryValues]) -> Metrics:
    """Aggregate per-query values overall and per tag."""
    return Metrics(block(rows), {t: block(rs) for t, rs in by_tag(rows).items()}, tuple(rows))

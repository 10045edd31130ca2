"""Comparing two run folders (``ragdx compare BASE NEW``): a regression gate for any RAG system.

The two folders may be ragdx's own runs (``ragdx run``) or diagnoses of imported traces
(``ragdx diagnose``) of a Haystack, LangChain or LlamaIndex system: both hold ``metrics.json``
(each question's value of every layered metric), ``diagnosis.jsonl`` (its outcome and first
failure) and the questions they ran (``queries.jsonl``, or the query set the manifest names).

1. **What differs between the runs** (:func:`fingerprint_changes`): the settings key by key, the
   code, the index version, the corpus and the query set, as their manifests record them.
2. **Pairing.** Questions are paired by id. A question on one side only is listed; a question
   whose labels changed (its text, principal, answerability or required evidence) is refused,
   since its two values no longer measure the same thing, unless ``allow_label_change``.
3. **Paired tests**, overall and per tag, over the paired questions where a metric applies to
   both (:func:`ragdx.experiments.ablate.compare`): the exact McNemar test for pass/fail
   metrics (each stage's evidence completeness, success, each outcome), the paired
   randomization test for graded ones, latencies and amounts; a seeded percentile bootstrap
   interval of the mean difference for every metric.
4. **Where questions moved**: each question whose first failure changed ("q-17: context ->
   fusion"), and readings in words ("NEW loses evidence at fusion on 3 questions (p = 0.03)").
5. **The gate** (:class:`Rule`): ``success:-0.02`` fails when success drops by more than 0.02,
   ``hallucination:+0`` when it rises at all; with ``p<0.05`` a rule fails only when the change
   is also significant at that level.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from ragdx.diagnosis.records import Outcome
from ragdx.errors import ConfigError, InputError
from ragdx.evaluation.layered import FUNNEL, Metrics, QueryValues, layered, metric
from ragdx.experiments.ablate import ALPHA, Comparison, compare as paired
from ragdx.queryset import load_queries
from ragdx.types import Query, StageKind

__all__ = ["RunData", "Rule", "RuleResult", "Moved", "Comparison", "CompareResult", "load_run", "parse_rule", "parse_rules",
           "load_gate", "compare_runs", "fingerprint_changes", "label_key"]

QUERIES_FILE = "queries.jsonl"
_RULE = re.compile(r"^\s*(?P<metric>[^:<>=\s][^:]*?)\s*:\s*(?P<sign>[+-])\s*(?P<amount>\d+(?:\.\d+)?)\s*$")
_P_RULE = re.compile(r"^\s*p\s*<\s*(?P<alpha>0?\.\d+|1(?:\.0*)?)\s*$")


@dataclass(frozen=True, slots=True)
class RunData:
    """One run folder as ``compare`` reads it."""

    folder: Path
    manifest: Mapping[str, Any]
    queries: Mapping[str, Query]        # by id: the questions the run covers, with their labels
    rows: tuple[QueryValues, ...]       # each question's metric values, outcome and first failure

    @property
    def name(self) -> str:
        return self.folder.name or str(self.folder)


def label_key(query: Query) -> str:
    """What a question's labels are, as one string: two runs measured the same thing only when
    it is equal (the text, the principal, answerability and the required evidence; tags and the
    reference answer are not labels of the evidence)."""
    def groups(gs: Sequence[Sequence[Any]]) -> list:
        return [[[a.doc, a.quote, a.start, a.end, a.id, a.version] for a in g] for g in gs]
    return json.dumps([query.question, query.principal.user, sorted(query.principal.groups), query.answerable,
                       groups(query.required), groups(query.restricted_required)], ensure_ascii=False)


def _read_json(path: Path) -> Any:
    if not path.is_file():
        raise InputError(f"no {path.name} here: not a ragdx run folder (ragdx run or ragdx diagnose writes it)",
                         file=str(path))
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:  # not JSON, not UTF-8, or a number past Python's 4,300 digits
        raise InputError(f"not valid JSON ({exc})", file=str(path)) from None
    except RecursionError:
        raise InputError("its JSON is nested too deeply to be a run's file", file=str(path)) from None


def _manifest(path: Path) -> dict[str, Any]:
    """A run's manifest: an object with its ``fingerprint`` object (and ``settings``, when it has
    them, an object), what :func:`fingerprint_changes` compares."""
    info = _read_json(path)
    if not isinstance(info, dict):
        raise InputError(f"a run's manifest is a JSON object, not {type(info).__name__}", file=str(path))
    for key, needed in (("fingerprint", True), ("settings", False)):
        if (needed or key in info) and not isinstance(info.get(key), dict):
            raise InputError(f"'{key}' must be an object (ragdx run and ragdx diagnose write it), not "
                             f"{type(info.get(key)).__name__}", file=str(path), field=key)
    return info


_OUTCOMES = frozenset(o.value for o in Outcome)
_STAGES = tuple(k.value for k in StageKind)


def _diagnoses(path: Path) -> Iterator[tuple[int, dict]]:
    if not path.is_file():
        raise InputError("no diagnosis.jsonl here: not a ragdx run folder", file=str(path))
    with open(path, encoding="utf-8", errors="strict") as fh:
        try:
            for n, line in enumerate(fh, start=1):
                if line.strip():
                    try:
                        obj = json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise InputError(f"not valid JSON ({exc.msg})", file=str(path), line=n) from None
                    except (ValueError, RecursionError) as exc:  # a 5,000-digit number, 100,000 brackets
                        raise InputError(f"not a line ragdx wrote ({type(exc).__name__}: {str(exc)[:100]})",
                                         file=str(path), line=n) from None
                    if not isinstance(obj, dict) or not isinstance(obj.get("id"), str):
                        raise InputError("expected an object with a string 'id'", file=str(path), line=n)
                    yield n, obj
        except UnicodeDecodeError as exc:
            raise InputError(f"not UTF-8 ({exc.reason})", file=str(path)) from None


def _queries_of(folder: Path, info: Mapping[str, Any], given: Path | None) -> dict[str, Query]:
    """The run's questions: its own ``queries.jsonl``, else ``given``, else the query set its
    manifest names when that file is unchanged (its sha256 matches)."""
    own = folder / QUERIES_FILE
    if own.is_file():
        return {q.id: q for q in load_queries(own)}
    if given is not None:
        return {q.id: q for q in load_queries(given)}
    named = info.get("queries") if isinstance(info, Mapping) else None
    if isinstance(named, Mapping) and isinstance(named.get("path"), str):
        path = Path(named["path"])
        if path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == named.get("sha256"):
            return {q.id: q for q in load_queries(path)}
        raise InputError(f"the run has no {QUERIES_FILE} and its query set {path} is missing or changed since "
                         "the run; pass the query set it ran with (--queries)", file=str(folder / "manifest.json"))
    raise InputError(f"the run has no {QUERIES_FILE} and its manifest names no query set; pass the query set "
                     "it ran with (--queries)", file=str(folder / "manifest.json"))


def load_run(folder: Path, queries: Path | None = None) -> RunData:
    """Read a run folder.

    Raises:
        InputError: a missing or malformed file, naming it (and the line).
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError("no run folder here", file=str(folder))
    info = _manifest(folder / "manifest.json")
    metrics_path = folder / "metrics.json"
    per_query = _read_json(metrics_path)
    if not isinstance(per_query, dict) or not isinstance(per_query.get("per_query"), dict):
        raise InputError("no 'per_query' object: written by an older ragdx, or not a run's metrics",
                         file=str(metrics_path), field="per_query")
    values = per_query["per_query"]
    asked = _queries_of(folder, info, queries)
    rows = []
    for line, d in _diagnoses(folder / "diagnosis.jsonl"):
        qid = d["id"]
        if qid not in asked:
            raise InputError(f"question {qid!r} is not in the run's query set", file=str(folder / "diagnosis.jsonl"),
                             line=line, field="id")
        own = values.get(qid)
        if not isinstance(own, dict) or not all(v is None or isinstance(v, (int, float)) and not isinstance(v, bool)
                                                and math.isfinite(v) for v in own.values()):
            raise InputError(f"question {qid!r} has no values, or a value that is not a finite number",
                             file=str(metrics_path), field=f"per_query.{qid}")
        outcome, first = d.get("outcome"), d.get("first_failure")
        if outcome not in _OUTCOMES or not (first is None or first in _STAGES):
            raise InputError(f"'outcome' must be one of {', '.join(sorted(_OUTCOMES))} and 'first_failure' a stage "
                             f"({', '.join(_STAGES)}) or null, not {outcome!r} and {first!r}",
                             file=str(folder / "diagnosis.jsonl"), line=line)
        rows.append(QueryValues(qid, asked[qid].tags, outcome, first, dict(own)))
    if not rows:
        raise InputError("the run diagnosed no question", file=str(folder / "diagnosis.jsonl"))
    return RunData(folder, info, asked, tuple(rows))


# ---- what differs between the two runs ----

def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out |= _flat(v, f"{prefix}{k}.")
        return out
    return {prefix[:-1]: value}


def fingerprint_changes(base: Mapping[str, Any], new: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """What differs between two manifests: each setting that changed (``settings.KEY``), then the
    fingerprint's code, index version, corpus and query-set digests, the ragdx version and, for
    imported runs, the system."""
    out = []
    a, b = _flat(base.get("settings") or {}), _flat(new.get("settings") or {})
    for key in sorted(set(a) | set(b)):
        if a.get(key) != b.get(key):
            out.append((f"settings.{key}", a.get(key), b.get(key)))
    fa, fb = base.get("fingerprint") or {}, new.get("fingerprint") or {}
    for key in ("code", "index_version", "corpus", "queries", "traces"):
        if fa.get(key) != fb.get(key):
            out.append((f"fingerprint.{key}", fa.get(key), fb.get(key)))
    for key in ("ragdx_version", "system"):
        if base.get(key) != new.get(key):
            out.append((key, base.get(key), new.get(key)))
    return out


# ---- the gate ----

@dataclass(frozen=True, slots=True)
class Rule:
    """``METRIC:-X`` (fails when the metric drops by more than X) or ``METRIC:+X`` (when it rises
    by more than X); ``alpha``: fails only when the paired test's p is below it too."""

    metric: str
    sign: str          # "-" or "+"
    amount: float
    alpha: float | None = None
    text: str = ""

    def fails(self, c: Comparison) -> bool:
        moved = -c.delta if self.sign == "-" else c.delta
        tolerance = 1e-12 * max(1.0, abs(self.amount))
        return moved > self.amount + tolerance and (self.alpha is None or c.test.p < self.alpha)


@dataclass(frozen=True, slots=True)
class RuleResult:
    """A rule, the comparison it judged, and whether it failed."""

    rule: Rule
    comparison: Comparison
    failed: bool

    def describe(self) -> str:
        c = self.comparison
        what = (f"{self.rule.text}: {c.metric} {c.baseline:.4g} -> {c.variant:.4g} (delta {c.delta:+.4g}, "
                f"p = {c.test.p:.3g}, n = {c.test.n})")
        return ("FAILED " if self.failed else "passed ") + what


def parse_rule(text: str, alpha: float | None = None) -> Rule:
    """One ``--fail-on`` rule (``p<ALPHA`` is given apart, see :func:`parse_rules`).

    Raises:
        ConfigError: naming the rule and the forms it may take.
    """
    m = _RULE.match(text)
    if m is None:
        raise ConfigError(f"gate rule {text!r}: expected METRIC:-X (fail when it drops by more than X) or "
                          "METRIC:+X (fail when it rises by more than X), e.g. success:-0.02, "
                          "complete@context:-0.03, hallucination:+0, or p<0.05")
    return Rule(m["metric"], m["sign"], float(m["amount"]), alpha, text.strip())


def parse_rules(texts: Sequence[str]) -> list[Rule]:
    """The rules, with ``p<ALPHA`` applied to every one of them."""
    alphas = [float(m["alpha"]) for t in texts if (m := _P_RULE.match(t))]
    if len(alphas) > 1:
        raise ConfigError("gate: give p<ALPHA once")
    alpha = alphas[0] if alphas else None
    if alpha is not None and not 0 < alpha <= 1:
        raise ConfigError(f"gate: p<{alpha} must be above 0 and at most 1")
    rules = [parse_rule(t, alpha) for t in texts if not _P_RULE.match(t)]
    if alphas and not rules:
        raise ConfigError("gate: p<ALPHA qualifies the metric rules, and none was given")
    return rules


def load_gate(path: Path) -> list[str]:
    """The rules of a gate file: TOML with ``fail_on = ["success:-0.02", "p<0.05", ...]``."""
    import tomllib
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError("no gate file here", file=str(path)) from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"not valid TOML ({exc})", file=str(path)) from None
    unknown = sorted(set(data) - {"fail_on"})
    if unknown:
        raise InputError(f"unknown key {unknown[0]!r}; a gate file holds fail_on = [...]", file=str(path),
                         field=unknown[0])
    rules = data.get("fail_on", [])
    if not isinstance(rules, list) or not all(isinstance(r, str) for r in rules):
        raise InputError("fail_on must be a list of strings", file=str(path), field="fail_on")
    return rules


# ---- the comparison ----

@dataclass(frozen=True, slots=True)
class Moved:
    """A question whose first failure (or outcome) changed."""

    id: str
    base_failure: str | None
    new_failure: str | None
    base_outcome: str
    new_outcome: str

    @property
    def regressed(self) -> bool:
        """Worse on NEW: it failed earlier in the pipeline, or failed where it did not."""
        order = {s.value: s.order for s in StageKind}
        if self.new_failure is None:
            return False
        if self.base_failure is None:
            return True
        return order.get(self.new_failure, 99) < order.get(self.base_failure, 99)

    def describe(self) -> str:
        def where(stage: str | None, outcome: str) -> str:
            return stage if stage is not None else f"none ({outcome})"
        return f"{self.id}: {where(self.base_failure, self.base_outcome)} -> {where(self.new_failure, self.new_outcome)}"


@dataclass(frozen=True, slots=True)
class CompareResult:
    """Everything ``ragdx compare`` reports."""

    base: RunData
    new: RunData
    changes: tuple[tuple[str, Any, Any], ...]
    paired: tuple[str, ...]
    only_base: tuple[str, ...]
    only_new: tuple[str, ...]
    label_changed: tuple[str, ...]
    overall: tuple[Comparison, ...]
    by_tag: Mapping[str, tuple[Comparison, ...]]
    moved: tuple[Moved, ...]
    readings: tuple[str, ...]
    rules: tuple[RuleResult, ...] = ()
    base_metrics: Metrics | None = field(default=None, compare=False)
    new_metrics: Metrics | None = field(default=None, compare=False)

    @property
    def failed(self) -> tuple[RuleResult, ...]:
        return tuple(r for r in self.rules if r.failed)

    @property
    def identical(self) -> bool:
        return not self.moved and all(c.delta == 0 for c in self.overall) and not self.only_base \
            and not self.only_new

    def comparison(self, name: str) -> Comparison | None:
        return next((c for c in self.overall if c.metric == name), None)

    def to_dict(self) -> dict:
        return {"format": "ragdx.compare/1", "base": str(self.base.folder), "new": str(self.new.folder),
                "changes": [{"what": k, "base": a, "new": b} for k, a, b in self.changes],
                "paired": len(self.paired), "only_base": list(self.only_base), "only_new": list(self.only_new),
                "label_changed": list(self.label_changed),
                "overall": [c.to_dict() for c in self.overall],
                "by_tag": {t: [c.to_dict() for c in cs] for t, cs in self.by_tag.items()},
                "moved": [{"id": m.id, "base": m.base_failure, "new": m.new_failure, "base_outcome": m.base_outcome,
                           "new_outcome": m.new_outcome, "regressed": m.regressed} for m in self.moved],
                "readings": list(self.readings),
                "rules": [{"rule": r.rule.text, "metric": r.comparison.metric, "delta": r.comparison.delta,
                           "p": r.comparison.test.p, "failed": r.failed} for r in self.rules],
                "failed": bool(self.failed)}


def _readings(overall: Sequence[Comparison], moved: Sequence[Moved], identical: bool) -> list[str]:
    """In words: where NEW loses or gains evidence, what happened to the answers, where first
    failures moved."""
    if identical:
        return ["No difference: every paired question has the same values, outcome and first failure."]
    by = {c.metric: c for c in overall}
    out = []
    stages = [s for s in FUNNEL if f"complete@{s}" in by]
    changed_stage = False
    for stage in stages:
        c = by[f"complete@{stage}"]
        gained, lost = _flips(c)
        if lost or gained:
            changed_stage = True
            if lost and not gained:
                out.append(f"NEW loses evidence at {stage} on {lost} question{'s' * (lost != 1)} "
                           f"(complete@{stage} {c.baseline:.3f} -> {c.variant:.3f}, p = {c.test.p:.3g}).")
            elif gained and not lost:
                out.append(f"NEW keeps evidence at {stage} on {gained} more question{'s' * (gained != 1)} "
                           f"(complete@{stage} {c.baseline:.3f} -> {c.variant:.3f}, p = {c.test.p:.3g}).")
            else:
                out.append(f"At {stage}, NEW gains evidence on {gained} and loses it on {lost} questions "
                           f"(p = {c.test.p:.3g}).")
    if stages and not changed_stage:
        out.append("Evidence completeness is unchanged at every stage.")
    success = by.get("success")
    if success is not None:
        gained, lost = _flips(success)
        if not gained and not lost:
            out.append("Answers are unchanged (success " + f"{success.baseline:.3f}).")
        else:
            way = "worse" if success.delta < 0 else "better" if success.delta > 0 else "different, with no net change"
            out.append(f"Answers are {way}: success {success.baseline:.3f} -> {success.variant:.3f} "
                       f"({gained} gained, {lost} lost, p = {success.test.p:.3g}"
                       + (", significant)." if success.test.p < ALPHA else ", not significant)."))
    for name in ("hallucination", "leak", "stale"):
        c = by.get(name)
        if c is not None and c.delta > 0:
            out.append(f"More {name}s: {c.baseline:.3f} -> {c.variant:.3f} (p = {c.test.p:.3g}).")
    worse = [m for m in moved if m.regressed]
    if worse:
        where = Counter(m.new_failure for m in worse)
        out.append("First failures moved earlier or appeared on " + ", ".join(
            f"{n} question{'s' * (n != 1)} now failing at {s}" for s, n in where.most_common()) + ".")
    return out


def _flips(c: Comparison) -> tuple[int, int]:
    """(questions gained, questions lost) of a pass/fail comparison (its McNemar test's counts)."""
    return c.test.gained or 0, c.test.lost or 0


def compare_runs(base: RunData, new: RunData, *, rules: Sequence[Rule] = (), allow_label_change: bool = False,
                 seed: int = 0, trials: int = 10_000) -> CompareResult:
    """Compare two runs question by question.

    Raises:
        InputError: no question in common, or questions whose labels changed (unless
            ``allow_label_change``), naming them.
        ConfigError: a rule names a metric neither run has.
    """
    base_ids = [r.id for r in base.rows]
    new_ids = {r.id for r in new.rows}
    changed = tuple(q for q in base_ids if q in new_ids and label_key(base.queries[q]) != label_key(new.queries[q]))
    if changed and not allow_label_change:
        raise InputError(f"{len(changed)} question{'s' * (len(changed) != 1)} changed labels between the runs "
                         f"({', '.join(changed[:5])}{', ...' if len(changed) > 5 else ''}): their values measure "
                         "different things; fix the query set, or pass --allow-label-change to pair them anyway",
                         file=str(new.folder))
    paired_ids = tuple(q for q in base_ids if q in new_ids)
    if not paired_ids:
        raise InputError("the two runs have no question id in common: nothing to pair", file=str(new.folder))
    only_base = tuple(q for q in base_ids if q not in new_ids)
    only_new = tuple(r.id for r in new.rows if r.id not in set(base_ids))
    keep = set(paired_ids)
    a = [r for r in base.rows if r.id in keep]
    b_by = {r.id: r for r in new.rows if r.id in keep}
    b = [b_by[r.id] for r in a]
    overall = tuple(paired(a, b, seed=seed, trials=trials, intervals=True))
    tags: dict[str, list[str]] = {}
    for r in a:
        for tag in r.tags or ("(untagged)",):
            tags.setdefault(tag, []).append(r.id)
    by_tag = {}
    for tag, ids in sorted(tags.items()):
        held = set(ids)
        ta = [r for r in a if r.id in held]
        tb = [b_by[r.id] for r in ta]
        wanted = [c for c in paired(ta, tb, seed=seed, trials=trials)
                  if c.metric == "success" or c.metric.startswith("complete@") and metric(c.metric).channel is None]
        by_tag[tag] = tuple(wanted)
    moved = tuple(Moved(r.id, r.first_failure, b_by[r.id].first_failure, r.outcome, b_by[r.id].outcome)
                  for r in a if (r.first_failure, r.outcome) != (b_by[r.id].first_failure, b_by[r.id].outcome))
    by_metric = {c.metric: c for c in overall}
    checked = []
    for rule in rules:
        if rule.metric not in by_metric:
            raise ConfigError(f"gate rule {rule.text!r}: the runs have no metric {rule.metric!r} in common; "
                              f"these can be gated: {', '.join(by_metric)}")
        checked.append(RuleResult(rule, by_metric[rule.metric], rule.fails(by_metric[rule.metric])))
    result = CompareResult(base, new, tuple(fingerprint_changes(base.manifest, new.manifest)), paired_ids,
                           only_base, only_new, changed, overall, by_tag, moved, (), tuple(checked),
                           layered(a), layered(b))
    return replace(result, readings=tuple(_readings(overall, moved, result.identical)))

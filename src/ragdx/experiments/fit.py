"""Fitting fusion weights and reranker weights on a validation query set.

Relevance comes from the query set's required evidence: a candidate is relevant when its span
overlaps a required span. Fit on a validation set, evaluate on another: weights fitted on the
queries they are judged by overstate their worth.
"""

from __future__ import annotations

import copy
import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ragdx.diagnosis.evidence import EvidenceResolver, QueryEvidence, groups_present, relevant_items
from ragdx.diagnosis.ours import diagnoser_for, view_of
from ragdx.diagnosis.records import GOOD_OUTCOMES, Outcome
from ragdx.errors import ConfigError, InputError
from ragdx.pipeline import Pipeline
from ragdx.stages.fuse import ChannelCalibration, WeightedFusion
from ragdx.stages.reader import newton_logistic
from ragdx.stages.rerank import FEATURES, FeatureReranker, SentenceSimilarity, features, sentence_ranks
from ragdx.types import Query, Ranked, StageKind


@dataclass(frozen=True, slots=True)
class ValidationRun:
    """Each answerable query's channel lists and resolved evidence."""

    queries: tuple[Query, ...]
    lists: tuple[tuple[Ranked, ...], ...]
    evidence: tuple[QueryEvidence, ...]


def collect(pipeline: Pipeline, queries: Sequence[Query]) -> ValidationRun:
    """Run the channels on every answerable query with required evidence."""
    resolver = EvidenceResolver(pipeline.store)
    usable = [q for q in queries if q.answerable and q.required]
    if not usable:
        raise InputError("the validation set has no answerable query with required evidence")
    return ValidationRun(tuple(usable), tuple(tuple(pipeline.retrieve(q)) for q in usable),
                         tuple(resolver.run(q) for q in usable))


def group_recall(ranked: Ranked, evidence: QueryEvidence, k: int) -> float:
    """Share of required groups held whole by the top ``k`` items."""
    spans = {c.chunk_id: c.span for c in ranked.items[:k]}
    total = len({a.group for a in evidence.alternatives})
    return len(groups_present(evidence, spans)) / total if total else 0.0


def fit_fusion(run: ValidationRun, *, k: int = 50, step: float = 0.05, fitted_on: str = "") -> WeightedFusion:
    """Z-score each channel with its validation mean and standard deviation, then choose the
    weights (a grid over the simplex, ``step`` apart) that maximise mean group recall@k; ties
    go to the weights closest to equal. When every weighting scores the same recall, the set
    cannot tell the weights apart (the note says so): the equal weights are kept, as a tie."""
    names = [r.stage for r in run.lists[0]]
    calibration = {}
    for i, name in enumerate(names):
        scores = np.array([c.score for lists in run.lists for c in lists[i].items], dtype=float)
        mean = float(scores.mean()) if len(scores) else 0.0
        std = float(scores.std()) if len(scores) else 1.0
        low = float(((scores - mean) / std).min()) if len(scores) and std > 0 else 0.0
        calibration[name] = (mean, std or 1.0, low)
    steps = int(round(1 / step))
    best, best_key, recalls = None, None, set()
    for combo in itertools.product(range(steps + 1), repeat=len(names)):
        if sum(combo) != steps:
            continue
        weights = [c / steps for c in combo]
        fusion = WeightedFusion({n: ChannelCalibration(w, *calibration[n]) for n, w in zip(names, weights)},
                                top_k=k)
        recall = float(np.mean([group_recall(fusion.run(lists), ev, k)
                                for lists, ev in zip(run.lists, run.evidence)]))
        recalls.add(recall)
        key = (recall, -float(np.ptp(weights)) if len(weights) > 1 else 0.0)
        if best_key is None or key > best_key:
            best, best_key = fusion, key
    assert best is not None
    note = f"{fitted_on}; {len(run.queries)} queries; mean group recall@{k} {best_key[0]:.4f}"
    if len(recalls) == 1 and len(names) > 1:
        note += (f" for every weighting: this set cannot tell the weights apart (equal weights kept); "
                 f"fit on more questions, or on ones whose evidence ranks below {k} in some channel")
    return WeightedFusion(best.channels, k, note)


def reranker_rows(pipeline: Pipeline, run: ValidationRun, *, depth: int = 75) -> tuple[np.ndarray, np.ndarray]:
    """The reranker's training data: a row of :data:`FEATURES` per fused candidate of each
    validation query, and its label (1 when it holds part of a required span). The sentence
    features are scored for the ``depth`` best fused candidates with the pipeline's encoder (0
    without one)."""
    rows, labels = [], []
    similarity = SentenceSimilarity(pipeline.encoder, pipeline.store) if pipeline.encoder is not None else None
    for query, lists, evidence in zip(run.queries, run.lists, run.evidence):
        fused = pipeline.fusion.run(lists)
        relevant = relevant_items(evidence, {c.chunk_id: c.span for c in fused.items})
        chunks = pipeline.store.chunks_by_id([c.chunk_id for c in fused.items])
        found = (sentence_ranks(similarity, query.question, fused.items, chunks, depth) if similarity
                 else [None] * len(fused.items))
        for c, sentence in zip(fused.items, found):
            values = features(query.question, chunks[c.chunk_id], c.rank, c.history, sentence)
            rows.append([values[f] for f in FEATURES])
            labels.append(1.0 if c.chunk_id in relevant else 0.0)
    return np.array(rows).reshape(len(rows), len(FEATURES)), np.array(labels)


def fit_reranker(pipeline: Pipeline, run: ValidationRun, *, l2: float = 1.0, iterations: int = 50,
                 fitted_on: str = "", top_n: int = 20, depth: int = 75) -> FeatureReranker:
    """Logistic regression of relevance on the reranker's features, over each query's fused
    candidates, by Newton's method (iteratively reweighted least squares, with L2 regularisation
    of the feature weights; deterministic). The few relevant candidates are weighted so that both
    classes count alike (133 relevant among 19,650 candidates on the dev set's fit half: unweighted,
    the bias alone explains the labels). The fitted reranker keeps ``top_n`` candidates."""
    features_of, y = reranker_rows(pipeline, run, depth=depth)
    if not len(y) or y.min() == y.max():
        raise InputError("the validation candidates are all relevant or all irrelevant: nothing to fit")
    x = np.hstack([features_of, np.ones((len(y), 1))])              # the last column is the bias
    weight = np.where(y == 1, len(y) / (2 * y.sum()), len(y) / (2 * (len(y) - y.sum())))
    penalty = np.full(x.shape[1], l2)
    penalty[-1] = 0.0                                               # the bias is not regularised
    w = newton_logistic(x, y, penalty, sample_weight=weight, iterations=iterations)
    weights = {f: round(float(v), 6) for f, v in zip(FEATURES, w[:-1])} | {"bias": round(float(w[-1]), 6)}
    note = f"{fitted_on}; {len(run.queries)} queries, {len(y)} candidates, {int(y.sum())} relevant"
    return FeatureReranker(pipeline.store, top_n=top_n, weights=weights, fitted_on=note,
                           encoder=pipeline.encoder, depth=depth)


def save_fusion(fusion: WeightedFusion, path: Path) -> None:
    path.write_text(json.dumps(fusion.to_dict(), indent=2) + "\n", encoding="utf-8")


def save_reranker(reranker: FeatureReranker, path: Path) -> None:
    path.write_text(json.dumps({"method": "features", "weights": reranker.weights,
                                "fitted_on": reranker.fitted_on}, indent=2) + "\n", encoding="utf-8")


@dataclass(frozen=True, slots=True)
class AbstentionFit:
    """The fitted abstention threshold of the extractive generator, and what it achieves on the
    validation set (each query's best score and its outcome answered and abstained)."""

    min_coverage: float
    success: float
    hallucination: float
    queries: int
    fitted_on: str
    rows: tuple[tuple[str, float, str, str], ...]  # (query id, best score, answered, abstained)
    wrong_abstention: float = 0.0  # the share of all queries abstained on though answerable
    negatives: int = 0  # the queries to abstain on (unanswerable or restricted)
    hallucinated: int = 0  # of those, answered at the fitted threshold

    def to_dict(self) -> dict:
        return {"method": "extractive", "min_coverage": self.min_coverage, "success": self.success,
                "hallucination": self.hallucination, "wrong_abstention": self.wrong_abstention,
                "hallucinated": f"{self.hallucinated}/{self.negatives}", "queries": self.queries,
                "fitted_on": self.fitted_on}


def fit_abstention(pipeline: Pipeline, queries: Sequence[Query], *, fitted_on: str = "",
                   max_hallucination: float | None = None) -> AbstentionFit:
    """Choose the extractive generator's ``min_coverage``: the threshold on the best sentence's
    score that maximises success (supported answers and correct abstentions) on the validation
    queries; ties go to fewer hallucinations, then to the lower threshold.

    With ``max_hallucination``, only thresholds whose hallucination rate on the questions that
    should be abstained on (unanswerable or restricted) is at most that share compete (the
    lowest rate wins when none is): a few negatives among many answerable questions would
    otherwise be given up for the rest.

    Each query runs once up to the context; its answer is diagnosed twice, as given (the
    generator answering whatever its best score) and abstained, so every threshold's outcome is
    known exactly without running the pipeline again. The generator's other abstentions (a name
    the sources never mention: :class:`ragdx.stages.answerable.Answerability`) hold at every
    threshold, so the threshold is fitted on the questions they let through.

    Raises:
        ConfigError: the pipeline's generator has no ``best_score`` (not the extractive one).
    """
    generator = pipeline.generator
    if generator is None or not hasattr(generator, "best_score"):
        raise ConfigError("fitting the abstention threshold needs the extractive generator "
                          "(generation.method = extractive)")
    resolver = EvidenceResolver(pipeline.store)
    rows = []
    # the stages up to the context run once; each variant generates (with a multi-hop answer's
    # slot facts, as the pipeline adds them) and verifies from there
    until_context = Pipeline([s for s in pipeline.stages if s.kind.order < StageKind.GENERATION.order],
                             store=pipeline.store)
    variants = [Pipeline([_with_threshold(s, threshold) if s is generator else s for s in pipeline.stages],
                         store=pipeline.store) for threshold in (0.0, float("inf"))]
    diagnoser = diagnoser_for(pipeline)
    for query in queries:
        base = until_context.run(query)
        evidence = resolver.run(query)
        outcomes = [diagnoser.run(query, evidence, view_of(variant.resume(base, StageKind.GENERATION),
                                                           pipeline.store)).outcome
                    for variant in variants]
        rows.append((query.id, generator.best_score(query, base.context), outcomes[0], outcomes[1]))
    if not rows:
        raise InputError("the validation set has no query")
    best_key, best = None, 0.0
    never = max(score for _, score, _, _ in rows) + 0.001  # a threshold no query reaches: always abstain
    negatives = max(1, sum(not q.answerable for q in queries))
    for threshold in sorted({0.0, never} | {score for _, score, _, _ in rows}):
        chosen = [answered if score >= threshold else abstained for _, score, answered, abstained in rows]
        success = sum(o in GOOD_OUTCOMES for o in chosen) / len(chosen)
        hallucination = sum(o is Outcome.HALLUCINATION for o in chosen) / len(chosen)
        rate = sum(o is Outcome.HALLUCINATION for o in chosen) / negatives
        within = max_hallucination is None or rate <= max_hallucination
        key = (within, success if within else -rate, -hallucination)
        if best_key is None or key > best_key:
            best_key, best, best_success, best_chosen = key, threshold, success, chosen
    assert best_key is not None
    limit = "" if max_hallucination is None else f"; hallucination on negatives <= {max_hallucination:g}" + (
        "" if best_key[0] else " (not reachable: the lowest rate chosen)")
    note = f"{fitted_on}; {len(rows)} queries; success {best_success:.4f}{limit}"
    wrong = sum(o is Outcome.WRONG_ABSTENTION for o in best_chosen) / len(rows)
    return AbstentionFit(best, best_success, -best_key[2], len(rows), note,
                         tuple((q, s, str(a), str(b)) for q, s, a, b in rows), wrong,
                         sum(not q.answerable for q in queries),
                         sum(o is Outcome.HALLUCINATION for o in best_chosen))


def _with_threshold(generator: Any, threshold: float) -> Any:
    """A copy of the generator with another ``min_coverage`` (its model and encoder shared)."""
    clone = copy.copy(generator)
    clone.min_coverage = threshold
    return clone


def save_abstention(fit: AbstentionFit, path: Path) -> None:
    path.write_text(json.dumps(fit.to_dict(), indent=2) + "\n", encoding="utf-8")

"""First-loss diagnosis: follow each required evidence group through the stages and name the
first stage where it disappeared, why, and the one change that would test it.

It works on a neutral view of a trace (:class:`TraceView`): ordered stages whose items identify
their evidence by id, by span, or by text; the context; and the answer with its claims. ragdx's
own traces and imported traces (:mod:`ragdx.diagnosis.imports`) both become this view.

A group (an OR of alternatives) is present at a stage when its items hold one alternative whole:
by id, by spans that together cover the alternative's span, or by a text containing its quote
(whitespace-insensitive). Groups are checked stage by stage; a group lost at one stage and seen
again later (re-found by another channel, say) counts as lost where it first went missing only
if it never comes back before the context.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

from ragdx.diagnosis.evidence import (
    BY_ID, DELETED, LOST_IN_PARSING, NOT_IN_SOURCE, NOT_STORED, RESOLVED, QueryEvidence,
    ResolvedAlternative,
)
from ragdx.diagnosis.records import Diagnosis, Loss, Outcome, StagePresence
from ragdx.types import Query, Span, StageKind

_SPACE = re.compile(r"\s+")

SUPPORTED, INCOMPLETE, UNSUPPORTED = Outcome.SUPPORTED, Outcome.INCOMPLETE, Outcome.UNSUPPORTED
WRONG_ABSTENTION, CORRECT_ABSTENTION = Outcome.WRONG_ABSTENTION, Outcome.CORRECT_ABSTENTION
HALLUCINATION, LEAK, STALE = Outcome.HALLUCINATION, Outcome.LEAK, Outcome.STALE


@dataclass(frozen=True, slots=True)
class ItemView:
    """One item of a stage: an id, and its evidence as a span and/or a text."""

    id: str
    span: Span | None = None
    text: str | None = None
    rank: int | None = None
    doc: str | None = None
    aliases: tuple[str, ...] = ()  # other ids it answers to (the chunks a context unit holds)
    readable: bool = True          # the principal may read it
    current: bool = True           # its version is in force
    score: float | None = None


@dataclass(frozen=True, slots=True)
class DroppedView:
    item: ItemView
    reason: str


@dataclass(frozen=True, slots=True)
class StageView:
    """One stage's kept and dropped items."""

    name: str
    kind: StageKind
    items: tuple[ItemView, ...]
    dropped: tuple[DroppedView, ...] = ()
    config: dict = field(default_factory=dict)
    seconds: float | None = None   # the stage's latency, when the trace records it


@dataclass(frozen=True, slots=True)
class ClaimView:
    text: str
    citations: tuple[str, ...]
    supported: bool | None  # None: not verified
    reason: str = ""


@dataclass(frozen=True, slots=True)
class AnswerView:
    text: str
    abstained: bool
    claims: tuple[ClaimView, ...]
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    seconds: float | None = None          # generating
    verify_seconds: float | None = None   # verifying the claims


@dataclass(frozen=True, slots=True)
class TraceView:
    """What the diagnosis reads of one query's run."""

    query_id: str
    stages: tuple[StageView, ...]   # pipeline order; the context is the last CONTEXT-kind stage
    answer: AnswerView | None


def _compact(text: str) -> str:
    return _SPACE.sub("", text)


def holds(alt: ResolvedAlternative, items: Sequence[ItemView]) -> bool:
    """Whether items hold an alternative whole (by id, by covering spans, or by quote in text)."""
    a = alt.alternative
    if a.id is not None:
        return any(a.id == i.id or a.id in i.aliases for i in items)
    if a.quote is not None:
        needle = _compact(a.quote)
        if any(i.text is not None and (a.doc is None or i.doc in (None, a.doc)) and needle in _compact(i.text)
               for i in items):
            return True
    return alt.span is not None and alt.span.covered_by(i.span for i in items if i.span is not None)


def touching(alt: ResolvedAlternative, items: Sequence[ItemView]) -> list[ItemView]:
    """Items that hold any part of an alternative (to find why it was dropped)."""
    a = alt.alternative
    out = []
    for i in items:
        if a.id is not None and (a.id == i.id or a.id in i.aliases):
            out.append(i)
        elif alt.span is not None and i.span is not None and i.span.overlaps(alt.span):
            out.append(i)
        elif a.quote is not None and i.text is not None and _compact(a.quote) in _compact(i.text):
            out.append(i)
    return out


class Diagnoser:
    """Diagnoses a query from its resolved evidence and its trace view; stages are ordered as
    :class:`~ragdx.types.StageKind` lists them (docs/diagnosis.md)."""

    def run(self, query: Query, evidence: QueryEvidence, trace: TraceView,
            restricted: QueryEvidence | None = None) -> Diagnosis:
        groups = sorted({a.group for a in evidence.alternatives})
        by_group = {g: evidence.group(g) for g in groups}
        presence: list[StagePresence] = []
        lost: dict[int, Loss] = {}

        # source and parsing: from the evidence's resolution against the store
        for g, alts in by_group.items():
            if all(a.status in (NOT_IN_SOURCE, NOT_STORED, DELETED) for a in alts):
                lost[g] = Loss(g, "source", "; ".join(a.note for a in alts))
            elif all(a.status == LOST_IN_PARSING or a.status == RESOLVED and a.coverage is not None
                     and a.coverage.status != "full" for a in alts if a.status != BY_ID) \
                    and not any(a.status == BY_ID for a in alts):
                lost[g] = Loss(g, "parsing", "; ".join(_parsing_reason(a) for a in alts))

        # a rewrite stage holds what the ORIGINAL question retrieved; a group it held that the
        # (rewritten) retrieval lost was lost by the rewrite
        original = [i for s in trace.stages if s.kind is StageKind.REWRITE for i in s.items]
        found_by_original = {g for g, alts in by_group.items() if any(holds(a, original) for a in alts)}
        for s in trace.stages:
            if s.kind is StageKind.REWRITE:
                presence.append(StagePresence(s.name, s.kind, tuple(sorted(found_by_original))))
        # the ranked stages: retrieval channels together, then each later stage
        retrieval = [s for s in trace.stages if s.kind is StageKind.RETRIEVAL]
        later = [s for s in trace.stages if s.kind not in (StageKind.RETRIEVAL, StageKind.REWRITE)]
        steps: list[tuple[str, list[StageView]]] = []
        if retrieval:
            steps.append(("retrieval", retrieval))
        steps += [(s.name, [s]) for s in later]
        previous: list[StageView] = []
        for name, views in steps:
            items = [i for v in views for i in v.items]
            present = {g for g, alts in by_group.items() if any(holds(a, items) for a in alts)}
            key = "retrieval" if name == "retrieval" else views[0].name
            channels = tuple((view.name, tuple(sorted(
                g for g, alts in by_group.items() if any(holds(a, view.items) for a in alts))))
                for view in views) if name == "retrieval" and len(views) > 1 else ()  # each channel too
            presence.append(StagePresence(key, views[0].kind, tuple(sorted(present)), channels))
            for g in groups:
                if g in present or g in lost:
                    continue
                if name == "retrieval" and g in found_by_original:
                    lost[g] = Loss(g, "rewrite", "the original question's retrieval found it; the "
                                   "rewritten question's did not")
                    continue
                lost[g] = Loss(g, views[0].kind.value if name != "retrieval" else "retrieval",
                               self._why(by_group[g], views, previous, name))
            previous = views

        context = next((s for s in reversed(trace.stages) if s.kind is StageKind.CONTEXT), None)
        answer = trace.answer
        outcome, failed_at, extra = self._outcome(query, by_group, context, answer, lost)
        if extra is not None:
            lost.setdefault(extra.group, extra)
        losses = tuple(sorted(lost.values(), key=lambda l: (self._order(l.stage), l.group)))
        first_failure = None
        if outcome not in (SUPPORTED, CORRECT_ABSTENTION):
            stages = [l.stage for l in losses] + ([failed_at] if failed_at else [])
            first_failure = min(stages, key=self._order) if stages else None
        hypothesis = self._hypothesis(outcome, first_failure, losses, by_group)
        return Diagnosis(query.id, outcome, first_failure, losses, tuple(presence), hypothesis)

    @staticmethod
    def _order(stage: str) -> int:
        return StageKind(stage).order

    def _why(self, alts: Sequence[ResolvedAlternative], views: list[StageView],
             previous: list[StageView], name: str) -> str:
        """Why a group is missing from a stage: the stage's own drop reason when it dropped it,
        else that the stage never received it."""
        for view in views:
            for d in view.dropped:
                for alt in alts:
                    if touching(alt, [d.item]):
                        return f"{view.name}: {d.reason}" + _judge_filter(view.kind, d.reason, alt)
        if name == "retrieval":
            channels = " or ".join(v.name for v in views)
            return f"not recalled by {channels}"
        before = [i for v in previous for i in v.items]
        ranks = [i.rank for alt in alts for i in touching(alt, before) if i.rank is not None]
        where = f" (rank {min(ranks)} at {previous[0].name})" if ranks and previous else ""
        return f"{views[0].name} did not keep it{where}"

    def _outcome(self, query: Query, by_group, context: StageView | None, answer: AnswerView | None,
                 lost: dict[int, Loss]):
        units = list(context.items) if context else []
        cited_ids = {c for claim in (answer.claims if answer else ()) for c in claim.citations}
        cited = [u for u in units if u.id in cited_ids]
        if any(not u.readable for u in units) or any(not u.readable for u in cited):
            return LEAK, "governance", None
        if answer is None:
            return (INCOMPLETE if lost else SUPPORTED), None, None
        if not query.answerable:
            return (CORRECT_ABSTENTION, None, None) if answer.abstained else (HALLUCINATION, "generation", None)
        if any(not u.current for u in cited) or any(not u.current for u in units):
            return STALE, "governance", None
        if answer.abstained:
            return WRONG_ABSTENTION, None if lost else "generation", None
        unsupported = [c for c in answer.claims if c.supported is False]
        if unsupported:
            if not lost:  # evidence complete: a wrong claim is generation's, or citation's
                for claim in unsupported:
                    if any(_supports(claim.text, u) for u in units if u.id not in claim.citations):
                        return UNSUPPORTED, "citation", None
                return UNSUPPORTED, "generation", None
            return UNSUPPORTED, None, None
        if lost:
            return INCOMPLETE, None, None
        # everything reached the context; the answer must also use each group
        for g, alts in by_group.items():
            if cited and not any(holds(a, cited) for a in alts):
                return INCOMPLETE, "generation", Loss(g, "generation", "in the context, but the answer "
                                                      "does not cite it")
        return SUPPORTED, None, None

    def _hypothesis(self, outcome: str, stage: str | None, losses: Sequence[Loss], by_group) -> str:
        if outcome == SUPPORTED:
            return "Nothing was lost: every required group reached the context and the answer is supported."
        if outcome == CORRECT_ABSTENTION:
            return "The system correctly abstained."
        if outcome == HALLUCINATION:
            return ("The question is not answerable for this principal; if the generator abstains when no "
                    "source covers the question, the hallucination disappears.")
        if outcome == LEAK:
            return ("Content the principal may not read reached the context: if governance re-checks "
                    "access on read, the leak disappears.")
        if outcome == STALE:
            return ("A superseded or expired version reached the context: if governance drops it, only the "
                    "current version can be cited.")
        loss = next((l for l in losses if l.stage == stage), losses[0] if losses else None)
        if loss is None:
            return ("Substitute the gold evidence as the context (ragdx run --oracle context): if the answer "
                    "stays wrong, the generator is at fault.")
        alt = by_group[loss.group][0].alternative if loss.group in by_group else None
        what = f"group {loss.group}" + (f" ({alt.doc})" if alt is not None and alt.doc else "")
        reach = {"source": f"If {what} is added to the corpus, it can be retrieved and cited.",
                 "parsing": f"If {what} is parsed and chunked whole, one chunk can carry it to the context.",
                 "rewrite": f"If the original question is searched (or the rewrite keeps its terms), "
                            f"{what} is recalled again.",
                 "retrieval": f"If {what} is recalled by a retrieval channel (a larger top_k, another "
                              "channel or a query rewrite), reranking and assembly can keep it.",
                 "fusion": f"If {what} survives fusion (a larger fusion.top_k), the reranker can see it.",
                 "rerank": f"If {what} survives reranking (a larger rerank.top_n, or a fitted reranker), "
                           "it can reach the context.",
                 "governance": f"If governance keeps {what} (check its version and access), it can reach "
                               "the context.",
                 "context": f"If {what} reaches the context (a larger context.budget_tokens, or a better "
                            "order), the answer can cite it.",
                 "generation": "With the evidence complete, substitute a stronger generator or the gold "
                               "context (ragdx run --oracle context): the answer becomes supported if the "
                               "generator was at fault.",
                 "citation": "If each claim cites the unit that supports it, the answer becomes supported."}
        return reach.get(loss.stage, f"If {what} survives {loss.stage}, the answer can use it.")


def _judge_filter(kind: StageKind, reason: str, alt: ResolvedAlternative) -> str:
    """Governance drops are judged: a correct filter (the principal may not read it, the version is
    not in force, the document is gone) or a wrong one (the question asks for that very version)."""
    if kind is not StageKind.GOVERNANCE:
        return ""
    if reason.startswith(("superseded", "expired")) and alt.alternative.version is not None:
        return " (a wrong filter: the question asks for that version)"
    if reason.startswith(("filtered: acl", "superseded", "expired", "deleted")):
        return " (a correct filter)"
    return ""


def _parsing_reason(alt: ResolvedAlternative) -> str:
    if alt.status == LOST_IN_PARSING:
        return alt.note
    cov = alt.coverage
    if cov is not None and cov.status == "partial":
        return f"the span is cut across {len(cov.partial)} chunks; no chunk holds it whole"
    return "no chunk covers the span"


def _supports(claim: str, unit: ItemView) -> bool:
    """Whether a unit's text contains the claim's words (a claim citing the wrong unit)."""
    from ragdx.text import content_terms, stem
    if not unit.text:
        return False
    terms = {stem(t) for t in content_terms(claim)}
    have = {stem(t) for t in content_terms(unit.text)}
    return bool(terms) and len(terms & have) / len(terms) >= 0.8

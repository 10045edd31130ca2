"""First-loss diagnosis: follow each required evidence group through the stages and name the
first stage where it disappeared, why, and the one change that would test it.

It works on a neutral view of a trace (:class:`TraceView`): ordered stages whose items identify
their evidence by id, by span, or by text; the context; and the answer with its claims. ragdx's
own traces and imported traces (:mod:`ragdx.traces.jsonl`) both become this view.

A group (an OR of alternatives) is present at a stage when its items hold one alternative whole:
by id, by spans that together cover the alternative's span, or by a text containing its quote
(whitespace-insensitive). A span whose version is ``*`` (a trace that does not say) matches any
version. Groups are checked stage by stage; a group lost at one stage and seen again later
(re-found by another channel, say) counts as lost where it first went missing only if it never
comes back before the context.

When a trace lists the system's own chunks (a stage of kind ``parsing``), a group whose every
alternative lies in a listed document and is held whole by no single chunk is lost at
``parsing``: the reason names the chunks that hold its parts.

An answer whose claims carry no verdicts is checked here, with a support checker (ragdx's
learned judgement by default, as ``ragdx diagnose``'s): a claim that cites units against those
units, an uncited claim against the whole context. An answer that cannot be checked (its context has no text) is never
``supported``: it is ``unverified``. A trace without an answer (an import that lost the
generator's span) is ``no_answer``, at ``generation`` when no evidence was lost before.

A required group counts as used by the answer only when a claim states it: the claim's support
(where in its cited units it rests: recorded by ragdx's verifier or the trace, else located here
with :func:`ragdx.stages.verify.locate_support`) overlaps one of the group's alternatives, or the
checker judges that the claim and an alternative's text state the same fact (the claim supports
the alternative; by the lexical checker, either supports the other). A cited unit that holds the
span is not enough: an answer that cites it for another sentence leaves the group unstated, and
the first failure is ``generation``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Sequence

from ragdx.diagnosis.evidence import (
    BY_ID, DELETED, LOST_IN_PARSING, NOT_IN_SOURCE, NOT_STORED, RESOLVED, QueryEvidence,
    ResolvedAlternative,
)
from ragdx.diagnosis.records import CheckedClaim, Diagnosis, Loss, Outcome, StagePresence
from ragdx.ingest.quotes import find_quote
from ragdx.types import DropCode, Query, Span, StageKind

if TYPE_CHECKING:  # the checker is a stage's part; the diagnosis imports it only when it runs one
    from ragdx.stages.verify import SupportChecker

_SPACE = re.compile(r"\s+")
ANY_VERSION = "*"  # a span whose version the trace does not say: it matches any version
MIN_PART = 8  # the fewest (non-space) characters of a quote that count as holding part of it
# why a group that reached the context is lost at generation
UNCITED = "in the context, but the answer does not cite it"
STATED_NOT = "in the context and in a cited unit, but no claim states it"

SUPPORTED, INCOMPLETE, UNSUPPORTED = Outcome.SUPPORTED, Outcome.INCOMPLETE, Outcome.UNSUPPORTED
WRONG_ABSTENTION, CORRECT_ABSTENTION = Outcome.WRONG_ABSTENTION, Outcome.CORRECT_ABSTENTION
HALLUCINATION, LEAK, STALE = Outcome.HALLUCINATION, Outcome.LEAK, Outcome.STALE
UNVERIFIED, NO_ANSWER = Outcome.UNVERIFIED, Outcome.NO_ANSWER


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
    flags: tuple[str, ...] = ()    # what its stage noticed: a passage of instruction-like text, with the reason


@dataclass(frozen=True, slots=True)
class DroppedView:
    """An item a stage dropped: the reason in words, and its code (from the words when the trace
    gives none: :meth:`DropCode.of_reason`)."""

    item: ItemView
    reason: str
    code: DropCode | None = None

    def __post_init__(self) -> None:
        if self.code is None:
            object.__setattr__(self, "code", DropCode.of_reason(self.reason))


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
    """One claim: its text, the items it cites, its verdict, and where its support lies (spans
    of the parsed text, as ragdx's verifier or an imported trace records them; empty: the
    diagnosis locates it in the cited items' texts)."""

    text: str
    citations: tuple[str, ...]
    supported: bool | None  # None: not verified
    reason: str = ""
    support: tuple[Span, ...] = ()


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
    system: str | None = None       # the system that wrote it, when an imported trace says
    cached: tuple[str, ...] = ()    # the stages a result cache served (their seconds are 0)


def _compact(text: str) -> str:
    return _SPACE.sub("", text)


def _in_version(span: Span, target: Span) -> Span:
    """``span`` compared in ``target``'s version when either does not say its version."""
    if span.version != target.version and ANY_VERSION in (span.version, target.version):
        return replace(span, version=target.version)
    return span


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
    return alt.span is not None and alt.span.covered_by(
        _in_version(i.span, alt.span) for i in items if i.span is not None)


def part_of(alt: ResolvedAlternative, item: ItemView) -> tuple[float, float] | None:
    """The share of an alternative an item holds, as ``(from, to)`` fractions of it, when the item
    holds part of it but not the whole: by an overlapping span, or by a text that ends with the
    quote's beginning, starts with its end, or lies inside it (at least ``MIN_PART`` characters)."""
    a = alt.alternative
    if a.id is not None or holds(alt, [item]):
        return None
    if alt.span is not None and item.span is not None:
        span = _in_version(item.span, alt.span)
        if span.overlaps(alt.span):
            size = alt.span.end - alt.span.start
            return ((max(span.start, alt.span.start) - alt.span.start) / size,
                    (min(span.end, alt.span.end) - alt.span.start) / size)
    if a.quote is None or item.text is None or (a.doc is not None and item.doc not in (None, a.doc)):
        return None
    quote, text = _compact(a.quote), _compact(item.text)
    n = len(quote)
    if len(text) >= MIN_PART and text in quote:
        at = quote.index(text)
        return at / n, (at + len(text)) / n
    head = next((k for k in range(n - 1, MIN_PART - 1, -1) if text.endswith(quote[:k])), None)
    tail = next((j for j in range(1, n - MIN_PART + 1) if text.startswith(quote[j:])), None)
    if head is not None and (tail is None or head >= n - tail):
        return 0.0, head / n
    if tail is not None:
        return tail / n, 1.0
    return None


def touching(alt: ResolvedAlternative, items: Sequence[ItemView]) -> list[ItemView]:
    """Items that hold any part of an alternative (to find why it was dropped)."""
    a = alt.alternative
    out = []
    for i in items:
        if a.id is not None and (a.id == i.id or a.id in i.aliases):
            out.append(i)
        elif alt.span is not None and i.span is not None and _in_version(i.span, alt.span).overlaps(alt.span):
            out.append(i)
        elif a.quote is not None and i.text is not None and _compact(a.quote) in _compact(i.text):
            out.append(i)
    return out


@dataclass(frozen=True, slots=True)
class _Piece:
    """Where part of a claim's support lies: a range of a cited item's text and/or a span of the
    parsed text (``start is None``: somewhere in the item, which has no text to say where)."""

    item: ItemView | None
    start: int | None
    end: int | None
    span: Span | None


def _lines_up(item: ItemView) -> bool:
    """Whether an item's text is its span's text (offsets in one are offsets in the other)."""
    return item.span is not None and item.text is not None and len(item.text) == item.span.end - item.span.start


def _support(claim: ClaimView, units: Sequence[ItemView]) -> list[_Piece]:
    """Where a supported claim's support lies in the context: the spans it records, else located
    in the texts of the items it cites (:func:`ragdx.stages.verify.locate_support`)."""
    if not claim.supported:
        return []
    cited = [u for u in units if u.id in claim.citations or set(claim.citations) & set(u.aliases)]
    if claim.support:
        pieces = []
        for span in claim.support:
            item = next((u for u in cited if u.span is not None and _lines_up(u)
                         and _in_version(u.span, span).contains(span)), None)
            start = span.start - item.span.start if item is not None and item.span is not None else None
            pieces.append(_Piece(item, start, None if start is None else start + span.end - span.start, span))
        return pieces
    readable = [u for u in cited if u.text]
    from ragdx.stages.verify import locate_support
    pieces = [_Piece(u, None, None, None) for u in cited if not u.text]
    for n, start, end in locate_support(claim.text, [(u.text or "", "") for u in readable]):
        u = readable[n]
        span = Span(u.span.doc_id, u.span.version, u.span.start + start, u.span.start + end) \
            if u.span is not None and _lines_up(u) else None
        pieces.append(_Piece(u, start, end, span))
    return pieces


def _states(alt: ResolvedAlternative, piece: _Piece) -> bool | None:
    """Whether a piece of a claim's support overlaps an alternative (``None``: cannot tell, the
    item has no text)."""
    a, item = alt.alternative, piece.item
    if a.id is not None:  # the alternative is the whole item
        return item is not None and (a.id == item.id or a.id in item.aliases)
    if alt.span is not None and piece.span is not None:
        return _in_version(piece.span, alt.span).overlaps(alt.span)
    if item is None:
        return False
    if piece.start is None or piece.end is None:
        return None if holds(alt, [item]) else False
    ranges: list[tuple[int, int]] = []
    if alt.span is not None and item.span is not None and _lines_up(item):
        span = _in_version(item.span, alt.span)
        if span.overlaps(alt.span):
            ranges.append((max(alt.span.start, span.start) - span.start, min(alt.span.end, span.end) - span.start))
    elif a.quote is not None and item.text is not None and (a.doc is None or item.doc in (None, a.doc)):
        ranges = find_quote(item.text, a.quote)
    return any(start < piece.end and piece.start < end for start, end in ranges)


def _stated(alts: Sequence[ResolvedAlternative], pieces: Sequence[_Piece]) -> bool | None:
    """Whether some claim's support overlaps one of a group's alternatives (``None``: no piece
    does, and a piece without text may)."""
    verdicts = [_states(a, p) for a in alts for p in pieces]
    if True in verdicts:
        return True
    return None if None in verdicts else False


def _alternative_text(alt: ResolvedAlternative, units: Sequence[ItemView]) -> str | None:
    """An alternative's words, for the checker: its quote, else the text of a context item that
    is it (by id) or holds its span whole."""
    a = alt.alternative
    if a.quote is not None:
        return a.quote
    for u in units:
        if u.text and a.id is not None and (a.id == u.id or a.id in u.aliases):
            return u.text
        if alt.span is not None and u.span is not None and _lines_up(u) \
                and _in_version(u.span, alt.span).contains(alt.span):
            start = alt.span.start - u.span.start
            return (u.text or "")[start:start + alt.span.end - alt.span.start]
    return None


def _covers(parts: Sequence[tuple[float, float]]) -> bool:
    reach = 0.0
    for start, end in sorted(parts):
        if start > reach + 1e-9:
            return False
        reach = max(reach, end)
    return reach >= 1 - 1e-9


def _chunk_cut(alts: Sequence[ResolvedAlternative], chunks: Sequence[ItemView]) -> str | None:
    """Why a group is lost at parsing by the system's own chunks: every alternative lies in a
    listed document and no single chunk holds it whole (``None`` when one does, or when a
    document is not listed)."""
    reasons = []
    for alt in alts:
        doc = alt.alternative.doc or (alt.span.doc_id if alt.span else None)
        listed = [c for c in chunks if c.doc == doc or (c.span is not None and alt.span is not None
                                                        and c.span.doc_id == alt.span.doc_id)]
        if alt.alternative.id is not None or not listed or any(holds(alt, [c]) for c in listed):
            return None
        parts = [(n, c, part) for n, c in enumerate(listed, start=1) if (part := part_of(alt, c))]
        if not parts:
            reasons.append(f"{doc}: none of the system's {len(listed)} chunks of it holds any part of it")
            continue
        names = [f"{n} ({c.id})" for n, c, _ in parts]
        named = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
        together = "together hold it" if _covers([p for _, _, p in parts]) else "hold parts of it"
        reasons.append(f"{doc}: no single chunk holds it whole; chunk{'s' if len(parts) > 1 else ''} "
                       f"{named} of {len(listed)} {together}")
    return "; ".join(reasons)


def _parts_held(alts: Sequence[ResolvedAlternative], views: Sequence[StageView]) -> str:
    """``; VIEW returned ID, which holds part of it`` for each item of these stages holding part of
    an alternative (a quote cut across items, or an item cut short)."""
    held = [(v.name, i.id, part) for v in views for i in v.items for a in alts if (part := part_of(a, i))]
    return "".join(f"; {name} returned {item}, which holds {100 * (end - start):.0f}% of it"
                   for name, item, (start, end) in held[:3])


class Diagnoser:
    """Diagnoses a query from its resolved evidence and its trace view; stages are ordered as
    :class:`~ragdx.types.StageKind` lists them (docs/diagnosis.md).

    Args:
        checker: judges the claims a trace left unverified (``judge(claim, evidence) -> (Verdict,
            reason)``; default ragdx's learned judgement, :class:`~ragdx.stages.verify.LearnedChecker`).
        system: the name of an imported system: its hypotheses then name the trace's own stages
            rather than ragdx's settings (``None``: ragdx's own pipeline).
    """

    def __init__(self, checker: SupportChecker | None = None, system: str | None = None) -> None:
        self.checker = checker
        self.system = system

    def run(self, query: Query, evidence: QueryEvidence, trace: TraceView,
            restricted: QueryEvidence | None = None) -> Diagnosis:
        groups = sorted({a.group for a in evidence.alternatives})
        by_group = {g: evidence.group(g) for g in groups}
        presence: list[StagePresence] = []
        lost: dict[int, Loss] = {}
        retrieval = [s for s in trace.stages if s.kind is StageKind.RETRIEVAL]

        # source and parsing: from the evidence's resolution against the store
        for g, alts in by_group.items():
            if all(a.status in (NOT_IN_SOURCE, NOT_STORED, DELETED) for a in alts):
                lost[g] = Loss(g, StageKind.SOURCE, "; ".join(a.note for a in alts))
            elif all(a.status == LOST_IN_PARSING or a.status == RESOLVED and a.coverage is not None
                     and a.coverage.status != "full" for a in alts if a.status != BY_ID) \
                    and not any(a.status == BY_ID for a in alts):
                lost[g] = Loss(g, StageKind.PARSING, "; ".join(_parsing_reason(a) for a in alts))
        # parsing by the system's own chunks, when the trace lists them
        parsing = [s for s in trace.stages if s.kind is StageKind.PARSING]
        chunks = [i for s in parsing for i in s.items]
        for g, alts in by_group.items():
            if g not in lost and chunks and (cut := _chunk_cut(alts, chunks)) is not None:
                lost[g] = Loss(g, StageKind.PARSING, cut + _parts_held(alts, retrieval))

        # a rewrite stage holds what the ORIGINAL question retrieved; a group it held that the
        # (rewritten) retrieval lost was lost by the rewrite
        original = [i for s in trace.stages if s.kind is StageKind.REWRITE for i in s.items]
        found_by_original = {g for g, alts in by_group.items() if any(holds(a, original) for a in alts)}
        for s in trace.stages:  # a rewrite stage that lists nothing says nothing of the original's retrieval
            if s.kind is StageKind.REWRITE and s.items:
                presence.append(StagePresence(s.name, s.kind, tuple(sorted(found_by_original))))
        # the ranked stages: retrieval channels together, then each later stage
        later = [s for s in trace.stages if s.kind not in (StageKind.RETRIEVAL, StageKind.REWRITE,
                                                           StageKind.PARSING)]
        # (the channels together are one step, named after their kind: "retrieval")
        steps: list[tuple[str, list[StageView]]] = []
        if retrieval:
            steps.append((StageKind.RETRIEVAL.value, retrieval))
        steps += [(s.name, [s]) for s in later]
        previous: list[StageView] = []
        for key, views in steps:
            recall = views is retrieval
            items = [i for v in views for i in v.items]
            present = {g for g, alts in by_group.items() if any(holds(a, items) for a in alts)}
            channels = tuple((view.name, tuple(sorted(
                g for g, alts in by_group.items() if any(holds(a, view.items) for a in alts))))
                for view in views) if recall and len(views) > 1 else ()  # each channel too
            presence.append(StagePresence(key, views[0].kind, tuple(sorted(present)), channels))
            for g in groups:
                if g in present or g in lost:
                    continue
                if recall and g in found_by_original:
                    lost[g] = Loss(g, StageKind.REWRITE, "the original question's retrieval found it; the "
                                   "rewritten question's did not")
                    continue
                lost[g] = Loss(g, views[0].kind, self._why(by_group[g], views, previous))
            previous = views

        context = next((s for s in reversed(trace.stages) if s.kind is StageKind.CONTEXT), None)
        answer, notes = self.check_answer(trace.answer, context)
        if trace.answer is None:
            notes.insert(0, _NO_ANSWER_NOTE.format(stages=", ".join(f"{s.name} ({s.kind.value})" for s in trace.stages)
                                                   or "none"))
        outcome, failed_at, extra = self._outcome(query, by_group, context, answer, lost)
        for loss in extra:
            lost.setdefault(loss.group, loss)
        if outcome is UNVERIFIED and answer is not None and answer.claims \
                and all(c.supported is not None for c in answer.claims):
            notes.append("a cited item holds a required group but has no text, and no claim records where its "
                         "support lies: ragdx cannot tell whether a claim states the group")
        losses = tuple(sorted(lost.values(), key=lambda l: (self._order(l.stage), l.group)))
        first_failure = None
        if outcome not in (SUPPORTED, CORRECT_ABSTENTION):
            stages = [l.stage for l in losses] + ([failed_at] if failed_at else [])
            first_failure = min(stages, key=self._order) if stages else None
        hypothesis = self._hypothesis(outcome, first_failure, losses, by_group, trace)
        checked = answer is not None and answer is not trace.answer  # ragdx judged the claims itself
        claims = tuple(CheckedClaim(c.text, c.citations, c.supported, c.reason) for c in answer.claims) \
            if answer is not None and (checked or outcome is UNSUPPORTED) else ()
        return Diagnosis(query.id, outcome, first_failure, losses, tuple(presence), hypothesis, tuple(notes),
                         claims=claims)

    @staticmethod
    def _order(stage: StageKind) -> int:
        return stage.order

    def _why(self, alts: Sequence[ResolvedAlternative], views: list[StageView],
             previous: list[StageView]) -> str:
        """Why a group is missing from a stage: the stage's own drop reason when it dropped it,
        else that the stage never received it."""
        for view in views:
            for d in view.dropped:
                for alt in alts:
                    if touching(alt, [d.item]):
                        return f"{view.name}: {d.reason}" + _judge_filter(view.kind, d, alt)
        if views[0].kind is StageKind.RETRIEVAL:
            channels = " or ".join(v.name for v in views)
            return f"not recalled by {channels}" + _parts_held(alts, views)
        before = [i for v in previous for i in v.items]
        ranks = [i.rank for alt in alts for i in touching(alt, before) if i.rank is not None]
        where = f" (rank {min(ranks)} at {previous[0].name})" if ranks and previous else ""
        return f"{views[0].name} did not keep it{where}" + _parts_held(alts, views)

    def check_answer(self, answer: AnswerView | None,
                     context: StageView | None) -> tuple[AnswerView | None, list[str]]:
        """The answer with every claim that carries no verdict checked against the context: a
        claim citing units against their texts; an uncited one, by a checker that reads
        statements together (``combines``: the learned judgement), against the whole context at
        once, else against each unit; it then cites the units its support lies in. An answer with
        neither claims nor citations is cut into its claims first (:func:`answer_claims`).
        Returns the answer and a note on what was checked."""
        if answer is None or answer.abstained:
            return answer, []
        claims = answer.claims or tuple(ClaimView(t, (), None) for t in answer_claims(answer.text))
        if all(c.supported is not None for c in claims) and answer.claims:
            return answer, []
        everything = list(context.items) if context else []
        units = [u for u in everything if u.text]
        checker = self.checker or _default_checker()
        checked, verdicts = [], []
        for claim in claims:
            if claim.supported is not None:
                checked.append(claim)
                continue
            if claim.citations:
                cited = [u for u in everything if u.id in claim.citations or set(claim.citations) & set(u.aliases)]
                if not cited:
                    checked.append(replace(claim, supported=False, reason=f"cites {', '.join(claim.citations)}, "
                                           "which is not in the context"))
                    verdicts.append(False)
                elif any(not u.text for u in cited):
                    checked.append(claim)  # a cited unit without a text: it cannot be checked
                else:
                    verdict, reason = checker.judge(claim.text, "\n\n".join(u.text or "" for u in cited))
                    checked.append(replace(claim, supported=verdict.value == "supported", reason=reason))
                    verdicts.append(verdict.value == "supported")
                continue
            if not units:
                checked.append(claim)
                continue
            if getattr(checker, "combines", False):  # one reading of the whole context
                joined = "\n\n".join(u.text or "" for u in units)
                verdict, reason = checker.judge(claim.text, joined)
                grounds = [_compact(s) for s in checker.grounds(claim.text, joined)]
                support = [u for u in units if any(g in _compact(u.text or "") for g in grounds)] or units
                ok = verdict.value == "supported"
                checked.append(ClaimView(claim.text, tuple(u.id for u in support) if ok else (), ok,
                                         f"supported by {', '.join(u.id for u in support)}: {reason}" if ok
                                         else reason))
                verdicts.append(ok)
                continue
            support = [u for u in units if checker.judge(claim.text, u.text or "")[0].value == "supported"]
            if support:
                checked.append(ClaimView(claim.text, tuple(u.id for u in support), True,
                                         f"supported by {', '.join(u.id for u in support)}"))
            else:
                together, reason = checker.judge(claim.text, "\n\n".join(u.text or "" for u in units))
                if together.value == "supported":  # the words are spread over several units
                    reason = f"no one context unit supports it; all {len(units)} together: {reason}"
                checked.append(ClaimView(claim.text, (), False, reason))
            verdicts.append(bool(support))
        name = getattr(checker, "name", type(checker).__name__)
        if not verdicts:
            return replace(answer, claims=tuple(checked)), [
                f"the answer carries no citations or verdicts, and its context has no text: ragdx "
                f"could not check its {len(checked)} claim{'s' if len(checked) != 1 else ''}"]
        note = (f"the answer carried no verdicts: ragdx checked {len(verdicts)} claim"
                f"{'s' if len(verdicts) != 1 else ''} itself with its {name} checker against the context "
                f"({sum(verdicts)} supported)")
        return replace(answer, claims=tuple(checked)), [note]

    def _outcome(self, query: Query, by_group, context: StageView | None, answer: AnswerView | None,
                 lost: dict[int, Loss]):
        units = list(context.items) if context else []
        cited_ids = {c for claim in (answer.claims if answer else ()) for c in claim.citations}
        cited = [u for u in units if u.id in cited_ids or cited_ids & set(u.aliases)]
        if any(not u.readable for u in units) or any(not u.readable for u in cited):
            return LEAK, StageKind.GOVERNANCE, ()
        if answer is None:  # never a success: the evidence may be complete, but nothing used it
            return NO_ANSWER, None if lost else StageKind.GENERATION, ()
        if not query.answerable:
            return (CORRECT_ABSTENTION, None, ()) if answer.abstained else (HALLUCINATION, StageKind.GENERATION, ())
        if any(not u.current for u in cited) or any(not u.current for u in units):
            return STALE, StageKind.GOVERNANCE, ()
        if answer.abstained:
            return WRONG_ABSTENTION, None if lost else StageKind.GENERATION, ()
        unsupported = [c for c in answer.claims if c.supported is False]
        if unsupported:
            if not lost:  # evidence complete: a wrong claim is generation's, or citation's
                for claim in unsupported:  # an uncited claim cannot have cited the wrong unit
                    if claim.citations and any(_supports(claim.text, u) for u in units
                                               if u.id not in claim.citations):
                        return UNSUPPORTED, StageKind.CITATION, ()
                return UNSUPPORTED, StageKind.GENERATION, ()
            return UNSUPPORTED, None, ()
        if lost:
            return INCOMPLETE, None, ()
        if not answer.claims or any(c.supported is None for c in answer.claims):
            return UNVERIFIED, None, ()  # never supported on the strength of the context alone
        # everything reached the context; a claim must also state each group
        pieces = [p for claim in answer.claims for p in _support(claim, units)]
        unstated, unknown = [], []
        for g, alts in by_group.items():
            stated = _stated(alts, pieces)
            if stated is True or self._judged(alts, answer.claims, units):
                continue
            if stated is None:
                unknown.append(g)
            elif stated is False:
                unstated.append(Loss(g, StageKind.GENERATION, STATED_NOT if any(holds(a, cited) for a in alts)
                                     else UNCITED))
        if unstated:
            return INCOMPLETE, StageKind.GENERATION, tuple(unstated)
        if unknown:  # a cited item holds the group, but has no text and no claim says where it rests
            return UNVERIFIED, None, ()
        return SUPPORTED, None, ()

    def _judged(self, alts: Sequence[ResolvedAlternative], claims: Sequence[ClaimView],
                units: Sequence[ItemView]) -> bool:
        """Whether the checker judges that a supported claim and an alternative's text state the
        same fact: read as evidence, the claim supports the alternative's text; or, by the lexical
        checker (which reads words, not paraphrase), the alternative's text supports the claim. A
        judgement that reads paraphrase (``combines``: the learned one, an LLM) finds the second for
        any short claim sharing a few of the alternative's words ("Return the item for a refund and
        place a new order instead" is no statement of "You can return most items for a refund up to
        30 days after your order was delivered"), so it reads the first alone."""
        checker = self.checker or _default_checker()
        for alt in alts:
            text = _alternative_text(alt, units)
            if text is None:
                continue
            for claim in claims:
                ways = ((text, claim.text),) if getattr(checker, "combines", False) else (
                    (claim.text, text), (text, claim.text))
                if claim.supported and claim.text.strip() and any(
                        checker.judge(a, b)[0].value == "supported" for a, b in ways):
                    return True
        return False

    def _hypothesis(self, outcome: str, stage: StageKind | None, losses: Sequence[Loss], by_group,
                    trace: TraceView | None = None) -> str:
        if outcome == SUPPORTED:
            return "Nothing was lost: every required group reached the context and the answer is supported."
        if outcome == CORRECT_ABSTENTION:
            return "The system correctly abstained."
        if outcome == NO_ANSWER and stage is StageKind.GENERATION:
            return ("The trace holds no answer: if the generator's span is recorded (an LLM span with its output "
                    "messages), ragdx can judge the answer; if the generator did not run, that is the failure.")
        if outcome == UNVERIFIED:
            return ("The answer could not be checked: if the trace records the context's texts (or the "
                    "answer's citations and claim verdicts), ragdx can say whether it is supported.")
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
        own = self.system is None
        if loss is None:
            return ("Substitute the gold evidence as the context (ragdx run --oracle context): if the answer "
                    "stays wrong, the generator is at fault." if own else
                    "Give the generator the required evidence alone as its context: if the answer stays "
                    "wrong, the generator is at fault.")
        alt = by_group[loss.group][0].alternative if loss.group in by_group else None
        what = f"group {loss.group}" + (f" ({alt.doc})" if alt is not None and alt.doc else "")
        if own:
            reach, statement = _OWN_REACH, _OWN_STATEMENT
        else:  # the system's own stages by name ("BM25Retriever or VectorIndexRetriever")
            names = {k: " or ".join(dict.fromkeys(s.name for s in (trace.stages if trace else ()) if s.kind is k))
                     or k.value for k in StageKind}
            reach = {k: v.format(name=names[k], system=self.system) for k, v in _SYSTEM_REACH.items()}
            statement = _SYSTEM_STATEMENT.format()
        if loss.stage is StageKind.PARSING and "chunk" in loss.reason and not own:
            text = _SYSTEM_CHUNKING.format(name=names[StageKind.PARSING])
        elif loss.stage is StageKind.GENERATION:  # a group that reached the context, but no claim states it
            text = statement
        else:
            text = reach.get(loss.stage, "If {what} survives " + loss.stage + ", the answer can use it.")
        return text.replace("{what}", what)


_NO_ANSWER_NOTE = ("the trace holds no answer: no generator's span (an LLM span carrying output messages, or "
                   "an answer) was found; its stages: {stages}")
_OWN_REACH: dict[StageKind, str] = {
    StageKind.SOURCE: "If {what} is added to the corpus, it can be retrieved and cited.",
    StageKind.PARSING: "If {what} is parsed and chunked whole, one chunk can carry it to the context.",
    StageKind.REWRITE: ("If the original question is searched (or the rewrite keeps its terms), {what} is recalled "
                        "again."),
    StageKind.RETRIEVAL: ("If {what} is recalled by a retrieval channel (a larger top_k, another channel or a query"
                          " rewrite), reranking and assembly can keep it."),
    StageKind.FUSION: "If {what} survives fusion (a larger fusion.top_k), the reranker can see it.",
    StageKind.RERANK: ("If {what} survives reranking (a larger rerank.top_n, or a fitted reranker), it can reach "
                       "the context."),
    StageKind.GOVERNANCE: "If governance keeps {what} (check its version and access), it can reach the context.",
    StageKind.CONTEXT: ("If {what} reaches the context (a larger context.budget_tokens, or a better order), the "
                        "answer can cite it."),
    StageKind.GENERATION: ("With the evidence complete, substitute a stronger generator or the gold context (ragdx "
                           "run --oracle context): the answer becomes supported if the generator was at fault."),
    StageKind.CITATION: "If each claim cites the unit that supports it, the answer becomes supported.",
}
# why a group that reached the context is missing from the answer (loss at generation)
_OWN_STATEMENT = ("If the answer states {what} in a claim drawn from it, citing the unit that holds it, it "
                  "becomes supported: try a stronger generator, or the gold context (ragdx run --oracle context).")
# an imported system's hypotheses name its own stages ({name}), never ragdx's settings
_SYSTEM_REACH: dict[StageKind, str] = {
    StageKind.SOURCE: "If {{what}} is added to {system}'s corpus, it can be retrieved and cited.",
    StageKind.PARSING: "If {name} parses {{what}} whole, one chunk can carry it to the context.",
    StageKind.REWRITE: "If {name} keeps the question's terms, {{what}} is recalled again.",
    StageKind.RETRIEVAL: ("If {name} recalls {{what}} (a larger top_k, another channel or a query rewrite), the "
                          "later stages can keep it."),
    StageKind.FUSION: "If {name} keeps {{what}} (a larger top_k for its fused list), the later stages can see it.",
    StageKind.RERANK: "If {name} keeps {{what}} (a larger top_k), it can reach the context.",
    StageKind.GOVERNANCE: ("If {name} keeps {{what}} (check its version and access filter), it can reach the "
                           "context."),
    StageKind.CONTEXT: ("If {{what}} reaches the context at {name} (a larger budget, or a better order), the answer"
                        " can use it."),
    StageKind.GENERATION: ("With the evidence complete at the context, try a stronger generator, or give it the "
                           "required evidence alone: the answer becomes supported if the generator was at fault."),
    StageKind.CITATION: "If each claim cites the unit that supports it, the answer becomes supported.",
}
_SYSTEM_STATEMENT = ("If the answer states {{what}} in a claim drawn from it, citing the item that holds it, it "
                     "becomes supported: try a stronger generator, or give it the required evidence alone.")
# a quote that no chunk of the system holds whole
_SYSTEM_CHUNKING = ("If one chunk holds {{what}} whole (chunk overlap, or larger chunks at {name}), retrieval "
                    "can return it whole.")


def _judge_filter(kind: StageKind, dropped: DroppedView, alt: ResolvedAlternative) -> str:
    """Governance drops are judged: a correct filter (the principal may not read it, the version is
    not in force, the document is gone) or a wrong one (the question asks for that very version)."""
    if kind is not StageKind.GOVERNANCE or dropped.code is None or not dropped.code.judged:
        return ""
    if dropped.code in (DropCode.SUPERSEDED, DropCode.EXPIRED) and alt.alternative.version is not None:
        return " (a wrong filter: the question asks for that version)"
    if dropped.code is DropCode.OTHER_VERSION and alt.alternative.version is not None:
        return " (a wrong filter: the required evidence is labelled on that version)"
    return " (a correct filter)"


def _parsing_reason(alt: ResolvedAlternative) -> str:
    if alt.status == LOST_IN_PARSING:
        return alt.note
    cov = alt.coverage
    if cov is not None and cov.status == "partial":
        return f"the span is cut across {len(cov.partial)} chunks; no chunk holds it whole"
    return "no chunk covers the span"


def _default_checker() -> Any:
    """ragdx's default support judgement (``verify.method = learned``), as ``ragdx diagnose`` uses."""
    from ragdx.stages.verify import LearnedChecker
    return LearnedChecker()


def answer_claims(text: str) -> list[str]:
    """An answer's claims when it carries none: its statements, less a reply word on its own
    ("Yes.", "No to both:"), which answers the question and states nothing a source could."""
    from ragdx.text import is_reply, statements
    return [s for s in statements(text) or ([text] if text.strip() else []) if not is_reply(s)]


def _supports(claim: str, unit: ItemView) -> bool:
    """Whether a unit's text contains the claim's words (a claim citing the wrong unit)."""
    from ragdx.text import content_terms, stem
    if not unit.text:
        return False
    terms = {stem(t) for t in content_terms(claim)}
    have = {stem(t) for t in content_terms(unit.text)}
    return bool(terms) and len(terms & have) / len(terms) >= 0.8

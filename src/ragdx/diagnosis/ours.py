"""Diagnosing ragdx's own runs: a :class:`~ragdx.pipeline.Trace` as a :class:`TraceView`, and the
extra evidence only ragdx's own store can give (how deep a missed chunk ranks, whether the
evidence lies beyond the encoder's window)."""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from ragdx.diagnosis.evidence import EvidenceResolver, QueryEvidence
from ragdx.diagnosis.locate import (
    AnswerView, ClaimView, Diagnoser, Diagnosis, DroppedView, ItemView, Loss, StageView, TraceView,
)
from ragdx.pipeline import Pipeline, Trace
from ragdx.protocols import DeepRetriever, Retriever, Store
from ragdx.tracefile import stage_to_dict
from ragdx.types import DocStatus, Query, StageKind, Verdict, VersionFilter

DEEP = 2000  # how deep the diagnosis searches for a chunk no channel returned


def view_of(trace: Trace, store: Store, channels: Sequence[Retriever] = ()) -> TraceView:
    """The neutral view of one of ragdx's own traces.

    When the trace's rewrite stage searched with more than the original question (or without
    it), the view gains a rewrite stage holding what ``channels`` retrieve for the original
    question alone (the rewrite counterfactual): a required group the original would have found
    and the rewritten retrieval lost is lost at ``rewrite``. A question searched as asked has no
    rewrite view (its retrieval is the original's), nor does a trace viewed without ``channels``."""
    stages = []
    rewritten = trace.rewritten
    if rewritten is not None and channels and rewritten.searches != (trace.query.question,):
        found: dict[str, ItemView] = {}
        for channel in channels:  # the counterfactual: what the original question alone retrieves
            for c in channel.run(trace.query).items:
                found.setdefault(c.chunk_id, ItemView(c.chunk_id, c.span, rank=c.rank, doc=c.doc_id, score=c.score))
        stages.append(StageView(rewritten.stage, rewritten.kind, tuple(found.values()), (),
                                {k: v for k, v in stage_to_dict(rewritten).items()
                                 if k not in ("name", "kind", "seconds")},
                                rewritten.seconds))
    for ranked in trace.ranked:
        stages.append(StageView(
            ranked.stage, ranked.kind,
            tuple(ItemView(c.chunk_id, c.span, rank=c.rank, doc=c.doc_id, score=c.score) for c in ranked.items),
            tuple(DroppedView(ItemView(d.chunk_id, d.span, rank=d.rank, doc=d.doc_id), d.reason, d.code)
                  for d in ranked.dropped), dict(ranked.config), ranked.seconds))
    context, answer, verification = trace.context, trace.answer, trace.verification
    if context is not None:
        # a version the question names is no stale one
        asked = VersionFilter.for_question(trace.query.question, known=store.version_labels())
        units, read = [], {}
        for u in context.units:  # units of one version read it once (a context holds a page's sections)
            key = (u.doc_id, u.version)
            stored = read[key] if key in read else read.setdefault(key, store.version(u.doc_id, u.version))
            units.append(ItemView(u.id, u.span, u.text, u.rank, u.doc_id, u.chunk_ids,
                                  readable=stored is not None and trace.query.principal.may_read(
                                      stored.document.acl),
                                  current=stored is not None and (
                                      stored.document.status is DocStatus.CURRENT or asked.names(u.version)),
                                  flags=tuple(f.reason for f in u.flagged)))
        stages.append(StageView(context.stage, context.kind, tuple(units), tuple(
            DroppedView(ItemView(d.chunk_id, d.span, rank=d.rank, doc=d.doc_id), d.reason, d.code)
            for d in context.dropped), dict(context.config) | {"tokens": context.tokens}, context.seconds))
    view_answer = None
    if answer is not None:
        # a verifier checks the answer's claims in order, one check each
        checks = verification.checks if verification is not None else ()
        claims = []
        for n, claim in enumerate(answer.claims):
            check = checks[n] if n < len(checks) and checks[n].claim == claim else None
            claims.append(ClaimView(claim.text, claim.citations,
                                    None if check is None else check.verdict is Verdict.SUPPORTED,
                                    check.reason if check else "", check.support if check else ()))
        view_answer = AnswerView(answer.text, answer.abstained, tuple(claims), answer.usage.prompt_tokens,
                                 answer.usage.completion_tokens, answer.usage.cost, answer.seconds,
                                 verification.seconds if verification else None)
    return TraceView(trace.query.id, tuple(stages), view_answer, cached=trace.cached)


def _deep_rank(channel: DeepRetriever, query: Query, chunk_ids: set[str]) -> int | None:
    """The rank of the best of these chunks in a deep search of one channel, if found."""
    for item in channel.deeper(DEEP, exact=True).run(query).items:
        if item.chunk_id in chunk_ids:
            return item.rank
    return None


def _deep_search(channel: Retriever, query: Query, chunk_ids: set[str]) -> str:
    if not isinstance(channel, DeepRetriever):
        return f"{channel.name}: no deep search (it has no 'deeper' method)"
    rank = _deep_rank(channel, query, chunk_ids)
    if rank is None:
        return f"{channel.name}: not in its top {DEEP}"
    if rank <= channel.top_k:  # exact search ranks it within top_k: the channel's own search cut it
        return (f"{channel.name} rank {rank} (top_k {channel.top_k}) in an exact search; the channel's "
                "bounded or approximate search dropped it (its shortlist: see the stage's config)")
    return f"{channel.name} rank {rank} (top_k {channel.top_k})"


def explain_retrieval(pipeline: Pipeline, query: Query, evidence: QueryEvidence, loss: Loss) -> str:
    """Why no channel recalled a group: each channel's rank for it in a deep search, and whether the
    evidence lies beyond the dense encoder's window in its chunk."""
    alts = [a for a in evidence.group(loss.group) if a.span is not None and a.coverage is not None]
    chunk_ids = {c for a in alts for c in a.coverage.full + a.coverage.partial}
    if not chunk_ids:
        return loss.reason
    parts = []
    for channel in pipeline.channels:
        parts.append(_deep_search(channel, query, chunk_ids))
    reason = f"not recalled by {' or '.join(c.name for c in pipeline.channels)}; " + ", ".join(parts)
    space = pipeline.store.active_space() if pipeline.encoder is not None else None
    if space is not None:
        for alt in alts:
            chunks = pipeline.store.chunks_by_id(list(alt.coverage.full))
            for chunk in chunks.values():
                end = pipeline.store.window_end(space.id, chunk.id)
                if end is not None and alt.span.start >= chunk.start + end:
                    reason += (f"; the span lies beyond the encoder's {space.max_tokens}-token window "
                               f"in its chunk (the encoder read {end} of {chunk.end - chunk.start} characters)")
                    break
    return reason


def diagnoser_for(pipeline: Pipeline) -> Diagnoser:
    """The diagnoser of a pipeline's runs: it judges whether a claim states a required group with
    the pipeline's own support checker (the strongest it has), lexical without a verifier."""
    return Diagnoser(getattr(pipeline.verifier, "checker", None))


def diagnose_trace(pipeline: Pipeline, trace: Trace, resolver: EvidenceResolver | None = None, *,
                   evidence: QueryEvidence | None = None, view: TraceView | None = None) -> Diagnosis:
    """Diagnose one of ragdx's own traces, with the store's extra evidence for retrieval misses
    (``evidence`` and ``view``: already resolved, to save resolving them twice)."""
    query = trace.query
    if evidence is None:
        evidence = (resolver or EvidenceResolver(pipeline.store)).run(query)
    diagnosis = diagnoser_for(pipeline).run(query, evidence, view or view_of(trace, pipeline.store,
                                                                              pipeline.channels))
    lost = tuple(replace(l, reason=explain_retrieval(pipeline, query, evidence, l))
                 if l.stage is StageKind.RETRIEVAL else l for l in diagnosis.lost)
    return replace(diagnosis, lost=lost)

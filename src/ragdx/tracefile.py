"""Traces as JSON: every stage's kept and dropped items, with provenance, config and timing."""

from __future__ import annotations

from typing import Any

from ragdx.binding import EvidenceBinding
from ragdx.pipeline import StageOutput, Trace
from ragdx.types import Answer, Candidate, Context, Dropped, Marker, Ranked, Rewritten, Verification

TRACE_FORMAT = "ragdx.trace/1"


def _item(c: Candidate) -> dict[str, Any]:
    return {"id": c.chunk_id, "doc": c.doc_id, "version": c.version, "start": c.start, "end": c.end,
            "rank": c.rank, "score": c.score,
            "history": [{"stage": p.stage, "rank": p.rank, "score": p.score} for p in c.history]}


def _dropped(d: Dropped) -> dict[str, Any]:
    return {"id": d.chunk_id, "doc": d.doc_id, "version": d.version, "start": d.start, "end": d.end,
            "rank": d.rank, "reason": d.reason, "code": d.code.value}


def stage_to_dict(stage: StageOutput) -> dict[str, Any]:
    out: dict[str, Any] = {"name": stage.stage, "kind": stage.kind.value, "seconds": stage.seconds,
                           "config": dict(stage.config)}
    if isinstance(stage, Rewritten):
        def markers(ms: tuple[Marker, ...]) -> list[dict[str, str]]:
            return [{"kind": m.kind.value, "text": m.text} for m in ms]
        out |= {"original": stage.original, "route": stage.route, "searches": list(stage.searches),
                "rewrites": [{"text": r.text, "kind": r.kind.value, "search_only": True,
                              "hypothetical": r.hypothetical,
                              "diff": {"entities_added": list(r.diff.entities_added),
                                       "sub_questions": list(r.diff.sub_questions),
                                       "retained": markers(r.diff.retained), "dropped": markers(r.diff.dropped),
                                       "flags": list(r.diff.flags)}} for r in stage.rewrites],
                "slots": [{"name": s.name, "query": s.query, "state": s.state.value, "entity": s.entity,
                           "chunk": s.chunk_id, "doc": s.doc_id, "version": s.version, "value": s.value,
                           "note": s.note} for s in stage.slots],
                "hops": [{"hop": h.number, "slot": h.slot, "query": h.query, "candidates": list(h.candidates),
                          "rejected": list(h.rejected), "filled": h.filled, "progress": h.progress,
                          "reason": h.reason, "tokens": h.tokens, "seconds": h.seconds} for h in stage.hops],
                "stopped": stage.stopped}
    elif isinstance(stage, Ranked):
        out |= {"items": [_item(c) for c in stage.items], "dropped": [_dropped(d) for d in stage.dropped]}
    elif isinstance(stage, Context):
        out |= {"budget_tokens": stage.budget_tokens, "tokens": stage.tokens, "tokenizer": stage.tokenizer,
                "items": [{"id": u.id, "doc": u.doc_id, "version": u.version, "start": u.start,
                           "end": u.end, "rank": u.rank, "tokens": u.tokens, "truncated": u.truncated,
                           "title": u.title, "section": list(u.heading_path), "chunks": list(u.chunk_ids),
                           "header": list(u.header) if u.header else None, "flags": list(u.flags),
                           "flagged": [{"start": f.start, "end": f.end, "kind": f.kind.value, "match": f.match,
                                        "reason": f.reason} for f in u.flagged],
                           "text": u.text} for u in stage.units],
                "dropped": [_dropped(d) for d in stage.dropped],
                "conflicts": [{"units": list(c.units), "statements": list(c.statements),
                               "values": list(c.values)} for c in stage.conflicts]}
    elif isinstance(stage, Answer):
        out |= {"text": stage.text, "abstained": stage.abstained, "missing": list(stage.missing),
                "model": stage.model, "citations": list(stage.citations),
                "claims": [{"text": c.text, "citations": list(c.citations)} for c in stage.claims],
                "usage": {"prompt_tokens": stage.usage.prompt_tokens,
                          "completion_tokens": stage.usage.completion_tokens, "cost": stage.usage.cost,
                          "attempts": stage.usage.attempts, "seconds": stage.usage.seconds}}
    elif isinstance(stage, Verification):
        out |= {"checker": stage.checker, "claims": [
            {"text": c.claim.text, "citations": list(c.claim.citations), "verdict": c.verdict.value,
             "reason": c.reason, "support": [{"doc": p.doc_id, "version": p.version, "start": p.start,
                                              "end": p.end} for p in c.support]} for c in stage.checks]}
    return out


def trace_to_dict(trace: Trace, evidence: EvidenceBinding | None = None) -> dict[str, Any]:
    """A trace as JSON; with ``evidence`` (:func:`ragdx.binding.bind_evidence`), the document
    versions and spans its answer cites, so ``ragdx recheck`` can tell whether they still stand. A
    stage a cache served says ``"cached": true``, and ``cache`` names them with the cache's notes."""
    q = trace.query
    out = {"format": TRACE_FORMAT, "query_id": q.id, "question": q.question,
           "principal": {"user": q.principal.user, "groups": list(q.principal.groups)},
           "seconds": trace.seconds,
           "stages": [stage_to_dict(s) | ({"cached": True} if s.stage in trace.cached else {})
                      for s in trace.stages]}
    if trace.cached:
        out["cache"] = {"stages": list(trace.cached), "notes": list(trace.notes)}
    if evidence is not None:
        out["evidence"] = evidence.to_dict()
    return out

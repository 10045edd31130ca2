"""Traces as JSON: every stage's kept and dropped items, with provenance, config and timing."""

from __future__ import annotations

from typing import Any

from ragdx.pipeline import Trace
from ragdx.types import Candidate, Dropped, Ranked

TRACE_FORMAT = "ragdx.trace/1"


def _item(c: Candidate) -> dict[str, Any]:
    return {"id": c.chunk_id, "doc": c.doc_id, "version": c.version, "start": c.start, "end": c.end,
            "rank": c.rank, "score": c.score,
            "history": [{"stage": p.stage, "rank": p.rank, "score": p.score} for p in c.history]}


def _dropped(d: Dropped) -> dict[str, Any]:
    return {"id": d.chunk_id, "doc": d.doc_id, "version": d.version, "start": d.start, "end": d.end,
            "rank": d.rank, "reason": d.reason}


def stage_to_dict(stage: Ranked) -> dict[str, Any]:
    return {"name": stage.stage, "kind": stage.kind.value, "seconds": stage.seconds,
            "config": dict(stage.config), "items": [_item(c) for c in stage.items],
            "dropped": [_dropped(d) for d in stage.dropped]}


def trace_to_dict(trace: Trace) -> dict[str, Any]:
    q = trace.query
    return {"format": TRACE_FORMAT, "query_id": q.id, "question": q.question,
            "principal": {"user": q.principal.user, "groups": list(q.principal.groups)},
            "seconds": trace.seconds, "stages": [stage_to_dict(s) for s in trace.stages]}

"""Small OpenInference traces as OTLP/JSON requests, made from a query set's labels: for testing
``ragdx serve`` (and the load benchmark) without running a framework.

Each trace is a CHAIN root span (the question as input, the query id in its metadata unless
unlabelled), a RETRIEVER span whose documents hold each required group's first quote and one
distractor, with scores, and an LLM span answering the reference answer (an unanswerable
question: ``I don't know``)::

    body = json.dumps(request([trace(q, n) for n, q in enumerate(queries)]))
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any, Mapping, Sequence

__all__ = ["trace", "request", "trace_id", "any_value"]


def trace_id(n: int, salt: str = "") -> str:
    """A 32-hex-digit trace id, the same for the same ``n`` and ``salt``."""
    return hashlib.sha256(f"{salt}:{n}".encode()).hexdigest()[:32]


def any_value(v: Any) -> dict[str, Any]:
    """A value as an OTLP/JSON ``AnyValue`` (anything but a bool, number or string as JSON text)."""
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    return {"stringValue": v if isinstance(v, str) else json.dumps(v)}


def _span(tid: str, sid: str, parent: str | None, name: str, kind: str, start: int, attrs: Mapping[str, Any]) -> dict:
    span = {"traceId": tid, "spanId": sid, "name": name, "kind": 1, "startTimeUnixNano": str(start),
            "endTimeUnixNano": str(start + 1_000_000),
            "attributes": [{"key": k, "value": any_value(v)} for k, v in
                           {"openinference.span.kind": kind, **attrs}.items()]}
    if parent:
        span["parentSpanId"] = parent
    return span


def trace(query: Mapping[str, Any], n: int, *, labelled: bool = True, salt: str = "",
          score: float = 10.0, now: float | None = None) -> list[dict]:
    """One question's spans (OTLP/JSON), its trace id :func:`trace_id` of ``n``; ``score`` is the
    top retrieval score."""
    tid = trace_id(n, salt)
    sid = [tid[:12] + f"{k:04x}" for k in range(3)]
    start = int((time.time() if now is None else now) * 1e9)
    docs = []
    for g, group in enumerate(query.get("required") or []):
        alt = group[0]
        if "quote" in alt:
            docs.append((f"{alt['doc']}#{g}", alt["doc"], f"{alt['quote']}."))
    docs.append(("distractor#0", "policies/other.md", "Opening hours are nine to five on weekdays."))
    retrieved: dict[str, Any] = {"input.value": query["question"]}
    for k, (did, doc, text) in enumerate(docs):
        key = f"retrieval.documents.{k}.document"
        retrieved |= {f"{key}.id": did, f"{key}.content": text, f"{key}.score": round(score - k, 3),
                      f"{key}.metadata": json.dumps({"doc": doc})}
    answer = query.get("answer") or "" if query.get("answerable", True) else "I don't know."
    root_attrs: dict[str, Any] = {"input.value": query["question"], "output.value": answer}
    if labelled:
        root_attrs["metadata"] = json.dumps({"query_id": query["id"]})
    return [_span(tid, sid[0], None, "rag", "CHAIN", start, root_attrs),
            _span(tid, sid[1], sid[0], "retriever", "RETRIEVER", start + 10, retrieved),
            _span(tid, sid[2], sid[0], "llm", "LLM", start + 20, {
                "llm.output_messages.0.message.content": answer, "llm.token_count.prompt": 100,
                "llm.token_count.completion": len(answer.split())})]


def request(spans: Sequence[dict], service: str = "synthetic-rag") -> dict[str, Any]:
    """An OTLP/JSON ExportTraceServiceRequest holding ``spans`` (lists from :func:`trace`, joined)."""
    return {"resourceSpans": [{"resource": {"attributes": [{"key": "service.name",
                                                             "value": {"stringValue": service}}]},
                               "scopeSpans": [{"scope": {"name": "ragdx.testing"}, "spans": list(spans)}]}]}

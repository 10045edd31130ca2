"""OpenInference spans read as imported traces (docs/integrations.md, "OpenInference").

Two files are read, one JSON object per line, detected from the first line:

- ``openinference``: one span per line, as Arize Phoenix exports spans (``name``, ``context``
  with ``trace_id`` and ``span_id``, ``parent_id``, ``span_kind``, ``start_time``, ``end_time``,
  ``attributes`` flat or nested) and as ``ragdx export`` writes them; a line ``{"data": [...]}``
  (Phoenix's REST answer) holds several.
- ``otlp``: the OpenTelemetry collector's file exporter: an OTLP/JSON request per line
  (``resourceSpans`` > ``scopeSpans`` > ``spans``, attributes as ``{key, value}`` lists, times
  in ``startTimeUnixNano``).

Spans become stages by their OpenInference kind: RETRIEVER -> ``retrieval`` (``fusion`` when it
wraps other retrievers, as LangChain's EnsembleRetriever does), RERANKER -> ``rerank``, LLM ->
the answer. Other spans (CHAIN, ...) become a stage only through the component-name mapping
(:data:`DEFAULT_STAGES`, extended by the user: ``DocumentJoiner=fusion``); a prompt builder is
the context only when no other span is. A stage's items are its documents: a retriever's
``retrieval.documents``, a reranker's output (its input less its output is dropped), a mapped
component's output documents (or its input documents when it outputs none, as a prompt builder);
a document a later span names by id only takes its text and metadata from the retriever span
that returned it. The query id is read from span metadata (``metadata.query_id``, as
OpenInference's ``using_metadata`` sets it) or ``ragdx.query_id``; spans of one query in several
traces are merged. A stage's seconds are its span's; the answer's tokens are the LLM span's.

A document's metadata gives its evidence: ``doc`` (or ``doc_id``, ``source``, ``file_path``),
``version``, ``start`` (or ``split_idx_start``, ``start_index``) and ``end`` (else start plus the
text's length), ``status`` and ``readable``.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable, Mapping

from ragdx._jsonl import read_text
from ragdx.diagnosis.imports import json_objects, parse_trace, read_traces
from ragdx.diagnosis.locate import TraceView
from ragdx.errors import InputError
from ragdx.types import StageKind

__all__ = ["DEFAULT_STAGES", "FORMATS", "detect_format", "read_spans", "spans_to_traces", "read_any",
           "parse_stage_map", "document_item", "find_claims"]

FORMATS = ("auto", "trace", "openinference", "otlp")
DEFAULT_STAGES: Mapping[str, str] = {
    "DocumentJoiner": "fusion", "EnsembleRetriever": "fusion",
    "PromptBuilder": "context", "ChatPromptBuilder": "context",
}
_FALLBACK_CONTEXT = frozenset({"PromptBuilder", "ChatPromptBuilder"})  # the context only when no other span is
_DOC_KEYS, _START_KEYS = ("doc", "doc_id", "source", "file_path"), ("start", "split_idx_start", "start_index")
_HAYSTACK_DOCUMENT = re.compile(r"^Document\(id=([^,\s)]+)")
_SUFFIX = re.compile(r"\.(run|run_async|invoke|ainvoke|_run)$")


@dataclass(frozen=True, slots=True)
class SpanRecord:
    """One span: its ids, name, OpenInference kind, times (ns) and flat attributes."""

    line: int
    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    kind: str
    start: float | None
    end: float | None
    attributes: Mapping[str, Any]


def parse_stage_map(pairs: Iterable[str]) -> dict[str, str]:
    """``NAME=KIND`` pairs (``--stage``) as a mapping, each kind checked.

    Raises:
        InputError: naming the pair and the valid kinds.
    """
    out = {}
    for pair in pairs:
        name, sep, kind = pair.partition("=")
        if not sep or not name.strip():
            raise InputError(f"--stage {pair!r}: expected COMPONENT=KIND, e.g. DocumentJoiner=fusion")
        out[name.strip()] = StageKind.parse(kind.strip(), what=f"--stage {pair!r}: the kind").value
    return out


def _flatten(value: Any, prefix: str = "") -> Iterable[tuple[str, Any]]:
    """Nested attributes (Phoenix) as OpenInference's flat dotted keys; lists of objects indexed."""
    if isinstance(value, Mapping):
        for key, sub in value.items():
            yield from _flatten(sub, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(value, list) and any(isinstance(v, Mapping) for v in value):
        for n, sub in enumerate(value):
            yield from _flatten(sub, f"{prefix}.{n}")
    else:
        yield prefix, value


def _otlp_value(value: Mapping[str, Any]) -> Any:
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in value:
            return value[key]
    if "intValue" in value:
        return int(value["intValue"])
    if "arrayValue" in value:
        return [_otlp_value(v) for v in value["arrayValue"].get("values", [])]
    if "kvlistValue" in value:
        return {kv["key"]: _otlp_value(kv.get("value", {})) for kv in value["kvlistValue"].get("values", [])}
    return None


def _otlp_attributes(kvs: Any) -> dict[str, Any]:
    return {kv["key"]: _otlp_value(kv.get("value", {})) for kv in kvs or [] if isinstance(kv, dict) and "key" in kv}


def _time(value: Any) -> float | None:
    """Nanoseconds from an ISO time (Phoenix, OpenTelemetry's to_json) or a nanosecond count (OTLP)."""
    if value is None or value == "":
        return None
    if isinstance(value, (int, float)) or (isinstance(value, str) and value.isdigit()):
        return float(value)
    try:
        return datetime.fromisoformat(str(value)).timestamp() * 1e9
    except ValueError:
        return None


def _record(obj: Mapping[str, Any], line: int, file: str) -> SpanRecord:
    context = obj.get("context")
    if not isinstance(context, Mapping) or not context.get("span_id"):
        raise InputError("a span needs 'context' with 'trace_id' and 'span_id'", file=file, line=line,
                         field="context")
    attrs = dict(_flatten(obj.get("attributes") or {}))
    kind = str(attrs.get("openinference.span.kind") or obj.get("span_kind") or "UNKNOWN").upper()
    return SpanRecord(line, str(context.get("trace_id", "")), str(context["span_id"]),
                      obj.get("parent_id") or None, str(obj.get("name", "")), kind,
                      _time(obj.get("start_time")), _time(obj.get("end_time")), attrs)


def _otlp_records(obj: Mapping[str, Any], line: int) -> tuple[list[SpanRecord], str | None]:
    out, system = [], None
    for rs in obj.get("resourceSpans") or []:
        resource = _otlp_attributes((rs.get("resource") or {}).get("attributes"))
        for ss in (rs.get("scopeSpans") or rs.get("instrumentationLibrarySpans") or []):
            scope = str((ss.get("scope") or ss.get("instrumentationLibrary") or {}).get("name", ""))
            if scope.startswith("openinference.instrumentation."):
                system = system or scope.rsplit(".", 1)[1]
            for span in ss.get("spans") or []:
                attrs = _otlp_attributes(span.get("attributes"))
                out.append(SpanRecord(line, str(span.get("traceId", "")), str(span.get("spanId", "")),
                                      span.get("parentSpanId") or None, str(span.get("name", "")),
                                      str(attrs.get("openinference.span.kind", "UNKNOWN")).upper(),
                                      _time(span.get("startTimeUnixNano")), _time(span.get("endTimeUnixNano")),
                                      attrs))
        system = system or resource.get("service.name")
    return out, system


def detect_format(obj: Any) -> str:
    """``otlp``, ``openinference`` or ``trace``, from one parsed line."""
    if isinstance(obj, dict):
        if "resourceSpans" in obj:
            return "otlp"
        if "context" in obj and ("span_kind" in obj or "attributes" in obj) or isinstance(obj.get("data"), list):
            return "openinference"
    return "trace"


def read_spans(path: Path, format: str) -> tuple[list[SpanRecord], list[str], str | None]:
    """Every span of a span file; one message per line that is not one (skipped); the system the
    file names (an OpenInference instrumentation's scope, or the service)."""
    spans, bad, system = [], [], None
    for number, obj in json_objects(path, "spans"):
        try:
            if isinstance(obj, InputError):
                raise obj
            if format == "otlp":
                if "resourceSpans" not in obj:
                    raise InputError("not an OTLP/JSON line: no 'resourceSpans'", file=str(path), line=number)
                found, named = _otlp_records(obj, number)
                spans += found
                system = system or named
            else:
                for item in obj["data"] if isinstance(obj.get("data"), list) else [obj]:
                    if not isinstance(item, dict):
                        raise InputError("a span must be a JSON object", file=str(path), line=number)
                    spans.append(_record(item, number, str(path)))
        except InputError as exc:
            bad.append(f"{exc}; line skipped")
    return spans, bad, system


# ---- spans to imported traces ----

def _json(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _metadata(attrs: Mapping[str, Any]) -> dict[str, Any]:
    meta = _json(attrs.get("metadata"))
    out = dict(meta) if isinstance(meta, dict) else {}
    out.update({k[len("metadata."):]: v for k, v in attrs.items() if k.startswith("metadata.")})
    return out


def _query_id(spans: list[SpanRecord]) -> str | None:
    for span in spans:
        qid = span.attributes.get("ragdx.query_id") or _metadata(span.attributes).get("query_id")
        if qid not in (None, ""):
            return str(qid)
    return None


def document_item(text: str | None, meta: Mapping[str, Any], doc_id: Any = None, score: Any = None) -> dict[str, Any]:
    """An imported-trace item from a framework document's text, metadata, id and score (the one
    mapping of metadata to evidence, shared by the span reader and the framework adapters)."""
    meta = meta if isinstance(meta, Mapping) else {}
    item: dict[str, Any] = {}
    doc = next((meta[k] for k in _DOC_KEYS if isinstance(meta.get(k), str)), None)
    start = next((meta[k] for k in _START_KEYS if isinstance(meta.get(k), int) and not isinstance(meta.get(k), bool)),
                 None)
    end = meta.get("end") if isinstance(meta.get("end"), int) else (
        start + len(text) if start is not None and text else None)
    ident = meta.get("chunk_id") or doc_id or (f"{doc}[{start}:{end}]" if doc and start is not None else None)
    if ident is None and text is not None:
        ident = f"{doc or 'text'}#{hashlib.sha256(text.encode()).hexdigest()[:12]}"
    if ident is not None:
        item["id"] = str(ident)
    if doc is not None:
        item["doc"] = doc
        if start is not None and end is not None and 0 <= start < end:
            item |= {"start": start, "end": end}
        if isinstance(meta.get("version"), str):
            item["version"] = meta["version"]
    if text is not None:
        item["text"] = text
    if isinstance(meta.get("rank"), int) and meta["rank"] >= 1:
        item["rank"] = meta["rank"]
    if isinstance(score, (int, float)) and not isinstance(score, bool):
        item["score"] = score
    if meta.get("status") in ("current", "superseded", "expired"):
        item["status"] = meta["status"]
    if isinstance(meta.get("readable"), bool):
        item["readable"] = meta["readable"]
    return item


def _documents(attrs: Mapping[str, Any], prefix: str) -> list[dict[str, Any]]:
    """The documents OpenInference lists under ``PREFIX.N.document.*``."""
    found: dict[int, dict[str, Any]] = {}
    pattern = re.compile(re.escape(prefix) + r"\.(\d+)\.document\.(\w+)$")
    for key, value in attrs.items():
        m = pattern.match(key)
        if m:
            found.setdefault(int(m.group(1)), {})[m.group(2)] = value
    out = []
    for n in sorted(found):
        d = found[n]
        out.append(document_item(d.get("content"), _json(d.get("metadata")) or {}, d.get("id"), d.get("score")))
    return out


def _value_documents(value: Any, known: Mapping[str, dict[str, Any]]) -> list[dict[str, Any]] | None:
    """Documents in a component's input or output value (JSON): LangChain's serialised documents
    (``page_content``, ``metadata``), Haystack's (``content``, ``meta``, or the text
    ``Document(id=...)``, whose text and metadata come from the span that returned it)."""
    value = _json(value)
    if isinstance(value, dict):
        for key in ("documents", "output", "input", "context"):
            if isinstance(value.get(key), list):
                return _value_documents(value[key], known)
        return None
    if not isinstance(value, list):
        return None
    flat: list[Any] = []
    for d in value:  # a joiner receives lists of documents
        flat.extend(d if isinstance(d, list) else [d])
    out = []
    for d in flat:
        if isinstance(d, str) and (m := _HAYSTACK_DOCUMENT.match(d)):
            out.append(dict(known.get(m.group(1)) or {"id": m.group(1)}))
        elif isinstance(d, dict) and ("page_content" in d or "content" in d):
            text = d.get("page_content", d.get("content"))
            item = document_item(text if isinstance(text, str) else None, d.get("metadata") or d.get("meta") or {},
                         d.get("id"), d.get("score"))
            out.append(known.get(item.get("id", "")) or item)
        else:
            return None
    return out


def _component(span: SpanRecord) -> str:
    return _SUFFIX.sub("", span.name)


def _kind(span: SpanRecord, stage_map: Mapping[str, str], children: Mapping[str, list[SpanRecord]]) -> str | None:
    given = span.attributes.get("ragdx.stage.kind")
    if isinstance(given, str):
        return given
    name = _component(span)
    if name in stage_map:
        return stage_map[name]
    if span.kind == "RETRIEVER":
        nested = any(c.kind == "RETRIEVER" for c in _descendants(span, children))
        return "fusion" if nested else "retrieval"
    if span.kind == "RERANKER":
        return "rerank"
    if span.kind == "LLM" and "llm.prompt_template" not in span.attributes and not any(
            k.startswith("llm.prompt_template.") for k in span.attributes):
        return "generation"
    if span.kind == "EVALUATOR":
        return "citation"
    return None


def _descendants(span: SpanRecord, children: Mapping[str, list[SpanRecord]]) -> list[SpanRecord]:
    out, todo = [], list(children.get(span.span_id, []))
    while todo:
        s = todo.pop()
        out.append(s)
        todo += children.get(s.span_id, [])
    return out


def _seconds(span: SpanRecord) -> float | None:
    given = span.attributes.get("ragdx.seconds")
    if isinstance(given, (int, float)) and not isinstance(given, bool) and given >= 0:
        return float(given)
    if span.start is not None and span.end is not None and span.end >= span.start:
        return (span.end - span.start) / 1e9
    return None


def _answer(span: SpanRecord) -> dict[str, Any]:
    a = span.attributes
    text = a.get("llm.output_messages.0.message.content")
    if text is None:
        out = _json(a.get("output.value"))
        replies = out.get("replies") if isinstance(out, dict) else None
        text = replies[0] if isinstance(replies, list) and replies and isinstance(replies[0], str) else (
            out if isinstance(out, str) else "")
    answer: dict[str, Any] = {"text": str(text), "abstained": bool(a.get("ragdx.abstained", False)),
                              "usage": {"prompt_tokens": int(a.get("llm.token_count.prompt") or 0),
                                        "completion_tokens": int(a.get("llm.token_count.completion") or 0)}}
    seconds = _seconds(span)
    if seconds is not None:
        answer["seconds"] = seconds
    claims = _json(a.get("ragdx.claims"))
    if not isinstance(claims, list):  # a generator that cites puts its claims in its reply's metadata
        claims = find_claims(_json(a.get("output.value")))
    if isinstance(claims, list):
        answer["claims"] = claims
    return answer


def find_claims(value: Any) -> list | None:
    """The first ``claims`` list anywhere in a generator's output (a Haystack reply's ``meta``, a
    LangChain message's ``response_metadata``): how a generator that cites says what it claims."""
    if isinstance(value, Mapping):
        if isinstance(value.get("claims"), list):
            return value["claims"]
        values: Iterable[Any] = value.values()
    elif isinstance(value, (list, tuple)):
        values = value
    else:
        return None
    for v in values:
        found = find_claims(v)
        if found is not None:
            return found
    return None


def _trace(spans: list[SpanRecord], stage_map: Mapping[str, str], query_id: str, system: str | None) -> dict:
    """One query's imported trace (the documented JSONL format) from its spans."""
    spans = sorted(spans, key=lambda s: (s.start if s.start is not None else float("inf"), s.line))
    children: dict[str, list[SpanRecord]] = {}
    for s in spans:
        if s.parent_id:
            children.setdefault(s.parent_id, []).append(s)
    kinds = {s.span_id: _kind(s, stage_map, children) for s in spans}
    if any(kinds[s.span_id] == "context" and _component(s) not in _FALLBACK_CONTEXT for s in spans):
        for s in spans:  # a prompt builder is the context only when no other span is
            if kinds[s.span_id] == "context" and _component(s) in _FALLBACK_CONTEXT:
                kinds[s.span_id] = None
    known: dict[str, dict[str, Any]] = {}
    stages, answer, verdicts = [], None, None
    for span in spans:
        kind = kinds[span.span_id]
        if kind is None:
            continue
        a = span.attributes
        name = str(a.get("ragdx.stage") or _component(span))
        if kind == "generation":
            answer = _answer(span)
            continue
        if kind == "citation":
            verdicts = _json(a.get("ragdx.claims"))
            continue
        if span.kind == "RERANKER" and "ragdx.stage" not in a:
            items, given = _documents(a, "reranker.output_documents"), _documents(a, "reranker.input_documents")
        elif span.kind in ("RETRIEVER", "RERANKER"):
            items = _documents(a, "retrieval.documents" if span.kind == "RETRIEVER" else "reranker.output_documents")
            given = []
        else:
            given = _value_documents(a.get("input.value"), known) or []
            items = _value_documents(a.get("output.value"), known)
            items = given if items is None else items
        for item in items + given:
            if "id" in item:
                known.setdefault(item["id"], item)
        stage: dict[str, Any] = {"name": name, "kind": kind, "items": items}
        kept = {i.get("id") for i in items}
        dropped = _json(a.get("ragdx.dropped"))
        if isinstance(dropped, list):
            stage["dropped"] = [dict(known.get(str(d.get("id")), {}), **d) for d in dropped if isinstance(d, dict)]
        elif given:
            stage["dropped"] = [dict(i, reason=f"not kept by {name}" + (f" ({i['status']})" if i.get("status") not in
                                                                        (None, "current") else ""))
                                for i in given if i.get("id") not in kept]
        seconds = _seconds(span)
        if seconds is not None:
            stage["seconds"] = seconds
        stages.append(stage)
    trace: dict[str, Any] = {"query_id": query_id, "stages": stages}
    if system:
        trace["system"] = system
    if answer is not None:
        if isinstance(verdicts, list) and verdicts:
            answer["claims"] = verdicts
        answer["claims"] = [{"text": c.get("text", ""), "citations": c.get("citations", []),
                             **({"supported": c["verdict"] == "supported"} if isinstance(c.get("verdict"), str) else
                                {"supported": c["supported"]} if isinstance(c.get("supported"), bool) else {}),
                             **({"support": c["support"]} if "support" in c else {})}
                            for c in answer.get("claims", []) if isinstance(c, dict)]
        if not answer["claims"]:
            del answer["claims"]
        trace["answer"] = answer
    return trace


def spans_to_traces(spans: list[SpanRecord], stage_map: Mapping[str, str] | None = None,
                    system: str | None = None, file: str = "spans") -> tuple[list[tuple[int, dict]], list[str]]:
    """Imported traces (one dict per query, with the line of its first span) from spans, and one
    message per trace that names no query id (skipped)."""
    mapping = {**DEFAULT_STAGES, **(stage_map or {})}
    system = system or next((str(s.attributes["ragdx.system"]) for s in spans if s.attributes.get("ragdx.system")),
                            None)
    by_trace: dict[str, list[SpanRecord]] = {}
    for span in spans:
        by_trace.setdefault(span.trace_id, []).append(span)
    by_query: dict[str, list[SpanRecord]] = {}
    bad = []
    for trace_id, members in by_trace.items():
        qid = _query_id(sorted(members, key=lambda s: (s.parent_id is not None, s.line)))
        if qid is None:
            bad.append(f"{file}:{members[0].line}: trace {trace_id} names no query id (set span metadata "
                       "{\"query_id\": ...}, e.g. with openinference.instrumentation.using_metadata, or the "
                       "attribute ragdx.query_id); trace skipped")
            continue
        by_query.setdefault(qid, []).extend(members)
    out = [(min(s.line for s in members), _trace(members, mapping, qid, system))
           for qid, members in by_query.items()]
    return sorted(out, key=lambda t: t[0]), bad


def read_any(path: Path, *, format: str = "auto", stage_map: Mapping[str, str] | None = None
             ) -> tuple[list[tuple[int, TraceView]], list[str], str | None]:
    """Traces from a file of imported traces or of spans (``format``: one of :data:`FORMATS`).

    Returns:
        The trace views with their lines, one message per line or trace skipped, and the
        system's name when the file says it.
    """
    if format not in FORMATS:
        raise InputError(f"--format must be one of {', '.join(FORMATS)}, not {format!r}")
    if format == "auto":
        text = read_text(path, what="traces")
        first = next((line for line in text.splitlines() if line.strip()), "")
        try:
            format = detect_format(json.loads(first))
        except (ValueError, RecursionError):  # not JSON (or nested too deeply): read as traces, said there
            format = "trace"
    if format == "trace":
        views, bad = read_traces(path)
        return views, bad, next((v.system for _, v in views if v.system), None)
    spans, bad, system = read_spans(path, format)
    traces, unnamed = spans_to_traces(spans, stage_map, system, str(path))
    system = next((t.get("system") for _, t in traces if t.get("system")), system)
    views = []
    for line, trace in traces:
        try:
            views.append((line, parse_trace(trace, str(path), line)))
        except InputError as exc:
            bad.append(f"{exc}; trace skipped")
    return views, bad + unnamed, system

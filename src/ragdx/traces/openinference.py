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

A document's metadata gives its evidence (:mod:`ragdx.traces.documents`).

What is read is checked (docs/formats.md, "Limits"): every OTLP level and value type and every
OpenInference field ragdx uses, a line that fails being skipped with a message naming its path
(``resourceSpans[0].scopeSpans[1].spans[3].attributes[2].value.intValue``); JSON carried in an
attribute's text at most 64 levels deep; parent links that lead to a root (a span that is its
own parent, or a cycle, is an error naming the span ids). Reading is linear in the file.
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from ragdx._jsonl import loads_embedded, read_text
from ragdx.traces.documents import document_item, kind_by_name
from ragdx.traces.jsonl import json_objects, parse_trace, read_traces
from ragdx.diagnosis.locate import TraceView
from ragdx.errors import InputError
from ragdx.text import is_abstention
from ragdx.types import StageKind

__all__ = ["DEFAULT_STAGES", "FORMATS", "infer_stage_kinds", "inline_claims", "SpanRecord", "detect_format", "read_spans", "otlp_spans", "spans_to_traces",
           "read_any", "parse_stage_map", "document_item", "find_claims", "check_parents", "query_id_of",
           "find_question"]

FORMATS = ("auto", "trace", "openinference", "otlp", "ragas", "deepeval")
DATASETS = ("ragas", "deepeval")  # evaluation sets whose rows hold a system's output (ragdx.label.readers)
DEFAULT_STAGES: Mapping[str, str] = {
    "DocumentJoiner": "fusion", "EnsembleRetriever": "fusion",
    "PromptBuilder": "context", "ChatPromptBuilder": "context",
}
_FALLBACK_CONTEXT = frozenset({"PromptBuilder", "ChatPromptBuilder"})  # the context only when no other span is
_HAYSTACK_DOCUMENT = re.compile(r"^Document\(id=([^,\s)]+)")
# LlamaIndex's node as its instrumentor writes it in a component's input or output
_LLAMA_NODE = re.compile(r"^<?NodeWithScore\(node=\w+\(id_=(.*)\), score=([^)]*)\)>?$")
# how LlamaIndex names a response synthesizer's entry point: its output is the answer
_SYNTHESIZE = re.compile(r"\.a?synthesize$")
# a span named after its component's method ("InMemoryBM25Retriever.run", "StatusFilter._postprocess_nodes",
# "QueryFusionRetriever.retrieve"): the component is the name before it
_SUFFIX = re.compile(r"\._*[a-z][a-z0-9_]*$")
# the attributes ragdx checks when a span is read: those whose text is JSON (OpenInference writes
# these as JSON strings), token counts, a document's content, ids
_CHECKED = re.compile(r"^(?P<json>metadata|input\.value|output\.value|ragdx\.claims|ragdx\.dropped)$"
                      r"|\.document\.(?:(?P<json_>metadata)|(?P<content>content)|(?P<id>id))$"
                      r"|^(?P<tokens>llm\.token_count\.\w+)$|^(?P<id_>ragdx\.query_id|metadata\.query_id)$")
_INTEGER = re.compile(r"-?[0-9]{1,19}")
_INT64, _UINT64 = 2 ** 63, 2 ** 64


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


class _Place:
    """Where a value sits in a span file (file, line, path), to name it in an error; the path is
    spelt only then (``resourceSpans[0].scopeSpans[1].spans[3]``)."""

    __slots__ = ("file", "line", "parent", "step")

    def __init__(self, file: str, line: int, parent: "_Place | None" = None, step: str | int = "") -> None:
        self.file, self.line, self.parent, self.step = file, line, parent, step

    def at(self, step: str | int) -> "_Place":
        return _Place(self.file, self.line, self, step)

    @property
    def path(self) -> str:
        steps, place = [], self
        while place is not None and place.parent is not None:
            steps.append(place.step)
            place = place.parent
        return "".join(f"[{s}]" if isinstance(s, int) else f".{s}" if n else s
                       for n, s in enumerate(reversed(steps)))

    def error(self, message: str) -> InputError:
        return InputError(message, file=self.file, line=self.line, field=self.path or None)


def _got(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _objects(value: Any, place: _Place) -> list[tuple[dict[str, Any], _Place]]:
    """A list of JSON objects (absent or null is an empty list), each with its place."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise place.error(f"expected a list of objects, got {_got(value)}")
    out = []
    for n, item in enumerate(value):
        if not isinstance(item, dict):
            raise place.at(n).error(f"expected an object, got {_got(item)}")
        out.append((item, place.at(n)))
    return out


def _object(value: Any, place: _Place) -> dict[str, Any]:
    """A JSON object (absent or null is an empty one)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise place.error(f"expected an object, got {_got(value)}")
    return value


def _string(obj: Mapping[str, Any], key: str, place: _Place, default: str = "") -> str:
    value = obj.get(key)
    if value is None:
        return default
    if not isinstance(value, str):
        raise place.at(key).error(f"expected a string, got {_got(value)}")
    return value


def _otlp_value(value: Any, place: _Place) -> Any:
    """One OTLP ``AnyValue``, its type checked (an ``intValue`` is an integer or its decimal text)."""
    value = _object(value, place)
    if "stringValue" in value or "bytesValue" in value:
        key = "stringValue" if "stringValue" in value else "bytesValue"
        return _string(value, key, place)
    if "boolValue" in value:
        if not isinstance(value["boolValue"], bool):
            raise place.at("boolValue").error(f"{_got(value['boolValue'])} is not true or false")
        return value["boolValue"]
    if "intValue" in value:
        raw = value["intValue"]
        number = raw if isinstance(raw, int) and not isinstance(raw, bool) else (
            int(raw) if isinstance(raw, str) and _INTEGER.fullmatch(raw) else None)
        if number is None or not -_INT64 <= number < _INT64:
            raise place.at("intValue").error(f"{_got(raw)} is not an integer" + (
                " of 64 bits" if number is not None else ""))
        return number
    if "doubleValue" in value:
        raw = value["doubleValue"]
        if isinstance(raw, (int, float)) and not isinstance(raw, bool):
            return raw
        raise place.at("doubleValue").error(f"{_got(raw)} is not a number")
    if "arrayValue" in value:
        inner = place.at("arrayValue")
        values = _object(value["arrayValue"], inner).get("values")
        if values is None:
            return []
        if not isinstance(values, list):
            raise inner.at("values").error(f"expected a list of values, got {_got(values)}")
        return [_otlp_value(v, inner.at("values").at(n)) for n, v in enumerate(values)]
    if "kvlistValue" in value:
        inner = place.at("kvlistValue")
        return _otlp_attributes(_object(value["kvlistValue"], inner).get("values"), inner.at("values"))[0]
    return None  # an empty value (OTLP allows one)


def _otlp_attributes(kvs: Any, place: _Place) -> tuple[dict[str, Any], dict[str, _Place]]:
    """OTLP ``{key, value}`` pairs as a mapping, and each key's value's place in the file."""
    out, paths = {}, {}
    for kv, at in _objects(kvs, place):
        key = kv.get("key")
        if not isinstance(key, str):
            raise at.at("key").error(f"expected a string, got {_got(key)}")
        paths[key] = at.at("value")
        out[key] = _otlp_value(kv.get("value"), paths[key])
    return out, paths


def _time(value: Any, place: _Place) -> float | None:
    """Nanoseconds from an ISO time (Phoenix, OpenTelemetry's to_json) or a nanosecond count (OTLP)."""
    if value is None or value == "":
        return None
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 20:
        value = int(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if 0 <= value < _UINT64:
            return float(value)
        raise place.error(f"{_got(value)} is not a count of nanoseconds (0 to 2**64)")
    if isinstance(value, str):
        with contextlib.suppress(ValueError, OverflowError, OSError):  # not a time: said below
            return datetime.fromisoformat(value).timestamp() * 1e9
    raise place.error(f"{_got(value)} is not an ISO 8601 time nor a count of nanoseconds")


def _is_id(value: Any) -> bool:
    return isinstance(value, (str, int)) and not isinstance(value, bool)


def _checked(attrs: dict[str, Any], where: Callable[[str], _Place]) -> dict[str, Any]:
    """A span's attributes with the JSON some of them carry as text read (held to a line's rules),
    and the ones ragdx reads checked: token counts are non-negative integers, a document's
    content is text, ids are strings or integers. ``where(key)`` is the attribute's place."""
    out = dict(attrs)
    for key, value in attrs.items():
        m = _CHECKED.search(key)
        if m is None or value is None:
            continue
        kind = m.lastgroup.rstrip("_")  # a name a group of the pattern has twice ends in _ once
        if kind == "json" and isinstance(value, str):
            place = where(key)
            value = out[key] = loads_embedded(value, file=place.file, line=place.line, field=place.path)
            meta = value.get("query_id") if key == "metadata" and isinstance(value, dict) else None
            if meta is not None and not _is_id(meta):
                raise where(key).at("query_id").error(f"an id must be a string or an integer, got {_got(meta)}")
        elif kind == "tokens" and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise where(key).error(f"{_got(value)} is not a token count (a non-negative integer)")
        elif kind == "content" and not isinstance(value, str):
            raise where(key).error(f"a document's content must be a string, got {_got(value)}")
        elif kind == "id" and not _is_id(value):
            raise where(key).error(f"an id must be a string or an integer, got {_got(value)}")
    given = out.get("ragdx.stage.kind")
    if given is not None and given not in {k.value for k in StageKind}:
        raise where("ragdx.stage.kind").error(
            f"{_got(given)} is not a stage kind (one of {', '.join(k.value for k in StageKind)})")
    return out


def _record(obj: Mapping[str, Any], place: _Place) -> SpanRecord:
    context = obj.get("context")
    if not isinstance(context, Mapping) or not context.get("span_id"):
        raise place.at("context").error("a span needs 'context' with 'trace_id' and 'span_id'")
    ctx = place.at("context")
    span_id, trace_id = _string(context, "span_id", ctx), _string(context, "trace_id", ctx)
    raw = _object(obj.get("attributes"), place.at("attributes"))
    attrs = _checked(dict(_flatten(raw)), lambda key: place.at("attributes").at(key))
    kind = attrs.get("openinference.span.kind") or _string(obj, "span_kind", place) or "UNKNOWN"
    return SpanRecord(place.line, trace_id, span_id, _string(obj, "parent_id", place) or None,
                      _string(obj, "name", place), str(kind).upper(), _time(obj.get("start_time"), place.at("start_time")),
                      _time(obj.get("end_time"), place.at("end_time")), attrs)


def _otlp_records(obj: Mapping[str, Any], place: _Place) -> tuple[list[SpanRecord], str | None]:
    out, system = [], None
    for rs, rs_at in _objects(obj.get("resourceSpans"), place.at("resourceSpans")):
        resource_at = rs_at.at("resource")
        resource, _ = _otlp_attributes(_object(rs.get("resource"), resource_at).get("attributes"),
                                       resource_at.at("attributes"))
        key = "scopeSpans" if rs.get("scopeSpans") is not None else "instrumentationLibrarySpans"
        for ss, ss_at in _objects(rs.get(key), rs_at.at(key)):
            scope_key = "scope" if ss.get("scope") is not None else "instrumentationLibrary"
            scope = _string(_object(ss.get(scope_key), ss_at.at(scope_key)), "name", ss_at.at(scope_key))
            if scope.startswith("openinference.instrumentation."):
                system = system or scope.rsplit(".", 1)[1]
            for span, at in _objects(ss.get("spans"), ss_at.at("spans")):
                attrs, paths = _otlp_attributes(span.get("attributes"), at.at("attributes"))
                attrs = _checked(attrs, paths.__getitem__)
                out.append(SpanRecord(place.line, _string(span, "traceId", at), _string(span, "spanId", at),
                                      _string(span, "parentSpanId", at) or None, _string(span, "name", at),
                                      str(attrs.get("openinference.span.kind") or "UNKNOWN").upper(),
                                      _time(span.get("startTimeUnixNano"), at.at("startTimeUnixNano")),
                                      _time(span.get("endTimeUnixNano"), at.at("endTimeUnixNano")), attrs))
        service = resource.get("service.name")
        system = system or (str(service) if service not in (None, "") else None)
    return out, system


def otlp_spans(obj: Any, source: str, number: int = 1) -> tuple[list[SpanRecord], str | None]:
    """The spans of one OTLP/JSON ``ExportTraceServiceRequest`` (an object, as a collector file
    line or an OTLP/HTTP request body holds it), checked as a span file's line is, and the
    system it names.

    Raises:
        InputError: naming ``source``, ``number`` (as the line) and the path of the bad value.
    """
    place = _Place(source, number)
    if not isinstance(obj, dict) or "resourceSpans" not in obj:
        raise InputError("not an OTLP/JSON trace request: no 'resourceSpans'", file=source, line=number)
    return _otlp_records(obj, place)


def detect_format(obj: Any) -> str:
    """``otlp``, ``openinference``, ``ragas``, ``deepeval`` or ``trace``, from one parsed line."""
    if isinstance(obj, dict):
        if "user_input" in obj:
            return "ragas"
        if "input" in obj and "actual_output" in obj:
            return "deepeval"
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
        place = _Place(str(path), number)
        try:
            if isinstance(obj, InputError):
                raise obj
            if format == "otlp":
                if "resourceSpans" not in obj:
                    raise InputError("not an OTLP/JSON line: no 'resourceSpans'", file=str(path), line=number)
                found, named = _otlp_records(obj, place)
                spans += found
                system = system or named
            else:
                many = isinstance(obj.get("data"), list)
                for n, item in enumerate(obj["data"] if many else [obj]):
                    at = place.at("data").at(n) if many else place
                    if not isinstance(item, dict):
                        raise at.error(f"a span must be a JSON object, got {_got(item)}")
                    spans.append(_record(item, at))
        except InputError as exc:
            bad.append(f"{exc}; line skipped")
    return spans, bad, system


def _node(span: SpanRecord, span_id: str | None = None) -> tuple[str, str]:
    return span.trace_id, span.span_id if span_id is None else span_id


def check_parents(spans: list[SpanRecord], file: str) -> None:
    """Refuse parent links that do not lead to a root: a span that is its own parent, or spans
    whose parents form a cycle (followed without recursion; each span visited once).

    Raises:
        InputError: naming the file, the line of a span of the cycle and the span ids in it.
    """
    parents: dict[tuple[str, str], list[tuple[str, str]]] = {}
    first: dict[tuple[str, str], SpanRecord] = {}
    for s in spans:
        first.setdefault(_node(s), s)
        if s.parent_id:
            parents.setdefault(_node(s), []).append(_node(s, s.parent_id))
    done: set[tuple[str, str]] = set()
    for start in parents:
        if start in done:
            continue
        path, on_path = [start], {start: 0}
        todo = [iter(parents.get(start, ()))]
        while todo:
            parent = next(todo[-1], None)
            if parent is None:
                node = path.pop()
                del on_path[node]
                done.add(node)
                todo.pop()
                continue
            if parent in on_path:
                cycle = path[on_path[parent]:]
                span = first[cycle[0]]
                ids = [node[1] for node in cycle]
                if len(ids) == 1:
                    raise InputError(f"span {ids[0]!r} (trace {span.trace_id!r}) is its own parent; parent links "
                                     "must lead to a root span", file=file, line=span.line)
                lines = sorted({first[node].line for node in cycle})
                raise InputError(f"the parent links of spans {' -> '.join(map(repr, ids + ids[:1]))} (trace "
                                 f"{span.trace_id!r}, line{'s' if len(lines) > 1 else ''} "
                                 f"{', '.join(map(str, lines))}) form a cycle; parent links must lead to a root span",
                                 file=file, line=span.line)
            if parent in done:
                continue
            on_path[parent] = len(path)
            path.append(parent)
            todo.append(iter(parents.get(parent, ())))


# ---- spans to imported traces ----

def _metadata(attrs: Mapping[str, Any]) -> dict[str, Any]:
    meta = attrs.get("metadata")
    out = dict(meta) if isinstance(meta, dict) else {}
    out.update({k[len("metadata."):]: v for k, v in attrs.items() if k.startswith("metadata.")})
    return out


def query_id_of(spans: Iterable[SpanRecord]) -> str | None:
    """The query id the spans name (``ragdx.query_id``, or ``query_id`` in span metadata), if any."""
    return _query_id(sorted(spans, key=lambda s: (s.parent_id is not None, s.line)))


def _strings(value: Any, depth: int = 0) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif depth < 8 and isinstance(value, Mapping):
        for v in value.values():
            yield from _strings(v, depth + 1)
    elif depth < 8 and isinstance(value, list):
        for v in value:
            yield from _strings(v, depth + 1)


def find_question(spans: Iterable[SpanRecord], questions: Mapping[str, str]) -> str | None:
    """The key of the first question (``questions``: exact text -> key) that a span's input
    (``input.value``, or a string in its JSON) carries whole, ignoring surrounding whitespace;
    root spans first."""
    for span in sorted(spans, key=lambda s: (s.parent_id is not None, s.start or 0.0, s.line)):
        for text in _strings(span.attributes.get("input.value")):
            found = questions.get(text.strip())
            if found is not None:
                return found
    return None


def _query_id(spans: list[SpanRecord]) -> str | None:
    for span in spans:
        qid = span.attributes.get("ragdx.query_id") or _metadata(span.attributes).get("query_id")
        if qid not in (None, ""):
            return str(qid)
    return None


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
        out.append(document_item(d.get("content"), d.get("metadata") or {}, d.get("id"), d.get("score")))
    return out


def _value_documents(value: Any, known: Mapping[str, dict[str, Any]]) -> list[dict[str, Any]] | None:
    """Documents in a component's input or output value (JSON): LangChain's serialised documents
    (``page_content``, ``metadata``), Haystack's (``content``, ``meta``, or the text
    ``Document(id=...)``, whose text and metadata come from the span that returned it)."""
    if isinstance(value, dict):
        for key in ("documents", "nodes", "source_nodes", "output", "input", "context"):
            if isinstance(value.get(key), list):
                return _value_documents(value[key], known)
        for key in ("kwargs", "template_variables"):  # a prompt builder's variables (Haystack)
            if isinstance(value.get(key), dict):
                found = _value_documents(value[key], known)
                if found is not None:
                    return found
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
        elif isinstance(d, str) and (m := _LLAMA_NODE.match(d)):
            item = dict(known.get(m.group(1)) or {"id": m.group(1)})
            with contextlib.suppress(ValueError):
                item["score"] = float(m.group(2))  # this component's score, not the retriever's
            item.pop("rank", None)
            out.append(item)
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


def _kind(span: SpanRecord, stage_map: Mapping[str, str], wrapping: set[tuple[str, str]],
          inner: set[tuple[str, str]] = frozenset()) -> str | None:
    given = span.attributes.get("ragdx.stage.kind")
    if isinstance(given, str):
        return given
    name = _component(span)
    if name in stage_map or span.name in stage_map:
        return stage_map.get(span.name) or stage_map[name]
    if span.kind == "RETRIEVER":
        if _node(span) in inner:
            return None
        return StageKind.FUSION if _node(span) in wrapping else StageKind.RETRIEVAL
    if span.kind == "RERANKER":
        return StageKind.RERANK
    if span.kind == "LLM" and "llm.prompt_template" not in span.attributes and not any(
            k.startswith("llm.prompt_template.") for k in span.attributes):
        return StageKind.GENERATION
    if span.kind == "EVALUATOR":
        return StageKind.CITATION
    return None


def _behaviour(span: SpanRecord) -> str | None:
    """What a component did to the documents it was given, from its input and output documents:
    ``merge`` (several lists in, one out), ``reorder`` (the same documents in another order),
    ``shorten`` (a text cut short), ``filter`` (documents left out between kept ones, in order),
    ``cut`` (a leading part kept), ``same`` (all kept, in order); None when its input or output holds no
    documents, or it returns documents it was not given."""
    value = span.attributes.get("input.value")
    given = _value_documents(value, {})
    kept = _value_documents(span.attributes.get("output.value"), {})
    if given is None or kept is None or not given:
        return None
    raw = value.get("documents") if isinstance(value, dict) else value
    if isinstance(raw, list) and sum(isinstance(d, list) and bool(d) for d in raw) >= 2:
        return "merge"
    ids_in, ids_out = [d.get("id") for d in given], [d.get("id") for d in kept]
    if not set(ids_out) <= set(ids_in):
        return None
    texts = {d.get("id"): d.get("text") for d in given}
    if any(isinstance(d.get("text"), str) and isinstance(texts.get(d.get("id")), str)
           and len(d["text"]) < len(texts[d["id"]]) for d in kept):
        return "shorten"
    if ids_out == ids_in:
        return "same"
    if set(ids_out) == set(ids_in):
        return "reorder"
    order = [i for i in ids_in if i in set(ids_out)]
    if order != ids_out:
        return "reorder"
    return "cut" if ids_out == ids_in[:len(ids_out)] else "filter"


_BY_BEHAVIOUR = {"merge": StageKind.FUSION, "shorten": StageKind.CONTEXT, "filter": StageKind.GOVERNANCE,
                 "reorder": StageKind.RERANK, "cut": StageKind.CONTEXT}  # the strongest sign first


def infer_stage_kinds(spans: Iterable[SpanRecord], known: Mapping[str, str]) -> dict[str, str]:
    """The stage kind of each component that passes documents on (its spans' input and output
    both hold documents) and that neither its span kind nor ``known`` names: by its name when
    that says what it does (:func:`~ragdx.traces.documents.kind_by_name`: "StatusFilter" is governance, "ContextCut"
    the context), else by the strongest sign of what its spans did to the documents over the
    whole file: several lists merged (fusion); a text shortened (the context); documents left out
    between kept ones (governance: a filter that drops only the last documents once looks like a
    cut then); reordered (rerank); only a leading part kept (the context). A component that never changed its
    documents and whose name says nothing is no stage."""
    seen: dict[str, set[str]] = {}
    for span in spans:
        name = _component(span)
        if span.kind in ("RETRIEVER", "RERANKER", "LLM", "EMBEDDING", "EVALUATOR") or name in known \
                or "ragdx.stage.kind" in span.attributes or span.parent_id is None:
            continue
        found = _behaviour(span)
        if found is not None:
            seen.setdefault(name, set()).add(found)
    out = {}
    for name, behaviours in seen.items():
        hint = kind_by_name(name)
        ranked = [b for b in _BY_BEHAVIOUR if b in behaviours]
        kind = hint or (_BY_BEHAVIOUR[ranked[0]] if ranked else None)
        if kind is not None:
            out[name] = kind.value
    return out


def _retriever_roles(spans: list[SpanRecord]) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """The spans that wrap a retriever of another component (a fusion retriever, LangChain's
    EnsembleRetriever: fusion when they are retrievers themselves), and the inner retriever
    spans: a RETRIEVER span that lists no documents below one of the same component
    (LlamaIndex's ``BM25Retriever._retrieve`` inside ``BM25Retriever.retrieve``), no stage of its
    own. Linear in the spans: the parent links were checked to have no cycle, and each span is
    visited once top-down (its nearest retriever above) and once bottom-up (the retriever
    components below it, two at most: one that differs from its own is all it takes)."""
    by_node = {_node(s): s for s in spans}
    children: dict[tuple[str, str], list[SpanRecord]] = {}
    roots = []
    for s in spans:
        parent = _node(s, s.parent_id) if s.parent_id else None
        if parent is not None and parent in by_node and parent != _node(s):
            children.setdefault(parent, []).append(s)
        else:
            roots.append(s)
    order, nearest = [], {}  # parents before children; each span's nearest RETRIEVER above
    todo = [(r, None) for r in roots]
    while todo:
        span, above = todo.pop()
        order.append(span)
        nearest[_node(span)] = above
        below = span if span.kind == "RETRIEVER" else above
        todo += [(c, below) for c in children.get(_node(span), ())]
    names: dict[tuple[str, str], set[str]] = {}  # retriever components below each span (two at most)
    wrapping: set[tuple[str, str]] = set()
    for span in reversed(order):
        found: set[str] = set()
        for c in children.get(_node(span), ()):
            found |= names.get(_node(c), set())
            if c.kind == "RETRIEVER":
                found.add(_component(c))
            if len(found) >= 2:
                break
        names[_node(span)] = set(sorted(found)[:2])
        if found - {_component(span)}:
            wrapping.add(_node(span))
    inner = {_node(s) for s in spans if s.kind == "RETRIEVER" and nearest.get(_node(s)) is not None
             and _component(nearest[_node(s)]) == _component(s) and not _lists_documents(s)}
    return wrapping, inner


def _lists_documents(span: SpanRecord) -> bool:
    return any(k.startswith("retrieval.documents.") for k in span.attributes)


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
        out = a.get("output.value")
        replies = out.get("replies") if isinstance(out, dict) else None
        text = replies[0] if isinstance(replies, list) and replies and isinstance(replies[0], str) else (
            out if isinstance(out, str) else "")
    given = a.get("ragdx.abstained")
    answer: dict[str, Any] = {"text": str(text),
                              "abstained": given if isinstance(given, bool) else is_abstention(str(text)),
                              "usage": {"prompt_tokens": a.get("llm.token_count.prompt") or 0,  # checked when read
                                        "completion_tokens": a.get("llm.token_count.completion") or 0}}
    seconds = _seconds(span)
    if seconds is not None:
        answer["seconds"] = seconds
    claims = a.get("ragdx.claims")
    if not isinstance(claims, list):  # a generator that cites puts its claims in its reply's metadata
        claims = find_claims(a.get("output.value"))
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
    # in the order they ended: a retriever wrapping others (a fusion retriever) after them
    spans = sorted(spans, key=lambda s: (s.end if s.end is not None else s.start if s.start is not None
                                         else float("inf"), s.line))
    wrapping, inner = _retriever_roles(spans)
    kinds = {s.span_id: _kind(s, stage_map, wrapping, inner) for s in spans}
    # a prompt builder is the context only when no other span is; the response's source nodes
    # (LlamaIndex's query engine: what its synthesizer read) only when no prompt builder is either
    builders = [s for s in spans if kinds[s.span_id] == "context" and _component(s) in _FALLBACK_CONTEXT]
    responses = [s for s in spans if kinds[s.span_id] is None and _response_nodes(s)]
    if len(builders) < sum(kinds[s.span_id] == "context" for s in spans):
        for s in builders:
            kinds[s.span_id] = None
    elif not builders and responses:
        kinds[responses[-1].span_id] = StageKind.CONTEXT
    known: dict[str, dict[str, Any]] = {}
    stages, answer, verdicts = [], None, None
    for span in spans:
        kind = kinds[span.span_id]
        if kind is None:
            continue
        a = span.attributes
        name = str(a.get("ragdx.stage") or _component(span))
        if kind == StageKind.GENERATION:
            answer = _answer(span)
            continue
        if kind == StageKind.CITATION:
            verdicts = a.get("ragdx.claims")
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
        dropped = a.get("ragdx.dropped")
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
    elif (said := _answer_without_llm(spans)) is not None:
        trace["answer"] = said
    if "answer" in trace and "claims" not in trace["answer"]:
        claims = inline_claims(trace["answer"]["text"], known)
        if claims:
            trace["answer"]["claims"] = claims
    return trace


def _response_nodes(span: SpanRecord) -> bool:
    """Whether a span's output is a response with its source nodes (LlamaIndex's query engine):
    the nodes its synthesizer was given."""
    out = span.attributes.get("output.value")
    return isinstance(out, dict) and isinstance(out.get("source_nodes"), list) and "response" in out


def _answer_without_llm(spans: list[SpanRecord]) -> dict[str, Any] | None:
    """The answer of a trace without a generator's span: a response synthesizer's output
    (LlamaIndex answers without calling its LLM when no node is left)."""
    span = next((s for s in reversed(spans) if _SYNTHESIZE.search(s.name)
                 and isinstance(s.attributes.get("output.value"), str)), None)
    if span is None:
        return None
    text = span.attributes["output.value"]
    answer: dict[str, Any] = {"text": text, "abstained": is_abstention(text)}
    seconds = _seconds(span)
    if seconds is not None:
        answer["seconds"] = seconds
    return answer


# a citation written into the answer: "... of delivery [policies/refund.md#0]." or "... [a, b]"
_CITATION = re.compile(r"\s*\[([^\[\]\n]{1,300})\]")
_AFTER_STOP = re.compile(r"([.!?])((?:\s*\[[^\[\]\n]{1,300}\])+)")


def inline_claims(text: str, ids: Iterable[str]) -> list[dict[str, Any]] | None:
    """An answer's claims with the citations written into its text as the ids of the documents
    it was given ("Refunds are accepted within 30 days [policies/refund.md#0]."), one claim per
    statement, a citation after a statement's stop belonging to it ("... 90 days. [b]"); None when the text cites no
    known id."""
    from ragdx.text import is_reply, sentences
    known = set(ids)

    def cited(m: re.Match) -> list[str] | None:
        parts = [p.strip() for p in re.split(r"[,;]", m.group(1))]
        return parts if parts and all(p in known for p in parts) else None

    if not any(cited(m) for m in _CITATION.finditer(text)):
        return None
    text = _AFTER_STOP.sub(lambda m: m.group(2) + m.group(1), text)  # "days. [b]" as "days [b]."
    claims: list[dict[str, Any]] = []
    # a citation and a stop end a statement, whatever opens the next ('... [a]. "currency": ...')
    for sentence in (s for part in re.split(r"(?<=\][.!?])\s+", text) for s in sentences(part)):
        marks = [c for m in _CITATION.finditer(sentence) if (c := cited(m))]
        bare = _CITATION.sub(lambda m: "" if cited(m) else m.group(0), sentence).strip()
        bare = re.sub(r"\s+([.,;:!?])", r"\1", bare)
        if is_reply(bare) or not any(ch.isalnum() for ch in bare):
            continue
        claims.append({"text": bare, "citations": list(dict.fromkeys(c for group in marks for c in group))})
    return claims or None


def spans_to_traces(spans: list[SpanRecord], stage_map: Mapping[str, str] | None = None,
                    system: str | None = None, file: str = "spans") -> tuple[list[tuple[int, dict]], list[str]]:
    """Imported traces (one dict per query, with the line of its first span) from spans, and one
    message per trace that names no query id (skipped)."""
    check_parents(spans, file)
    given = {**DEFAULT_STAGES, **(stage_map or {})}
    mapping = {**infer_stage_kinds(spans, given), **given}
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
    if format == "auto" and (Path(path).is_dir() or Path(path).suffix.lower() in (".csv", ".json")) \
            and not (Path(path).suffix.lower() == ".json" and _spans_json(Path(path))):
        format = "dataset"  # an evaluation set (CSV, a JSON array, a Hugging Face dataset folder)
    if format == "auto":
        text = read_text(path, what="traces")
        first = next((line for line in text.splitlines() if line.strip()), "")
        try:
            format = detect_format(json.loads(first))
        except (ValueError, RecursionError):  # not JSON (or nested too deeply): read as traces, said there
            format = "trace"
    if format in DATASETS or format == "dataset":
        return _dataset_views(Path(path), "auto" if format == "dataset" else format)
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


def _spans_json(path: Path) -> bool:
    """Whether a ``.json`` file is a span export (Phoenix's ``{"data": [...]}`` or OTLP) rather
    than an evaluation set's array."""
    head = read_text(path, what="traces")[:4096].lstrip()
    return head.startswith("{") and ('"resourceSpans"' in head or '"span_kind"' in head or '"context"' in head)


def _dataset_views(path: Path, format: str) -> tuple[list[tuple[int, TraceView]], list[str], str | None]:
    """An evaluation set's rows as traces: the retrieved contexts (retrieval, and the context the
    generator read), then the response (:func:`ragdx.label.readers.case_trace`). A row without
    output is skipped and said."""
    from ragdx.label.readers import case_trace, read_eval_set
    data = read_eval_set(path, format)
    if {"retrieved_contexts", "response"} <= set(data.missing):
        data.require("retrieved_contexts", "response", purpose="ragdx diagnose (the system's output is its trace)")
    views, bad = [], []
    for case in data.cases:
        trace = case_trace(case, data.format.value)
        if trace is None:
            bad.append(f"{path}:{case.line}: no retrieved contexts and no response; row skipped")
            continue
        views.append((case.line, parse_trace(trace, str(path), case.line)))
    return views, bad, data.format.value

"""Span files read and checked, for :mod:`ragdx.traces.openinference` and ``ragdx serve``'s
receiver (docs/integrations.md, "OpenInference spans").

Two files are read, one JSON object per line, detected from the first line (:func:`detect_format`):

- ``openinference``: one span per line, as Arize Phoenix exports spans (``name``, ``context``
  with ``trace_id`` and ``span_id``, ``parent_id``, ``span_kind``, ``start_time``, ``end_time``,
  ``attributes`` flat or nested) and as ``ragdx export`` writes them; a line ``{"data": [...]}``
  (Phoenix's REST answer) holds several.
- ``otlp``: the OpenTelemetry collector's file exporter: an OTLP/JSON request per line
  (``resourceSpans`` > ``scopeSpans`` > ``spans``, attributes as ``{key, value}`` lists, times
  in ``startTimeUnixNano``).

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

from ragdx._jsonl import loads_embedded
from ragdx.errors import InputError
from ragdx.traces.jsonl import json_objects
from ragdx.types import StageKind

__all__ = ["MAX_ATTRIBUTE_CHARS", "SpanRecord", "check_parents", "detect_format", "otlp_spans", "read_spans", "span_key"]

# the attributes ragdx checks when a span is read: those whose text is JSON (OpenInference writes
# these as JSON strings), token counts, a document's content, ids
_CHECKED = re.compile(r"^(?P<json>metadata|input\.value|output\.value|ragdx\.claims|ragdx\.dropped)$"
                      r"|\.document\.(?:(?P<json_>metadata)|(?P<content>content)|(?P<id>id))$"
                      r"|^(?P<tokens>llm\.token_count\.\w+)$|^(?P<id_>ragdx\.query_id|metadata\.query_id)$")
_INTEGER = re.compile(r"-?[0-9]{1,19}")
#: the longest text one span attribute may hold (a document's content, an answer, JSON in
#: ``output.value``): 4 MiB of characters, past any page or prompt a RAG system passes on
MAX_ATTRIBUTE_CHARS = 4 * 1024 * 1024
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
    content is text, ids are strings or integers, and no text is longer than
    :data:`MAX_ATTRIBUTE_CHARS`. ``where(key)`` is the attribute's place."""
    out = dict(attrs)
    for key, value in attrs.items():
        if isinstance(value, str) and len(value) > MAX_ATTRIBUTE_CHARS:
            raise where(key).error(f"{len(value):,} characters, more than the {MAX_ATTRIBUTE_CHARS:,} a span "
                                   "attribute may hold (ragdx.traces.spans.MAX_ATTRIBUTE_CHARS)")
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


def span_key(span: SpanRecord, span_id: str | None = None) -> tuple[str, str]:
    """A span's key within a file: its trace id and its span id (or ``span_id``: its parent's)."""
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
        first.setdefault(span_key(s), s)
        if s.parent_id:
            parents.setdefault(span_key(s), []).append(span_key(s, s.parent_id))
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

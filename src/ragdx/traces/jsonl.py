"""Traces from any RAG system (docs/diagnosis.md, "Imported traces"), read into trace views.

One JSON object per line::

    {"query_id": "q1", "question": "...", "principal": {"groups": ["public"]},
     "stages": [{"name": "bm25", "kind": "retrieval", "items": [{"id": "policy-current", "rank": 1}]},
                {"name": "ctx", "kind": "context", "items": [...]}],
     "answer": {"text": "...", "abstained": false, "citations": ["policy-current"],
                "claims": [{"text": "...", "supported": true, "citations": ["policy-current"]}]}}

An item identifies its evidence by an ``id``, a span (``doc``, ``start``, ``end``, optional
``version``), or ``doc`` with its ``text``; a claim may say where its support lies (``support``:
spans, as items give them; without them ragdx locates it in the cited items' texts); ``dropped``
lists items a stage removed, each with a ``reason`` in words and optionally a ``code``
(:class:`~ragdx.types.DropCode`; without one, the code is read from the reason's first words). Optional item fields ``readable: false`` and
``status: superseded|expired`` mark a leak or a stale version. A malformed line is reported with
its line number and field, and skipped; the other lines are still diagnosed.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

from ragdx._jsonl import Fields, loads, read_text
from ragdx.diagnosis.evidence import BY_ID, RESOLVED, EvidenceResolver, EvidenceStatus, QueryEvidence, ResolvedAlternative
from ragdx.diagnosis.locate import AnswerView, ClaimView, DroppedView, ItemView, StageView, TraceView
from ragdx.errors import InputError
from ragdx.text import is_abstention
from ragdx.traces.documents import framework_document
from ragdx.protocols import Store
from ragdx.types import DropCode, Query, Span, StageKind

ANY_VERSION = "*"  # a span whose version the trace does not say
BY_TEXT = EvidenceStatus.BY_TEXT  # a quote to find in items' texts (no store to resolve it to a span)


def _span(i: Fields, f: Fields, where: str) -> Span | None:
    """An object's span (``doc``, ``start``, ``end``, optional ``version``), if it has one."""
    doc = i.get("doc", str, default=None)
    version = i.get("version", str, default=None) or ANY_VERSION
    start, end = i.get("start", int, default=None), i.get("end", int, default=None)
    if (start is None) != (end is None):
        raise f.error(where, "a span needs both 'start' and 'end'")
    if start is not None and (doc is None or not 0 <= start < end):
        raise f.error(where, f"a span needs 'doc' and 0 <= start < end, got start {start}, end {end}")
    return Span(doc, version, start, end) if start is not None and doc else None


def _support(c: Fields, f: Fields, where: str) -> tuple[Span, ...]:
    """A claim's ``support``: where in the parsed text its support lies, as spans."""
    out = []
    for n, obj in enumerate(c.get("support", list, default=[])):
        at = f"{where}.support[{n}]"
        if not isinstance(obj, dict):
            raise f.error(at, f"expected an object, got {json.dumps(obj)}")
        span = _span(Fields(obj, f.file, f.line, prefix=f"{at}."), f, at)
        if span is None:
            raise f.error(at, "a support span needs 'doc', 'start' and 'end'")
        out.append(span)
    return tuple(out)


def _item(obj: Any, f: Fields, where: str, n: int) -> ItemView:
    if not isinstance(obj, dict):
        raise f.error(where, f"expected an object, got {json.dumps(obj)}")
    i = Fields(obj, f.file, f.line, prefix=f"{where}.")
    span = _span(i, f, where)
    doc = i.get("doc", str, default=None)
    start, end = (span.start, span.end) if span is not None else (None, None)
    text = i.get("text", str, default=None)
    item_id = i.get("id", str, default=None)
    if item_id is None and doc is None:
        raise f.error(where, "an item needs an 'id', a span ('doc', 'start', 'end') or 'doc' and 'text'")
    if item_id is None:
        item_id = f"{doc}[{start}:{end}]" if start is not None else f"{doc}#{n}"
    status = i.get("status", str, default="current")
    return ItemView(item_id, span, text,
                    i.get("rank", int, default=n), doc, readable=i.get("readable", bool, default=True),
                    current=status == "current", score=i.get("score", (int, float), default=None))


def _seconds(f: Fields, name: str) -> float | None:
    """An optional non-negative number (a latency or a cost)."""
    value = f.get(name, (int, float), default=None)
    if value is not None and (isinstance(value, bool) or value < 0):
        raise f.error(name, f"expected a non-negative number, got {value!r}")
    return None if value is None else float(value)


def parse_trace(obj: dict[str, Any], file: str, line: int) -> TraceView:
    """Validate one imported trace line into a :class:`TraceView`.

    Raises:
        InputError: naming the file, the line and the field.
    """
    f = Fields(obj, file, line)
    query_id = f.get("query_id", str)
    stages = []
    for s, stage in enumerate(f.get("stages", list, default=[])):
        where = f"stages[{s}]"
        if not isinstance(stage, dict):
            raise f.error(where, f"expected an object, got {json.dumps(stage)}")
        sf = Fields(stage, file, line, prefix=f"{where}.")
        kind_name = sf.get("kind", str)
        try:
            kind = StageKind.parse(kind_name, what=f"{where}.kind")
        except InputError as exc:
            raise f.error(f"{where}.kind", exc.detail) from None
        items = tuple(_item(it, f, f"{where}.items[{n}]", n + 1)
                      for n, it in enumerate(sf.get("items", list, default=[])))
        dropped = []
        for n, d in enumerate(sf.get("dropped", list, default=[])):
            item = _item(d, f, f"{where}.dropped[{n}]", n + 1)
            reason = d.get("reason", "dropped") if isinstance(d, dict) else "dropped"
            code = d.get("code") if isinstance(d, dict) else None
            if code is not None:
                try:
                    code = DropCode.parse(code, what=f"{where}.dropped[{n}].code")
                except InputError as exc:
                    raise f.error(f"{where}.dropped[{n}].code", exc.detail) from None
            dropped.append(DroppedView(item, str(reason), code))
        stages.append(StageView(sf.get("name", str, default=kind_name), kind, items, tuple(dropped),
                                seconds=_seconds(sf, "seconds")))
    answer = None
    raw = f.get("answer", dict, default=None)
    if raw is not None:
        af = Fields(raw, file, line, prefix="answer.")
        cited = tuple(af.str_list("citations", ()))
        claims = []
        for n, c in enumerate(af.get("claims", list, default=[])):
            if not isinstance(c, dict):
                raise f.error(f"answer.claims[{n}]", f"expected an object, got {json.dumps(c)}")
            cf = Fields(c, file, line, prefix=f"answer.claims[{n}].")
            claims.append(ClaimView(cf.get("text", str, default=""), cf.str_list("citations", cited),
                                    cf.get("supported", bool, default=None),
                                    support=_support(cf, f, f"answer.claims[{n}]")))
        if not claims and cited:
            claims.append(ClaimView(af.get("text", str, default=""), cited, None))
        usage = af.get("usage", dict, default={})
        uf = Fields(usage, file, line, prefix="answer.usage.")
        text, abstained = af.get("text", str, default=""), af.get("abstained", bool, default=None)
        answer = AnswerView(text, is_abstention(text) if abstained is None else abstained,
                            tuple(claims), uf.get("prompt_tokens", int, default=0),
                            uf.get("completion_tokens", int, default=0), _seconds(uf, "cost") or 0.0,
                            _seconds(af, "seconds"))
    return TraceView(query_id, tuple(stages), answer, f.get("system", str, default=None))


def json_objects(path: Path, what: str) -> Iterator[tuple[int, dict[str, Any] | InputError]]:
    """Each non-blank line of a JSONL file: its number and its JSON object, or the error that
    says why it is not one (the caller reports and skips it)."""
    text = read_text(path, what=what)
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = loads(line, file=str(path), line=number)
            if not isinstance(obj, dict):
                raise InputError(f"expected a JSON object, got {type(obj).__name__}", file=str(path),
                                 line=number)
        except InputError as exc:
            yield number, exc
            continue
        yield number, obj


def read_traces(path: Path) -> tuple[list[tuple[int, TraceView]], list[str]]:
    """Every good line of an imported trace file, and one message per bad line (skipped): one
    that is not strict JSON, not a valid trace, or a second trace of a query (never counted
    twice)."""
    good, bad = [], []
    first: dict[str, int] = {}
    for number, obj in json_objects(path, "traces"):
        try:
            if isinstance(obj, InputError):
                raise obj
            view = parse_trace(obj, str(path), number)
            if view.query_id in first:
                raise InputError(f"a second trace of query {view.query_id!r} (the first is on line "
                                 f"{first[view.query_id]})", file=str(path), line=number, field="query_id")
            first[view.query_id] = number
            good.append((number, view))
        except InputError as exc:
            bad.append(f"{exc}; line skipped")
    return good, bad


_FRAMEWORK_FIELDS = frozenset({"content", "page_content", "id_", "lc"})


def read_chunks(path: Path) -> list[ItemView]:
    """A system's chunks, one item per line (``id``, ``doc``, and ``text`` or ``start``/``end``,
    or a framework's own document: :func:`ragdx.traces.documents.framework_document`), for
    ``ragdx diagnose --chunks``.

    Raises:
        InputError: naming the file, the line and the field of the first bad line.
    """
    out = []
    for number, obj in json_objects(path, "chunks"):
        if isinstance(obj, InputError):
            raise obj
        if _FRAMEWORK_FIELDS & obj.keys():  # a framework's own dump: Haystack's Document, LlamaIndex's TextNode,
            obj = framework_document(obj) or obj  # LangChain's Document
        item = _item(obj, Fields(obj, str(path), number), "chunk", number)
        if item.doc is None:
            raise InputError("a chunk needs its 'doc' (or, in a framework's document, metadata naming it: "
                             "'doc', 'doc_id', 'source', 'file_path' or 'file_name')", file=str(path), line=number,
                             field="doc")
        out.append(item)
    return out


def with_access(view: TraceView, query: Query, store: Store) -> TraceView:
    """The view with every item the query's principal may not read marked ``readable=False``, as
    the store says: an item known by its chunk id, by its span's document and version, or by a
    document none of whose stored versions the principal may read. An imported trace that puts
    such an item in the context leaked it (outcome ``leak``), and no report shows the store's
    text of it. Items the store does not know keep what the trace says."""
    items = [i for s in view.stages for i in (*s.items, *(d.item for d in s.dropped))]
    chunks = store.chunks_by_id(sorted({i.id for i in items}))
    versions: dict[str, list] = {}

    def unreadable(item: ItemView) -> bool:
        chunk = chunks.get(item.id)
        if chunk is not None:
            doc, version = chunk.doc_id, chunk.version
        elif item.span is not None and item.span.version != ANY_VERSION:
            doc, version = item.span.doc_id, item.span.version
        elif item.doc is not None:
            stored = versions.setdefault(item.doc, store.versions(item.doc))
            return bool(stored) and not any(query.principal.may_read(v.document.acl) for v in stored)
        else:
            return False
        stored_version = store.version(doc, version)
        return stored_version is not None and not query.principal.may_read(stored_version.document.acl)

    def mark(item: ItemView) -> ItemView:
        return replace(item, readable=False) if item.readable and unreadable(item) else item

    return replace(view, stages=tuple(replace(s, items=tuple(mark(i) for i in s.items), dropped=tuple(
        replace(d, item=mark(d.item)) for d in s.dropped)) for s in view.stages))


def resolve_offline(query: Query, resolver: EvidenceResolver | None = None) -> QueryEvidence:
    """A query's evidence for matching against imported items: through the store when one is
    given, else ids as ids, offsets as spans of any version, and quotes to find in item texts."""
    if resolver is not None:
        return resolver.run(query)
    out = []
    for g, group in enumerate(query.required):
        for i, alt in enumerate(group):
            if alt.id is not None:
                out.append(ResolvedAlternative(g, i, alt, BY_ID))
            elif alt.start is not None and alt.end is not None:
                out.append(ResolvedAlternative(g, i, alt, RESOLVED,
                                               Span(alt.doc or "", alt.version or ANY_VERSION, alt.start, alt.end)))
            else:
                out.append(ResolvedAlternative(g, i, alt, BY_TEXT, note="matched by the quote in item texts"))
    return QueryEvidence(query.id, tuple(out))

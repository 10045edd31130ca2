"""OpenInference spans as imported traces: how the frameworks' spans become stages, items and an
answer (docs/integrations.md, "OpenInference spans"). The span files themselves are read and
checked by :mod:`ragdx.traces.spans`.

A span is a stage by its OpenInference kind and what it records, with no flag to learn:

- a RETRIEVER span is a retrieval channel, fusion when it wraps a retriever of another component
  (LlamaIndex's ``QueryFusionRetriever``, LangChain's ``EnsembleRetriever``); one that lists no
  documents inside one of the same component (``BM25Retriever._retrieve`` inside
  ``BM25Retriever.retrieve``) is none; a RERANKER span is rerank (its input less its output
  dropped);
- a span passing documents on (its input and output both hold them: Haystack's
  ``Document(id=...)``, LlamaIndex's ``NodeWithScore`` reprs, LangChain's documents) is the stage
  the user's mapping (``--stage``), :data:`DEFAULT_STAGES`, its name
  (:func:`~ragdx.traces.documents.kind_by_name`) or its behaviour over the file says
  (:func:`infer_stage_kinds`);
- the context is the last such stage of kind context, else a prompt builder's documents, else
  the response's source nodes (LlamaIndex's query engine);
- the answer is the LLM span's output (one without a prompt template), else a response
  synthesizer's; its claims are those its output carries, else the ids it cites in its text
  (:func:`inline_claims`); an answer that opens as a refusal does is an abstention unless the
  span says (:func:`ragdx.text.is_abstention`).

A stage's items are its documents; a document a later span names by id only takes its text and
metadata from the span that returned it, each stage keeping its own rank and score. The query id
is read from span metadata (``metadata.query_id``, as OpenInference's ``using_metadata`` sets it)
or ``ragdx.query_id``; spans of one query in several traces are merged. A stage's seconds are its
span's; the answer's tokens are the LLM span's. A document's metadata gives its evidence
(:mod:`ragdx.traces.documents`).
"""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path
from typing import Any, Iterable, Mapping

from ragdx._jsonl import read_text
from ragdx.diagnosis.locate import TraceView
from ragdx.errors import InputError
from ragdx.text import is_abstention, is_reply, sentences
from ragdx.traces.documents import document_item, kind_by_name
from ragdx.traces.jsonl import parse_trace, read_traces
from ragdx.traces.spans import SpanRecord, check_parents, detect_format, otlp_spans, read_spans, span_key
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
          inner: set[tuple[str, str]]) -> str | None:
    given = span.attributes.get("ragdx.stage.kind")
    if isinstance(given, str):
        return given
    name = _component(span)
    if name in stage_map or span.name in stage_map:
        return stage_map.get(span.name) or stage_map[name]
    if span.kind == "RETRIEVER":
        if span_key(span) in inner:
            return None
        return StageKind.FUSION if span_key(span) in wrapping else StageKind.RETRIEVAL
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
    by_node = {span_key(s): s for s in spans}
    children: dict[tuple[str, str], list[SpanRecord]] = {}
    roots = []
    for s in spans:
        parent = span_key(s, s.parent_id) if s.parent_id else None
        if parent is not None and parent in by_node and parent != span_key(s):
            children.setdefault(parent, []).append(s)
        else:
            roots.append(s)
    order, nearest = [], {}  # parents before children; each span's nearest RETRIEVER above
    todo = [(r, None) for r in roots]
    while todo:
        span, above = todo.pop()
        order.append(span)
        nearest[span_key(span)] = above
        below = span if span.kind == "RETRIEVER" else above
        todo += [(c, below) for c in children.get(span_key(span), ())]
    names: dict[tuple[str, str], set[str]] = {}  # retriever components below each span (two at most)
    wrapping: set[tuple[str, str]] = set()
    for span in reversed(order):
        found: set[str] = set()
        for c in children.get(span_key(span), ()):
            found |= names.get(span_key(c), set())
            if c.kind == "RETRIEVER":
                found.add(_component(c))
            if len(found) >= 2:
                break
        names[span_key(span)] = set(sorted(found)[:2])
        if found - {_component(span)}:
            wrapping.add(span_key(span))
    inner = {span_key(s) for s in spans if s.kind == "RETRIEVER" and nearest.get(span_key(s)) is not None
             and _component(nearest[span_key(s)]) == _component(s) and not _lists_documents(s)}
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

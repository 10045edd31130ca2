"""Diagnosing the traces of another RAG system (``ragdx diagnose``): read the imported traces (the
imported-trace JSONL, or OpenInference spans), diagnose each query of the query set, and write a
run folder with the diagnoses, the metrics and the report.

Every query of the query set is counted: a query with no trace gets the outcome ``no_trace``; a
trace whose query id is not in the query set is skipped and counted, never diagnosed. A file of
which no line could be read, or whose traces name no query of the query set, is an error.

With a store holding the corpus, quotes resolve to spans of the stored documents. The imported
system's chunks are its own: ragdx's chunk ids are never relevance labels of its lists, and
ragdx's chunking never decides a parsing loss, unless the trace's items are the store's own
chunks (a ``ragdx export`` of a run on that store). Item spans are checked against the stored
text; those that do not line up are counted, and matched by their text instead.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ragdx.diagnosis.evidence import LOST_IN_PARSING, EvidenceResolver, QueryEvidence
from ragdx.traces.jsonl import BY_TEXT, read_chunks, resolve_offline, with_access
from ragdx.diagnosis.locate import ANY_VERSION, Diagnoser, ItemView, StageView, TraceView
from ragdx.diagnosis.records import Diagnosis, Outcome
from ragdx.errors import InputError
from ragdx.evaluation.layered import Metrics, layered, query_values
from ragdx.protocols import Store
from ragdx.runfolder import Executed, fingerprint, write_json, write_report
from ragdx.types import DocStatus, Query, StageKind

__all__ = ["ImportedRun", "diagnose_views", "diagnose_imported", "checker_from", "prepare_views", "write_imported"]


@dataclass(frozen=True, slots=True)
class ImportedRun:
    """What diagnosing imported traces produced, with the counts a user must see."""

    folder: Path
    diagnoses: tuple[Diagnosis, ...]
    metrics: Metrics
    traces: int                   # traces read that name a query of the query set (diagnosed)
    malformed: tuple[str, ...]    # one message per line that could not be read (skipped)
    unmatched: tuple[str, ...]    # one message per trace whose query id is not in the query set
    untraced: tuple[str, ...]     # the query ids no trace was imported for
    misaligned: tuple[str, ...] = ()  # item spans that do not line up with the stored text (counts first)
    system: str = "imported system"


def checker_from(settings: Any) -> Any:
    """The support checker the settings configure (``verify.method``), to check the claims an
    imported trace left unverified: :func:`ragdx.build.support_checker`, with the generation
    settings' chat endpoint for ``llm``."""
    from ragdx.build import support_checker
    client = None
    if settings.verify.method == "llm":
        from ragdx.stages.generate import ChatClient
        g = settings.generation
        client = ChatClient(g.base_url, g.model, api_key_env=g.api_key_env, timeout=g.timeout,
                            max_retries=g.max_retries, max_tokens=g.max_tokens)
    return support_checker(settings, client)


def _imported_evidence(evidence: QueryEvidence) -> QueryEvidence:
    """Evidence for another system's trace: no ragdx chunk coverage (its chunks are not the
    system's), and a quote ragdx's parser lost is still looked for in the system's item texts."""
    return replace(evidence, alternatives=tuple(
        replace(a, coverage=None) if a.status != LOST_IN_PARSING else
        replace(a, status=BY_TEXT, coverage=None, note=a.note + "; matched by the quote in item texts")
        for a in evidence.alternatives))


def _own_chunks(view: TraceView, store: Store | None) -> bool:
    """Whether a trace's retrieved items are the store's own chunks (a ragdx run on that store)."""
    ids = sorted({i.id for s in view.stages if s.kind is StageKind.RETRIEVAL for i in s.items})
    return store is not None and bool(ids) and len(store.chunks_by_id(ids)) == len(ids)


def diagnose_views(queries: Sequence[Query], views: Sequence[tuple[int, TraceView]],
                   resolver: EvidenceResolver | None = None, *, source: str = "traces",
                   diagnoser: Diagnoser | None = None, store: Store | None = None,
                   ) -> tuple[list[Diagnosis], list[str], list[str], list[QueryEvidence]]:
    """Diagnose each query from its imported trace view.

    Returns:
        The diagnoses in query-set order (``no_trace`` for a query without a trace), a message per
        trace whose query id is not in the query set, the ids of the untraced queries, and each
        query's evidence as the diagnosis used it.
    """
    diagnoser = diagnoser or Diagnoser(system="imported system")
    by_id = {q.id: q for q in queries}
    by_query = {}
    unmatched = []
    for line, view in views:
        if view.query_id not in by_id:
            unmatched.append(f"{source}:{line}: query_id {view.query_id!r} is not in the query set; line skipped")
            continue
        by_query[view.query_id] = view
    diagnoses, evidence = [], []
    for q in queries:
        e = resolve_offline(q, resolver)
        view = by_query.get(q.id)
        if view is not None and not _own_chunks(view, store):
            e = _imported_evidence(e)
        evidence.append(e)
        diagnoses.append(diagnoser.run(q, e, view) if view is not None else Diagnosis(
            q.id, Outcome.NO_TRACE, None, (), (), "No trace was imported for this query."))
    untraced = [q.id for q in queries if q.id not in by_query]
    return diagnoses, unmatched, untraced, evidence


class _StoredTexts:
    """The store's parsed texts, to check item spans against (``*``: the current version)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.cache: dict[tuple[str, str], str | None] = {}

    def text(self, doc: str, version: str) -> str | None:
        key = (doc, version)
        if key not in self.cache:
            if version == ANY_VERSION:
                stored = [v for v in self.store.versions(doc) if v.document.status is DocStatus.CURRENT]
                version = stored[0].document.version if stored else version
            self.cache[key] = self.store.texts(doc, version)[1] if self.store.version(doc, version) else None
        return self.cache[key]


def _aligned(views: Sequence[tuple[int, TraceView]], store: Store, source: str
             ) -> tuple[list[tuple[int, TraceView]], list[str], int]:
    """Views whose item spans are checked against the stored text: a span-only item gets the
    stored text, a span that does not line up (beyond the text, or another text) is dropped so
    the item is matched by its text. Returns the views, a message per misaligned span, and the
    number of spans checked."""
    texts = _StoredTexts(store)
    bad: list[str] = []
    seen: dict[tuple, ItemView] = {}  # each item checked once per query, though several stages list it

    def fix(item: ItemView, where: str) -> ItemView:
        key = (where.split(" stage ")[0], item.id, item.span, item.text)
        if key not in seen:
            seen[key] = check(item, where)
        done = seen[key]  # its span and text as checked; its rank and score are this stage's own
        return item if done is item else replace(item, span=done.span, text=done.text)

    def check(item: ItemView, where: str) -> ItemView:
        span = item.span
        if span is None:
            return item
        stored = texts.text(span.doc_id, span.version)
        if stored is None:
            return item
        piece = stored[span.start:span.end] if span.end <= len(stored) else None
        if piece is None:
            bad.append(f"{where}: item {item.id!r}: span {span.start}..{span.end} lies beyond the stored "
                       f"text of {span.doc_id} ({len(stored)} characters)")
            return replace(item, span=None)
        if item.text is None:
            return replace(item, text=piece)
        if "".join(piece.split()) != "".join(item.text.split()):
            bad.append(f"{where}: item {item.id!r}: span {span.start}..{span.end} of {span.doc_id} holds "
                       f"{piece[:40]!r}, the item's text is {item.text[:40]!r}")
            return replace(item, span=None)
        return item

    out = []
    for line, view in views:
        stages = []
        for s in view.stages:
            where = f"{source}:{line} query {view.query_id!r} stage {s.name!r}"
            stages.append(replace(s, items=tuple(fix(i, where) for i in s.items),
                                  dropped=tuple(replace(d, item=fix(d.item, where)) for d in s.dropped)))
        out.append((line, replace(view, stages=tuple(stages))))
    checked = sum(1 for (_, _, span, _) in seen if span is not None and texts.text(span.doc_id, span.version))
    return out, bad, checked


def _with_chunks(views: Sequence[tuple[int, TraceView]], chunks: Sequence[ItemView]
                 ) -> list[tuple[int, TraceView]]:
    """Each trace with a ``parsing`` stage listing the system's chunks of the documents it
    touched, unless it lists its own."""
    out = []
    for line, view in views:
        touched = {i.doc for s in view.stages for i in (*s.items, *(d.item for d in s.dropped)) if i.doc}
        mine = tuple(c for c in chunks if c.doc in touched)
        if mine and not any(s.kind is StageKind.PARSING for s in view.stages):
            view = replace(view, stages=(StageView("chunks", StageKind.PARSING, mine), *view.stages))
        out.append((line, view))
    return out


def _abstentions(views: Sequence[tuple[int, TraceView]], pattern: str) -> list[tuple[int, TraceView]]:
    """Each answer whose text the pattern finds marked as an abstention."""
    try:
        found = re.compile(pattern).search
    except re.error as exc:
        raise InputError(f"--abstention {pattern!r} is not a regular expression: {exc}") from None
    return [(line, replace(v, answer=replace(v.answer, abstained=True))
             if v.answer is not None and not v.answer.abstained and found(v.answer.text) else v)
            for line, v in views]


def _stage_kinds(views: Sequence[TraceView]) -> list[str]:
    """The stage kinds the imported system has, in pipeline order (the report shows only those)."""
    kinds = {s.kind for v in views for s in v.stages}
    if any(v.answer is not None for v in views):
        kinds.add(StageKind.GENERATION)
    return [k.value for k in StageKind if k in kinds]


def diagnose_imported(traces_path: Path, queries: Sequence[Query], out: Path, store: Store | None = None, *,
                      format: str = "auto", stage_map: Mapping[str, str] | None = None,
                      system: str | None = None, checker: Any = None, chunks: Path | None = None,
                      abstention: str | None = None) -> ImportedRun:
    """Read ``traces_path``, diagnose every query, and write ``out``'s ``diagnosis.jsonl``,
    ``metrics.json`` and ``report.html``.

    Args:
        traces_path: the imported traces: JSONL (docs/diagnosis.md), or OpenInference spans
            (Phoenix's JSON, or the OpenTelemetry collector's file exporter).
        queries: the query set.
        out: the folder to write.
        store: a store holding the corpus, to resolve quotes to spans (optional).
        format: ``auto`` (detected from the first line), ``trace``, ``openinference`` or ``otlp``.
        stage_map: for spans: component name -> stage kind (``{"DocumentJoiner": "fusion"}``),
            on top of the defaults.
        system: the imported system's name (default: what the traces say, else "imported system").
        checker: judges the claims the traces left unverified (default ragdx's learned judgement).
        chunks: a JSONL file of the system's chunks (items: ``id``, ``doc``, ``text`` or a span),
            the parsing stage of every trace that does not list its own (spans never do).
        abstention: a regular expression: an answer whose text it finds is an abstention (spans
            never say whether the system abstained).

    Raises:
        InputError: no line could be read as a trace, or no trace names a query of the query set.
    """
    from ragdx.traces.openinference import read_any
    views, malformed, named = read_any(traces_path, format=format, stage_map=stage_map)
    source = str(traces_path)
    if not views:
        first = f"; the first: {malformed[0]}" if malformed else ""
        raise InputError(f"no trace could be read: {len(malformed)} malformed line"
                         f"{'s' if len(malformed) != 1 else ''}{first}", file=source)
    chunk_items = read_chunks(chunks) if chunks is not None else None
    return write_imported(views, queries, out, store, source=source, system=system or named or "imported system",
                          checker=checker, chunks=chunk_items, abstention=abstention, malformed=malformed,
                          digest=_file_digest(Path(traces_path)))


def prepare_views(views: Sequence[tuple[int, TraceView]], queries: Sequence[Query], store: Store | None, *,
                  source: str, chunks: Sequence[ItemView] | None = None, abstention: str | None = None
                  ) -> tuple[list[tuple[int, TraceView]], list[str]]:
    """Imported trace views as ``ragdx diagnose`` diagnoses them: the system's chunks as each
    trace's parsing stage, answers the abstention pattern finds marked, item spans checked
    against the store's text and what the store says the principal may not read.

    Returns:
        The views, and one message per item span that does not line up (a count first).
    """
    views = list(views)
    if chunks is not None:
        views = _with_chunks(views, chunks)
    if abstention is not None:
        views = _abstentions(views, abstention)
    misaligned: list[str] = []
    if store is not None:
        views, misaligned, checked = _aligned(views, store, source)
        if misaligned:
            misaligned.insert(0, f"{len(misaligned)} of {checked} item spans do not line up with the stored text; "
                                 "those items are matched by their text")
        by_id = {q.id: q for q in queries}  # what the store says the principal may not read
        views = [(line, with_access(view, by_id[view.query_id], store) if view.query_id in by_id else view)
                 for line, view in views]
    return views, misaligned


def write_imported(views: Sequence[tuple[int, TraceView]], queries: Sequence[Query], out: Path,
                   store: Store | None = None, *, source: str, system: str = "imported system",
                   checker: Any = None, chunks: Sequence[ItemView] | None = None, abstention: str | None = None,
                   malformed: Sequence[str] = (), digest: str | None = None,
                   shown: Callable[[TraceView], TraceView] | None = None) -> ImportedRun:
    """Diagnose every query from the trace views read from ``source`` and write ``out``'s run
    folder (the second half of :func:`diagnose_imported`; ``ragdx serve`` writes a live window
    with it). ``shown`` gives each view as the report may show it (``ragdx serve``: the texts its
    principal may not read withheld); the diagnosis reads the views whole.

    Raises:
        InputError: no trace names a query of the query set.
    """
    views, misaligned = prepare_views(views, queries, store, source=source, chunks=chunks, abstention=abstention)
    resolver = EvidenceResolver(store) if store is not None else None
    diagnoses, unmatched, untraced, evidence = diagnose_views(
        queries, views, resolver, source=source, diagnoser=Diagnoser(checker, system=system), store=store)
    if len(unmatched) == len(views):
        raise InputError(f"none of the {len(views)} traces names a query of the query set "
                         f"(the first names {views[0][1].query_id!r}; the query set has "
                         f"{', '.join(repr(q.id) for q in queries[:3])}{', ...' if len(queries) > 3 else ''})",
                         file=source)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "diagnosis.jsonl", "w", encoding="utf-8") as fh:
        for diagnosis in diagnoses:
            fh.write(json.dumps(diagnosis.to_dict()) + "\n")
    by_query = {v.query_id: v for _, v in views}
    view_list = [by_query.get(q.id) for q in queries]
    rows = [query_values(q, d, v, e) for q, d, v, e in zip(queries, diagnoses, view_list, evidence)]
    metrics = layered(rows)
    write_json(out / "metrics.json", metrics.to_dict())
    from ragdx import __version__
    info = {"ragdx_version": __version__, "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "system": system, "traces": source,
            "stage_kinds": _stage_kinds([v for v in view_list if v is not None])}
    if store is not None:
        info |= {"store": str(getattr(store, "path", "")), "index_version": store.index_version}
    info["fingerprint"] = fingerprint(store, None, None) | {"traces": digest}
    write_json(out / "manifest.json", info)
    report_views = [shown(v) if shown is not None and v is not None else v for v in view_list]
    done = Executed((), tuple(diagnoses), tuple(rows), tuple(report_views), tuple(evidence))  # type: ignore[arg-type]
    write_report(out, info, queries, done, metrics, store)
    return ImportedRun(out, tuple(diagnoses), metrics, len(views) - len(unmatched), tuple(malformed),
                       tuple(unmatched), tuple(untraced), tuple(misaligned), system)


def _file_digest(path: Path) -> str | None:
    """The traces' digest (a folder of span files: None)."""
    import hashlib
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path.is_file() else None


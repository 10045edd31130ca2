"""Live diagnosis of received traces (``ragdx serve``).

A trace is ready when its root span arrived and nothing more came for ``settle`` seconds (a
trace whose root never arrives: after ``orphan_after``). Its spans become an imported trace
through :func:`ragdx.traces.openinference.spans_to_traces`, the reader of ``ragdx diagnose``, and:

- **labelled** (its spans name a query id of the query set, ``ragdx.query_id`` or span metadata
  ``query_id``; else a span's input carries a question's exact text): diagnosed by the engine of
  ``ragdx diagnose`` (:func:`ragdx.experiments.imported.prepare_views` and
  :func:`~ragdx.experiments.imported.diagnose_views`), so the diagnosis is the one ``ragdx
  diagnose`` gives on the same spans;
- **every trace**, labelled or not, gets the signals that need no labels (:func:`signals`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from ragdx.binding import CitedSpan, EvidenceBinding, recheck, span_hash
from ragdx.diagnosis.evidence import EvidenceResolver
from ragdx.traces.jsonl import parse_trace, with_access
from ragdx.diagnosis.locate import ANY_VERSION, ClaimView, Diagnoser, ItemView, TraceView
from ragdx.traces.openinference import SpanRecord, find_question, query_id_of, spans_to_traces
from ragdx.errors import InputError
from ragdx.experiments.imported import diagnose_views, prepare_views
from ragdx.serve.spool import Spool
from ragdx.text import statements
from ragdx.types import DocStatus, Principal, Query, StageKind

__all__ = ["LiveDiagnoser", "LiveSpec", "run_process", "signals", "checked_claims", "displayed", "UNLABELLED"]

log = logging.getLogger("ragdx.serve")
UNLABELLED = "trace:"  # an unlabelled trace's query id: this prefix and its trace id


def _question(spans: Sequence[SpanRecord]) -> str | None:
    """What an unlabelled trace asked: a retriever's input, else the root span's input (a string,
    or ``question``, ``query`` or ``input`` in its JSON)."""
    ordered = sorted(spans, key=lambda s: (s.kind != "RETRIEVER", s.parent_id is not None, s.start or 0.0))
    for span in ordered:
        value = span.attributes.get("input.value")
        if isinstance(value, str) and value.strip():
            return value.strip()
        if isinstance(value, Mapping):
            for key in ("question", "query", "input"):
                if isinstance(value.get(key), str):
                    return value[key].strip()
    return None


def _context(view: TraceView) -> tuple[ItemView, ...]:
    """The items an answer was written from: the last context stage's, else the last stage's."""
    stages = [s for s in view.stages if s.kind is StageKind.CONTEXT] or [s for s in view.stages if s.items]
    return stages[-1].items if stages else ()


def signals(view: TraceView, checker: Any) -> dict[str, Any]:
    """The signals of one trace that need no labels.

    - ``abstained``: whether the answer is an abstention (None: no answer);
    - ``claims`` / ``claims_supported``: the answer's claims (its own, else its statements) and
      how many ``checker`` finds supported by the text they cite, else by the context's text;
    - ``retrieval_score``: the mean over retrieval stages of each one's top score (None: no scores).
    """
    out: dict[str, Any] = {"abstained": None, "claims": 0, "claims_supported": 0, "retrieval_score": None}
    tops = [max(i.score for i in s.items if i.score is not None) for s in view.stages
            if s.kind is StageKind.RETRIEVAL and any(i.score is not None for i in s.items)]
    if tops:
        out["retrieval_score"] = sum(tops) / len(tops)
    answer = view.answer
    if answer is None:
        return out
    out["abstained"] = answer.abstained
    verdicts = checked_claims(view, checker)
    out["claims"] = len(verdicts)
    out["claims_supported"] = sum(1 for c in verdicts if c.supported)
    return out


def checked_claims(view: TraceView, checker: Any) -> list[ClaimView]:
    """The answer's claims (its own, else its statements) with ``checker``'s verdict on each,
    judged against the text of the items it cites, else the context's (none for an abstention)."""
    answer = view.answer
    if answer is None or answer.abstained:
        return []
    context = _context(view)
    by_id = {a: i for i in context for a in (i.id, *i.aliases)}
    claims = [(c.text, c.citations) for c in answer.claims] or [(s, ()) for s in statements(answer.text)]
    out = []
    for text, cited in claims:
        units = [by_id[c] for c in cited if c in by_id] or list(context)
        verdict, reason = checker.judge(text, "\n".join(u.text for u in units if u.text))
        out.append(ClaimView(text, tuple(cited), verdict.value == "supported", f"{verdict.value}: {reason}"))
    return out


def _binding(view: TraceView, principal: Principal) -> EvidenceBinding | None:
    """What the answer cites (else its context) as spans of stored versions, to recheck: items
    with a document, a version, offsets and their text."""
    answer = view.answer
    if answer is None or answer.abstained:
        return None
    context = _context(view)
    cited_ids = {c for claim in answer.claims for c in claim.citations}
    units = [i for i in context if cited_ids & {i.id, *i.aliases}] or list(context)
    spans = [CitedSpan(i.id, i.span.doc_id, i.span.version, i.span.start, i.span.end, span_hash(i.text),
                       DocStatus.CURRENT if i.current else DocStatus.SUPERSEDED)
             for i in units if i.span is not None and i.span.version != ANY_VERSION and i.text]
    return EvidenceBinding(0, principal, tuple(spans)) if spans else None


@dataclass(frozen=True)
class LiveSpec:
    """What the live diagnosis is made from, as plain values (it may be built in another process):
    the server's folder, and the flags ``ragdx diagnose`` takes."""

    data: Path
    queries: Path | None = None
    store: str | None = None
    stage_map: tuple[tuple[str, str], ...] = ()
    chunks: Path | None = None
    abstention: str | None = None
    config: str | None = None
    sets: tuple[str, ...] = ()
    settle: float = 2.0
    orphan_after: float = 60.0

    def open_store(self) -> Any:
        from ragdx.build import open_store
        return open_store(self.store, "read") if self.store else None

    def diagnoser(self) -> "LiveDiagnoser":
        from ragdx.config import load_settings
        from ragdx.traces.jsonl import read_chunks
        from ragdx.experiments.imported import checker_from
        from ragdx.queryset import load_queries
        return LiveDiagnoser(Spool(self.data / "serve.db"), load_queries(self.queries) if self.queries else [],
                             self.open_store if self.store else None, stage_map=dict(self.stage_map),
                             chunks=read_chunks(self.chunks) if self.chunks else None, abstention=self.abstention,
                             checker=checker_from(load_settings(self.config, list(self.sets))),
                             settle=self.settle, orphan_after=self.orphan_after)


def run_process(spec: LiveSpec, stop: Any, parent: int) -> None:
    """The live diagnosis in a process of its own (``ragdx serve`` starts it: diagnosing then
    runs beside the receiver, on another core); it ends when ``stop`` is set or its parent is
    gone (a server killed with ``kill -9`` leaves no diagnoser behind)."""
    live = spec.diagnoser()
    live._stop = stop
    live.parent = parent
    live._run()


class LiveDiagnoser:
    """Diagnoses the spool's ready traces, one at a time, with one store connection.

    Args:
        queries: the labelled questions (may be empty: every trace is unlabelled).
        open_store: opens the store holding the corpus (None: no store), in the thread that
            diagnoses (a SQLite connection belongs to its thread).
        stage_map, chunks, abstention, checker: as ``ragdx diagnose`` takes them.
    """

    def __init__(self, spool: Spool, queries: Sequence[Query], open_store: Any = None, *,
                 stage_map: Mapping[str, str] | None = None, chunks: Sequence[ItemView] | None = None,
                 abstention: str | None = None, checker: Any = None, settle: float = 2.0,
                 orphan_after: float = 60.0) -> None:
        from ragdx.stages.verify import LearnedChecker
        self.spool, self.queries = spool, list(queries)
        self.by_id = {q.id: q for q in self.queries}
        self.by_text = {q.question.strip(): q.id for q in self.queries}
        self.open_store, self.stage_map, self.chunks, self.abstention = open_store, stage_map, chunks, abstention
        self.checker = checker or LearnedChecker()
        self.settle, self.orphan_after = settle, orphan_after
        self._store: Any = None
        self._stop: Any = threading.Event()
        self._thread: threading.Thread | None = None
        self.parent: int | None = None  # in a process of its own: the server's pid, to end with it

    @property
    def store(self) -> Any:
        if self._store is None and self.open_store is not None:
            self._store = self.open_store()
        return self._store

    def match(self, spans: Sequence[SpanRecord]) -> Query | None:
        """The labelled question a trace asks: by the query id its spans name, else by its text."""
        qid = query_id_of(spans)
        if qid is not None and qid in self.by_id:
            return self.by_id[qid]
        key = find_question(spans, self.by_text)
        return self.by_id[key] if key is not None else None

    def diagnose(self, trace_id: str, spans: Sequence[SpanRecord], system: str | None) -> dict[str, Any]:
        """One trace's result row (see :class:`ragdx.serve.spool.Spool`); a trace that cannot be
        read is a row with its error."""
        source = f"trace {trace_id}"
        query = self.match(spans)
        label = query.id if query is not None else UNLABELLED + trace_id
        result: dict[str, Any] = {"query_id": label, "labelled": int(query is not None), "system": system,
                                  "question": query.question if query is not None else _question(spans)}
        named = [dataclasses.replace(s, attributes={**s.attributes, "ragdx.query_id": label}) for s in spans]
        try:
            traces, _ = spans_to_traces(named, self.stage_map, system, source)
            line, trace = traces[0]
            views, _ = prepare_views([(line, parse_trace(trace, source, line))], [query] if query else [],
                                     self.store, source=source, chunks=self.chunks, abstention=self.abstention)
        except InputError as exc:
            return result | {"error": str(exc)}
        view = views[0][1]
        result["trace"] = trace
        result.update(signals(view, self.checker))
        if query is not None:
            resolver = EvidenceResolver(self.store) if self.store is not None else None
            diagnoses, _, _, _ = diagnose_views([query], views, resolver, source=source, store=self.store,
                                                diagnoser=Diagnoser(self.checker, system=system or "imported system"))
            d = diagnoses[0]
            line = d.to_dict()
            result |= {"diagnosis": line, "outcome": line["outcome"], "first_failure": line["first_failure"]}
        if self.store is not None:
            binding = _binding(view, query.principal if query is not None else Principal())
            if binding is not None:
                checked = recheck(self.store, binding, where=source)
                result |= {"evidence_changed": int(not checked.valid), "recheck": checked.to_dict()}
        return result

    def step(self, limit: int = 200) -> int:
        """Diagnose the traces ready now (at most ``limit``, saved in one transaction); returns how
        many were saved."""
        results = []
        for trace_id, count, system, seen in self.spool.ready(self.settle, self.orphan_after, limit):
            spans = self.spool.spans(trace_id)
            try:
                result = self.diagnose(trace_id, spans, system)
            except Exception as exc:  # a bug in one trace's diagnosis must not stop the server
                log.exception("diagnosing trace %s failed", trace_id)
                result = {"query_id": UNLABELLED + trace_id, "labelled": 0, "error": f"internal error: {exc!r}"}
            result["seen"] = seen
            results.append((trace_id, count, result))
        if not results:
            return 0
        try:
            return self.spool.save_many(results)
        except (sqlite3.OperationalError, OSError):  # the database busy past its wait, a full disk: the loop retries
            raise
        except Exception:  # one trace's result no store can keep: set it aside, keep the others
            log.exception("saving %d diagnoses failed; saving them one at a time", len(results))
        saved = 0
        for trace_id, count, result in results:
            try:
                saved += self.spool.save_many([(trace_id, count, result)])
            except (sqlite3.OperationalError, OSError):
                raise
            except Exception as exc:
                saved += self.spool.save_many([(trace_id, count, {
                    "query_id": UNLABELLED + trace_id, "labelled": 0, "seen": result.get("seen"),
                    "error": f"set aside: its diagnosis could not be kept ({type(exc).__name__}: {exc})"})])
        return saved

    def loop(self, tick: float = 0.2) -> None:
        while not self._stop.is_set() and (self.parent is None or os.getppid() == self.parent):
            try:
                if not self.step():
                    self._stop.wait(tick)
            except Exception:  # the database busy past its wait, a full disk: retry on the next tick
                log.exception("the live diagnosis failed; retrying")
                self._stop.wait(1.0)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="ragdx-live", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.loop()
        finally:
            if self._store is not None:
                self._store.close()
            self.spool.close()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def prepared(self, row: Mapping[str, Any], store: Any) -> tuple[Query | None, TraceView | None, Any, Any]:
        """A result row's question (None: unlabelled), its trace view, evidence and diagnosis
        (None: unlabelled), made again from its stored trace with ``store`` (the caller's
        thread's) by the same engine."""
        if row.get("trace") is None:
            return None, None, None, None
        source = f"trace {row['trace_id']}"
        query = self.by_id.get(row["query_id"]) if row.get("labelled") else None
        views, _ = prepare_views([(1, parse_trace(row["trace"], source, 1))], [query] if query else [], store,
                                 source=source, chunks=self.chunks, abstention=self.abstention)
        if query is None:
            return None, views[0][1], None, None
        diagnoses, _, _, evidence = diagnose_views(
            [query], views, EvidenceResolver(store) if store is not None else None, source=source, store=store,
            diagnoser=Diagnoser(self.checker, system=row.get("system") or "imported system"))
        return query, views[0][1], evidence[0], diagnoses[0]


def displayed(view: TraceView, principal: Principal, store: Any) -> TraceView:
    """A view as the UI may show it: the text of an item that ``principal`` (the server's) may not
    read, as the store says, or that the trace marks unreadable, withheld. The principal a trace
    names never widens this."""
    mine = with_access(view, Query("display", "", principal), store) if store is not None else view
    hidden = {i.id for s in mine.stages for i in (*s.items, *(d.item for d in s.dropped)) if not i.readable}

    def hide(item: ItemView) -> ItemView:
        return dataclasses.replace(item, text="[withheld: this server may not read it]") if item.id in hidden else item

    return dataclasses.replace(view, stages=tuple(dataclasses.replace(
        s, items=tuple(hide(i) for i in s.items),
        dropped=tuple(dataclasses.replace(d, item=hide(d.item)) for d in s.dropped)) for s in view.stages))

"""Diagnosing the traces of another RAG system (``ragdx diagnose``): read the imported traces,
diagnose each query of the query set, and write a run folder with the diagnoses, the metrics and
the report.

Every query of the query set is counted: a query with no trace gets the outcome ``no_trace``; a
trace whose query id is not in the query set is skipped and counted, never diagnosed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

from ragdx.diagnosis.evidence import EvidenceResolver
from ragdx.diagnosis.imports import read_traces, resolve_offline, with_access
from ragdx.diagnosis.locate import Diagnoser, TraceView
from ragdx.diagnosis.records import Diagnosis, Outcome
from ragdx.evaluation.layered import Metrics, layered, query_values
from ragdx.protocols import Store
from ragdx.runfolder import Executed, write_json, write_report
from ragdx.types import Query

__all__ = ["ImportedRun", "diagnose_views", "diagnose_imported"]


@dataclass(frozen=True, slots=True)
class ImportedRun:
    """What diagnosing imported traces produced, with the counts a user must see."""

    folder: Path
    diagnoses: tuple[Diagnosis, ...]
    metrics: Metrics
    traces: int                   # lines read as traces
    malformed: tuple[str, ...]    # one message per line that could not be read (skipped)
    unmatched: tuple[str, ...]    # one message per trace whose query id is not in the query set
    untraced: tuple[str, ...]     # the query ids no trace was imported for


def diagnose_views(queries: Sequence[Query], views: Sequence[tuple[int, TraceView]],
                   resolver: EvidenceResolver | None = None, *, source: str = "traces"
                   ) -> tuple[list[Diagnosis], list[str], list[str]]:
    """Diagnose each query from its imported trace view.

    Returns:
        The diagnoses in query-set order (``no_trace`` for a query without a trace), a message per
        trace whose query id is not in the query set, and the ids of the untraced queries.
    """
    by_id = {q.id: q for q in queries}
    diagnosed: dict[str, Diagnosis] = {}
    unmatched = []
    for line, view in views:
        query = by_id.get(view.query_id)
        if query is None:
            unmatched.append(f"{source}:{line}: query_id {view.query_id!r} is not in the query set; line skipped")
            continue
        diagnosed[query.id] = Diagnoser().run(query, resolve_offline(query, resolver), view)
    untraced = [q.id for q in queries if q.id not in diagnosed]
    diagnoses = [diagnosed.get(q.id) or Diagnosis(q.id, Outcome.NO_TRACE, None, (), (),
                                                   "No trace was imported for this query.")
                 for q in queries]
    return diagnoses, unmatched, untraced


def diagnose_imported(traces_path: Path, queries: Sequence[Query], out: Path, store: Store | None = None
                      ) -> ImportedRun:
    """Read ``traces_path``, diagnose every query, and write ``out``'s ``diagnosis.jsonl``,
    ``metrics.json`` and ``report.html``.

    Args:
        traces_path: the imported traces (JSONL, docs/diagnosis.md).
        queries: the query set.
        out: the folder to write.
        store: a store holding the corpus, to resolve quotes to spans (optional).
    """
    views, malformed = read_traces(traces_path)
    resolver = EvidenceResolver(store) if store is not None else None
    if store is not None:  # what the store says the principal may not read
        by_id = {q.id: q for q in queries}
        views = [(line, with_access(view, by_id[view.query_id], store) if view.query_id in by_id else view)
                 for line, view in views]
    diagnoses, unmatched, untraced = diagnose_views(queries, views, resolver, source=str(traces_path))
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "diagnosis.jsonl", "w", encoding="utf-8") as fh:
        for diagnosis in diagnoses:
            fh.write(json.dumps(diagnosis.to_dict()) + "\n")
    by_query = {v.query_id: v for _, v in views}
    evidence = [resolve_offline(q, resolver) for q in queries]
    view_list = [by_query.get(q.id) for q in queries]
    rows = [query_values(q, d, v, e) for q, d, v, e in zip(queries, diagnoses, view_list, evidence)]
    metrics = layered(rows)
    write_json(out / "metrics.json", metrics.to_dict())
    from ragdx import __version__
    info = {"ragdx_version": __version__, "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "store": str(getattr(store, "path", "")) if store is not None else None,
            "index_version": store.index_version if store is not None else None}
    done = Executed((), tuple(diagnoses), tuple(rows), tuple(view_list), tuple(evidence))  # type: ignore[arg-type]
    write_report(out, info, queries, done, metrics, store)
    return ImportedRun(out, tuple(diagnoses), metrics, len(views), tuple(malformed), tuple(unmatched),
                       tuple(untraced))

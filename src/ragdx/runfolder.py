"""A run folder: the files ``ragdx run``, ``ragdx diagnose`` and ``ragdx ablate`` write
(docs/diagnosis.md, "Run folders").

| file | contents |
|---|---|
| ``manifest.json`` | settings, the stages, ragdx version, models and their hashes, index version, seed, inputs |
| ``traces.jsonl`` | every stage's artifacts, per query |
| ``diagnosis.jsonl`` | the first-loss diagnosis, per query |
| ``metrics.json`` | the layered metrics, overall and per tag, and every query's values |
| ``report.html`` | one self-contained page: funnel, outcomes, per-tag tables, drill-down |
| ``queries.jsonl`` | the questions the folder covers, with their labels as run (``ragdx compare`` pairs them) |
| ``run.db`` | ``ragdx run`` only: the durable run state (items, leases, draft checkpoints, what is published) |

Running a query set is :mod:`ragdx.experiments.run`, durably :mod:`ragdx.experiments.durable`;
this module only writes what they produced.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ragdx.diagnosis.evidence import QueryEvidence
from ragdx.diagnosis.locate import Diagnosis, TraceView
from ragdx.evaluation.layered import Metrics, QueryValues
from ragdx.pipeline import Pipeline, Trace
from ragdx.types import Query

__all__ = ["Executed", "write_json", "write_lines", "manifest", "fingerprint", "write_queries", "write_report", "RUN_DB", "PUBLISHED",
           "SUMMARY", "append_published", "repair_published"]

RUN_DB = "run.db"
"""The durable run state's SQLite database, inside the run folder (docs/durable.md)."""

PUBLISHED = ("traces.jsonl", "diagnosis.jsonl")
"""The files a published item appends one line to each, in this order."""

SUMMARY = ("manifest.json", "metrics.json", "report.html", "queries.jsonl")
"""The files written once every item of a run is published or failed."""


@dataclass(frozen=True, slots=True)
class Executed:
    """What running a query set produced, in query order."""

    traces: tuple[Trace, ...]
    diagnoses: tuple[Diagnosis, ...]
    rows: tuple[QueryValues, ...]
    views: tuple[TraceView, ...]
    evidence: tuple[QueryEvidence, ...]


def json_line(obj: Any) -> str:
    """One line of a run folder's JSONL files: UTF-8 text as it is (escaping every non-ASCII
    character costs a third of the encoding time of a trace), NaN refused."""
    return json.dumps(obj, ensure_ascii=False, allow_nan=False) + "\n"


def write_lines(path: Path, objs: Any) -> None:
    """Write JSON lines whole or not at all (a temporary file, then an atomic rename)."""
    _replace(path, "".join(json_line(o) for o in objs))


def write_json(path: Path, obj: Any) -> None:
    """Write JSON whole or not at all (a temporary file, then an atomic rename); NaN is refused."""
    _replace(path, json.dumps(obj, indent=2, allow_nan=False) + "\n")


def append_published(out: Path, sizes: tuple[int, ...] | None, lines: tuple[str, ...],
                     history: Callable[[], Sequence[tuple[str, ...]]]) -> tuple[int, ...]:
    """Append one published item's lines to :data:`PUBLISHED`, after cutting each file back to
    ``sizes``, the sizes the last committed publication left: a publication torn by a crash is
    undone, never doubled. A file shorter than that (the machine was lost before the system wrote
    it to disk), or any when ``sizes`` is None (its record was damaged), is written again from
    ``history``, every line published so far, in order.

    Returns:
        The files' new sizes, for the caller to commit with the publication.
    """
    paths = [out / name for name in PUBLISHED]
    if sizes is None or any(not p.exists() or p.stat().st_size < size for p, size in zip(paths, sizes)):
        earlier = history()
        for k, path in enumerate(paths):
            _replace(path, _published_text(earlier, k))
    else:
        for path, size in zip(paths, sizes):
            os.truncate(path, size)
    new = []
    for path, line in zip(paths, lines):
        with open(path, "ab") as fh:
            fh.write(line.encode("utf-8") + b"\n")
            new.append(fh.tell())
    return tuple(new)


def repair_published(out: Path, history: Sequence[tuple[str, ...]]) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """Write :data:`PUBLISHED` again from ``history`` (every line published, in order) where a
    file differs from it: missing, truncated, lines appended or changed.

    Returns:
        The files' sizes, and each file written again with what was wrong with it.
    """
    sizes, repaired = [], []
    for k, name in enumerate(PUBLISHED):
        path, want = out / name, _published_text(history, k).encode("utf-8")
        try:
            have = path.read_bytes()
        except FileNotFoundError:
            have = None
        if have != want:
            why = ("was missing" if have is None else "was truncated" if want.startswith(have) else
                   "had text appended" if have.startswith(want) else "was changed")
            _replace(path, want.decode("utf-8"))
            if have is None and not want:  # nothing published yet: the file is new, not repaired
                continue
            repaired.append(f"{path} {why}: written again from the published checkpoints in {out / RUN_DB}")
        sizes.append(len(want))
    return tuple(sizes), tuple(repaired)


def _published_text(history: Sequence[tuple[str, ...]], k: int) -> str:
    return "".join(line[k] + "\n" for line in history)


def _replace(path: Path, text: str) -> None:
    """Write a file whole or not at all (a temporary file, then an atomic rename)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def manifest(pipeline: Pipeline, queries_path: Path | None) -> dict:
    """What a run ran: ragdx, the settings, the stages in order with their configs, the models,
    the index version, the seed and the query set."""
    from ragdx import __version__
    store, settings = pipeline.store, pipeline.settings
    space = store.active_space() if pipeline.encoder is not None else None
    return {
        "ragdx_version": __version__, "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "settings": settings.to_dict() if settings is not None else None,
        "seed": settings.seed if settings is not None else None,
        "stages": [{"name": s.name, "kind": s.kind.value, "class": type(s).__qualname__,
                    "config": _plain(getattr(s, "config", {}))} for s in pipeline.stages],
        "store": str(getattr(store, "path", "")), "index_version": store.index_version,
        "embedding_space": None if space is None else {
            "id": space.id, "model": space.model_id, "weights_hash": space.weights_hash,
            "dim": space.dim, "max_tokens": space.max_tokens},
        "reranker_weights": getattr(pipeline.reranker, "weights", None),
        "queries": None if queries_path is None else {"path": str(queries_path), "sha256": _sha256(queries_path)},
        "fingerprint": fingerprint(store, settings.to_dict() if settings is not None else None, queries_path),
    }


def fingerprint(store: Any, settings: Mapping[str, Any] | None, queries_path: Path | None) -> dict[str, Any]:
    """What a run's results depend on, each as a digest (``ragdx compare`` says which differ): the
    settings, ragdx's code (all of its source), the index version, the corpus (every stored
    version's id, content hash, status and access) and the query set."""
    from ragdx.caching import code_digest
    out: dict[str, Any] = {
        "settings": None if settings is None else _digest(json.dumps(settings, sort_keys=True, default=str)),
        "code": code_digest("ragdx"),  # all of ragdx's source, as the result cache keys ragdx's stages
        "index_version": None, "corpus": None,
        "queries": None if queries_path is None else _sha256(queries_path)[:16]}
    if store is not None:
        rows = sorted((v.document.doc_id, v.document.version, v.document.content_hash, v.document.status.value,
                       sorted(v.document.acl)) for v in store.versions())
        out |= {"index_version": store.index_version, "corpus": _digest(json.dumps(rows))}
    return out


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def write_queries(out: Path, queries: Sequence[Query]) -> Path:
    """Write ``queries.jsonl``, the questions a run folder covers with their labels as run, so the
    folder can be compared on its own (``ragdx compare``) after the query set has moved on."""
    from ragdx.queryset import query_to_dict
    path = out / "queries.jsonl"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(json.dumps(query_to_dict(q), ensure_ascii=False) + "\n" for q in queries), encoding="utf-8")
    tmp.replace(path)
    return path


def write_report(out: Path, info: dict, queries: Sequence[Query], done: Executed, metrics: Metrics,
                 store: Any, ablation: Any = None) -> Path:
    """Write ``report.html`` (self-contained) and ``queries.jsonl`` (:func:`write_queries`) into the
    run folder."""
    from ragdx.report.html import render_report
    write_queries(out, queries)
    path = out / "report.html"
    _replace(path, render_report(info, queries, done.diagnoses, done.views, done.evidence, metrics, store,
                                 ablation))
    return path


def _plain(config: Any) -> Any:
    """A stage's config as JSON values (anything else as its text)."""
    try:
        return json.loads(json.dumps(dict(config), allow_nan=False))
    except (TypeError, ValueError):
        return {str(k): v if isinstance(v, (str, int, float, bool, type(None))) else str(v)
                for k, v in dict(config).items()}

"""``ragdx ingest``, ``delete``, ``docs`` and ``evidence``: what the store holds."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from ragdx.cli._common import _command, _configurable, _distributable, _executor, _positive, _purge_cache, \
    _settings, _store, log


def cmd_ingest(args: argparse.Namespace) -> int:
    from ragdx.build import build_ingestor
    settings = _settings(args)
    with _executor(args) as executor, _store(args, "create") as store:
        report = build_ingestor(store, settings, workers=args.workers, executor=executor).run(
            Path(args.path), allow_outside=args.allow_outside)
        _purge_cache(args, store, settings)
    if args.json:
        print(json.dumps({
            "documents": report.documents, "bytes": report.bytes, "chunks": report.chunks,
            "seconds": round(report.seconds, 3), "index_version": report.index_version,
            "actions": [{"doc_id": a.doc_id, "version": a.version, "action": a.action,
                         "detail": a.detail} for a in report.actions],
            "skipped_files": list(report.skipped_files), "warnings": list(report.warnings)}, indent=2))
        return 0
    for warning in report.warnings:
        log.warning("%s", warning)
    counts = ", ".join(f"{report.count(a)} {word}" for a, word in
                       (("add", "added"), ("update", "updated"), ("rechunk", "re-chunked"),
                        ("unchanged", "unchanged")))
    print(f"{report.documents} documents ({report.bytes / 1e6:.2f} MB): {counts}; "
          f"{report.chunks} chunks in {report.seconds:.2f} s; index version {report.index_version}")
    if report.embedding is not None:
        e = report.embedding
        print(f"vectors: {e.encoded} encoded, {e.reused} reused, {e.truncated} truncated by the "
              f"encoder's window, in {e.seconds:.2f} s")
        if e.statements is not None:
            print(f"statement vectors of {e.statements.chunks} chunks: {e.statements.encoded} encoded "
                  f"in {e.statements.seconds:.2f} s")
    return 0


def _args_ingest(sub: argparse._SubParsersAction) -> None:
    """The arguments of ``ragdx ingest``."""
    p = _command(sub, "ingest", cmd_ingest, "ingest a manifest (.jsonl) or a folder into the store")
    p.add_argument("--store", required=True, help="the store file (created when missing)")
    p.add_argument("path", help="a manifest JSONL file or a folder")
    p.add_argument("--json", action="store_true", help="print the full report as JSON")
    p.add_argument("--allow-outside", action="store_true", help="let the manifest name files outside its "
                   "folder (../, absolute paths; refused by default)")
    p.add_argument("--workers", type=_positive, default=os.cpu_count() or 1,
                   help="processes that parse documents (default: one per core); one process writes")
    _distributable(p, "embed the chunks")
    _configurable(p)


def cmd_delete(args: argparse.Namespace) -> int:
    from ragdx.ingest.ingestor import delete_documents
    with _store(args, "write") as store:
        deleted = delete_documents(store, args.doc_ids)
        _purge_cache(args, store)
        for doc_id, versions in deleted.items():
            print(f"deleted {doc_id} ({len(versions)} version{'s' * (len(versions) != 1)})")
        print(f"index version {store.index_version}")
    return 0


def _args_delete(sub: argparse._SubParsersAction) -> None:
    """The arguments of ``ragdx delete``."""
    p = _command(sub, "delete", cmd_delete, "delete documents (every version) from the store")
    p.add_argument("--store", required=True)
    p.add_argument("doc_ids", nargs="+", metavar="DOC_ID")


def cmd_docs(args: argparse.Namespace) -> int:
    from ragdx.report.terminal import table
    with _store(args) as store:
        rows = []
        for stored in store.versions():
            d = stored.document
            rows.append((d.doc_id, d.version, d.status.value, ",".join(d.acl), d.format,
                         len(store.chunks(d.doc_id, d.version)), d.title))
        print(table(["doc_id", "version", "status", "acl", "format", "chunks", "title"], rows))
    return 0


def _args_docs(sub: argparse._SubParsersAction) -> None:
    """The arguments of ``ragdx docs``."""
    p = _command(sub, "docs", cmd_docs, "list the stored document versions")
    p.add_argument("--store", required=True)


def _print_evidence(records) -> None:
    from ragdx.report.terminal import table
    print(table(["query", "group", "doc", "status", "chunks", "note"], [
        (r["query_id"] + (" (restricted)" if r["restricted"] else ""), f"{r['group']}.{r['alternative']}",
         r["doc"] or "", r["status"], f"{r['coverage']}: {len(r['chunks_full'])} whole, "
         f"{len(r['chunks_partial'])} part" if r["coverage"] else "-", r["note"])
        for r in records], max_width=48))


def cmd_evidence(args: argparse.Namespace) -> int:
    from ragdx.diagnosis.evidence import evidence_records
    from ragdx.queryset import load_queries
    queries = load_queries(Path(args.queries))
    with _store(args) as store:
        records = evidence_records(store, queries, args.strict)
    if args.json:
        for record in records:
            print(json.dumps(record))
    else:
        _print_evidence(records)
    unresolved = sum(1 for r in records if r["status"] not in ("resolved", "by_id"))
    if unresolved:
        log.warning("%d required alternative(s) could not be resolved to a span", unresolved)
    return 0


def _args_evidence(sub: argparse._SubParsersAction) -> None:
    """The arguments of ``ragdx evidence``."""
    p = _command(sub, "evidence", cmd_evidence,
                      "resolve a query set's required evidence to spans and the chunks that hold them")
    p.add_argument("--store", required=True)
    p.add_argument("--queries", required=True, help="the query set (JSONL)")
    p.add_argument("--strict", action="store_true", help="an unresolved quote is an error (exit 2)")
    p.add_argument("--json", action="store_true", help="print JSON lines")

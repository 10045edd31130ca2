"""The ``ragdx`` command line: a thin layer over the library.

Data goes to stdout (or files); logs and progress go to stderr. Exit codes: 0 success, 2 bad
usage or bad input (the message names what is wrong), 1 an internal failure.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
from pathlib import Path
from typing import Callable, Sequence

log = logging.getLogger("ragdx")


def _store(args: argparse.Namespace):
    from ragdx.store.sqlite import SQLiteStore
    return SQLiteStore(args.store)


def _chunker_config(args: argparse.Namespace):
    from ragdx.ingest.chunk import ChunkerConfig
    return ChunkerConfig(max_tokens=args.max_tokens, overlap_tokens=args.overlap_tokens)


def cmd_ingest(args: argparse.Namespace) -> int:
    from ragdx.ingest.ingestor import Ingestor
    with _store(args) as store:
        report = Ingestor(store, _chunker_config(args)).run(Path(args.path))
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
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    from ragdx.ingest.ingestor import delete_documents
    with _store(args) as store:
        deleted = delete_documents(store, args.doc_ids)
        for doc_id, versions in deleted.items():
            print(f"deleted {doc_id} ({len(versions)} version{'s' * (len(versions) != 1)})")
        print(f"index version {store.index_version}")
    return 0


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


def _evidence_rows(store, queries, strict: bool):
    from ragdx.diagnosis.evidence import EvidenceResolver
    resolver = EvidenceResolver(store)
    records = []
    for query in queries:
        for restricted in (False, True):
            evidence = resolver.run(query, strict=strict, restricted=restricted)
            for alt in evidence.alternatives:
                cov = alt.coverage
                records.append({
                    "query_id": query.id, "restricted": restricted, "group": alt.group,
                    "alternative": alt.index, "doc": alt.alternative.doc,
                    "quote": alt.alternative.quote, "status": alt.status,
                    "span": None if alt.span is None else {
                        "doc": alt.span.doc_id, "version": alt.span.version,
                        "start": alt.span.start, "end": alt.span.end},
                    "coverage": cov.status if cov else None,
                    "chunks_full": list(cov.full) if cov else [],
                    "chunks_partial": list(cov.partial) if cov else [], "note": alt.note})
    return records


def _print_evidence(records) -> None:
    from ragdx.report.terminal import table
    print(table(["query", "group", "doc", "status", "chunks", "note"], [
        (r["query_id"] + (" (restricted)" if r["restricted"] else ""), f"{r['group']}.{r['alternative']}",
         r["doc"] or "", r["status"], f"{r['coverage']}: {len(r['chunks_full'])} whole, "
         f"{len(r['chunks_partial'])} part" if r["coverage"] else "-", r["note"])
        for r in records], max_width=48))


def cmd_evidence(args: argparse.Namespace) -> int:
    from ragdx.queryset import load_queries
    queries = load_queries(Path(args.queries))
    with _store(args) as store:
        records = _evidence_rows(store, queries, args.strict)
    if args.json:
        for record in records:
            print(json.dumps(record))
    else:
        _print_evidence(records)
    unresolved = sum(1 for r in records if r["status"] not in ("resolved", "by_id"))
    if unresolved:
        log.warning("%d required alternative(s) could not be resolved to a span", unresolved)
    return 0


def example_dir() -> Path:
    """The bundled example (the refund scenario), shipped inside the package."""
    return Path(__file__).parent / "examples" / "refund"


def cmd_demo(args: argparse.Namespace) -> int:
    from ragdx.ingest.ingestor import Ingestor
    from ragdx.queryset import load_queries
    from ragdx.store.sqlite import SQLiteStore
    out = Path(args.out)
    example = example_dir()
    if out.exists():
        if not (out / "store.db").exists() and any(out.iterdir()):
            raise _usage_error(f"--out {out} exists and is not a ragdx demo folder; choose another")
        shutil.rmtree(out)
    out.mkdir(parents=True)
    log.info("ingesting the bundled example %s", example)
    with SQLiteStore(out / "store.db") as store:
        report = Ingestor(store).run(example / "manifest.jsonl")
        print(f"Ingested {report.documents} document versions ({report.count('add')} added) into "
              f"{out / 'store.db'}: {report.chunks} chunks, index version {report.index_version}.")
        queries = load_queries(example / "queries.jsonl")
        records = _evidence_rows(store, queries, strict=False)
    with open(out / "evidence.jsonl", "w", encoding="utf-8") as fh:
        for record in records:
            fh.write(json.dumps(record) + "\n")
    print(f"\nRequired evidence of {len(queries)} queries, resolved to source spans and chunks:\n")
    _print_evidence(records)
    whole = sum(1 for r in records if r["coverage"] == "full")
    print(f"\n{whole} of {len(records)} required alternatives lie whole inside one chunk. "
          f"Details: {out / 'evidence.jsonl'}")
    return 0


class _UsageError(Exception):
    pass


def _usage_error(message: str) -> _UsageError:
    return _UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ragdx", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log more to stderr")
    parser.add_argument("--version", action="version", version=f"ragdx {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, func: Callable[[argparse.Namespace], int], help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.set_defaults(func=func)
        return p

    def chunking(p: argparse.ArgumentParser) -> None:
        p.add_argument("--max-tokens", type=int, default=180, help="tokens per chunk at most")
        p.add_argument("--overlap-tokens", type=int, default=0, help="overlap between chunks")

    p = command("ingest", cmd_ingest, "ingest a manifest (.jsonl) or a folder into the store")
    p.add_argument("--store", required=True, help="the store file (created when missing)")
    p.add_argument("path", help="a manifest JSONL file or a folder")
    p.add_argument("--json", action="store_true", help="print the full report as JSON")
    chunking(p)

    p = command("delete", cmd_delete, "delete documents (every version) from the store")
    p.add_argument("--store", required=True)
    p.add_argument("doc_ids", nargs="+", metavar="DOC_ID")

    p = command("docs", cmd_docs, "list the stored document versions")
    p.add_argument("--store", required=True)

    p = command("evidence", cmd_evidence,
                "resolve a query set's required evidence to spans and the chunks that hold them")
    p.add_argument("--store", required=True)
    p.add_argument("--queries", required=True, help="the query set (JSONL)")
    p.add_argument("--strict", action="store_true", help="an unresolved quote is an error (exit 2)")
    p.add_argument("--json", action="store_true", help="print JSON lines")

    p = command("demo", cmd_demo, "run ragdx on the bundled example")
    p.add_argument("--out", default="ragdx-demo", help="the demo's output folder (default ragdx-demo)")
    return parser


def _version() -> str:
    from ragdx import __version__
    return __version__


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="ragdx: %(message)s", stream=sys.stderr)
    from ragdx.errors import RagdxError
    try:
        return args.func(args)
    except RagdxError as exc:
        print(f"ragdx {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except _UsageError as exc:
        print(f"ragdx {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())

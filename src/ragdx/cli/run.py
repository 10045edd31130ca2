"""``ragdx ask``, ``run``, ``recheck``, ``ablate``, ``fit`` and ``demo``: the pipeline run on one
question or a query set, and an answer's evidence checked again."""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import nullcontext
from pathlib import Path

from ragdx.cli._common import _UsageError, _absolute, _command, _configurable, _distributable, _executor, \
    _principal, _remote, _settings, _store, _with_cache, log
from ragdx.errors import EXIT_FAULT, EXIT_ITEMS_FAILED, EXIT_RECHECK_CHANGED

RECHECK_CHANGED = EXIT_RECHECK_CHANGED
"""``ragdx recheck``'s exit code when the answer's evidence changed or expired."""
_FAULT_EXIT = EXIT_FAULT


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

"""``ragdx compare``, ``diagnose``, ``serve``, ``export`` and ``eval``: runs compared, other systems'
traces diagnosed (from files, or received live), a run's traces exported, a TREC run evaluated."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ragdx.cli._common import _UsageError, _command, _configurable, _principal, _settings, _store, log


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

"""``ragdx label``: each question's required evidence proposed from its reference answer,
reviewed on a page, and the decisions applied."""

from __future__ import annotations

import argparse
from pathlib import Path

from ragdx.cli._common import _UsageError, _command, _configurable, _settings, _store, log


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
        print(f"review page: {out} ({shown} question{'s' if shown != 1 else ''}); open it, decide, and download the decisions file; "
              f"then: ragdx label --apply DECISIONS.json --queries {args.queries} --out FINAL.jsonl")
        return 0
    written, rejected, dropped = apply_decisions(Path(args.queries), Path(args.apply), out)
    print(f"{out}: {written} question{'s' if written != 1 else ''} written ({rejected} group{'s' if rejected != 1 else ''} rejected, "
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

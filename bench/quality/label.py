"""``ragdx label`` against hand labels: on the dev set, the hand labels hidden and only the
reference answers given, how well the proposed required evidence matches the hand-labelled one,
and whether ragdx's diagnosis of the same run's traces comes out the same with either.

Reproduce, from the repository root (the dev set and its store built by ``bench/quality/quality.py``)::

    nice -n 10 .venv/bin/python bench/quality/label.py --half test [--run RUN | --traces SPANS]
    # another labelled set on its own corpus: PostgreSQL 15/17 (bench/quality/pg_versions.py builds both)
    nice -n 10 .venv/bin/python bench/quality/label.py --queries bench/devset/pg-versions.jsonl \
        --store bench/.cache/pg-versions/store.db --run bench/.cache/pg-versions/run --out bench/results/label-pg.json
    # references written in a person's words, on the same store: pg-general.{fit,test}.jsonl,
    # pg-label.{fit,test}.jsonl and pg-label2.{fit,test}.jsonl (results label-pg-general-*.json,
    # label-pg-label-*.json, label-pg-label2-*.json)
    nice -n 10 .venv/bin/python bench/quality/label.py --queries bench/devset/pg-label.test.jsonl \
        --store bench/.cache/pg-versions/store.db --no-diagnosis --out bench/results/label-pg-label-test.json

Each step goes through ragdx's CLI. The half's questions are written as a plain evaluation set
(``id``, ``question``, ``answer`` = the reference answer where the dev set has one, ``principal``),
without ``required``; ``ragdx label`` proposes their evidence (both channels with the int8 encoder
bench/quality/quality.py uses, the packaged cross-encoder); ``ragdx evidence --strict`` checks that every
proposed span resolves. Then:

- **groups**: a proposed group matches a hand group of the same question when one of its
  alternatives overlaps one of the hand group's (same document, same version, overlapping
  characters; the spans as ``ragdx evidence`` resolves them). Precision: the share of proposed
  groups that match a hand group; recall: the share of hand groups some proposed group matches;
  over the questions with hand labels (the answerable ones), and every group proposed anywhere.
- **diagnosis agreement**: the run's traces (``--run``, a ``ragdx run`` folder of this half; by
  default one is made as bench/quality/quality.py makes it) exported with ``ragdx export`` and diagnosed
  by ``ragdx diagnose --store`` twice (``--traces SPANS``: a run exported before, diagnosed as it is), with the hand labels and with the proposed ones: the share
  of questions whose first failure is the same (and whose outcome is the same), over all questions
  and over the answerable ones.

Printed, and written to ``--out`` (default ``bench/results/label.json``).
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _common, and the areas
from _common import DEVSET, INT8, REPO, code_version, label_table, machine, write_result

RAGDX = str(Path(sys.executable).with_name("ragdx"))
DEFAULT_OUT = REPO / "bench" / "results" / "label.json"
TARGETS = {"precision": 0.85, "recall": 0.85, "first-failure agreement": 0.90}


def ragdx(args: list[str]) -> tuple[str, float]:
    started = time.perf_counter()
    done = subprocess.run([RAGDX, *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"ragdx {args[0]} failed ({done.returncode}): {done.stderr.strip()[-3000:]}")
    return done.stdout, time.perf_counter() - started


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def spans_of(store_path: Path, queries_path: Path) -> dict[str, list[list[tuple]]]:
    """Each query's required groups as lists of resolved spans (doc, version, start, end)."""
    from ragdx.build import open_store
    from ragdx.diagnosis.evidence import EvidenceResolver
    from ragdx.queryset import load_queries
    out: dict[str, list[list[tuple]]] = {}
    with open_store(str(store_path)) as store:
        resolver = EvidenceResolver(store)
        for query in load_queries(queries_path):
            evidence = resolver.run(query)
            groups: list[list[tuple]] = [[] for _ in query.required]
            for a in evidence.alternatives:
                if a.span is not None:
                    groups[a.group].append((a.span.doc_id, a.span.version, a.span.start, a.span.end))
            out[query.id] = groups
    return out


def overlaps(a: list[tuple], b: list[tuple]) -> bool:
    return any(x[0] == y[0] and x[1] == y[1] and x[2] < y[3] and y[2] < x[3] for x in a for y in b)


def group_scores(hand: dict[str, list[list[tuple]]], proposed: dict[str, list[list[tuple]]]) -> dict:
    proposed_n = matched_p = hand_n = matched_h = 0
    misses, extras = [], []
    for qid, hand_groups in hand.items():
        mine = proposed.get(qid, [])
        proposed_n += len(mine)
        for g, group in enumerate(mine):
            if any(overlaps(group, h) for h in hand_groups):
                matched_p += 1
            elif hand_groups:
                extras.append({"id": qid, "group": g, "at": group[0][:2] if group else None})
        hand_n += len(hand_groups)
        for g, h in enumerate(hand_groups):
            if any(overlaps(group, h) for group in mine):
                matched_h += 1
            else:
                misses.append({"id": qid, "group": g, "at": h[0][:2] if h else None})
    return {"precision": round(matched_p / proposed_n, 4) if proposed_n else None, "proposed_groups": proposed_n,
            "proposed_matched": matched_p, "recall": round(matched_h / hand_n, 4) if hand_n else None,
            "hand_groups": hand_n, "hand_matched": matched_h, "missed": misses, "extra": extras}


def agreement(hand: dict[str, dict], proposed: dict[str, dict], ids: list[str]) -> dict:
    same_ff = sum(1 for q in ids if hand[q]["first_failure"] == proposed[q]["first_failure"])
    same_out = sum(1 for q in ids if hand[q]["outcome"] == proposed[q]["outcome"])
    return {"n": len(ids), "first_failure": round(same_ff / len(ids), 4), "outcome": round(same_out / len(ids), 4)}


def run(args: argparse.Namespace) -> dict:
    devset, store = args.devset.resolve(), args.store.resolve()
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    hand_path = args.queries.resolve() if args.queries else devset / f"queries.{args.half}.jsonl"
    tag = hand_path.stem if args.queries else args.half  # the work files' suffix
    queries = read_jsonl(hand_path)
    sets = ["--set", "retrieval.dense.backend=onnx", "--set", f"retrieval.dense.model={INT8}"]
    tests = work / f"tests.{tag}.jsonl"  # the hand labels hidden: question and reference answer only
    with open(tests, "w", encoding="utf-8") as fh:
        for q in queries:
            row = {"id": q["id"], "question": q["question"]} | ({"principal": q["principal"]} if q.get("principal") else {})
            if q.get("answer"):
                row["answer"] = q["answer"]
            fh.write(json.dumps(row) + "\n")
    proposed_path = work / f"proposed.{tag}.jsonl"
    print(f"ragdx label on {len(queries)} questions ...", file=sys.stderr, flush=True)
    out, label_s = ragdx(["label", "--store", str(store), "--tests", str(tests), "--out", str(proposed_path),
                          "--scorer", args.scorer, *sets, "-q"])
    print(out.strip(), file=sys.stderr)
    ragdx(["evidence", "--store", str(store), "--queries", str(proposed_path), "--strict", "--json"])
    hand_spans, proposed_spans = spans_of(store, hand_path), spans_of(store, proposed_path)
    answerable = [q["id"] for q in queries if q.get("required")]
    scores = group_scores({q: hand_spans[q] for q in answerable}, proposed_spans)
    # the FAQ questions' references are the page's words; the others are written, often tersely
    kinds = {name: group_scores({q: hand_spans[q] for q in answerable if q.startswith("faq-") == faq},
                                {q: g for q, g in proposed_spans.items() if q.startswith("faq-") == faq})
             for name, faq in (("faq", True), ("written", False))}
    # proposals for questions the hand labels leave without evidence count against precision too
    stray = sum(len(proposed_spans.get(q["id"], [])) for q in queries if not q.get("required"))
    proposed = {p["id"]: p for p in read_jsonl(proposed_path)}
    review = sum(1 for p in proposed.values() if p["metadata"]["label"]["needs_review"])
    unsupported = sum(len(p["metadata"]["label"]["unsupported_reference"]) for p in proposed.values())
    result: dict = {
        "benchmark": "label", "command": shlex.join([".venv/bin/python", "bench/quality/label.py", *sys.argv[1:]]),
        "code": code_version(), "machine": machine(), "half": args.half if not args.queries else None,
        "queries_file": str(hand_path), "queries": len(queries),
        "answerable": len(answerable), "scorer": args.scorer, "label_seconds": round(label_s, 1),
        "groups": {k: v for k, v in scores.items() if k not in ("missed", "extra")} | {"stray_groups": stray},
        "groups_by_kind": {n: {k: v for k, v in sc.items() if k not in ("missed", "extra")} for n, sc in kinds.items()},
        "needs_review": review, "unsupported_reference_claims": unsupported,
        "missed": scores["missed"], "extra": scores["extra"]}
    if not args.no_diagnosis:
        run_dir = args.run
        spans = work / f"spans.{tag}.jsonl"
        if args.traces is not None:
            spans = args.traces.resolve()
        elif run_dir is None:
            run_dir = work / f"run-{tag}"
            if run_dir.exists():
                shutil.rmtree(run_dir)
            print(f"ragdx run into {run_dir} ...", file=sys.stderr, flush=True)
            ragdx(["run", "--store", str(store), "--queries", str(hand_path), "--out", str(run_dir), *sets,
                   "--set", "cache.enabled=false", "-q"])
        if args.traces is None:
            ragdx(["export", "--run", str(run_dir), "--out", str(spans)])
        diagnoses = {}
        for name, path in (("hand", hand_path), ("proposed", proposed_path)):
            folder = work / f"diagnose-{name}.{tag}"
            ragdx(["diagnose", "--traces", str(spans), "--queries", str(path), "--store", str(store),
                   "--out", str(folder), "--system", "ragdx", "-q"])
            diagnoses[name] = {d["id"]: d for d in read_jsonl(folder / "diagnosis.jsonl")}
        ids = [q["id"] for q in queries]
        result["run"] = str(run_dir if args.traces is None else args.traces)
        result["agreement"] = {"all": agreement(diagnoses["hand"], diagnoses["proposed"], ids),
                               "answerable": agreement(diagnoses["hand"], diagnoses["proposed"], answerable)}
        result["first_failure"] = {n: dict(Counter(str(d[q]["first_failure"]) for q in ids).most_common())
                                   for n, d in diagnoses.items()}
        result["disagreements"] = [
            {"id": q, "hand": [diagnoses["hand"][q]["outcome"], diagnoses["hand"][q]["first_failure"]],
             "proposed": [diagnoses["proposed"][q]["outcome"], diagnoses["proposed"][q]["first_failure"]]}
            for q in ids if diagnoses["hand"][q]["first_failure"] != diagnoses["proposed"][q]["first_failure"]]
    return result


def table(r: dict) -> str:
    g = r["groups"]
    rows = [("groups proposed / hand", f"{g['proposed_groups']} / {g['hand_groups']} "
             f"(+{g['stray_groups']} on questions without hand evidence)"),
            ("precision (target >= 0.85)", f"{g['precision']:.3f}"), ("recall (target >= 0.85)", f"{g['recall']:.3f}"),
            *[(f"  {n} questions: precision / recall", f"{k['precision']:.3f} / {k['recall']:.3f} of {k['hand_groups']}")
              for n, k in r["groups_by_kind"].items() if k["hand_groups"]],
            ("needs review", f"{r['needs_review']} of {r['queries']}"),
            ("unsupported reference claims", str(r["unsupported_reference_claims"])),
            ("labelling time", f"{r['label_seconds']:.0f} s")]
    if "agreement" in r:
        a = r["agreement"]
        rows += [("first-failure agreement, all (target >= 0.90)", f"{a['all']['first_failure']:.3f} of {a['all']['n']}"),
                 ("first-failure agreement, answerable", f"{a['answerable']['first_failure']:.3f} of {a['answerable']['n']}"),
                 ("outcome agreement, all", f"{a['all']['outcome']:.3f}")]
    return label_table(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--half", choices=["fit", "test"], default="test")
    parser.add_argument("--devset", type=Path, default=DEVSET)
    parser.add_argument("--queries", type=Path, help="another hand-labelled query set with reference answers "
                        "(instead of the half), e.g. bench/devset/pg-versions.jsonl with --store of its corpus")
    parser.add_argument("--store", type=Path, default=DEVSET / "store.db")
    parser.add_argument("--run", type=Path, help="a 'ragdx run' folder of the half (default: run one)")
    parser.add_argument("--traces", type=Path, help="the half's run already exported ('ragdx export --run RUN'): "
                        "diagnosed instead of a run folder")
    parser.add_argument("--scorer", default="auto", choices=["auto", "cross-encoder", "words"])
    parser.add_argument("--work", type=Path, default=REPO / "bench" / ".cache" / "label")
    parser.add_argument("--no-diagnosis", action="store_true", help="the group figures only")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    result = run(args)
    write_result(args.out, result, table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

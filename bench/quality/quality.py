"""Answer quality on real documentation: ragdx's pipeline on the labelled dev set of
``bench/devset/`` (Python 3.11 and SQLite 3.40 manuals from Debian), stage by stage.

Reproduce, from the repository root::

    apt-get install python3-doc sqlite3-doc
    .venv/bin/python bench/quality/quality.py                 # the test half; builds what is missing

One command does everything, each step through ragdx's CLI (the stable surface while the library
moves): it builds the dev set (``bench/devset/build.py``, seconds), builds the int8 encoder when
missing (``ragdx build-encoder``), ingests the corpus into ``bench/.cache/devset/store.db`` (a
no-op when nothing changed; about 20 minutes from scratch on 2 cores), checks every label with
``ragdx evidence --strict``, runs ``ragdx run --oracle context`` on the half asked for (the
result cache off, so every run measures the pipeline), and reads the run folder.

What it reports (printed, and written to ``--out``, default ``bench/results/quality.json``):

- the evidence funnel: the share of answerable questions whose every required group is still
  present at each stage (``complete@STAGE`` of metrics.json, with its denominator);
- ranking: R@10, R@100, nDCG@10 and MRR of the bm25, dense, fusion (rrf), rerank (sentences or features) and
  governance lists, computed here from the traces with ragdx's own measures against the chunks
  holding part of a required span (the labels of metrics.json; R@10, nDCG@10 and RR are checked
  against metrics.json), beside two peers measured on the same chunks in the same run: **bm25s**
  (Okapi BM25 as FTS5 computes it, tokenized as FTS5 tokenizes, as in bench/retrieval/bm25_vs_bm25s.py:
  prefix + text, duplicates and chunks the principal may not read masked out) and ragdx's own
  BM25 with both columns weighted 1 (what bm25s can express; the pipeline's default weighs the
  heading prefix 0.5);
- outcomes per kind of question (the first tag) and per corpus tag;
- issue 26's targets: evidence complete at context >= 88%; supported >= 90% of the answerable
  questions whose evidence was complete; supported or correctly abstained >= 85% of all; at most
  10% hallucinations on unanswerable and restricted questions; a median answer of at most 80
  words, whose first claim states a required group in >= 80% of the supported answers; p50 at
  most 1.5 s a question;
- where evidence was first lost, per kind, and the gold-context (oracle) outcome;
- with ``--compare FILE`` (default: the results file already there), every headline figure as
  ``before -> after``.

The encoder is the one deviation from ragdx's defaults, said in the results: the dense channel
uses the per-token int8 ONNX build of all-MiniLM-L6-v2 (``ragdx build-encoder``, x4 faster at
ingest, top-10 overlap 0.964 with fp32 in docs/benchmarks.md); ``--fp32`` uses the default
sentence-transformers encoder instead (a separate store, ``store-fp32.db``, and an ingest about
four times longer).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shlex
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

import ragdx as ragdx_module

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _common, and the areas
from _common import REPO, code_version, machine, write_result

DEVSET = REPO / "bench" / ".cache" / "devset"
INT8_DIR = REPO / "bench" / ".cache" / "int8"
INT8 = INT8_DIR / "all-MiniLM-L6-v2-int8.onnx"
DEFAULT_OUT = REPO / "bench" / "results" / "quality.json"
RAGDX = str(Path(sys.executable).with_name("ragdx"))
KINDS = ("faq", "single-fact", "rule-exception", "version-specific", "multi-hop", "unanswerable", "restricted")
RANKED = (("bm25", "bm25"), ("dense", "dense"), ("fusion", "rrf"), ("rerank", "sentences"),
          ("rerank", "features"), ("governance", "governance"))
MEASURES = ("R@10", "R@100", "nDCG@10", "RR")
#: issue 26's done-when: each figure's goal and sense (the shares are of questions, the words and
#: seconds of answers and questions)
TARGETS = {"evidence complete at context": (0.88, ">="), "supported | evidence complete": (0.90, ">="),
           "supported or correct abstention": (0.85, ">="),
           "hallucination (unanswerable + restricted)": (0.10, "<="),
           "median answer words": (80, "<="), "first claim states a group (supported answers)": (0.80, ">="),
           "p50 seconds a question": (1.5, "<=")}


class Failed(Exception):
    """A step that failed: the message says which and why."""


# -- running ragdx's CLI, timed -------------------------------------------------------------------

#: the outcomes that count as a success: an answer supported, or a correct abstention
SUCCESS = ("supported", "correct_abstention")


def ragdx(args: list[str], what: str, capture: bool = True) -> tuple[str, dict]:
    """Run ``ragdx ARGS``; its stdout, and its wall seconds, CPU seconds and peak RSS (MB)."""
    started = time.perf_counter()
    proc = subprocess.Popen([RAGDX, *args], stdout=subprocess.PIPE if capture else None, text=True)
    out = proc.stdout.read() if capture and proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    timing = {"wall_s": round(time.perf_counter() - started, 2),
              "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
              "peak_rss_mb": round(usage.ru_maxrss * 1024 / 1e6, 1)}
    if proc.returncode != 0:
        raise Failed(f"{what} failed (exit {proc.returncode}): ragdx {' '.join(args)}")
    return out, timing


def build_devset(devset: Path) -> dict:
    spec = importlib.util.spec_from_file_location("devset_build", REPO / "bench" / "devset" / "build.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    try:
        return module.build(devset, module.LABELS, 0, True)
    except module.BuildError as exc:
        raise Failed(f"building the dev set: {exc}") from None


# -- relevance labels and ranking measures -----------------------------------------------------------

def relevance(evidence_json: str) -> tuple[dict[str, set[str]], Counter]:
    """Query id -> chunks holding part of a required span (as metrics.json labels them), and how
    the required alternatives are covered (whole by one chunk, in parts, not at all)."""
    relevant: dict[str, set[str]] = defaultdict(set)
    coverage: Counter = Counter()
    for line in evidence_json.splitlines():
        row = json.loads(line)
        if row["restricted"]:
            continue
        relevant[row["query_id"]].update(row["chunks_full"] + row["chunks_partial"])
        coverage[row["coverage"] or row["status"]] += 1
    return relevant, coverage


def measure_lists(lists: dict[str, dict[str, list[str]]], relevant: dict[str, set[str]]) -> dict:
    """Each system's mean of each measure over the queries with relevant chunks (a query a system
    returned nothing for scores 0), with ragdx's implementation of the measures."""
    from ragdx.evaluation.measures import evaluate, parse_measure
    measures = [parse_measure(m) for m in MEASURES]
    qrels = {q: {c: 1 for c in chunks} for q, chunks in relevant.items() if chunks}
    out = {}
    for system, ranked in lists.items():
        run = {q: {c: -float(r) for r, c in enumerate(ranked.get(q, []), start=1)} for q in qrels}
        run = {q: (scores or {"__none__": 0.0}) for q, scores in run.items()}
        values = evaluate(measures, qrels, run)
        out[system] = {str(m): statistics.fmean(values[str(m)].values()) if qrels else 0.0 for m in measures}
        out[system]["n"] = len(qrels)
    return out


class Bm25sPeer:
    """bm25s over the store's chunks (prefix + text, FTS5's tokens and BM25 variant), masked to
    what a principal may read, as ragdx's BM25 channel sees them."""

    def __init__(self, db_path: Path) -> None:
        import bm25s  # noqa: F401  (fail early with the venv's message)

        from ragdx.testing.fts5 import fts5_tokens, reference_bm25
        db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
        rows = db.execute("SELECT rowid, id, doc_id, version, prefix, text, duplicate_of FROM chunks "
                          "ORDER BY rowid").fetchall()
        groups: dict[tuple[str, str], set[str]] = defaultdict(set)
        for doc, version, grp in db.execute("SELECT doc_id, version, grp FROM acl"):
            groups[(doc, version)].add(grp)
        db.close()
        self.ids = np.array([r[1] for r in rows], dtype=object)
        self.acl = [groups[(r[2], r[3])] for r in rows]
        self.duplicate = np.array([r[6] is not None for r in rows])
        started = time.perf_counter()
        tokens = [fts5_tokens(r[4] + "\n" + r[5]) for r in rows]
        self.model = reference_bm25("float32", backend="numpy")
        self.model.index(tokens, show_progress=False)
        self.index_seconds = time.perf_counter() - started
        self._masks: dict[frozenset, np.ndarray] = {}

    def search(self, question: str, groups: frozenset, k: int = 100) -> list[str]:
        from ragdx.testing.fts5 import fts5_query_tokens
        if groups not in self._masks:
            readable = np.array([bool(a & groups) for a in self.acl])
            self._masks[groups] = (readable & ~self.duplicate).astype(self.model.dtype)
        found = self.model.retrieve([fts5_query_tokens(question)], k=k, weight_mask=self._masks[groups],
                                    show_progress=False, n_threads=0)
        keep = found.scores[0] > 0
        return list(self.ids[found.documents[0][keep]])


def ragdx_bm25_equal_weights(db_path: Path, queries: list[dict], k: int = 100) -> dict[str, list[str]]:
    """ragdx's BM25 channel with prefix and text weighted 1 (the weighting bm25s can express)."""
    from ragdx.stages.bm25 import BM25Retriever
    from ragdx.store.sqlite import SQLiteStore
    from ragdx.types import Principal, Query
    store = SQLiteStore(db_path)
    try:
        retriever = BM25Retriever(store, top_k=k, prefix_weight=1.0, text_weight=1.0)
        out = {}
        for q in queries:
            p = q.get("principal") or {}
            principal = Principal(p.get("user", "anonymous"), tuple(p.get("groups", ["public"])))
            out[q["id"]] = [i.chunk_id for i in retriever.run(Query(q["id"], q["question"], principal)).items]
        return out
    finally:
        store.close()


# -- reading the run -------------------------------------------------------------------------------

def read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def stage_lists(traces: list[dict]) -> dict[str, dict[str, list[str]]]:
    lists: dict[str, dict[str, list[str]]] = defaultdict(dict)
    for t in traces:
        for stage in t["stages"]:
            if "items" in stage and stage["kind"] in ("retrieval", "fusion", "rerank", "governance"):
                items = sorted(stage["items"], key=lambda i: i["rank"])
                lists[stage["name"]][t["query_id"]] = [i["id"] for i in items]
    return lists


def _words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def states(claim: str, quote: str) -> bool:
    """Whether a claim states a required quote: at least 60% of the words of one are in the other
    (a sentence of a longer quote, or a quote inside a longer sentence)."""
    c, q = _words(claim), _words(quote)
    return bool(c and q) and max(len(c & q) / len(c), len(c & q) / len(q)) >= 0.6


def answer_shape(queries: list[dict], traces: list[dict], diagnoses: dict[str, dict]) -> dict:
    """How the answers read: words per answer given (abstentions aside), and of the supported
    answers the share whose first claim states a required group (:func:`states`)."""
    answers = {}
    for t in traces:
        for stage in t["stages"]:
            if stage["kind"] == "generation":
                answers[t["query_id"]] = stage
    given = [a for a in answers.values() if not a.get("abstained")]
    lengths = sorted(len(a["text"].split()) for a in given)
    supported = [q for q in queries if diagnoses[q["id"]]["outcome"] == "supported" and q["id"] in answers]
    first = [q for q in supported if answers[q["id"]].get("claims") and any(
        states(answers[q["id"]]["claims"][0]["text"], alt["quote"]) for group in q["required"] for alt in group)]
    return {"answers_given": len(given), "median_words": statistics.median(lengths) if lengths else 0,
            "p90_words": lengths[int(0.9 * (len(lengths) - 1))] if lengths else 0,
            "first_claim_states_a_group": {"value": len(first) / len(supported) if supported else 0.0,
                                           "n": len(first), "of": len(supported)}}


def kind_of(query: dict) -> str:
    return query["tags"][0]


def outcome_table(queries: list[dict], diagnoses: dict[str, dict], key) -> dict[str, dict]:
    groups: dict[str, list[dict]] = defaultdict(list)
    for q in queries:
        for name in key(q):
            groups[name].append(diagnoses[q["id"]])
    out = {}
    for name, ds in groups.items():
        outcomes = Counter(d["outcome"] for d in ds)
        out[name] = {"queries": len(ds), "outcomes": dict(outcomes.most_common()),
                     "success": sum(outcomes[o] for o in SUCCESS) / len(ds),
                     "first_failure": dict(Counter(d["first_failure"] for d in ds
                                                   if d["first_failure"]).most_common())}
    return dict(sorted(out.items(), key=lambda kv: (KINDS.index(kv[0]) if kv[0] in KINDS else 99, kv[0])))


def targets(queries: list[dict], diagnoses: dict[str, dict], per_query: dict[str, dict], shape: dict,
            latency: dict | None) -> dict[str, dict]:
    answerable = [q for q in queries if q.get("answerable", True)]
    complete = [q for q in answerable if per_query.get(q["id"], {}).get("complete@context") == 1.0]
    negative = [q for q in queries if not q.get("answerable", True)]

    def share(qs: list[dict], outcomes: tuple[str, ...]) -> tuple[float, int, int]:
        hit = sum(1 for q in qs if diagnoses[q["id"]]["outcome"] in outcomes)
        return (hit / len(qs) if qs else 0.0), hit, len(qs)

    values = {
        "evidence complete at context": (len(complete) / len(answerable) if answerable else 0.0,
                                         len(complete), len(answerable)),
        "supported | evidence complete": share(complete, ("supported",)),
        "supported or correct abstention": share(queries, SUCCESS),
        "hallucination (unanswerable + restricted)": share(negative, ("hallucination", "leak")),
        "median answer words": (shape["median_words"], shape["answers_given"], shape["answers_given"]),
        "first claim states a group (supported answers)": (shape["first_claim_states_a_group"]["value"],
                                                           shape["first_claim_states_a_group"]["n"],
                                                           shape["first_claim_states_a_group"]["of"]),
        "p50 seconds a question": ((latency or {}).get("p50", float("nan")) / 1000, (latency or {}).get("n", 0),
                                   (latency or {}).get("n", 0)),
    }
    out = {}
    for name, (value, hit, n) in values.items():
        goal, sense = TARGETS[name]
        met = value >= goal if sense == ">=" else value <= goal
        shown = f"{goal:.0%}" if isinstance(goal, float) and goal < 1 else f"{goal}"
        out[name] = {"value": value, "count": hit, "n": n, "target": f"{sense} {shown}", "met": met}
    return out


def losses(queries: list[dict], diagnoses: dict[str, dict]) -> list[dict]:
    """Every lost group with its stage and reason, per query (for reading where evidence goes)."""
    out = []
    for q in queries:
        d = diagnoses[q["id"]]
        for loss in d.get("lost", []):
            out.append({"id": q["id"], "kind": kind_of(q), "stage": loss["stage"], "group": loss["group"],
                        "reason": loss["reason"][:300]})
    return out


# -- the table ------------------------------------------------------------------------------------

def pct(x: float) -> str:
    return f"{100 * x:5.1f}%"


def table(r: dict, previous: dict | None) -> str:
    lines = [(f"dev set half '{r['half']}': {r['queries']} questions; store {r['store']['chunks']:,} chunks "
              f"({r['store']['versions']:,} document versions); encoder {r['settings']['encoder']}"),
             (f"run: {r['run']['timing']['wall_s']:.0f} s wall, peak RSS {r['run']['timing']['peak_rss_mb']:.0f} MB;"
              f" ingest: {r['ingest']['summary']}"), ""]

    def before(path: list[str], fmt) -> str:
        node = previous
        for key in path:
            if not isinstance(node, dict) or key not in node:
                return ""
            node = node[key]
        return f"  (before {fmt(node)})" if isinstance(node, (int, float)) else ""

    lines.append("evidence complete at (answerable questions)")
    for name, f in r["funnel"].items():
        lines.append(f"  {name:<24} {pct(f['value'])}  {round(f['total']):>4}/{f['n']:<4}"
                     + before(["funnel", name, "value"], pct))
    lines += ["", f"ranking (queries with labelled chunks: n = {r['ranking']['n']})",
              f"  {'list':<34} " + " ".join(f"{m:>8}" for m in MEASURES)]
    for name, vals in r["ranking"]["systems"].items():
        lines.append(f"  {name:<34} " + " ".join(f"{vals[m]:8.3f}" for m in MEASURES)
                     + before(["ranking", "systems", name, "nDCG@10"], lambda v: f"nDCG@10 {v:.3f}"))
    lines += ["", "outcomes per kind (first tag)",
              f"  {'kind':<18} {'n':>4} {'success':>8}  outcomes"]
    for kind, t in r["outcomes_by_kind"].items():
        lines.append(f"  {kind:<18} {t['queries']:>4} {pct(t['success']):>8}  "
                     + ", ".join(f"{o} {n}" for o, n in t["outcomes"].items())
                     + before(["outcomes_by_kind", kind, "success"], pct))
    lines += ["", "outcomes per corpus tag"]
    for tag, t in r["outcomes_by_corpus"].items():
        lines.append(f"  {tag:<18} {t['queries']:>4} {pct(t['success']):>8}  "
                     + ", ".join(f"{o} {n}" for o, n in t["outcomes"].items()))
    lines += ["", "first failure (queries not supported / not correctly abstained)"]
    lines.append("  " + ", ".join(f"{s} {n}" for s, n in r["first_failure"].items()))
    if r.get("oracle"):
        lines.append("  with the gold context (oracle): " + ", ".join(f"{o} {n}" for o, n in r["oracle"].items()))
    shape = r["answer_shape"]
    first = shape["first_claim_states_a_group"]
    lines += ["", f"answers given: {shape['answers_given']}; words median {shape['median_words']}, p90 "
              f"{shape['p90_words']}" + before(["answer_shape", "median_words"], str)
              + f"; supported answers whose first claim states a required group {pct(first['value'])} "
              f"({first['n']}/{first['of']})"]
    lines += ["", "targets"]
    for name, t in r["targets"].items():
        shown = pct if "%" in t["target"] else (lambda v: f"{v:.2f}")
        lines.append(f"  {name:<48} {shown(t['value'])} ({t['count']}/{t['n']})  target {t['target']:<7} "
                     f"{'met' if t['met'] else 'NOT met'}" + before(["targets", name, "value"], shown))
    return "\n".join(lines)


# -- main -----------------------------------------------------------------------------------------

def run(args: argparse.Namespace) -> dict:
    devset = args.devset.resolve()
    print("building the dev set ...", file=sys.stderr, flush=True)
    info = build_devset(devset)
    overrides = list(args.set or [])
    if args.fp32:
        encoder = "all-MiniLM-L6-v2, sentence-transformers fp32 (ragdx's default)"
        store = args.store or devset / "store-fp32.db"
    else:
        if not INT8.is_file():
            print("building the int8 encoder ...", file=sys.stderr, flush=True)
            ragdx(["build-encoder", "--out", str(INT8_DIR)], "ragdx build-encoder", capture=False)
        overrides = ["retrieval.dense.backend=onnx", f"retrieval.dense.model={INT8.relative_to(REPO)}"] + overrides
        encoder = f"all-MiniLM-L6-v2 per-token int8 ONNX ({INT8.relative_to(REPO)})"
        store = args.store or devset / "store.db"
    sets = [x for o in overrides for x in ("--set", o)]
    print(f"ingesting into {store} (a no-op when nothing changed) ...", file=sys.stderr, flush=True)
    # the manifest names Debian's documentation where it is installed, outside the dev-set folder
    out, ingest_timing = ragdx(["ingest", "--json", "--allow-outside", "--store", str(store),
                                str(devset / "manifest.jsonl"), *sets],
                               "ragdx ingest")
    report = json.loads(out)
    actions = Counter(a["action"] for a in report.get("actions", []))
    ingest = {"timing": ingest_timing, "actions": dict(actions), "chunks_written": report.get("chunks"),
              "seconds": report.get("seconds"), "embedding": report.get("embedding"),
              "summary": (f"{ingest_timing['wall_s']:.0f} s wall, peak RSS {ingest_timing['peak_rss_mb']:.0f} MB, "
                          + ", ".join(f"{n} {a}" for a, n in actions.most_common()))}
    queries_path = devset / ("queries.jsonl" if args.half == "all" else f"queries.{args.half}.jsonl")
    queries = read_jsonl(queries_path)
    print(f"checking every label of {queries_path.name} with ragdx evidence --strict ...", file=sys.stderr, flush=True)
    evidence, _ = ragdx(["evidence", "--store", str(store), "--queries", str(queries_path), "--strict", "--json"],
                        "ragdx evidence --strict")
    relevant, coverage = relevance(evidence)
    run_dir = args.run_dir or REPO / "bench" / ".cache" / "quality" / f"run-{args.half}{'-fp32' if args.fp32 else ''}"
    if run_dir.exists():
        shutil.rmtree(run_dir)
    print(f"running {len(queries)} questions into {run_dir} ...", file=sys.stderr, flush=True)
    # the result cache off: each run measures the pipeline, never answers an earlier run kept
    oracle = [] if args.no_oracle else ["--oracle", "context"]
    _, run_timing = ragdx(["run", "--store", str(store), "--queries", str(queries_path), "--out", str(run_dir),
                           *oracle, *sets, "--set", "cache.enabled=false"], "ragdx run")
    metrics = json.loads((run_dir / "metrics.json").read_text())
    diagnoses = {d["id"]: d for d in read_jsonl(run_dir / "diagnosis.jsonl")}
    traces = read_jsonl(run_dir / "traces.jsonl")
    missing = [q["id"] for q in queries if q["id"] not in diagnoses]
    if missing:
        raise Failed(f"the run has no diagnosis for {len(missing)} queries: {', '.join(missing[:5])}")

    print("bm25s peer: indexing the store's chunks ...", file=sys.stderr, flush=True)
    peer = Bm25sPeer(store)
    lists = stage_lists(traces)
    systems: dict[str, dict[str, list[str]]] = {}
    for label, name in RANKED:
        if name in lists:
            systems[f"{label} ({name})"] = lists[name]
    systems["bm25s peer (prefix + text)"] = {
        q["id"]: peer.search(q["question"], frozenset((q.get("principal") or {}).get("groups", ["public"])))
        for q in queries}
    systems["ragdx bm25, prefix 1 text 1"] = ragdx_bm25_equal_weights(store, queries)
    ranking = measure_lists(systems, relevant)
    check = {}
    for label, name in RANKED:
        key = f"{label} ({name})"
        for m in ("R@10", "nDCG@10", "RR"):
            theirs = metrics["overall"]["metrics"].get(f"{m} {name}")
            if theirs and key in ranking:
                check[f"{m} {name}"] = round(abs(theirs["value"] - ranking[key][m]), 6)

    per_query = metrics.get("per_query", {})
    m = metrics["overall"]["metrics"]
    funnel = {name[9:]: m[name] for name in m if name.startswith("complete@") and m[name]["n"]}
    db = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    chunks, versions = db.execute("SELECT (SELECT count(*) FROM chunks), (SELECT count(*) FROM documents)").fetchone()
    db.close()
    oracle = Counter(d["oracle"]["context"] for d in diagnoses.values() if d.get("oracle"))
    result = {
        "benchmark": "quality",
        "command": shlex.join([".venv/bin/python", "bench/quality/quality.py", *sys.argv[1:]]),
        "label": args.label,
        "code": code_version() | {"ragdx_imported_from": str(Path(ragdx_module.__file__).parent)},
        "machine": machine(),
        "half": args.half, "queries": len(queries),
        "devset": {"counts": info["counts"], "sources": info["sources"], "seed": info["seed"]},
        "settings": {"encoder": encoder, "overrides": overrides, "oracle": None if args.no_oracle else "context"},
        "store": {"path": str(store), "chunks": chunks, "versions": versions},
        "ingest": ingest,
        "run": {"folder": str(run_dir), "timing": run_timing},
        "evidence_coverage": dict(coverage),
        "funnel": funnel,
        "ranking": {"n": ranking[next(iter(ranking))]["n"] if ranking else 0,
                    "systems": {k: {mm: v[mm] for mm in MEASURES} for k, v in ranking.items()},
                    "bm25s_index_seconds": round(peer.index_seconds, 1),
                    "abs_diff_vs_metrics_json": check},
        "answers": {k: m[k] for k in ("success", "supported", "answered", "faithfulness", "citation_support",
                                      "correct_abstention", "wrong_abstention", "hallucination", "leak", "stale")
                    if k in m},
        "answer_shape": answer_shape(queries, traces, diagnoses),
        "latency_ms_total": m.get("latency_ms total"),
        "outcomes_by_kind": outcome_table(queries, diagnoses, lambda q: [kind_of(q)]),
        "outcomes_by_corpus": outcome_table(queries, diagnoses, lambda q: [t for t in q["tags"][1:]
                                                                           if t in ("python", "sqlite", "cross")]),
        "first_failure": dict(Counter(d["first_failure"] for d in diagnoses.values() if d["first_failure"])
                              .most_common()),
        "oracle": dict(oracle.most_common()),
        "targets": targets(queries, diagnoses, per_query, answer_shape(queries, traces, diagnoses),
                           m.get("latency_ms total")),
        "per_query": [{"id": q["id"], "kind": kind_of(q), "outcome": diagnoses[q["id"]]["outcome"],
                       "first_failure": diagnoses[q["id"]]["first_failure"],
                       "oracle": (diagnoses[q["id"]].get("oracle") or {}).get("context")} for q in queries],
        "losses": losses(queries, diagnoses),
    }
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--half", choices=("test", "fit", "all"), default="test", help="which questions (default test)")
    ap.add_argument("--devset", type=Path, default=DEVSET, help=f"the dev set folder (default {DEVSET})")
    ap.add_argument("--store", type=Path, default=None, help="the store (default DEVSET/store.db)")
    ap.add_argument("--run-dir", type=Path, default=None, help="the run folder (default bench/.cache/quality/run-HALF)")
    ap.add_argument("--set", action="append", metavar="KEY=VALUE", help="a ragdx setting for ingest and run (repeatable)")
    ap.add_argument("--fp32", action="store_true", help="ragdx's default fp32 sentence-transformers encoder")
    ap.add_argument("--label", default="", help="a name for this measurement (e.g. 'before')")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the JSON results (default bench/results/quality.json)")
    ap.add_argument("--no-oracle", action="store_true",
                    help="no second answer from the gold context (a local model's answers cost seconds each)")
    ap.add_argument("--compare", type=Path, default=None,
                    help="earlier results to print as 'before' (default: --out when it exists)")
    args = ap.parse_args(argv)
    compare = args.compare or (args.out if args.out.is_file() else None)
    previous = json.loads(compare.read_text()) if compare and compare.is_file() else None
    try:
        result = run(args)
    except Failed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if previous is not None:
        result["compared_with"] = {"file": str(compare), "label": previous.get("label"),
                                   "git_commit": previous.get("code", {}).get("git_commit")}
    write_result(args.out, result, table(result, previous))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Ranking-measure computation: ragdx against pytrec_eval and ranx, side by side in one run.

Reproduce, from the repository root::

    .venv/bin/python bench/retrieval/metrics_throughput.py

``--queries`` queries (default 10,000), each with ``--candidates`` ranked documents (default
100, distinct scores) and 1 to 20 graded judgements (relevance 0-3, a quarter of them 0), drawn
with a fixed seed; 5% of the judged queries have no ranking at all (missing from the run). The
measures: P@10, R@100, RR, nDCG@10 and AP (MAP), per query. Each library computes them ``--repeat``
times in a rotating order; the figure is the median wall time, and the ratio is ragdx's time
over the reference's. ranx compiles with numba on its first call: that first call is timed apart
and left out of the median. Values: the largest absolute difference of any per-query value from
each reference (a missing query scores 0 in ragdx and trec_eval; ranx is asked for the same with
``make_comparable``).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

from ragdx.evaluation.measures import evaluate

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _common, and the areas
from _common import REPO, code_version, machine, missing_modules, peak_rss_mb, write_result  # noqa: E402

DEFAULT_OUT = REPO / "bench" / "results" / "metrics_throughput.json"
OURS = ("P@10", "R@100", "RR", "nDCG@10", "AP")
TREC = {"P_10": "P@10", "recall_100": "R@100", "recip_rank": "RR", "ndcg_cut_10": "nDCG@10", "map": "AP"}
RANX = {"precision@10": "P@10", "recall@100": "R@100", "mrr": "RR", "ndcg@10": "nDCG@10", "map": "AP"}


def data(queries: int, candidates: int, seed: int) -> tuple[dict, dict]:
    rng = random.Random(seed)
    qrels, run = {}, {}
    for q in range(queries):
        qid = f"q{q}"
        docs = [f"d{i}" for i in range(candidates * 2)]
        judged = rng.sample(docs, rng.randint(1, 20))
        qrels[qid] = {d: rng.choice((0, 1, 1, 2, 3)) for d in judged}
        if not any(qrels[qid].values()):
            qrels[qid][judged[0]] = 1
        if rng.random() < 0.05:
            continue
        scores = rng.sample(range(candidates * 100), candidates)
        run[qid] = {d: float(s) for d, s in zip(rng.sample(docs, candidates), scores)}
    return qrels, run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=10_000)
    parser.add_argument("--candidates", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    problem = missing_modules("pytrec_eval", "ranx")
    if problem:
        print(problem, file=sys.stderr)
        return 2
    import pytrec_eval
    import ranx

    qrels, run = data(args.queries, args.candidates, args.seed)
    ranx_qrels, ranx_run = ranx.Qrels(qrels), ranx.Run(run)

    def ours() -> dict:
        return evaluate(OURS, qrels, run)

    def trec() -> dict:
        return pytrec_eval.RelevanceEvaluator(qrels, set(TREC)).evaluate(run)

    def with_ranx() -> dict:
        return ranx.evaluate(ranx_qrels, ranx_run, list(RANX), return_mean=False, make_comparable=True)

    started = time.perf_counter()
    results = {"ranx": with_ranx()}
    ranx_first = time.perf_counter() - started
    timings: dict[str, list[float]] = {"ragdx": [], "pytrec_eval": [], "ranx": []}
    funcs = {"ragdx": ours, "pytrec_eval": trec, "ranx": with_ranx}
    names = list(funcs)
    for r in range(args.repeat):
        for name in names[r % 3:] + names[: r % 3]:
            started = time.perf_counter()
            results[name] = funcs[name]()
            timings[name].append(time.perf_counter() - started)
            print(f"{name}: {timings[name][-1]:.3f} s", file=sys.stderr)
    mine = results["ragdx"]
    # ranx and ragdx: per query in the qrels' order (ranx sorts query ids)
    ids = sorted(qrels)
    diff_trec = max(abs(mine[m][q] - (results["pytrec_eval"].get(q, {}).get(t, 0.0)))
                    for t, m in TREC.items() for q in qrels)
    diff_ranx = max(abs(mine[m][q] - float(results["ranx"][r][n]))
                    for r, m in RANX.items() for n, q in enumerate(ids))
    median = {name: statistics.median(t) for name, t in timings.items()}
    result = {
        "benchmark": "metrics_throughput", "machine": machine(), "code": code_version(),
        "queries": args.queries, "candidates": args.candidates, "judged_queries": len(qrels),
        "queries_missing_from_run": len(qrels) - len(run), "measures": list(OURS), "repeat": args.repeat,
        "seconds": timings, "median_seconds": median, "ranx_first_call_seconds": ranx_first,
        "ratio_ragdx_over_pytrec_eval": median["ragdx"] / median["pytrec_eval"],
        "ratio_ragdx_over_ranx": median["ragdx"] / median["ranx"],
        "max_abs_diff_vs_pytrec_eval": diff_trec, "max_abs_diff_vs_ranx": diff_ranx,
        "peak_rss_mb": peak_rss_mb(),
    }
    lines = [f"{args.queries} queries x {args.candidates} candidates, {', '.join(OURS)}; median of {args.repeat}",
             f"{'library':<12} {'seconds':>8} {'ragdx / it':>11} {'max |diff|':>11}"]
    for name in names:
        ratio = median["ragdx"] / median[name]
        diff = {"ragdx": 0.0, "pytrec_eval": diff_trec, "ranx": diff_ranx}[name]
        lines.append(f"{name:<12} {median[name]:>8.3f} {ratio:>11.2f} {diff:>11.1e}")
    lines.append(f"ranx first call (numba compile included): {ranx_first:.1f} s")
    write_result(args.out, result, "\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

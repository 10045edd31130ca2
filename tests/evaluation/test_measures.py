"""Ranking measures: hand-computed values, a missing query counted, and pytrec_eval parity."""

import math
import random

import pytest

from ragdx.errors import ConfigError
from ragdx.evaluation.measures import Measure, evaluate, mean, parse_measure, ranking


def test_the_field_example():
    # relevant {A, C}, returned [B, A, D]: P@3 = 1/3, R@3 = 1/2, RR = 1/2
    qrels = {"q": {"A": 1, "C": 1}}
    run = {"q": {"B": 3.0, "A": 2.0, "D": 1.0}}
    values = evaluate(["P@3", "R@3", "RR", "Hit@1", "Hit@2", "AP", "nDCG@3"], qrels, run)
    assert values["P@3"]["q"] == 1 / 3
    assert values["R@3"]["q"] == 1 / 2
    assert values["RR"]["q"] == 1 / 2
    assert (values["Hit@1"]["q"], values["Hit@2"]["q"]) == (0.0, 1.0)
    assert values["AP"]["q"] == (1 / 2) / 2          # one relevant found, at rank 2, of two
    assert values["nDCG@3"]["q"] == pytest.approx((1 / math.log2(3)) / (1 + 1 / math.log2(3)))


def test_a_query_missing_from_the_run_scores_zero_and_is_counted():
    qrels = {"q1": {"A": 1}, "q2": {"B": 1}}
    values = evaluate(["RR", "nDCG@10"], qrels, {"q1": {"A": 1.0}})
    assert values["RR"] == {"q1": 1.0, "q2": 0.0}
    assert mean(values["RR"]) == 0.5 and mean(values["nDCG@10"]) == 0.5


def test_ties_are_broken_by_document_id_descending_as_trec_eval_does():
    assert ranking({"a": 1.0, "c": 1.0, "b": 2.0}) == ["b", "c", "a"]


def test_ties_decide_a_top_k_taken_from_a_long_ranking():
    # every measure has a cut-off, and the ranking is long: only its top 5 is selected, not sorted
    run = {"q": {"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0, **{f"z{i:02d}": 0.5 for i in range(30)}}}
    values = evaluate(["RR@5", "P@5", "nDCG@5"], {"q": {"a": 2, "z29": 1}}, run)
    assert values["RR@5"]["q"] == 1 / 4  # d, c, b, a: ties by document id, descending
    assert values["P@5"]["q"] == 2 / 5  # then z29 at rank 5
    assert values["nDCG@5"]["q"] == (2 / math.log2(5) + 1 / math.log2(6)) / (2 / math.log2(2) + 1 / math.log2(3))


def test_parsing():
    assert parse_measure("nDCG@10") == Measure("nDCG", 10) and str(parse_measure("MAP")) == "AP"
    for bad in ("NDCG@10", "P", "R@0", "recall@5"):
        with pytest.raises(ConfigError):
            parse_measure(bad)


def random_judged_runs(seed: int, queries: int, *, ties: bool) -> tuple[dict, dict]:
    """Random graded qrels and runs over 40 documents; ``ties=False`` draws distinct scores (so no
    tie order is argued about) and at least one relevant document per query."""
    rng = random.Random(seed)
    qrels, run = {}, {}
    for q in range(queries):
        docs = [f"d{i}" for i in range(40)]
        if ties:
            qrels[f"q{q}"] = {d: rng.choice([0, 0, 1, 2, 3]) for d in rng.sample(docs, 15)}
            run[f"q{q}"] = {d: float(rng.randint(0, 30)) for d in rng.sample(docs, rng.randint(0, 30))}
        else:
            qrels[f"q{q}"] = {d: rng.choice([1, 1, 2, 3]) for d in rng.sample(docs, rng.randint(1, 12))}
            run[f"q{q}"] = {d: float(s) for d, s in zip(rng.sample(docs, 30), rng.sample(range(1000), 30))}
    return qrels, run


@pytest.mark.parity
def test_agrees_with_pytrec_eval_on_random_runs():
    pytrec_eval = pytest.importorskip("pytrec_eval")
    qrels, run = random_judged_runs(7, 60, ties=True)
    names = {"P_5": "P@5", "P_10": "P@10", "recall_10": "R@10", "recip_rank": "RR", "map": "AP",
             "ndcg_cut_10": "nDCG@10", "ndcg": "nDCG"}
    theirs = pytrec_eval.RelevanceEvaluator(qrels, set(names)).evaluate(run)
    ours = evaluate(names.values(), qrels, run)
    for trec, mine in names.items():
        for qid in qrels:
            expected = theirs[qid][trec] if qid in theirs else 0.0
            assert ours[mine][qid] == pytest.approx(expected, abs=1e-9), (trec, qid)


@pytest.mark.parity
def test_agrees_with_ranx_on_random_runs():
    ranx = pytest.importorskip("ranx")
    qrels, run = random_judged_runs(9, 50, ties=False)
    names = {"precision@5": "P@5", "recall@10": "R@10", "mrr": "RR", "ndcg@10": "nDCG@10", "map": "AP",
             "hit_rate@3": "Hit@3"}
    theirs = ranx.evaluate(ranx.Qrels(qrels), ranx.Run(run), list(names), return_mean=False, make_comparable=True)
    ours = evaluate(names.values(), qrels, run)
    for ranx_name, mine in names.items():
        for n, qid in enumerate(sorted(qrels)):  # ranx returns queries in sorted order
            assert ours[mine][qid] == pytest.approx(float(theirs[ranx_name][n]), abs=1e-9), (ranx_name, qid)

"""Layered metrics on hand-built traces: the funnel per stage, answers, abstentions counted
apart, latency percentiles, per tag, a missing trace counted, and never a NaN."""

import json
import math

import pytest

from ragdx.diagnosis.evidence import BY_ID, QueryEvidence, ResolvedAlternative
from ragdx.diagnosis.locate import AnswerView, ClaimView, Diagnoser, Diagnosis, ItemView, StageView, TraceView
from ragdx.evaluation.layered import aggregate, layered, metric, percentile, query_values
from ragdx.types import Alternative, Principal, Query, StageKind

RULE, EXCEPTION = Alternative(id="rule"), Alternative(id="exception")


def query(qid, tags=(), answerable=True):
    required = ((RULE,), (EXCEPTION,)) if answerable else ()
    return Query(qid, "Can I get a refund?", Principal(), answerable, required, tags=tags)


def evidence(q):
    return QueryEvidence(q.id, tuple(ResolvedAlternative(g, 0, group[0], BY_ID) for g, group in enumerate(q.required)))


def items(*ids):
    return tuple(ItemView(i, rank=r) for r, i in enumerate(ids, start=1))


def view(qid, candidates, context, *, supported=True, abstained=False, ms=(1.0, 2.0, 3.0), rerank=True):
    stages = [StageView("bm25", StageKind.RETRIEVAL, items(*candidates), seconds=ms[0] / 1000)]
    if rerank:
        stages.append(StageView("ce", StageKind.RERANK, items(*candidates), seconds=ms[1] / 1000))
    stages.append(StageView("ctx", StageKind.CONTEXT, items(*context), config={"tokens": 100},
                            seconds=ms[2] / 1000))
    claims = () if abstained else tuple(ClaimView(f"from {c}", (c,), supported) for c in context)
    return TraceView(qid, tuple(stages), AnswerView("a", abstained, claims, prompt_tokens=50,
                                                    completion_tokens=10, cost=0.002, seconds=0.004))


def values(q, v):
    e = evidence(q)
    return query_values(q, Diagnoser().run(q, e, v), v, e)


def test_the_funnel_names_the_stage_each_query_still_holds_everything():
    full = values(query("a"), view("a", ["x", "rule", "exception"], ["rule", "exception"]))
    cut = values(query("b"), view("b", ["x", "rule", "exception"], ["rule"]))
    missed = values(query("c"), view("c", ["x", "rule"], ["rule"]))
    assert [full.values[f"complete@{s}"] for s in ("retrieval", "rerank", "context")] == [1, 1, 1]
    assert [cut.values[f"complete@{s}"] for s in ("retrieval", "rerank", "context")] == [1, 1, 0]
    assert [missed.values[f"complete@{s}"] for s in ("source", "retrieval", "rerank", "context")] == [1, 0, 0, 0]
    assert cut.values["complete@retrieval:bm25"] == 1.0  # one channel: the retrieval stage's value
    m = layered([full, cut, missed]).overall.metrics
    assert (m["complete@retrieval"].value, m["complete@retrieval"].n) == (2 / 3, 3)
    assert (m["complete@context"].total, m["complete@context"].n) == (1.0, 3)


def test_a_stage_the_pipeline_lacks_loses_nothing():
    row = values(query("a"), view("a", ["rule", "exception"], ["rule"], rerank=False))
    assert row.values["complete@rerank"] == row.values["complete@governance"] == 1.0
    assert "rerank" not in row.stages_run and "context" in row.stages_run


def test_ranking_measures_per_stage_against_the_evidence_chunks():
    row = values(query("a"), view("a", ["x", "rule", "y", "exception"], ["rule", "exception"]))
    # relevant {rule, exception} at ranks 2 and 4
    assert row.values["RR bm25"] == 1 / 2
    assert row.values["R@10 bm25"] == 1.0
    dcg = 1 / math.log2(3) + 1 / math.log2(5)
    assert row.values["nDCG@10 bm25"] == pytest.approx(dcg / (1 + 1 / math.log2(3)))


def test_answers_and_abstentions_are_counted_apart():
    good = values(query("a"), view("a", ["rule", "exception"], ["rule", "exception"]))
    wrong_claims = values(query("b"), view("b", ["rule", "exception"], ["rule", "exception"], supported=False))
    wrong_abstain = values(query("c"), view("c", ["rule", "exception"], ["rule", "exception"], abstained=True))
    right_abstain = values(query("d", answerable=False), view("d", ["x"], ["x"], abstained=True))
    hallucinated = values(query("e", answerable=False), view("e", ["x"], ["x"]))
    rows = [good, wrong_claims, wrong_abstain, right_abstain, hallucinated]
    m = layered(rows).overall.metrics
    assert [r.outcome for r in rows] == ["supported", "unsupported", "wrong_abstention", "correct_abstention",
                                         "hallucination"]
    assert (m["success"].total, m["success"].n) == (2, 5)
    assert (m["supported"].total, m["supported"].n) == (1, 3)   # answerable questions only
    assert (m["answered"].total, m["answered"].n) == (3, 5)
    # faithfulness: claims supported over claims, per answering query: good 1, wrong 0, hallucinated 1
    assert (m["faithfulness"].value, m["faithfulness"].n) == (2 / 3, 3)
    assert [m[k].total for k in ("correct_abstention", "wrong_abstention", "hallucination", "leak", "stale")] \
        == [1, 1, 1, 0, 0]
    assert m["prompt_tokens"].total == 250 and m["cost"].total == pytest.approx(0.01)
    assert m["context_tokens"].value == 100


def test_latency_per_stage_p50_and_p95():
    rows = [values(query(q), view(q, ["rule", "exception"], ["rule", "exception"], ms=(ms, 1.0, 1.0)))
            for q, ms in (("a", 10.0), ("b", 20.0), ("c", 30.0), ("d", 40.0), ("e", 100.0))]
    agg = aggregate(rows, "latency_ms bm25")
    assert agg.p50 == pytest.approx(30.0)
    assert agg.p95 == pytest.approx(40.0 + 0.8 * 60.0)  # (5-1)*0.95 = 3.8: between 40 and 100
    numpy = pytest.importorskip("numpy")
    assert agg.p95 == pytest.approx(float(numpy.percentile([10, 20, 30, 40, 100], 95)))
    total = rows[0].values["latency_ms total"]
    assert total == pytest.approx(10.0 + 1.0 + 1.0 + 4.0)  # stages + generation
    assert metric("latency_ms bm25").better == -1


def test_per_tag_blocks_and_an_untagged_query():
    a = values(query("a", tags=("exception", "multi-hop")), view("a", ["rule", "exception"], ["rule"]))
    b = values(query("b", tags=("exception",)), view("b", ["rule", "exception"], ["rule", "exception"]))
    c = values(query("c"), view("c", ["rule", "exception"], ["rule", "exception"]))
    tags = layered([a, b, c]).tags
    assert sorted(tags) == ["(untagged)", "exception", "multi-hop"]
    assert tags["exception"].queries == 2 and tags["exception"].metrics["success"].value == 0.5
    assert tags["multi-hop"].first_failure == {"context": 1}


def test_a_query_without_a_trace_is_counted_as_failing_and_nothing_is_nan():
    q = query("lost")
    d = Diagnosis("lost", "no_trace", None, (), {}, "No trace was imported for this query.")
    missing = query_values(q, d, None, evidence(q))
    ok = values(query("a"), view("a", ["rule", "exception"], ["rule", "exception"]))
    metrics = layered([missing, ok])
    m = metrics.overall.metrics
    assert m["complete@retrieval"].value == 0.5 and m["complete@source"].value == 1.0
    assert m["success"].value == 0.5 and m["success"].n == 2
    text = json.dumps(metrics.to_dict(), allow_nan=False)  # raises on NaN or infinity
    assert "NaN" not in text
    assert aggregate([], "faithfulness").n == 0 and aggregate([], "faithfulness").value == 0.0


def test_percentile_edges():
    assert percentile([], 50) == 0.0 and percentile([7.0], 95) == 7.0


def test_a_trace_without_timings_has_no_latency_rather_than_zero():
    q = query("a")
    untimed = TraceView("a", (StageView("bm25", StageKind.RETRIEVAL, items("rule", "exception")),
                              StageView("ctx", StageKind.CONTEXT, items("rule", "exception"))),
                        AnswerView("a", False, (ClaimView("c", ("rule",), True),)))
    row = values(q, untimed)
    assert not [n for n in row.values if n.startswith("latency_ms")]
    assert "latency_ms total" not in layered([row]).overall.metrics


def test_the_funnel_never_rises_after_parsing():
    from ragdx.diagnosis.locate import Loss
    q = query("split")
    e = evidence(q)
    v = view("split", ["rule", "exception"], ["rule", "exception"])
    d = Diagnoser().run(q, e, v)
    cut = Diagnosis(d.id, "incomplete", "parsing", (Loss(1, "parsing", "the span is cut across 2 chunks"),),
                    d.stages, d.hypothesis)  # later stages hold both halves of group 1 together
    row = query_values(q, cut, v, e)
    assert row.values["complete@parsing"] == 0.0
    assert row.values["complete@retrieval"] == row.values["complete@context"] == 0.0


def test_a_parsing_stage_is_not_a_ranked_list():
    """An imported trace's chunker lists the system's chunks: nothing is ranked there, so no
    ranking measure names it (the imported report showed 'R@10 DocumentSplitter' with n = 0)."""
    q = query("a")
    base = view("a", ["x", "rule", "exception"], ["rule", "exception"])
    chunks = StageView("DocumentSplitter", StageKind.PARSING, tuple(ItemView(i) for i in ("x", "rule", "exception")))
    row = values(q, TraceView("a", (chunks,) + base.stages, base.answer))
    assert sorted(k for k in row.values if k.startswith("R@10 ")) == ["R@10 bm25", "R@10 ce"]

"""The field's worked example, through id-only items, and the rank-30 example."""

import pytest

from ragdx.diagnosis.evidence import BY_ID, QueryEvidence, ResolvedAlternative
from ragdx.diagnosis.locate import (
    AnswerView, ClaimView, Diagnoser, DroppedView, ItemView, StageView, TraceView,
)
from ragdx.types import Alternative, Principal, Query, StageKind

QUERY = Query("q1", "Can I get a refund?", Principal(), True,
              ((Alternative(id="policy-current"),), (Alternative(id="policy-exception"),)))
EVIDENCE = QueryEvidence("q1", tuple(ResolvedAlternative(g, 0, group[0], BY_ID)
                                     for g, group in enumerate(QUERY.required)))


def items(*ids):
    return tuple(ItemView(i, rank=r) for r, i in enumerate(ids, start=1))


def trace(candidates, ranked, context, claims_supported=True, abstained=False):
    stages = (StageView("retriever", StageKind.RETRIEVAL, items(*candidates)),
              StageView("reranker", StageKind.RERANK, items(*ranked)),
              StageView("ctx", StageKind.CONTEXT, items(*context)))
    claims = tuple(ClaimView(f"claim from {c}", (c,), claims_supported) for c in context)
    return TraceView("q1", stages, AnswerView("answer", abstained, () if abstained else claims))


CANDIDATES = ["old-policy", "policy-current", "policy-exception"]
RANKED = ["policy-current", "policy-exception", "old-policy"]


def diagnose(t, query=QUERY):
    return Diagnoser().run(query, EVIDENCE, t)


def test_context_holding_only_the_first_ranked_item_fails_at_context():
    d = diagnose(trace(CANDIDATES, RANKED, ["policy-current"]))
    assert (d.outcome, d.first_failure) == ("incomplete", "context")
    assert [(l.group, l.stage) for l in d.lost] == [(1, "context")]
    assert d.stage("retrieval").groups_present == (0, 1)
    assert d.stage("ctx").groups_present == (0,)
    assert "group 1" in d.hypothesis and "context" in d.hypothesis


def test_context_with_the_first_two_loses_nothing():
    d = diagnose(trace(CANDIDATES, RANKED, ["policy-current", "policy-exception"]))
    assert (d.outcome, d.first_failure, d.lost) == ("supported", None, ())


def test_exception_missing_from_the_candidates_fails_at_retrieval():
    d = diagnose(trace(["old-policy", "policy-current"], ["policy-current", "old-policy"], ["policy-current"]))
    assert (d.first_failure, [(l.group, l.stage) for l in d.lost]) == ("retrieval", [(1, "retrieval")])
    assert d.lost[0].reason == "not recalled by retriever"


def test_complete_evidence_with_unsupported_claims_fails_at_generation():
    d = diagnose(trace(CANDIDATES, RANKED, ["policy-current", "policy-exception"], claims_supported=False))
    assert (d.outcome, d.first_failure, d.lost) == ("unsupported", "generation", ())


def test_wrong_abstention_with_complete_evidence_is_generation():
    d = diagnose(trace(CANDIDATES, RANKED, ["policy-current", "policy-exception"], abstained=True))
    assert (d.outcome, d.first_failure) == ("wrong_abstention", "generation")


def test_unanswerable_question():
    query = Query("q2", "Price match?", Principal(), False, ())
    empty = QueryEvidence("q2", ())
    abstain = TraceView("q2", (), AnswerView("I cannot answer", True, ()))
    answer = TraceView("q2", (), AnswerView("Yes we match.", False, (ClaimView("Yes", (), False),)))
    assert Diagnoser().run(query, empty, abstain).outcome == "correct_abstention"
    assert Diagnoser().run(query, empty, abstain).first_failure is None
    d = Diagnoser().run(query, empty, answer)
    assert (d.outcome, d.first_failure) == ("hallucination", "generation")


@pytest.mark.parametrize("reranked_to, outcome_stage", [(12, "context"), (31, "rerank")])
def test_evidence_at_candidate_rank_30(reranked_to, outcome_stage):
    """Correct evidence at candidate rank 30, a context of the top 5: lost at context when the
    reranker kept it (top 30) and the budget cut it; lost at rerank when the reranker pushed it out."""
    candidates = [f"c{i}" for i in range(1, 30)]
    candidates.insert(29, "policy-exception")          # rank 30
    candidates.insert(0, "policy-current")             # rank 1 (the other group is found)
    ranked = [c for c in candidates if c != "policy-exception"]
    ranked.insert(reranked_to - 1, "policy-exception")
    kept = ranked[:30]
    dropped = [r for r in ranked[30:]]
    rerank = StageView("reranker", StageKind.RERANK, items(*kept), tuple(
        DroppedView(ItemView(i, rank=31 + n), f"below the rerank cut: reranked to {31 + n}")
        for n, i in enumerate(dropped)))
    context = StageView("ctx", StageKind.CONTEXT, items(*kept[:5]))
    stages = (StageView("bm25", StageKind.RETRIEVAL, items(*candidates)), rerank, context)
    claims = tuple(ClaimView("c", (c,), True) for c in kept[:5])
    d = diagnose(TraceView("q1", stages, AnswerView("a", False, claims)))
    assert d.first_failure == outcome_stage
    if outcome_stage == "rerank":
        assert d.lost[0].reason == "reranker: below the rerank cut: reranked to 31"
    else:
        assert d.lost[0].reason == "ctx did not keep it (rank 12 at reranker)"


def test_a_rewrite_that_loses_what_the_original_question_found():
    stages = (StageView("original", StageKind.REWRITE, items("policy-current", "policy-exception")),
              StageView("retriever", StageKind.RETRIEVAL, items("policy-current", "old-policy")),
              StageView("ctx", StageKind.CONTEXT, items("policy-current")))
    d = diagnose(TraceView("q1", stages, AnswerView("a", False, (ClaimView("c", ("policy-current",), True),))))
    assert d.first_failure == "rewrite"
    assert d.lost[0].reason == "the original question's retrieval found it; the rewritten question's did not"
    assert d.stage("original").groups_present == (0, 1)
    assert "original question" in d.hypothesis

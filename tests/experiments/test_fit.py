"""Fitting weighted fusion and the feature reranker on a validation set (ragdx fit)."""

import json

import numpy as np
import pytest

from ragdx.build import build_pipeline
from ragdx.cli import main
from ragdx.diagnosis.evidence import RESOLVED, QueryEvidence, ResolvedAlternative, relevant_items
from ragdx.errors import ConfigError, InputError
from ragdx.experiments import fit
from ragdx.stages.rerank import FEATURES, FeatureReranker, features
from ragdx.types import Alternative, Candidate, Principal, Provenance, Query, Ranked, Span, StageKind
from tests.stages.conftest import small  # noqa: F401  (the small corpus fixture)

SPAN = Span("d", "v", 0, 10)


def _ranked(name, scored):
    return Ranked(name, StageKind.RETRIEVAL, tuple(
        Candidate(cid, "d", "v", start, start + 10, rank, score)
        for rank, (cid, start, score) in enumerate(scored, start=1)))


def _run():
    """One query whose evidence (chunk 'rel', span 0-10) channel a ranks first and channel b last."""
    query = Query("q", "question", Principal(), required=((Alternative(doc="d", quote="x"),),))
    evidence = QueryEvidence("q", (ResolvedAlternative(0, 0, query.required[0][0], RESOLVED, SPAN),))
    a = _ranked("a", [("rel", 0, 2.0), ("irr1", 20, 1.0)])
    b = _ranked("b", [("irr2", 40, 10.0), ("irr3", 60, 9.0), ("rel", 0, 1.0)])
    return fit.ValidationRun((query,), ((a, b),), (evidence,))


def test_fusion_calibration_is_each_channels_z_score():
    fused = fit.fit_fusion(_run(), k=1)
    a, b = fused.channels["a"], fused.channels["b"]
    assert (a.mean, a.std, a.missing) == pytest.approx((1.5, 0.5, -1.0))
    scores = np.array([10.0, 9.0, 1.0])
    assert (b.mean, b.std) == pytest.approx((scores.mean(), scores.std()))
    assert b.missing == pytest.approx((1.0 - scores.mean()) / scores.std())


def test_fusion_weights_are_the_most_equal_ones_that_recall_the_evidence():
    # fused scores: rel = wa - 1.4069 wb, irr2 = -wa + 0.8276 wb; rel ranks first when
    # wa > 2.2345 / 4.2345 = 0.5277, so on a 0.05 grid the most equal winning weights are 0.55/0.45
    fused = fit.fit_fusion(_run(), k=1)
    assert fused.channels["a"].weight == pytest.approx(0.55)
    assert fused.channels["b"].weight == pytest.approx(0.45)
    assert fused.fitted_on.endswith("1 queries; mean group recall@1 1.0000")
    assert [c.chunk_id for c in fused.run(_run().lists[0]).items] == ["rel"]


def test_a_set_every_weighting_solves_says_it_cannot_tell_the_weights_apart():
    # at k = 3 both channels hold 'rel' in their top 3 whatever the weights: recall 1.0 everywhere
    tie = fit.fit_fusion(_run(), k=3)
    assert (tie.channels["a"].weight, tie.channels["b"].weight) == pytest.approx((0.5, 0.5))
    assert tie.fitted_on == ("; 1 queries; mean group recall@3 1.0000 for every weighting: this set cannot tell "
                             "the weights apart (equal weights kept); fit on more questions, or on ones whose "
                             "evidence ranks below 3 in some channel")
    assert "cannot tell" not in fit.fit_fusion(_run(), k=1).fitted_on  # at k = 1 the weights matter


def test_fusion_file_round_trip(tmp_path):
    fused = fit.fit_fusion(_run(), k=1, fitted_on="dev")
    fit.save_fusion(fused, tmp_path / "f.json")
    again = type(fused).from_file(tmp_path / "f.json", top_k=1)
    assert again.channels == fused.channels and again.fitted_on == fused.fitted_on


def test_collect_needs_an_answerable_query_with_evidence(small):
    store, encoder, settings = small
    with pytest.raises(InputError, match="no answerable query with required evidence"):
        fit.collect(build_pipeline(store, settings, encoder=encoder), [Query("q", "refund?", answerable=False)])


QUERIES = [
    Query("q1", "How many days for a refund after delivery?", required=(
        (Alternative(doc="refund.md", quote="Refunds are accepted within 30 days of delivery."),),)),
    Query("q2", "What does error RFD-5003 mean?", required=(
        (Alternative(doc="errors.md", quote="Error RFD-5003 means the payment provider timed out."),),)),
    Query("q3", "When are parcels delivered?", required=(
        (Alternative(doc="shipping.md", quote="Parcels are delivered within 3 business days."),),)),
]


def test_the_fitted_reranker_counts_its_data_and_round_trips(small, tmp_path):
    store, encoder, settings = small
    pipeline = build_pipeline(store, settings, encoder=encoder)
    run = fit.collect(pipeline, QUERIES)
    reranker = fit.fit_reranker(pipeline, run, fitted_on="dev", top_n=3)
    fused = [pipeline.fusion.run(lists) for lists in run.lists]
    candidates = sum(len(f.items) for f in fused)
    relevant = sum(len(relevant_items(ev, {c.chunk_id: c.span for c in f.items}))
                   for f, ev in zip(fused, run.evidence))
    assert reranker.fitted_on == f"dev; 3 queries, {candidates} candidates, {relevant} relevant"
    assert relevant == 3 and reranker.top_n == 3
    fit.save_reranker(reranker, tmp_path / "r.json")
    again = FeatureReranker.from_file(store, tmp_path / "r.json", top_n=3, encoder=encoder)
    assert again.weights == reranker.weights
    # fitted with the encoder, the sentence features weigh, and cannot be scored without it
    assert reranker.weights["sentence_sim"] != 0 and reranker.weights["sentence_rank"] != 0
    with pytest.raises(ConfigError, match="sentence_sim, sentence_rank, which need the dense encoder"):
        FeatureReranker.from_file(store, tmp_path / "r.json", top_n=3)
    # fitted on these queries, it puts each one's evidence first
    for query, f, ev in zip(run.queries, fused, run.evidence):
        top = reranker.run(query, f).items[0]
        assert top.chunk_id in relevant_items(ev, {c.chunk_id: c.span for c in f.items}), query.id


def test_ragdx_fit_writes_weights_that_ragdx_run_reads(example_store, tmp_path, capsys):
    queries = tmp_path / "q.jsonl"
    queries.write_text("".join(json.dumps(q) + "\n" for q in [
        {"id": "a", "question": "Can I get a refund 20 days after delivery?",
         "required": [[{"doc": "policies/refund.md", "quote": "within 30 days of delivery"}]]},
    ]))
    out = tmp_path / "rerank.json"
    code = main(["fit", "rerank", "--store", str(example_store.path), "--queries", str(queries), "--out",
                 str(out), "--set", "retrieval.dense.enabled=false"])
    assert code == 0, capsys.readouterr().err
    written = json.loads(out.read_text())
    assert written["method"] == "features" and set(written["weights"]) >= {"bias", "fused_rank"}
    assert f"use --set rerank.weights_file={out}" in capsys.readouterr().out


def test_the_abstention_threshold_answers_the_answerable_and_abstains_on_the_rest(small, tmp_path):
    store, encoder, settings = small
    from ragdx.config import load_settings
    lexical = load_settings(overrides=["rerank.method=none", "chunking.tokenizer=regex",
                                       "generation.semantic_weight=0"])
    pipeline = build_pipeline(store, lexical, encoder=encoder)
    answerable = QUERIES[1]  # "What does error RFD-5003 mean?": the errors page covers every term
    unanswerable = Query("u", "What does error RFD 9999 mean for a refund?", answerable=False)
    found = fit.fit_abstention(pipeline, [answerable, unanswerable], fitted_on="dev")
    rows = {qid: (score, answered, abstained) for qid, score, answered, abstained in found.rows}
    assert rows["q2"][1:] == ("supported", "wrong_abstention")
    assert rows["u"][1:] == ("hallucination", "correct_abstention")
    # u writes its code with a space: 9999 is then an amount, not part of a name, and the name check
    # (which abstains on "RFD-9999") cannot tell; the threshold must.
    # q2's terms: error, rfd, 5003 (a digit: weight 2), mean -> 5; "Error RFD-5003 means the payment
    # provider timed out." holds all of them: 5/5. u's: error, rfd, 9999 (2), mean, refund -> 6;
    # "Error RFD-4021 means the refund window expired." holds error, rfd, mean, refund: 4/6
    assert (rows["q2"][0], rows["u"][0]) == (pytest.approx(1.0), pytest.approx(4 / 6))
    # any threshold in (4/6, 1] separates them; the lowest candidate that does is q2's own score
    assert found.min_coverage == pytest.approx(1.0)
    assert (found.success, found.hallucination, found.queries) == (1.0, 0.0, 2)
    fit.save_abstention(found, tmp_path / "g.json")
    assert json.loads((tmp_path / "g.json").read_text())["min_coverage"] == pytest.approx(1.0)


def test_the_fit_judges_each_answer_as_the_pipeline_gives_it_with_a_multi_hop_answers_slot_facts(example_store,
                                                                                                  monkeypatch):
    from ragdx.config import load_settings
    from ragdx.diagnosis.ours import diagnose_trace
    from ragdx.queryset import load_queries
    from tests.conftest import EXAMPLE
    lexical = ["retrieval.dense.enabled=false", "rerank.method=none"]
    queries = [q for q in load_queries(EXAMPLE / "queries.jsonl") if q.id == "q-order-quality-refund"]
    pipeline = build_pipeline(example_store, load_settings(overrides=lexical))
    answering = build_pipeline(example_store, load_settings(overrides=lexical + ["generation.min_coverage=0"]))
    trace = answering.run(queries[0])
    assert trace.rewritten.route == "multi-hop" and trace.rewritten.slots  # the answer states slot facts
    calls = []
    generate = type(pipeline.generator).run

    def counted(self, query, context):
        calls.append(self.min_coverage)
        return generate(self, query, context)
    monkeypatch.setattr(type(pipeline.generator), "run", counted)
    found = fit.fit_abstention(pipeline, queries)
    assert found.rows[0][2] == diagnose_trace(answering, trace).outcome.value
    # the variants answered and abstained; the pipeline's own generator, whose answer is thrown away, did not run
    assert calls == [0.0, float("inf")]


def _abroad(small):
    """A lexical pipeline, and two answerable questions whose best sentences cover 4 of 7 weighted
    terms (0.571), one answerable at 5/5 (1.0) and one unanswerable that scores 4/6 (0.667)."""
    store, encoder, settings = small
    from ragdx.config import load_settings
    lexical = load_settings(overrides=["rerank.method=none", "chunking.tokenizer=regex",
                                       "generation.semantic_weight=0"])
    shipping = Query("s", "How many business days until parcels are delivered to customers abroad?", required=(
        (Alternative(doc="shipping.md", quote="Parcels are delivered within 3 business days."),),))
    refund = Query("r", "How many days after delivery are refunds accepted for gifts bought abroad?", required=(
        (Alternative(doc="refund.md", quote="Refunds are accepted within 30 days of delivery."),),))
    u = Query("u", "What does error RFD 9999 mean for a refund?", answerable=False)
    return build_pipeline(store, lexical, encoder=encoder), [shipping, refund, QUERIES[1], u]


def test_a_hallucination_limit_is_kept_before_success(small):
    pipeline, queries = _abroad(small)
    free = fit.fit_abstention(pipeline, queries)
    scores = {qid: score for qid, score, _, _ in free.rows}
    assert (scores["s"], scores["r"], scores["u"], scores["q2"]) == (
        pytest.approx(4 / 7), pytest.approx(4 / 7), pytest.approx(4 / 6), pytest.approx(1.0))
    # answering everything: 3 of 4 succeed (u hallucinates); a threshold above u: 2 of 4
    assert free.min_coverage == 0.0 and free.success == 0.75 and free.hallucination == 0.25
    limited = fit.fit_abstention(pipeline, queries, max_hallucination=0.0)
    assert limited.min_coverage == pytest.approx(1.0) and limited.success == 0.5 and limited.hallucination == 0.0
    assert "hallucination on negatives <= 0" in limited.fitted_on


def test_a_question_the_name_check_abstains_on_does_not_bind_the_threshold(small):
    pipeline, queries = _abroad(small)
    # zx81 is held by no page: abstained on whatever the threshold. Its terms: error, rfd, 4021 (2),
    # mean, refund, zx81 (2) -> 8; "Error RFD-4021 means the refund window expired." holds 6 of them
    w = Query("w", "What does error RFD-4021 mean for a refund on a zx81?", answerable=False)
    found = fit.fit_abstention(pipeline, queries + [w])
    rows = {qid: (score, answered, abstained) for qid, score, answered, abstained in found.rows}
    assert rows["w"] == (pytest.approx(6 / 8), "correct_abstention", "correct_abstention")
    # answering the rest: s, r, q2 supported, u hallucinated, w abstained -> 4 of 5; any threshold
    # above u's 4/6 gives up s and r (4/7) for u: 3 of 5
    assert (found.min_coverage, found.success, found.hallucination) == (0.0, 0.8, 0.2)
    assert (found.hallucinated, found.negatives, found.wrong_abstention) == (1, 2, 0.0)
    # no hallucination: the lowest candidate above u's 4/6 is w's own score, 6/8
    limited = fit.fit_abstention(pipeline, queries + [w], max_hallucination=0.0)
    assert limited.min_coverage == pytest.approx(0.75) and (limited.success, limited.wrong_abstention) == (0.6, 0.4)
    assert limited.to_dict()["hallucinated"] == "0/2"


@pytest.mark.parity
def test_the_fitted_reranker_is_scikit_learns_balanced_logistic_regression(small):
    linear_model = pytest.importorskip("sklearn.linear_model")
    store, encoder, settings = small
    pipeline = build_pipeline(store, settings, encoder=encoder)
    run = fit.collect(pipeline, QUERIES)
    x, y = fit.reranker_rows(pipeline, run)
    assert x.shape == (len(y), 9) and 0 < y.sum() < len(y)
    # the same objective: class-balanced log loss plus l2/2 ||w||^2 on the feature weights (C = 1/l2)
    reference = linear_model.LogisticRegression(C=1 / 0.5, class_weight="balanced", tol=1e-12,
                                                max_iter=100_000).fit(x, y)
    weights = fit.fit_reranker(pipeline, run, l2=0.5).weights
    np.testing.assert_allclose([weights[f] for f in FEATURES], reference.coef_[0], atol=2e-5)
    assert weights["bias"] == pytest.approx(reference.intercept_[0], abs=2e-5)


def test_the_channel_features_are_read_from_the_candidates_history(small):
    store, _, _ = small
    chunk = store.chunks("errors.md")[0]
    history = (Provenance("bm25", 3, 7.5), Provenance("dense", 1, 0.42), Provenance("rrf", 2, 0.03))
    values = features("What does error RFD-4021 mean?", chunk, 2, history)
    assert values["bm25_rank"] == 0.5 and values["dense_rank"] == 1.0 and values["dense_cosine"] == 0.42
    alone = features("What does error RFD-4021 mean?", chunk, 2, history[1:])
    assert alone["bm25_rank"] == 0.0 and alone["dense_rank"] == 1.0
    # the best sentence's cosine (0 when negative) and its rank, as 1/log2(1 + rank)
    assert values["sentence_sim"] == 0.0 and values["sentence_rank"] == 0.0
    scored = features("What does error RFD-4021 mean?", chunk, 2, history, (0.625, 3))
    assert scored["sentence_sim"] == 0.625 and scored["sentence_rank"] == 0.5
    assert features("What does error RFD-4021 mean?", chunk, 2, history, (-0.25, 1))["sentence_sim"] == 0.0

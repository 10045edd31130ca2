"""Rerankers: the feature model's arithmetic, the cross-encoder on the packaged model (extra models), cuts."""

import pytest

from ragdx.build import build_pipeline
from ragdx.stages.rerank import PRIOR_WEIGHTS, FeatureReranker, SentenceReranker, SentenceSimilarity, features
from ragdx.text import statements
from ragdx.types import Principal, Query
from tests.conftest import require_models

Q = Query("q", "What does error RFD-4021 mean for my refund?", Principal())


def test_features_by_hand(small):
    store, _, _ = small
    chunk = next(c for c in store.chunks("errors.md") if "RFD-4021" in c.text)
    values = features(Q.question, chunk, fused_rank=3)
    # content terms: error, rfd, 4021, refund (what/does/mean/for/my are... 'mean' is not a stopword)
    assert values["fused_rank"] == pytest.approx(1 / 2)          # 1 / log2(1 + 3)
    assert values["exact_tokens"] == 1.0                           # "RFD-4021" appears verbatim
    # terms: error, rfd, 4021, mean, refund; in the chunk: error, rfd, 4021, means(not mean), refund
    assert values["term_coverage"] == pytest.approx(4 / 5)
    assert values["heading_coverage"] == pytest.approx(1 / 5)    # "error" from "Error codes"


def test_feature_reranker_cuts_with_reasons_and_keeps_provenance(small):
    store, encoder, settings = small
    pipeline = build_pipeline(store, settings, encoder=encoder)
    fused = pipeline.fusion.run(pipeline.retrieve(Q))
    reranked = FeatureReranker(store, top_n=2).run(Q, fused)
    assert len(reranked.items) == 2 and len(reranked.dropped) == len(fused.items) - 2
    top = reranked.items[0]
    assert top.doc_id == "errors.md" and [p.stage for p in top.history] == ["bm25", "dense", "rrf", "features"]
    assert reranked.dropped[0].reason.startswith("below the rerank cut: reranked to 3 of")
    assert reranked.config["fitted_on"] == "unfitted prior" and reranked.config["weights"] == PRIOR_WEIGHTS


def _cross_encoder_trace(small, *overrides):
    from ragdx.config import load_settings
    require_models()
    store, encoder, _ = small
    settings = load_settings(overrides=["rerank.method=cross-encoder", "chunking.tokenizer=regex", *overrides])
    return build_pipeline(store, settings, encoder=encoder).run(Q)


def test_cross_encoder_alone_with_the_packaged_model(small):
    trace = _cross_encoder_trace(small, "rerank.depth=4", "rerank.top_n=3")
    fused = trace.stage("rrf").items
    rerank = trace.stage("cross-encoder")
    # the chunk that explains RFD-4021 scores highest of the four best fused
    assert "RFD-4021" in small[0].chunks_by_id([rerank.items[0].chunk_id])[rerank.items[0].chunk_id].text
    assert [c.rank for c in rerank.items] == [1, 2, 3]
    scores = [c.score for c in rerank.items]
    assert scores == sorted(scores, reverse=True)
    config = rerank.config
    assert config["model"] == "cross-encoder/ms-marco-MiniLM-L-12-v2" and config["source"] == "packaged"
    assert len(config["weights_hash"]) == 16 and config["depth"] == 4 and config["max_tokens"] == 512
    # the fourth scored is cut at top_n; the fused candidates below depth 4 are dropped unscored
    assert rerank.dropped[0].reason.startswith("below the rerank cut: reranked to 4 of 4")
    assert [d.reason for d in rerank.dropped[1:]] == [
        f"not scored: fused rank {c.rank}, below rerank.depth 4" for c in fused[4:]]
    assert {c.chunk_id for c in rerank.items} | {d.chunk_id for d in rerank.dropped} == {c.chunk_id for c in fused}


def test_cross_encoder_fused_with_the_fused_rank(small):
    trace = _cross_encoder_trace(small, "rerank.depth=4", "rerank.combine=rrf", "rerank.top_n=150")
    fused = trace.stage("rrf").items
    rerank = trace.stage("cross-encoder")
    logits = rerank.config["logits"]
    assert list(logits) == [c.chunk_id for c in fused[:4]]
    by_logit = sorted(range(4), key=lambda i: -logits[fused[i].chunk_id])
    ce_rank = {fused[i].chunk_id: r for r, i in enumerate(by_logit, start=1)}
    for c in fused:  # below depth a candidate counts its fused rank twice
        expected = 1 / (60 + c.rank) + 1 / (60 + ce_rank.get(c.chunk_id, c.rank))
        assert next(r.score for r in rerank.items if r.chunk_id == c.chunk_id) == pytest.approx(expected)
    assert len(rerank.items) == len(fused) and not rerank.dropped


def test_cross_encoder_settings_are_checked(small):
    from ragdx.errors import ConfigError
    from ragdx.stages.rerank import CrossEncoderReranker
    with pytest.raises(ConfigError, match="rerank.combine must be one of alone, rrf, not 'sum'"):
        CrossEncoderReranker(small[0], object(), combine="sum")


def _cosine(a, b):
    import numpy as np
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_a_chunk_scores_its_best_sentence(small):
    store, encoder, _ = small
    chunk = next(c for c in store.chunks("errors.md") if "RFD-4021" in c.text)
    parts = statements(chunk.text)
    assert len(parts) >= 2
    q = encoder.encode([Q.question], kind="query").vectors[0]
    each = [_cosine(encoder.encode([s], kind="passage").vectors[0], q) for s in parts]
    assert SentenceSimilarity(encoder).run(Q.question, [chunk]) == [pytest.approx(max(each))]


def test_sentence_reranker_fuses_the_fused_rank_with_the_sentence_rank(small):
    store, encoder, settings = small
    pipeline = build_pipeline(store, settings, encoder=encoder)
    fused = pipeline.fusion.run(pipeline.retrieve(Q))
    n = len(fused.items)
    assert n >= 4
    reranker = SentenceReranker(store, encoder, top_n=n, depth=2)
    chunks = store.chunks_by_id([c.chunk_id for c in fused.items[:2]])
    s1, s2 = reranker.similarity.run(Q.question, [chunks[c.chunk_id] for c in fused.items[:2]])
    r1, r2 = (1, 2) if s1 >= s2 else (2, 1)
    # the two first are scored by their sentences; below depth, a candidate counts its fused rank twice
    expected = {fused.items[0].chunk_id: 1 / 61 + 1 / (60 + r1), fused.items[1].chunk_id: 1 / 62 + 1 / (60 + r2)}
    expected |= {c.chunk_id: 2 / (60 + i) for i, c in enumerate(fused.items[2:], start=3)}
    reranked = reranker.run(Q, fused)
    assert {c.chunk_id: c.score for c in reranked.items} == pytest.approx(expected)
    assert [c.rank for c in reranked.items] == list(range(1, n + 1)) and reranked.dropped == ()
    assert [c.chunk_id for c in reranked.items][2:] == [c.chunk_id for c in fused.items[2:]]
    assert reranked.config == {"method": "sentences", "top_n": n, "depth": 2, "c": 60.0,
                               "encoder": encoder.space.id}


def test_the_default_reranker_is_the_sentence_reranker_only_with_an_encoder(small):
    from ragdx.config import load_settings
    from ragdx.errors import ConfigError
    store, encoder, _ = small
    defaults = load_settings(overrides=["chunking.tokenizer=regex"])
    assert isinstance(build_pipeline(store, defaults, encoder=encoder).reranker, SentenceReranker)
    lexical = load_settings(overrides=["retrieval.dense.enabled=false"])
    assert build_pipeline(store, lexical).reranker is None
    with pytest.raises(ConfigError, match="rerank.method 'sentences' needs the dense encoder"):
        build_pipeline(store, load_settings(overrides=["retrieval.dense.enabled=false", "rerank.method=sentences"]))

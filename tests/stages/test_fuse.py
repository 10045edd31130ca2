"""Fusion: the field's published RRF examples, exactly; provenance; weighted fusion."""

import pytest

from ragdx.errors import ConfigError
from ragdx.stages.fuse import RRF, ChannelCalibration, WeightedFusion
from ragdx.types import Candidate, Provenance, Ranked, StageKind


def ranked(name, ids, scores=None):
    scores = scores or [10.0 - i for i in range(len(ids))]
    return Ranked(name, StageKind.RETRIEVAL, tuple(
        Candidate(cid, "doc", "v", rank * 10, rank * 10 + 5, rank, scores[rank - 1],
                  (Provenance(name, rank, scores[rank - 1]),))
        for rank, cid in enumerate(ids, start=1)))


def test_rrf_example_one():
    fused = RRF(c=60).run([ranked("bm25", ["A", "B", "C"]), ranked("dense", ["B", "D", "A"])])
    assert [c.chunk_id for c in fused.items] == ["B", "A", "D", "C"]
    score = {c.chunk_id: c.score for c in fused.items}
    assert score["B"] == 1 / 62 + 1 / 61
    assert score["A"] == 1 / 61 + 1 / 63
    assert score["D"] == 1 / 62 and score["C"] == 1 / 63
    assert round(score["B"], 5) == 0.03252 and round(score["A"], 5) == 0.03227


def test_rrf_example_two_and_deterministic_ties():
    lists = [ranked("bm25", ["exact-error-code", "overview", "faq"]),
             ranked("dense", ["overview", "exact-error-code", "runbook"])]
    fused = RRF(c=60).run(lists)
    score = {c.chunk_id: c.score for c in fused.items}
    assert round(score["exact-error-code"], 6) == round(score["overview"], 6) == 0.032522
    assert round(score["faq"], 6) == round(score["runbook"], 6) == 0.015873
    # ties: best rank in any list, then earlier list, then id -- the same order every time
    assert [c.chunk_id for c in fused.items] == ["exact-error-code", "overview", "faq", "runbook"]
    assert [c.chunk_id for c in RRF(c=60).run(lists).items] == [c.chunk_id for c in fused.items]


def test_c_is_not_a_cutoff_and_top_k_drops_with_reason():
    lists = [ranked("bm25", ["A", "B", "C"]), ranked("dense", ["B", "D", "A"])]
    fused = RRF(c=1, top_k=2).run(lists)
    assert [c.chunk_id for c in fused.items] == ["B", "A"]
    assert fused.items[0].score == 1 / 3 + 1 / 2
    assert [(d.chunk_id, d.rank, d.reason) for d in fused.dropped] == [
        ("D", 3, "below the fusion cut: fused rank 3, fusion.top_k 2"),
        ("C", 4, "below the fusion cut: fused rank 4, fusion.top_k 2")]
    with pytest.raises(ConfigError):
        RRF(c=-1)


def test_provenance_keeps_every_channel_rank():
    fused = RRF().run([ranked("bm25", ["A", "B", "C"]), ranked("dense", ["B", "D", "A"])])
    a = next(c for c in fused.items if c.chunk_id == "A")
    assert (a.at("bm25").rank, a.at("dense").rank, a.at("rrf").rank) == (1, 3, 2)
    d = next(c for c in fused.items if c.chunk_id == "D")
    assert d.at("bm25") is None and d.at("dense").rank == 2


def test_weighted_fusion_uses_fitted_normalisation():
    bm25 = ranked("bm25", ["A", "B"], [12.0, 4.0])
    dense = ranked("dense", ["B", "C"], [0.9, 0.5])
    fusion = WeightedFusion({"bm25": ChannelCalibration(0.25, mean=8.0, std=4.0, missing=-2.0),
                             "dense": ChannelCalibration(0.75, mean=0.5, std=0.2, missing=-2.0)})
    score = {c.chunk_id: c.score for c in fusion.run([bm25, dense]).items}
    assert score["A"] == pytest.approx(0.25 * 1.0 + 0.75 * -2.0)
    assert score["B"] == pytest.approx(0.25 * -1.0 + 0.75 * 2.0)
    assert score["C"] == pytest.approx(0.25 * -2.0 + 0.75 * 0.0)
    with pytest.raises(ConfigError, match="no fitted calibration for channel"):
        fusion.run([bm25, ranked("splade", ["A"])])

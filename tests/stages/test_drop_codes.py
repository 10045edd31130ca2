"""Every drop carries a code beside its words (docs/diagnosis.md#drop-codes)."""

import pytest

from ragdx.types import DropCode, Dropped


@pytest.mark.parametrize("reason, code", [
    ("superseded: version 2024-01 of policies/refund.md; the current version is 2026-03", DropCode.SUPERSEDED),
    ("expired: version 1 of a.md", DropCode.EXPIRED),
    ("deleted: a.md was deleted at 2026-01-01", DropCode.DELETED),
    ("filtered: acl: staff only", DropCode.ACL),
    ("withheld: the best matches for this question are mostly sources the asker may not read", DropCode.WITHHELD),
    ("other version: pg-17/x.html is version 17; the question names 15, which pg-15/x.html holds",
     DropCode.OTHER_VERSION),
    ("below the rerank cut: reranked to 23 of 50 (from 9), rerank.top_n 20", DropCode.CUT),
    ("rrf: fused rank 31, fusion.top_k 30", DropCode.OTHER),  # a fusion's words start with its method
    ("not scored: fused rank 40, below rerank.depth 30", DropCode.NOT_SCORED),
    ("truncated by the token budget: kept [0:10] of [0:50]", DropCode.TRUNCATED),
    ("cut by the token budget: rank 9 of 12", DropCode.BUDGET),
    ("duplicate: inside unit S2", DropCode.DUPLICATE),
    ("the model did not like it", DropCode.OTHER),
])
def test_a_reason_without_a_code_is_read_from_its_first_words(reason, code):
    assert DropCode.of_reason(reason) is code
    assert Dropped("c", "d", "v", 0, 1, reason).code is code


def test_a_given_code_wins_over_the_words():
    assert Dropped("c", "d", "v", 0, 1, "superseded in words only", 3, DropCode.CUT).code is DropCode.CUT


def test_ragdx_fusion_gives_its_cut_a_code_its_words_do_not_carry():
    from ragdx.stages.fuse import RRF
    from ragdx.types import Candidate, Ranked, StageKind
    lists = [Ranked(ch, StageKind.RETRIEVAL, tuple(Candidate(f"c{i}", "d", "v", i, i + 1, r, 1.0 / r)
                                                    for r, i in enumerate(order, start=1)))
             for ch, order in (("bm25", [1, 2, 3]), ("dense", [3, 4, 5]))]
    fused = RRF(top_k=2).run(lists)
    assert [d.chunk_id for d in fused.dropped] == ["c2", "c4", "c5"]
    assert {d.code for d in fused.dropped} == {DropCode.CUT}

"""Governance withholds a question whose best match is a source the asker may not read: nothing
reaches the context, and the generator abstains instead of answering from loosely related public
text (issue 12: never answer a question whose required evidence the principal cannot read)."""

import pytest

from ragdx.build import build_pipeline
from ragdx.config import with_overrides
from ragdx.errors import ConfigError
from ragdx.stages.govern import WITHHELD, Governance
from ragdx.types import Candidate, Principal, Query, Ranked, StageKind

SECRET_QUESTION = "What is the secret override code for refunds?"   # only runbook.md (staff) says
PUBLIC = Principal("u", ("public",))
STAFF = Principal("s", ("public", "staff"))


def _run(small, question, principal, *overrides):
    store, encoder, settings = small
    settings = with_overrides(settings, ["generation.semantic_weight=0", *overrides])
    trace = build_pipeline(store, settings, encoder=encoder).run(Query("q", question, principal))
    return {s.kind: s for s in trace.stages}


def test_the_public_asker_gets_nothing_when_the_best_match_is_staff_only(small):
    stages = _run(small, SECRET_QUESTION, PUBLIC)
    governed = stages[StageKind.GOVERNANCE]
    assert governed.items == ()
    assert len(governed.dropped) == len(stages[StageKind.FUSION].items) > 0
    assert {d.reason for d in governed.dropped} == {WITHHELD}
    assert stages[StageKind.GENERATION].abstained
    assert "OVERRIDE" not in str(governed) and "runbook" not in str(governed)


def test_without_the_check_the_public_asker_is_answered_from_public_text(small):
    # what the check prevents: the same question, answered from the refund policy
    stages = _run(small, SECRET_QUESTION, PUBLIC, "governance.withhold=false")
    assert stages[StageKind.GOVERNANCE].items != ()
    units = stages[StageKind.CONTEXT].units
    assert units and {u.doc_id for u in units} <= {"refund.md", "errors.md", "shipping.md"}


def test_the_staff_asker_is_answered_from_the_runbook(small):
    stages = _run(small, SECRET_QUESTION, STAFF)
    assert not stages[StageKind.GENERATION].abstained
    assert "OVERRIDE-77" in stages[StageKind.GENERATION].text


@pytest.mark.parametrize("question", ["How many days do parcels take to be delivered?",
                                      "What does error RFD-4021 mean?"])
def test_a_question_whose_best_match_is_public_is_not_withheld(small, question):
    stages = _run(small, question, PUBLIC)
    assert WITHHELD not in {d.reason for d in stages[StageKind.GOVERNANCE].dropped}
    assert stages[StageKind.GOVERNANCE].items != ()


class _Listed:
    """A channel whose best matches are given (a retriever with ``deeper``)."""

    name = "listed"

    def __init__(self, store, docs):
        self.items = tuple(Candidate(f"{doc}#{i}", doc, store.versions(doc)[0].document.version, 0, 1, i + 1, 1.0, ())
                           for i, doc in enumerate(docs))
        self.top_k = len(docs)

    def deeper(self, top_k, exact=False):
        return self

    def run(self, query):
        return Ranked(self.name, StageKind.RETRIEVAL, self.items, (), {}, 0.0)


@pytest.mark.parametrize("first, second, depth, withheld", [
    # one channel's best is public, but the staff-only matches weigh 1 + 1/2 + 1/2 + 1/3 = 7/3 of 11/3
    (["runbook.md", "runbook.md", "refund.md"], ["refund.md", "runbook.md", "runbook.md"], 3, True),
    # both channels' best is staff-only: 2 of 11/3, though four of the six matches are public
    (["runbook.md", "refund.md", "errors.md"], ["runbook.md", "refund.md", "shipping.md"], 3, True),
    # one channel's best is staff-only: 1 of 11/3
    (["runbook.md", "refund.md", "refund.md"], ["refund.md", "errors.md", "shipping.md"], 3, False),
    # 1/2 + 1/3 + 1 + 1/2 + 1/3 = 8/3 of 11/3
    (["refund.md", "runbook.md", "runbook.md"], ["runbook.md", "runbook.md", "runbook.md"], 3, True),
    # exactly half is not more than half: 1/2 + 1/3 + 1 = 11/6 of 11/3
    (["refund.md", "runbook.md", "runbook.md"], ["runbook.md", "errors.md", "shipping.md"], 3, False),
    # depth 1: the best match of every channel (the earlier rule)
    (["runbook.md", "runbook.md", "runbook.md"], ["refund.md", "runbook.md", "runbook.md"], 1, False),
    (["runbook.md", "refund.md", "refund.md"], ["runbook.md", "refund.md", "shipping.md"], 1, True),
])
def test_a_question_is_withheld_when_most_of_its_best_matches_are_unreadable(small, first, second, depth,
                                                                             withheld):
    store = small[0]
    governance = Governance(store, withhold=[_Listed(store, first), _Listed(store, second)], withhold_depth=depth)
    assert governance.withheld(Query("q", "anything", PUBLIC)) is withheld
    assert governance.withheld(Query("q", "anything", STAFF)) is False


def test_a_withhold_depth_below_one_is_refused(small):
    with pytest.raises(ConfigError, match="governance.withhold_depth must be at least 1, not 0"):
        Governance(small[0], withhold_depth=0)

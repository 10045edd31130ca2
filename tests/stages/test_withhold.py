"""Governance withholds a question whose best match is a source the asker may not read: nothing
reaches the context, and the generator abstains instead of answering from loosely related public
text (issue 12: never answer a question whose required evidence the principal cannot read)."""

import pytest

from ragdx.build import build_pipeline
from ragdx.config import with_overrides
from ragdx.stages.govern import WITHHELD
from ragdx.types import Principal, Query, StageKind

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

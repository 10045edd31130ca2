"""The PostgreSQL question sets under bench/devset/ (written and labelled blind to ragdx's output;
docs/benchmarks.md) are valid query sets whose halves never share a question, and every question
carries the reference answer ``bench/quality/label.py`` gives ``ragdx label``. That each quote resolves in
the PostgreSQL store is checked by the benchmarks (``ragdx evidence --strict``), which build it."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragdx.queryset import load_queries

DEVSET = Path(__file__).resolve().parents[2] / "bench" / "devset"


@pytest.mark.parametrize("name, total, unanswerable", [("pg-general", 60, 16), ("pg-label", 40, 4),
                                                         ("pg-label2", 40, 4)])
def test_a_question_set_in_two_disjoint_halves_with_reference_answers(name: str, total: int,
                                                                        unanswerable: int) -> None:
    import json
    halves = [load_queries(DEVSET / f"{name}.{half}.jsonl") for half in ("fit", "test")]
    ids = [{q.id for q in half} for half in halves]
    assert (len(ids[0]) + len(ids[1]), ids[0] & ids[1]) == (total, set())
    assert sum(not q.answerable for half in halves for q in half) == unanswerable
    for half in ("fit", "test"):
        rows = [json.loads(line) for line in (DEVSET / f"{name}.{half}.jsonl").read_text().splitlines() if line]
        assert [r["id"] for r in rows if not r.get("answer")] == []
        assert {r["required"] == [] for r in rows if not r["answerable"]} == {True}

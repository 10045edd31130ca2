"""How far a proposed place reaches (the words scorer, on tiny corpora): two statements side by
side that state a claim about as well are one span; a sentence ending in a colon is taken with the
list that follows it; and, for a question naming no version, another version's statement that
says the same in a few words otherwise is an alternative too."""

from __future__ import annotations

import json
from pathlib import Path

from ragdx.label import Labeller
from ragdx.label.readers import EvalCase
from ragdx.stages.bm25 import BM25Retriever
from ragdx.store.sqlite import SQLiteStore
from tests.conftest import write


def _store(tmp_path: Path, pages: dict[str, str]) -> SQLiteStore:
    from ragdx.ingest.ingestor import Ingestor
    for name, text in pages.items():
        write(tmp_path / "corpus" / name, text)
    store = SQLiteStore(tmp_path / "store.db")
    Ingestor(store).run(tmp_path / "corpus")
    return store


def _run(store: SQLiteStore, case: EvalCase, **options: object):
    return Labeller(store, [BM25Retriever(store, top_k=20, current_only=False)], **options).run(case)


GEARS = {"gears.md": "# Gears\n\nGears turn widgets clockwise.\n\nGears stop widgets at night.\n\n"
                     "Gears rust in the rain.\n"}
TURN_STOP = EvalCase(id="q1", question="What do gears do?", reference="Gears turn widgets and stop them.")


def test_two_statements_side_by_side_that_state_a_claim_as_well_are_one_span(tmp_path: Path) -> None:
    store = _store(tmp_path, GEARS)
    # the claim's words: gear, turn, widget, stop; each of the first two sentences holds three
    # (0.75; the question asks nothing else, so its share is the claim's: 0.75 * 3/4 + 0.25 * 3/4);
    # the third holds one. The two tie, with only white space between: one span over both
    (group,) = _run(store, TURN_STOP).groups
    assert (group.places[0].text, group.score) == (
        "Gears turn widgets clockwise.\n\nGears stop widgets at night.", 0.75)
    # the runner-up is part of the span now, not a rival within 0.05; 0.75 is no review score (0.7)
    assert group.needs_review is False
    # without the rule the first of the two alone, and the second its rival within 0.05
    (alone,) = _run(store, TURN_STOP, neighbour=0.0).groups
    assert (alone.places[0].text, alone.needs_review) == ("Gears turn widgets clockwise.", True)


def test_a_statement_a_paragraph_away_beyond_the_margin_is_not_joined(tmp_path: Path) -> None:
    store = _store(tmp_path, GEARS)
    # "Gears rust in the rain.": gear only, 0.25; "Gears stop widgets at night.": gear, widget, 0.5;
    # the best, "Gears turn widgets clockwise." (gear, turn, widget: 0.75), is 0.25 ahead of its neighbour
    case = EvalCase(id="q2", question="What do gears do?", reference="Gears turn widgets one way.")
    (group,) = _run(store, case).groups
    assert group.places[0].text == "Gears turn widgets clockwise."


SIZES = {"sizes.html": "<html><head><title>Sizes</title></head><body><h1>Sizes</h1>"
                       "<p>Widgets accept any size, with the following exceptions:</p>"
                       "<ol><li>Round widgets are not supported.</li><li>Square frames need a hinge.</li></ol>"
                       "<p>Examples follow.</p></body></html>"}


def test_a_sentence_ending_in_a_colon_is_taken_with_its_list(tmp_path: Path) -> None:
    store = _store(tmp_path, SIZES)
    case = EvalCase(id="q3", question="Which sizes do widgets accept?", reference="Any size except a few.")
    (group,) = _run(store, case).groups
    # the claim's words (any, size, except, few): the colon sentence holds two, the items none; its
    # place runs to the end of the list's last item, not into the next paragraph
    assert group.places[0].text == ("Widgets accept any size, with the following exceptions:\n\n"
                                    "1. Round widgets are not supported.\n2. Square frames need a hinge.")
    (bare,) = _run(store, case, lists=False).groups
    assert bare.places[0].text == "Widgets accept any size, with the following exceptions:"


def _versions(tmp_path: Path) -> SQLiteStore:
    from ragdx.ingest.ingestor import Ingestor
    old = write(tmp_path / "corpus" / "old.md", "# Spin\n\nWidgets spin at 30 turns per second [1].\n")
    new = write(tmp_path / "corpus" / "new.md", "# Spin\n\nWidgets spin at 30 turns per second.\n")
    manifest = write(tmp_path / "manifest.jsonl", "".join(json.dumps(row) + "\n" for row in [
        {"doc_id": "spin.md", "path": str(old), "version": "1.0", "status": "superseded"},
        {"doc_id": "spin.md", "path": str(new), "version": "2.0"}]))
    store = SQLiteStore(tmp_path / "store.db")
    Ingestor(store).run(manifest)
    return store


def test_another_versions_statement_in_other_words_is_an_alternative(tmp_path: Path) -> None:
    store = _versions(tmp_path)
    case = EvalCase(id="q4", question="How fast do widgets spin?", reference="30 turns per second.")
    (group,) = _run(store, case).groups
    # 2.0 (current) states it; 1.0's sentence has a footnote mark more: its content
    # words (widget, spin, 30, turn, second, 1) share 5 of 6 with 2.0's (0.83 >= 0.8)
    assert [(p.version, p.text) for p in group.places] == [
        ("2.0", "Widgets spin at 30 turns per second."), ("1.0", "Widgets spin at 30 turns per second [1].")]
    (exact,) = _run(store, case, similar=0.0).groups
    assert [p.version for p in exact.places] == ["2.0"]
    # a question naming a version keeps to it
    named = EvalCase(id="q5", question="In 2.0, how fast do widgets spin?", reference="30 turns per second.")
    (pinned,) = _run(store, named).groups
    assert [p.version for p in pinned.places] == ["2.0"]

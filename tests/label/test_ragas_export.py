"""``ragdx label`` and ``ragdx diagnose`` on files written by the real ``ragas`` package
(tests/label/data/README.md: which version, and which call wrote each), end to end on the
bundled example's store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragdx.cli import main

DATA = Path(__file__).parent / "data"
SHIPPING = "Standard shipping costs 4.95 EUR. Shipping is free for orders over 75 EUR."


def _label(store, data: Path, out: Path) -> list[dict]:
    assert main(["label", "--store", str(store.path), "--tests", str(data), "--out", str(out),
                 "--scorer", "words", "-q"]) == 0
    return [json.loads(line) for line in out.read_text().splitlines()]


@pytest.mark.parametrize(("name", "first"), [("ragas_export.jsonl", 1), ("ragas_export.csv", 2)])
def test_a_ragas_export_labelled_and_diagnosed(example_store, tmp_path: Path, name: str, first: int) -> None:
    # to_jsonl numbers its rows from line 1; to_csv from line 2 (the header is line 1)
    ids = [f"q{first + n}" for n in range(4)]
    lines = _label(example_store, DATA / name, tmp_path / "queries.jsonl")
    assert [line["id"] for line in lines] == ids
    shipping, credit, warranty, crypto = lines
    assert shipping["required"] == [[{"doc": "policies/shipping.md", "version": "3e19257ab347", "quote": SHIPPING}]]
    assert credit["required"] == [[{"doc": "policies/gift-cards.md", "version": "e3e7e4c730b8",
                                    "quote": "Store credit is valid for 24 months from the date it is issued."}]]
    assert warranty["required"] == [[{"doc": "policies/warranty.txt", "version": "2026-02", "quote":
                                      "It does not cover normal wear and tear, accidents, improper care or "
                                      "modifications."}]]
    # no page states the made-up reference: nothing to label, the system should abstain
    assert crypto["required"] == [] and crypto["answerable"] is False
    assert [u["claim"] for u in crypto["metadata"]["label"]["unsupported_reference"]] == [
        "Bitcoin payments are accepted at every Northwind store worldwide."]
    assert [line["metadata"]["label"]["needs_review"] for line in lines] == [False, False, False, True]
    folder = tmp_path / "diagnosis"
    assert main(["diagnose", "--traces", str(DATA / name), "--queries", str(tmp_path / "queries.jsonl"),
                 "--store", str(example_store.path), "--out", str(folder), "--abstention", "^I don't know",
                 "-q"]) == 0
    found = {d["id"]: d for d in map(json.loads, (folder / "diagnosis.jsonl").read_text().splitlines())}
    assert [(found[q]["outcome"], found[q]["first_failure"]) for q in ids] == [
        ("supported", None), ("unsupported", "retrieval"), ("unsupported", "generation"),
        ("correct_abstention", None)]
    assert [(loss["group"], loss["stage"]) for loss in found[ids[1]]["lost"]] == [(0, "retrieval")]


def test_a_ragas_csv_list_cell_is_read_as_a_list(tmp_path: Path) -> None:
    from ragdx.label import read_eval_set
    cases = read_eval_set(DATA / "ragas_export.csv").cases
    assert cases[0].retrieved_contexts == (SHIPPING,)
    assert cases[0].reference_contexts == (SHIPPING,)
    assert cases[1].reference_contexts == ()
    assert cases[3].retrieved_contexts == ("You can combine a gift card with any other payment method.",)


def test_a_cell_that_is_no_list_of_strings_is_an_error(tmp_path: Path) -> None:
    from ragdx.errors import InputError
    from ragdx.label import read_eval_set
    bad = tmp_path / "bad.csv"
    bad.write_text("user_input,retrieved_contexts,reference\nq?,\"['a', 3]\",r\n")
    with pytest.raises(InputError) as err:
        read_eval_set(bad)
    assert err.value.field == "retrieved_contexts" and err.value.line == 2
    assert "neither a JSON array nor a Python list of strings" in str(err.value)

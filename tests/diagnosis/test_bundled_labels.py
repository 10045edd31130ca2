"""`ragdx run` on the bundled example: the diagnosis matches the hand labels for every query."""

import json

import pytest

from ragdx.config import load_settings
from ragdx.build import build_ingestor
from ragdx.queryset import load_queries
from ragdx.experiments.run import run
from ragdx.store.sqlite import SQLiteStore
from tests.conftest import EXAMPLE


def test_diagnosis_matches_hand_labels(tmp_path):
    pytest.importorskip("sentence_transformers")  # the labels are for the default pipeline
    settings = load_settings()
    store = SQLiteStore(tmp_path / "store.db")
    build_ingestor(store, settings).run(EXAMPLE / "manifest.jsonl")
    queries = load_queries(EXAMPLE / "queries.jsonl")
    result = run(store, settings, queries, tmp_path / "run", progress=False)
    labels = {row["id"]: row for row in map(json.loads, (EXAMPLE / "labels.jsonl").read_text().splitlines())}
    assert set(labels) == {q.id for q in queries}
    got = {d.id: (d.outcome, d.first_failure) for d in result.diagnoses}
    want = {qid: (row["outcome"], row["first_failure"]) for qid, row in labels.items()}
    assert got == want

"""The bundled example gives the same top-k at every stage and the same diagnosis on the embedded
store and on PostgreSQL, on one server and sharded (exact vector search on all three)."""

from __future__ import annotations

import json
from importlib.util import find_spec

import pytest

from ragdx.build import build_ingestor
from ragdx.config import load_settings
from ragdx.examples import example_dir
from ragdx.experiments.run import run
from ragdx.queryset import load_queries
from ragdx.store.sqlite import SQLiteStore
from ragdx.testing.encoders import HashingEncoder
from tests.recorded.snapshot import snapshot

pytestmark = pytest.mark.pg


def _run(store, folder, encoder):
    example = example_dir()
    settings = load_settings(overrides=["retrieval.dense.search=exact"])  # exact on every backend
    build_ingestor(store, settings, encoder).run(example / "manifest.jsonl")
    run(store, settings, load_queries(example / "queries.jsonl"), folder, example / "queries.jsonl",
        progress=False, encoder=encoder)
    traces = [json.loads(line) for line in (folder / "traces.jsonl").read_text(encoding="utf-8").splitlines()]
    tops = [{stage["name"]: [item["id"] for item in stage.get("items", [])]
             for stage in trace["stages"]} for trace in traces]
    return tops, snapshot(folder, folder.parent)


@pytest.mark.parametrize("model", ["hashing", "minilm"])
def test_the_example_gives_the_same_top_k_and_diagnosis_on_every_backend(tmp_path, pg_store_factory, model):
    if model == "minilm" and find_spec("sentence_transformers") is None:
        pytest.skip("needs the 'dense' extra")
    encoder = HashingEncoder(dim=256) if model == "hashing" else None
    if encoder is None:
        from ragdx.build import build_encoder
        encoder = build_encoder(load_settings().retrieval.dense)
    (tmp_path / "sqlite").mkdir()
    with SQLiteStore(tmp_path / "sqlite" / "store.db") as store:
        want_tops, want = _run(store, tmp_path / "sqlite" / "run", encoder)
    assert sum(len(top["bm25"]) for top in want_tops) > 100  # the runs did retrieve
    for kind in ["pg", "sharded"]:
        got_tops, got = _run(pg_store_factory(kind), tmp_path / kind / "run", encoder)
        for n, (w, g) in enumerate(zip(want_tops, got_tops)):
            assert g == w, (kind, n)
        assert [d["id"] for d in got["diagnoses"]] == [d["id"] for d in want["diagnoses"]]
        for before, after in zip(want["diagnoses"], got["diagnoses"]):
            assert after == before, (kind, before["id"])
        assert got["metrics"] == want["metrics"]

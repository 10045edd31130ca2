"""The bundled demo's diagnoses, metrics and report against a recorded run: a refactoring must
leave them the same (numbers in the report's text, such as timings, are masked)."""

import json
from importlib.util import find_spec

import pytest

from tests.recorded.record import demo_snapshot, recorded_path


def _compare(which: str, tmp_path):
    recorded = json.loads(recorded_path(which).read_text(encoding="utf-8"))
    now = demo_snapshot(which, tmp_path)
    assert len(now["diagnoses"]) == 20
    for before, after in zip(recorded["diagnoses"], now["diagnoses"]):
        assert after == before, before["id"]
    assert now["metrics"] == recorded["metrics"]
    assert now["report"] == recorded["report"]


def test_the_demo_matches_the_recorded_run_with_the_hashing_encoder(tmp_path):
    _compare("hashing", tmp_path)


@pytest.mark.skipif(find_spec("sentence_transformers") is None, reason="needs the 'dense' extra")
def test_the_demo_matches_the_recorded_run_with_minilm(tmp_path):
    _compare("minilm", tmp_path)

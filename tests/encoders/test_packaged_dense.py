"""The packaged BAAI/bge-small-en-v1.5 (int8, CLS pooling; extra models, required under CI) as a
dense encoder: the right passage ranks first, its space is its own, and a store moves to it
through the index's build, verify and switch."""

from __future__ import annotations

import numpy as np
import pytest

from ragdx.build import build_encoder
from ragdx.cli import main
from ragdx.config import load_settings
from ragdx.encoders.onnx import OnnxEncoder, packaged_encoder
from ragdx.errors import ConfigError
from tests.conftest import EXAMPLE, require_models

BGE_PROMPT = "Represent this sentence for searching relevant passages: "
# (question, passages, the one that answers): each checked by hand
CASES = [
    ("How do I sort a list in Python?",
     ["A tuple is an immutable sequence.",
      "Use sorted(iterable) to get a new sorted list, or list.sort() to sort in place.",
      "The for statement iterates over the items of any sequence."], 1),
    ("How do I remove a file?",
     ["os.mkdir(path) creates a directory.", "open() returns a file object.",
      "os.remove(path) deletes the file at path."], 2),
    ("what is the capital of france",
     ["Paris is the capital and largest city of France.", "Berlin is the capital of Germany.",
      "France is a country in Western Europe."], 0),
]


@pytest.fixture(scope="module")
def bge() -> OnnxEncoder:
    require_models()
    return packaged_encoder("bge-small-en-v1.5", threads=1)


def test_the_passage_that_answers_ranks_first(bge: OnnxEncoder) -> None:
    # measured cosines of the answer: 0.798, 0.810, 0.801; the best other: 0.594, 0.652, 0.738
    for question, passages, answer in CASES:
        cosines = bge.encode(passages).vectors @ bge.encode([question], kind="query").vectors[0]
        assert int(np.argmax(cosines)) == answer


def test_cls_pooling_and_the_prompt_are_in_the_space(bge: OnnxEncoder) -> None:
    space = bge.space
    assert (space.model_id, space.dim, space.pooling, space.max_tokens, space.query_prefix) == \
        ("BAAI/bge-small-en-v1.5", 384, "cls", 512, BGE_PROMPT)
    vectors = bge.encode(["one", "two words"]).vectors
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    # one text per pass: a vector is the text's own, whatever else is encoded with it
    assert np.array_equal(vectors[1], bge.encode(["two words"]).vectors[0])
    # the same passage with mean pooling is another vector, of another space
    mean = OnnxEncoder("BAAI/bge-small-en-v1.5", model_path=bge.model_path, vocab_path=bge.vocab_path,
                       pooling="mean", max_tokens=512, query_prefix=BGE_PROMPT, threads=1)
    assert mean.space.id != space.id and float(mean.encode(["one"]).vectors[0] @ vectors[0]) < 0.99


def test_the_settings_name_the_packaged_model() -> None:
    dense = load_settings(overrides=["retrieval.dense.model=bge-small-en-v1.5"]).retrieval.dense
    with pytest.raises(ConfigError, match="is a packaged int8 ONNX model: set retrieval.dense.backend = 'onnx'"):
        build_encoder(dense)
    with pytest.raises(ConfigError, match="pooling must be one of mean, cls, not 'max'"):
        OnnxEncoder(pooling="max")


def test_a_store_moves_to_bge_through_build_verify_and_switch(tmp_path, capsys) -> None:
    require_models()
    store = str(tmp_path / "s.db")
    bge = ["--set", "retrieval.dense.backend=onnx", "--set", "retrieval.dense.model=bge-small-en-v1.5"]
    lexical = ["--set", "retrieval.dense.backend=onnx"]
    assert main(["ingest", "--store", store, str(EXAMPLE / "manifest.jsonl"), *lexical]) == 0
    capsys.readouterr()
    assert main(["index", "build", "--store", store, *bge]) == 0
    space = capsys.readouterr().out.split("space ", 1)[1].split(":", 1)[0]
    assert main(["index", "switch", "--store", store, "--space", space]) == 2  # not verified yet
    assert main(["index", "verify", "--store", store, *bge]) == 0
    assert main(["index", "switch", "--store", store, "--space", space]) == 0
    capsys.readouterr()
    assert main(["index", "status", "--store", store]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("e_")]
    states = {row[1]: row[3] for row in rows}
    assert states == {"BAAI/bge-small-en-v1.5": "active", "all-MiniLM-L6-v2-int8": "retired"}
    # the same vocabulary as all-MiniLM-L6-v2's: the chunks fit and nothing is re-chunked
    assert main(["ingest", "--store", store, str(EXAMPLE / "manifest.jsonl"), *bge]) == 0
    assert "0 re-chunked, 15 unchanged" in capsys.readouterr().out

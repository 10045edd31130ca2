"""Embedding chunks for the dense channel, never re-encoding an input whose text and space are
unchanged (vectors are reused by the hash of their exact input text within the same space), and
their statements for the sentence reranker and the extractive generator (:func:`fill_statements`)."""

from __future__ import annotations

import hashlib
import time
from contextlib import nullcontext
from dataclasses import astuple, dataclass
from typing import Sequence

import numpy as np

from ragdx.progress import Progress
from ragdx.protocols import Encoder, StatementVectorStore, WritableStore
from ragdx.text import statements
from ragdx.types import Chunk, EmbeddingSpace

VectorRow = tuple[str, str, bytes, "int | None"]  # chunk id, input hash, float32 bytes, window end


def passage_input(chunk: Chunk, with_prefix: bool) -> tuple[str, int]:
    """The text the encoder reads for a chunk, and where the chunk's own text starts in it."""
    if with_prefix and chunk.prefix:
        return f"{chunk.prefix}\n{chunk.text}", len(chunk.prefix) + 1
    return chunk.text, 0


def chunk_statements(chunk: Chunk) -> list[str]:
    """What the sentence reranker reads of a chunk, one vector each: its statements
    (:func:`ragdx.text.statements`), or its whole text when it states none (a heading)."""
    return statements(chunk.text) or [chunk.text]


def statements_hash(texts: Sequence[str]) -> str:
    """The hash a chunk's statement vectors are stored under: of the statements' texts, so
    vectors stored by a ragdx that split the chunk otherwise are never read as these."""
    return hashlib.sha1("\x1f".join(texts).encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class EmbedStats:
    """What one embedding step did: ``encoded`` inputs, ``reused`` ones (stored in the space, or
    repeated), how many the encoder's window ``truncated``, in ``seconds``; ``statements`` the
    same figures of the chunks' statement vectors (:func:`fill_statements`), when written."""

    chunks: int
    encoded: int
    reused: int
    truncated: int
    seconds: float
    statements: "EmbedStats | None" = None


class Embedder:
    """Computes the vectors of chunks in one encoder's space.

    Args:
        encoder: the encoder; its space is where the vectors live.
        with_prefix: encode each chunk's retrieval prefix (title, headings) before its text.
        backend: the backend's name, recorded with the space.
        statements: also compute each chunk's statement vectors, where the store keeps them
            (:func:`fill_statements`).
    """

    def __init__(self, encoder: Encoder, *, with_prefix: bool = True, backend: str = "",
                 statements: bool = True) -> None:
        self.encoder = encoder
        self.with_prefix = with_prefix
        self.statements = statements
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

    def statement_rows(self, store: StatementVectorStore,
                       chunks: Sequence[Chunk]) -> tuple[list[tuple[str, str, bytes]], EmbedStats]:
        """Each chunk's statement vectors (:func:`chunk_statements`, encoded as passages without the
        prefix, as the sentence reranker encodes them): ``(chunk_id, statements hash, float32
        bytes of every statement in order)``. A chunk whose statements some stored chunk of the
        space has (another version's) reuses its vectors; the rest are encoded, each distinct
        statement once."""
        started = time.perf_counter()
        parts = [chunk_statements(c) for c in chunks]
        hashes = [statements_hash(part) for part in parts]
        stored = store.statement_vectors_by_hash(self.space.id, sorted(set(hashes)))
        texts = list(dict.fromkeys(t for part, h in zip(parts, hashes) if h not in stored for t in part))
        known: dict[str, bytes] = {}
        truncated = 0
        for i in range(0, len(texts), self.batch):
            encoding = self.encoder.encode(texts[i:i + self.batch], kind="passage")
            vectors = np.ascontiguousarray(encoding.vectors, dtype=np.float32)
            known.update(zip(texts[i:i + self.batch], (v.tobytes() for v in vectors)))
            truncated += sum(end is not None for end in encoding.window_ends)
        rows = [(c.id, h, stored[h] if h in stored else b"".join(known[t] for t in part))
                for c, part, h in zip(chunks, parts, hashes)]
        said = sum(map(len, parts))
        return rows, EmbedStats(len(chunks), len(texts), said - len(texts), truncated, time.perf_counter() - started)


def fill_statements(store: WritableStore, embedder: Embedder, batch: int = 2048) -> EmbedStats | None:
    """Write the statement vectors of every searchable chunk that has none in the embedder's
    space, ``batch`` chunks a transaction (a killed fill keeps the batches written; the rest are
    encoded when a question reads them, and the next fill writes them).

    Returns:
        What was encoded; None when the store keeps no statement vectors (a custom store without
        :class:`~ragdx.protocols.StatementVectorStore`) or the embedder computes none.
    """
    if not embedder.statements or not isinstance(store, StatementVectorStore):
        return None
    space = embedder.space.id
    todo = store.chunks_without_statement_vectors(space)
    totals = EmbedStats(0, 0, 0, 0, 0.0)
    with Progress("statement vectors", len(todo), unit="chunks") if todo else nullcontext() as progress:
        for i in range(0, len(todo), batch):
            rows, stats = embedder.statement_rows(store, todo[i:i + batch])
            with store.transaction():
                store.write_statement_vectors(space, rows)
            totals = EmbedStats(*(a + b for a, b in zip(astuple(totals)[:5], astuple(stats)[:5])))
            progress.advance(len(rows), f"{totals.encoded:,} statements encoded")
    return totals

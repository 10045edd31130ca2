"""A small, deterministic, dependency-free encoder for tests (ragdx's and users' own).

:class:`HashingEncoder` maps words to signed hashed features (the hashing trick: Weinberger
et al., "Feature Hashing for Large Scale Multitask Learning", ICML 2009). It is no semantic
model, but it is a real :class:`~ragdx.protocols.Encoder`: it has an embedding space, an input
window that truncates long texts, and token offsets, so every dense code path can be tested
in milliseconds.
"""

from __future__ import annotations

import hashlib
import re
from typing import Sequence

import numpy as np

from ragdx.protocols import TextKind
from ragdx.types import EmbeddingSpace, Encoding

_TOKEN = re.compile(r"\w+|[^\w\s]")


class HashingEncoder:
    """Signed feature hashing of lower-cased words and punctuation marks.

    Args:
        dim: the vector dimension.
        max_tokens: the input window, counting two special tokens as BERT-style encoders do.
        seed: a salt; encoders with other seeds are other spaces.
    """

    def __init__(self, dim: int = 64, max_tokens: int = 256, seed: int = 0,
                 query_prefix: str = "", passage_prefix: str = "") -> None:
        self.dim, self.max_tokens, self.seed = dim, max_tokens, seed
        self.query_prefix, self.passage_prefix = query_prefix, passage_prefix
        self.calls = 0  # texts encoded so far (tests check that unchanged content is not re-encoded)

    @property
    def space(self) -> EmbeddingSpace:
        return EmbeddingSpace(f"ragdx-hashing-{self.dim}", f"seed{self.seed}", self.dim, True,
                              self.query_prefix, self.passage_prefix, self.max_tokens, "sum")

    @property
    def name(self) -> str:
        return f"regex:hashing-{self.dim}"

    def count(self, text: str) -> int:
        return len(_TOKEN.findall(text))

    def _feature(self, token: str) -> tuple[int, float]:
        digest = hashlib.blake2b(f"{self.seed}:{token}".encode(), digest_size=8).digest()
        value = int.from_bytes(digest, "little")
        return value % self.dim, 1.0 if value >> 63 else -1.0

    def encode(self, texts: Sequence[str], *, kind: TextKind = "passage") -> Encoding:
        prefix = self.query_prefix if kind == "query" else self.passage_prefix
        readable = self.max_tokens - 2
        vectors = np.zeros((len(texts), self.dim), dtype=np.float32)
        ends: list[int | None] = []
        for i, text in enumerate(texts):
            tokens = list(_TOKEN.finditer(prefix + text))
            ends.append(max(0, tokens[readable - 1].end() - len(prefix)) if len(tokens) > readable else None)
            for match in tokens[:readable]:
                j, sign = self._feature(match.group().lower())
                vectors[i, j] += sign
            norm = np.linalg.norm(vectors[i])
            if norm > 0:
                vectors[i] /= norm
        self.calls += len(texts)
        return Encoding(self.space, vectors, tuple(ends))

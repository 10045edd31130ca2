"""The interfaces of ragdx's pluggable parts, as structural protocols (no base classes).

Anything with these methods works: ragdx's own backends, a user's, or a fake from
:mod:`ragdx.testing`. This module imports only :mod:`ragdx.types`.
"""

from __future__ import annotations

from typing import Literal, Protocol, Sequence, runtime_checkable

from ragdx.types import EmbeddingSpace, Encoding

__all__ = ["Encoder", "TextKind"]

TextKind = Literal["query", "passage"]


@runtime_checkable
class Encoder(Protocol):
    """Turns texts into vectors of one :class:`~ragdx.types.EmbeddingSpace`.

    An encoder is also a token counter (``name`` and ``count``) in its own tokenizer's tokens,
    so the chunker can respect the encoder's input window.
    """

    @property
    def space(self) -> EmbeddingSpace: ...

    @property
    def name(self) -> str: ...

    def count(self, text: str) -> int:
        """Tokens of ``text`` in the encoder's tokenizer, without special tokens."""
        ...

    def encode(self, texts: Sequence[str], *, kind: TextKind = "passage") -> Encoding:
        """Encode texts (the space's query or passage prefix is added here)."""
        ...

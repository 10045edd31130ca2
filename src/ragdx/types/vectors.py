"""Vectors and the index they make: an embedding space's identity, encoded texts, and an index
version's settings and state.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import numpy as np

from ragdx.types.choices import ChoiceEnum


@dataclass(frozen=True, slots=True)
class VectorBatch:
    """A batch of one space's stored vectors, in row order: each row's chunk row id, its
    ``(doc_id, version)``, whether the chunk duplicates another, and its float32 bytes."""

    rowids: tuple[int, ...]
    docs: tuple[tuple[str, str], ...]
    duplicate: tuple[bool, ...]
    vectors: tuple[bytes, ...]

    def __post_init__(self) -> None:
        sizes = {len(self.rowids), len(self.docs), len(self.duplicate), len(self.vectors)}
        if len(sizes) != 1:
            raise ValueError(f"VectorBatch: rowids, docs, duplicate and vectors differ in length "
                             f"({len(self.rowids)}, {len(self.docs)}, {len(self.duplicate)}, {len(self.vectors)})")

    def __len__(self) -> int:
        return len(self.rowids)


@dataclass(frozen=True, slots=True)
class EmbeddingSpace:
    """The identity of a vector space. Vectors from two spaces are never compared.

    Two encoders share a space only when every identity field is equal: same model and
    weights (a quantized copy has other weights, so another space), same dimension,
    normalisation, prompt format and input window. Equal dimensions alone mean nothing.

    Args:
        model_id: the model's name or path, as the user gave it.
        weights_hash: a hash of the weight files' bytes.
        dim: the vector dimension.
        normalized: whether vectors are L2-normalised (so a dot product is the cosine).
        query_prefix: text put before every query (a model's query prompt).
        passage_prefix: text put before every passage.
        max_tokens: the encoder's input window in tokens; text beyond it is not read.
        pooling: how token vectors become one vector (``mean``, ``cls``).
    """

    model_id: str
    weights_hash: str
    dim: int
    normalized: bool = True
    query_prefix: str = ""
    passage_prefix: str = ""
    max_tokens: int = 256
    pooling: str = "mean"

    @property
    def id(self) -> str:
        """A short stable hash of every identity field."""
        fields = {k: getattr(self, k) for k in self.__slots__}
        return "e_" + hashlib.sha1(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:12]


@dataclass(frozen=True, slots=True, eq=False)
class Encoding:
    """An encoder's output for a batch of texts.

    ``window_ends[i]`` is the character offset in ``texts[i]`` where the encoder stopped
    reading because its input window was full, or ``None`` when it read the whole text.
    """

    space: EmbeddingSpace
    vectors: np.ndarray
    window_ends: tuple[int | None, ...]


class SpaceState(ChoiceEnum):
    """Where an embedding space is in its life: built beside the live one, verified, switched to
    (active), or replaced (retired, kept for a rollback)."""

    BUILDING = "building"
    BUILT = "built"
    VERIFIED = "verified"
    ACTIVE = "active"
    RETIRED = "retired"


@dataclass(frozen=True, slots=True)
class KeywordSettings:
    """The keyword index's settings an index version fixes: FTS5's tokenizer, ``k1`` and ``b``
    (recorded: FTS5's ``bm25()`` fixes them), and how many superseded or expired versions of each
    document stay indexed, newest first (None: all)."""

    tokenizer: str
    k1: float
    b: float
    retain_superseded: int | None


@dataclass(frozen=True, slots=True)
class IndexSettings:
    """What defines an index version (docs/formats.md, "Index versions"); two versions with equal
    settings are the same version.

    Attributes:
        chunker: the chunker config every chunk was cut with, as ``ChunkerConfig.to_json()``
            writes it (None: as each ingest chunked, the store's first index).
        parsers: ``(format, parser id)`` of each format the store held, sorted (None: as each
            ingest parsed).
        keyword: the keyword index's settings.
    """

    chunker: str | None
    parsers: tuple[tuple[str, str], ...] | None
    keyword: KeywordSettings

    def parser(self, fmt: str) -> str | None:
        """The parser this version parses ``fmt`` with (None: as ingested, or a format it never held)."""
        return dict(self.parsers or ()).get(fmt)

    def to_json(self) -> str:
        """The stored form (``index_versions.body``): one JSON object, keys sorted."""
        return json.dumps({"chunker": None if self.chunker is None else json.loads(self.chunker),
                           "parsers": None if self.parsers is None else dict(self.parsers),
                           "keyword": {"tokenizer": self.keyword.tokenizer, "k1": self.keyword.k1,
                                       "b": self.keyword.b, "retain_superseded": self.keyword.retain_superseded}},
                          sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "IndexSettings":
        body = json.loads(text)
        chunker, parsers, keyword = body["chunker"], body["parsers"], body["keyword"]
        return cls(None if chunker is None else json.dumps(chunker, sort_keys=True),
                   None if parsers is None else tuple(sorted(parsers.items())),
                   KeywordSettings(keyword["tokenizer"], keyword["k1"], keyword["b"], keyword["retain_superseded"]))


@dataclass(frozen=True, slots=True)
class IndexVersion:
    """One version of the chunk and keyword index: the live one (``active``), one built beside it
    (``building``, ``built``, ``verified``), or the one it replaced (``retired``, kept for a
    rollback); ``versions`` and ``chunks`` count what it holds (0 when read without counts)."""

    id: str
    settings: IndexSettings
    state: SpaceState
    versions: int
    chunks: int
    created_at: str
    updated_at: str

    @property
    def retain_superseded(self) -> int | None:
        return self.settings.keyword.retain_superseded

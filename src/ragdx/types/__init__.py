"""Frozen artifacts shared by every layer of ragdx, one module per layer: the corpus
(:mod:`ragdx.types.corpus`), vectors and the index (:mod:`~ragdx.types.vectors`), what the
stages pass on (:mod:`~ragdx.types.stages`), answers and verdicts (:mod:`~ragdx.types.answers`),
the versions a question names (:mod:`~ragdx.types.versions`) and the result caches
(:mod:`~ragdx.types.cache`), each re-exported here.

This package imports nothing else of ragdx but :mod:`ragdx.errors`. Identity is stable: a
document is its ``doc_id`` + ``version`` + ``content_hash``; evidence is a source span
(``doc_id``, ``version``, ``start``, ``end``) into the document's parsed text, never a chunk
number, so labels survive re-chunking.
"""

from __future__ import annotations

from ragdx.types.choices import ChoiceEnum
from ragdx.types.corpus import (
    Alternative, Block, BlockKind, Chunk, ChunkKind, DocStatus, Document, LogEntry, ParsedDocument, Principal,
    Query, Section, Span, StoredVersion,
)
from ragdx.types.vectors import (
    EmbeddingSpace, Encoding, IndexSettings, IndexVersion, KeywordSettings, SpaceState, VectorBatch,
)
from ragdx.types.stages import (
    Candidate, Conflict, Context, ContextUnit, DropCode, Dropped, Flagged, Hop, InstructionKind, Marker,
    MarkerKind, Provenance, Ranked, Rewrite, RewriteDiff, RewriteKind, Rewritten, Slot, SlotState, StageKind,
)
from ragdx.types.answers import Answer, Claim, ClaimCheck, Usage, Verdict, Verification
from ragdx.types.versions import VersionFilter
from ragdx.types.cache import CacheEntry, CacheKind, Dependencies

__all__ = [
    "ChoiceEnum", "DocStatus", "BlockKind", "ChunkKind", "Span", "Principal", "Document",
    "Block", "ParsedDocument", "Section", "Chunk", "Alternative", "Query", "VectorBatch", "EmbeddingSpace",
    "Encoding", "StageKind", "Provenance", "Candidate", "DropCode", "Dropped", "Ranked", "Conflict", "InstructionKind",
    "Flagged", "ContextUnit", "Context", "Claim", "Usage", "Answer", "Verdict", "ClaimCheck", "Verification",
    "StoredVersion", "LogEntry", "SpaceState", "VersionFilter", "RewriteKind", "MarkerKind", "Marker",
    "RewriteDiff", "Rewrite", "SlotState", "Slot", "Hop", "Rewritten", "CacheKind", "Dependencies", "CacheEntry",
    "IndexSettings", "IndexVersion", "KeywordSettings",
]

"""ragdx: find the first stage where a RAG system loses the evidence it needs to answer.

The public API is what ``__all__`` lists; everything else is internal.
"""

from ragdx.errors import ConfigError, InputError, MissingExtraError, RagdxError, StoreError
from ragdx.types import (
    Alternative, Block, BlockKind, Chunk, ChunkKind, DocStatus, Document, ParsedDocument, Principal,
    Query, Section, Span,
)
from ragdx.ingest.chunk import ChunkerConfig, RegexTokenCounter, StructureChunker, TokenCounter
from ragdx.ingest.ingestor import IngestReport, Ingestor, delete_documents
from ragdx.ingest.quotes import Coverage, coverage, find_quote
from ragdx.queryset import load_queries
from ragdx.store.sqlite import SQLiteStore
from ragdx.diagnosis.evidence import EvidenceResolver, QueryEvidence, ResolvedAlternative

__version__ = "0.1.0"

__all__ = [
    "__version__",
    # errors
    "RagdxError", "InputError", "ConfigError", "MissingExtraError", "StoreError",
    # artifacts
    "Alternative", "Block", "BlockKind", "Chunk", "ChunkKind", "DocStatus", "Document",
    "ParsedDocument", "Principal", "Query", "Section", "Span",
    # ingest
    "ChunkerConfig", "RegexTokenCounter", "StructureChunker", "TokenCounter", "Ingestor",
    "IngestReport", "delete_documents", "Coverage", "coverage", "find_quote",
    # store
    "SQLiteStore",
    # queries and evidence
    "load_queries", "EvidenceResolver", "QueryEvidence", "ResolvedAlternative",
]

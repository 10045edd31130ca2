"""ragdx: find the first stage where a RAG system loses the evidence it needs to answer.

The public API is what ``__all__`` lists (documented in docs/api.md); everything else is
internal.
"""

from ragdx.errors import (
    BrowserError, ChatError, ConfigError, InputError, MissingExtraError, RagdxError, SpaceMismatchError,
    StoreError,
)
from ragdx.types import (
    Alternative, Answer, Block, BlockKind, CacheEntry, CacheKind, Candidate, Chunk, ChunkKind, Claim, ClaimCheck, Conflict, Context,
    ContextUnit, Dependencies, DocStatus, Document, DropCode, Dropped, EmbeddingSpace, Encoding, Flagged, InstructionKind, ParsedDocument,
    Principal, Provenance,
    Query, Ranked, Section, Span, SpaceState, StageKind, StoredVersion, Usage, Verdict, Verification,
    VersionFilter, RewriteKind, MarkerKind, Marker, RewriteDiff, Rewrite, SlotState, Slot, Hop, Rewritten,
)
from ragdx.protocols import (
    Assembler, Cache, DeepRetriever, Encoder, Fuser, Generator, Governor, QueryRewriter, Reranker, Retriever, Rewriter,
    Stage, Store, TokenCounter, Verifier,
)
from ragdx.config import Settings, load_settings
from ragdx.ingest.chunk import ChunkerConfig, RegexTokenCounter, StructureChunker
from ragdx.ingest.ingestor import Action, IngestAction, IngestReport, Ingestor, delete_documents
from ragdx.ingest.quotes import Coverage, CoverageStatus, coverage, find_quote
from ragdx.queryset import load_queries
from ragdx.store.sqlite import OpenMode, SQLiteStore
from ragdx.store.postgres import PostgresStore
from ragdx.stages.custom import FunctionRetriever
from ragdx.stages.rewrite import LlmRewriter, OfflineRewriter
from ragdx.stages.routed import RoutedRewrite
from ragdx.stages.multihop import MultiHop
from ragdx.pipeline import Pipeline, Trace
from ragdx.binding import (
    ChangedSpan, CitedSpan, EvidenceBinding, Recheck, RecheckStatus, SpanChange, bind_evidence, recheck,
)
from ragdx.build import build_encoder, build_ingestor, build_pipeline, default_stages, open_cache, open_store
from ragdx.caching import CachedPipeline, CacheStats
from ragdx.store.cache import SQLiteCache
from ragdx.diagnosis.evidence import EvidenceResolver, EvidenceStatus, QueryEvidence, ResolvedAlternative
from ragdx.diagnosis.records import Diagnosis, Loss, Outcome, StagePresence
from ragdx.diagnosis.locate import Diagnoser, TraceView
from ragdx.label import (
    DatasetFormat, EvalCase, EvalSet, Labeller, Proposal, ProposedGroup, build_labeller, read_eval_set,
)
from ragdx.evaluation.layered import Metric, Metrics
from ragdx.experiments.run import RunResult, run, run_pipeline
from ragdx.experiments.durable import DurableRun, Fault, inspect_run, run_durable
from ragdx.experiments.runstate import ItemState
from ragdx.experiments.ablate import AblationResult, Variant, ablate, ablate_pipelines
from ragdx.experiments.imported import ImportedRun, diagnose_imported
from ragdx.examples import example_dir

__version__ = "0.1.0"

__all__ = [
    "__version__",
    # errors
    "RagdxError", "InputError", "ConfigError", "MissingExtraError", "SpaceMismatchError", "StoreError",
    "ChatError", "BrowserError",
    # artifacts
    "Alternative", "Answer", "Block", "BlockKind", "CacheEntry", "CacheKind", "Candidate", "Chunk", "ChunkKind", "Claim", "ClaimCheck",
    "Conflict", "Context", "ContextUnit", "Dependencies", "DocStatus", "Document", "DropCode", "Dropped", "EmbeddingSpace", "Encoding",
    "Flagged", "InstructionKind",
    "ParsedDocument", "Principal", "Provenance", "Query", "Ranked", "Section", "Span", "SpaceState",
    "StageKind", "StoredVersion", "Usage", "Verdict", "Verification", "RewriteKind", "MarkerKind", "Marker",
    "RewriteDiff", "Rewrite", "SlotState", "Slot", "Hop", "Rewritten",
    # protocols
    "Store", "Cache", "Stage", "Rewriter", "QueryRewriter", "Retriever", "DeepRetriever", "Fuser", "Reranker", "Governor", "Assembler",
    "Generator", "Verifier", "Encoder", "TokenCounter",
    # settings
    "Settings", "load_settings",
    # ingest and store
    "ChunkerConfig", "RegexTokenCounter", "StructureChunker", "Ingestor", "IngestReport", "IngestAction",
    "Action", "delete_documents", "Coverage", "CoverageStatus", "coverage", "find_quote", "SQLiteStore",
    "OpenMode", "VersionFilter",
    "PostgresStore", "open_store",
    # pipeline
    "Pipeline", "Trace", "FunctionRetriever", "OfflineRewriter", "LlmRewriter", "RoutedRewrite", "MultiHop",
    "build_pipeline", "default_stages", "build_ingestor",
    "build_encoder",
    # answers bound to their evidence
    "bind_evidence", "recheck", "EvidenceBinding", "CitedSpan", "Recheck", "ChangedSpan", "SpanChange",
    "RecheckStatus",
    # result caches
    "CachedPipeline", "CacheStats", "SQLiteCache", "open_cache",
    # queries, evidence and diagnosis
    "load_queries", "EvidenceResolver", "EvidenceStatus", "QueryEvidence", "ResolvedAlternative",
    "Diagnoser", "Diagnosis", "Outcome", "Loss", "StagePresence", "TraceView",
    # labels from evaluation sets
    "read_eval_set", "EvalSet", "EvalCase", "DatasetFormat", "Labeller", "build_labeller", "Proposal", "ProposedGroup",
    # evaluation and experiments
    "Metric", "Metrics", "run", "run_pipeline", "RunResult", "ablate", "ablate_pipelines", "Variant",
    "AblationResult", "diagnose_imported", "ImportedRun", "example_dir",
    "run_durable", "DurableRun", "ItemState", "Fault", "inspect_run",
]

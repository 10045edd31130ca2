"""The interfaces of ragdx's pluggable parts, as structural protocols (no base classes).

Anything with these methods works: ragdx's own backends, a user's, or a fake from
:mod:`ragdx.testing`. This module imports only :mod:`ragdx.types`.

A stage is a small object with a ``name`` (how traces call it), a ``kind`` (a
:class:`~ragdx.types.StageKind`, which decides where it runs and what it is given) and one
typed ``run``. What each kind takes and returns (docs/pipeline.md, "Stages"):

| kind | protocol | ``run`` |
|---|---|---|
| rewrite | :class:`QueryRewriter` | ``(query, channels) -> Rewritten`` |
| retrieval | :class:`Retriever` | ``(query) -> Ranked`` |
| fusion | :class:`Fuser` | ``(lists) -> Ranked`` |
| rerank | :class:`Reranker` | ``(query, ranked) -> Ranked`` |
| governance | :class:`Governor` | ``(query, ranked) -> Ranked`` |
| context | :class:`Assembler` | ``(query, ranked) -> Context`` |
| generation | :class:`Generator` | ``(query, context) -> Answer`` |
| citation | :class:`Verifier` | ``(query, context, answer) -> Verification`` |
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ContextManager, Iterator, Literal, Mapping, Protocol, Sequence, runtime_checkable

from ragdx.types import (
    Answer, CacheEntry, CacheKind, Chunk, Context, Dependencies, DocStatus, Document, EmbeddingSpace, Encoding, IndexSettings,
    IndexVersion, LogEntry, ParsedDocument,
    Query, Ranked, Rewrite, Rewritten, Section, SpaceState, StageKind, StoredVersion, VectorBatch, Verification,
    VersionFilter,
)

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "Encoder", "PairScorer", "TextKind", "TokenCounter", "Store", "VectorSearchStore", "VectorRowStore", "VersionedIndexStore",
    "StatementVectorStore", "WritableStore", "IndexBuildStore",
    "Cache", "Stage", "Rewriter", "QueryRewriter", "Retriever", "DeepRetriever", "Fuser",
    "Reranker", "Governor", "Assembler", "Generator", "Verifier", "STAGE_PROTOCOLS",
]

TextKind = Literal["query", "passage"]


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens in a named tokenizer (a chunk's or a context's budget is in its tokens)."""

    @property
    def name(self) -> str: ...

    def count(self, text: str) -> int: ...


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


@runtime_checkable
class PairScorer(Protocol):
    """Scores (query, text) pairs read together (a cross-encoder), higher for more relevant.

    ``config`` names the model and its settings (recorded in traces and in the result cache's key:
    its files' hash belongs there); ``warm_up`` loads the model.
    """

    @property
    def config(self) -> Mapping[str, object]: ...

    def warm_up(self) -> None: ...

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        """One score per text, in the texts' order (a float array)."""
        ...


@runtime_checkable
class Store(Protocol):
    """What the stages and the diagnosis read of a store: document versions and their texts,
    chunks and sections, access, keyword and vector search, and the update log.

    :class:`~ragdx.store.sqlite.SQLiteStore` is one implementation. Every read is of committed
    state; ``index_version`` changes with every change a query could see (an edit, a deletion, an
    access change), so anything cached can be bound to it.
    """

    @property
    def index_version(self) -> int: ...

    @property
    def store_id(self) -> str | None:
        """A random id made with the store and never reused (a store rebuilt at the same path
        gets another); None for a store made before ids, until it is first opened for writing.
        An answer records it with the index version (:mod:`ragdx.binding`)."""
        ...

    @property
    def bm25_config(self) -> Mapping[str, Any]:
        """How the keyword index scores: its tokenizer, ``k1`` and ``b`` (recorded in traces)."""
        ...

    def version(self, doc_id: str, version: str) -> StoredVersion | None: ...

    def versions(self, doc_id: str | None = None) -> list[StoredVersion]: ...

    def version_labels(self) -> frozenset[str]:
        """The version labels the store holds, of any document and status (a question's whole
        number names a version only when one of them starts with it: ``VersionFilter.for_question``)."""
        ...

    def tombstone(self, doc_id: str) -> tuple[str, list[str]] | None:
        """When a deleted document was deleted, and its versions; None if it was not."""
        ...

    def texts(self, doc_id: str, version: str) -> tuple[str, str]:
        """A version's raw and parsed text."""
        ...

    def chunks(self, doc_id: str | None = None, version: str | None = None) -> list[Chunk]: ...

    def chunks_by_id(self, ids: list[str]) -> dict[str, Chunk]: ...

    def section(self, section_id: str) -> Section | None: ...

    def readable(self, groups: tuple[str, ...], doc_id: str, version: str) -> bool: ...

    def bm25(self, terms: Sequence[str], groups: tuple[str, ...], limit: int,
             weights: tuple[float, float] = (0.5, 1.0),
             versions: VersionFilter | None = None) -> list[tuple[Chunk, float]]:
        """The best ``limit`` chunks the groups may read, of the versions the filter allows (all
        when None), for any of ``terms`` (OR), by BM25, higher scores first."""
        ...

    def document_frequency(self, words: Sequence[str]) -> tuple[int, dict[str, int]]:
        """How many documents the store holds, and for each word how many of them have a chunk
        holding it (as the keyword index tokenizes it; a word it splits in several counts 0).
        Over every document, as BM25's statistics are: a number that weights words, never text."""
        ...

    def active_space(self) -> EmbeddingSpace | None: ...

    def vector_table(self, space_id: str) -> tuple[list[str], list[tuple[str, str]], list[bytes],
                                                   list[int | None]]:
        """One space's vectors: chunk ids, (doc_id, version) pairs, float32 bytes, window ends."""
        ...

    def acl_table(self) -> dict[tuple[str, str], frozenset[str]]: ...

    def window_end(self, space_id: str, chunk_id: str) -> int | None: ...

    def log_entries(self, since: int = 0) -> list[LogEntry]: ...


@runtime_checkable
class VectorRowStore(Protocol):
    """A store whose vectors can be read in batches and by row: the dense channel's bounded
    index (:class:`~ragdx.store.vectors.QuantizedIndex`) keeps int8 codes in memory and reads
    the float32 vectors of its candidates back to rescore them."""

    def vector_rows(self, space_id: str, doc_ids: Sequence[str] | None = None,
                    batch: int = 50_000) -> Iterator[VectorBatch]:
        """The space's vectors in batches, in row order (of ``doc_ids`` only, when given)."""
        ...

    def vector_count(self, space_id: str) -> int: ...

    def vectors_at(self, space_id: str, rowids: Sequence[int]) -> dict[int, tuple[str, str, str, bytes]]:
        """Row id -> (chunk id, doc_id, version, float32 bytes), for the rows still stored."""
        ...

    def version_statuses(self) -> dict[tuple[str, str], str]: ...

    def acl_table(self) -> dict[tuple[str, str], frozenset[str]]: ...

    def log_entries(self, since: int = 0) -> list[LogEntry]: ...

    @property
    def index_version(self) -> int: ...

    @property
    def in_write_transaction(self) -> bool:
        """Whether this connection is inside its own write transaction (reads see uncommitted writes)."""
        ...


@runtime_checkable
class VectorSearchStore(Protocol):
    """A store that searches its own vectors (the PostgreSQL store): the dense channel asks it
    instead of loading the space's vectors into memory."""

    def vector_search(self, space_id: str, vector: np.ndarray, groups: tuple[str, ...], k: int, *,
                      exact: bool = True, versions: VersionFilter | None = None) -> list[tuple[Chunk, float]]:
        """The ``k`` chunks the groups may read, of the versions the filter allows (all when
        None), with the highest dot product with ``vector``, best first, ties to the older
        chunk; ``exact`` False allows an approximate index."""
        ...

    def readable_many(self, groups: tuple[str, ...],
                      keys: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        """Which (doc_id, version) pairs the groups may read, in one look-up."""
        ...


@runtime_checkable
class StatementVectorStore(Protocol):
    """A store that keeps each chunk's statement vectors in a space, computed at ingest (the
    SQLite store): the sentence reranker and the extractive generator read them instead of
    encoding the statements at query time. A store without it (PostgreSQL) is read the same,
    and its statements are encoded when a question reads them."""

    def write_statement_vectors(self, space_id: str, rows: Sequence[tuple[str, str, bytes]]) -> None:
        """Store ``(chunk_id, statements_hash, float32 bytes of every statement)`` per chunk."""
        ...

    def statement_vectors(self, space_id: str, chunk_ids: Sequence[str]) -> dict[str, tuple[str, bytes]]:
        """Chunk id -> (statements hash, float32 bytes), for the chunks that have them."""
        ...

    def statement_vectors_by_hash(self, space_id: str, hashes: Sequence[str]) -> dict[str, bytes]:
        """Statements hash -> float32 bytes, for the hashes some chunk's vectors are stored under."""
        ...

    def chunks_without_statement_vectors(self, space_id: str) -> list[Chunk]: ...


@runtime_checkable
class VersionedIndexStore(Protocol):
    """A store whose index has versions built beside the live one (the SQLite store; docs/ingest.md,
    "Index versions"): an ingest chunks and parses as the live version does, and applies its
    retention. A store without it (PostgreSQL) re-chunks in place."""

    def live_index(self) -> IndexVersion:
        """The index version queries search."""
        ...

    def index_versions(self, counted: bool = True) -> list[IndexVersion]:
        """Every index version, oldest first (with what each holds, when ``counted``)."""
        ...

    def apply_retention(self, doc_ids: Sequence[str] | None = None) -> list[tuple[str, str]]:
        """Take out of the live index the superseded versions its retention does not keep."""
        ...


@runtime_checkable
class WritableStore(Store, Protocol):
    """The write side of a store: what ingest (:class:`~ragdx.ingest.ingestor.Ingestor`), embedding
    (:class:`~ragdx.ingest.embed.Embedder`) and the embedding-space commands
    (:mod:`ragdx.index.spaces`) need. Both of ragdx's stores have it (SQLite and PostgreSQL);
    every write happens inside :meth:`transaction`."""

    def transaction(self) -> ContextManager[None]:
        """One atomic write: everything inside commits together or not at all; nested calls join."""
        ...

    def insert_version(self, document: Document, raw_text: str, parsed: ParsedDocument,
                       sections: tuple[Section, ...], chunks: tuple[Chunk, ...], chunker_config: str) -> None:
        """Store a new document version with its text, access groups, sections and chunks."""
        ...

    def replace_chunks(self, document: Document, parsed: ParsedDocument, sections: tuple[Section, ...],
                       chunks: tuple[Chunk, ...], chunker_config: str) -> None:
        """Re-chunk a stored version in place (a new chunker configuration)."""
        ...

    def update_attributes(self, document: Document) -> list[str]:
        """Update a stored version's acl, status, title, path, metadata and updated_at; what changed."""
        ...

    def versions_of(self, doc_ids: Sequence[str]) -> dict[str, list[StoredVersion]]:
        """The stored versions of each of these documents, in ingestion order (an empty list for
        one with none), in one look-up: ingest reads a whole batch's versions at once."""
        ...

    def set_status(self, doc_id: str, version: str, status: DocStatus, reason: str) -> None: ...

    def delete_document(self, doc_id: str) -> list[str]:
        """Delete every version of a document, leaving a tombstone; the versions deleted."""
        ...

    def chunk_count(self, doc_id: str, version: str) -> int: ...

    def register_space(self, space: EmbeddingSpace, backend: str) -> None:
        """Record an embedding space (state ``building``) if it is new."""
        ...

    def spaces(self) -> list[tuple[EmbeddingSpace, str, SpaceState, int]]:
        """Every registered space: the space, its backend, its state and its vector count."""
        ...

    def space_state(self, space_id: str) -> SpaceState | None: ...

    def set_space_state(self, space_id: str, state: SpaceState, reason: str) -> None: ...

    def vectors_by_input(self, space_id: str, hashes: list[str]) -> dict[str, tuple[bytes, int | None]]:
        """Stored vectors of this space whose input text has these hashes (to skip re-encoding)."""
        ...

    def write_vectors(self, space_id: str, rows: list[tuple[str, str, bytes, int | None]]) -> None:
        """Store vectors: ``(chunk_id, input_hash, float32 bytes, window_end)`` per chunk."""
        ...

    def chunks_without_vectors(self, space_id: str) -> list[Chunk]: ...

    def fts_problems(self) -> list[str]:
        """The keyword index's own integrity check against the chunks."""
        ...

    def audit(self) -> tuple[list[str], list[str]]:
        """Audit the live index (``ragdx index verify --live``): problems, then notes."""
        ...


@runtime_checkable
class IndexBuildStore(WritableStore, VersionedIndexStore, Protocol):
    """A store in which an index version is built beside the live one, verified, switched to and
    rolled back (:mod:`ragdx.index.versions`; docs/ingest.md, "Index versions"): the SQLite and
    PostgreSQL stores.
    Every ``stage_*`` write holds its rows under the index version's id, apart from the live
    index, inside the caller's :meth:`transaction`."""

    def index_version_of(self, index_id: str, counted: bool = True) -> IndexVersion | None:
        """One index version (None: no such id)."""
        ...

    def register_index(self, settings: IndexSettings) -> str:
        """Record a new index version (state ``building``); its id."""
        ...

    def set_index_state(self, index_id: str, state: SpaceState, *, was: SpaceState | None = None) -> bool:
        """Set an index version's state (only if it is ``was``, when given); whether it was set."""
        ...

    def drop_index(self, index_id: str) -> bool:
        """Delete an index version that is not live, with all it holds; whether one was deleted."""
        ...

    def stage_version(self, index_id: str, doc_id: str, version: str, parsed: ParsedDocument,
                      sections: Sequence[Section], chunks: Sequence[Chunk], chunker_config: str) -> None:
        """Hold a version's parsed text, sections and chunks in an index version."""
        ...

    def stage_unindexed(self, index_id: str, doc_id: str, version: str) -> None:
        """Hold a version in an index version without chunks (its retention leaves it out)."""
        ...

    def stage_from_live(self, index_id: str, chunker_config: str, parsers: Sequence[tuple[str, str]],
                        versions: Sequence[tuple[str, str]]) -> int:
        """Copy the live chunks of versions a rebuild would make again; how many were copied."""
        ...

    def stage_vectors(self, index_id: str, space_id: str, rows: Sequence[tuple[str, str, bytes, int | None]]) -> None:
        """Hold vectors of an index version's chunks: ``(chunk_id, input_hash, bytes, window_end)``."""
        ...

    def staged_chunks(self, index_id: str, without_vector_in: str | None = None) -> list[Chunk]:
        """An index version's chunks that are not duplicates (those without a vector in a space)."""
        ...

    def unstaged_versions(self, index_id: str) -> list[StoredVersion]:
        """Stored versions an index version lacks."""
        ...

    def parse_configs(self, index_id: str | None = None) -> list[tuple[str, str, str, int]]:
        """How the live index's (or an index version's) versions were parsed and chunked:
        ``(chunker_config, format, parser, versions)``, most versions first."""
        ...

    def switch_index(self, index_id: str) -> str:
        """Make an index version live, in the caller's transaction; the id the old live index keeps."""
        ...

    def materialized(self, index_id: str) -> ContextManager[IndexBuildStore]:
        """A scratch store holding an index version as its live index (what verify checks),
        removed when the block ends."""
        ...

    def verify(self) -> list[str]:
        """The store's own invariants: its problems."""
        ...


@runtime_checkable
class Cache(Protocol):
    """Where a cached pipeline keeps results (:class:`~ragdx.store.cache.SQLiteCache`): entries
    under a kind and a key, each with what it depends on, valid at ``synced_version``.

    ``sync`` reads the store's update log since the last sync and drops every entry a change
    could alter; ``put`` keeps a result only when the cache and the store are still at the index
    version it was made at (docs/formats.md, "The result cache").
    """

    @property
    def synced_version(self) -> int: ...

    def sync(self, store: Store) -> int:
        """Drop the entries the store's changes since the last sync could alter; how many."""
        ...

    def get(self, kind: CacheKind, key: str) -> CacheEntry | None:
        """The entry (``payload``, ``made_at``, ``seconds``) under ``key``, or None."""
        ...

    def put(self, kind: CacheKind, key: str, payload: object, deps: Dependencies, *, question: str,
            groups: Sequence[str], made_at: int, seconds: float, store: Store) -> bool: ...

    def discard(self, kind: CacheKind, key: str) -> None: ...


@runtime_checkable
class Stage(Protocol):
    """What every stage has: a name for traces, a kind, and its settings as plain values."""

    @property
    def name(self) -> str: ...

    @property
    def kind(self) -> StageKind: ...


@runtime_checkable
class Rewriter(Protocol):
    """Rewrites a question into texts to search with (entities completed, sub-questions, expansions,
    a hypothetical passage), each with its :class:`~ragdx.types.RewriteDiff` against the original.
    The original is never replaced: the rewrite stage keeps it, and the answer is checked against it."""

    @property
    def name(self) -> str: ...

    def rewrite(self, query: Query) -> tuple[Rewrite, ...]: ...


@runtime_checkable
class QueryRewriter(Stage, Protocol):
    """The rewrite stage: the question (and the pipeline's retrieval channels, for a multi-hop
    loop to search) -> the texts retrieval searches with (and, for a multi-hop question, its
    evidence slots and hops). It also says how its output is used: how a channel
    searches a rewritten question, and what it adds to the answer to the original question."""

    def run(self, query: Query, channels: Sequence["Retriever"]) -> Rewritten: ...

    def search(self, channel: "Retriever", query: Query, rewritten: Rewritten) -> Ranked: ...

    def answer(self, answer: Answer, context: Context, rewritten: Rewritten) -> Answer: ...


@runtime_checkable
class Retriever(Stage, Protocol):
    """A retrieval channel: the question -> a ranked list of readable chunks."""

    def run(self, query: Query) -> Ranked: ...


@runtime_checkable
class DeepRetriever(Retriever, Protocol):
    """A channel that can search deeper: the diagnosis uses it to say how far down a missed
    chunk ranks."""

    @property
    def top_k(self) -> int: ...

    def deeper(self, top_k: int, exact: bool = False) -> Retriever:
        """The same channel returning ``top_k`` candidates; ``exact``: ranked by an exhaustive
        exact search even where the channel's own search is bounded or approximate."""
        ...


@runtime_checkable
class Fuser(Stage, Protocol):
    """Fusion: the channels' ranked lists -> one list."""

    def run(self, lists: Sequence[Ranked]) -> Ranked: ...


@runtime_checkable
class Reranker(Stage, Protocol):
    """Reranking: the question and a ranked list -> a shorter, reordered list."""

    def run(self, query: Query, ranked: Ranked) -> Ranked: ...


@runtime_checkable
class Governor(Stage, Protocol):
    """Governance: drops what the asker may not use (access, versions), with reasons."""

    def run(self, query: Query, ranked: Ranked) -> Ranked: ...


@runtime_checkable
class Assembler(Stage, Protocol):
    """Context assembly: the governed list -> the context, within a token budget."""

    @property
    def counter(self) -> TokenCounter: ...

    def run(self, query: Query, ranked: Ranked) -> Context: ...


@runtime_checkable
class Generator(Stage, Protocol):
    """Generation: the question and the context -> an answer with cited claims, or an abstention."""

    def run(self, query: Query, context: Context) -> Answer: ...


@runtime_checkable
class Verifier(Stage, Protocol):
    """Citation checking: each claim's verdict against the units it cites."""

    def run(self, query: Query, context: Context, answer: Answer) -> Verification: ...


STAGE_PROTOCOLS: dict[StageKind, type] = {
    StageKind.REWRITE: QueryRewriter, StageKind.RETRIEVAL: Retriever, StageKind.FUSION: Fuser, StageKind.RERANK: Reranker,
    StageKind.GOVERNANCE: Governor, StageKind.CONTEXT: Assembler, StageKind.GENERATION: Generator,
    StageKind.CITATION: Verifier,
}
"""The protocol a stage of each kind satisfies (the kinds a pipeline runs; ``source`` and
``parsing`` happen at ingest)."""

"""Frozen artifacts shared by every layer of ragdx.

This module imports nothing else of ragdx but :mod:`ragdx.errors`. Identity is stable: a
document is its ``doc_id`` + ``version`` + ``content_hash``; evidence is a source span
(``doc_id``, ``version``, ``start``, ``end``) into the document's parsed text, never a chunk
number, so labels survive re-chunking.
"""

from __future__ import annotations

import enum
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterable, Mapping

import numpy as np

from ragdx.errors import InputError

__all__ = [
    "ChoiceEnum", "DocStatus", "BlockKind", "ChunkKind", "Span", "Principal", "Document",
    "Block", "ParsedDocument", "Section", "Chunk", "Alternative", "Query", "VectorBatch", "EmbeddingSpace",
    "Encoding", "StageKind", "Provenance", "Candidate", "DropCode", "Dropped", "Ranked", "Conflict", "InstructionKind",
    "Flagged", "ContextUnit", "Context", "Claim", "Usage", "Answer", "Verdict", "ClaimCheck", "Verification",
    "StoredVersion", "LogEntry", "SpaceState", "VersionFilter", "RewriteKind", "MarkerKind", "Marker",
    "RewriteDiff", "Rewrite", "SlotState", "Slot", "Hop", "Rewritten", "CacheKind", "Dependencies", "CacheEntry",
]


class ChoiceEnum(str, enum.Enum):
    """A fixed set of string choices whose parser lists the valid values."""

    @classmethod
    def parse(cls, value: object, *, what: str | None = None) -> "ChoiceEnum":
        """Return the member whose value is ``value``.

        Raises:
            InputError: naming the bad value and every valid one.
        """
        for member in cls:
            if member.value == value:
                return member
        valid = ", ".join(repr(m.value) for m in cls)
        raise InputError(f"{what or cls.__name__} must be one of {valid}, not {value!r}")

    def __str__(self) -> str:
        return self.value

    def __eq__(self, other: object) -> bool:
        # A str enum compared with a misspelt string is silently False; a comparison
        # that can never hold is a bug in the caller, so it raises instead.
        if isinstance(other, str) and not isinstance(other, ChoiceEnum):
            if other not in type(self)._value2member_map_:
                valid = ", ".join(repr(m.value) for m in type(self))
                raise TypeError(
                    f"{type(self).__name__}.{self.name} compared with {other!r}, "
                    f"which is none of its values ({valid})"
                )
        return str.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = str.__hash__


class DocStatus(ChoiceEnum):
    """Whether a document version is the one in force."""

    CURRENT = "current"
    SUPERSEDED = "superseded"
    EXPIRED = "expired"


class BlockKind(ChoiceEnum):
    """The structural kind of a parsed block."""

    HEADING = "heading"
    TEXT = "text"
    LIST = "list"
    TABLE = "table"
    CODE = "code"


class ChunkKind(ChoiceEnum):
    """The kind of content an evidence unit (chunk) holds."""

    TEXT = "text"
    LIST = "list"
    TABLE = "table"
    CODE = "code"


@dataclass(frozen=True, slots=True)
class Span:
    """A half-open character range ``[start, end)`` in one document version's parsed text."""

    doc_id: str
    version: str
    start: int
    end: int

    def overlaps(self, other: "Span") -> bool:
        return (self.doc_id == other.doc_id and self.version == other.version
                and self.start < other.end and other.start < self.end)

    def contains(self, other: "Span") -> bool:
        return (self.doc_id == other.doc_id and self.version == other.version
                and self.start <= other.start and other.end <= self.end)

    def covered_by(self, spans: "Iterable[Span]") -> bool:
        """Whether these spans together cover this one with no gap (two adjacent chunks can)."""
        pieces = sorted((max(s.start, self.start), min(s.end, self.end)) for s in spans if s.overlaps(self))
        reach = self.start
        for start, end in pieces:
            if start > reach:
                return False
            reach = max(reach, end)
        return reach >= self.end


@dataclass(frozen=True, slots=True)
class Principal:
    """Who asks: a user and the access groups they belong to."""

    user: str = "anonymous"
    groups: tuple[str, ...] = ("public",)

    def may_read(self, acl: tuple[str, ...]) -> bool:
        return any(g in acl for g in self.groups)


@dataclass(frozen=True, slots=True)
class Document:
    """One version of one source document, as the store keeps it."""

    doc_id: str
    version: str
    content_hash: str
    path: str
    title: str = ""
    acl: tuple[str, ...] = ("public",)
    status: DocStatus = DocStatus.CURRENT
    updated_at: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    format: str = ""


@dataclass(frozen=True, slots=True)
class Block:
    """A structural block of parsed text: a heading, a paragraph, a list, a table, a code block.

    ``parts`` are the block's natural split points as absolute ``(start, end)`` ranges: list
    items, table rows, or code lines. For a table, ``header`` is the header row's range.
    """

    kind: BlockKind
    start: int
    end: int
    heading_path: tuple[str, ...] = ()
    level: int = 0
    parts: tuple[tuple[int, int], ...] = ()
    header: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class ParsedDocument:
    """A parser's output: the parsed text every span and quote points into, and its blocks.

    ``warnings`` name known failure modes the parser detected (a two-column page read out of
    order, a table whose header row was lost), so a later loss can be traced to parsing.
    """

    text: str
    blocks: tuple[Block, ...]
    title: str
    format: str
    parser: str
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Section:
    """A heading's section: the parent unit a chunk can be expanded to (small-to-big)."""

    id: str
    doc_id: str
    version: str
    start: int
    end: int
    heading_path: tuple[str, ...]
    level: int
    parent_id: str | None


@dataclass(frozen=True, slots=True)
class Chunk:
    """An evidence unit: an exact span of a document version's parsed text.

    ``text`` is always ``parsed_text[start:end]``. ``prefix`` is text added for retrieval only
    (the heading path, a table's header row); it is stored apart and never shown as the
    source's words. For a table row chunk, ``header`` is the span of the header row it carries.
    """

    id: str
    doc_id: str
    version: str
    start: int
    end: int
    text: str
    kind: ChunkKind
    heading_path: tuple[str, ...]
    section_id: str
    prefix: str = ""
    header: tuple[int, int] | None = None
    token_count: int = 0
    prev_id: str | None = None
    next_id: str | None = None
    duplicate_of: str | None = None
    over_limit: bool = False
    config_id: str = ""

    @property
    def span(self) -> Span:
        return Span(self.doc_id, self.version, self.start, self.end)


@dataclass(frozen=True, slots=True)
class Alternative:
    """One way to satisfy a required evidence group: a quote, an offset span, or an item id."""

    doc: str | None = None
    quote: str | None = None
    start: int | None = None
    end: int | None = None
    id: str | None = None
    version: str | None = None

    def describe(self) -> str:
        if self.id is not None:
            return f"id {self.id!r}"
        where = self.doc + (f"@{self.version}" if self.version else "")
        if self.quote is not None:
            return f"{where} quote {self.quote!r}"
        return f"{where} [{self.start}:{self.end}]"


@dataclass(frozen=True, slots=True)
class Query:
    """A question with its required evidence: an AND of groups, each an OR of alternatives."""

    id: str
    question: str
    principal: Principal = Principal()
    answerable: bool = True
    required: tuple[tuple[Alternative, ...], ...] = ()
    restricted_required: tuple[tuple[Alternative, ...], ...] = ()
    answer: str | None = None
    tags: tuple[str, ...] = ()


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


class StageKind(ChoiceEnum):
    """The kinds of stage of a RAG pipeline. Their order here is the one pipeline order that
    every layer derives from (docs/diagnosis.md): a pipeline's stages, the evidence funnel and
    the diagnosis all follow it."""

    SOURCE = "source"
    PARSING = "parsing"
    REWRITE = "rewrite"
    RETRIEVAL = "retrieval"
    FUSION = "fusion"
    RERANK = "rerank"
    GOVERNANCE = "governance"
    CONTEXT = "context"
    GENERATION = "generation"
    CITATION = "citation"

    @property
    def order(self) -> int:
        return list(StageKind).index(self)


class RewriteKind(ChoiceEnum):
    """What a rewrite of a question is: the entities completed from the corpus, a sub-question
    split off a compound question, a multi-query expansion, a hypothetical answer passage (HyDE:
    searched with, never evidence), or a multi-hop loop's sub-query."""

    ENTITY = "entity"
    SPLIT = "split"
    EXPANSION = "expansion"
    HYDE = "hyde"
    HOP = "hop"


class MarkerKind(ChoiceEnum):
    """Words that change what a question asks, which a rewrite must keep."""

    NEGATION = "negation"
    DATE = "date"
    NUMBER = "number"
    QUANTIFIER = "quantifier"


@dataclass(frozen=True, slots=True)
class Marker:
    """One negation, date, number or quantifier of a question, as written."""

    kind: MarkerKind
    text: str


@dataclass(frozen=True, slots=True)
class RewriteDiff:
    """What a rewrite changed against the original question: entities it added, sub-questions it
    split off, and the original's markers it kept or dropped."""

    entities_added: tuple[str, ...] = ()
    sub_questions: tuple[str, ...] = ()
    retained: tuple[Marker, ...] = ()
    dropped: tuple[Marker, ...] = ()

    @property
    def flags(self) -> tuple[str, ...]:
        """A dropped negation or date changes the question ("Can't I get a refund?" -> "refund
        process" no longer asks about eligibility): each is flagged, in words."""
        return tuple(f"dropped the {m.kind.value} {m.text!r}" for m in self.dropped
                     if m.kind in (MarkerKind.NEGATION, MarkerKind.DATE))


@dataclass(frozen=True, slots=True)
class Rewrite:
    """One text a question was rewritten into, for searching only: what it changed is ``diff``.
    A ``hyde`` rewrite is a hypothetical passage; no rewrite is ever evidence or context."""

    text: str
    kind: RewriteKind
    diff: RewriteDiff = RewriteDiff()

    @property
    def hypothetical(self) -> bool:
        return self.kind is RewriteKind.HYDE


class SlotState(ChoiceEnum):
    """Where an evidence slot of a multi-hop question stands."""

    KNOWN = "known"
    UNKNOWN = "unknown"
    NEEDS_PERSON = "needs a person"


@dataclass(frozen=True, slots=True)
class Slot:
    """One piece of evidence a multi-hop question needs: what to search for, the entity a filling
    chunk must name (``""``: its words must cover the query instead), and, once known, the chunk
    and the sentence that fill it."""

    name: str
    query: str
    state: SlotState = SlotState.UNKNOWN
    entity: str = ""
    chunk_id: str | None = None
    doc_id: str | None = None
    version: str | None = None
    value: str = ""
    note: str = ""


@dataclass(frozen=True, slots=True)
class Hop:
    """One round of the multi-hop loop: the slot it tried to fill, the sub-query it searched, the
    candidates it read, those verification rejected (with why), what it filled, and whether that
    was progress."""

    number: int
    slot: str
    query: str
    candidates: tuple[str, ...]
    rejected: tuple[str, ...]
    filled: str | None
    progress: bool
    reason: str
    tokens: int = 0
    seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class Rewritten:
    """The rewrite stage's output: the original question (always kept: generation and citation
    checking get it, never a rewrite), the rewrites retrieval searches with besides it, the route
    taken, and for a multi-hop question its evidence slots, every hop and why the loop stopped."""

    stage: str
    original: str
    rewrites: tuple[Rewrite, ...]
    route: str
    search_original: bool = True
    slots: tuple[Slot, ...] = ()
    hops: tuple[Hop, ...] = ()
    stopped: str = ""
    config: Mapping[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    kind: StageKind = StageKind.REWRITE

    @property
    def searches(self) -> tuple[str, ...]:
        """What retrieval searches for, each once, in order: the original, then every rewrite. A
        question that got no rewrite is searched as asked even when ``search_original`` is off:
        searching nothing would lose every group at retrieval for a setting's sake."""
        texts = ((self.original,) if self.search_original or not self.rewrites else ()) + tuple(
            r.text for r in self.rewrites)
        return tuple(dict.fromkeys(texts))

    def slots_in(self, state: SlotState) -> tuple[Slot, ...]:
        return tuple(s for s in self.slots if s.state is state)


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where a candidate was at one earlier stage: the stage's name, the rank and the score."""

    stage: str
    rank: int
    score: float


@dataclass(frozen=True, slots=True)
class Candidate:
    """One item of a stage's ranked list: an exact span, its rank (1-based) and score here, and
    its rank and score at every earlier stage that saw it (``history``, oldest first)."""

    chunk_id: str
    doc_id: str
    version: str
    start: int
    end: int
    rank: int
    score: float
    history: tuple[Provenance, ...] = ()

    @property
    def span(self) -> Span:
        return Span(self.doc_id, self.version, self.start, self.end)

    def at(self, stage: str) -> Provenance | None:
        """This candidate's rank and score at an earlier stage, if it was there."""
        return next((p for p in self.history if p.stage == stage), None)


class DropCode(ChoiceEnum):
    """Why a stage removed an item, as a code that code may act on; :attr:`Dropped.reason` keeps
    the words for people. ``other``: a reason no code names (an imported system's own words)."""

    CUT = "cut"                  # below a stage's cut: fusion.top_k, rerank.top_n, a channel's top_k
    NOT_SCORED = "not_scored"    # below rerank.depth: never scored
    BUDGET = "budget"            # cut by the context's token budget
    TRUNCATED = "truncated"      # kept in part by the token budget
    DUPLICATE = "duplicate"      # inside a unit already in the context
    ACL = "acl"                  # the principal may not read it
    SUPERSEDED = "superseded"    # a version no longer in force
    EXPIRED = "expired"          # a version past its end
    DELETED = "deleted"          # the document or version is gone
    WITHHELD = "withheld"        # the question is withheld: its best matches are unreadable
    OTHER = "other"

    @property
    def judged(self) -> bool:
        """A governance decision the diagnosis judges right or wrong (not a ranking cut)."""
        return self in (DropCode.ACL, DropCode.SUPERSEDED, DropCode.EXPIRED, DropCode.DELETED)

    @classmethod
    def of_reason(cls, reason: str) -> "DropCode":
        """The code of a reason in words that carries none (an imported trace, a custom stage):
        from the words it starts with, as ragdx's own stages and the common tools phrase them."""
        text = reason.strip().lower()
        for code, starts in _REASON_STARTS:
            if text.startswith(starts):
                return code
        return cls.OTHER


#: the words a reason without a code starts with, per code (DropCode.of_reason), first match wins
_REASON_STARTS: tuple[tuple[DropCode, tuple[str, ...]], ...] = (
    (DropCode.NOT_SCORED, ("not scored",)),
    (DropCode.TRUNCATED, ("truncated",)),
    (DropCode.BUDGET, ("cut by the token budget", "token budget", "budget")),
    (DropCode.DUPLICATE, ("duplicate",)),
    (DropCode.WITHHELD, ("withheld",)),
    (DropCode.ACL, ("filtered: acl", "acl", "unreadable", "permission", "forbidden", "access")),
    (DropCode.SUPERSEDED, ("superseded",)),
    (DropCode.EXPIRED, ("expired",)),
    (DropCode.DELETED, ("deleted",)),
    (DropCode.CUT, ("below", "fused rank", "cut", "top_k", "top_n")),
)


@dataclass(frozen=True, slots=True)
class Dropped:
    """An item a stage removed, with its rank when removed, the reason in words and its code
    (derived from the words when a stage gives none: :meth:`DropCode.of_reason`)."""

    chunk_id: str
    doc_id: str
    version: str
    start: int
    end: int
    reason: str
    rank: int | None = None
    code: DropCode | None = None

    def __post_init__(self) -> None:
        if self.code is None:
            object.__setattr__(self, "code", DropCode.of_reason(self.reason))

    @property
    def span(self) -> Span:
        return Span(self.doc_id, self.version, self.start, self.end)


@dataclass(frozen=True, slots=True)
class Ranked:
    """A ranking stage's output: kept items in rank order, dropped items with reasons, the
    stage's settings and how long it took."""

    stage: str
    kind: StageKind
    items: tuple[Candidate, ...]
    dropped: tuple[Dropped, ...] = ()
    config: Mapping[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class Conflict:
    """Two current sources that state different values for the same fact; both are kept."""

    units: tuple[str, str]
    statements: tuple[str, str]
    values: tuple[str, str]

    def describe(self) -> str:
        return (f"{self.units[0]} says {self.values[0]!r} ({self.statements[0]!r}) but {self.units[1]} "
                f"says {self.values[1]!r} ({self.statements[1]!r})")


class InstructionKind(ChoiceEnum):
    """Why a document's text reads like an instruction to the system (:mod:`ragdx.stages.injection`)."""

    ROLE = "role marker"                 # SYSTEM:, [INST], <|im_start|>, a forged <system> tag
    ANSWER_RULE = "answer rule"          # "answer every refund question with X", "when asked about X, say Y"
    ADDRESSED = "addressed to the assistant"  # "Note to the AI: ...", "you are now ...", "act as ..."
    OVERRIDE = "overrides the rules"     # "ignore previous instructions", "disregard the official policy"
    STEERING = "steers the output"       # "Say CANOE-YES", "always answer ...", "do not mention ..."


@dataclass(frozen=True, slots=True)
class Flagged:
    """A passage of a document holding instruction-like text: ``[start, end)`` of the parsed text
    (within a context unit: clipped to the unit), what the instruction is (``kind``) and the words
    that read as one (``match``, which may lie before the unit when the passage began there)."""

    FLAG: ClassVar[str] = "instruction-like text"  # on the unit that holds one (``ContextUnit.flags``)

    start: int
    end: int
    kind: InstructionKind
    match: str

    @property
    def reason(self) -> str:
        return f"{self.FLAG} ({self.kind.value}: {self.match!r})"


@dataclass(frozen=True, slots=True)
class ContextUnit:
    """One unit of evidence in the context: an exact span of one document version, marked with
    its source, version, location and whether the budget truncated it.

    ``header`` is a table's header row (its span and words) when the unit holds rows of that
    table: evidence that must travel with them. ``flags`` note what the assembler noticed, such
    as ``instruction-like text`` (documents are data: such text has no authority); ``flagged``
    are the passages of the unit holding that text, each with its reason: no statement of theirs
    is ever an answer or evidence.
    """

    id: str
    doc_id: str
    version: str
    start: int
    end: int
    text: str
    title: str
    heading_path: tuple[str, ...]
    chunk_ids: tuple[str, ...]
    rank: int
    tokens: int
    truncated: bool = False
    header: tuple[int, int] | None = None
    header_text: str = ""
    flags: tuple[str, ...] = ()
    flagged: tuple[Flagged, ...] = ()

    @property
    def span(self) -> Span:
        return Span(self.doc_id, self.version, self.start, self.end)


@dataclass(frozen=True, slots=True)
class Context:
    """The assembled context: units in order, what the budget or de-duplication cut (with
    ranks and reasons), conflicts flagged, and the token count in a named tokenizer."""

    stage: str
    units: tuple[ContextUnit, ...]
    dropped: tuple[Dropped, ...]
    budget_tokens: int
    tokens: int
    tokenizer: str
    conflicts: tuple[Conflict, ...] = ()
    config: Mapping[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    kind: StageKind = StageKind.CONTEXT

    def unit(self, unit_id: str) -> ContextUnit | None:
        return next((u for u in self.units if u.id == unit_id), None)


@dataclass(frozen=True, slots=True)
class Claim:
    """One statement of an answer and the context units it cites."""

    text: str
    citations: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Usage:
    """What generating cost: tokens, money, attempts and time."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    attempts: int = 1
    seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class Answer:
    """A generated answer: its text, claims with citations, whether it abstained and, if so,
    what is missing; the model and what it cost."""

    stage: str
    text: str
    claims: tuple[Claim, ...]
    abstained: bool
    missing: tuple[str, ...] = ()
    model: str = ""
    usage: Usage = Usage()
    config: Mapping[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    kind: StageKind = StageKind.GENERATION

    @property
    def citations(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for claim in self.claims:
            for c in claim.citations:
                seen.setdefault(c, None)
        return tuple(seen)


class Verdict(ChoiceEnum):
    """Whether a claim's cited evidence supports it."""

    SUPPORTED = "supported"
    UNSUPPORTED = "unsupported"
    UNCERTAIN = "uncertain"


@dataclass(frozen=True, slots=True)
class ClaimCheck:
    """The verdict on one claim, with the reason in words, the evidence it was judged on, and
    where in the cited units its support lies (spans of the parsed text; empty when the claim
    cites nothing that could be read)."""

    claim: Claim
    verdict: Verdict
    reason: str
    evidence: str = ""
    support: tuple[Span, ...] = ()


@dataclass(frozen=True, slots=True)
class Verification:
    """Every claim's verdict, and the checker that gave them."""

    stage: str
    checks: tuple[ClaimCheck, ...]
    checker: str
    config: Mapping[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    kind: StageKind = StageKind.CITATION

    @property
    def supported(self) -> bool:
        return bool(self.checks) and all(c.verdict is Verdict.SUPPORTED for c in self.checks)


@dataclass(frozen=True, slots=True)
class StoredVersion:
    """A document version as a store keeps it, with what produced its chunks."""

    document: Document
    seq: int
    parser: str
    parse_warnings: tuple[str, ...]
    chunker_config: str
    ingested_at: str


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One line of a store's update log."""

    seq: int
    at: str
    index_version: int
    op: str
    doc_id: str | None
    version: str | None
    detail: str


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


_VERSION_LABEL = r"v?(\d+(?:[.-]\d+)+)"
_VERSION_END = r"(?![\w]|[.-]\d)"
#: a version label in running text, with a possessive
_VERSION_WORD = re.compile(rf"(?<![\w.-]){_VERSION_LABEL}(?:['\u2019]s)?{_VERSION_END}")
#: a whole number standing alone or after a product's letters ("17", "v15", "PG15", "17's"): a
#: version only when a store's label has it as its leading part and the words around it say so
#: (:func:`_major_versions`)
_WHOLE = re.compile(r"(?<![\w.,-])([A-Za-z]{0,12})(\d+)(?!\w|[.,-]\d)((?:['\u2019]s)?)")
_LEADING = re.compile(r"(\d+)(?:[.-]|$)")
#: words after which a number counts something, not a version ("Table 17", "error 15")
_COUNTED = frozenset(
    "chapter chapters section sections table tables figure figures page pages step steps item items "
    "line lines example examples appendix part parts rule rules rfc iso port error errno code no number "
    "bit bits byte bytes level levels column columns row rows argument arguments parameter parameters "
    "option options limit top".split())
#: words before a number that make it a version ("version 15", "release 17")
_VERSION_CUES = frozenset({"version", "versions", "release", "releases", "major"})
#: words after a number that leave it a version ("15 and 17", "17 or later", "15 docs")
_VERSION_FOLLOWERS = frozenset({"and", "or", "to", "through", "vs", "versus", "onward", "onwards",
                                "later", "earlier", "newer", "older", "docs", "documentation", "manual",
                                "release", "series", "branch"})
#: words before a number that, with punctuation after it, make it a version ("After moving to 17,
#: ...", "Is it the same on 15?")
_VERSION_PLACES = frozenset({"on", "in", "to", "from", "into", "since", "before", "after", "until", "between",
                             "and", "or", "vs", "versus", "under", "with"})
#: the most words before and after the version in an opening clause ("After moving to 17, ...")
_CLAUSE_BEFORE, _CLAUSE_AFTER = 7, 2


def _major_versions(question: str, known: frozenset[str]) -> list[tuple[int, int, str]]:
    """The whole numbers of the question that name a version: the leading part of a label in
    ``known`` (``15`` of ``15`` or ``15.4``), preceded by a version word ("version 15"), written
    ``v15``, ``PG15`` or ``17's``, or after a product's name ("PostgreSQL 17"); or followed by a
    word such as "and" or "later" ("15 or later"); or after a word of place or change with
    punctuation or the end of the question after it ("After moving to 17, ..."; "the same on
    15?"). Never after a word that counts ("Table 17"); a number before another word ("15
    seconds") needs one of the first.
    Each as (start, end with a possessive, label)."""
    majors = {m.group(1) for m in map(_LEADING.match, known) if m}
    # a number every label starts with tells no version from another ("Python 3" of 3.9.2 and 3.11.2)
    majors = {n for n in majors if any(not _starts(label, n) for label in known)}
    out = []
    for m in _WHOLE.finditer(question):
        if m.group(2) not in majors:
            continue
        before = question[:m.start()].split()
        prev = before[-1].strip("(\"'\u2018\u201c") if before else ""
        if prev.lower() in _COUNTED:
            continue
        after = question[m.end():]
        follows = after.split(maxsplit=1)[0].lower() if after.strip() else ""
        stated = bool(m.group(1) or m.group(3)) or prev.lower() in _VERSION_CUES \
            or (prev[:1].isupper() and prev.isalpha() and len(before) > 1)
        placed = prev.lower() in _VERSION_PLACES and (not after.strip() or after.lstrip()[:1] in ",;:?.!)")
        if stated or placed or follows in _VERSION_FOLLOWERS:
            out.append((m.start(), m.end(), m.group(2)))
    return out


def _starts(label: str, named: str) -> bool:
    """Whether a version label is, or starts with, a label a question names ("3.9" names "3.9.2")."""
    return label == named or label.startswith(named + ".") or label.startswith(named + "-")


def _named_spans(question: str, known: frozenset[str]) -> list[tuple[int, int, str]]:
    """Each version label the question names, in order, as (start, end with a possessive, label);
    a value passed to a call ("round(2.5)", "connect(timeout=5.0)") or written in a quoted literal
    ("insert '2024-03-10 08:00:00+05'") names none."""
    spans = [(m.start(), m.end(), m.group(1)) for m in _VERSION_WORD.finditer(question)]
    spans += _major_versions(question, known) if known else []
    quoted = [m.span() for m in _LITERAL.finditer(question)
              if len(next(g for g in m.groups() if g is not None).split()) <= _LITERAL_WORDS]
    return sorted(span for span in spans if not _in_call(question, span[0])
                  and not any(a < span[0] < b for a, b in quoted))


#: a quoted literal: the asker's data ('2024-03-10', "v1.2", `3.11`, \u20182024-03-10\u2019, \u201c3.11\u201d), a
#: quote opening after no letter or digit and closing before none (the apostrophes of "I'm on 3.9,
#: it's ..." open none), with no clause punctuation inside ("the '90s ...; on 3.11 do the admins'
#: scripts" is none)
_LITERAL = re.compile("(?<![\\w])(?:" + "|".join(f"{o}([^{c}\\n;?!]*?){c}" for o, c in (
    ("'", "'"), ('"', '"'), ("`", "`"), ("\u2018", "\u2019"), ("\u201c", "\u201d"))) + ")(?![\\w])")
#: the most words a quoted literal holds (a longer "quote" is an apostrophe's stray match)
_LITERAL_WORDS = 6


def _in_call(text: str, at: int) -> bool:
    """Whether ``at`` falls inside a call's parentheses ("round(", "print(round(2.5), "), not
    inside a parenthesis of prose ("Python (3.11)")."""
    opened: list[bool] = []
    for i, ch in enumerate(text[:at]):
        if ch == "(":
            opened.append(i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_"))
        elif ch == ")" and opened:
            opened.pop()
    return any(opened)


@dataclass(frozen=True, slots=True)
class VersionFilter:
    """Which document versions a search may return: by default the current ones, and any version
    whose label the question names ("In SQLite 3.34.1, ..." names ``3.34.1``; "Python 3.9" names
    every label that starts with ``3.9.``; "the 2024-01 policy" names ``2024-01``; with the store's
    labels known, "On version 15, ..." or "After moving to 17, ..." names ``15`` or ``17`` and every
    ``15.x``). Versions are checked inside retrieval, as access is, and again by governance.

    Args:
        current_only: only versions in force (besides the named ones); False: every version.
        named: version labels (or their leading parts) the question names.
    """

    current_only: bool = True
    named: tuple[str, ...] = ()

    @classmethod
    def for_question(cls, question: str, *, current_only: bool = True,
                     known: Iterable[str] = ()) -> "VersionFilter":
        """The filter for a question. ``known``: the store's version labels; a whole number names a
        version only when one of them starts with it (:func:`_major_versions`); a dotted label
        ("3.11", "2024-01") names one whatever the store holds."""
        spans = _named_spans(question, frozenset(known))
        return cls(current_only, tuple(dict.fromkeys(label for _, _, label in spans)))

    @staticmethod
    def topic(question: str, known: Iterable[str] = ()) -> str:
        """The question without the version it names: what it asks, for reading sentences (the
        version chooses the documents, and a sentence that merely mentions a version, such as a
        changelog entry, answers nothing). An opening clause that names the version ("In Python
        3.11, ...", "After upgrading to SQLite 3.40, ...": at most seven words before the label and
        two after it) is dropped; elsewhere the version label alone is ("What does Python 3.9's
        gauss() take?": "What does Python gauss() take?"). ``known`` as for :meth:`for_question`.

        >>> VersionFilter.topic("After upgrading to Python 3.11, how can zip() raise an error?")
        'how can zip() raise an error?'
        >>> VersionFilter.topic("After moving to 17, how is a role granted?", known=["15", "17"])
        'how is a role granted?'
        """
        spans = _named_spans(question, frozenset(known))
        if not spans:
            return question  # names no version (:meth:`for_question`)
        start, end, _ = spans[0]
        comma = question.find(",", end)
        lead = question[:start]
        if comma >= 0 and not re.search(r"[,?]", lead) and "?" not in question[end:comma] \
                and len(lead.split()) <= _CLAUSE_BEFORE \
                and len(question[end:comma].split()) <= _CLAUSE_AFTER:
            return question[comma + 1:].lstrip()
        kept, at = [], 0
        for a, b, _ in spans:
            kept.append(question[at:a])
            at = b
        kept.append(question[at:])
        return " ".join(" ".join(kept).split()) or question

    def names(self, version: str) -> bool:
        """Whether the question names this version label."""
        return any(_starts(version, n) for n in self.named)

    def allows(self, version: str, status: DocStatus | str) -> bool:
        # a store's raw status may be any string (a damaged row): compared with the value, not the member
        return not self.current_only or status == DocStatus.CURRENT.value or self.names(version)


class CacheKind(ChoiceEnum):
    """What an entry holds: the ranked lists up to governance, or the whole trace with its binding."""

    RETRIEVAL = "retrieval"
    ANSWER = "answer"


@dataclass(frozen=True, slots=True)
class Dependencies:
    """What a cached result depends on (:mod:`ragdx.store.cache`, docs/formats.md "The result cache").

    Args:
        docs: the documents it read.
        terms: the question's terms as FTS5 indexes them (its keyword channels match on them).
        keyword: for a keyword channel whose list was full: its lowest score, its column weights
            (prefix, text), the question's phrases as FTS5 tokens, and each listed chunk's counts
            of those phrases per column with its length (:func:`ragdx.store.cache.listed_counts`): a chunk that
            scores below every listed chunk cannot enter the list.
        dense: per dense channel with a full list: (space id, lowest score, question vector).
        open: any new content invalidates it (a dense list that was not full, a channel of unknown kind).
        any_change: any change invalidates it (a withheld question).
    """

    docs: frozenset[str]
    terms: frozenset[str] = frozenset()
    keyword: tuple[float, tuple[float, float], tuple[str, ...], tuple[Any, ...]] | None = None
    dense: tuple[tuple[str, float, bytes], ...] = ()
    open: bool = False
    any_change: bool = False


@dataclass(frozen=True, slots=True)
class CacheEntry:
    """A cached result: its payload, the index version it was made at, and what making it took."""

    kind: CacheKind
    payload: Any
    made_at: int
    seconds: float

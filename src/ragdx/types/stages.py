"""What the pipeline's stages pass on: the stage kinds in pipeline order, a query's audited rewrite,
ranked candidates with why each was dropped, and the context units with their source, version and
flags.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping

from ragdx.types.choices import ChoiceEnum
from ragdx.types.corpus import Span


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
    OTHER_VERSION = "other_version"  # another version's copy of a page the question's version holds
    OTHER = "other"

    @property
    def judged(self) -> bool:
        """A governance decision the diagnosis judges right or wrong (not a ranking cut)."""
        return self in (DropCode.ACL, DropCode.SUPERSEDED, DropCode.EXPIRED, DropCode.DELETED,
                        DropCode.OTHER_VERSION)

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
    (DropCode.OTHER_VERSION, ("other version",)),
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

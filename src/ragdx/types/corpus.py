"""The corpus's artifacts: documents and their versions, parsed blocks and sections, chunks as exact
spans of a version's text, the principal who asks, and a query with its required evidence (an AND of
OR-groups of :class:`Alternative` spans).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from ragdx.types.choices import ChoiceEnum


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

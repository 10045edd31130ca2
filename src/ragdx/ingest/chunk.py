"""Structure-aware chunking: sections, paragraphs, list items, table rows and code lines.

Every chunk is an exact span of the parsed text (``text == parsed_text[start:end]``). Chunks
never cross a heading; a paragraph is kept whole when it fits and is split at sentences (then
words) when it does not; a code block is split only between lines; a table that does not fit
is split into row groups, each carrying its header row (the header's span on the chunk, and
its words in the retrieval-only ``prefix``); a code block that does not fit is split between lines
into pieces that each carry its first line the same way (a function's ``def`` line, a statement's
``CREATE TABLE``), when that line is short. Every chunk knows its parent section and its
neighbours, so a retrieved chunk can be expanded (small-to-big).

The packing is greedy, in reading order, in the manner of the structure-aware splitters of
LangChain (``RecursiveCharacterTextSplitter``) and LlamaIndex (``SentenceSplitter``), but with
token limits counted by a :class:`TokenCounter` and spans kept exact.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, field, replace

from ragdx.errors import ConfigError
from ragdx.protocols import TokenCounter
from ragdx.text import sentence_spans
from ragdx.types import Block, BlockKind, Chunk, ChunkKind, Document, ParsedDocument, Section

__all__ = ["TokenCounter", "RegexTokenCounter", "ChunkerConfig", "ChunkedDocument",
           "StructureChunker"]


class RegexTokenCounter:
    """Words and punctuation marks, the pre-tokenization of BERT-style tokenizers.

    It never counts more tokens than a WordPiece tokenizer would (word pieces split words
    further), so use the encoder's own tokenizer when the exact window matters.
    """

    name = "regex:words+punct"
    _TOKEN = re.compile(r"\w+|[^\w\s]")

    def count(self, text: str) -> int:
        return len(self._TOKEN.findall(text))


#: the chunking algorithm's version, part of every config id: a store chunked by an older
#: algorithm is re-chunked at its next ingest (vectors are reused where a chunk's text is unchanged).
#: 2: a code block that fits joins the text that introduces it.
#: 3: the pieces of a code block that does not fit carry its first line as their header.
ALGORITHM = 3
#: the largest share of ``max_tokens`` a code block's first line may take to be its pieces' header
CODE_HEADER_SHARE = 0.25


@dataclass(frozen=True, slots=True)
class ChunkerConfig:
    """How documents are cut into evidence units. Recorded with every chunk it produced.

    Args:
        max_tokens: the most tokens a chunk may hold (a single code line may exceed it; such a
            chunk is flagged ``over_limit``).
        overlap_tokens: how many tokens of whole sentences (or list items, code lines) of the
            previous chunk a chunk repeats, at most; 0 for none.
        tokenizer: the name of the token counter.
        heading_prefix: add the document title and heading path to each chunk's retrieval prefix.
    """

    max_tokens: int = 180
    overlap_tokens: int = 0
    tokenizer: str = RegexTokenCounter.name
    heading_prefix: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.max_tokens, int) or self.max_tokens < 8:
            raise ConfigError(f"chunking.max_tokens must be an integer >= 8, not {self.max_tokens!r}")
        if not isinstance(self.overlap_tokens, int) or not 0 <= self.overlap_tokens < self.max_tokens:
            raise ConfigError("chunking.overlap_tokens must be an integer from 0 to max_tokens - 1, "
                              f"not {self.overlap_tokens!r}")

    def to_json(self) -> str:
        """The configuration and the algorithm's version, as recorded with each chunked version."""
        return json.dumps(asdict(self) | {"algorithm": ALGORITHM}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "ChunkerConfig":
        """The config :meth:`to_json` recorded (its ``algorithm`` is not checked: compare
        ``to_json()`` with the text for that)."""
        return cls(**{k: v for k, v in json.loads(text).items() if k != "algorithm"})

    @property
    def id(self) -> str:
        """A short hash of :meth:`to_json`, recorded on every chunk it produced."""
        return "k_" + hashlib.sha1(self.to_json().encode()).hexdigest()[:12]


@dataclass(frozen=True, slots=True)
class ChunkedDocument:
    """The chunker's output for one document version."""

    sections: tuple[Section, ...]
    chunks: tuple[Chunk, ...]
    dropped: tuple[tuple[int, int, str], ...] = field(default=())  # (start, end, reason)


_WORD = re.compile(r"\S+")


@dataclass(slots=True)
class _Unit:
    start: int
    end: int
    tokens: int
    kind: str          # "heading", "text", "list", "code", "table"
    group: int         # units of one group (a paragraph, an item, a code block) stay together if they fit
    seed: bool = False  # repeated from the previous chunk as overlap


class StructureChunker:
    """Cuts a parsed document into sections and exact-span chunks.

    Args:
        config: the chunking settings (recorded on every chunk).
        counter: the token counter; it must be the one ``config.tokenizer`` names.
    """

    def __init__(self, config: ChunkerConfig | None = None, counter: TokenCounter | None = None) -> None:
        self.config = config or ChunkerConfig()
        self.counter = counter or RegexTokenCounter()
        if self.counter.name != self.config.tokenizer:
            raise ConfigError(f"chunking.tokenizer is {self.config.tokenizer!r} but the token counter "
                              f"given is {self.counter.name!r}")

    def run(self, document: Document, parsed: ParsedDocument) -> ChunkedDocument:
        """Chunk one document version.

        Args:
            document: the version being chunked (its id and version go on every span).
            parsed: its parsed text and blocks.

        Returns:
            The sections and chunks, in reading order.
        """
        sections, owner = self._sections(document, parsed)
        text = parsed.text
        spans: list[tuple[int, int, str, int | None, bool, Section]] = []  # start, end, kind, header, over, section
        group = 0
        run: list[_Unit] = []
        run_section: Section | None = None
        for block, section in zip(parsed.blocks, owner):
            if section is not run_section or block.kind is BlockKind.HEADING:
                spans += self._pack(run, run_section, text) if run_section else []
                run, run_section = [], section
            header = self._header(block, text)
            if header is not None and self._tokens(text, block.start, block.end) > self.config.max_tokens:
                spans += self._pack(run, run_section, text)
                run = []
                kind = "table" if block.kind is BlockKind.TABLE else "code"
                spans += self._rows(header, [p for p in block.parts if p != header and p[1] > p[0]], kind, text,
                                    section)
                continue
            for unit_group in self._units(block, text):
                group += 1
                run += [_Unit(s, e, self._tokens(text, s, e), kind, group) for s, e, kind in unit_group]
        if run_section is not None:
            spans += self._pack(run, run_section, text)
        return ChunkedDocument(tuple(sections), self._chunks(document, parsed, spans))

    # -- sections ---------------------------------------------------------------------------
    def _sections(self, document: Document, parsed: ParsedDocument) -> tuple[list[Section], list[Section]]:
        """Sections from the heading hierarchy, and each block's owning (innermost) section.

        A block belongs to the innermost open heading whose path prefixes the block's heading
        path (so a section closed by its parser, a definition list's term, say, ends there). A
        section spans its heading to the last block it or its subsections own.
        """
        blocks = parsed.blocks
        # (level, heading_path, start, parent index) per section; index 0 is the document
        heads: list[tuple[int, tuple[str, ...], int, int | None]] = [(0, (), 0, None)]
        ends = [blocks[-1].end if blocks else 0]
        owner_index, stack = [], [0]
        for block in blocks:
            if block.kind is BlockKind.HEADING:
                while len(stack) > 1 and heads[stack[-1]][0] >= block.level:
                    stack.pop()
                heads.append((block.level, block.heading_path, block.start, stack[-1]))
                ends.append(block.end)
                stack.append(len(heads) - 1)
            else:
                while len(stack) > 1 and block.heading_path[:len(heads[stack[-1]][1])] != heads[stack[-1]][1]:
                    stack.pop()
            owner_index.append(stack[-1])
            for i in stack[1:]:
                ends[i] = max(ends[i], block.end)
        sections: list[Section] = []
        for i, (level, path, start, parent) in enumerate(heads):
            sid = _id("s", document, start, ends[i], str(level))
            sections.append(Section(sid, document.doc_id, document.version, start, ends[i], path, level,
                                    sections[parent].id if parent is not None else None))
        return sections, [sections[i] for i in owner_index]

    # -- units ------------------------------------------------------------------------------
    def _tokens(self, text: str, start: int, end: int) -> int:
        return self.counter.count(text[start:end])

    def _units(self, block: Block, text: str) -> list[list[tuple[int, int, str]]]:
        """Split a block into groups of units, each unit at most max_tokens where splittable."""
        kind = block.kind.value
        if block.kind is BlockKind.HEADING:
            return [[(block.start, block.end, "heading")]]
        if block.kind is BlockKind.CODE:
            return [[(s, e, "code") for s, e in block.parts if e > s]]  # blank lines lie between
        if block.kind is BlockKind.TABLE:  # a whole table, or rows if it does not fit
            if self._tokens(text, block.start, block.end) <= self.config.max_tokens:
                return [[(block.start, block.end, "table")]]
            return [[(s, e, "table") for s, e in self._fitting(text, block.parts, self.config.max_tokens)]]
        pieces = block.parts if block.kind is BlockKind.LIST else ((block.start, block.end),)
        groups = []
        for start, end in pieces:
            if self._tokens(text, start, end) <= self.config.max_tokens and not self.config.overlap_tokens:
                groups.append([(start, end, kind)])
                continue
            units = []
            for s, e in sentence_spans(text, start, end):
                if self._tokens(text, s, e) <= self.config.max_tokens:
                    units.append((s, e, kind))
                else:
                    units += [(ws, we, kind) for ws, we in self._word_windows(text, s, e)]
            groups.append(units)
        return groups

    def _fitting(self, text: str, parts, limit: int) -> list[tuple[int, int]]:
        """Parts (table rows) as they are, but a part over ``limit`` cut into word windows."""
        out: list[tuple[int, int]] = []
        for start, end in parts:
            if self._tokens(text, start, end) <= limit:
                out.append((start, end))
            else:
                out += self._word_windows(text, start, end, limit)
        return out

    def _word_windows(self, text: str, start: int, end: int, limit: int | None = None) -> list[tuple[int, int]]:
        limit = limit or self.config.max_tokens
        windows, first, last, tokens = [], None, None, 0
        for word in _WORD.finditer(text, start, end):
            n = self.counter.count(word.group())
            if first is not None and tokens + n > limit:
                windows.append((first, last))
                first, tokens = None, 0
            if first is None:
                first = word.start()
            last, tokens = word.end(), tokens + n
        if first is not None:
            windows.append((first, last))
        return windows

    # -- packing ----------------------------------------------------------------------------
    def _pack(self, units: list[_Unit], section: Section | None, text: str) -> list[tuple]:
        """Greedily pack one section's units into chunks.

        Returns:
            ``(start, end, kind, header, over_limit, section)`` per chunk.
        """
        limit, out = self.config.max_tokens, []
        cur: list[_Unit] = []

        def size(us: list[_Unit]) -> int:
            return sum(u.tokens for u in us)

        def body_kinds() -> set[str]:
            return {u.kind for u in cur if u.kind != "heading" and not u.seed}

        def emit() -> None:
            kinds = {u.kind for u in cur if u.kind != "heading"} or {"text"}
            kind = kinds.pop() if len(kinds) == 1 else "text"
            out.append((cur[0].start, cur[-1].end, kind, None, any(u.tokens > limit for u in cur),
                        section))

        def close(need: int, overlap: bool = True) -> None:
            # emit the chunk; the next starts with whole units of this one (overlap) that leave
            # room for `need` tokens
            nonlocal cur
            emit()
            seed: list[_Unit] = []
            if overlap and self.config.overlap_tokens:
                budget = min(self.config.overlap_tokens, limit - need)
                for u in reversed([u for u in cur if u.kind not in ("heading", "table")]):
                    if size(seed) + u.tokens > budget:
                        break
                    seed.insert(0, _Unit(u.start, u.end, u.tokens, u.kind, u.group, seed=True))
            cur = seed

        def make_room(need: int) -> None:
            nonlocal cur
            while cur and cur[0].seed and size(cur) + need > limit:
                cur.pop(0)
            if cur and not body_kinds() and size(cur) + need > limit:
                emit()  # a heading that cannot join its content stands alone rather than vanish
                cur = []

        start = 0
        while start < len(units):
            stop = start + 1
            while stop < len(units) and units[stop].group == units[start].group:
                stop += 1
            group, start = units[start:stop], stop
            kind, need = group[0].kind, size(group)
            kinds = body_kinds()
            # a code block that fits whole stays with the text that introduces it ("as follows:"),
            # which is what a question finds; a larger one, and every table, is a chunk of its own
            joins = kind == "code" and "table" not in kinds and "code" not in kinds \
                and size(cur) + need <= limit
            if kinds and (kinds | {kind}) & {"code", "table"} and kinds != {kind} and not joins:
                close(0, overlap=False)
            if kind in ("code", "table"):
                cur = [u for u in cur if not u.seed or u.kind == kind]
            if size(cur) + need <= limit:
                cur += group
                continue
            if need <= limit:
                if body_kinds():
                    close(need)
                make_room(need)
                cur += group
                continue
            for unit in group:  # larger than a chunk: split between its units
                if size(cur) + unit.tokens > limit:
                    if body_kinds():
                        close(unit.tokens)
                    make_room(unit.tokens)
                cur.append(unit)
        if body_kinds() or (cur and not any(u.seed for u in cur)):
            emit()
        return out

    def _header(self, block: Block, text: str) -> tuple[int, int] | None:
        """What every piece of a block carries when it is split: a table's header row, or a code
        block's first line when it takes at most :data:`CODE_HEADER_SHARE` of a chunk."""
        if block.kind is BlockKind.TABLE:
            return block.header
        if block.kind is BlockKind.CODE:
            lines = [p for p in block.parts if p[1] > p[0]]
            if len(lines) > 1 and self._tokens(text, *lines[0]) <= CODE_HEADER_SHARE * self.config.max_tokens:
                return lines[0]
        return None

    def _rows(self, header: tuple[int, int], parts: list[tuple[int, int]], kind: str, text: str,
              section: Section):
        """Groups of a block's parts (table rows, code lines) under the token limit, each
        carrying the header (the first group holds it). A table row over the limit is cut at
        words; a code line never is (its group is flagged ``over_limit``)."""
        limit = self.config.max_tokens
        header_tokens = self._tokens(text, *header)
        rows = self._fitting(text, parts, max(1, limit - header_tokens)) if kind == "table" else parts
        out, group, used = [], [], header_tokens
        first = True
        for s, e in rows:
            n = self._tokens(text, s, e)
            if group and used + n > limit:
                start = header[0] if first else group[0][0]
                out.append((start, group[-1][1], kind, header, used > limit, section))
                group, used, first = [], header_tokens, False
            group.append((s, e))
            used += n
        if group:
            start = header[0] if first else group[0][0]
            out.append((start, group[-1][1], kind, header, used > limit, section))
        return out

    # -- chunks -----------------------------------------------------------------------------
    def _chunks(self, document: Document, parsed: ParsedDocument, spans) -> tuple[Chunk, ...]:
        text, config_id = parsed.text, self.config.id
        chunks: list[Chunk] = []
        seen: dict[str, str] = {}
        last_end = -1
        last_start = -1
        for start, end, kind, header, over, section in spans:
            if start >= last_start and end <= last_end:
                continue  # wholly inside the previous chunk: overlap left nothing new
            last_start, last_end = start, end
            chunk_text = text[start:end]
            prefix = self._prefix(parsed.title, section.heading_path if section else ())
            if header is not None and header[0] < start:
                prefix = f"{prefix}\n{text[header[0]:header[1]]}" if prefix else text[header[0]:header[1]]
            norm = " ".join(chunk_text.split())
            cid = _id("c", document, start, end, config_id)
            chunks.append(Chunk(cid, document.doc_id, document.version, start, end, chunk_text,
                                ChunkKind(kind), section.heading_path if section else (),
                                section.id if section else "", prefix, header,
                                self.counter.count(chunk_text), duplicate_of=seen.get(norm),
                                over_limit=over, config_id=config_id))
            seen.setdefault(norm, cid)
        linked = []
        for i, chunk in enumerate(chunks):
            linked.append(replace(chunk, prev_id=chunks[i - 1].id if i else None,
                                  next_id=chunks[i + 1].id if i + 1 < len(chunks) else None))
        return tuple(linked)

    def _prefix(self, title: str, path: tuple[str, ...]) -> str:
        if not self.config.heading_prefix:
            return ""
        parts = list(path)
        if title and (not parts or parts[0] != title):
            parts.insert(0, title)
        return " > ".join(parts)


def _id(kind: str, document: Document, start: int, end: int, salt: str = "") -> str:
    key = f"{document.doc_id}\x00{document.version}\x00{start}\x00{end}\x00{salt}"
    return f"{kind}_" + hashlib.sha1(key.encode()).hexdigest()[:16]

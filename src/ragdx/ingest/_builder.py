"""The one way every parser writes parsed text: blocks separated by a blank line, exact spans."""

from __future__ import annotations

import re

from ragdx.types import Block, BlockKind, ParsedDocument

_SPACE = re.compile(r"\s+")


def collapse(text: str) -> str:
    """Collapse every run of whitespace to one space and strip the ends."""
    return _SPACE.sub(" ", text).strip()


class TextBuilder:
    """Accumulates blocks into one parsed text, recording each block's exact character range.

    Parsers call :meth:`heading`, :meth:`paragraph`, :meth:`items`, :meth:`table` and
    :meth:`code` in reading order; :meth:`build` returns the :class:`ParsedDocument`.
    Empty blocks are ignored, so parsers need not check.
    """

    def __init__(self) -> None:
        self._pieces: list[str] = []
        self._length = 0
        self._blocks: list[Block] = []
        self._headings: list[tuple[int, str]] = []

    def _append(self, text: str) -> int:
        if self._length:
            self._pieces.append("\n\n")
            self._length += 2
        start = self._length
        self._pieces.append(text)
        self._length += len(text)
        return start

    def _path(self) -> tuple[str, ...]:
        return tuple(title for _, title in self._headings)

    def heading(self, text: str, level: int) -> None:
        text = collapse(text)
        if not text:
            return
        while self._headings and self._headings[-1][0] >= level:
            self._headings.pop()
        self._headings.append((level, text))
        start = self._append(text)
        self._blocks.append(Block(BlockKind.HEADING, start, start + len(text), self._path(), level))

    def close_headings(self, level: int) -> None:
        """End the sections of every open heading at ``level`` or deeper (a definition list's
        terms end with the list)."""
        while self._headings and self._headings[-1][0] >= level:
            self._headings.pop()

    def first_heading(self, level: int) -> str:
        """The text of the first heading of a level, or ''."""
        text = "".join(self._pieces)
        return next((text[b.start:b.end] for b in self._blocks
                     if b.kind is BlockKind.HEADING and b.level == level), "")

    def paragraph(self, text: str) -> None:
        text = text.strip()
        if not text:
            return
        start = self._append(text)
        self._blocks.append(Block(BlockKind.TEXT, start, start + len(text), self._path()))

    def items(self, items: list[str]) -> None:
        """A list: one line per item (the item's marker included; a nested item is indented)."""
        self._lines(BlockKind.LIST, [i.rstrip() for i in items if i.strip()])

    def code(self, text: str) -> None:
        """A code block, verbatim; its lines are its split points."""
        lines = text.strip("\n").split("\n")
        while lines and not lines[-1].strip():
            lines.pop()
        if any(line.strip() for line in lines):
            self._lines(BlockKind.CODE, [line.rstrip() for line in lines], keep_empty=True)

    def table(self, rows: list[list[str]], header: bool) -> None:
        """A table: one line per row, cells joined by `` | ``; ``header`` marks the first row."""
        lines = [" | ".join(collapse(c) for c in row) for row in rows]
        lines = [line for line in lines if line.replace("|", "").strip()]
        self._lines(BlockKind.TABLE, lines, header=header)

    def _lines(self, kind: BlockKind, lines: list[str], *, keep_empty: bool = False,
               header: bool = False) -> None:
        if not keep_empty:
            lines = [line for line in lines if line]
        if not lines:
            return
        start = self._append("\n".join(lines))
        parts, pos = [], start
        for line in lines:
            parts.append((pos, pos + len(line)))
            pos += len(line) + 1
        head = parts[0] if header and len(parts) > 1 else None
        self._blocks.append(Block(kind, start, parts[-1][1], self._path(), parts=tuple(parts),
                                  header=head))

    def build(self, *, title: str, format: str, parser: str,
              warnings: tuple[str, ...] = ()) -> ParsedDocument:
        if not title:
            title = next((self._text_of(b) for b in self._blocks if b.kind is BlockKind.HEADING), "")
        return ParsedDocument("".join(self._pieces), tuple(self._blocks), title, format, parser,
                              warnings)

    def _text_of(self, block: Block) -> str:
        return "".join(self._pieces)[block.start:block.end]

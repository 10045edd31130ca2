"""Span resolution: turning a labelled quote into an exact span of a document's parsed text, and
checking which chunks hold that span.

A quote matches the parsed text ignoring whitespace (every run of spaces, tabs and line breaks
may differ, or be absent) but case-sensitively, as docs/formats.md says. When the parsed text lacks
it, :func:`in_source` tells whether the raw source has the words (the parser lost them) or not
(the source lacks them).
"""

from __future__ import annotations

import functools
import html
import re
from array import array
from dataclasses import dataclass

from ragdx.types import ChoiceEnum, Chunk, Span

_SPACE = re.compile(r"\s+")
_TAG = re.compile(r"<[^<>]*>")
_MARKUP = str.maketrans("", "", "*_`#|>[]\\")


#: how the parsers join a table row's cells in the parsed text ("a | b | c")
CELL_SEPARATOR = "|"


@functools.lru_cache(maxsize=16)
def _compact(text: str, drop: str = "") -> tuple[str, array]:
    """The text without whitespace (and without the characters in ``drop``), and for each kept
    character its offset in ``text`` (4 bytes each). Kept for the last 16 texts: a run resolves
    the quotes of one page question after question, and building this is a Python loop over
    every character, where looking it up costs a hash of the text."""
    offsets = array("i", (i for i, ch in enumerate(text) if not ch.isspace() and ch not in drop))
    return "".join(text[i] for i in offsets), offsets


def find_quote(text: str, quote: str) -> list[tuple[int, int]]:
    """Every place ``quote`` occurs in ``text`` ignoring whitespace, as ``(start, end)`` offsets.

    A quote copied from a rendered table has its cells apart by spaces where the parsed text
    joins them with ``" | "``: when the quote holds no ``|``, the cell separators are ignored
    too, so it still resolves to the row's span.

    The span starts at the quote's first character and ends after its last, so it never
    includes the whitespace around it.
    """
    needle = _SPACE.sub("", quote)
    if not needle:
        return []
    compact, offsets = _compact(text, "" if CELL_SEPARATOR in quote else CELL_SEPARATOR)
    found, pos = [], compact.find(needle)
    while pos >= 0:
        found.append((offsets[pos], offsets[pos + len(needle) - 1] + 1))
        pos = compact.find(needle, pos + 1)
    return found


def in_source(raw_text: str, quote: str) -> bool:
    """Whether the raw source has the quote's words once tags, entities and markup are removed."""
    def loose(text: str) -> str:
        return _SPACE.sub("", html.unescape(_TAG.sub(" ", text)).translate(_MARKUP))
    needle = loose(quote)
    return bool(needle) and needle in loose(raw_text)


class CoverageStatus(ChoiceEnum):
    """Whether some chunk holds a span whole, chunks hold only pieces of it, or none touches it."""

    FULL = "full"
    PARTIAL = "partial"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class Coverage:
    """Which chunks hold a span: whole (``full``), in part (``partial``), or none.

    ``status`` is ``full`` when some chunk holds the whole span, ``partial`` when chunks only
    hold pieces of it (the span was cut across chunks), and ``none`` when no chunk touches it.
    """

    span: Span
    full: tuple[str, ...]
    partial: tuple[str, ...]

    @property
    def status(self) -> CoverageStatus:
        return CoverageStatus.FULL if self.full else CoverageStatus.PARTIAL if self.partial else CoverageStatus.NONE


def coverage(span: Span, chunks: list[Chunk]) -> Coverage:
    """How the chunks of the span's document version cover it (duplicates are ignored)."""
    full, partial = [], []
    for chunk in chunks:
        if chunk.duplicate_of is not None:
            continue
        if chunk.span.contains(span):
            full.append(chunk.id)
        elif chunk.span.overlaps(span):
            partial.append(chunk.id)
    return Coverage(span, tuple(full), tuple(partial))

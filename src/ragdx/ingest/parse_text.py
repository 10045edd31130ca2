"""Plain text: paragraphs are separated by blank lines; line breaks inside a paragraph are kept."""

from __future__ import annotations

import re

from ragdx.ingest._builder import TextBuilder
from ragdx.types import ParsedDocument

PARSER = "text/1"


def parse_text(source: str) -> ParsedDocument:
    """Parse plain text into paragraphs.

    Args:
        source: the document's text.

    Returns:
        The parsed document; its title is its first line when that line stands alone.
    """
    source = source.replace("\r\n", "\n").replace("\r", "\n")
    out = TextBuilder()
    paragraphs = [p.strip("\n") for p in re.split(r"\n[ \t]*\n", source)]
    paragraphs = [p.rstrip() for p in paragraphs if p.strip()]
    title = paragraphs[0].strip() if paragraphs and "\n" not in paragraphs[0].strip() else ""
    for paragraph in paragraphs:
        out.paragraph(paragraph)
    return out.build(title=title[:200], format="text", parser=PARSER)

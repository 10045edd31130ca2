"""Choosing and running a parser by format. Every parser returns a :class:`ParsedDocument`."""

from __future__ import annotations

from pathlib import PurePath

from ragdx._jsonl import decode_utf8
from ragdx.errors import InputError
from ragdx.types import ParsedDocument

EXTENSIONS = {".md": "markdown", ".markdown": "markdown", ".html": "html", ".htm": "html",
              ".xhtml": "html", ".txt": "text", ".text": "text", ".pdf": "pdf"}
FORMATS = ("markdown", "html", "text", "pdf")


def detect_format(path: str, declared: str | None = None) -> str:
    """Return the format of a file: the declared one, else the one its extension names.

    Raises:
        InputError: the declared format or the extension is not one ragdx parses.
    """
    if declared is not None:
        if declared not in FORMATS:
            raise InputError(f"unknown format {declared!r}; valid formats are {', '.join(FORMATS)}",
                             file=path, field="format")
        return declared
    suffix = PurePath(path).suffix.lower()
    if suffix not in EXTENSIONS:
        raise InputError(f"unknown format: no parser for extension {suffix or '(none)'!r}; "
                         f"known extensions are {', '.join(sorted(EXTENSIONS))} "
                         "(or set the manifest field 'format')", file=path)
    return EXTENSIONS[suffix]


def parser_id(fmt: str) -> str:
    """The name and version of the parser of a format, as recorded with every parsed version
    (so a parser change re-chunks what it parsed)."""
    if fmt == "pdf":
        from ragdx.ingest.parse_pdf import parser_id as pdf_parser_id
        return pdf_parser_id()
    if fmt == "markdown":
        from ragdx.ingest.parse_markdown import PARSER
    elif fmt == "html":
        from ragdx.ingest.parse_html import PARSER
    else:
        from ragdx.ingest.parse_text import PARSER
    return PARSER


def decode_source(data: bytes, fmt: str, name: str) -> str:
    """The raw source as text: decoded UTF-8, or for PDF the text of its pages in stream order."""
    if fmt == "pdf":
        from ragdx.ingest.parse_pdf import raw_text
        return raw_text(data, name)
    return decode_utf8(data, name)


def parse(data: bytes, fmt: str, name: str) -> tuple[str, ParsedDocument]:
    """Decode and parse one file.

    Args:
        data: the file's bytes.
        fmt: one of :data:`FORMATS`.
        name: the file's name, for error messages.

    Returns:
        The raw source text and the parsed document.

    Raises:
        InputError: the bytes cannot be decoded, or the PDF cannot be read.
        MissingExtraError: a PDF without the ``pdf`` extra installed.
    """
    if fmt == "pdf":
        from ragdx.ingest.parse_pdf import parse_pdf
        parsed = parse_pdf(data, name)
        return decode_source(data, fmt, name), parsed
    text = decode_utf8(data, name)
    if fmt == "markdown":
        from ragdx.ingest.parse_markdown import parse_markdown
        return text, parse_markdown(text)
    if fmt == "html":
        from ragdx.ingest.parse_html import parse_html
        return text, parse_html(text)
    from ragdx.ingest.parse_text import parse_text
    return text, parse_text(text)

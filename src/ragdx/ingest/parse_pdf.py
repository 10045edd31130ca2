"""PDF parsing (the ``pdf`` extra, pypdf), with detection of the known PDF failure modes.

The parsed text is pypdf's plain extraction (``page.extract_text()``, content-stream order),
page by page, shaped into blocks:

- **Paragraphs.** Plain extraction has no blank lines, so paragraph breaks come from the
  baselines pypdf reports to a ``visitor_text``: a new paragraph starts where the vertical gap
  between two lines exceeds 1.2 times the page's usual (median) line spacing, where the text
  jumps up the page (a new column or a float), at a bullet, and at every page break. Wrapped
  lines are joined with a space; a word hyphenated at a line end (``refund-`` / ``able``) is
  rejoined only when the next line continues in lower case.
- **Headings.** A line whose font is at least 1.2 times the body size (the size most characters
  use) and that is at most 120 characters long is a heading; its level ranks its size among
  the document's heading sizes. Consecutive heading lines of one size are one wrapped heading.
  Table-of-contents lines (dot leaders) are never headings.

Apart from whitespace and those rejoined hyphens, the parsed text is exactly the plain
extraction (:func:`raw_text`), so a quote lost here was lost by the extractor or the source.
Tables stay in paragraphs (their rows in stream order): their cells cannot be told apart in
plain extraction, and the checks below only warn about them.

Failure modes are reported in :attr:`ParsedDocument.warnings`, each naming its page. The
checks read ``extract_text(extraction_mode="layout")``, which keeps horizontal positions as
character columns:

- **Two-column layout.** A gutter is a character column ``c`` between 30% and 70% of the page's
  widest line such that at most 15% of the non-blank lines have text in columns ``c-1..c+1``,
  while at least 20% (and at least 3) of the lines have text left of it and as many right of
  it, averaging 3+ words a side (prose, not a table's short cells). Such a page's stream order
  may read across or interleave the columns.
- **Table regions.** A table row is a layout line with 3 to 12 cells separated by 2+ spaces,
  at least half of the gaps being 4+ spaces wide (layout mode renders justified prose with
  2-3-space word gaps, and an occasional wider one). A region is 2+ consecutive non-blank rows,
  2/3 of them with the same cell count.
- **Lost header at a page break.** The last region of page N ends within its last 2 non-blank
  lines (one footer line may follow), the first region of page N+1 starts within its first 2
  (one running header may precede), both have the same cell count, page N's first row is
  header-like (no numeric cell; a bare year does not count) and page N+1's first row is
  data-like (a numeric cell). A table running over three pages warns on each later page.
- **Cells one per line.** Most rows of a region have their first two cells on no single plain
  line, so stream order put each cell on its own line.
- **Scanned pages.** A page with no text but an image; a document with no text at all.

Table checks are skipped on two-column pages, whose layout lines mix both columns.
"""

from __future__ import annotations

import io
import re
import statistics
from collections import Counter
from dataclasses import dataclass
from typing import Any

from ragdx.errors import InputError, MissingExtraError
from ragdx.ingest._builder import TextBuilder, collapse
from ragdx.types import ParsedDocument

PARSER = "pdf/1"

_BREAK_GAP = 1.2         # paragraph break: gap > this x the page's median line spacing
_HEADING_RATIO = 1.2     # heading: font size >= this x the body size
_HEADING_MAX_CHARS = 120
_BAND = (0.3, 0.7)       # where a two-column gutter may lie, as shares of the widest line
_SIDE_SHARE = 0.2        # lines with text on each side (a last page's right column is short)
_CROSS_SHARE = 0.15      # share of lines allowed to run across the gutter (titles, figures)
_MIN_SIDE_LINES = 3
_MIN_SIDE_WORDS = 3.0    # average words per line on each side: prose, not table cells
_MIN_CELLS, _MAX_CELLS = 3, 12
_GUTTER_SPACES = 4       # a gap between table cells, wider than justified prose's word gaps
_MIN_TABLE_ROWS = 2
_EDGE_LINES = 2          # a table at a page's bottom / top ends / starts this close (a footer)

_CELL_GAP = re.compile(r" {2,}")
_BULLET = re.compile(r"^[\u2022\u25e6\u25aa\u2023\u2043\u00b7*] ")
# A numeric table cell: 10, -3.5, (12), $1,200, 45%, 2024-01-31, 3.5 kg
_NUMBER = re.compile(r"[-+\u2212(]?[$\u20ac\u00a3\u00a5]?\d[\d.,:/%\u2013-]*\)?%?(\s?[A-Za-z]{1,3})?")
_YEAR = re.compile(r"(19|20)\d\d")
_LEADER = re.compile(r"(\. ?){4,}")  # a table of contents' dot leader
# Metadata titles that name the generator or the source file rather than the document.
_JUNK_TITLE = re.compile(r"^(microsoft \w+ - |untitled)|\.(docx?|pptx?|xlsx?|odt|rtf|tex|pdf)$", re.I)


@dataclass(slots=True)
class _Line:
    text: str
    y: float | None  # baseline in points; None when pypdf reported no position
    size: float      # font size in points of most of the line's characters


@dataclass(slots=True)
class _Table:
    rows: list[list[str]]
    first: int  # index of its first and last row among the page's non-blank layout lines
    last: int

    @property
    def columns(self) -> int:
        return Counter(len(r) for r in self.rows).most_common(1)[0][0]


@dataclass(slots=True)
class _Page:
    lines: list[_Line]
    tables: list[_Table]
    layout_lines: int  # non-blank layout lines, to tell where a page's bottom is


def _pypdf() -> Any:
    try:
        import pypdf
    except ImportError as exc:
        raise MissingExtraError("pdf", "PDF parsing") from exc
    return pypdf


def _open(data: bytes, name: str) -> Any:
    """A pypdf reader for ``data``, decrypted if it opens with the empty password."""
    pypdf = _pypdf()
    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise InputError("encrypted PDF: it cannot be opened without its password", file=name)
        len(reader.pages)  # a broken page tree fails here rather than mid-parse
    except InputError:
        raise
    except Exception as exc:  # pypdf raises many types on damaged files, not only PdfReadError
        raise InputError(f"not a readable PDF: {type(exc).__name__}: {exc}", file=name) from exc
    return reader


def parser_id() -> str:
    """This parser's id, with the pypdf version (another pypdf may extract other text)."""
    pypdf = _pypdf()
    return f"{PARSER} pypdf-{pypdf.__version__}"


def raw_text(data: bytes, name: str) -> str:
    """The plain text pypdf extracts from every page, pages separated by a blank line.

    This is the source as the extractor sees it, before any shaping into blocks, so a quote
    missing here was lost by the source (or the extractor), not by :func:`parse_pdf`.

    Raises:
        InputError: the bytes are not a PDF this reader can open.
        MissingExtraError: pypdf is not installed.
    """
    pages = []
    for page in _open(data, name).pages:
        try:
            pages.append(page.extract_text())
        except Exception:  # parse_pdf reports the page; the raw text simply lacks it
            pages.append("")
    return "\n\n".join(pages)


def parse_pdf(data: bytes, name: str) -> ParsedDocument:
    """Parse a PDF into headings and paragraphs, and report the failure modes found.

    Args:
        data: the file's bytes.
        name: the file's name, for error messages.

    Returns:
        The parsed document; its title is the PDF's metadata title or its first heading. A PDF
        without extractable text gives an empty document with a warning (OCR is not done).

    Raises:
        InputError: the bytes are not a readable PDF, or it is encrypted with a password.
        MissingExtraError: pypdf is not installed.
    """
    pypdf = _pypdf()
    reader = _open(data, name)
    warnings: list[tuple[int, str]] = []
    pages: list[_Page] = []
    for number, page in enumerate(reader.pages, start=1):
        try:
            lines = _read_lines(page)
        except Exception as exc:
            warnings.append((number, f"page {number}: text extraction failed "
                                     f"({type(exc).__name__}: {exc}); its text is missing"))
            lines = []
        if not lines and _has_image(page):
            warnings.append((number, f"page {number}: no extractable text, only an image "
                                     "(scanned page? OCR is not done)"))
        pages.append(_inspect(page, number, lines, warnings))
    warnings += _lost_headers(pages)

    text_lines = [line for p in pages for line in p.lines]
    parser = parser_id()
    title = _metadata_title(reader)
    if not text_lines:
        return TextBuilder().build(title=title, format="pdf", parser=parser, warnings=(
            "no extractable text (scanned PDF? OCR is not done)",))
    levels = _heading_levels(text_lines)
    out = TextBuilder()
    for page in pages:
        _write_page(out, page.lines, levels)
    ordered = tuple(message for _, message in sorted(warnings, key=lambda w: w[0]))
    return out.build(title=title, format="pdf", parser=parser, warnings=ordered)


# -- reading lines ----------------------------------------------------------------------------

class _LineCollector:
    """A ``visitor_text`` that rebuilds plain extraction's lines with their baselines and sizes."""

    def __init__(self) -> None:
        self.lines: list[_Line] = []
        self._parts: list[str] = []
        self._y: float | None = None
        self._sizes: Counter[float] = Counter()

    def __call__(self, text: str, cm: list[float], tm: list[float], font: Any,
                 font_size: float) -> None:
        for i, part in enumerate(text.split("\n")):
            if i:
                self.end_line()
            if not part.strip():
                self._parts.append(part)
                continue
            # The chunk's position is where its first part starts; parts after a newline in
            # the same chunk have none of their own.
            if i == 0 and self._y is None:
                self._y = tm[4] * cm[1] + tm[5] * cm[3] + cm[5]
            scale = abs(tm[2] * cm[1] + tm[3] * cm[3]) or 1.0  # Tf size x the vertical scale
            self._sizes[round(font_size * scale, 1)] += len(part.strip())
            self._parts.append(part)

    def end_line(self) -> None:
        text = collapse("".join(self._parts))
        if text:
            size = self._sizes.most_common(1)[0][0] if self._sizes else 0.0
            self.lines.append(_Line(text, self._y, size))
        self._parts, self._y, self._sizes = [], None, Counter()


def _read_lines(page: Any) -> list[_Line]:
    collector = _LineCollector()
    page.extract_text(visitor_text=collector)
    collector.end_line()
    return collector.lines


def _has_image(page: Any) -> bool:
    try:
        return len(page.images) > 0
    except Exception:  # a broken resource dictionary is not worth failing the document over
        return False


def _metadata_title(reader: Any) -> str:
    try:
        title = collapse(str(reader.metadata.title or "")) if reader.metadata else ""
    except Exception:
        return ""
    return "" if _JUNK_TITLE.search(title) else title


# -- failure-mode detection -------------------------------------------------------------------

def _inspect(page: Any, number: int, lines: list[_Line],
             warnings: list[tuple[int, str]]) -> _Page:
    """Run the layout-mode checks on one page, appending their warnings."""
    if not lines:
        return _Page(lines, [], 0)
    try:
        layout = [r.rstrip() for r in page.extract_text(extraction_mode="layout").split("\n")]
    except Exception as exc:
        warnings.append((number, f"page {number}: layout extraction failed "
                                 f"({type(exc).__name__}); two-column and table checks skipped"))
        return _Page(lines, [], 0)
    rows = [r for r in layout if r.strip()]
    if _gutter(rows) is not None:
        warnings.append((number, f"page {number}: two-column layout detected; reading order may "
                                 "interleave the columns"))
        return _Page(lines, [], len(rows))
    tables = _tables(rows)
    squeezed = ["".join(line.text.split()) for line in lines]
    for table in tables:
        apart = sum(not any("".join((r[0] + r[1]).split()) in s for s in squeezed)
                    for r in table.rows)
        if apart > len(table.rows) / 2:
            warnings.append((number, f"page {number}: table cells extracted one per line; rows "
                                     "lose their cell association"))
            break
    return _Page(lines, tables, len(rows))


def _gutter(rows: list[str]) -> int | None:
    """The character column of a two-column page's gutter, or None (see the module docstring)."""
    if len(rows) < _MIN_SIDE_LINES:
        return None
    width = max(len(r) for r in rows)
    need = max(_MIN_SIDE_LINES, _SIDE_SHARE * len(rows))
    for c in range(max(1, int(width * _BAND[0])), int(width * _BAND[1]) + 1):
        crossing, left, right = 0, [], []
        for row in rows:
            if row[c - 1:c + 2].strip():
                crossing += 1
                continue
            if words := len(row[:c].split()):
                left.append(words)
            if words := len(row[c:].split()):
                right.append(words)
        if (crossing <= _CROSS_SHARE * len(rows) and len(left) >= need and len(right) >= need
                and statistics.mean(left) >= _MIN_SIDE_WORDS
                and statistics.mean(right) >= _MIN_SIDE_WORDS):
            return c
    return None


def _cells(row: str) -> list[str] | None:
    row = row.strip()
    gaps = _CELL_GAP.findall(row)
    if not _MIN_CELLS - 1 <= len(gaps) <= _MAX_CELLS - 1:
        return None
    if 2 * sum(len(g) >= _GUTTER_SPACES for g in gaps) < len(gaps):  # justified prose, not cells
        return None
    return _CELL_GAP.split(row)


def _tables(rows: list[str]) -> list[_Table]:
    """The table regions among a page's non-blank layout lines, top to bottom."""
    tables: list[_Table] = []
    run: list[tuple[int, list[str]]] = []
    for i, row in enumerate(rows + [""]):  # the sentinel ends the last run
        cells = _cells(row)
        if cells is not None:
            run.append((i, cells))
            continue
        if len(run) >= _MIN_TABLE_ROWS:
            table = _Table([c for _, c in run], run[0][0], run[-1][0])
            if sum(len(r) == table.columns for r in table.rows) >= 2 * len(run) / 3:
                tables.append(table)
        run = []
    return tables


def _numeric(cell: str) -> bool:
    return bool(_NUMBER.fullmatch(cell)) and not _YEAR.fullmatch(cell)


def _lost_headers(pages: list[_Page]) -> list[tuple[int, str]]:
    """Warnings for tables that run onto the next page without repeating their header row."""
    warnings = []
    carried: list[str] | None = None  # the header of a table that ran onto the current page
    for n in range(1, len(pages)):  # page n (1-based) and page n + 1
        before, after = pages[n - 1], pages[n]
        header = None
        if before.tables and after.tables:
            end, start = before.tables[-1], after.tables[0]
            if not any(map(_numeric, end.rows[0])):
                header = end.rows[0]
            elif end is before.tables[0]:  # the continuation itself runs on: a third page
                header = carried
            if not (end.last >= before.layout_lines - _EDGE_LINES and start.first < _EDGE_LINES
                    and end.columns == start.columns and any(map(_numeric, start.rows[0]))):
                header = None
        if header is not None:
            warnings.append((n + 1, f"page {n + 1}: table continues from page {n} without its "
                                    "header row; rows lose their column names"))
        carried = header
    return warnings


# -- writing blocks ---------------------------------------------------------------------------

def _heading_levels(lines: list[_Line]) -> dict[float, int]:
    """Heading level by font size: sizes well above the body size, largest first."""
    chars: Counter[float] = Counter()
    for line in lines:
        chars[line.size] += len(line.text)
    body = chars.most_common(1)[0][0]
    sizes = sorted({s for s in chars if s >= _HEADING_RATIO * body}, reverse=True)
    return {size: min(rank, 6) for rank, size in enumerate(sizes, start=1)}


def _is_heading(line: _Line, levels: dict[float, int]) -> bool:
    return (line.size in levels and len(line.text) <= _HEADING_MAX_CHARS
            and sum(ch.isalpha() for ch in line.text) >= 2 and not _LEADER.search(line.text))


def _join(lines: list[str]) -> str:
    """Join wrapped lines with a space, rejoining words hyphenated at a line end."""
    text = ""
    for line in lines:
        if text.endswith(("-", "\u00ad")) and text[-2:-1].isalpha() and line[:1].islower():
            text = text[:-1] + line
        else:
            text = f"{text} {line}" if text else line
    return text


def _write_page(out: TextBuilder, lines: list[_Line], levels: dict[float, int]) -> None:
    """Write one page's lines as headings and paragraphs; a page break always ends a block."""
    gaps = [a.y - b.y for a, b in zip(lines, lines[1:])
            if a.y is not None and b.y is not None and a.y > b.y]
    leading = statistics.median(gaps) if gaps else None
    paragraph: list[str] = []
    heading: list[_Line] = []

    def flush() -> None:
        if heading:
            out.heading(" ".join(h.text for h in heading), levels[heading[0].size])
            heading.clear()
        out.paragraph(_join(paragraph))
        paragraph.clear()

    for prev, line in zip([None, *lines], lines):
        if _is_heading(line, levels):
            # A wrapped heading's lines are spaced by its own (larger) size, not the body's.
            if not (heading and heading[-1].size == line.size and _wrapped(heading[-1], line)):
                flush()
            heading.append(line)
            continue
        if heading or prev is None or _BULLET.match(line.text) or (
                leading is not None and line.y is not None and prev.y is not None
                and (line.y > prev.y or prev.y - line.y > _BREAK_GAP * leading)):
            flush()
        paragraph.append(line.text)
    flush()


def _wrapped(prev: _Line, line: _Line) -> bool:
    return prev.y is None or line.y is None or 0 < prev.y - line.y <= 2 * line.size

"""A tiny dependency-free PDF writer, for tests that need PDFs with a known layout.

Each page is a list of text runs ``(x, y, text)`` in PDF points (origin at the bottom left of
a US Letter page, 612 x 792), drawn in the standard Helvetica font, so no font is embedded; a
run ``(x, y, text, size)`` sets its own font size (a heading, say).
The output is a plain, uncompressed PDF 1.4 file with a correct cross-reference table, which
any reader (pypdf included) opens without repairs. Text must be encodable in Windows-1252,
which is the WinAnsi encoding the font uses (Latin-1 plus curly quotes, dashes, bullets, euro).

Example:
    >>> from ragdx.testing.pdf import make_pdf, two_column_page
    >>> data = make_pdf([two_column_page(["left words"], ["right words"])])
    >>> data.startswith(b"%PDF-1.4")
    True
"""

from __future__ import annotations

__all__ = ["PAGE_WIDTH", "PAGE_HEIGHT", "Run", "make_pdf", "column_page", "two_column_page",
           "table_page"]

PAGE_WIDTH = 612.0
PAGE_HEIGHT = 792.0
LEADING = 14.0   # points between the baselines of consecutive lines
TOP = 740.0      # baseline of a page's first line
MARGIN = 72.0    # left margin

Run = tuple[float, float, str] | tuple[float, float, str, float]


def _escape(text: str) -> bytes:
    """A PDF literal string's bytes: backslash and parentheses escaped, WinAnsi encoded."""
    escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
    try:
        return escaped.encode("cp1252")
    except UnicodeEncodeError as exc:
        raise ValueError(f"make_pdf writes WinAnsi (Windows-1252) text only, not {text!r}") from exc


def _content(runs: list[Run], font_size: float) -> bytes:
    ops = [b"BT"]
    for x, y, text, *size in runs:
        # An absolute text matrix per run, so runs do not depend on one another's positions.
        head = f"/F1 {size[0] if size else font_size:g} Tf 1 0 0 1 {x:.2f} {y:.2f} Tm ("
        ops.append(head.encode() + _escape(text) + b") Tj")
    ops.append(b"ET")
    return b"\n".join(ops)


def make_pdf(pages: list[list[Run]], font_size: float = 11) -> bytes:
    """Write a PDF whose pages draw the given text runs.

    Args:
        pages: one list of ``(x, y, text)`` runs per page, in PDF points from the bottom left;
            a run ``(x, y, text, size)`` has its own font size.
        font_size: the Helvetica size of the runs without one.

    Returns:
        The PDF file's bytes.

    Raises:
        ValueError: a run's text is not in Windows-1252.
    """
    n = len(pages)
    # Object numbers: 1 catalog, 2 page tree, 3 font, then a (page, content) pair per page.
    page_ids = [4 + 2 * i for i in range(n)]
    objects: list[bytes] = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{' '.join(f'{p} 0 R' for p in page_ids)}] /Count {n} >>".encode(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
    ]
    for page_id, runs in zip(page_ids, pages):
        stream = _content(runs, font_size)
        objects.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {PAGE_WIDTH:g} "
                       f"{PAGE_HEIGHT:g}] /Resources << /Font << /F1 3 0 R >> >> "
                       f"/Contents {page_id + 1} 0 R >>".encode())
        objects.append(f"<< /Length {len(stream)} >>\nstream\n".encode() + stream
                       + b"\nendstream")
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    # Each xref entry is exactly 20 bytes, its line ending included.
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{offset:010d} 00000 n \n".encode() for offset in offsets)
    out += (f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\n"
            f"startxref\n{xref}\n%%EOF\n").encode()
    return bytes(out)


def column_page(lines: list[str], *, x: float = MARGIN, top: float = TOP) -> list[Run]:
    """One column of lines, top to bottom; an empty string leaves a blank line (a paragraph gap)."""
    return [(x, top - i * LEADING, line) for i, line in enumerate(lines) if line]


def two_column_page(left_lines: list[str], right_lines: list[str], *,
                    top: float = TOP) -> list[Run]:
    """A page with two columns of lines, side by side, like a two-column paper.

    The left column starts at x = 72, the right one at x = 320 (half the page plus a gutter).
    Keep lines under about 40 characters at 11 pt so the columns do not overlap.
    """
    return column_page(left_lines, x=MARGIN, top=top) + column_page(right_lines, x=320, top=top)


def table_page(rows: list[list[str]], *, top: float = TOP, x: float = MARGIN,
               col_width: float = 120.0) -> list[Run]:
    """A table: one run per cell, cells of a row on one baseline, columns ``col_width`` apart.

    Args:
        rows: the table's rows, header row first if it has one.
        top: the baseline of the first row.
        x: the left edge of the first column.
        col_width: the distance between the left edges of consecutive columns.
    """
    return [(x + j * col_width, top - i * LEADING, cell)
            for i, row in enumerate(rows) for j, cell in enumerate(row) if cell]

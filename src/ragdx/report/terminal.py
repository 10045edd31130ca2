"""Plain-text tables for the terminal."""

from __future__ import annotations

from typing import Sequence


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], *, max_width: int = 60) -> str:
    """Format rows as an aligned text table; cells longer than ``max_width`` are shortened."""
    def cell(value: object) -> str:
        text = "" if value is None else str(value)
        text = " ".join(text.split())
        return text if len(text) <= max_width else text[: max_width - 1] + "…"

    body = [[cell(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in body]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in body]
    return "\n".join(lines)

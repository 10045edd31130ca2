"""Plain-text tables and lines for the terminal.

Text that comes from documents or input files (ids, titles, answers) may hold control characters:
an ANSI escape would recolour or rewrite the terminal. :func:`printable` shows each as its
escape (``\\x1b``) instead, and every table cell goes through it.
"""

from __future__ import annotations

import re
from typing import Sequence

# C0 and C1 controls but line feed and tab, and the bidirectional overrides (which reorder
# what the terminal shows)
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` with every control character shown as its escape, safe to print."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], *, max_width: int = 60) -> str:
    """Format rows as an aligned text table; cells longer than ``max_width`` are shortened."""
    def cell(value: object) -> str:
        text = "" if value is None else str(value)
        text = printable(" ".join(text.split()))
        return text if len(text) <= max_width else text[: max_width - 1] + "…"

    body = [[cell(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in body]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in body]
    return "\n".join(lines)

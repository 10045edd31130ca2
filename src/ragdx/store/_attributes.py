"""What changed between two records of one stored version, as the update log words it."""

from __future__ import annotations

import json
from typing import Any

from ragdx.types import Document

#: The attributes of a version that an ingest may change in place (no re-chunking).
ATTRIBUTES = ("acl", "status", "title", "path", "metadata", "updated_at")


def _show(value: Any) -> str:
    return json.dumps(value, sort_keys=True) if not isinstance(value, str) else repr(value)


def attribute_changes(before: Document, after: Document) -> list[tuple[str, str]]:
    """Each attribute that differs, with the log's detail ``before -> after`` (groups compared
    as sorted sets, metadata as plain dicts)."""
    out = []
    for name in ATTRIBUTES:
        old, new = getattr(before, name), getattr(after, name)
        if name == "acl":
            old, new = sorted(set(old)), sorted(set(new))
        if name == "metadata":
            old, new = dict(old), dict(new)
        if old != new:
            out.append((name, f"{_show(old)} -> {_show(new)}"))
    return out

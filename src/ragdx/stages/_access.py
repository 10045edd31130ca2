"""The read-time access check every channel applies to what its index returned."""

from __future__ import annotations

import logging

from ragdx.protocols import Store
from ragdx.types import Chunk, Principal

log = logging.getLogger("ragdx.access")


def readable_only(store: Store, principal: Principal, stage: str, query_id: str,
                  found: list[tuple[Chunk, float]]) -> list[tuple[Chunk, float]]:
    """Keep what the principal may read, checked again against the store's access table.

    The index already filtered by access; an item failing this second check means the index and
    the store disagree. It is removed, and reported to the operator's log only: a trace shown to
    this principal must not mention it, even as a dropped item.
    """
    kept = []
    keys = [(c.doc_id, c.version) for c, _ in found]
    many = getattr(store, "readable_many", None)  # a server store answers in one round trip
    allowed = many(principal.groups, keys) if many is not None else {
        key for key in set(keys) if store.readable(principal.groups, *key)}
    for chunk, score in found:
        if (chunk.doc_id, chunk.version) in allowed:
            kept.append((chunk, score))
        else:
            log.error("%s returned %s (%s@%s) for query %s, which the principal may not read; "
                      "removed", stage, chunk.id, chunk.doc_id, chunk.version, query_id)
    return kept

"""Governance: before assembly, every candidate's version and access are checked again against
the store, and whatever may not be used is dropped with the reason.

- deleted: the document (or this version) is no longer stored;
- superseded / expired: a version that is not in force (kept when the question names that
  version, "In SQLite 3.34.1, ...", or with ``allow_superseded``, for questions about history). The reason names the current version
  only when the asker may read it; otherwise it says there is no current version the asker may
  read (a version id is about a document too).

A candidate the principal may not read (whatever an earlier stage did) is removed and reported
to the operator's log only, as the channels do (:func:`ragdx.stages._access.readable_only`): a
trace shown to this principal must not name it, even as a dropped item.

Conflicting current documents are *not* resolved here: both stay, and the assembler flags the
conflict in the context.
"""

from __future__ import annotations

import logging
import time

from ragdx.protocols import Store
from ragdx.types import (
    Candidate, DocStatus, Dropped, Provenance, Query, Ranked, StageKind, StoredVersion, VersionFilter,
)

log = logging.getLogger("ragdx.access")

#: The reason :meth:`Governance.reason` gives for a version the principal may not read; such an
#: item is removed without a record.
UNREADABLE = "unreadable"


class Governance:
    """Drops what may not reach the context, with a reason for each.

    Args:
        store: the store (the authority on versions, statuses and access).
        allow_superseded: keep superseded and expired versions (marked in the context).
    """

    kind = StageKind.GOVERNANCE

    def __init__(self, store: Store, *, allow_superseded: bool = False,
                 name: str = "governance") -> None:
        self.store, self.allow_superseded, self.name = store, allow_superseded, name

    def reason(self, query: Query, item: Candidate, versions: dict[str, list[StoredVersion]]) -> str | None:
        """Why an item may not be used (:data:`UNREADABLE` when the principal may not read it), or
        None."""
        stored = versions.setdefault(item.doc_id, self.store.versions(item.doc_id))
        this = next((v for v in stored if v.document.version == item.version), None)
        if this is None:
            tomb = self.store.tombstone(item.doc_id)
            return (f"deleted: {item.doc_id} was deleted at {tomb[0]}" if tomb
                    else f"deleted: version {item.version} of {item.doc_id} is no longer stored")
        if not query.principal.may_read(this.document.acl):
            return UNREADABLE
        status = this.document.status
        if status is not DocStatus.CURRENT and not self.allow_superseded \
                and not VersionFilter.for_question(query.question).names(item.version):  # asked for
            current = [v.document.version for v in stored if v.document.status is DocStatus.CURRENT
                       and query.principal.may_read(v.document.acl)]
            now = f"; the current version is {current[-1]}" if current else \
                "; no current version the asker may read"
            return f"{status.value}: version {item.version} of {item.doc_id}{now}"
        return None

    def run(self, query: Query, ranked: Ranked) -> Ranked:
        started = time.perf_counter()
        versions: dict[str, list[StoredVersion]] = {}
        kept, dropped = [], []
        for item in ranked.items:
            why = self.reason(query, item, versions)
            if why == UNREADABLE:
                log.error("%s received %s (%s@%s) for query %s, which the principal may not read; "
                          "removed", self.name, item.chunk_id, item.doc_id, item.version, query.id)
                continue
            if why is not None:
                dropped.append(Dropped(item.chunk_id, item.doc_id, item.version, item.start, item.end,
                                       why, item.rank))
                continue
            rank = len(kept) + 1
            kept.append(Candidate(item.chunk_id, item.doc_id, item.version, item.start, item.end, rank,
                                  item.score, item.history + (Provenance(self.name, rank, item.score),)))
        return Ranked(self.name, self.kind, tuple(kept), tuple(dropped),
                      {"allow_superseded": self.allow_superseded}, time.perf_counter() - started)

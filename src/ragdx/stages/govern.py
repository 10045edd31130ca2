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

A question whose best matches are sources the asker may not read is *withheld*: given the
retrieval channels (``withhold``), governance asks each of them, with every access group, for its
``withhold_depth`` best matches; when the matches unreadable by the asker weigh more than half of
all of them, each weighing ``1 / rank`` in its channel, every candidate is dropped, so the
generator abstains instead of answering from loosely related public text (the answer would rest
on what the asker may not read). With a depth of 1
and two channels, this is "the best match is unreadable in both"; deeper, a restricted page
that is the second and third best match counts too. The drop reason names no source, and the
answer is the same abstention as for a question no readable source covers.

- other version: a current page of another version than the question names, when the store keeps
  each version as documents of their own and the named version's copy of the page is stored and
  readable (:meth:`~ragdx.types.VersionFilter.twins`: "On 15, ..." drops ``postgresql-17/x.html``
  when ``postgresql-15/x.html`` holds version 15). Both are current, so no status tells them apart.

Conflicting current documents are *not* resolved here: both stay, and the assembler flags the
conflict in the context.
"""

from __future__ import annotations

import logging
import time

from dataclasses import replace
from typing import Sequence

from ragdx.errors import ConfigError
from ragdx.protocols import DeepRetriever, Store
from ragdx.types import (
    Candidate, DocStatus, DropCode, Dropped, Principal, Provenance, Query, Ranked, StageKind, StoredVersion,
    VersionFilter,
)

log = logging.getLogger("ragdx.access")

#: The reason :meth:`Governance.reason` gives for a version the principal may not read; such an
#: item is removed without a record.
UNREADABLE = "unreadable"

#: how many documents' versions governance keeps between questions
VERSIONS_MEMO = 10_000

#: The reason every candidate of a withheld question is dropped with (it names no source).
WITHHELD = "withheld: the best matches for this question are mostly sources the asker may not read"


def named_copy(store: Store, query: Query, doc_id: str, version: str, asked: VersionFilter,
               versions: dict[str, list[StoredVersion]] | None = None) -> tuple[str, str] | None:
    """The stored copy of this page in a version the question names, which the asker may read, as
    its id and version, when this page is another version's own document
    (:meth:`~ragdx.types.VersionFilter.twins`); None otherwise. ``versions``: documents' stored
    versions read so far, by id (filled in)."""
    for twin in asked.twins(doc_id, version):
        stored = versions.get(twin) if versions is not None else None
        if stored is None:
            stored = store.versions(twin)
            if versions is not None:
                versions[twin] = stored
        for v in stored:
            if asked.names(v.document.version) and query.principal.may_read(v.document.acl):
                return twin, v.document.version
    return None


class Governance:
    """Drops what may not reach the context, with a reason for each.

    Args:
        store: the store (the authority on versions, statuses and access).
        allow_superseded: keep superseded and expired versions (marked in the context).
        withhold: the retrieval channels whose best matches, searched with every access group,
            decide whether a question is withheld (empty: no question is).
        withhold_depth: how many best matches of each channel are counted.
    """

    kind = StageKind.GOVERNANCE

    def __init__(self, store: Store, *, allow_superseded: bool = False,
                 withhold: Sequence[DeepRetriever] = (), withhold_depth: int = 3,
                 name: str = "governance") -> None:
        if withhold_depth < 1:
            raise ConfigError(f"governance.withhold_depth must be at least 1, not {withhold_depth}")
        self.store, self.allow_superseded, self.name = store, allow_superseded, name
        self.withhold_depth = withhold_depth
        self.withhold = tuple(channel.deeper(withhold_depth) for channel in withhold)
        self._groups: tuple[int, tuple[str, ...]] | None = None
        self._versions: tuple[int, dict[str, list[StoredVersion]]] = (-1, {})

    def _every_group(self) -> tuple[str, ...]:
        """Every access group the store knows (read again when the index changed)."""
        version = self.store.index_version
        if self._groups is None or self._groups[0] != version:
            groups = sorted({g for acl in self.store.acl_table().values() for g in acl})
            self._groups = (version, tuple(groups))
        return self._groups[1]

    def withheld(self, query: Query) -> bool:
        """Whether the withholding channels' best matches over every source (``withhold_depth``
        of each, weighing ``1 / rank``) are, by more than half their weight, ones the asker may
        not read."""
        if not self.withhold:
            return False
        everyone = replace(query, principal=Principal(query.principal.user, self._every_group()))
        total = unreadable = 0.0
        for channel in self.withhold:
            for rank, item in enumerate(channel.run(everyone).items[:self.withhold_depth], start=1):
                total += 1 / rank
                if not self.store.readable(query.principal.groups, item.doc_id, item.version):
                    unreadable += 1 / rank
        return 2 * unreadable > total

    def reason(self, query: Query, item: Candidate, versions: dict[str, list[StoredVersion]],
               asked: VersionFilter | None = None) -> tuple[DropCode, str] | None:
        """Why an item may not be used, as a code and in words (:data:`UNREADABLE` when the
        principal may not read it), or None. ``asked``: the versions the question names (read
        from the store when not given)."""
        stored = versions.get(item.doc_id)
        if stored is None:  # read once per document (``setdefault`` would read it for every item)
            stored = versions[item.doc_id] = self.store.versions(item.doc_id)
        this = next((v for v in stored if v.document.version == item.version), None)
        if this is None:
            tomb = self.store.tombstone(item.doc_id)
            return DropCode.DELETED, (f"deleted: {item.doc_id} was deleted at {tomb[0]}" if tomb else
                                      f"deleted: version {item.version} of {item.doc_id} is no longer stored")
        if not query.principal.may_read(this.document.acl):
            return DropCode.ACL, UNREADABLE
        status = this.document.status
        if status is not DocStatus.CURRENT and not self.allow_superseded \
                and not (asked or self.asked(query)).names(item.version):  # asked for
            current = [v.document.version for v in stored if v.document.status is DocStatus.CURRENT
                       and query.principal.may_read(v.document.acl)]
            now = f"; the current version is {current[-1]}" if current else \
                "; no current version the asker may read"
            return DropCode.parse(status.value), f"{status.value}: version {item.version} of {item.doc_id}{now}"
        twin = named_copy(self.store, query, item.doc_id, item.version, asked or self.asked(query), versions)
        if twin is not None:
            return DropCode.OTHER_VERSION, (f"other version: {item.doc_id} is version {item.version}; the question "
                                            f"names {twin[1]}, which {twin[0]} holds")
        return None

    def _known_versions(self) -> dict[str, list[StoredVersion]]:
        """Each document's stored versions read so far, by doc id, kept across questions while the
        store's index version stays the same (any change to the store, a status or an access
        list, bumps it) and for at most :data:`VERSIONS_MEMO` documents."""
        version = self.store.index_version
        if self._versions[0] != version or len(self._versions[1]) > VERSIONS_MEMO:
            self._versions = (version, {})
        return self._versions[1]

    def asked(self, query: Query) -> VersionFilter:
        """The versions the question names, with the store's labels known."""
        return VersionFilter.for_question(query.question, known=self.store.version_labels())

    def run(self, query: Query, ranked: Ranked) -> Ranked:
        started = time.perf_counter()
        versions, asked = self._known_versions(), self.asked(query)
        kept, dropped = [], []
        withheld: bool | None = None  # asked once, and only when some item would pass
        for item in ranked.items:
            why = self.reason(query, item, versions, asked)
            if why is None:
                if withheld is None:
                    withheld = self.withheld(query)
                why = (DropCode.WITHHELD, WITHHELD) if withheld else None
            if why is not None and why[0] is DropCode.ACL:
                log.error("%s received %s (%s@%s) for query %s, which the principal may not read; "
                          "removed", self.name, item.chunk_id, item.doc_id, item.version, query.id)
                continue
            if why is not None:
                dropped.append(Dropped(item.chunk_id, item.doc_id, item.version, item.start, item.end,
                                       why[1], item.rank, why[0]))
                continue
            rank = len(kept) + 1
            kept.append(Candidate(item.chunk_id, item.doc_id, item.version, item.start, item.end, rank,
                                  item.score, item.history + (Provenance(self.name, rank, item.score),)))
        return Ranked(self.name, self.kind, tuple(kept), tuple(dropped),
                      {"allow_superseded": self.allow_superseded,
                       "withhold": [c.name for c in self.withhold], "withhold_depth": self.withhold_depth}, time.perf_counter() - started)

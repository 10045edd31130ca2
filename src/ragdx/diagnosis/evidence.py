"""Resolving a query's required evidence (labelled on source spans) against the store.

Each alternative of each required group becomes an exact span of a stored document version's
parsed text, and is checked against that version's chunks. What cannot be resolved says why:
the document is not stored (or was deleted), the source lacks the words (a ``source`` loss), or
the source has them and the parser lost them (a ``parsing`` loss).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ragdx.errors import InputError
from ragdx.ingest.quotes import Coverage, coverage, find_quote, in_source
from ragdx.protocols import Store
from ragdx.types import Alternative, ChoiceEnum, DocStatus, Query, Span


class EvidenceStatus(ChoiceEnum):
    """What resolving one required alternative against the store found."""

    RESOLVED = "resolved"                # an exact span of a stored version
    BY_ID = "by_id"                      # matched against trace items by id, not against the store
    NOT_STORED = "not_stored"            # no such document (or version) in the store
    DELETED = "deleted"                  # the document was deleted
    NOT_IN_SOURCE = "not_in_source"      # the raw source lacks the words: a source loss
    LOST_IN_PARSING = "lost_in_parsing"  # the raw source has them, the parsed text does not
    BY_TEXT = "by_text"                  # an imported trace's quote, found in its items' texts (no store)


RESOLVED, BY_ID, NOT_STORED = EvidenceStatus.RESOLVED, EvidenceStatus.BY_ID, EvidenceStatus.NOT_STORED
DELETED, NOT_IN_SOURCE, LOST_IN_PARSING = (EvidenceStatus.DELETED, EvidenceStatus.NOT_IN_SOURCE,
                                           EvidenceStatus.LOST_IN_PARSING)


@dataclass(frozen=True, slots=True)
class ResolvedAlternative:
    """One required alternative, resolved (or not) to a span, with its chunk coverage."""

    group: int
    index: int
    alternative: Alternative
    status: EvidenceStatus
    span: Span | None = None
    coverage: Coverage | None = None
    note: str = ""

    def describe(self) -> str:
        return f"group {self.group} alternative {self.index} ({self.alternative.describe()})"


@dataclass(frozen=True, slots=True)
class QueryEvidence:
    """A query's required evidence, resolved."""

    query_id: str
    alternatives: tuple[ResolvedAlternative, ...]

    def group(self, g: int) -> tuple[ResolvedAlternative, ...]:
        return tuple(a for a in self.alternatives if a.group == g)

    def problems(self) -> list[str]:
        """One message per alternative that could not be resolved to a span."""
        return [f"query {self.query_id!r}: {a.describe()}: {a.note}" for a in self.alternatives
                if a.status not in (RESOLVED, BY_ID)]


class EvidenceResolver:
    """Resolves required alternatives to spans of stored versions.

    An alternative pinned to a ``version`` is resolved in that version. Otherwise the current
    version is tried first, then older ones (newest first), and the note says when the words
    were found only in a non-current version.

    Args:
        store: the store holding the corpus.
    """

    def __init__(self, store: Store) -> None:
        self.store = store

    def run(self, query: Query, *, strict: bool = False,
            restricted: bool = False) -> QueryEvidence:
        """Resolve every alternative of the query's required groups.

        Args:
            query: the query.
            strict: raise on the first alternative that cannot be resolved.
            restricted: resolve ``restricted_required`` instead of ``required``.

        Raises:
            InputError: with ``strict``, naming the query id, the document and the quote.
        """
        groups = query.restricted_required if restricted else query.required
        resolved = tuple(self._resolve(g, i, alt) for g, group in enumerate(groups)
                         for i, alt in enumerate(group))
        evidence = QueryEvidence(query.id, resolved)
        if strict and evidence.problems():
            raise InputError(evidence.problems()[0])
        return evidence

    def _resolve(self, g: int, i: int, alt: Alternative) -> ResolvedAlternative:
        if alt.id is not None:
            return ResolvedAlternative(g, i, alt, BY_ID)
        assert alt.doc is not None
        versions = self.store.versions(alt.doc)
        if not versions:
            tomb = self.store.tombstone(alt.doc)
            if tomb:
                return ResolvedAlternative(g, i, alt, DELETED, note=f"document {alt.doc!r} was "
                                           f"deleted at {tomb[0]}")
            return ResolvedAlternative(g, i, alt, NOT_STORED, note=f"document {alt.doc!r} is not in "
                                       "the store")
        if alt.version is not None:
            versions = [v for v in versions if v.document.version == alt.version]
            if not versions:
                return ResolvedAlternative(g, i, alt, NOT_STORED, note=f"version {alt.version!r} of "
                                           f"{alt.doc!r} is not in the store")
        else:  # current versions first, each group newest first
            versions = sorted(versions, key=lambda v: (v.document.status is not DocStatus.CURRENT,
                                                       -v.seq))
        raw_hit = None
        for stored in versions:
            doc = stored.document
            raw, parsed = self.store.texts(doc.doc_id, doc.version)
            if alt.quote is not None:
                hits = find_quote(parsed, alt.quote)
                if not hits:
                    if raw_hit is None and in_source(raw, alt.quote):
                        raw_hit = doc.version
                    continue
                start, end = hits[0]
                note = f"{len(hits)} occurrences; the first is used" if len(hits) > 1 else ""
            else:
                assert alt.start is not None and alt.end is not None
                if alt.end > len(parsed):
                    return ResolvedAlternative(g, i, alt, NOT_STORED, note=(
                        f"offsets {alt.start}..{alt.end} lie beyond the parsed text of "
                        f"{doc.doc_id}@{doc.version} ({len(parsed)} characters)"))
                start, end, note = alt.start, alt.end, ""
            if doc.status is not DocStatus.CURRENT and alt.version is None:
                note = (note + "; " if note else "") + f"found only in the {doc.status.value} version " \
                    f"{doc.version}"
            span = Span(doc.doc_id, doc.version, start, end)
            return ResolvedAlternative(g, i, alt, RESOLVED, span,
                                       coverage(span, self.store.chunks(doc.doc_id, doc.version)), note)
        if raw_hit is not None:
            return ResolvedAlternative(g, i, alt, LOST_IN_PARSING, note=(
                f"the quote is in the raw source of {alt.doc}@{raw_hit} but not in its parsed text: "
                "the parser lost it"))
        return ResolvedAlternative(g, i, alt, NOT_IN_SOURCE, note=(
            f"quote {alt.quote!r} not found in document {alt.doc!r} "
            f"({'version ' + alt.version if alt.version else 'any stored version'})"))


def covering_items(alt: ResolvedAlternative, spans: dict[str, Span]) -> list[str]:
    """Ids of the items whose spans overlap an alternative's span (or whose id it names)."""
    if alt.status == BY_ID:
        return [i for i in spans if i == alt.alternative.id]
    if alt.span is None:
        return []
    return [i for i, span in spans.items() if span.overlaps(alt.span)]


def alternative_present(alt: ResolvedAlternative, spans: dict[str, Span]) -> bool:
    """Whether items hold an alternative whole: by id, or by spans that together cover it (a
    span cut across two adjacent items counts when both are there)."""
    if alt.status == BY_ID:
        return alt.alternative.id in spans
    return alt.span is not None and alt.span.covered_by(spans.values())


def groups_present(evidence: QueryEvidence, spans: dict[str, Span]) -> set[int]:
    """The required groups (AND) of which at least one alternative (OR) is held whole."""
    return {a.group for a in evidence.alternatives if alternative_present(a, spans)}


def relevant_items(evidence: QueryEvidence, spans: dict[str, Span]) -> set[str]:
    """Items that hold some part of some required alternative: the relevance labels of a query."""
    return {i for a in evidence.alternatives for i in covering_items(a, spans)}


def evidence_records(store: Store, queries: Sequence[Query], strict: bool = False) -> list[dict]:
    """One JSON record per required alternative of each query (and of its restricted evidence):
    what ``ragdx evidence --json`` prints. With ``strict``, an unresolved quote raises."""
    resolver = EvidenceResolver(store)
    records = []
    for query in queries:
        for restricted in (False, True):
            evidence = resolver.run(query, strict=strict, restricted=restricted)
            for alt in evidence.alternatives:
                cov = alt.coverage
                records.append({
                    "query_id": query.id, "restricted": restricted, "group": alt.group,
                    "alternative": alt.index, "doc": alt.alternative.doc,
                    "quote": alt.alternative.quote, "status": alt.status,
                    "span": None if alt.span is None else {
                        "doc": alt.span.doc_id, "version": alt.span.version,
                        "start": alt.span.start, "end": alt.span.end},
                    "coverage": cov.status if cov else None,
                    "chunks_full": list(cov.full) if cov else [],
                    "chunks_partial": list(cov.partial) if cov else [], "note": alt.note})
    return records

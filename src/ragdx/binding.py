"""Answers bound to their evidence: what an answer cites, and whether that still holds.

An answer is only as good as the evidence it cites. :func:`bind_evidence` records, for every
context unit the answer cites, the document version and the span (character offsets into the
version's parsed text), the SHA-256 of the span's text and the version's status at answer time,
with the store's index version. :func:`recheck` later asks the store, through the
:class:`~ragdx.protocols.Store` protocol only (SQLite and PostgreSQL alike), whether each cited
span still stands for the answer's principal, and returns a frozen :class:`Recheck`: ``valid``,
or ``evidence_changed_or_expired`` with each span that changed and why (docs/formats.md,
"Evidence bindings and rechecks").

``ragdx recheck`` and the recovery of a durable run's drafts (:mod:`ragdx.experiments.durable`)
both call :func:`recheck`; so should anything that serves a saved or cached answer.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Mapping

from ragdx.errors import InputError
from ragdx.protocols import Store
from ragdx.types import Answer, ChoiceEnum, Context, DocStatus, Principal

__all__ = ["SpanChange", "RecheckStatus", "CitedSpan", "EvidenceBinding", "ChangedSpan", "Recheck",
           "bind_evidence", "recheck"]


class SpanChange(ChoiceEnum):
    """Why a cited span no longer stands, most decisive first (a span reports the first that holds)."""

    DELETED = "deleted"          # the version is no longer stored (the document was deleted)
    UNREADABLE = "unreadable"    # the answer's principal may no longer read the version
    CHANGED = "changed"          # the span's text is not the text the answer cited (re-parsed)
    EXPIRED = "expired"          # the version was marked expired since
    SUPERSEDED = "superseded"    # the version was current and a newer one replaced it


class RecheckStatus(ChoiceEnum):
    """Whether an answer's cited evidence still stands."""

    VALID = "valid"
    CHANGED = "evidence_changed_or_expired"


@dataclass(frozen=True, slots=True)
class CitedSpan:
    """One span an answer cites: the context unit, the document version, the character offsets
    into its parsed text, the SHA-256 of that text, and the version's status when answered."""

    unit: str
    doc_id: str
    version: str
    start: int
    end: int
    sha256: str
    status: DocStatus = DocStatus.CURRENT

    def to_dict(self) -> dict[str, Any]:
        return {"unit": self.unit, "doc": self.doc_id, "version": self.version, "start": self.start,
                "end": self.end, "sha256": self.sha256, "status": self.status.value}


@dataclass(frozen=True, slots=True)
class EvidenceBinding:
    """What an answer was built on: the store's index version, who asked, and the spans cited."""

    index_version: int
    principal: Principal
    cited: tuple[CitedSpan, ...]

    def to_dict(self) -> dict[str, Any]:
        """The ``evidence`` object of a trace (the principal is the trace's own)."""
        return {"index_version": self.index_version, "cited": [c.to_dict() for c in self.cited]}

    @classmethod
    def from_trace(cls, trace: Mapping[str, Any], where: str = "the answer") -> "EvidenceBinding":
        """The binding recorded in a trace's JSON (``ragdx ask --json``, a ``traces.jsonl`` line).

        Raises:
            InputError: naming ``where`` and the missing or malformed field.
        """
        if not isinstance(trace, Mapping):
            raise InputError(f"{where}: expected a JSON object (a trace from 'ragdx ask --json')")
        evidence = trace.get("evidence")
        if not isinstance(evidence, Mapping):
            raise InputError(f"{where}: no 'evidence' object: not an answer from 'ragdx ask --json' "
                             "(or one written before answers recorded their evidence)", field="evidence")
        principal = trace.get("principal")
        if not isinstance(principal, Mapping) or not isinstance(principal.get("groups"), list) or not all(
                isinstance(g, str) for g in principal["groups"]) or not isinstance(principal.get("user"), str):
            raise InputError(f"{where}: 'principal' must be {{\"user\": str, \"groups\": [str]}}, "
                             f"not {principal!r}", field="principal")
        version = evidence.get("index_version")
        if not isinstance(version, int) or isinstance(version, bool):
            raise InputError(f"{where}: evidence.index_version must be an integer, not {version!r}",
                             field="evidence.index_version")
        cited = evidence.get("cited")
        if not isinstance(cited, list):
            raise InputError(f"{where}: evidence.cited must be a list, not {cited!r}", field="evidence.cited")
        return cls(version, Principal(principal["user"], tuple(principal["groups"])),
                   tuple(_cited(c, f"{where}: evidence.cited[{n}]") for n, c in enumerate(cited)))


def _cited(obj: Any, where: str) -> CitedSpan:
    if not isinstance(obj, Mapping):
        raise InputError(f"{where}: expected an object, not {obj!r}")
    for name, kind in (("unit", str), ("doc", str), ("version", str), ("start", int), ("end", int),
                       ("sha256", str), ("status", str)):
        if not isinstance(obj.get(name), kind) or isinstance(obj.get(name), bool):
            raise InputError(f"{where}.{name} must be a {kind.__name__}, not {obj.get(name)!r}",
                             field=f"{where}.{name}")
    return CitedSpan(obj["unit"], obj["doc"], obj["version"], obj["start"], obj["end"], obj["sha256"],
                     DocStatus.parse(obj["status"], what=f"{where}.status"))


def span_hash(text: str) -> str:
    """The SHA-256 of a span's text (hex), as bindings record it."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def bind_evidence(store: Store, principal: Principal, context: Context | None, answer: Answer | None,
                  index_version: int | None = None) -> EvidenceBinding:
    """Bind an answer to the spans it cites, as the store holds them now (call it right after
    the answer is made). An abstention, or an answer that cites nothing, binds to no span.

    Args:
        index_version: the store's index version read *before* the answer was computed (so a
            change made while it was computed makes the next recheck look at every span);
            default: the version now.
    """
    index_version = store.index_version if index_version is None else index_version
    cited: dict[tuple[str, str, int, int], CitedSpan] = {}
    texts: dict[tuple[str, str], str] = {}
    for unit_id in answer.citations if answer is not None and context is not None else ():
        unit = context.unit(unit_id)
        if unit is None or (unit.doc_id, unit.version, unit.start, unit.end) in cited:
            continue
        key = (unit.doc_id, unit.version)
        stored = store.version(*key)
        if stored is None:  # deleted while the question was answered: bind what the unit held
            text, status = unit.text, DocStatus.CURRENT
        else:
            if key not in texts:
                texts[key] = store.texts(*key)[1]
            text, status = texts[key][unit.start:unit.end], stored.document.status
        cited[(*key, unit.start, unit.end)] = CitedSpan(unit.id, unit.doc_id, unit.version, unit.start,
                                                        unit.end, span_hash(text), status)
    return EvidenceBinding(index_version, principal, tuple(cited.values()))


@dataclass(frozen=True, slots=True)
class ChangedSpan:
    """A cited span that no longer stands, why, and what the store says now."""

    span: CitedSpan
    reason: SpanChange
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return self.span.to_dict() | {"reason": self.reason.value, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class Recheck:
    """The result of rechecking an answer's evidence against a store."""

    status: RecheckStatus
    bound_index_version: int
    index_version: int
    cited: int
    changed: tuple[ChangedSpan, ...]

    @property
    def valid(self) -> bool:
        return self.status is RecheckStatus.VALID

    def describe(self) -> str:
        """One line: the status and each changed span with its reason."""
        if self.valid:
            return f"{self.status.value}: {self.cited} cited span(s) unchanged"
        return f"{self.status.value}: " + "; ".join(
            f"{c.span.doc_id}@{c.span.version} [{c.span.start}:{c.span.end}] {c.reason.value} ({c.detail})"
            for c in self.changed)

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status.value, "bound_index_version": self.bound_index_version,
                "index_version": self.index_version, "cited": self.cited,
                "changed": [c.to_dict() for c in self.changed]}


def recheck(store: Store, binding: EvidenceBinding) -> Recheck:
    """Whether every span ``binding`` cites still stands for its principal in ``store``.

    The index version changes with every change a query could see, so an unchanged one means
    valid without a look at the spans; otherwise each span is checked in :class:`SpanChange`'s
    order: still stored, still readable by the principal, the same text, not expired since, not
    superseded since.
    """
    now = store.index_version
    changed: list[ChangedSpan] = []
    if now != binding.index_version:
        texts: dict[tuple[str, str], str] = {}
        for span in binding.cited:
            found = _change(store, binding.principal, span, texts)
            if found is not None:
                changed.append(ChangedSpan(span, *found))
    return Recheck(RecheckStatus.CHANGED if changed else RecheckStatus.VALID, binding.index_version, now,
                   len(binding.cited), tuple(changed))


def _change(store: Store, principal: Principal, span: CitedSpan,
            texts: dict[tuple[str, str], str]) -> tuple[SpanChange, str] | None:
    key = (span.doc_id, span.version)
    stored = store.version(*key)
    if stored is None:
        tomb = store.tombstone(span.doc_id)
        return SpanChange.DELETED, (f"deleted at {tomb[0]}" if tomb else "no longer stored")
    if not store.readable(principal.groups, *key):
        return SpanChange.UNREADABLE, (f"groups {list(principal.groups)} may not read it "
                                       f"(acl {list(stored.document.acl)})")
    if key not in texts:
        texts[key] = store.texts(*key)[1]
    if span_hash(texts[key][span.start:span.end]) != span.sha256:
        return SpanChange.CHANGED, "the text at these offsets differs (the version was re-parsed)"
    status = stored.document.status
    if status is DocStatus.EXPIRED and span.status is not DocStatus.EXPIRED:
        return SpanChange.EXPIRED, "the version is now expired"
    if status is DocStatus.SUPERSEDED and span.status is DocStatus.CURRENT:
        current = [v.document.version for v in store.versions(span.doc_id)
                   if v.document.status is DocStatus.CURRENT]
        return SpanChange.SUPERSEDED, (f"the current version is {', '.join(current)}" if current
                                       else "no version is current now")
    return None


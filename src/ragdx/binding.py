"""Answers bound to their evidence: what an answer cites, and whether that still holds.

An answer is only as good as the evidence it cites. :func:`bind_evidence` records, for every
context unit the answer cites, the document version and the span (character offsets into the
version's parsed text), the SHA-256 of the span's text and the version's status at answer time,
with the store's identity: its id (random, made with the store, never reused) and its index
version. :func:`recheck` later asks the store, through the :class:`~ragdx.protocols.Store`
protocol only (SQLite and PostgreSQL alike), whether each cited span still stands for the
answer's principal, and returns a frozen :class:`Recheck`: ``valid``, or
``evidence_changed_or_expired`` with each span that changed and why (docs/formats.md, "Evidence
bindings and rechecks"). A binding read from a file is checked field by field first
(:meth:`EvidenceBinding.from_trace`): what a recheck cannot trust is refused, never guessed.

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

    MISSING = "missing"          # this store never held the version (no such document or version)
    DELETED = "deleted"          # the version is no longer stored (the document was deleted)
    UNREADABLE = "unreadable"    # the answer's principal may no longer read the version
    CHANGED = "changed"          # the span's text is not the text the answer cited (re-parsed, or altered)
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
    """What an answer was built on: the store's index version, who asked, the spans cited, and
    the store's id (None: a store made before ids, or an answer written before bindings had one)."""

    index_version: int
    principal: Principal
    cited: tuple[CitedSpan, ...]
    store_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The ``evidence`` object of a trace (the principal is the trace's own)."""
        return {"store_id": self.store_id, "index_version": self.index_version,
                "cited": [c.to_dict() for c in self.cited]}

    @classmethod
    def from_trace(cls, trace: Mapping[str, Any], where: str = "the answer") -> "EvidenceBinding":
        """The binding recorded in a trace's JSON (``ragdx ask --json``, a ``traces.jsonl`` line),
        every field checked: types, strings that are text (no lone surrogate), ids not empty,
        offsets ``0 <= start < end``, a SHA-256 of 64 hex digits, a known status.

        Raises:
            InputError: naming ``where``, the field (``evidence.cited[2].start``) and the bad value.
        """
        if not isinstance(trace, Mapping):
            raise InputError(f"expected a JSON object (a trace from 'ragdx ask --json'), not {_shown(trace)}",
                             file=where)
        evidence = trace.get("evidence")
        if not isinstance(evidence, Mapping):
            raise InputError("no 'evidence' object: not an answer from 'ragdx ask --json' "
                             "(or one written before answers recorded their evidence)", file=where)
        principal = trace.get("principal")
        if not isinstance(principal, Mapping) or not isinstance(principal.get("groups"), list):
            raise InputError(f"principal must be {{\"user\": str, \"groups\": [str]}}, not {_shown(principal)}",
                             file=where)
        user = _text(principal.get("user"), where, "principal.user", empty=True)
        groups = tuple(_text(g, where, f"principal.groups[{n}]") for n, g in enumerate(principal["groups"]))
        store_id = evidence.get("store_id")  # ragdx's stores: 32 hex digits; another store's: any id
        if store_id is not None:
            store_id = _text(store_id, where, "evidence.store_id")
        version = _count(evidence.get("index_version"), where, "evidence.index_version")
        cited = evidence.get("cited")
        if not isinstance(cited, list):
            raise InputError(f"evidence.cited must be a list, not {_shown(cited)}", file=where)
        return cls(version, Principal(user, groups),
                   tuple(_cited(c, where, f"evidence.cited[{n}]") for n, c in enumerate(cited)), store_id)


_HEX = frozenset("0123456789abcdef")


def _shown(value: Any) -> str:
    """A bad value as a message shows it: its repr (which escapes lone surrogates), cut short."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}... ({len(text)} characters)"


def _text(value: Any, where: str, field: str, *, empty: bool = False) -> str:
    """A string field that is text (UTF-8 can encode it) and, unless ``empty``, not empty."""
    if not isinstance(value, str):
        raise InputError(f"{field} must be a str, not {_shown(value)}", file=where)
    try:  # a lone surrogate ("\ud800" in JSON) is no character: SQLite and UTF-8 refuse it
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(f"{field}: not valid Unicode: a lone surrogate {value[exc.start]!r} at character "
                         f"{exc.start}", file=where) from None
    if not value and not empty:
        raise InputError(f"{field}: must not be empty", file=where)
    return value


def _count(value: Any, where: str, field: str) -> int:
    """An integer field (not a bool) that is not negative."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise InputError(f"{field} must be an int, not {_shown(value)}", file=where)
    if value < 0:
        raise InputError(f"{field}: {value} is negative", file=where)
    return value


def _cited(obj: Any, where: str, field: str) -> CitedSpan:
    if not isinstance(obj, Mapping):
        raise InputError(f"{field}: expected an object, not {_shown(obj)}", file=where)
    unit, doc, version = (_text(obj.get(k), where, f"{field}.{k}") for k in ("unit", "doc", "version"))
    start, end = (_count(obj.get(k), where, f"{field}.{k}") for k in ("start", "end"))
    if end <= start:
        raise InputError(f"{field}.end: {end} is not after start {start} (a span is start <= i < end, "
                         "never empty)", file=where)
    sha = obj.get("sha256")
    if not isinstance(sha, str):
        raise InputError(f"{field}.sha256 must be a str, not {_shown(sha)}", file=where)
    if len(sha) != 64 or not set(sha) <= _HEX:
        raise InputError(f"{field}.sha256: {_shown(sha)} is not a SHA-256 (64 lowercase hex digits)",
                         file=where)
    status = obj.get("status")
    if not (isinstance(status, str) and status in _STATUSES):
        raise InputError(f"{field}.status: {_shown(status)} is not one of {', '.join(map(repr, _STATUSES))}",
                         file=where)
    return CitedSpan(unit, doc, version, start, end, sha, DocStatus(status))


_STATUSES = tuple(s.value for s in DocStatus)


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
    store_id = store.store_id
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
    return EvidenceBinding(index_version, principal, tuple(cited.values()), store_id)


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
    """The result of rechecking an answer's evidence against a store: the status, the store's
    index version and id then and now, how many spans were cited, the changed ones, and whether
    the spans were read (``full``) or the shortcut of an unchanged store answered."""

    status: RecheckStatus
    bound_index_version: int
    index_version: int
    cited: int
    changed: tuple[ChangedSpan, ...]
    store_id: str | None = None
    bound_store_id: str | None = None
    full: bool = True

    @property
    def valid(self) -> bool:
        return self.status is RecheckStatus.VALID

    @property
    def other_store(self) -> bool:
        """Whether the answer was bound to another store than this one (a store rebuilt at the
        same path is another store)."""
        return self.bound_store_id is not None and self.bound_store_id != self.store_id

    def describe(self) -> str:
        """One line: the status and each changed span with its reason."""
        store = (f" (in store {self.store_id}; the answer was bound to store {self.bound_store_id})"
                 if self.other_store else "")
        if self.valid:
            return f"{self.status.value}: {self.cited} cited span(s) unchanged{store}"
        return f"{self.status.value}: " + "; ".join(
            f"{c.span.doc_id}@{c.span.version} [{c.span.start}:{c.span.end}] {c.reason.value} ({c.detail})"
            for c in self.changed) + store

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status.value, "store_id": self.store_id, "bound_store_id": self.bound_store_id,
                "bound_index_version": self.bound_index_version, "index_version": self.index_version,
                "checked": "full" if self.full else "shortcut", "cited": self.cited,
                "changed": [c.to_dict() for c in self.changed]}


def recheck(store: Store, binding: EvidenceBinding, *, shortcut: bool = False,
            where: str = "the answer") -> Recheck:
    """Whether every span ``binding`` cites still stands for its principal in ``store``.

    Each span is checked in :class:`SpanChange`'s order: stored in this store at all, not
    deleted, readable by the principal, the SHA-256 of the text at its offsets the one cited,
    not expired since, not superseded since. The first that fails is the span's reason.

    Args:
        shortcut: when the store's id and index version are both the binding's, nothing a query
            could see has changed since the answer, and the spans are not read. Only for a
            binding ragdx made and kept itself (the answer cache's): a binding read from a file
            could claim any spans with the right id and version.
        where: the answer's file, for errors.

    Raises:
        InputError: the binding cannot be this store's although it claims to be (same store id
            and index version, and a span ends past its version's text; an index version ahead
            of the store's), naming ``where`` and the field.
    """
    now, store_id = store.index_version, store.store_id
    own = binding.store_id is not None and binding.store_id == store_id
    unchanged = own and binding.index_version == now
    if shortcut and unchanged:
        return Recheck(RecheckStatus.VALID, binding.index_version, now, len(binding.cited), (), store_id,
                       binding.store_id, full=False)
    if own and binding.index_version > now:
        raise InputError(f"evidence.index_version: {binding.index_version} is ahead of the store's ({now}): "
                         "not an answer from this store", file=where)
    changed: list[ChangedSpan] = []
    texts: dict[tuple[str, str], str] = {}
    for n, span in enumerate(binding.cited):
        found = _change(store, binding.principal, span, texts)
        text = texts.get((span.doc_id, span.version))
        if unchanged and text is not None and span.end > len(text):
            # the text is the one the answer was made from, so its offsets are wrong
            raise InputError(f"evidence.cited[{n}].end: {span.end} is past the end of {span.doc_id}@"
                             f"{span.version}'s text ({len(text)} characters)", file=where)
        if found is not None:
            changed.append(ChangedSpan(span, *found))
    return Recheck(RecheckStatus.CHANGED if changed else RecheckStatus.VALID, binding.index_version, now,
                   len(binding.cited), tuple(changed), store_id, binding.store_id)


def _change(store: Store, principal: Principal, span: CitedSpan,
            texts: dict[tuple[str, str], str]) -> tuple[SpanChange, str] | None:
    key = (span.doc_id, span.version)
    stored = store.version(*key)
    if stored is None:
        tomb = store.tombstone(span.doc_id)
        if tomb is not None and span.version in tomb[1]:
            return SpanChange.DELETED, f"deleted at {tomb[0]}"
        if tomb is not None:
            return SpanChange.MISSING, (f"the document, deleted at {tomb[0]}, never had this version "
                                        f"(it had {', '.join(map(str, tomb[1]))})")
        others = [v.document.version for v in store.versions(span.doc_id)]
        return SpanChange.MISSING, (f"no such version in this store (it holds {', '.join(others)})" if others
                                    else "no such document in this store")
    if not store.readable(principal.groups, *key):
        return SpanChange.UNREADABLE, (f"groups {list(principal.groups)} may not read it "
                                       f"(acl {list(stored.document.acl)})")
    if key not in texts:
        texts[key] = store.texts(*key)[1]
    text = texts[key]
    if span.end > len(text):
        return SpanChange.CHANGED, f"the version's text is now {len(text)} characters, and the span ends at {span.end}"
    if span_hash(text[span.start:span.end]) != span.sha256:
        return SpanChange.CHANGED, ("the SHA-256 of the text at these offsets is not the one cited (the "
                                    "version was re-parsed, or the answer was altered)")
    status = stored.document.status
    if status is DocStatus.EXPIRED and span.status is not DocStatus.EXPIRED:
        return SpanChange.EXPIRED, "the version is now expired"
    if status is DocStatus.SUPERSEDED and span.status is DocStatus.CURRENT:
        current = [v.document.version for v in store.versions(span.doc_id)
                   if v.document.status is DocStatus.CURRENT]
        return SpanChange.SUPERSEDED, (f"the current version is {', '.join(current)}" if current
                                       else "no version is current now")
    return None

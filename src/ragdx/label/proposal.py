"""What ``ragdx label`` proposes, and how it is written (docs/formats.md): where a claim is
stated (:class:`Place`), each claim of the reference and its best place (:class:`ReferenceClaim`),
a required group and its alternatives (:class:`ProposedGroup`), and one case's proposal
(:class:`Proposal`) as a query-set line with its scores and reasons in ``metadata.label``.

Every on-disk field of a proposal is written here and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from ragdx.label.readers import EvalCase
from ragdx.queryset import parse_query
from ragdx.types import Principal, Query


@dataclass(frozen=True, slots=True)
class Place:
    """Where a claim is stated: ``[start, end)`` of a document version's parsed text."""

    doc: str
    version: str
    start: int
    end: int
    text: str
    current: bool = True

    def alternative(self) -> dict[str, Any]:
        return {"doc": self.doc, "version": self.version, "quote": self.text}


@dataclass(frozen=True, slots=True)
class ReferenceClaim:
    """One claim of the reference answer and the best place found stating it (None: none does)."""

    text: str
    score: float
    place: Place | None
    reason: str
    runner_up: float = 0.0
    also: tuple[Place, ...] = ()  # other pages stating it, scoring within ``tie`` of the best
    quoted: bool = False  # its place holds its words verbatim (whitespace aside)


@dataclass(frozen=True, slots=True)
class ProposedGroup:
    """One required group: the claims it stands for, its places (an OR), its score and why."""

    claims: tuple[str, ...]
    places: tuple[Place, ...]
    score: float
    reason: str
    needs_review: bool

    def to_dict(self) -> dict[str, Any]:
        return {"claims": list(self.claims), "score": round(self.score, 4), "reason": self.reason,
                "needs_review": self.needs_review, "alternatives": [p.alternative() for p in self.places]}


@dataclass(frozen=True, slots=True)
class Proposal:
    """What ``ragdx label`` proposes for one case: the groups (an AND), the claims no source states,
    and whether a person should look at it."""

    case: EvalCase
    groups: tuple[ProposedGroup, ...]
    unsupported: tuple[ReferenceClaim, ...] = ()
    note: str = ""
    restricted: bool = False
    candidates: tuple[tuple[Place, ...], ...] = field(default=())  # per group: other places to choose from
    weak: tuple[ProposedGroup, ...] = ()  # groups left out: below ``weak`` while another group is not
    # the reference says the sources do not answer (:func:`ragdx.label.claims.abstains`), and no source
    # names what it asks
    abstains: bool = False
    review: bool = False  # a person should look whatever the scores (the reference was a bare reply)

    @property
    def answerable(self) -> bool:
        return bool(self.groups) and not self.restricted

    @property
    def needs_review(self) -> bool:
        return self.review or bool(self.unsupported) or bool(self.weak) or any(g.needs_review for g in self.groups) \
            or not (self.groups or self.abstains)

    def to_line(self, groups: Sequence[ProposedGroup] | None = None) -> dict[str, Any]:
        """The proposal as a query-set line (docs/formats.md); the scores and reasons in
        ``metadata.label``."""
        groups = self.groups if groups is None else groups
        required = [[p.alternative() for p in g.places] for g in groups]
        principal = self.case.principal or Principal(user="anonymous", groups=("public",))
        line: dict[str, Any] = {"id": self.case.id, "question": self.case.question,
                                "principal": {"user": principal.user, "groups": list(principal.groups)},
                                "answerable": bool(groups) and not self.restricted,
                                "required": [] if self.restricted else required}
        if self.restricted:
            line["restricted_required"] = required
        if self.case.reference is not None:
            line["answer"] = self.case.reference
        if self.case.tags:
            line["tags"] = list(self.case.tags)
        line["metadata"] = {"label": {
            "needs_review": self.needs_review, "note": self.note,
            "groups": [g.to_dict() for g in groups],
            "unsupported_reference": [{"claim": c.text, "score": round(c.score, 4), "reason": c.reason}
                                      for c in self.unsupported],
            "candidates": [[p.alternative() for p in c] for c in self.candidates],
            "weak_groups": [g.to_dict() for g in self.weak]},
            "source": {"file": self.case.file, "line": self.case.line}}
        return line

    def query(self) -> Query:
        """The proposal as a validated query."""
        return parse_query(self.to_line(), self.case.file or "proposal", self.case.line or None)

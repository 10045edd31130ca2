"""The diagnosis's records: an outcome, the losses, which groups each stage held, and the
diagnosis of one query as ``diagnosis.jsonl`` writes it (docs/diagnosis.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ragdx.types import ChoiceEnum, StageKind

__all__ = ["Outcome", "GOOD_OUTCOMES", "Loss", "StagePresence", "Diagnosis"]


class Outcome(ChoiceEnum):
    """What happened to one query (docs/diagnosis.md, "Outcomes")."""

    SUPPORTED = "supported"                    # answerable; every group in the context; claims supported and cited
    INCOMPLETE = "incomplete"                  # claims supported, but a required group is missing
    UNSUPPORTED = "unsupported"                # a claim its cited evidence does not support
    WRONG_ABSTENTION = "wrong_abstention"      # answerable, but the system abstained
    CORRECT_ABSTENTION = "correct_abstention"  # not answerable for this principal, and it abstained
    HALLUCINATION = "hallucination"            # not answerable, but the system answered
    LEAK = "leak"                              # content the principal may not read reached the context or answer
    STALE = "stale"                            # a superseded or expired version reached the context or a citation
    UNVERIFIED = "unverified"                  # answered, but nothing can check it (no citations, verdicts or context text)
    NO_ANSWER = "no_answer"                    # the trace holds no answer (an import that lost the generator's span)
    NO_TRACE = "no_trace"                      # no trace was recorded or imported for the query


GOOD_OUTCOMES = frozenset({Outcome.SUPPORTED, Outcome.CORRECT_ABSTENTION})
"""The outcomes that count as success."""


@dataclass(frozen=True, slots=True)
class Loss:
    """Where one required group was lost, and why (``stage`` may be given as its string)."""

    group: int
    stage: StageKind
    reason: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "stage", StageKind.parse(self.stage, what="a loss's stage"))

    def to_dict(self) -> dict:
        return {"group": self.group, "stage": self.stage.value, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class StagePresence:
    """The required groups one stage held (for retrieval: the channels' union, and each channel)."""

    name: str
    kind: StageKind
    groups_present: tuple[int, ...]
    channels: tuple[tuple[str, tuple[int, ...]], ...] = ()

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"groups_present": list(self.groups_present), "kind": self.kind.value}
        if self.channels:
            out["channels"] = {name: list(groups) for name, groups in self.channels}
        return out


@dataclass(frozen=True, slots=True)
class CheckedClaim:
    """A claim of the answer with its verdict and the reason, as the diagnosis judged it."""

    text: str
    citations: tuple[str, ...]
    supported: bool | None
    reason: str = ""

    def to_dict(self) -> dict:
        return {"text": self.text, "citations": list(self.citations), "supported": self.supported,
                "reason": self.reason}


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """The diagnosis of one query (one line of ``diagnosis.jsonl``)."""

    id: str
    outcome: Outcome
    first_failure: StageKind | None
    lost: tuple[Loss, ...]
    stages: tuple[StagePresence, ...]
    hypothesis: str
    notes: tuple[str, ...] = ()
    oracle: Mapping[str, Any] | None = None  # with ``ragdx run --oracle context``: the gold-context outcome
    # the answer's claims with their verdicts and reasons, when ragdx checked them itself (an
    # imported answer without verdicts) or the answer is unsupported: the claim-level why
    claims: tuple[CheckedClaim, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "outcome", Outcome.parse(self.outcome, what="outcome"))
        if self.first_failure is not None:
            object.__setattr__(self, "first_failure", StageKind.parse(self.first_failure, what="first_failure"))

    def stage(self, name: str) -> StagePresence | None:
        return next((s for s in self.stages if s.name == name), None)

    def to_dict(self) -> dict:
        out = {"id": self.id, "outcome": self.outcome.value,
               "first_failure": self.first_failure.value if self.first_failure else None,
               "lost": [loss.to_dict() for loss in self.lost],
               "stages": {s.name: s.to_dict() for s in self.stages}, "hypothesis": self.hypothesis,
               "notes": list(self.notes)}
        if self.oracle is not None:
            out["oracle"] = dict(self.oracle)
        out["claims"] = [c.to_dict() for c in self.claims]  # always there, as notes are: one schema per line
        return out

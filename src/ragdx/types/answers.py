"""An answer, its claims with their citations, and the verifier's verdict on each claim.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ragdx.types.choices import ChoiceEnum
from ragdx.types.corpus import Span
from ragdx.types.stages import StageKind


@dataclass(frozen=True, slots=True)
class Claim:
    """One statement of an answer and the context units it cites."""

    text: str
    citations: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Usage:
    """What generating cost: tokens, money, attempts and time."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    attempts: int = 1
    seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class Answer:
    """A generated answer: its text, claims with citations, whether it abstained and, if so,
    what is missing; the model and what it cost."""

    stage: str
    text: str
    claims: tuple[Claim, ...]
    abstained: bool
    missing: tuple[str, ...] = ()
    model: str = ""
    usage: Usage = Usage()
    config: Mapping[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    kind: StageKind = StageKind.GENERATION

    @property
    def citations(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for claim in self.claims:
            for c in claim.citations:
                seen.setdefault(c, None)
        return tuple(seen)


class Verdict(ChoiceEnum):
    """Whether a claim's cited evidence supports it."""

    SUPPORTED = "supported"
    UNSUPPORTED = "unsupported"
    UNCERTAIN = "uncertain"


@dataclass(frozen=True, slots=True)
class ClaimCheck:
    """The verdict on one claim, with the reason in words, the evidence it was judged on, and
    where in the cited units its support lies (spans of the parsed text; empty when the claim
    cites nothing that could be read)."""

    claim: Claim
    verdict: Verdict
    reason: str
    evidence: str = ""
    support: tuple[Span, ...] = ()


@dataclass(frozen=True, slots=True)
class Verification:
    """Every claim's verdict, and the checker that gave them."""

    stage: str
    checks: tuple[ClaimCheck, ...]
    checker: str
    config: Mapping[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    kind: StageKind = StageKind.CITATION

    @property
    def supported(self) -> bool:
        return bool(self.checks) and all(c.verdict is Verdict.SUPPORTED for c in self.checks)

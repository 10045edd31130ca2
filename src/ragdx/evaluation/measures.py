"""Ranking measures: what is measured (a :class:`Measure`, parsed from ``"nDCG@10"``) kept apart
from how it is computed (:func:`evaluate`), in the manner of ir_measures.

Definitions follow trec_eval (and so pytrec_eval, against which they are tested to 1e-9):

- ``P@k``: relevant documents in the top k, divided by k (even when fewer were retrieved);
- ``R@k``: relevant documents in the top k, divided by all relevant documents;
- ``RR`` (``RR@k``): 1 / the rank of the first relevant document (0 if none);
- ``nDCG@k``: DCG with gain = graded relevance and discount log2(rank + 1), over the ideal DCG
  (Järvelin & Kekäläinen, "Cumulated gain-based evaluation of IR techniques", TOIS 2002);
- ``AP`` (``AP@k``): mean of the precision at each relevant document's rank, over all relevant
  documents (MAP is its mean over queries);
- ``Hit@k``: 1 if any relevant document is in the top k.

A run's documents are ranked by score, ties broken by document id in reverse order, as
trec_eval does. A query of the qrels missing from the run scores 0 on every measure and is
counted, never dropped; a query without relevant documents scores 0 too. No value is NaN.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Iterable, Mapping

from ragdx.errors import ConfigError

Run = Mapping[str, Mapping[str, float]]      # query id -> document id -> score
Qrels = Mapping[str, Mapping[str, int]]      # query id -> document id -> graded relevance

MEASURES = ("P", "R", "RR", "nDCG", "AP", "Hit")
_CUTOFF_REQUIRED = {"P", "R", "Hit"}
_PATTERN = re.compile(r"^(P|R|RR|nDCG|AP|MAP|Hit)(?:@(\d+))?$")


@dataclass(frozen=True, slots=True)
class Measure:
    """A ranking measure and its cut-off (``None``: the whole ranking)."""

    name: str
    cutoff: int | None = None

    def __str__(self) -> str:
        return self.name + (f"@{self.cutoff}" if self.cutoff is not None else "")


def parse_measure(text: str) -> Measure:
    """``"nDCG@10"`` -> ``Measure("nDCG", 10)``; ``MAP`` is ``AP``.

    Raises:
        ConfigError: not a measure, naming the valid forms.
    """
    match = _PATTERN.match(text.strip())
    if not match:
        raise ConfigError(f"unknown measure {text!r}; valid: P@k, R@k, RR[@k], nDCG[@k], AP[@k] (or MAP), "
                          "Hit@k")
    name = "AP" if match.group(1) == "MAP" else match.group(1)
    cutoff = int(match.group(2)) if match.group(2) else None
    if cutoff is not None and cutoff < 1:
        raise ConfigError(f"measure {text!r}: the cut-off must be at least 1")
    if name in _CUTOFF_REQUIRED and cutoff is None:
        raise ConfigError(f"measure {text!r} needs a cut-off, e.g. {name}@10")
    return Measure(name, cutoff)


def ranking(scores: Mapping[str, float]) -> list[str]:
    """Document ids by score descending; ties by document id descending (trec_eval's order)."""
    return [doc for doc, _ in sorted(scores.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)]


def _value(measure: Measure, ranked: list[str], judged: Mapping[str, int]) -> float:
    relevant = {d for d, r in judged.items() if r > 0}
    if not relevant:
        return 0.0
    top = ranked[: measure.cutoff] if measure.cutoff is not None else ranked
    hits = [d in relevant for d in top]
    if measure.name == "P":
        return sum(hits) / measure.cutoff  # type: ignore[operator]
    if measure.name == "R":
        return sum(hits) / len(relevant)
    if measure.name == "Hit":
        return 1.0 if any(hits) else 0.0
    if measure.name == "RR":
        return next((1.0 / (i + 1) for i, h in enumerate(hits) if h), 0.0)
    if measure.name == "AP":
        found, total = 0, 0.0
        for i, h in enumerate(hits):
            if h:
                found += 1
                total += found / (i + 1)
        return total / len(relevant)
    # nDCG
    dcg = sum(judged.get(d, 0) / math.log2(i + 2) for i, d in enumerate(top) if judged.get(d, 0) > 0)
    ideal_gains = sorted((r for r in judged.values() if r > 0), reverse=True)
    if measure.cutoff is not None:
        ideal_gains = ideal_gains[: measure.cutoff]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal_gains))
    return dcg / idcg if idcg > 0 else 0.0


def evaluate(measures: Iterable[Measure | str], qrels: Qrels, run: Run) -> dict[str, dict[str, float]]:
    """Each measure's value per query of the qrels (a query missing from the run scores 0).

    Returns:
        ``{str(measure): {query_id: value}}``, every qrels query present for every measure.
    """
    parsed = [m if isinstance(m, Measure) else parse_measure(m) for m in measures]
    out: dict[str, dict[str, float]] = {str(m): {} for m in parsed}
    for qid, judged in qrels.items():
        ranked = ranking(run.get(qid, {}))
        for m in parsed:
            out[str(m)][qid] = _value(m, ranked, judged)
    return out


def mean(values: Mapping[str, float]) -> float:
    """The mean over queries (0 for none)."""
    return sum(values.values()) / len(values) if values else 0.0

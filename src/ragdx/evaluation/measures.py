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

import heapq
import math
import re
from bisect import bisect_left
from dataclasses import dataclass
from operator import itemgetter
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
    return [doc for doc, _ in sorted(scores.items(), key=_SCORE_THEN_ID, reverse=True)]


_SCORE_THEN_ID = itemgetter(1, 0)
_LOG2 = [math.log2(i + 2) for i in range(1024)]  # nDCG's discounts by 0-based rank, grown on need


def _discounts(n: int) -> list[float]:
    while len(_LOG2) < n:
        _LOG2.append(math.log2(len(_LOG2) + 2))
    return _LOG2


def _value(measure: Measure, gains: list[int], hits: list[int], relevant: int, ideal: list[int]) -> float:
    """One measure from the ranked documents' gains (0 for unjudged), the 0-based ranks of the
    relevant ones (``hits``, ascending), the number of relevant documents and their gains, best
    first."""
    k = measure.cutoff
    found = hits if k is None or not hits or hits[-1] < k else hits[:bisect_left(hits, k)]
    name = measure.name
    if name == "P":
        return len(found) / k  # type: ignore[operator]
    if name == "R":
        return len(found) / relevant
    if name == "Hit":
        return 1.0 if found else 0.0
    if name == "RR":
        return 1.0 / (found[0] + 1) if found else 0.0
    if name == "AP":
        total = 0.0
        for n, i in enumerate(found, start=1):
            total += n / (i + 1)
        return total / relevant
    # nDCG
    best = ideal[:k] if k is not None else ideal
    log2 = _discounts(max(found[-1] + 1 if found else 0, len(best)))
    dcg = sum(gains[i] / log2[i] for i in found)
    idcg = sum(g / log2[i] for i, g in enumerate(best))
    return dcg / idcg if idcg > 0 else 0.0


def evaluate(measures: Iterable[Measure | str], qrels: Qrels, run: Run) -> dict[str, dict[str, float]]:
    """Each measure's value per query of the qrels (a query missing from the run scores 0).

    The ranking is sorted once per query, and only as deep as the deepest cut-off when every
    measure has one.

    Returns:
        ``{str(measure): {query_id: value}}``, every qrels query present for every measure.
    """
    parsed = [m if isinstance(m, Measure) else parse_measure(m) for m in measures]
    out: dict[str, dict[str, float]] = {str(m): {} for m in parsed}
    columns = [(m, out[str(m)]) for m in parsed]
    depth = None if any(m.cutoff is None for m in parsed) else max((m.cutoff or 0) for m in parsed)
    empty: dict[str, float] = {}
    for qid, judged in qrels.items():
        ideal = sorted((r for r in judged.values() if r > 0), reverse=True)
        scores = run.get(qid, empty)
        if not ideal:
            for _, values in columns:
                values[qid] = 0.0
            continue
        if depth is not None and depth * 4 < len(scores):
            ranked = [doc for doc, _ in heapq.nlargest(depth, scores.items(), key=_SCORE_THEN_ID)]
        elif len(set(scores.values())) == len(scores):  # no tie: the score alone orders
            ranked = sorted(scores, key=scores.__getitem__, reverse=True)
        else:
            ranked = [doc for doc, _ in sorted(scores.items(), key=_SCORE_THEN_ID, reverse=True)]
        get = judged.get
        gains = [get(doc, 0) for doc in ranked]
        hits = [i for i, g in enumerate(gains) if g > 0]
        for m, values in columns:
            values[qid] = _value(m, gains, hits, len(ideal), ideal)
    return out


def mean(values: Mapping[str, float]) -> float:
    """The mean over queries (0 for none)."""
    return sum(values.values()) / len(values) if values else 0.0

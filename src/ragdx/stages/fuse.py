"""Fusing the ranked lists of several channels.

BM25, cosine and RRF scores are ranking signals on different scales, not probabilities, so
lists are fused by rank (:class:`RRF`) or by scores whose normalisation and weights were fitted
on a validation set (:class:`WeightedFusion`); never by adding raw scores.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from ragdx.errors import ConfigError
from ragdx.types import Candidate, DropCode, Dropped, Provenance, Ranked, StageKind


def _merge(lists: Sequence[Ranked]) -> dict[str, tuple[Candidate, list[tuple[int, Candidate]]]]:
    """Each chunk once: its first-seen candidate and (list index, candidate) per list."""
    seen: dict[str, tuple[Candidate, list[tuple[int, Candidate]]]] = {}
    for i, ranked in enumerate(lists):
        for item in ranked.items:
            seen.setdefault(item.chunk_id, (item, []))[1].append((i, item))
    return seen


def _fused(name: str, lists: Sequence[Ranked], scores: dict[str, float], top_k: int | None,
           config: dict, started: float, why: str) -> Ranked:
    """Order by score, then best rank in any list, then list order, then chunk id (deterministic)."""
    merged = _merge(lists)

    def key(cid: str) -> tuple:
        ranks = [(c.rank, i) for i, c in merged[cid][1]]
        return (-scores[cid], min(ranks), cid)

    order = sorted(scores, key=key)
    items, dropped = [], []
    for rank, cid in enumerate(order, start=1):
        first, seen_in = merged[cid]
        history = tuple(p for _, c in seen_in for p in c.history)
        if top_k is not None and rank > top_k:
            dropped.append(Dropped(cid, first.doc_id, first.version, first.start, first.end,
                                   f"{why}: fused rank {rank}, fusion.top_k {top_k}", rank, DropCode.CUT))
            continue
        score = scores[cid]
        items.append(Candidate(cid, first.doc_id, first.version, first.start, first.end, rank, score,
                               history + (Provenance(name, rank, score),)))
    return Ranked(name, StageKind.FUSION, tuple(items), tuple(dropped), config,
                  time.perf_counter() - started)


#: RRF's damping constant, as in the paper (not a cut-off)
RRF_C = 60.0


def reciprocal_ranks(lists: Iterable[Iterable[Candidate]], c: float = RRF_C) -> dict[str, float]:
    """Each chunk's reciprocal-rank-fusion score over ranked lists: ``sum 1 / (c + rank)``."""
    scores: dict[str, float] = {}
    for items in lists:
        for item in items:
            scores[item.chunk_id] = scores.get(item.chunk_id, 0.0) + 1.0 / (c + item.rank)
    return scores


class RRF:
    """Reciprocal rank fusion: ``score(d) = sum over lists of 1 / (c + rank(d))``.

    Cormack, Clarke & Büttcher, "Reciprocal Rank Fusion outperforms Condorcet and individual
    Rank Learning Methods", SIGIR 2009. The constant ``c`` (60 in the paper) damps the weight of
    top ranks; it is not a cut-off. ``top_k`` (how many fused candidates go on) is separate.
    Ranks are 1-based. Ties are broken by the best rank in any list, then list order, then id.

    Args:
        c: the damping constant.
        top_k: how many fused candidates to keep (None: all).
        name: the stage's name in traces.
    """

    kind = StageKind.FUSION

    def __init__(self, c: float = RRF_C, top_k: int | None = None, name: str = "rrf") -> None:
        if c < 0:
            raise ConfigError(f"fusion.c must be >= 0, not {c}")
        self.c, self.top_k, self.name = c, top_k, name

    def run(self, lists: Sequence[Ranked]) -> Ranked:
        started = time.perf_counter()
        scores = reciprocal_ranks((ranked.items for ranked in lists), self.c)
        config = {"method": "rrf", "c": self.c, "top_k": self.top_k,
                  "channels": [r.stage for r in lists]}
        return _fused(self.name, lists, scores, self.top_k, config, started, "below the fusion cut")


@dataclass(frozen=True, slots=True)
class ChannelCalibration:
    """A channel's fitted score normalisation (z-score with the validation set's mean and
    standard deviation) and weight. A candidate missing from the channel's list scores
    ``missing`` (in normalised units)."""

    weight: float
    mean: float
    std: float
    missing: float

    def normalise(self, score: float) -> float:
        return (score - self.mean) / self.std if self.std > 0 else 0.0


class WeightedFusion:
    """Weighted sum of z-normalised channel scores, with normalisation and weights fitted on a
    validation query set (see :mod:`ragdx.experiments.fit`); never raw BM25 + cosine.

    Args:
        channels: each channel's calibration, by channel name.
        top_k: how many fused candidates to keep.
        fitted_on: a description of the validation data (recorded in traces).
    """

    kind = StageKind.FUSION

    def __init__(self, channels: dict[str, ChannelCalibration], top_k: int | None = None,
                 fitted_on: str = "", name: str = "weighted") -> None:
        if not channels:
            raise ConfigError("weighted fusion needs at least one calibrated channel")
        self.channels, self.top_k, self.fitted_on, self.name = channels, top_k, fitted_on, name

    @classmethod
    def from_file(cls, path: str | Path, top_k: int | None = None) -> "WeightedFusion":
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
            channels = {name: ChannelCalibration(**c) for name, c in data["channels"].items()}
        except FileNotFoundError:
            raise ConfigError(f"fusion.weights_file not found: {path}") from None
        except OSError as exc:  # a folder, no permission
            raise ConfigError(f"fusion.weights_file {path}: cannot read it: {exc.strerror}",
                              key="fusion.weights_file") from None
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"fusion.weights_file {path} is not a fitted fusion file: {exc}") from None
        return cls(channels, top_k, data.get("fitted_on", ""))

    def to_dict(self) -> dict:
        return {"method": "weighted", "fitted_on": self.fitted_on,
                "channels": {n: {"weight": c.weight, "mean": c.mean, "std": c.std, "missing": c.missing}
                             for n, c in self.channels.items()}}

    def run(self, lists: Sequence[Ranked]) -> Ranked:
        started = time.perf_counter()
        unknown = [r.stage for r in lists if r.stage not in self.channels]
        if unknown:
            raise ConfigError(f"weighted fusion has no fitted calibration for channel(s) {unknown}; "
                              f"fitted channels: {sorted(self.channels)}")
        scores: dict[str, float] = {}
        merged = _merge(lists)
        for cid, (_, seen_in) in merged.items():
            by_list = {lists[i].stage: c.score for i, c in seen_in}
            scores[cid] = sum(cal.weight * (cal.normalise(by_list[name]) if name in by_list else cal.missing)
                              for name, cal in self.channels.items() if name in {r.stage for r in lists})
        config = {**self.to_dict(), "top_k": self.top_k}
        return _fused(self.name, lists, scores, self.top_k, config, started, "below the fusion cut")

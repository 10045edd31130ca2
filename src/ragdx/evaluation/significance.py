"""Paired significance tests for comparing two systems on the same queries.

- :func:`randomization` — the paired randomization (sign-flip permutation) test on the mean
  difference, two-sided (Fisher 1935; for IR: Smucker, Allan & Carterette, "A comparison of
  statistical significance tests for information retrieval evaluation", CIKM 2007). With at most
  ``exact_below`` non-zero differences every sign assignment is enumerated (an exact test);
  above that ``trials`` random assignments are drawn with the given seed, and the p-value is
  ``(hits + 1) / (trials + 1)`` so that it is never 0 (Phipson & Smyth 2010).
- :func:`bootstrap_ci` — a percentile bootstrap interval for the mean difference (Efron &
  Tibshirani 1993), resampling queries with the seed.
- :func:`mcnemar` — the exact McNemar test for paired pass/fail outcomes: a two-sided binomial
  test on the discordant pairs (McNemar 1947; the exact form is the sign test on them).

Identical systems get p = 1 from every test; no test ever returns NaN.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ragdx.errors import ConfigError

# sums of the same numbers in another order differ by rounding; a tie within this share of the
# total magnitude counts as a tie, so float noise can never make the observed sum "unreached"
_RELATIVE_TOLERANCE = 1e-9
_CHUNK = 2000


@dataclass(frozen=True, slots=True)
class PairedTest:
    """The outcome of one paired test."""

    test: str           # "randomization (exact)", "randomization", "mcnemar (exact)"
    n: int              # pairs compared
    delta: float        # mean of (b - a); for pass/fail, the difference in pass rates
    p: float
    seed: int | None = None
    trials: int | None = None
    detail: str = ""    # e.g. "7 queries gained, 1 lost" for McNemar
    gained: int | None = None  # McNemar: the queries b passes and a fails
    lost: int | None = None    # McNemar: the queries a passes and b fails


def _pairs(a: Sequence[float], b: Sequence[float]) -> np.ndarray:
    if len(a) != len(b):
        raise ConfigError(f"a paired test needs as many values on each side: {len(a)} != {len(b)}")
    diff = np.asarray(b, dtype=float) - np.asarray(a, dtype=float)
    if not np.all(np.isfinite(diff)):
        raise ConfigError("a paired test got a value that is not a finite number")
    return diff


def randomization(a: Sequence[float], b: Sequence[float], *, trials: int = 10_000, seed: int = 0,
                  exact_below: int = 16) -> PairedTest:
    """Two-sided paired randomization test of mean(b - a) = 0.

    Args:
        a: the baseline's value per query.
        b: the variant's value per query, in the same query order.
        trials: random sign assignments when the test is not exact.
        seed: the random generator's seed (recorded in the result).
        exact_below: enumerate all 2^m assignments when m (non-zero differences) is at most this.
    """
    diff = _pairs(a, b)
    n = len(diff)
    if n == 0:
        return PairedTest("randomization (exact)", 0, 0.0, 1.0)
    nonzero = diff[diff != 0]  # a zero difference flips to itself
    m = len(nonzero)
    observed = abs(float(np.ones(m) @ nonzero))  # the same arithmetic as every permuted sum
    reach = observed - _RELATIVE_TOLERANCE * max(1.0, float(np.abs(nonzero).sum()))
    if m <= exact_below:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=m))) if m else np.ones((1, 0))
        sums = np.abs(signs @ nonzero)
        hits = int(np.count_nonzero(sums >= reach))
        return PairedTest("randomization (exact)", n, float(diff.mean()), hits / len(sums))
    rng = np.random.default_rng(seed)
    hits = 0
    for start in range(0, trials, _CHUNK):
        size = min(_CHUNK, trials - start)
        signs = rng.choice((1.0, -1.0), size=(size, m))
        hits += int(np.count_nonzero(np.abs(signs @ nonzero) >= reach))
    return PairedTest("randomization", n, float(diff.mean()), (hits + 1) / (trials + 1), seed, trials)


def bootstrap_ci(a: Sequence[float], b: Sequence[float], *, trials: int = 10_000, seed: int = 0,
                 level: float = 0.95) -> tuple[float, float]:
    """A percentile bootstrap interval for mean(b - a), resampling queries."""
    diff = _pairs(a, b)
    if len(diff) == 0:
        return (0.0, 0.0)
    rng = np.random.default_rng(seed)
    rows = max(1, _CHUNK * 100 // len(diff))  # resample in blocks: memory stays bounded for any n
    means = np.concatenate([diff[rng.integers(0, len(diff), size=(min(rows, trials - start), len(diff)))]
                            .mean(axis=1) for start in range(0, trials, rows)])
    tail = (1 - level) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return float(low), float(high)


def mcnemar(a: Sequence[bool], b: Sequence[bool]) -> PairedTest:
    """Exact two-sided McNemar test for paired pass/fail outcomes.

    Only discordant pairs count: ``wins`` where b passes and a fails, ``losses`` the reverse. Under
    the null each is a fair coin, so p = min(1, 2 * P[Binomial(wins + losses, 1/2) <= min]).
    """
    if len(a) != len(b):
        raise ConfigError(f"a paired test needs as many values on each side: {len(a)} != {len(b)}")
    wins = sum(1 for x, y in zip(a, b) if y and not x)
    losses = sum(1 for x, y in zip(a, b) if x and not y)
    m = wins + losses
    n = len(a)
    delta = (wins - losses) / n if n else 0.0
    if m == 0:
        return PairedTest("mcnemar (exact)", n, delta, 1.0, detail="no query changed", gained=0, lost=0)
    # exact integer arithmetic, one correctly rounded division; a p-value below the smallest
    # positive float (over ~1,075 one-way flips) is reported as that float, never as 0
    p = min(1.0, 2 * sum(math.comb(m, i) for i in range(min(wins, losses) + 1)) / 2 ** m)
    return PairedTest("mcnemar (exact)", n, delta, max(p, math.ulp(0.0)),
                      detail=f"{wins} queries gained, {losses} lost", gained=wins, lost=losses)

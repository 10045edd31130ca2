"""Paired tests on constructed data with known answers, and parity with scipy."""

import math
import random

import pytest

from ragdx.evaluation.significance import bootstrap_ci, mcnemar, randomization


def test_identical_runs_give_p_one_from_every_test():
    a = [0.2, 0.5, 1.0, 0.0, 0.7] * 10
    assert randomization(a, a).p == 1.0
    assert randomization(a, a, exact_below=0).p == 1.0
    passes = [True, False, True] * 10
    assert mcnemar(passes, passes).p == 1.0
    assert bootstrap_ci(a, a) == (0.0, 0.0)


def test_a_large_consistent_gain_is_significant():
    rng = random.Random(1)
    a = [rng.random() * 0.5 for _ in range(50)]
    b = [x + 0.3 + rng.random() * 0.1 for x in a]
    test = randomization(a, b, seed=7)
    assert test.p < 0.01 and test.test == "randomization" and test.seed == 7
    assert test.p == 1 / (test.trials + 1)  # no assignment reaches the observed sum
    low, high = bootstrap_ci(a, b, seed=7)
    assert 0.3 < low < high < 0.4
    assert mcnemar([False] * 20, [True] * 20).p < 0.01


def test_exact_randomization_hand_computed():
    # differences (1, 1, 1): of the 8 sign assignments, |sum| >= 3 for (+,+,+) and (-,-,-)
    test = randomization([0, 0, 0], [1, 1, 1])
    assert test.test == "randomization (exact)" and test.p == 2 / 8 and test.delta == 1.0
    # a zero difference does not flip: (0, 2, -1) -> |±2 ±1| >= 1 always
    assert randomization([0, 0, 1], [0, 2, 0]).p == 1.0


def test_mcnemar_hand_computed():
    # 5 gained, 0 lost: p = 2 * (1/2)^5
    test = mcnemar([False] * 5 + [True] * 3, [True] * 8)
    assert test.p == 2 / 32 and test.delta == 5 / 8 and "5 queries gained, 0 lost" in test.detail
    # 3 gained, 1 lost: p = 2 * (C(4,0) + C(4,1)) / 16
    mixed = mcnemar([False, False, False, True], [True, True, True, False])
    assert mixed.p == 2 * 5 / 16 and (mixed.gained, mixed.lost) == (3, 1)
    assert (test.gained, test.lost) == (5, 0)
    assert (mcnemar([True], [True]).gained, mcnemar([True], [True]).lost) == (0, 0)


def test_randomization_is_reproducible_under_its_seed():
    rng = random.Random(3)
    a = [rng.random() for _ in range(40)]
    b = [x + rng.gauss(0.02, 0.2) for x in a]
    assert randomization(a, b, seed=5) == randomization(a, b, seed=5)
    assert 0 < randomization(a, b, seed=5).p <= 1


def test_mismatched_lengths_are_refused():
    from ragdx.errors import ConfigError
    with pytest.raises(ConfigError, match="3 != 2"):
        randomization([1, 2, 3], [1, 2])


@pytest.mark.parity
def test_against_scipy():
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = random.Random(11)
    a = [rng.random() for _ in range(12)]
    b = [x + rng.gauss(0.1, 0.2) for x in a]
    ours = randomization(a, b)
    ref = scipy_stats.permutation_test(([y - x for x, y in zip(a, b)],), lambda d: sum(d),
                                       permutation_type="samples", n_resamples=math.inf)
    assert ours.p == pytest.approx(ref.pvalue, abs=1e-12)
    x = [rng.random() < 0.5 for _ in range(30)]
    y = [rng.random() < 0.7 for _ in range(30)]
    wins = sum(1 for p, q in zip(x, y) if q and not p)
    losses = sum(1 for p, q in zip(x, y) if p and not q)
    assert mcnemar(x, y).p == pytest.approx(scipy_stats.binomtest(wins, wins + losses).pvalue, abs=1e-12)


def test_large_values_and_many_flips_never_give_p_zero():
    # latencies in milliseconds: the observed sum must count as reached by itself despite rounding
    a = [10798.1, 7151.4, 7837.5, 5170.7, 9587.4, 6335.8, 10969.1, 6203.0]
    b = [round(x * 1.3, 1) for x in a]
    assert randomization(a, b).p == 2 / 2 ** 8
    sampled = randomization(a, b, exact_below=0, trials=9999).p  # 2 of 256 sign patterns reach it
    assert abs(sampled - 2 / 256) < 0.004
    assert 0 < mcnemar([False] * 1100, [True] * 1100).p < 1e-300


def test_paired_bootstrap_interval_hand_computed():
    # diff (0, 1): a resample's mean is 0, 0.5 or 1 with chances 1/4, 1/2, 1/4; both tails hold
    # more than 2.5%, so the 95% interval is the whole range, whatever the seed
    assert bootstrap_ci([0, 0], [0, 1], seed=3) == (0.0, 1.0)
    # diff (0, 0, 3): mean 3 needs all three draws to be the 3 (1/27 = 3.7% > 2.5%)
    assert bootstrap_ci([1, 1, 1], [1, 1, 4], seed=5) == (0.0, 3.0)
    assert bootstrap_ci([2, 5], [2, 5]) == (0.0, 0.0)  # identical runs: no difference at all


@pytest.mark.parity
def test_paired_bootstrap_against_scipy():
    np = pytest.importorskip("numpy")
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = random.Random(7)
    a = [rng.random() for _ in range(40)]
    b = [x + rng.gauss(0.05, 0.3) for x in a]
    diff = np.array(b) - np.array(a)
    ref = scipy_stats.bootstrap((diff,), np.mean, n_resamples=40_000, method="percentile", random_state=1)
    low, high = bootstrap_ci(a, b, trials=40_000, seed=2)
    # two Monte Carlo estimates of the same percentiles: they agree to a few thousandths
    assert low == pytest.approx(ref.confidence_interval.low, abs=0.01)
    assert high == pytest.approx(ref.confidence_interval.high, abs=0.01)

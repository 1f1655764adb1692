"""How many pairs an evaluation gets: the base count on quiet pairs, more on noisy ones."""

import math

import pytest

from spack_r3.search.noise import PairBudget, pair_noise, pairs_for, ratio_interval


def test_one_pairs_noise_is_the_robust_spread_of_its_log_ratios():
    assert pair_noise([1.0, 1.0, 1.0, 1.0]) == 0.0
    # log ratios -0.1, 0, +0.1, and one wild pair that a MAD ignores
    noise = pair_noise([math.exp(-0.1), 1.0, math.exp(0.1), 1.0, 40.0])
    assert noise == pytest.approx(1.4826 * 0.1)
    assert pair_noise([1.2, 0.9]) is None  # too few to say
    assert pair_noise([1.0, float("inf"), 0.0]) is None  # a pair that timed nothing is not counted


def test_pairs_put_the_medians_standard_error_near_two_percent():
    assert pairs_for(0.0, base=5, most=30) == 5  # quiet: the base count
    assert pairs_for(0.08, base=5, most=30) == 26  # cg's spmv on 2 cores: (1.2533 * 0.08 / 0.02)^2
    assert pairs_for(1.0, base=5, most=30) == 30  # never more than the most


def test_a_budget_keeps_the_base_until_three_evaluations_say_otherwise():
    budget = PairBudget(base=5)
    assert budget.most == 30
    budget.add(0.08)
    budget.add(None)  # an evaluation that failed gives no noise
    budget.add(0.08)
    assert budget.estimate() is None and budget.pairs() == 5
    budget.add(0.08)
    assert budget.pairs() == 26
    # a kernel's other studies start where this one got to
    assert PairBudget(base=5, prior=budget.noises).pairs() == 26
    # quiet evaluations bring it back down: the estimate is a median of recent ones
    for _ in range(30):
        budget.add(0.005)
    assert budget.pairs() == 5


def test_two_confirmed_candidates_compare_by_an_interval_from_their_pairs():
    steady = [[2.00, 2.02, 1.98, 2.01, 1.99]] * 3
    faster = [[2.20, 2.22, 2.18, 2.21, 2.19]] * 3
    point, low, high = ratio_interval(faster, steady)
    assert point == pytest.approx(1.1) and 1.0 < low <= point <= high  # apart: one is faster
    # the same candidate measured twice: the interval holds 1 whichever reads higher
    noisy = [[1.8, 2.3, 2.0, 1.9, 2.2], [1.7, 2.1, 2.4, 2.0, 1.95], [2.05, 1.85, 2.25, 2.1, 1.9]]
    point, low, high = ratio_interval(noisy, steady)
    assert low < 1.0 < high
    assert ratio_interval(noisy, steady) == (point, low, high)  # the same pairs, the same answer
    # tight pairs, but the machine's phase moved between rounds: not a difference
    a = [[3.20, 3.21, 3.22], [3.57, 3.58, 3.59], [3.21, 3.22, 3.23]]
    b = [[3.21, 3.22, 3.23], [3.42, 3.43, 3.44], [3.53, 3.54, 3.55]]
    point, low, high = ratio_interval(a, b)
    assert point < 0.95 and low < 1.0 < high
    # no rounds: the baseline itself, 1.0
    assert ratio_interval([], faster)[0] == pytest.approx(1 / 2.2)

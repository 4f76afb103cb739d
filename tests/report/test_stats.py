"""Mean/std over seeds, the interquartile mean and its bootstrap CI, against hand-computed values."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from rlrun.report import stats


def test_std_is_sample_std_with_ddof_1():
    mean, std = stats.mean_std([1000, 2000, 3000, 4000, 5000])
    assert stats.DDOF == 1
    assert mean == 3000
    assert std == pytest.approx(statistics.stdev([1000, 2000, 3000, 4000, 5000]))
    assert std == pytest.approx(math.sqrt(2_500_000))  # sum of squares 1e7 / (5 - 1)
    assert std != pytest.approx(np.std([1000, 2000, 3000, 4000, 5000]))  # not ddof=0


def test_one_seed_has_no_std_and_nans_are_ignored():
    assert stats.mean_std([7.0]) == (7.0, pytest.approx(float("nan"), nan_ok=True))
    mean, std = stats.mean_std([1.0, float("nan"), 3.0])
    assert (mean, std) == (2.0, pytest.approx(math.sqrt(2)))
    assert all(math.isnan(x) for x in stats.mean_std([]))


@pytest.mark.parametrize(("n", "weights"), [
    (1, [1.0]), (2, [0.5, 0.5]), (3, [1 / 6, 2 / 3, 1 / 6]), (4, [0, 0.5, 0.5, 0]),
    (5, [0, 0.3, 0.4, 0.3, 0]), (8, [0, 0, 0.25, 0.25, 0.25, 0.25, 0, 0]),
])
def test_iqm_weights_cover_the_middle_half_fractionally(n, weights):
    w = stats.iqm_weights(n)
    assert w == pytest.approx(weights)
    assert w.sum() == pytest.approx(1.0)


def test_iqm_hand_computed():
    assert stats.iqm([5000, 1000, 3000, 2000, 4000]) == pytest.approx(3000)
    assert stats.iqm([0, 1, 2, 10, 100]) == pytest.approx((0.15 * 1 + 0.2 * 2 + 0.15 * 10) / 0.5)  # 4.1
    assert stats.iqm([900, 1500, 1700]) == pytest.approx((900 + 4 * 1500 + 1700) / 6)
    assert stats.iqm([1, 2, 3, 100, 4, 5, 6, -100]) == pytest.approx(np.mean([2, 3, 4, 5]))  # trim_mean
    assert math.isnan(stats.iqm([]))


def test_bootstrap_ci_is_seeded_and_brackets_the_iqm():
    x = [1000, 2000, 3000, 4000, 5000]
    low, high = stats.bootstrap_iqm_ci(x)
    assert (low, high) == stats.bootstrap_iqm_ci(x)  # same seed, same interval
    assert 1000 <= low < stats.iqm(x) < high <= 5000
    assert stats.bootstrap_iqm_ci(x, seed=1) != (low, high)
    assert stats.bootstrap_iqm_ci([42.0]) == (42.0, 42.0)
    assert all(math.isnan(v) for v in stats.bootstrap_iqm_ci([]))


def test_ratio_is_undefined_without_a_nonzero_paper_value():
    assert stats.ratio(3000, 11077) == pytest.approx(0.270831452)
    assert math.isnan(stats.ratio(1.0, 0.0))
    assert math.isnan(stats.ratio(float("nan"), 10.0))

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


def test_iqm_cuts_a_quarter_of_the_values_off_each_end_as_rliable():
    # rliable's IQM is scipy.stats.trim_mean(x, 0.25): floor(n / 4) values cut at each end.
    assert stats.iqm([5000, 1000, 3000, 2000, 4000]) == pytest.approx(3000)  # cut 1000 and 5000
    assert stats.iqm([0, 1, 2, 10, 100]) == pytest.approx((1 + 2 + 10) / 3)
    assert stats.iqm([900, 1500, 1700]) == pytest.approx((900 + 1500 + 1700) / 3)  # n < 4: no cut
    assert stats.iqm([1, 2, 3, 100, 4, 5, 6, -100]) == pytest.approx(np.mean([2, 3, 4, 5]))
    assert stats.iqm([1.0, float("nan"), 3.0]) == 2.0
    assert math.isnan(stats.iqm([]))


def test_bootstrap_interval_matches_a_reference_resampling_loop():
    # 3 values: 27 equally likely resamples; the 2.5% and 97.5% quantiles of their means (the
    # extremes 0 and 9 each have mass 1/27 > 2.5%), which a large bootstrap must find.
    x = [0.0, 3.0, 9.0]
    means = np.array([(x[i] + x[j] + x[k]) / 3 for i in range(3) for j in range(3) for k in range(3)])
    low, high = stats.bootstrap_iqm_ci(x, resamples=20000)
    assert low == np.percentile(means, 2.5, method="inverted_cdf") == 0.0
    assert high == np.percentile(means, 97.5, method="inverted_cdf") == 9.0
    low, high = stats.bootstrap_iqm_ci([0.0, 3.0, 9.0, 12.0, 20.0], resamples=4000)
    assert 0.0 < low < stats.iqm([0.0, 3.0, 9.0, 12.0, 20.0]) < high < 20.0


def test_performance_profile_counts_runs_above_each_threshold():
    scores = np.array([1.0, 2.0, 3.0, 4.0])
    assert list(stats.profile(scores, np.array([0.0, 1.0, 2.5, 4.0]))) == [1.0, 0.75, 0.5, 0.0]


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

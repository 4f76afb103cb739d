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


@pytest.mark.parametrize("effect, n", [(1.0, 10), (0.8, 15), (0.5, 34), (0.2, 199)])
def test_seeds_needed_matches_the_one_sample_t_test_tables(effect, n):
    # Standard sample sizes of a two-sided one-sample t-test, alpha 0.05, power 0.8 (G*Power's
    # tables: d=1 -> 10, 0.8 -> 15, 0.5 -> 34, 0.2 -> 199). By hand for d = 0.5: the normal
    # approximation ((1.95996 + 0.84162) / 0.5)^2 = 31.40; with t quantiles at df = 31,
    # ((2.0395 + 0.8534) / 0.5)^2 = 33.47, at df = 33 ((2.0345 + 0.8527) / 0.5)^2 = 33.34 -> 34.
    assert stats.seeds_needed(std=10.0, difference=10.0 * effect) == n
    assert stats.seeds_needed(std=10.0, difference=-10.0 * effect) == n  # two-sided: the sign is moot
    # Bracketing: n reaches 80% power, n - 1 does not.
    assert stats.t_test_power(n, effect) >= 0.8 > stats.t_test_power(n - 1, effect)


def test_seeds_needed_is_at_least_the_normal_approximation_and_close_to_the_t_iteration():
    from scipy.stats import norm, t

    for effect in (0.3, 0.7, 1.3):  # (at d >= 2 the textbook iteration itself is off: n <= 4)
        normal = ((norm.ppf(0.975) + norm.ppf(0.8)) / effect) ** 2
        n = 2.0
        for _ in range(50):  # the textbook fixed point n = ((t_{.975,n-1} + t_{.8,n-1}) / d)^2
            n = max(2.0, ((t.ppf(0.975, n - 1) + t.ppf(0.8, n - 1)) / effect) ** 2)
        needed = stats.seeds_needed(1.0, effect)
        assert needed >= math.ceil(normal) and abs(needed - math.ceil(n)) <= 1, (effect, needed, normal, n)


def test_seeds_needed_edge_cases():
    assert stats.seeds_needed(5.0, 0.0) == math.inf          # no gap: no seed count finds one
    assert stats.seeds_needed(0.0, 3.0) == 2                 # no spread: two seeds already tell
    assert math.isnan(stats.seeds_needed(float("nan"), 1.0))  # one seed: no spread known
    assert stats.seeds_needed(1.0, 1e-6) == math.inf         # beyond MAX_SEEDS
    assert stats.seeds_needed(1.0, 100.0) == 2

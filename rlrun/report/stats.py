"""Statistics over seeds: mean, std, the interquartile mean (IQM) and bootstrap intervals.

The IQM and its interval follow Agarwal et al. 2021 ("Deep RL at the Edge of the
Statistical Precipice"): the IQM is ``scipy.stats.trim_mean(x, 0.25)`` (what their
``rliable`` library computes) and intervals are percentile bootstraps over runs
(``scipy.stats.bootstrap``), resampled independently per cell, i.e. stratified.
``rliable`` itself is not used: its latest release (1.2.0) pins ``arch<8``, whose
7.x releases fail to import under pandas 3 and whose 8.x release breaks rliable's
``StratifiedBootstrap`` (measured here, pandas 3.1.1).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import numpy as np
from scipy import stats as sps

DDOF = 1
"""Standard deviations over seeds are sample std (``ddof=1``); one seed has no std (NaN)."""
RESAMPLES = 2000
LEVEL = 0.95
POWER = 0.8
"""Power of the seed count ``seeds_needed`` answers for: 80%, the usual planning convention."""
MAX_SEEDS = 100_000
"""Above this many seeds the answer is reported as "more than" (a difference far below the spread)."""


def _finite(values: Sequence[float]) -> np.ndarray:
    return np.asarray([v for v in values if np.isfinite(v)], dtype=float)


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample std (``ddof=1``) of the finite values; NaN where undefined."""
    x = _finite(values)
    mean = float(x.mean()) if len(x) else float("nan")
    std = float(x.std(ddof=DDOF)) if len(x) > DDOF else float("nan")
    return mean, std


def iqm_axis(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """The IQM along ``axis``: the mean after cutting ``floor(n/4)`` values off each end."""
    return sps.trim_mean(x, 0.25, axis=axis)


def iqm(values: Sequence[float]) -> float:
    """Interquartile mean of the finite values (``trim_mean(x, 0.25)``); NaN when there is none.

    E.g. ``[0, 1, 2, 10, 100]``: one value cut at each end, IQM ``(1 + 2 + 10) / 3``.
    """
    x = _finite(values)
    return float(iqm_axis(x)) if len(x) else float("nan")


def bootstrap_ci(data: np.ndarray, statistic: Callable[..., np.ndarray], resamples: int = RESAMPLES,
                 level: float = LEVEL, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Percentile-bootstrap interval of ``statistic`` over the runs on axis 0 of ``data``.

    Args:
        data: ``(runs, ...)``; each column (trailing axes) gets its own interval.
        statistic: ``statistic(x, axis)`` reducing the runs axis, vectorised.
        resamples: Bootstrap resamples (runs drawn with replacement).
        level: Coverage of the interval.
        seed: Seed of the resampling RNG.

    Returns:
        ``(low, high)`` shaped like the trailing axes; the statistic itself for one run.
    """
    data = np.asarray(data, dtype=float)
    if len(data) < 2:
        point = statistic(data, axis=0)
        return point, point
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # DegenerateDataWarning: all runs equal in a column
        res = sps.bootstrap((data,), statistic, n_resamples=resamples, confidence_level=level,
                            method="percentile", axis=0, vectorized=True, rng=np.random.default_rng(seed))
    point = statistic(data, axis=0)
    low, high = res.confidence_interval
    return np.where(np.isfinite(low), low, point), np.where(np.isfinite(high), high, point)


def bootstrap_iqm_ci(values: Sequence[float], resamples: int = RESAMPLES, level: float = LEVEL,
                     seed: int = 0) -> tuple[float, float]:
    """Percentile-bootstrap interval of the IQM over seeds.

    Args:
        values: Scores, one per seed; non-finite values are ignored. Sorted first, so the same
            scores give the same interval whatever order the runs come in.
        resamples: Bootstrap resamples.
        level: Coverage of the interval.
        seed: Seed of the resampling RNG.

    Returns:
        ``(low, high)``: NaN when there is no value, the value itself for one seed.
    """
    x = np.sort(_finite(values))
    if len(x) == 0:
        return float("nan"), float("nan")
    low, high = bootstrap_ci(x, iqm_axis, resamples, level, seed)
    return float(low), float(high)


def profile(scores: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """Performance profile: the fraction of runs (axis 0) scoring above each ``tau``."""
    return (np.asarray(scores)[..., None] > taus).mean(axis=-2)


def ratio(ours: float, paper: float) -> float:
    """``ours / paper``; NaN when either is missing or the paper value is 0."""
    if not (np.isfinite(ours) and np.isfinite(paper)) or paper == 0:
        return float("nan")
    return float(ours / paper)


def t_test_power(n: int, effect: float, level: float = LEVEL) -> float:
    """Power of a two-sided one-sample t-test with ``n`` samples at standardised effect ``effect``.

    Exact: ``P(|T| > t_{1-a/2, n-1})`` with ``T`` noncentral t, ``n - 1`` degrees of freedom,
    noncentrality ``effect * sqrt(n)`` (``a = 1 - level``).
    """
    df = n - 1
    crit = sps.t.ppf(1 - (1 - level) / 2, df)
    nc = abs(effect) * np.sqrt(n)
    return float(sps.nct.sf(crit, df, nc) + sps.nct.cdf(-crit, df, nc))


def seeds_needed(std: float, difference: float, level: float = LEVEL, power: float = POWER) -> float:
    """Seeds a one-sample two-sided t-test needs to tell a mean ``difference`` away from a fixed value.

    The spread over seeds is taken as the true one (``std``) and ``difference`` as the true gap
    between our mean and the reference; the reference is treated as exact. Starts from the normal
    approximation ``((z_{1-a/2} + z_power) * std / difference)^2`` and walks ``n`` until the
    exact noncentral-t power reaches ``power`` (the t quantile depends on ``n``, so no closed form).

    Returns:
        The smallest ``n >= 2`` with that power; ``inf`` when the difference is 0 (or more than
        ``MAX_SEEDS`` would be needed); 2 when ``std`` is 0 and the difference is not; NaN when
        either input is undefined.
    """
    if not (np.isfinite(std) and np.isfinite(difference)):
        return float("nan")
    if difference == 0:
        return float("inf")
    if std == 0:
        return 2.0
    effect = abs(difference) / std
    z = sps.norm.ppf(1 - (1 - level) / 2) + sps.norm.ppf(power)
    approx = (z / effect) ** 2
    if approx > MAX_SEEDS:
        return float("inf")
    n = max(2, int(np.floor(approx)))  # the normal approximation never overshoots
    while t_test_power(n, effect, level) < power:
        if n >= MAX_SEEDS:
            return float("inf")
        n += 1
    while n > 2 and t_test_power(n - 1, effect, level) >= power:
        n -= 1
    return float(n)

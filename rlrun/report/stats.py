"""Statistics over seeds: mean, std, interquartile mean and its bootstrap CI."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

DDOF = 1
"""Standard deviations over seeds are sample std (``ddof=1``); one seed has no std (NaN)."""


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample std (``ddof=1``) of the finite values; NaN where undefined."""
    x = np.asarray([v for v in values if np.isfinite(v)], dtype=float)
    mean = float(x.mean()) if len(x) else float("nan")
    std = float(x.std(ddof=DDOF)) if len(x) > DDOF else float("nan")
    return mean, std


def iqm_weights(n: int) -> np.ndarray:
    """Weights of the sorted values in the IQM of ``n`` values (they sum to 1).

    Sorted value ``i`` holds the probability mass ``[i/n, (i+1)/n]`` of the empirical
    distribution; its weight is the part of that interval inside ``[0.25, 0.75]``,
    divided by 0.5. Values straddling a quartile count fractionally.
    """
    lo = np.arange(n) / n
    hi = (np.arange(n) + 1) / n
    return (np.clip(np.minimum(hi, 0.75) - np.maximum(lo, 0.25), 0.0, None) / 0.5)


def iqm(values: Sequence[float]) -> float:
    """Interquartile mean: the mean of the middle 50% of the values.

    Uses fractional weighting at the quartile boundaries (the IQM of Agarwal et
    al. 2021, "Deep RL at the Edge of the Statistical Precipice", defined as the
    mean over the 25%-75% quantile range of the empirical distribution). When
    ``n`` is a multiple of 4 this equals ``scipy.stats.trim_mean(x, 0.25)``, which
    the ``rliable`` library computes; otherwise the boundary values count in part
    instead of being dropped or kept whole. E.g. the IQM of ``[0, 1, 2, 10, 100]``
    is ``(0.15*1 + 0.2*2 + 0.15*10) / 0.5 = 4.1``.

    Args:
        values: Scores, one per seed; non-finite values are ignored.

    Returns:
        The IQM, or NaN when there is no finite value.
    """
    x = np.sort(np.asarray([v for v in values if np.isfinite(v)], dtype=float))
    return float(iqm_weights(len(x)) @ x) if len(x) else float("nan")


def bootstrap_iqm_ci(values: Sequence[float], resamples: int = 2000, level: float = 0.95,
                     seed: int = 0) -> tuple[float, float]:
    """Percentile-bootstrap confidence interval of the IQM over seeds.

    Args:
        values: Scores, one per seed; non-finite values are ignored.
        resamples: Bootstrap resamples (seeds drawn with replacement).
        level: Coverage of the interval.
        seed: Seed of the resampling RNG; with the values sorted first, the same scores
            give the same interval whatever order the runs come in.

    Returns:
        ``(low, high)``: NaN when there is no value, the value itself for one seed.
    """
    x = np.sort(np.asarray([v for v in values if np.isfinite(v)], dtype=float))  # order-free
    if len(x) == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    samples = np.sort(x[rng.integers(0, len(x), size=(resamples, len(x)))], axis=1)
    stats = samples @ iqm_weights(len(x))
    tail = (1.0 - level) / 2 * 100
    low, high = np.percentile(stats, [tail, 100 - tail])
    return float(low), float(high)


def ratio(ours: float, paper: float) -> float:
    """``ours / paper``; NaN when either is missing or the paper value is 0."""
    if not (np.isfinite(ours) and np.isfinite(paper)) or paper == 0:
        return float("nan")
    return float(ours / paper)

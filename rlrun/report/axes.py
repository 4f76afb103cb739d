"""Drawing pieces shared by the report's figures (plots, compare, figure2): text, seed means, empty axes."""

from __future__ import annotations

import warnings

import numpy as np

from rlrun.report.render import plain

GRID_POINTS = 200


def mpl_text(text: object) -> str:
    """Tracker text for a figure: one line, ``$`` escaped (no mathtext, which can fail to parse)."""
    return plain(text).replace("$", r"\$")


def aggregate(curves: list[tuple[np.ndarray, np.ndarray]], points: int = GRID_POINTS
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Mean, min and max over seeds on a common frame grid.

    Args:
        curves: ``(steps, values)`` per seed, steps increasing.
        points: Grid size between the first and the last step of any seed (each
            seed's own steps are added to the grid).

    Returns:
        ``(grid, mean, low, high, count)``: count is the number of seeds that ran that
        far; the statistics are NaN where it is 0.
    """
    curves = [(s, v) for s, v in curves if len(s)]
    if not curves:
        empty = np.array([])
        return empty, empty, empty, empty, empty
    start = min(float(s[0]) for s, _ in curves)
    stop = max(float(s[-1]) for s, _ in curves)
    grid = np.unique(np.concatenate([np.linspace(start, stop, points), *(s for s, _ in curves)]))
    stack = np.stack([np.interp(grid, s, v, left=np.nan, right=np.nan) for s, v in curves])
    count = np.isfinite(stack).sum(axis=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # grid points no seed reached
        return (grid, np.nanmean(stack, axis=0), np.nanmin(stack, axis=0), np.nanmax(stack, axis=0),
                count)


def no_data(ax, text: str = "no data", small: bool = False) -> None:
    """Marks an axes without points: the text, and no ticks (not an empty ``-0 0`` frame)."""
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="gray",
            fontsize=8 if small else 11)
    ax.set_xticks([])
    ax.set_yticks([])

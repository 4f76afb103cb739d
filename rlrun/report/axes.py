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


def isolated(y: np.ndarray) -> np.ndarray:
    """Finite points with no finite neighbour: a line through them draws nothing, so they get a marker."""
    finite = np.isfinite(y)
    before = np.concatenate([[False], finite[:-1]])
    after = np.concatenate([finite[1:], [False]])
    return finite & ~before & ~after


def draw_over_seeds(ax, grid: np.ndarray, center: np.ndarray, low: np.ndarray, high: np.ndarray,
                    count: np.ndarray, color: str, label: str, band_label: str | None = None,
                    linewidth: float = 1.8, band: bool = True, rest_label: str | None = None) -> None:
    """A statistic over seeds (``center``) with its band, on a common frame grid.

    Every seed is interpolated linearly onto ``grid`` between its first and its last evaluation
    (``aggregate``, ``compare.iqm_curve``); a seed missing an evaluation inside that range is
    bridged by the line between its neighbours. The solid line and the band cover only the frames
    every seed covers (``count`` at its maximum): where a seed has not started or has ended, the
    statistic of the others would jump, so it is drawn dotted, without a band. A point without
    neighbours (a cell with one evaluation) is drawn as a marker, its band as a vertical bar.
    """
    if not len(grid):
        return
    every = count == count.max()
    solid = np.where(every, center, np.nan)
    lone = np.flatnonzero(isolated(solid))
    ax.plot(grid, solid, color=color, linewidth=linewidth, label=label,
            **({"marker": "o", "markevery": list(lone), "markersize": 4} if len(lone) else {}))
    if band and count.max() >= 2:
        ax.fill_between(grid, low, high, where=every, color=color, alpha=0.2, linewidth=0, label=band_label)
        if len(lone):
            ax.vlines(grid[lone], low[lone], high[lone], color=color, alpha=0.5, linewidth=3)
    if not every.all():  # before a later seed's first or after a shorter seed's last evaluation
        rest = np.where(every, np.nan, center)
        edge = np.append(every[:-1] & ~every[1:], False) | np.insert(~every[:-1] & every[1:], 0, False)
        rest[edge] = center[edge]  # join the dotted parts to the solid line
        ax.plot(grid, rest, color=color, linewidth=max(1.0, linewidth - 0.6), linestyle=":", label=rest_label)

"""One comparison figure per env: every cell (algorithm, config) of that env on shared axes.

Left, the IQM of the evaluation return over frames with a 95% percentile-bootstrap band
over seeds: seeds are interpolated linearly onto a common frame grid, and the solid line
and band cover the frames every seed of the cell has evaluations around (dotted, without a
band, where a seed has not started or has ended; ``axes.draw_over_seeds``). Right, the
performance profile of the final returns (the fraction of runs scoring above each
threshold) with its pointwise bootstrap interval as dashed edges, for cells of
``PROFILE_BAND_MIN_RUNS`` runs or more. Both follow Agarwal et al. 2021; the statistics are
those of ``stats`` (scipy), each cell resampled on its own.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from rlrun.report import stats
from rlrun.report.render import frames
from rlrun.report.runs import lookup
from rlrun.report.table import Cell, Report

GRID_POINTS = 100
PROFILE_POINTS = 101
# Below this many runs the 95% percentile-bootstrap interval of the fraction of runs above a threshold
# is [0, 1] wherever that fraction is 1/2 (a resample puts every run on one side with probability
# 2 * 0.5^n >= 2.5% for n <= 5), and near it: a band over the whole plot that says nothing. Smaller
# cells get no band (the figure's title says so).
PROFILE_BAND_MIN_RUNS = 6


def cell_env(cell: Cell) -> str | None:
    """The env all runs of a cell share (their ``env`` tag or param), else None."""
    envs = {lookup(r, "env") for _, r in cell.runs.iterrows()}
    return envs.pop() if len(envs) == 1 and None not in envs else None


def by_env(report: Report) -> dict[str, list[Cell]]:
    """Cells with runs, per env, in report order."""
    out: dict[str, list[Cell]] = {}
    for cell in report.cells:
        env = None if cell.missing else cell_env(cell)
        if env is not None:
            out.setdefault(env, []).append(cell)
    return out


def iqm_curve(curves: list[tuple[np.ndarray, np.ndarray]], grid: np.ndarray, seed: int = 0
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """IQM over seeds at each grid point with its bootstrap interval.

    Each seed counts within the frames it ran (linear interpolation, no extrapolation);
    points with the same seeds present are bootstrapped together.

    Returns:
        ``(iqm, low, high, count)``: NaN where no seed ran that far.
    """
    stack = np.stack([np.interp(grid, s, v, left=np.nan, right=np.nan) for s, v in curves if len(s)])
    present = np.isfinite(stack)
    point, low, high = (np.full(len(grid), np.nan) for _ in range(3))
    for pattern in {tuple(col) for col in present.T if col.any()}:
        cols = (present.T == pattern).all(axis=1)
        block = stack[np.array(pattern)][:, cols]
        point[cols] = stats.iqm_axis(block, axis=0)
        low[cols], high[cols] = stats.bootstrap_ci(block, stats.iqm_axis, seed=seed)
    return point, low, high, present.sum(axis=0)


def _label(cell: Cell, env: str) -> str:
    from rlrun.report.axes import mpl_text

    parts = [k for k in cell.key if k and k != env]
    return mpl_text(" ".join(parts) or cell.label)


def plot_comparison(env: str, cells: list[Cell], path: Path, title: str) -> Path:
    """Writes the comparison figure of one env's cells to ``path`` (PNG)."""
    fig = Figure(figsize=(11, 4.2), dpi=100, layout="constrained")
    draw_comparison(fig, env, cells, title)
    FigureCanvasAgg(fig)
    fig.savefig(path, format="png")
    return path


def draw_comparison(fig: Figure, env: str, cells: list[Cell], title: str) -> tuple:
    """Draws the IQM curves (left) and the performance profile (right) of one env's cells on ``fig``;
    returns the two axes."""
    from rlrun.report.axes import draw_over_seeds, mpl_text

    fig.suptitle(f"{mpl_text(title)}: {mpl_text(env)}", fontsize=11)
    curve_ax, profile_ax = fig.subplots(1, 2)
    runs = [[(r["curve_steps"], r["curve_values"]) for _, r in c.runs.iterrows()] for c in cells]
    steps = [s for cell_runs in runs for s, _ in cell_runs if len(s)]
    colors = [f"C{i % 10}" for i in range(len(cells))]
    if steps:
        grid = np.unique(np.concatenate([np.linspace(min(s[0] for s in steps), max(s[-1] for s in steps),
                                                     GRID_POINTS), *steps]))
        for cell, cell_runs, color in zip(cells, runs, colors):
            if not any(len(s) for s, _ in cell_runs):
                continue
            point, low, high, count = iqm_curve(cell_runs, grid)
            draw_over_seeds(curve_ax, grid, point, low, high, count, color,
                            f"{_label(cell, env)} (n={cell.seeds})")
        curve_ax.set_xlabel("frames")
        curve_ax.set_ylabel("IQM eval/episode_return")
        curve_ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: frames(x)))
        curve_ax.grid(alpha=0.3)
        curve_ax.legend(fontsize=8, loc="best")
        curve_ax.set_title("IQM over seeds, 95% bootstrap CI (seeds interpolated on a common\n"
                           "frame grid; dotted where not every seed has evaluations)", fontsize=9)
    else:
        _no_data(curve_ax)
    finals = [c.runs["final_return"].to_numpy(dtype=float) for c in cells]
    finals = [f[np.isfinite(f)] for f in finals]
    if any(len(f) for f in finals):
        every = np.concatenate(finals)
        low, high = float(every.min()), float(every.max())
        pad = 0.05 * (high - low) or max(1.0, 0.1 * abs(low))  # all runs equal: still show the drop
        taus = np.linspace(low - pad, high + pad, PROFILE_POINTS)
        for cell, scores, color in zip(cells, finals, colors):
            if not len(scores):
                continue
            above = (scores[:, None] > taus[None, :]).astype(float)  # (runs, taus)
            profile_ax.step(taus, stats.profile(scores, taus), where="post", color=color, linewidth=1.8,
                            label=f"{_label(cell, env)} (n={len(scores)})")
            if len(scores) >= PROFILE_BAND_MIN_RUNS:
                # the band's edges, not a fill: a pointwise interval of a fraction of a few runs spans
                # most of [0, 1] between their scores, and filled it would cover the other cells
                band_low, band_high = stats.bootstrap_ci(above, np.mean)
                for edge in (band_low, band_high):
                    profile_ax.step(taus, edge, where="post", color=color, linewidth=0.8, linestyle="--",
                                    alpha=0.7)
        profile_ax.set_xlabel("final eval/episode_return τ")
        profile_ax.set_ylabel("fraction of runs with return > τ")
        profile_ax.set_ylim(-0.02, 1.02)
        profile_ax.grid(alpha=0.3)
        profile_ax.legend(fontsize=8, loc="best")
        profile_ax.set_title(f"performance profile; dashed: 95% bootstrap CI\n(cells of "
                             f"{PROFILE_BAND_MIN_RUNS} runs or more)", fontsize=9)
    else:
        _no_data(profile_ax)
    return curve_ax, profile_ax


def _no_data(ax) -> None:
    from rlrun.report.axes import no_data

    no_data(ax, "no data (no eval/episode_return logged)")


def write_comparisons(report: Report, out_dir: Path) -> dict[str, str]:
    """Writes ``<report>_compare_<env>.png`` per env; returns the file name per env."""
    out = {}
    for env, cells in by_env(report).items():
        name = re.sub(r"[^A-Za-z0-9._=+-]+", "-", f"{report.name}_compare_{env}") + ".png"
        out[env] = plot_comparison(env, cells, out_dir / name, report.name).name
    return out

"""Learning-curve PNGs: one per cell and one overview grid per report (Agg backend).

A cell's plot shows each seed's eval curve (thin), their mean on a common frame grid
(seeds are linearly interpolated onto it, and only count within the frames they ran)
with a shaded min-max band over the frames every seed covers (``axes.draw_over_seeds``:
dotted, without a band, where a seed has not started or has ended), and the paper's final
value as a dashed horizontal line when known. A cell with one evaluation shows a point; a
cell without evaluation points says "no data".
The per-env comparison figures (IQM curves and performance profiles) are in ``compare``.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from rlrun.report.axes import aggregate, draw_over_seeds, mpl_text, no_data
from rlrun.report.render import frames
from rlrun.report.table import Cell, Report


def _draw(ax, cell: Cell, small: bool = False) -> None:
    curves = [(r["curve_steps"], r["curve_values"]) for _, r in cell.runs.iterrows()]
    for steps, values in curves:
        ax.plot(steps, values, color="tab:blue", alpha=0.3, linewidth=0.7,
                marker="o" if len(steps) == 1 else None, markersize=3)
    grid, mean, low, high, count = aggregate(curves)
    if len(grid):
        draw_over_seeds(ax, grid, mean, low, high, count, "tab:blue",
                        "mean over seeds" if count.max() > 1 else "the one seed",
                        band_label="min-max over seeds", rest_label="mean of the seeds present")
    if math.isfinite(cell.paper_mean):
        ax.axhline(cell.paper_mean, color="tab:red", linestyle="--", linewidth=1.2,
                   label=f"paper {cell.paper_mean:g}")
    if cell.missing:
        no_data(ax, "missing (no runs)", small)
    elif not len(grid) and not math.isfinite(cell.paper_mean):
        no_data(ax, "no data (no eval/episode_return logged)", small)
    partial = f", {cell.partial} partial" if cell.partial else ""
    seeds = f"{cell.seeds} seed{'s' if cell.seeds != 1 else ''}"
    seeds += f" in {cell.runs_count} runs" if cell.runs_count != cell.seeds else ""
    ax.set_title(f"{mpl_text(cell.label)} ({seeds}{partial})", fontsize=8 if small else 11)
    ax.tick_params(labelsize=6 if small else 9)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: frames(x)))
    if not small:
        ax.set_xlabel("frames")
        ax.set_ylabel("eval/episode_return")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="best")


def _save(fig: Figure, path: Path) -> None:
    FigureCanvasAgg(fig)
    fig.savefig(path, format="png")


def plot_cell(cell: Cell, path: Path) -> Path:
    """Writes the learning curves of one cell to ``path`` (PNG)."""
    fig = Figure(figsize=(6.4, 4.2), dpi=100, layout="constrained")
    _draw(fig.add_subplot(), cell)
    _save(fig, path)
    return path


def _layout(report: Report) -> list[list[Cell | None]]:
    """Cells on a grid: the paper's rows/cols that have runs, else a near-square grid."""
    if report.rows is not None and report.cols is not None:
        ran = [c for c in report.cells if not c.missing]
        rows = [r for r in report.rows if any(c.key[0] == r for c in ran)]
        cols = [e for e in report.cols if any(c.key[1] == e for c in ran)]
        return [[report.cell(r, e) for e in cols] for r in rows]
    cells = [c for c in report.cells if not c.missing]
    ncols = max(1, math.ceil(math.sqrt(len(cells))))
    return [cells[i:i + ncols] + [None] * (ncols - len(cells[i:i + ncols]))
            for i in range(0, len(cells), ncols)]


def plot_overview(report: Report, path: Path) -> Path | None:
    """Writes a grid of all cells with runs to ``path``; None when no cell has runs."""
    grid = _layout(report)
    if not grid or not grid[0]:
        return None
    nrows, ncols = len(grid), len(grid[0])
    fig = Figure(figsize=(3.0 * ncols, 2.3 * nrows + 0.5), dpi=80, layout="constrained")
    fig.suptitle(mpl_text(report.title), fontsize=10)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for i, line in enumerate(grid):
        for j, cell in enumerate(line):
            if cell is None:
                axes[i][j].set_axis_off()
            else:
                _draw(axes[i][j], cell, small=True)
    _save(fig, path)
    return path


def file_name(report: Report, key: tuple[str, ...]) -> str:
    """``<report>_<key values>.png`` with unsafe characters replaced."""
    stem = "_".join([report.name, *(k for k in key if k)])
    return re.sub(r"[^A-Za-z0-9._=+-]+", "-", stem) + ".png"


def write_plots(report: Report, out_dir: Path
                ) -> tuple[dict[tuple[str, ...], str], str | None, dict[str, str]]:
    """Writes one PNG per cell with runs, the overview grid and one comparison per env.

    Returns:
        The file name per cell key, the overview's file name (None if not written), and the
        comparison figure's file name per env.
    """
    from rlrun.report.compare import write_comparisons

    out_dir.mkdir(parents=True, exist_ok=True)
    names = {}
    for cell in report.cells:
        if not cell.missing:
            names[cell.key] = plot_cell(cell, out_dir / file_name(report, cell.key)).name
    overview = plot_overview(report, out_dir / f"{report.name}_overview.png")
    return names, overview.name if overview else None, write_comparisons(report, out_dir)

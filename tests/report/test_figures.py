"""What the report's figures draw, checked on the data handed to matplotlib (issue 42 §5): a cell with
one evaluation shows a point, the IQM band does not jump where a seed has no evaluation, and the
performance profile's band is drawn only where it says something."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.figure import Figure

from rlrun.report import stats
from rlrun.report.compare import PROFILE_BAND_MIN_RUNS, draw_comparison
from rlrun.report.plots import _draw
from rlrun.report.table import summarize


def _run(seed: int, steps, values, config: str = "c") -> dict:
    steps, values = np.asarray(steps, float), np.asarray(values, float)
    return {"seed": str(seed), "final_return": float(values[-1]), "frames": float(steps[-1]),
            "partial": False, "curve_steps": steps, "curve_values": values,
            "tags": {"algo": "dqn", "env": "cartpole"}, "params": {"config": config}}


def _cell(runs: list[dict], key: tuple[str, ...] = ("c",)):
    return summarize(key, pd.DataFrame(runs))


def _comparison(*cells):
    fig = Figure()
    return draw_comparison(fig, "cartpole", list(cells), "runs")


def _band_x(ax) -> tuple[float, float]:
    xs = np.concatenate([p.vertices[:, 0] for c in ax.collections if isinstance(c, PolyCollection)
                         for p in c.get_paths()])
    return float(xs.min()), float(xs.max())


def test_a_cell_with_one_evaluation_draws_its_point_and_interval():
    cell = _cell([_run(0, [100_000], [420.0]), _run(1, [100_000], [380.0])])
    curve_ax, _ = _comparison(cell)
    line = curve_ax.lines[0]
    x, y = line.get_xdata(), line.get_ydata()
    assert np.isfinite(y).sum() == 1 and x[np.isfinite(y)][0] == 100_000
    assert line.get_marker() == "o" and list(line.get_markevery()) == [int(np.flatnonzero(np.isfinite(y))[0])]
    bars = [c for c in curve_ax.collections if isinstance(c, LineCollection)]
    assert len(bars) == 1
    (low, high), = [sorted(seg[:, 1]) for seg in bars[0].get_segments()]
    assert low <= 400.0 <= high and low < high


def test_the_cell_plot_of_one_evaluation_marks_its_mean():
    fig = Figure()
    ax = fig.add_subplot()
    _draw(ax, _cell([_run(0, [5000], [42.0])]))
    mean = next(ln for ln in ax.lines if ln.get_label() == "the one seed")
    assert mean.get_marker() == "o" and np.nanmax(mean.get_ydata()) == 42.0


def test_the_iqm_band_covers_only_the_frames_every_seed_was_evaluated_around():
    """Seeds evaluated at different frames (one from 10240 to 102400, two from 10000 to 100000, one
    of them without its 50k evaluation): on a common grid, each seed interpolated linearly, the solid
    IQM and its band run from the last first evaluation to the first last one; no band where the
    statistic would switch to fewer seeds (where the old figure jumped)."""
    frames = np.arange(1, 11) * 10_000.0
    rng = np.random.default_rng(0)
    runs = [_run(0, frames, rng.uniform(100, 500, 10)),
            _run(1, np.delete(frames, 4), rng.uniform(100, 500, 9)),
            _run(2, frames * 1.024, rng.uniform(100, 500, 10))]
    curve_ax, _ = _comparison(_cell(runs))
    assert _band_x(curve_ax) == (10_240.0, 100_000.0)
    solid = curve_ax.lines[0]
    x, y = solid.get_xdata(), solid.get_ydata()
    assert x[np.isfinite(y)].min() == 10_240.0 and x[np.isfinite(y)].max() == 100_000.0
    dotted = [ln for ln in curve_ax.lines if ln.get_linestyle() == ":"]
    assert len(dotted) == 1  # the frames where a seed had not started or had ended: drawn, no band
    assert np.nanmin(dotted[0].get_xdata()[np.isfinite(dotted[0].get_ydata())]) == 10_000.0


def test_the_profile_band_is_left_out_for_a_few_runs_and_not_the_whole_plot_for_more():
    few = _cell([_run(s, [1000], [v]) for s, v in enumerate([100.0, 300.0, 500.0])], ("few",))
    many_scores = [100.0, 150.0, 200.0, 300.0, 400.0, 450.0]
    many = _cell([_run(s, [1000], [v]) for s, v in enumerate(many_scores)], ("many",))
    assert len(many_scores) == PROFILE_BAND_MIN_RUNS
    _, profile_ax = _comparison(few, many)
    assert not [c for c in profile_ax.collections if isinstance(c, PolyCollection)]  # no fill at all
    edges = [ln for ln in profile_ax.lines if ln.get_linestyle() == "--"]
    assert len(edges) == 2 and all(ln.get_color() == "C1" for ln in edges)  # the 6-run cell's only
    taus = edges[0].get_xdata()
    low, high = edges[0].get_ydata(), edges[1].get_ydata()
    profile = stats.profile(np.array(many_scores), taus)
    assert np.all(low <= profile) and np.all(profile <= high)
    middle = (profile > 0) & (profile < 1)
    assert np.all(high[middle] - low[middle] < 1)  # never the whole height where the profile is inside
    want_low, want_high = stats.bootstrap_ci((np.array(many_scores)[:, None] > taus).astype(float), np.mean)
    assert np.array_equal(low, want_low) and np.array_equal(high, want_high)

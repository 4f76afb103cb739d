"""Groups runs into cells (paper tables or ad-hoc keys) and summarises each cell over seeds.

Per cell: mean ± std (``ddof=1``) of the final eval return over seeds, the IQM with a
95% percentile-bootstrap CI, the paper's mean ± std and the ratio ours/paper, the seed
count (with how many are partial) and the mean frames run against the paper's budget.
A seed run more than once in a cell (e.g. rerun with ``resume=false``) counts once:
its finished run with the most frames, the latest one on ties. In a paper table a cell
is one config, so (cell, seed) identifies a repeat; in ad-hoc groups, which may mix
configs, a repeat must also share the ``run_dir`` tag (the same command).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from importlib.resources import files
from typing import Any

import numpy as np
import pandas as pd
import yaml

from rlrun.report import stats
from rlrun.report.runs import lookup

TABLES = ("table1", "table2")
UNSET = "(unset)"
NUMERIC = ["mean", "std", "iqm", "iqm_low", "iqm_high", "paper_mean", "paper_std", "ratio", "seeds",
           "partial", "frames", "budget"]


@cache
def references() -> dict[str, Any]:
    """The paper's tables 1 and 2 (``references.yaml`` shipped with the package)."""
    return yaml.safe_load(files("rlrun.report").joinpath("references.yaml").read_text())


@dataclass
class Cell:
    """One cell of a report: the runs of one group and their summary over seeds."""

    key: tuple[str, ...]
    runs: pd.DataFrame
    seeds: int = 0
    partial: int = 0
    mean: float = float("nan")
    std: float = float("nan")
    iqm: float = float("nan")
    iqm_low: float = float("nan")
    iqm_high: float = float("nan")
    paper_mean: float = float("nan")
    paper_std: float = float("nan")
    ratio: float = float("nan")
    frames: float = float("nan")
    budget: float = float("nan")

    @property
    def missing(self) -> bool:
        """True when no run belongs to the cell."""
        return self.seeds == 0

    @property
    def label(self) -> str:
        return " / ".join(self.key)


@dataclass
class Report:
    """Cells in display order; ``rows``/``cols`` give the paper's layout for a table."""

    name: str
    caption: str
    keys: list[str]
    cells: list[Cell]
    rows: list[str] | None = None
    cols: list[str] | None = None
    notes: list[str] = field(default_factory=list)

    def cell(self, *key: str) -> Cell | None:
        """The cell with this key, or None (not in the paper and no runs)."""
        return next((c for c in self.cells if c.key == tuple(key)), None)

    def to_frame(self) -> pd.DataFrame:
        """One row per cell: the key columns, then ``NUMERIC`` (NaN where undefined)."""
        data = [[*c.key, *(getattr(c, k) for k in NUMERIC)] for c in self.cells]
        return pd.DataFrame(data, columns=[*self.keys, *NUMERIC])


def _unique_number(runs: pd.DataFrame, param: str) -> float:
    """A numeric param's value when all runs that set it agree, else NaN."""
    values = set()
    for _, run in runs.iterrows():
        text = lookup(run, param)
        try:
            value = float(text) if text is not None else float("nan")
        except ValueError:
            return float("nan")
        if np.isfinite(value):
            values.add(value)
    return values.pop() if len(values) == 1 else float("nan")


def dedupe_seeds(runs: pd.DataFrame, same_dir: bool = False) -> tuple[pd.DataFrame, int]:
    """Keeps one run per (cell, seed): finished first, then most frames, then latest.

    Args:
        runs: Runs with a ``_key`` column (the cell).
        same_dir: Count runs as repeats only when their ``run_dir`` tags match too (ad-hoc
            cells may hold several configs with the same seed). Runs without a seed (or
            without a run_dir here) are never dropped.
    """
    if runs.empty:
        return runs, 0
    ident = [r["run_id"] if r["seed"] is None or (same_dir and not r["tags"].get("run_dir"))
             else f"{r['seed']}|{r['tags'].get('run_dir') if same_dir else ''}" for _, r in runs.iterrows()]
    order = runs.assign(_id=ident, _done=~runs["partial"].astype(bool), _frames=runs["frames"].fillna(-1.0))
    order = order.sort_values(["_done", "_frames", "start_time"], kind="stable")
    kept = order.drop_duplicates(["_key", "_id"], keep="last").drop(columns=["_id", "_done", "_frames"])
    return kept.sort_index(), len(runs) - len(kept)


def summarize(key: tuple[str, ...], runs: pd.DataFrame, paper_mean: float = float("nan"),
              paper_std: float = float("nan"), budget: float = float("nan")) -> Cell:
    """Summarises the runs of one cell over seeds."""
    cell = Cell(key=key, runs=runs, paper_mean=paper_mean, paper_std=paper_std, budget=budget)
    if runs.empty:
        return cell
    finals = runs["final_return"].to_numpy(dtype=float)
    cell.seeds, cell.partial = len(runs), int(runs["partial"].sum())
    cell.mean, cell.std = stats.mean_std(finals)
    cell.iqm = stats.iqm(finals)
    cell.iqm_low, cell.iqm_high = stats.bootstrap_iqm_ci(finals)
    cell.ratio = stats.ratio(cell.mean, paper_mean)
    frames = runs["frames"].to_numpy(dtype=float)
    cell.frames = float(np.nanmean(frames)) if np.isfinite(frames).any() else float("nan")
    return cell


def _with_keys(runs: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    values = [tuple(str(v) if v is not None else UNSET for v in (lookup(r, k) for k in keys))
              for _, r in runs.iterrows()]
    return runs.assign(_key=pd.Series(values, index=runs.index, dtype=object))


def natural_key(values: tuple[str, ...]) -> tuple:
    """Sorts numbers by value (seed 2 before seed 10), then text."""
    out = []
    for v in values:
        try:
            out.append((0, float(v), v))
        except ValueError:
            out.append((1, 0.0, v))
    return tuple(out)


def _ordered(reference: list[str], seen: list[str]) -> list[str]:
    extra = sorted({s for s in seen if s not in reference}, key=lambda s: natural_key((s,)))
    return [*reference, *extra]


def _budget(table: dict, algo: str, env: str) -> float:
    family = table.get("env_family", {}).get(env)
    budgets = table.get("budget_frames") or {}
    value = budgets.get(f"{family}/{algo}", budgets.get(family))
    return float("nan") if value is None else float(value)


def _notes(dropped: int) -> list[str]:
    return [f"{dropped} duplicate run(s) of a seed left out (kept the finished/longest one)"] * bool(dropped)


def build_table(runs: pd.DataFrame, name: str) -> Report:
    """The paper's table ``name`` (``table1``/``table2``) from runs tagged for it.

    Runs are those whose ``paper.table`` param equals ``name``; cells are
    ``(paper.algo, paper.env)``. Every cell of the paper's table is present (``missing``
    when it has no run), plus any cell that has runs but no reference value. The
    reference comes from ``references.yaml``; the budget from the runs'
    ``paper.budget_frames`` param when they agree on one, else from ``references.yaml``.
    """
    table = references()[name]
    results: dict[str, dict[str, list[float]]] = table["results"]
    if not runs.empty:
        runs = runs[[lookup(r, "paper.table") == name for _, r in runs.iterrows()]]
    runs, dropped = dedupe_seeds(_with_keys(runs, ["paper.algo", "paper.env"]))
    seen = list(runs["_key"]) if not runs.empty else []
    rows = _ordered(list(results), [k[0] for k in seen])
    ref_envs = list(dict.fromkeys(e for envs in results.values() for e in envs))
    cols = _ordered(ref_envs, [k[1] for k in seen])
    cells = []
    for algo in rows:
        for env in cols:
            ref = results.get(algo, {}).get(env)
            group = runs[[k == (algo, env) for k in seen]] if seen else runs
            if ref is None and group.empty:
                continue
            mean, std = (float(ref[0]), float(ref[1])) if ref is not None else (
                _unique_number(group, "paper.reference_mean"), _unique_number(group, "paper.reference_std"))
            budget = _unique_number(group, "paper.budget_frames") if not group.empty else float("nan")
            budget = budget if np.isfinite(budget) else _budget(table, algo, env)
            cells.append(summarize((algo, env), group, mean, std, budget))
    notes = [f"budget: {text}" for text in table.get("budgets", {}).values()] + _notes(dropped)
    return Report(name, table["caption"], ["algo", "env"], cells, rows, cols, notes)


def build_grouped(runs: pd.DataFrame, keys: list[str]) -> Report:
    """Ad-hoc cells: runs grouped by tag or param names (``tags.X``/``params.X`` to choose).

    The paper value and budget of a cell come from the runs' ``paper.reference_mean``,
    ``paper.reference_std`` and ``paper.budget_frames`` params, when the runs agree on them.
    """
    runs, dropped = dedupe_seeds(_with_keys(runs, keys), same_dir=True)
    cells = []
    for key in sorted(set(runs["_key"]) if not runs.empty else [], key=natural_key):
        group = runs[[k == key for k in runs["_key"]]]
        cells.append(summarize(key, group, _unique_number(group, "paper.reference_mean"),
                               _unique_number(group, "paper.reference_std"),
                               _unique_number(group, "paper.budget_frames")))
    return Report("runs", f"Runs grouped by {', '.join(keys)}", list(keys), cells, notes=_notes(dropped))

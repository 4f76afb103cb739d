"""Groups runs into cells (paper tables or ad-hoc keys) and summarises each cell over seeds.

Per cell: mean ± std (``ddof=1``) of the final eval return over seeds, the IQM with a
95% percentile-bootstrap CI, the paper's mean ± std and the ratio ours/paper, the seed
count of distinct seeds (with how many are partial) and the mean frames run against
the budget. Failed runs (status FAILED, or a non-finite evaluation: diverged) are left
out unless asked for. By default ad-hoc cells are configs: runs share a cell when their
whole logged config agrees but for the seed and the keys that do not change the
experiment (``runs.NOT_CONFIG``); a cell's ``config`` column names what sets it apart
from the other configs of its algo and env (e.g. ``total_frames=2000``).
A seed run more than once in a cell (e.g. rerun with ``resume=false``) counts once:
its finished run with the most frames, the latest one on ties. Where a cell is one
config (paper tables, config cells), (cell, seed) identifies a repeat; in groups by
user keys, which may mix configs, a repeat must also share the ``run_dir`` tag.
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
from rlrun.report.runs import experiment_params, lookup

TABLES = ("table1", "table2")
UNSET = "(unset)"
NUMERIC = ["mean", "std", "iqm", "iqm_low", "iqm_high", "paper_mean", "paper_std", "ratio", "seeds",
           "runs_count", "partial", "frames", "budget", "seeds_needed"]
CONFIG_KEYS = ["algo", "env", "config"]
"""Key columns of the default ad-hoc report: one cell per config."""
LABEL_KEYS = 3
"""Differing params named in a config label before ``+N more``."""


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
    runs_count: int = 0
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
        return self.runs_count == 0

    @property
    def label(self) -> str:
        return " / ".join(self.key)

    @property
    def seeds_needed(self) -> float:
        """Seeds that would tell our mean from the paper's at 95% confidence, 80% power, given our
        spread (``stats.seeds_needed``); NaN with fewer than 2 seeds or no paper value."""
        if self.seeds < 2:
            return float("nan")
        return stats.seeds_needed(self.std, self.mean - self.paper_mean)


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

    @property
    def title(self) -> str:
        """The page's heading: an ad-hoc report ("runs") is its caption alone, a table ``name: caption``."""
        return self.caption if self.name == "runs" else f"{self.name}: {self.caption}"

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
    cell.runs_count, cell.partial = len(runs), int(runs["partial"].sum())
    cell.seeds = len(set(runs["seed"].dropna())) + int(runs["seed"].isna().sum())
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


def _notes(dropped: int, failed: int = 0) -> list[str]:
    return ([f"{dropped} duplicate run(s) of a seed left out (kept the finished/longest one)"] * bool(dropped)
            + [f"{failed} failed or diverged run(s) left out (--include-failed to show them)"] * bool(failed))


def drop_failed(runs: pd.DataFrame, include_failed: bool) -> tuple[pd.DataFrame, int]:
    """The runs without the failed ones (unless ``include_failed``), and how many were dropped."""
    if include_failed or runs.empty:
        return runs, 0
    keep = ~runs["failed"].astype(bool)
    return runs[keep], int((~keep).sum())


def _short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def config_labels(runs: pd.DataFrame) -> dict[tuple[str, str, str], str]:
    """Per (algo, env, config hash), the params that set it apart from the other configs of its algo and env.

    ``""`` when the config is the only one of its (algo, env); else the differing params as
    ``key=value`` (shallow keys first, at most ``LABEL_KEYS`` then ``+N more``).
    """
    labels: dict[tuple[str, str, str], str] = {}
    pairs = [(str(lookup(r, "algo")), str(lookup(r, "env"))) for _, r in runs.iterrows()]
    for pair in dict.fromkeys(pairs):
        group = runs[[p == pair for p in pairs]]
        configs = {h: experiment_params(p) for h, p in zip(group["config_hash"], group["params"])}
        if len(configs) == 1:
            labels.update(dict.fromkeys([(*pair, h) for h in configs], ""))
            continue
        keys = sorted({k for p in configs.values() for k in p}, key=lambda k: (k.count("."), k))
        differ = [k for k in keys if len({p.get(k, UNSET) for p in configs.values()}) > 1]
        for h, p in configs.items():
            shown = [f"{k}={_short(p.get(k, UNSET))}" for k in differ[:LABEL_KEYS]]
            more = [f"+{len(differ) - LABEL_KEYS} more"] if len(differ) > LABEL_KEYS else []
            labels[(*pair, h)] = ", ".join(shown + more) or h
    return labels


def build_table(runs: pd.DataFrame, name: str, include_failed: bool = False) -> Report:
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
    runs, failed = drop_failed(runs, include_failed)
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
    notes = [f"budget: {text}" for text in table.get("budgets", {}).values()] + _notes(dropped, failed)
    return Report(name, table["caption"], ["algo", "env"], cells, rows, cols, notes)


def build_grouped(runs: pd.DataFrame, keys: list[str] | None = None, include_failed: bool = False
                  ) -> Report:
    """Ad-hoc cells: one per config (``keys=None``), or runs grouped by tag or param names.

    Args:
        runs: Runs as ``load_runs`` reads them.
        keys: Tag or param names (``tags.X``/``params.X`` to choose; ``config_hash`` for the
            config); ``None`` groups by config, with ``algo``, ``env`` and a ``config`` label.
        include_failed: Keep failed and diverged runs.

    The paper value and budget of a cell come from the runs' ``paper.reference_mean``,
    ``paper.reference_std`` and ``paper.budget_frames`` params, when the runs agree on them;
    without a ``paper.budget_frames`` param, from ``total_frames``.
    """
    runs, failed = drop_failed(runs, include_failed)
    by_config = keys is None
    if by_config:
        labels = config_labels(runs) if not runs.empty else {}
        keyed = runs.assign(_key=pd.Series(
            [(str(lookup(r, "algo")), str(lookup(r, "env")), r["config_hash"]) for _, r in runs.iterrows()],
            index=runs.index, dtype=object)) if not runs.empty else runs.assign(_key=None)
        keys = CONFIG_KEYS if any(labels.values()) else CONFIG_KEYS[:2]
        caption = "Runs grouped by config (all but the seed" + (
            "; config: what sets a cell apart)" if len(keys) == 3 else ")")
    else:
        keyed, labels = _with_keys(runs, keys), {}
        caption = f"Runs grouped by {', '.join(keys)}"
    runs, dropped = dedupe_seeds(keyed, same_dir=not by_config)
    cells = []
    shown = {k: (*k[:2], labels[k])[:len(keys)] if by_config else k
             for k in (set(runs["_key"]) if not runs.empty else [])}
    for key in sorted(shown, key=lambda k: natural_key(shown[k])):
        group = runs[[k == key for k in runs["_key"]]]
        budget = _unique_number(group, "paper.budget_frames")
        budget = budget if np.isfinite(budget) else _unique_number(group, "total_frames")
        cells.append(summarize(shown[key], group, _unique_number(group, "paper.reference_mean"),
                               _unique_number(group, "paper.reference_std"), budget))
    return Report("runs", caption, list(keys), cells, notes=_notes(dropped, failed))

"""``rlrun report table2``: offline RL returns as D4RL-normalised scores beside the paper's.

A score is ``100 * (return - random) / (expert - random)`` with D4RL's reference
returns (``rlrun.datasets.scores.D4RL_REFERENCE``), per run, then mean ± std over
seeds; the paper's mean ± std returns are normalised the same way (the map is affine,
so its std scales by ``100 / (expert - random)``). Raw returns are shown too.

The cells, seeds, duplicates and failed runs are Table 1's (``rlrun.report.table``);
only the columns differ. The notes say what the comparison cannot: our datasets are
regenerated with D4RL's recipe (``rlrun dataset make``), not D4RL's own, on gymnasium's
v5 envs rather than D4RL's v2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from rlrun.datasets.scores import d4rl_reference, normalized_score
from rlrun.report import render
from rlrun.report.runs import lookup
from rlrun.report.stats import mean_std
from rlrun.report.table import Cell, Report

HEADERS = ["ours (D4RL score)", "paper (D4RL score)", "ours (return)", "paper (return)", "seeds",
           "updates", "dataset"]
NOTES = ("datasets: ours are regenerated here with D4RL's recipe (`rlrun dataset make`: SAC's replay "
         "buffer until a third of expert return), not D4RL's own downloads; envs are gymnasium v5, "
         "not D4RL's gym v2, so scores compare with the paper's only approximately",)


@dataclass
class Scores:
    """A cell's D4RL-normalised scores: ours over seeds, and the paper's."""

    mean: float = float("nan")
    std: float = float("nan")
    paper_mean: float = float("nan")
    paper_std: float = float("nan")
    ref_min: float = float("nan")
    ref_max: float = float("nan")


def cell_scores(cell: Cell) -> Scores:
    """The D4RL-normalised scores of one table-2 cell (key ``(algo, env)``); NaN without references."""
    try:
        ref_min, ref_max = d4rl_reference(cell.key[1])
    except Exception:  # an env without D4RL references: returns only
        return Scores()
    out = Scores(ref_min=ref_min, ref_max=ref_max)
    if not cell.missing:
        scores = normalized_score(cell.runs["final_return"].to_numpy(dtype=float), ref_min, ref_max)
        out.mean, out.std = mean_std(scores)
    if math.isfinite(cell.paper_mean):
        out.paper_mean = float(normalized_score(cell.paper_mean, ref_min, ref_max))
        out.paper_std = 100.0 * cell.paper_std / (ref_max - ref_min)
    return out


def _common(cell: Cell, key: str) -> str:
    """A param the cell's runs agree on (``n/a`` without runs, ``mixed`` when they differ)."""
    if cell.missing:
        return "-"
    values = {lookup(r, key) for _, r in cell.runs.iterrows()} - {None}
    return values.pop() if len(values) == 1 else ("mixed" if values else render.NA)


def _score(mean: float, std: float) -> str:
    if not math.isfinite(mean):
        return render.NA
    return f"{mean:.1f} ± {std:.1f}" if math.isfinite(std) else f"{mean:.1f}"


def columns(cell: Cell) -> list[str]:
    """The text of one cell under ``HEADERS``."""
    s = cell_scores(cell)
    updates = _common(cell, "total_updates")
    return ["missing" if cell.missing else _score(s.mean, s.std), _score(s.paper_mean, s.paper_std),
            "missing" if cell.missing else render.mean_pm(cell.mean, cell.std),
            render.mean_pm(cell.paper_mean, cell.paper_std), render.seeds(cell),
            updates if updates in ("-", render.NA, "mixed") else render.frames(float(updates)),
            _common(cell, "dataset")]


def legend(report: Report) -> list[str]:
    refs = sorted({(c.key[1], cell_scores(c).ref_min, cell_scores(c).ref_max) for c in report.cells})
    shown = ", ".join(f"{env} {lo:.2f} / {hi:.1f}" for env, lo, hi in refs if math.isfinite(lo))
    return ["D4RL score: 100 * (return - random) / (expert - random), D4RL's reference returns "
            f"(random / expert): {shown}; mean ± std over seeds (std ddof=1); return: final "
            "eval/episode_return", *NOTES, *report.notes]


def terminal(report: Report) -> str:
    """An aligned plain-text table, caption above, legend below."""
    header = [*report.keys, *HEADERS]
    body = [[render.plain(v) for v in [*c.key, *columns(c)]] for c in report.cells]
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    numeric = set(range(len(report.keys), len(header) - 1))

    def line(r: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in numeric else c.ljust(w)
                         for i, (c, w) in enumerate(zip(r, widths))).rstrip()

    text = [f"{report.name}: {report.caption}", line(header), "  ".join("-" * w for w in widths)]
    return "\n".join([*text, *(line(r) for r in body), *legend(report)]) + "\n"


def markdown(report: Report) -> str:
    """Markdown: the paper's layout in returns, then in D4RL scores (ours / paper), then one row per cell."""
    cols = report.cols or []
    out = [f"# {report.name}: {report.caption}", ""]
    for title, text in (("Returns", _returns_text), ("D4RL-normalised scores", _scores_text)):
        out += [f"{title}, ours / paper (mean ± std over seeds); *missing*: no run yet.", "",
                "| | " + " | ".join(render.md(c) for c in cols) + " |", "|---" * (len(cols) + 1) + "|"]
        for algo in report.rows or []:
            cells = [report.cell(algo, env) for env in cols]
            out.append(f"| **{render.md(algo)}** | "
                       + " | ".join("" if c is None else text(c) for c in cells) + " |")
        out.append("")
    header = [*report.keys, *HEADERS]
    out += ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    out += ["| " + " | ".join([*(render.md(k) for k in c.key), *(render.md(v) for v in columns(c))]) + " |"
            for c in report.cells]
    return "\n".join([*out, "", *(f"- {n}" for n in legend(report))]) + "\n"


def _returns_text(cell: Cell) -> str:
    ours = "*missing*" if cell.missing else render.mean_pm(cell.mean, cell.std)
    return f"{ours} / {render.mean_pm(cell.paper_mean, cell.paper_std)}"


def _scores_text(cell: Cell) -> str:
    s = cell_scores(cell)
    return f"{'*missing*' if cell.missing else _score(s.mean, s.std)} / {_score(s.paper_mean, s.paper_std)}"


def to_frame(report: Report) -> pd.DataFrame:
    """One row per cell: Table 1's numeric columns plus the D4RL scores."""
    frame = report.to_frame()
    scores = [cell_scores(c) for c in report.cells]
    for name in ("mean", "std", "paper_mean", "paper_std"):
        frame[f"d4rl_score_{name}"] = [getattr(s, name) for s in scores]
    return frame


def write_outputs(report: Report, formats: list[str], out: Path | None, source: str = "") -> list[Path]:
    """Prints/writes table 2 in the formats asked for (no plots: one final score per run)."""
    import sys

    written: list[Path] = []
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    if "terminal" in formats:
        text = terminal(report)
        sys.stdout.write(text)
        if out is not None:
            (out / "table.txt").write_text(text)
            written.append(out / "table.txt")
    if "markdown" in formats:
        (out / "table.md").write_text(markdown(report))
        written.append(out / "table.md")
    if "csv" in formats:
        render.csv_frame(to_frame(report)).to_csv(out / "table.csv", index=False)
        written.append(out / "table.csv")
    if "html" in formats:
        from rlrun.report import page

        written.append(page.write(report, out / f"{report.name}.html", headers=HEADERS, columns=columns,
                                  legend=legend(report), figures=[], source=source,
                                  figures_note="table 2 compares final scores; its runs count "
                                  "optimiser steps, not frames, so no frame-axis curves are drawn"))
    return written


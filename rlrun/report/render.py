"""Renders a report as an aligned text table, Markdown or CSV.

Values read from the tracker (cell keys, config labels, param and tag values) are data: they
show as text in every format. ``plain`` makes control characters visible (no terminal escape
sequences, no line breaks inside a row), ``md`` also escapes HTML and Markdown syntax, and
``csv_cell`` defuses spreadsheet formulas.
"""

from __future__ import annotations

import html
import math
import re
import sys
from pathlib import Path

import pandas as pd

from rlrun.report.stats import DDOF, LEVEL, RESAMPLES
from rlrun.report.table import Cell, Report

NA = "n/a"
HEADERS = ["ours (mean ± std)", "paper", "ratio", "IQM [95% CI]", "seeds", "frames / budget"]


def decimals(x: float) -> int:
    """No decimals from 100 up (as the paper prints MuJoCo returns), else two (Atari)."""
    return 0 if math.isfinite(x) and abs(x) >= 100 else 2


def num(x: float, places: int | None = None) -> str:
    """A return with ``places`` decimals (default: ``decimals(x)``); ``n/a`` when undefined."""
    if x is None or not math.isfinite(x):
        return NA
    return f"{x:.{decimals(x) if places is None else places}f}"


def mean_pm(mean: float, std: float) -> str:
    """``mean ± std`` (std printed like the mean); just the mean when std is undefined."""
    if not math.isfinite(mean):
        return NA
    d = decimals(mean)
    return f"{num(mean, d)} ± {num(std, d)}" if math.isfinite(std) else num(mean, d)


def frames(x: float) -> str:
    """A frame count in k/M units: 400k, 1M, 1.5M."""
    if not math.isfinite(x):
        return NA
    for scale, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.0f}"


def seeds(cell: Cell) -> str:
    """Distinct seeds: ``5``, ``3 (1 partial)``, ``2 (3 runs)`` or ``missing``."""
    if cell.missing:
        return "missing"
    notes = [f"{cell.runs_count} runs"] * (cell.runs_count != cell.seeds) + \
        [f"{cell.partial} partial"] * bool(cell.partial)
    return f"{cell.seeds} ({', '.join(notes)})" if notes else str(cell.seeds)


def cell_columns(cell: Cell) -> list[str]:
    """The text of one cell under ``HEADERS``."""
    if cell.missing:
        ours, iqm, ratio = "missing", "", ""
    else:
        ours = mean_pm(cell.mean, cell.std)
        d = decimals(cell.iqm)
        iqm = NA if not math.isfinite(cell.iqm) else \
            f"{num(cell.iqm, d)} [{num(cell.iqm_low, d)}, {num(cell.iqm_high, d)}]"
        ratio = f"{cell.ratio:.2f}" if math.isfinite(cell.ratio) else NA
    budget = frames(cell.budget)
    if math.isfinite(cell.frames) and math.isfinite(cell.budget) and cell.budget > 0:
        budget += f" ({cell.frames / cell.budget:.0%})"
    ran = "-" if cell.missing else frames(cell.frames)
    return [ours, mean_pm(cell.paper_mean, cell.paper_std), ratio, iqm, seeds(cell), f"{ran} / {budget}"]


def rows(report: Report) -> list[list[str]]:
    """Key columns then ``HEADERS`` per cell; a key repeated from the row above is blanked."""
    out, previous = [], None
    for cell in report.cells:
        key = [plain(k) for k in cell.key]
        shown = ["" if previous and i == 0 and key[0] == previous[0] and len(key) > 1 else k
                 for i, k in enumerate(key)]
        out.append([*shown, *cell_columns(cell)])
        previous = key
    return out


def terminal(report: Report) -> str:
    """An aligned plain-text table with the caption above and the notes below."""
    header = [*(plain(k) for k in report.keys), *HEADERS]
    body = rows(report)
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    numeric = set(range(len(report.keys), len(header)))

    def line(r: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in numeric else c.ljust(w)
                         for i, (c, w) in enumerate(zip(r, widths))).rstrip()

    text = [f"{report.name}: {plain(report.caption)}", line(header), "  ".join("-" * w for w in widths)]
    text += [line(r) for r in body]
    return "\n".join([*text, *legend(report)]) + "\n"


def legend(report: Report) -> list[str]:
    return [f"ours: final eval/episode_return, mean ± std over seeds (std ddof={DDOF}); "
            f"IQM: interquartile mean (25% trimmed), {LEVEL:.0%} percentile-bootstrap CI over seeds "
            f"({RESAMPLES} resamples); seeds: distinct seeds",
            *report.notes]


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_MD_SYNTAX = re.compile(r"([\\`*_\[\]|~$])")
_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def plain(text: object) -> str:
    """``text`` on one line with control and bidi-override characters shown as escapes (``\\n``)."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode(), str(text))


def md(text: object) -> str:
    """Tracker text for Markdown: one line, HTML entities for ``& < > "``, Markdown syntax escaped."""
    return _MD_SYNTAX.sub(r"\\\1", html.escape(plain(text)))


def csv_cell(value: object) -> object:
    """A CSV value a spreadsheet will not run, on one line: control characters shown as escapes
    (``plain``: no ESC/BEL reaches a terminal that prints the file), then text starting like a
    formula gets a leading ``'``."""
    if isinstance(value, str):
        value = plain(value)
    if isinstance(value, str) and value.startswith(_FORMULA):
        try:
            float(value)  # "-1.5" is a number, not a formula
        except ValueError:
            return "'" + value
    return value


def csv_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with ``csv_cell`` applied to its text columns and header."""
    out = frame.copy()
    for col in out.columns:
        if out[col].dtype == object or pd.api.types.is_string_dtype(out[col]):
            out[col] = [csv_cell(v) for v in out[col]]
    return out.rename(columns={c: csv_cell(c) for c in out.columns if isinstance(c, str)})


def markdown(report: Report, plots: dict[tuple[str, ...], str] | None = None,
             overview: str | None = None, comparisons: dict[str, str] | None = None) -> str:
    """Markdown: the paper's layout (tables only), then one detail row per cell.

    Args:
        report: The report.
        plots: PNG file name per cell key, linked from the detail rows.
        overview: File name of the overview grid PNG, embedded at the end.
        comparisons: File name of the comparison figure per env, embedded at the end.
    """
    out = [f"# {report.name}: {md(report.caption)}", ""]
    if report.rows is not None and report.cols is not None:
        out += ["Ours (mean ± std over seeds) / paper (mean ± std); *missing*: no run yet.", "",
                "| | " + " | ".join(md(c) for c in report.cols) + " |", "|---" * (len(report.cols) + 1) + "|"]
        for algo in report.rows:
            line = []
            for env in report.cols:
                cell = report.cell(algo, env)
                if cell is None:
                    line.append("")
                    continue
                ours = "*missing*" if cell.missing else mean_pm(cell.mean, cell.std)
                line.append(f"{ours} / {mean_pm(cell.paper_mean, cell.paper_std)}")
            out.append(f"| **{md(algo)}** | " + " | ".join(line) + " |")
        out += ["", "## Per cell", ""]
    header = [*(md(k) for k in report.keys), *HEADERS, *(["plot"] if plots else [])]
    out += ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    keys = len(report.keys)
    for cell, r in zip(report.cells, rows(report)):
        link = [f"[png]({plots[cell.key]})" if cell.key in plots else ""] if plots else []
        out.append("| " + " | ".join([*(md(c) for c in r[:keys]), *(c.replace("|", "\\|") for c in r[keys:]),
                                      *link]) + " |")
    out += ["", *(f"- {n}" for n in legend(report))]
    if overview:
        out += ["", f"![{report.name} overview]({overview})"]
    for env, name in (comparisons or {}).items():
        out += ["", f"![{md(env)}: algorithms compared]({name})"]
    return "\n".join(out) + "\n"


def write_csv(report: Report, path: Path) -> None:
    """One row per cell with numeric columns (``table.NUMERIC``); empty where undefined."""
    csv_frame(report.to_frame()).to_csv(path, index=False)


def parse_formats(text: str, allowed: tuple[str, ...]) -> list[str] | None:
    """``--format``'s comma-separated list; None after printing the one-line error (exit 2)."""
    formats = [f.strip() for f in text.split(",") if f.strip()]
    bad = [f for f in formats if f not in allowed]
    if bad or not formats:
        print(f"rlrun: error: unknown --format {','.join(bad) or text!r}; fix: use {', '.join(allowed)}",
              file=sys.stderr)
        return None
    return formats

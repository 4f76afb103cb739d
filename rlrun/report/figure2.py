"""``rlrun report figure2``: the paper's Figure 2 (MARL on VMAS) from runs with ``paper.table=figure2_marl``.

    rlrun -m '+paper/marl=glob(*)' seed=0,1,2      # the runs (6 algorithms x 3 tasks)
    rlrun report figure2                          # final-reward table on the terminal
    rlrun report figure2 --out report/            # + figure2.png and figure2.md
    rlrun report figure2 --format html --out report/   # report/figure2.html: one self-contained page

One panel per task with every algorithm on shared axes: the mean over seeds of
the evaluation return (the team's episode reward) against frames, and a band
from the lowest to the highest seed. The paper reports curves only, so the
table has no reference numbers; its qualitative claims (``references.yaml``
``figure2_marl``) are checked against ours below the table.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pandas as pd

from rlrun.report import render
from rlrun.report.render import md, plain
from rlrun.report.runs import ReportError, load_runs, lookup, normalize_uri
from rlrun.report.table import Cell, Report, dedupe_seeds, drop_failed, references, summarize

TABLE = "figure2_marl"
PPO_FAMILY = ("MAPPO", "IPPO")
Q_FAMILY = ("IQL", "VDN", "QMIX")


def reference() -> dict:
    """The paper's Figure 2 entry: algorithms and tasks in the paper's order, caption, claims."""
    return references()[TABLE]


Cells = dict[tuple[str, str], Cell]


def build_cells(runs: pd.DataFrame, include_failed: bool = False) -> tuple[Cells, list[str]]:
    """``{(task, algo): Cell}`` in the paper's order, and notes (runs left out)."""
    ref = reference()
    runs, failed = drop_failed(runs, include_failed)
    notes = [f"{failed} failed run(s) left out (--include-failed keeps them)"] if failed else []
    if runs.empty:
        return {(t, a): summarize((t, a), runs) for t in ref["tasks"] for a in ref["algorithms"]}, notes
    runs = runs.assign(_key=[(lookup(r, "paper.env") or "?", lookup(r, "paper.algo") or "?")
                             for _, r in runs.iterrows()])
    runs, dropped = dedupe_seeds(runs)
    if dropped:
        notes.append(f"{dropped} repeated seed run(s) left out (the finished one with most frames kept)")
    tasks = [*ref["tasks"], *sorted({k[0] for k in runs["_key"]} - set(ref["tasks"]))]
    algos = [*ref["algorithms"], *sorted({k[1] for k in runs["_key"]} - set(ref["algorithms"]))]
    cells = {}
    for task in tasks:
        for algo in algos:
            mine = runs[runs["_key"] == (task, algo)]
            cells[(task, algo)] = summarize((task, algo), mine, budget=float(ref["budget_frames"]))
    return cells, notes


def claims(cells: dict[tuple[str, str], Cell]) -> list[str]:
    """The paper's qualitative claims, each checked on our final returns (where both sides ran)."""
    lines = []
    tasks = list(dict.fromkeys(t for t, _ in cells))
    for task in tasks:
        ppo = [cells[(task, a)].mean for a in PPO_FAMILY if (task, a) in cells]
        q = [cells[(task, a)].mean for a in Q_FAMILY if (task, a) in cells]
        ppo, q = [x for x in ppo if math.isfinite(x)], [x for x in q if math.isfinite(x)]
        if ppo and q:
            lines.append(f"{task}: PPO-based beat Q-learning ones (paper: yes): "
                         f"{'yes' if min(ppo) > max(q) else 'no'} "
                         f"(worst PPO {min(ppo):.3g}, best Q {max(q):.3g})")
    if ("sampling", "IQL") in cells:
        iql = cells[("sampling", "IQL")].mean
        mixers = [cells[("sampling", a)].mean for a in ("QMIX", "VDN") if ("sampling", a) in cells]
        if math.isfinite(iql) and mixers and all(math.isfinite(m) for m in mixers):
            lines.append(f"sampling: QMIX and VDN beat IQL (paper: yes): "
                         f"{'yes' if min(mixers) > iql else 'no'} (IQL {iql:.3g}, QMIX/VDN "
                         f"{' / '.join(f'{m:.3g}' for m in mixers)})")
    return lines


def table_text(cells: dict[tuple[str, str], Cell], markdown: bool = False) -> str:
    """Final eval return, mean ± std over seeds (seed count), algorithms by tasks."""
    tasks = list(dict.fromkeys(t for t, _ in cells))
    algos = list(dict.fromkeys(a for _, a in cells))

    def entry(cell: Cell) -> str:
        if cell.missing:
            return "-"
        std = f" ± {cell.std:.3g}" if math.isfinite(cell.std) else ""
        partial = f", {cell.partial} partial" if cell.partial else ""
        return f"{cell.mean:.3g}{std} ({cell.seeds}s{partial})"

    text = md if markdown else plain
    rows = [[text(a), *(entry(cells[(t, a)]) for t in tasks)] for a in algos]
    head = ["algorithm", *(text(t) for t in tasks)]
    if markdown:
        return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
                          *("| " + " | ".join(r) + " |" for r in rows)]) + "\n"
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()
                     for r in [head, *rows]) + "\n"


def plot(cells: dict[tuple[str, str], Cell], path: Path) -> Path:
    """One panel per task, every algorithm on shared axes: mean over seeds and a min-max band."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    from rlrun.report.axes import aggregate, draw_over_seeds, mpl_text, no_data
    from rlrun.report.render import frames

    tasks = list(dict.fromkeys(t for t, _ in cells))
    algos = list(dict.fromkeys(a for _, a in cells))
    fig = Figure(figsize=(5 * len(tasks), 4), layout="constrained")
    # not sharex: a panel without runs clears its ticks (no_data), which would clear them all
    axes = fig.subplots(1, len(tasks), squeeze=False)[0]
    colors = {a: f"C{i}" for i, a in enumerate(algos)}
    for ax, task in zip(axes, tasks):
        drawn = False
        for algo in algos:
            cell = cells[(task, algo)]
            curves = [(r["curve_steps"], r["curve_values"]) for _, r in cell.runs.iterrows()]
            grid, mean, low, high, count = aggregate(curves)
            if not len(grid):
                continue
            drawn = True
            draw_over_seeds(ax, grid, mean, low, high, count, colors[algo],
                            f"{mpl_text(algo)} ({cell.seeds})", linewidth=1.6)
        if not drawn:
            no_data(ax, "no runs")
        ax.set_title(mpl_text(task))
        ax.set_xlabel("frames")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: frames(x)))
        ax.grid(alpha=0.3)
        if drawn:
            ax.legend(fontsize=8, loc="best")
    axes[0].set_ylabel("eval episode reward (team mean)")
    fig.suptitle("Figure 2: MARL on VMAS, mean over seeds, band min-max (seeds in brackets; interpolated on "
                 "a common frame grid, dotted where not every seed has evaluations)", fontsize=10)
    FigureCanvasAgg(fig)
    fig.savefig(path, format="png")
    return path


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rlrun report figure2",
                                description="The paper's Figure 2 (MARL on VMAS) from runs with "
                                "paper.table=figure2_marl: curves per task and the final-reward table.")
    p.add_argument("--tracking-uri", metavar="URI",
                   help="MLflow tracking URI or path to mlflow.db (default: sqlite:///<cwd>/mlflow.db)")
    p.add_argument("--experiment", metavar="NAME", nargs="+", action="extend",
                   help="experiment name(s) (default: every experiment in the store)")
    p.add_argument("--filter", metavar="STR", help="MLflow search filter, and-ed with paper.table")
    p.add_argument("--include-failed", action="store_true", help="keep failed and diverged runs")
    p.add_argument("--out", metavar="DIR", type=Path, help="write figure2.png and figure2.md here")
    p.add_argument("--format", default="terminal,markdown", metavar="FMT",
                   help="terminal, markdown (figure2.md + figure2.png with --out) or html (figure2.html, "
                   "one self-contained page); comma-separated (default: terminal,markdown)")
    return p


FORMATS = ("terminal", "markdown", "html")


def as_report(cells: Cells, notes: list[str]) -> Report:
    """The cells as a report: rows are tasks, columns algorithms (the figure's panels and lines)."""
    ref = reference()
    return Report("figure2", ref["caption"], ["task", "algo"], list(cells.values()),
                  rows=list(dict.fromkeys(t for t, _ in cells)),
                  cols=list(dict.fromkeys(a for _, a in cells)),
                  notes=notes)


def write_html(cells: Cells, notes: list[str], out: Path, source: str = "") -> Path:
    """``<out>/figure2.html``: the final table, the curves per task and each cell's provenance."""
    import tempfile

    from rlrun.report import page

    report = as_report(cells, notes)
    with tempfile.TemporaryDirectory() as tmp:
        png = plot(cells, Path(tmp) / "figure2.png").read_bytes()
    return page.write(report, out / "figure2.html", headers=render.HEADERS, columns=render.cell_columns,
                      legend=[*claims(cells), *render.legend(report)], source=source,
                      figures=[("every algorithm per task on shared axes: mean over seeds, band min-max",
                                png)])


def main(argv: list[str]) -> int:
    """Runs ``rlrun report figure2``; returns the exit code (2 for bad input)."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    formats = render.parse_formats(args.format, FORMATS)
    if formats is None:
        return 2
    if args.out is None and "html" in formats:
        args.out = Path("report")
    uri = normalize_uri(args.tracking_uri)
    where = f"params.`paper.table` = '{TABLE}'" + (f" and {args.filter}" if args.filter else "")
    try:
        runs = load_runs(uri, args.experiment, where)
        if runs.empty:
            raise ReportError(f"no runs with param paper.table={TABLE} in {uri}",
                              fix="launch them with `rlrun -m '+paper/marl=glob(*)' seed=0,1,2` (or one: "
                              "`rlrun +paper=marl/mappo_navigation`), or point --tracking-uri at them")
    except ReportError as err:
        print(f"rlrun: error: {err.render()}", file=sys.stderr)
        return 2
    cells, notes = build_cells(runs, args.include_failed)
    ref = reference()
    text = table_text(cells)
    checks = claims(cells)
    if "terminal" in formats:
        sys.stdout.write(f"{ref['caption']}\nfinal eval return, mean ± std over seeds (s: seeds)\n\n{text}\n"
                         + "".join(f"{plain(line)}\n" for line in [*checks, *notes]))
    written = []
    if args.out is not None and "html" in formats:
        written.append(write_html(cells, notes, args.out, uri).name)
    if args.out is not None and "markdown" in formats:
        args.out.mkdir(parents=True, exist_ok=True)
        png = plot(cells, args.out / "figure2.png")
        (args.out / "figure2.md").write_text(
            f"# Figure 2: MARL on VMAS\n\n{ref['caption']}\n\n![Figure 2]({png.name})\n\n"
            f"Final eval return, mean ± std over seeds (s: seeds):\n\n{table_text(cells, markdown=True)}\n"
            + "".join(f"- {md(line)}\n" for line in [*checks, *notes]))
        written += ["figure2.png", "figure2.md"]
    if written:
        print(f"[rlrun] wrote {', '.join(written)} to {args.out}/", file=sys.stderr)
    return 0


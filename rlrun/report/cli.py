"""``rlrun report``: the paper's tables or ad-hoc groups of runs, beside the paper's numbers.

    rlrun report                          # runs of ./mlflow.db, one cell per config
    rlrun report table1                   # the paper's table 1 from runs with paper.table=table1
    rlrun report table1 --format markdown # report/table.md + PNGs
    rlrun report table1 --format html     # report/table1.html: one self-contained page
    rlrun report table2                   # offline: D4RL-normalised scores beside the paper's
    rlrun report figure2 --out report/    # the paper's Figure 2 (MARL on VMAS): curves + final table
    rlrun report --group-by algo,loss.clip_epsilon --filter "tags.sweep = 'clip'"
    rlrun report --sweep runs/multirun/2026-01-01_12-00-00   # one sweep's jobs (or its parent run id)
    rlrun report --tracking-uri sqlite:///path/mlflow.db --experiment rlrun --format csv --out out/
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rlrun.launch.sweep_group import PARENT_TAG, sweep_filter
from rlrun.report.runs import ReportError, load_runs, normalize_uri
from rlrun.report.table import TABLES, Report, build_grouped, build_table

FORMATS = ("terminal", "markdown", "csv", "html")
DEFAULT_OUT = Path("report")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``rlrun report``."""
    p = argparse.ArgumentParser(
        prog="rlrun report", description="Tables and learning curves from the runs of an MLflow store.")
    p.add_argument("table", nargs="?", choices=TABLES,
                   help="a paper table: cells (paper.algo, paper.env) of runs whose paper.table param "
                   "is this; without it, all runs grouped by --group-by")
    p.add_argument("--tracking-uri", metavar="URI",
                   help="MLflow tracking URI or path to mlflow.db (default: sqlite:///<cwd>/mlflow.db)")
    p.add_argument("--experiment", metavar="NAME", nargs="+", action="extend",
                   help="experiment name(s) (default: every experiment in the store)")
    p.add_argument("--filter", metavar="STR",
                   help="MLflow search filter, e.g. \"tags.algo = 'sac' and params.seed != '3'\"")
    p.add_argument("--sweep", metavar="SWEEP",
                   help="only the jobs of one sweep: its MLflow parent run id, or its sweep directory "
                   "(path or name, e.g. runs/multirun/2026-01-01_12-00-00)")
    p.add_argument("--group-by", metavar="KEYS",
                   help="comma-separated tag or param names, or config_hash (default: one cell per "
                   "config: all params but the seed and those that do not change the experiment); "
                   "tags.X/params.X choose between a tag and a param")
    p.add_argument("--include-failed", action="store_true",
                   help="keep failed and diverged runs (left out by default)")
    p.add_argument("--format", default="terminal", metavar="FMT",
                   help="terminal, markdown, csv or html (one self-contained page: tables, curves, "
                   "provenance, rerun commands); comma-separated for several (default: terminal)")
    p.add_argument("--out", metavar="DIR", type=Path,
                   help="write the table(s) and PNGs here (default: report/ for markdown, csv or html)")
    p.add_argument("--no-plots", action="store_true", help="write no PNGs")
    return p


def combine_filters(table: str | None, user_filter: str | None) -> str | None:
    """The MLflow filter for a table's runs, and-ed with the user's filter."""
    parts = ([f"params.`paper.table` = '{table}'"] if table else []) + ([user_filter] if user_filter else [])
    return " and ".join(parts) or None


def make_report(args: argparse.Namespace) -> Report:
    """Loads the runs that ``args`` select and builds the report; raises ReportError."""
    uri = normalize_uri(args.tracking_uri)
    runs = load_runs(uri, args.experiment, combine_filters(args.table, args.filter))
    runs = runs[runs["tags"].map(lambda t: PARENT_TAG not in t).astype(bool)]  # sweeps' parents: no training
    if runs.empty:
        where = f"{uri}" + (f", experiment(s) {', '.join(args.experiment)}" if args.experiment else "")
        if args.table:
            raise ReportError(f"no runs with param paper.table={args.table} in {where}",
                              fix=f"{launch_hint(args.table)}point --tracking-uri / --experiment / "
                              "--filter at them")
        raise ReportError(f"no runs in {where}" + (f" matching --filter {args.filter!r}" if args.filter
                                                   else ""),
                          fix="point --tracking-uri at the store the runs were logged to, "
                          "or loosen --experiment / --filter")
    if args.table:
        return build_table(runs, args.table, args.include_failed)
    keys = [k.strip() for k in args.group_by.split(",") if k.strip()] if args.group_by else None
    if keys:
        check_group_keys(runs, keys)
    return build_grouped(runs, keys or None, args.include_failed)


def check_group_keys(runs, keys: list[str]) -> None:
    """Refuses a --group-by key that no selected run has as a tag or param (it would group every
    run into one '(unset)' cell and exit 0); the error lists the keys the runs do have."""
    tags = {k for t in runs["tags"] for k in t}
    params = {k for p in runs["params"] for k in p}
    known = {"config_hash", *tags, *params}
    for key in keys:
        if (key in known or (key.startswith("tags.") and key[5:] in tags)
                or (key.startswith("params.") and key[7:] in params)):
            continue
        from rlrun.core.errors import did_you_mean

        valid = sorted(known, key=lambda k: (k.count("."), k))
        shown = ", ".join(valid[:25]) + (f" (+{len(valid) - 25} more)" if len(valid) > 25 else "")
        raise ReportError(f"--group-by {key!r} is neither a tag nor a param of the selected runs."
                          f"{did_you_mean(key, known)}",
                          fix=f"use tag or param names (tags.X/params.X to choose), e.g. {shown}")


def launch_hint(table: str) -> str:
    """How to launch a paper table's runs, as commands that work; empty without shipped configs."""
    from rlrun.lifecycle.compose import config_groups

    cells = [o.split("/", 1)[1] for o in config_groups().get("paper", []) if o.startswith(f"{table}/")]
    if not cells:
        return ""
    return (f"launch one cell with `rlrun +paper={table}/{cells[0]}` or the whole table with "
            f"`rlrun -m '+paper/{table}=glob(*)' seed=0,1,2,3,4`, or ")


def write_outputs(report: Report, formats: list[str], out: Path | None, plots: bool, source: str = ""
                  ) -> list[Path]:
    """Prints/writes the formats; writes PNGs too when there is an output folder (``source``: the store)."""
    from rlrun.report import render

    written: list[Path] = []
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    names, overview, comparisons = {}, None, {}
    if out is not None and plots and set(formats) - {"html"}:  # the page inlines its own figures
        from rlrun.report.plots import write_plots

        names, overview, comparisons = write_plots(report, out)
        written += [out / n for n in [*names.values(), *comparisons.values()]] + (
            [out / overview] if overview else [])
    if "terminal" in formats:
        text = render.terminal(report)
        sys.stdout.write(text)
        if out is not None:
            (out / "table.txt").write_text(text)
            written.append(out / "table.txt")
    if "markdown" in formats:
        (out / "table.md").write_text(render.markdown(report, names, overview, comparisons))
        written.append(out / "table.md")
    if "csv" in formats:
        render.write_csv(report, out / "table.csv")
        written.append(out / "table.csv")
    if "html" in formats:
        from rlrun.report.page import write_table

        written.append(write_table(report, out, source))
    return written


def main(argv: list[str]) -> int:
    """Runs ``rlrun report``; returns the exit code (2 for bad input)."""
    if argv[:1] == ["figure2"]:  # the paper's Figure 2 (MARL curves): a report of its own
        from rlrun.report.figure2 import main as figure2

        return figure2(argv[1:])
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help, or a usage error argparse already printed
        return int(exit_.code or 0)
    if args.table is None and args.experiment and args.experiment[-1] in TABLES:
        args.table = args.experiment.pop()  # `--experiment NAME table1`: nargs="+" took the table
    if args.sweep:  # a sweep's jobs: the children of its parent run (rlrun.launch.sweep_group)
        args.filter = " and ".join(filter(None, [args.filter, sweep_filter(args.sweep)]))
    from rlrun.report import render

    formats = render.parse_formats(args.format, FORMATS)
    if formats is None:
        return 2
    if args.table and args.group_by:
        print(f"rlrun: error: --group-by does not apply to {args.table} (its cells are paper.algo, "
              "paper.env); fix: drop --group-by, or drop the table name", file=sys.stderr)
        return 2
    out = args.out
    if out is None and any(f != "terminal" for f in formats):
        out = DEFAULT_OUT
    try:
        report = make_report(args)
    except ReportError as err:
        print(f"rlrun: error: {err.render()}", file=sys.stderr)
        return 2
    if args.table == "table2":  # D4RL-normalised scores beside raw returns (rlrun.report.offline)
        from rlrun.report.offline import write_outputs as write_table2

        written = write_table2(report, formats, out, normalize_uri(args.tracking_uri))
    else:
        written = write_outputs(report, formats, out, plots=not args.no_plots,
                                source=normalize_uri(args.tracking_uri))
    if written:
        pngs = sum(p.suffix == ".png" for p in written)
        names = [p.name for p in written if p.suffix != ".png"] + ([f"{pngs} PNG(s)"] if pngs else [])
        print(f"[rlrun] wrote {', '.join(names)} to {out}/", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

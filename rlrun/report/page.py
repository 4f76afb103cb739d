"""The report as one self-contained HTML page (``--format html``): no JavaScript, figures inlined.

The page holds the paper's layout (our IQM with its 95% interval and seed count beside the
paper's mean ± std), one row per cell with the spread over seeds and how many seeds would
tell it from the paper's value (``stats.seeds_needed``), the learning curves per env with
every algorithm on shared axes (PNG data URIs), and per cell its provenance (config hash,
versions, git commit, tracker run ids) with the command that reruns each seed
(``rerun``). Every value from the tracker goes through ``esc`` (``html.escape`` of ``plain``):
a param holding ``<script>`` shows as text.
"""

from __future__ import annotations

import base64
import html
import math
import tempfile
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from rlrun.report import render, stats
from rlrun.report.rerun import rerun
from rlrun.report.table import Cell, Report, natural_key

VERSION_TAGS = ("rlrun_version", "version.")
COMMIT_TAGS = ("git_commit", "rlrun_git_commit")
STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px 32px;color:#1d1d1f;
max-width:1500px;line-height:1.4}
h1{font-size:1.5em;margin-bottom:.2em}h2{margin-top:1.6em;border-bottom:1px solid #ddd;padding-bottom:.2em}
.meta{color:#555;font-size:.9em}
table{border-collapse:collapse;margin:.6em 0;font-size:.88em}
th,td{border:1px solid #ccc;padding:4px 8px;vertical-align:top;text-align:left}
th{background:#f3f4f6}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.missing{color:#999;font-style:italic}
.ours{font-weight:600}.paper{color:#555}.small{font-size:.85em;color:#555}
img{max-width:100%;border:1px solid #eee;margin:.4em 0}
pre{background:#f6f8fa;border:1px solid #ddd;padding:6px 8px;white-space:pre-wrap;word-break:break-all;
margin:.2em 0;font-size:.85em}
details{margin:.4em 0 .8em 0}summary{cursor:pointer;font-weight:600}
.wide{overflow-x:auto;max-width:100%}.grid td,.grid th{font-size:.92em;padding:3px 6px}
.ok{color:#1a7f37}.warn{color:#9a6700}
ol.notes li,ul.notes li{font-size:.88em;color:#333}
"""


def esc(value: object) -> str:
    """Tracker text for HTML: one line (``render.plain``), then ``html.escape`` (quotes included)."""
    return html.escape(render.plain(value), quote=True)


def _num(x: float) -> str:
    return render.num(x)


def seeds_text(cell: Cell) -> tuple[str, str]:
    """The spread over seeds and the seeds needed to tell the cell from the paper's value, as text."""
    if cell.missing or cell.seeds < 2:
        return (render.NA, f"{render.NA} (needs ≥ 2 seeds)" if not cell.missing else "")
    spread = _num(cell.std)
    if not math.isfinite(cell.paper_mean):
        return spread, f"{render.NA} (no paper value)"
    n = cell.seeds_needed
    if math.isnan(n):
        return spread, render.NA
    if math.isinf(n):
        return spread, ("∞ (same mean as the paper)" if cell.mean == cell.paper_mean
                        else f"> {stats.MAX_SEEDS:,}")
    have = "enough" if cell.seeds >= n else f"have {cell.seeds}"
    return spread, f"{int(n)} ({have})"


def _grid(report: Report) -> list[str]:
    """The paper's layout: per cell our IQM [95% CI] (n) over the paper's mean ± std."""
    if report.rows is None or report.cols is None:
        return []
    out = ["<h2>The paper's layout</h2>",
           "<p class='small'>Ours: IQM of the final eval return over seeds [95% bootstrap CI] (seeds); "
           "below it the paper's mean ± std. <i>missing</i>: no run yet.</p>",
           "<div class='wide'><table class='grid'><tr><th></th>"
           + "".join(f"<th>{esc(c)}</th>" for c in report.cols) + "</tr>"]
    for row in report.rows:
        line = [f"<tr><th>{esc(row)}</th>"]
        for col in report.cols:
            cell = report.cell(row, col)
            if cell is None:
                line.append("<td></td>")
                continue
            if cell.missing:
                ours = "<span class='missing'>missing</span>"
            else:
                d = render.decimals(cell.iqm)
                ours = (f"<span class='ours'>{render.num(cell.iqm, d)}</span> "
                        f"[{render.num(cell.iqm_low, d)}, {render.num(cell.iqm_high, d)}] ({cell.seeds})")
            paper = render.mean_pm(cell.paper_mean, cell.paper_std)
            line.append(f"<td class='num'>{ours}<br><span class='paper'>paper {esc(paper)}</span></td>")
        out.append("".join(line) + "</tr>")
    return [*out, "</table></div>"]


def _cells(report: Report, headers: list[str], columns: Callable[[Cell], list[str]]) -> list[str]:
    head = [*report.keys, *headers, "spread (std over seeds)", "seeds to tell from the paper¹"]
    ran = [c for c in report.cells if not c.missing]
    missing = len(report.cells) - len(ran)
    out = ["<h2>Per cell</h2>"]
    if missing:
        out.append(f"<p class='small'>The {len(ran)} cell(s) with runs; {missing} cell(s) of the table have "
                   "none yet (<i>missing</i> in the layout above).</p>")
    out.append("<div class='wide'><table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr>")
    for cell in ran:
        values = [*columns(cell), *seeds_text(cell)]
        out.append("<tr>" + "".join(f"<td>{esc(k)}</td>" for k in cell.key)
                   + "".join(f"<td class='num'>{esc(v)}</td>" for v in values) + "</tr>")
    return [*out, "</table></div>"]


def _versions(tags: dict[str, str]) -> str:
    return ", ".join(f"{k.removeprefix('version.')} {v}" for k, v in sorted(tags.items())
                     if k.startswith(VERSION_TAGS)) or "-"


def provenance(cell: Cell) -> list[str]:
    """A cell's runs (run id, seed, status, frames, final return, hash, versions, commit) and reruns."""
    if cell.missing:
        return []
    out = [f"<details><summary>{esc(cell.label)}: provenance and rerun commands "
           f"({cell.runs_count} run{'s' * (cell.runs_count != 1)})</summary>",
           "<table><tr><th>seed</th><th>tracker run id</th><th>experiment</th><th>status</th>"
           "<th>frames</th><th>final return</th><th>config hash</th><th>versions</th>"
           "<th>git commit</th></tr>"]
    runs = sorted((r for _, r in cell.runs.iterrows()), key=lambda r: natural_key((str(r["seed"]),)))
    for run in runs:
        tags = run["tags"]
        logged = tags.get("config_hash")
        hashes = esc(run["config_hash"]) + ("" if logged in (None, run["config_hash"])
                                            else f" (tag: {esc(logged)})")
        commits = "<br>".join(f"{esc(k)}: {esc(tags[k])}" for k in COMMIT_TAGS if tags.get(k)) or "-"
        out.append(f"<tr><td>{esc(run['seed'])}</td><td><code>{esc(run['run_id'])}</code></td>"
                   f"<td>{esc(run['experiment'])}</td><td>{esc(run['status'])}</td>"
                   f"<td class='num'>{esc(render.frames(run['frames']))}</td>"
                   f"<td class='num'>{esc(_num(run['final_return']))}</td><td><code>{hashes}</code></td>"
                   f"<td>{esc(_versions(tags))}</td><td>{commits}</td></tr>")
    out.append("</table><p class='small'>Rerun a seed (from an empty directory; it logs to ./mlflow.db):</p>")
    for i, run in enumerate(runs):
        again = rerun(run["params"], run["tags"], verify=i == 0)  # one compose check per cell
        label = f"seed {esc(run['seed'])}"
        if again.command is None:
            out.append(f"<p class='warn'>{label}: no command ({esc(again.reason)})</p>")
            continue
        check = ""
        if i == 0:
            check = (" <span class='ok'>(composes to this run's config hash)</span>" if again.exact
                     else f" <span class='warn'>({esc(again.reason)})</span>")
        out.append(f"<div class='small'>{label}{check}</div>"
                   f"<pre><code>{esc_block(again.command)}</code></pre>")
    return [*out, "</details>"]


def esc_block(text: str) -> str:
    """Text for a ``<pre>`` block: escaped, control characters shown as escapes (``render.plain``:
    a copied command carries no ESC/BEL), line breaks kept (a shell-quoted newline stays one)."""
    return html.escape("\n".join(render.plain(line) for line in text.split("\n")), quote=True)


def figure(caption: str, png: bytes) -> str:
    """An ``<img>`` with the PNG inlined as a data URI, captioned."""
    data = base64.b64encode(png).decode("ascii")
    return (f"<figure><img alt='{esc(caption)}' src='data:image/png;base64,{data}'>"
            f"<figcaption class='small'>{esc(caption)}</figcaption></figure>")


def comparison_figures(report: Report) -> list[tuple[str, bytes]]:
    """Per env, every cell's IQM learning curve and performance profile on shared axes (``compare``)."""
    from rlrun.report.compare import write_comparisons

    with tempfile.TemporaryDirectory() as tmp:
        names = write_comparisons(report, Path(tmp))
        return [(f"{env}: every algorithm on shared axes (IQM over seeds, 95% bootstrap CI; each seed "
                 "interpolated linearly onto a common frame grid, dotted where not every seed has "
                 "evaluations) and the performance profile of final returns", (Path(tmp) / name).read_bytes())
                for env, name in names.items()]


def footnotes(report: Report, legend: list[str]) -> list[str]:
    notes = [
        f"¹ Seeds that a two-sided one-sample t-test at {stats.LEVEL:.0%} confidence needs to tell our "
        f"mean from the paper's with {stats.POWER:.0%} power, assuming final returns are normal over "
        "seeds, our spread (sample std, ddof=1) is the true one, our mean's gap to the paper is the "
        "true gap, and the paper's value is exact (its own seed noise ignored). Exact noncentral-t "
        "power (scipy), starting from the normal approximation ((z₀.₉₇₅ + z₀.₈)·std/gap)². "
        "'enough': the seeds we have already suffice; ∞: no gap to detect.",
        "Rerun commands are rebuilt from the tracker: the presets (the run's paper preset, else its "
        "algo and env tags) plus one override per logged param that differs from them; where and how "
        "a run was logged (logger, progress, resume, dataset_root) is left out. Arguments are quoted "
        "for a POSIX shell. A fixed seed on the CPU reruns the same numbers; other devices may differ.",
        *legend]
    return ["<h2>Notes</h2>", "<ul class='notes'>", *(f"<li>{esc(n)}</li>" for n in notes), "</ul>"]


def page(report: Report, headers: list[str], columns: Callable[[Cell], list[str]], legend: list[str],
         figures: list[tuple[str, bytes]], source: str = "", figures_note: str = "") -> str:
    """The HTML page of a report.

    Args:
        report: The report.
        headers: Per-cell column names, and ``columns`` their text per cell.
        columns: The text of a cell under ``headers``.
        legend: Notes on the columns, shown at the end.
        figures: ``(caption, PNG bytes)`` per figure.
        source: Where the runs came from (tracking URI), shown under the title.
        figures_note: Shown instead of figures when there are none.
    """
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    body = [f"<h1>{esc(report.title)}</h1>",
            f"<p class='meta'>{len(report.cells)} cells, {sum(c.runs_count for c in report.cells)} runs"
            + (f" from {esc(source)}" if source else "") + f"; made {when} by <code>rlrun report</code>.</p>",
            *_grid(report), *_cells(report, headers, columns), "<h2>Learning curves</h2>"]
    body += [figure(c, png) for c, png in figures] or [
        f"<p class='small'>{esc(figures_note or 'no curves')}</p>"]
    body += ["<h2>Provenance and rerun commands</h2>"]
    for cell in report.cells:
        body += provenance(cell)
    body += footnotes(report, legend)
    return document(f"{report.name}: rlrun report", body)


def document(title: str, body: list[str]) -> str:
    """A self-contained page in the report's style: ``title`` (text) over ``body`` (HTML lines).
    Every rlrun page goes through here (``rlrun report``, ``python -m rlrun.benchmarks fidelity``)."""
    return ("<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            f"<title>{esc(title)}</title><style>{STYLE}</style></head>\n<body>\n"
            + "\n".join(body) + "\n</body></html>\n")


def write(report: Report, path: Path, **kwargs) -> Path:
    """Writes ``page(report, **kwargs)`` to ``path`` (UTF-8)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page(report, **kwargs), encoding="utf-8")
    return path


def write_table(report: Report, out: Path, source: str = "") -> Path:
    """``<out>/<report>.html`` for table 1 or a grouped report: render's columns, compare's curves."""
    figures = comparison_figures(report)
    return write(report, out / f"{report.name}.html", headers=render.HEADERS, columns=render.cell_columns,
                 legend=render.legend(report), figures=figures, source=source,
                 figures_note="no evaluation curves logged")

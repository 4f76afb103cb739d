"""``rlrun report --format html``: hostile tracker values shown as text in every format, the page's
content (paper layout, seeds needed, provenance, rerun commands), and a headless Chromium render."""

from __future__ import annotations

import csv
import html
import os
import re
import shutil
import subprocess

import pytest
from report.conftest import log_run, table1  # tests/ is on the path (pyproject pythonpath)

from rlrun.report.cli import main

SCRIPT = "<script>alert(1)</script>"
ALGO = SCRIPT                                  # a cell key: paper.algo
FORMULA = '=HYPERLINK("http://evil","x")'      # a CSV formula, as a cell key
ENV = '"onload=alert(1) |x\ny`z` $\\alpha$'    # attribute break-out, table breakers, mathtext
BOLD = "<b>bold</b>"
IMG = "<img src=x onerror=alert(1)>"


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> str:
    """A real MLflow store whose runs carry hostile params and tags in every field the report shows."""
    from mlflow.tracking import MlflowClient

    root = tmp_path_factory.mktemp("hostile")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp = client.create_experiment(SCRIPT, artifact_location=(root / "mlruns").as_uri())
    tags = {"version.torch": BOLD, "git_commit": IMG, "rlrun_version": "`rm -rf /`", "config_hash": '"><x'}
    for seed, final in ((0, 2000.0), (1, 2600.0), (2, 2300.0)):
        log_run(client, exp, algo="ppo", env=ENV, seed=seed, final=final, frames=1000, total=1000,
                paper={**table1("PPO", "Hopper"), "algo": ALGO, "env": ENV},
                params={"loss.name": SCRIPT, "model.note": "a|b\n`c`"}, tags=tags, start=seed)
    log_run(client, exp, algo="sac", env=ENV, seed=0, final=5.0, frames=1000, total=1000,
            paper={**table1("SAC", "Hopper"), "algo": FORMULA, "env": ENV}, tags=tags, start=9)
    return uri


@pytest.fixture(scope="module")
def outputs(hostile, tmp_path_factory):
    out = tmp_path_factory.mktemp("out")
    formats = "html,markdown,csv"
    assert main(["table1", "--tracking-uri", hostile, "--format", formats, "--out", str(out)]) == 0
    return out


def test_html_shows_hostile_values_as_text(outputs):
    page = (outputs / "table1.html").read_text()
    assert "<script" not in page.lower() and "<b>bold" not in page and "<img src=x" not in page
    assert html.escape(SCRIPT) in page and html.escape(BOLD) in page and html.escape(IMG) in page
    assert '"onload' not in page and "&quot;onload=alert(1) |x\\ny`z`" in page  # quotes escaped, one line
    assert "onerror=alert(1)&gt;" in page and "`rm -rf /`" in page
    # Every tag the page opens is one of ours: no markup came from the tracker.
    assert set(re.findall(r"<([a-zA-Z][a-zA-Z0-9]*)", page)) <= {
        "html", "head", "meta", "title", "style", "body", "h1", "h2", "p", "table", "tr", "th", "td", "span",
        "br", "i", "code", "pre", "details", "summary", "div", "figure", "img", "figcaption", "ul", "li"}
    assert page.count("<img ") == 1  # the one learning-curve figure (the env's comparison), inlined
    assert "src='data:image/png;base64," in page


def test_markdown_shows_hostile_values_as_text(outputs):
    md = (outputs / "table.md").read_text()
    assert "<script" not in md.lower() and "&lt;script&gt;alert(1)&lt;/script&gt;" in md
    rows = [line for line in md.splitlines() if line.startswith("| ")]
    header = md.splitlines()[md.splitlines().index("## Per cell") + 2]
    pipes = len(re.findall(r"(?<!\\)\|", header))
    per_cell = rows[rows.index(header):]
    assert len(per_cell) >= 3 and all(len(re.findall(r"(?<!\\)\|", r)) == pipes for r in per_cell), per_cell
    assert "\\`z\\`" in md and "&quot;onload" in md and "\\$\\\\alpha\\$" in md


def test_csv_defuses_formulas(outputs):
    with open(outputs / "table.csv", newline="") as f:
        cells = [c for row in csv.reader(f) for c in row]
    assert "'" + FORMULA in cells and not any(c.startswith(("=", "+", "@")) for c in cells)
    assert SCRIPT in cells  # CSV is data: the text itself, unchanged (a spreadsheet shows it as text)


def test_terminal_keeps_one_line_per_cell(hostile, capsys):
    assert main(["table1", "--tracking-uri", hostile]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "|x\\ny`z`" in out


def test_page_states_spread_seeds_needed_and_rerun_per_seed(outputs):
    page = html.unescape((outputs / "table1.html").read_text())
    # The 3-seed cell: finals 2000, 2600, 2300 -> mean 2300, std 300; paper PPO/Hopper 1703: gap
    # 597 = 1.99 std, which 5 seeds tell at 80% power (stats.seeds_needed).
    from rlrun.report.stats import seeds_needed

    assert seeds_needed(300.0, 2300.0 - 1703.0) == 5
    row = next(r for r in page.split("<tr>") if r.startswith(f"<td>{SCRIPT}</td>"))
    assert "<td class='num'>300</td><td class='num'>5 (have 3)</td>" in row
    assert "n/a (needs ≥ 2 seeds)" in page  # the one-seed cell
    assert "a two-sided one-sample t-test at 95% confidence" in page and "80% power" in page
    # These runs logged a few params, not a whole config: no command is made up for them.
    assert page.count("no command (the logged params are not a whole rlrun config") == 4


def _distinct_colours(png) -> int:
    from PIL import Image

    with Image.open(png) as img:
        return len(img.convert("RGB").getcolors(maxcolors=1 << 24) or [])


@pytest.mark.skipif(shutil.which("chromium") is None and os.environ.get("RLRUN_REQUIRE_CHROMIUM") != "1",
                    reason="Debian's chromium is not installed (apt-get install chromium)")
def test_page_renders_in_headless_chromium(outputs, tmp_path):
    """As a user opens it (.ci/run installs chromium and sets RLRUN_REQUIRE_CHROMIUM=1: no skip there)."""
    shot = tmp_path / "page.png"
    done = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           f"--screenshot={shot}", "--window-size=1400,2000",
                           (outputs / "table1.html").resolve().as_uri()],
                          capture_output=True, text=True, timeout=90)
    assert shot.is_file(), done.stderr[-2000:]
    assert _distinct_colours(shot) > 200  # text, tables and an inlined figure; a blank page has ~1


def test_grouped_report_shows_hostile_values_as_text(hostile, tmp_path):
    # Ad-hoc cells: keys from the runs' own algo/env tags and a user's --group-by of a hostile param.
    out = tmp_path / "out"
    assert main(["--tracking-uri", hostile, "--group-by", "paper.algo,model.note",
                 "--format", "html,markdown", "--out", str(out)]) == 0
    page, md = (out / "runs.html").read_text(), (out / "table.md").read_text()
    assert "<script" not in page.lower() and "<script" not in md.lower()
    assert html.escape(SCRIPT) in page and "a|b\\n`c`" in page and "a\\|b\\\\n\\`c\\`" in md


def test_ad_hoc_page_title_is_its_caption_not_runs_colon(hostile, tmp_path):
    # issue 42: the heading of an ad-hoc page read "runs: Runs grouped by config"
    out = tmp_path / "out"
    assert main(["--tracking-uri", hostile, "--format", "html", "--out", str(out)]) == 0
    page = (out / "runs.html").read_text()
    heading = re.search(r"<h1>(.*?)</h1>", page).group(1)
    assert heading.startswith("Runs grouped by") and "runs:" not in heading

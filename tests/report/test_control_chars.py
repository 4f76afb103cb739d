"""Control characters from a tracker's params and tags are shown as visible escapes in the HTML
page's rerun-command blocks and in the CSV's text columns (issue 40 §3), as in every other format."""

from __future__ import annotations

import pytest
from report.conftest import log_run, table1  # tests/ is on the path (pyproject pythonpath)

from rlrun.report.cli import main

TITLE = "sac\x1b]0;owned\x07"       # sets a terminal's title
CLEAR = "x\x1b[2J\x1b[H\x07y"        # clears the screen, rings the bell
LINK = "\x1b]8;;http://evil\x1b\\click\x1b]8;;\x1b\\"  # an OSC-8 link


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    from mlflow.tracking import MlflowClient

    root = tmp_path_factory.mktemp("ctl")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp = client.create_experiment("ctl", artifact_location=(root / "mlruns").as_uri())
    for seed in (0, 1):
        log_run(client, exp, algo="sac", env="Hopper", seed=seed, final=100.0 + seed, frames=1000, total=1000,
                paper={**table1("SAC", "Hopper"), "algo": TITLE},
                params={"model.note": CLEAR, "loss.x": LINK},
                tags={"git_commit": LINK}, start=seed)
    out = tmp_path_factory.mktemp("out")
    assert main(["table1", "--tracking-uri", uri, "--format", "html,csv", "--out", str(out)]) == 0
    return out


@pytest.mark.parametrize("name", ["table1.html", "table.csv"])
def test_no_escape_or_bell_byte_reaches_the_file(written, name):
    text = (written / name).read_text()
    assert "\x1b" not in text and "\x07" not in text
    assert "\\x1b" in text


def test_the_csv_algo_column_shows_the_escapes(written):
    assert "sac\\x1b]0;owned\\x07" in (written / "table.csv").read_text()


def test_the_rerun_blocks_show_the_escapes():
    """A rerun command as the page writes it in a <pre> block (rlrun.report.rerun.command quotes it
    for a shell, which keeps ESC/BEL inside the quotes): escapes shown, the line break kept."""
    from rlrun.report.page import esc_block
    from rlrun.report.rerun import command

    block = esc_block(command(["algo=sac", f"+model.note={CLEAR}", "+x='a\nb'"]))
    assert "\x1b" not in block and "\x07" not in block
    assert "x\\x1b[2J\\x1b[H\\x07y" in block and "\n" in block

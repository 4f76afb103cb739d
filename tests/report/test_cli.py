"""``rlrun report``: terminal, Markdown and CSV output, PNGs, and one-line errors with exit code 2."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from rlrun.cli.main import main as rlrun_main
from rlrun.report.cli import main
from rlrun.report.plots import aggregate

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def written(store, tmp_path_factory):
    """``rlrun report table1 --format markdown,csv --out DIR`` on the synthetic store."""
    out = tmp_path_factory.mktemp("report")
    assert main(["table1", "--tracking-uri", store, "--format", "markdown,csv", "--out", str(out)]) == 0
    return out


def test_terminal_table(store, capsys):
    assert main(["table1", "--tracking-uri", store]) == 0
    lines = capsys.readouterr().out.splitlines()
    table = lines[1:3 + 32]
    assert len({len(line) for line in table}) == 1  # aligned: every line reaches the last column
    sac = next(line for line in lines if "HalfCheetah" in line and "3000" in line).split()
    assert sac[:16] == ["SAC", "HalfCheetah", "3000", "±", "1581", "11077", "±", "323", "0.27", "3000",
                        sac[10], sac[11], "5", "1M", "/", "1M"]
    assert sac[10].startswith("[") and sac[11].endswith("]") and sac[16] == "(100%)"
    ppo = next(line for line in lines if "1367" in line)
    for text in ("Hopper", "1367 ± 416", "1703 ± 742", "0.80", "1367 [900, 1700]", "3 (1 partial)",
                 "800k / 1M (80%)"):
        assert text in ppo
    td3 = next(line for line in lines if "5373" in line)
    for text in ("2000", "0.37", "2000 [2000, 2000]", "1 (1 partial)", "600k / 1M (60%)"):
        assert text in td3
    assert sum("missing" in line for line in lines) == 29
    assert any(line.startswith("ours: final eval/episode_return") and "std ddof=1" in line for line in lines)


def test_markdown_layout(written):
    md = (written / "table.md").read_text()
    lines = md.splitlines()
    assert lines[0] == "# table1: Online single-agent RL, 5 seeds, mean final reward ± std"
    head = lines.index("| | HalfCheetah | Hopper | Walker2d | Ant | Pong | Freeway | Boxing | Breakout |")
    rows = lines[head + 2:head + 8]
    assert [r.split(" | ")[0] for r in rows] == ["| **A2C**", "| **PPO**", "| **DDPG**", "| **TD3**",
                                                 "| **SAC**", "| **IMPALA**"]
    assert rows[4].split(" | ")[1:3] == ["3000 ± 1581 / 11077 ± 323", "*missing* / 2963 ± 644"]
    assert rows[1].split(" | ")[2] == "1367 ± 416 / 1703 ± 742"
    assert rows[2].endswith("|  |  |  |  |")  # DDPG has no Atari cells in the paper
    assert "| 3 (1 partial) | 800k / 1M (80%) | [png](table1_PPO_Hopper.png) |" in md
    assert "![table1 overview](table1_overview.png)" in md


def test_csv_parses_back_to_the_same_numbers(written, runs):
    from rlrun.report.table import build_table

    df = pd.read_csv(written / "table.csv")
    assert list(df.columns) == ["algo", "env", "mean", "std", "iqm", "iqm_low", "iqm_high", "paper_mean",
                                "paper_std", "ratio", "seeds", "runs_count", "partial", "frames", "budget",
                                "seeds_needed"]
    expected = build_table(runs, "table1").to_frame()
    assert list(df["algo"]) == list(expected["algo"]) and list(df["env"]) == list(expected["env"])
    np.testing.assert_allclose(df.iloc[:, 2:].to_numpy(float), expected.iloc[:, 2:].to_numpy(float),
                               rtol=1e-12, equal_nan=True)
    sac = df[(df["algo"] == "SAC") & (df["env"] == "HalfCheetah")].iloc[0]
    assert (sac["mean"], sac["paper_mean"], sac["seeds"], sac["partial"], sac["budget"]) == (
        3000, 11077, 5, 0, 1e6)
    assert sac["std"] == pytest.approx(1581.1388300841897) and sac["ratio"] == pytest.approx(3000 / 11077)
    ppo = df[(df["algo"] == "PPO") & (df["env"] == "Hopper")].iloc[0]
    assert (ppo["seeds"], ppo["partial"], ppo["frames"]) == (3, 1, 800_000)
    missing = df[(df["algo"] == "SAC") & (df["env"] == "Hopper")].iloc[0]
    assert missing["seeds"] == 0 and math.isnan(missing["mean"]) and missing["paper_mean"] == 2963


def test_pngs_are_written_for_cells_with_runs(written):
    pngs = sorted(p.name for p in written.glob("*.png"))
    assert pngs == ["table1_PPO_Hopper.png", "table1_SAC_HalfCheetah.png", "table1_TD3_Ant.png",
                    "table1_compare_ant.png", "table1_compare_halfcheetah.png", "table1_compare_hopper.png",
                    "table1_overview.png"]
    for name in pngs:
        data = (written / name).read_bytes()
        assert len(data) > 1000 and data[:8] == PNG


def test_curves_are_averaged_on_a_common_grid():
    steps = np.array([0.0, 100.0])
    grid, mean, low, high, count = aggregate([(steps, np.array([0.0, 10.0])),
                                              (np.array([0.0, 50.0]), np.array([0.0, 20.0]))], points=3)
    assert list(grid) == [0, 50, 100] and list(count) == [2, 2, 1]
    assert list(mean) == [0, 12.5, 10] and list(low) == [0, 5, 10] and list(high) == [0, 20, 10]


def test_group_by_csv_and_no_plots_via_rlrun(store, tmp_path):
    out = tmp_path / "out"
    code = rlrun_main(["report", "--tracking-uri", store, "--experiment", "rlrun", "--group-by", "algo",
                       "--filter", "tags.env = 'cartpole'", "--format", "csv", "--out", str(out),
                       "--no-plots"])
    assert code == 0
    df = pd.read_csv(out / "table.csv")
    assert list(df["algo"]) == ["ppo"] and df["seeds"][0] == 3
    assert df["mean"][0] == pytest.approx(1250 / 3) and math.isnan(df["paper_mean"][0])
    assert not list(out.glob("*.png"))


def test_markdown_defaults_to_report_dir(store, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["table2", "--tracking-uri", store, "--format", "markdown", "--no-plots"]) == 0
    md = (tmp_path / "report" / "table.md").read_text()
    assert "| **DT** | *missing* / 4916 ± 30 | 1000 / 1048 ± 226 |" in md


def _one_line_error(capsys, *needles: str) -> None:
    err = capsys.readouterr().err.strip()
    assert err.startswith("rlrun: error:") and "\n" not in err and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err


def test_errors_name_the_flag_and_exit_2(store, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main([]) == 2  # default store ./mlflow.db does not exist, and is not created
    _one_line_error(capsys, "no MLflow store at", "mlflow.db", "--tracking-uri")
    assert not (tmp_path / "mlflow.db").exists()
    assert main(["table1", "--tracking-uri", f"sqlite:///{tmp_path}/nope/mlflow.db"]) == 2
    _one_line_error(capsys, "no MLflow store", "--tracking-uri")
    assert main(["--tracking-uri", store, "--experiment", "Default"]) == 2
    _one_line_error(capsys, "no runs in", "--tracking-uri", "--experiment")
    assert main(["table2", "--tracking-uri", store, "--filter", "tags.seed = '3'"]) == 2
    _one_line_error(capsys, "no runs with param paper.table=table2", "--filter")
    assert main(["--tracking-uri", store, "--experiment", "nope"]) == 2
    _one_line_error(capsys, "no experiment named 'nope'", "--experiment")
    assert main(["--format", "pdf"]) == 2
    _one_line_error(capsys, "--format")
    assert main(["table1", "--group-by", "algo"]) == 2
    _one_line_error(capsys, "--group-by")
    assert main(["table3"]) == 2
    assert "invalid choice" in capsys.readouterr().err

"""``rlrun report table2``: D4RL-normalised scores of fake offline runs, computed here by hand."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from rlrun.report.cli import main

# the synthetic-store helper of this folder's conftest (a module pytest imports under its own name)
_spec = importlib.util.spec_from_file_location("report_conftest", Path(__file__).with_name("conftest.py"))
_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_conftest)
log_run = _conftest.log_run

# D4RL's reference returns (d4rl/infos.py), written out here rather than read from rlrun
HC_RANDOM, HC_EXPERT = -280.178953, 12135.0


@pytest.fixture(scope="module")
def offline_store(tmp_path_factory) -> str:
    """IQL/HalfCheetah seeds 0..2 finished with final returns 4000, 5000, 6000 (50k updates)."""
    from mlflow.tracking import MlflowClient

    root = tmp_path_factory.mktemp("offline-store")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp = client.create_experiment("rlrun", artifact_location=(root / "mlruns").as_uri())
    paper = {"table": "table2", "algo": "IQL", "env": "HalfCheetah", "reference_mean": 4864,
             "reference_std": 147}
    for seed, final in ((0, 4000.0), (1, 5000.0), (2, 6000.0)):
        log_run(client, exp, algo="iql", env="halfcheetah", seed=seed, final=final, frames=50_000,
                total=50_000, paper=paper, start=seed,
                params={"total_updates": 50_000, "dataset": "rlrun/halfcheetah/medium-replay-v0"})
    return uri


def test_normalised_scores_by_hand(offline_store, capsys):
    assert main(["table2", "--tracking-uri", offline_store]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("IQL") and "HalfCheetah" in line)
    # mean return 5000, std (ddof=1) 1000:
    # 100 * (5000 + 280.18) / 12415.18 = 42.53 and 100 * 1000 / 12415.18 = 8.05
    span = HC_EXPERT - HC_RANDOM
    ours = f"{100 * (5000 - HC_RANDOM) / span:.1f} ± {100 * 1000 / span:.1f}"
    assert ours == "42.5 ± 8.1"
    # the paper's 4864 ± 147 is its 41.4 (the paper's own normalised figure)
    paper = f"{100 * (4864 - HC_RANDOM) / span:.1f} ± {100 * 147 / span:.1f}"
    assert paper == "41.4 ± 1.2"
    for text in (ours, paper, "5000 ± 1000", "4864 ± 147", "50k", "rlrun/halfcheetah/medium-replay-v0"):
        assert text in line
    assert " 3 " in line  # seeds
    assert "regenerated" in out and "not D4RL's own" in out and "-280.18 / 12135.0" in out
    missing = next(line for line in out.splitlines() if line.startswith("DT") and "Hopper" not in line)
    assert "missing" in missing and "41.9 ± 0.2" in missing  # paper: 4916 ± 30, 100 * 5196.18 / 12415.18


def test_csv_has_the_scores(offline_store, tmp_path):
    import pandas as pd

    assert main(["table2", "--tracking-uri", offline_store, "--format", "csv,markdown",
                 "--out", str(tmp_path)]) == 0
    frame = pd.read_csv(tmp_path / "table.csv")
    row = frame[(frame.algo == "IQL") & (frame.env == "HalfCheetah")].iloc[0]
    span = HC_EXPERT - HC_RANDOM
    assert row.d4rl_score_mean == pytest.approx(100 * (5000 - HC_RANDOM) / span)
    assert row.d4rl_score_std == pytest.approx(100 * 1000 / span)
    assert row.d4rl_score_paper_std == pytest.approx(100 * 147 / span)
    assert row["mean"] == pytest.approx(5000) and row.seeds == 3
    assert "42.5 ± 8.1 / 41.4 ± 1.2" in (tmp_path / "table.md").read_text()


def test_html_page_has_the_scores(offline_store, tmp_path):
    assert main(["table2", "--tracking-uri", offline_store, "--format", "html", "--out", str(tmp_path)]) == 0
    page = (tmp_path / "table2.html").read_text()
    assert "<th>ours (D4RL score)</th>" in page and "no frame-axis curves" in page
    row = next(r for r in page.split("<tr>") if r.startswith("<td>IQL</td><td>HalfCheetah</td>"))
    assert f"{100 * (5000 - HC_RANDOM) / (HC_EXPERT - HC_RANDOM):.1f} ± " in row

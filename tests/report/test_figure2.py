"""``rlrun report figure2``: every algorithm per task on shared axes, the final table, the paper's claims."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from rlrun.report.cli import main

_spec = importlib.util.spec_from_file_location("report_conftest", Path(__file__).with_name("conftest.py"))
_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_conftest)
log_run = _conftest.log_run  # how rlrun logs a run, shared with the other report tests

M = 1_000_000
# (task, algo) -> final returns of seeds 0, 1 (curves rise linearly to them in the synthetic store)
FINALS = {("navigation", "MAPPO"): (3.0, 2.0), ("navigation", "QMIX"): (1.0, 1.5),
          ("sampling", "IPPO"): (40.0, 44.0), ("sampling", "IQL"): (5.0, 7.0),
          ("sampling", "VDN"): (20.0, 22.0), ("sampling", "QMIX"): (30.0, 30.0)}


@pytest.fixture(scope="module")
def marl_store(tmp_path_factory) -> str:
    from mlflow.tracking import MlflowClient

    root = tmp_path_factory.mktemp("marl_store")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp = client.create_experiment("rlrun", artifact_location=(root / "mlruns").as_uri())
    for (task, algo), finals in FINALS.items():
        for seed, final in enumerate(finals):
            log_run(client, exp, algo=algo.lower(), env=f"vmas/{task}", seed=seed, final=final, frames=M,
                    total=M, paper={"table": "figure2_marl", "algo": algo, "env": task,
                                    "budget_frames": 30 * M}, start=seed)
    log_run(client, exp, algo="ppo", env="cartpole", seed=0, final=500.0, frames=M, total=M)  # not figure 2
    return uri


def test_figure2_table_curves_and_claims(marl_store, tmp_path, capsys):
    assert main(["figure2", "--tracking-uri", marl_store, "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines() if line.split()[:1] and line.split()[0] in
            ("MADDPG", "IPPO", "MAPPO", "IQL", "VDN", "QMIX")}
    assert list(rows) == ["MADDPG", "IPPO", "MAPPO", "IQL", "VDN", "QMIX"]  # the paper's order
    # mean ± std (ddof 1) of the seeds' finals: MAPPO navigation 2.5 ± 0.707, IQL sampling 6 ± 1.41
    assert "2.5 ± 0.707 (2s)" in rows["MAPPO"] and "6 ± 1.41 (2s)" in rows["IQL"]
    assert rows["MADDPG"].split()[1:] == ["-", "-", "-"]  # no runs: no entry, not a zero
    assert "navigation: PPO-based beat Q-learning ones (paper: yes): yes" in out
    assert "sampling: QMIX and VDN beat IQL (paper: yes): yes (IQL 6, QMIX/VDN 30 / 21)" in out
    assert "cartpole" not in out and "500 (" not in out  # the cartpole run is not Figure 2's
    assert (tmp_path / "figure2.png").stat().st_size > 10_000
    assert "| MAPPO | 2.5 ± 0.707 (2s) | - | - |" in (tmp_path / "figure2.md").read_text()


def test_figure2_without_runs_says_how_to_launch_them(marl_store, capsys):
    assert main(["figure2", "--tracking-uri", marl_store, "--filter", "params.seed = '99'"]) == 2
    err = capsys.readouterr().err
    assert "paper.table=figure2_marl" in err and "+paper/marl=glob(*)" in err


def test_figure2_html_page(marl_store, tmp_path, capsys):
    assert main(["figure2", "--tracking-uri", marl_store, "--format", "html", "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out == ""  # html only: nothing on the terminal
    page = (tmp_path / "figure2.html").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["figure2.html"]  # the figure is inlined
    assert page.count("src='data:image/png;base64,") == 1
    assert "<th>navigation</th>" in page and "<th>MAPPO</th>" in page  # tasks by algorithms
    assert "n/a (no paper value)" in page  # the paper reports curves only
    assert "navigation: PPO-based beat Q-learning ones (paper: yes): yes" in page


def test_figure2_rejects_an_unknown_format(marl_store, capsys):
    assert main(["figure2", "--tracking-uri", marl_store, "--format", "pdf"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rlrun: error: unknown --format 'pdf'") and "\n" not in err

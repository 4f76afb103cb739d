"""Cells per config, distinct seeds, failed runs left out, comparison figures, and fixes that work.

The store (built per module): ppo/cartpole at two budgets (2000 frames: seeds 0-2, finals
100/200/300; 4000 frames: seeds 0-1, finals 400/500, plus a FAILED seed 2 and a diverged
seed 3 whose evaluation went NaN), a2c/cartpole at 2000 frames seeds 0-1 (150, 250) whose
runs differ only in keys that do not change the experiment (progress, device, logger), and
sac/pendulum seed 0 with no evaluation logged.
"""

from __future__ import annotations

import re
import shlex
import time

import pytest
from cli_utils import run_cli

from rlrun.lifecycle.compose import CONF_DIR
from rlrun.report.cli import main
from rlrun.report.runs import load_runs
from rlrun.report.table import build_grouped

PNG = b"\x89PNG\r\n\x1a\n"


def _log(client, exp: str, algo: str, env: str, seed: int, total: int, final: float | None,
         status: str = "FINISHED", **extra) -> None:
    from mlflow.entities import Metric, Param

    run = client.create_run(exp, run_name=f"{algo}-{env}-{seed}",
                            tags={"algo": algo, "env": env, "seed": str(seed),
                                  "run_dir": f"/runs/{algo}-{env}/total_frames={total}/seed={seed}"})
    params = {"seed": seed, "total_frames": total, "env.id": env, "loss.name": algo, "progress": "auto",
              "device": "auto", "logger.experiment": "rlrun", **extra}
    client.log_batch(run.info.run_id, params=[Param(k, str(v)) for k, v in params.items()])
    if final is not None:
        now = int(time.time() * 1000)
        client.log_batch(run.info.run_id, metrics=[
            m for i in range(5) for m in (
                Metric("eval/episode_return", final * i / 4, now + i, total * i // 4),
                Metric("frames", total * i // 4, now + i, total * i // 4))])
    client.set_terminated(run.info.run_id, status=status)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    from mlflow.tracking import MlflowClient

    root = tmp_path_factory.mktemp("configs")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp = client.create_experiment("rlrun", artifact_location=(root / "mlruns").as_uri())
    for seed, final in enumerate((100.0, 200.0, 300.0)):
        _log(client, exp, "ppo", "cartpole", seed, 2000, final)
    for seed, final in enumerate((400.0, 500.0)):
        _log(client, exp, "ppo", "cartpole", seed, 4000, final)
    _log(client, exp, "ppo", "cartpole", 2, 4000, 50.0, status="FAILED")
    _log(client, exp, "ppo", "cartpole", 3, 4000, float("nan"))  # diverged: NaN evaluation
    _log(client, exp, "a2c", "cartpole", 0, 2000, 150.0)
    _log(client, exp, "a2c", "cartpole", 1, 2000, 250.0, progress="false", device="cpu",
         **{"logger.experiment": "other"})
    _log(client, exp, "sac", "pendulum", 0, 2000, None)
    return uri


def test_budgets_are_separate_cells_and_failed_runs_are_left_out(store):
    report = build_grouped(load_runs(store))
    assert report.keys == ["algo", "env", "config"]
    cells = {c.key: c for c in report.cells}
    assert sorted(cells) == [("a2c", "cartpole", ""), ("ppo", "cartpole", "total_frames=2000"),
                             ("ppo", "cartpole", "total_frames=4000"), ("sac", "pendulum", "")]
    short = cells[("ppo", "cartpole", "total_frames=2000")]
    long = cells[("ppo", "cartpole", "total_frames=4000")]
    assert (short.seeds, short.runs_count, short.mean, short.budget) == (3, 3, 200.0, 2000)
    assert (long.seeds, long.runs_count, long.mean, long.budget) == (2, 2, 450.0, 4000)
    a2c = cells[("a2c", "cartpole", "")]  # progress/device/logger differ: still one config
    assert (a2c.seeds, a2c.mean) == (2, 200.0)
    assert any("2 failed or diverged run(s) left out" in n for n in report.notes)
    with_failed = {c.key: c for c in build_grouped(load_runs(store), include_failed=True).cells}
    assert with_failed[("ppo", "cartpole", "total_frames=4000")].seeds == 4


def test_seeds_counted_once_when_user_keys_mix_configs(store):
    cell = build_grouped(load_runs(store), ["algo"]).cell("ppo")
    assert (cell.seeds, cell.runs_count) == (3, 5)  # seeds 0, 1, 2 over two budgets


def test_config_hash_groups_like_the_default(store):
    report = build_grouped(load_runs(store), ["config_hash"])
    assert sorted(c.runs_count for c in report.cells) == [1, 2, 2, 3]


def test_cli_writes_a_comparison_per_env_and_says_no_data(store, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["--tracking-uri", store, "--format", "terminal,markdown", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "total_frames=4000" in text and "2 failed or diverged run(s) left out" in text
    for name in ("runs_compare_cartpole.png", "runs_compare_pendulum.png"):
        data = (out / name).read_bytes()
        assert data[:8] == PNG and len(data) > 10_000
        assert f"]({name})" in (out / "table.md").read_text()


def test_a_one_seed_cell_draws_no_band_and_no_legend_for_it(store, tmp_path):
    from matplotlib.figure import Figure

    from rlrun.report.plots import _draw

    report = build_grouped(load_runs(store), ["algo", "env"], include_failed=False)
    one = build_grouped(load_runs(store, filter_string="tags.algo = 'a2c' and tags.seed = '0'"), ["algo"])
    ax = Figure().add_subplot()
    _draw(ax, one.cells[0])
    labels = ax.get_legend_handles_labels()[1]
    assert labels == ["the one seed"] and not ax.collections  # no band drawn, none in the legend
    ax = Figure().add_subplot()
    _draw(ax, report.cell("ppo", "cartpole"))
    labels = ax.get_legend_handles_labels()[1]
    assert "min-max over seeds" in labels and len(ax.collections) == 1
    assert not any("running" in label for label in labels)  # shorter budgets are not "still running"
    ax = Figure().add_subplot()
    _draw(ax, report.cell("sac", "pendulum"))
    assert [t.get_text() for t in ax.texts] == ["no data (no eval/episode_return logged)"]
    assert list(ax.get_xticks()) == [] and list(ax.get_yticks()) == []


def _fix_commands(err: str) -> list[str]:
    fix = err.split("fix:", 1)[1]
    return re.findall(r"`(rlrun [^`]+)`", fix)


def test_every_printed_fix_command_works(store, tmp_path, capsys, monkeypatch):
    """``rlrun report table1`` without paper runs prints launch commands; each one runs.

    The one-cell command runs with ``--cfg job`` (composed, not trained). The whole-table
    multirun runs through Hydra's own sweeper with its launcher replaced by one that records
    the jobs and without its per-job compose check (140 trainings, or composes, are not a
    unit test); the first and last job are then composed with ``--cfg job``.
    """
    from hydra.core.plugins import Plugins

    # Hydra's plugin scan re-executes its plugin modules: patch the classes it registered.
    classes = Plugins.instance().class_name_to_class
    BasicLauncher = classes["hydra._internal.core_plugins.basic_launcher.BasicLauncher"]
    BasicSweeper = classes["hydra._internal.core_plugins.basic_sweeper.BasicSweeper"]

    assert main(["table1", "--tracking-uri", store]) == 2
    err = capsys.readouterr().err
    commands = _fix_commands(err)
    assert len(commands) == 2, err
    jobs: list[list[str]] = []
    monkeypatch.setattr(BasicSweeper, "validate_batch_is_legal", lambda self, batch: None)  # 140 composes
    monkeypatch.setattr(BasicLauncher, "launch", lambda self, batch, initial_job_idx: jobs.extend(
        list(overrides) for overrides in batch) or [])
    for command in commands:
        args = shlex.split(command)[1:]
        multirun = "-m" in args
        code, out, err = run_cli(args if multirun else [*args, "--cfg", "job"], tmp_path, capsys)
        assert code == 0, (command, err)
        if not multirun:
            assert "paper:" in out and "table: table1" in out
    papers = {o for job in jobs for o in job if o.startswith("+paper")}
    cells = len(list((CONF_DIR / "paper" / "table1").glob("*.yaml")))  # 28 + IMPALA's 4
    assert cells == 32 and len(jobs) == cells * 5 and len(papers) == cells  # every cell, 5 seeds each
    for job in (jobs[0], jobs[-1]):
        code, out, err = run_cli([*job, "--cfg", "job"], tmp_path, capsys)
        assert code == 0 and "table: table1" in out, err

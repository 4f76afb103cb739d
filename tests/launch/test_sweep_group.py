"""A sweep is one group in the trackers: an MLflow parent run with the jobs as children, a W&B
group, a TensorBoard directory; `rlrun report --sweep` selects it."""

from __future__ import annotations

import json

import pytest
from cli_utils import run_cli
from launch_utils import FAST, mlflow_runs

from rlrun.launch.sweep_group import PARENT_TAG


def _parents_and_children(tmp_path):
    _, runs = mlflow_runs(tmp_path / "mlflow.db", parents=True)
    parents = [r for r in runs if r.data.tags.get(PARENT_TAG) == "true"]
    children = [r for r in runs if PARENT_TAG not in r.data.tags]
    return parents, children


def test_a_sweep_is_one_parent_run_with_its_jobs_as_children(tmp_path, capsys):
    sweep = tmp_path / "runs" / "sw"
    args = ["-m", "seed=0,1", "logger=multi", *FAST, f"hydra.sweep.dir={sweep}"]
    code, _, err = run_cli(args, tmp_path, capsys)
    assert code == 0, err
    (parent,), children = _parents_and_children(tmp_path)
    assert len(children) == 2
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parent.info.run_id}
    assert parent.info.run_name == "sw" and parent.info.status == "FINISHED"
    assert parent.info.experiment_id == children[0].info.experiment_id  # MLflow nests within one
    assert json.loads((sweep / "sweep.json").read_text())["mlflow"]["parent_run_id"] == parent.info.run_id
    # TensorBoard: the sweep's event files all lie in its directory
    events = sorted(p.parent.parent.name for p in tmp_path.glob("runs/**/tensorboard/events.*"))
    assert len(events) == 2 and all((sweep / d).is_dir() for d in events)
    # rerunning the same sweep directory reuses its parent (the finished jobs stay as they are)
    code, _, err = run_cli([*args, "seed=0,1,2"], tmp_path, capsys)
    assert code == 0, err
    parents, children = _parents_and_children(tmp_path)
    assert [p.info.run_id for p in parents] == [parent.info.run_id] and len(children) == 3
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parent.info.run_id}
    # rlrun report selects the sweep by its parent id, its directory or its name; no parent row
    for sweep_arg in (parent.info.run_id, str(sweep), "sw"):
        code, out, err = run_cli(["report", "--sweep", sweep_arg, "--group-by", "algo"], tmp_path, capsys)
        assert code == 0, err
        assert "ppo" in out and "  3  " in out  # one cell: the sweep's three seeds
    code, _, err = run_cli(["report", "--sweep", "0" * 32], tmp_path, capsys)
    assert code == 2 and "mlflow.parentRunId" in err


def test_an_optuna_search_is_one_parent_run(tmp_path, capsys):
    pytest.importorskip("optuna")
    sweep = tmp_path / "study"
    code, _, err = run_cli(["-m", "+hpo=ppo_cartpole", *FAST, "hydra.sweeper.n_trials=2",
                            "hydra.sweeper.seeds=[0]", f"hydra.sweep.dir={sweep}"], tmp_path, capsys)
    assert code == 0, err
    (parent,), children = _parents_and_children(tmp_path)
    assert parent.data.tags["optuna.study"] == "ppo_cartpole" and len(children) == 2
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parent.info.run_id}


@pytest.mark.timeout(300)
def test_local_launcher_jobs_join_the_parent_and_the_wandb_group(tmp_path, monkeypatch, capsys):
    """Jobs in another process (hydra/launcher=local) find the parent through the sweep directory.

    One worker process runs both jobs: 40-120 s on a loaded 2-core machine (its start-up dominates).
    """
    pytest.importorskip("wandb")
    from wandb_offline import offline_runs

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wb"))
    sweep = tmp_path / "runs" / "par"
    code, _, err = run_cli(["-m", "seed=0,1", "hydra/launcher=local", "hydra.launcher.max_parallel=1",
                            "logger=multi", "~logger.loggers.tensorboard",
                            "+logger.loggers.wandb={name: wandb}", *FAST, f"hydra.sweep.dir={sweep}"],
                           tmp_path, capsys)
    assert code == 0, err
    (parent,), children = _parents_and_children(tmp_path)
    assert len(children) == 2
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parent.info.run_id}
    runs = offline_runs(tmp_path / "wb")
    assert len(runs) == 2 and {r.group for r in runs} == {"par"}
    assert {r.config["tags.mlflow.parentRunId"] for r in runs} == {parent.info.run_id}


def test_no_parent_without_mlflow_and_no_parent_tag_on_single_runs(tmp_path, capsys):
    code, _, err = run_cli(["-m", "seed=0", "logger=csv", *FAST, f"hydra.sweep.dir={tmp_path}/sw"],
                           tmp_path, capsys)
    assert code == 0, err
    assert not (tmp_path / "sw" / "sweep.json").exists() and not (tmp_path / "mlflow.db").exists()
    code, _, err = run_cli([*FAST, "hydra.run.dir=runs/single"], tmp_path, capsys)
    assert code == 0, err
    (run,) = mlflow_runs(tmp_path / "mlflow.db")[1]
    assert "mlflow.parentRunId" not in run.data.tags

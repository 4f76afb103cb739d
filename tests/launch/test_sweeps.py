"""Checked-in sweeps compose, name real keys, run as multiruns and ship in the wheel."""

from __future__ import annotations

import subprocess
from importlib.resources import files
from pathlib import Path

import pytest
from cli_utils import run_cli
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from launch_utils import FAST, mlflow_runs, read_json
from omegaconf import OmegaConf

from rlrun.lifecycle.compose import CONF_DIR, register_resolvers

SWEEPS = Path(str(files("rlrun.sweeps")))


def _compose(overrides: list[str]):
    register_resolvers()
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=overrides, return_hydra_config=True)


@pytest.mark.parametrize("name", sorted(p.stem for p in (SWEEPS / "sweep").glob("*.yaml")))
def test_sweep_composes_and_sweeps_existing_keys(name):
    extra = ["env=hopper"] if name == "sac_lr" else []  # a sweep's env is only a default
    cfg = _compose([f"+sweep={name}", *extra])
    params = cfg.hydra.sweeper.params
    assert params, f"sweep {name} sweeps nothing"
    for key, value in params.items():
        assert OmegaConf.select(cfg, key, default="<missing>") != "<missing>", f"{name}: no key {key}"
        (override,) = OverridesParser.create().parse_overrides([f"{key}={value}"])
        assert override.is_sweep_override() and len(list(override.sweep_iterator())) > 1
    if name == "sac_lr":
        assert cfg.hydra.runtime.choices.algo == "sac" and cfg.hydra.runtime.choices.env == "hopper"
    # the sweeper resolves the sweep dir before any HydraConfig exists: no ${hydra:...} there
    assert str(cfg.hydra.sweep.dir).startswith(f"runs/sweeps/{name}")
    first = (SWEEPS / "sweep" / f"{name}.yaml").read_text().splitlines()[1]
    assert first.startswith("# ") and len(first) > 20  # `rlrun list` shows this line


def test_hpo_presets_compose_with_keys_and_valid_search():
    pytest.importorskip("optuna")
    from rlrun.launch.study import build_pruner, build_sampler, distributions

    for path in sorted((SWEEPS / "hpo").glob("*.yaml")):
        cfg = _compose([f"+hpo={path.stem}"])
        sweeper = cfg.hydra.sweeper
        assert sweeper._target_.endswith("OptunaSweeper")
        for key in sweeper.params:
            assert OmegaConf.select(cfg, key, default="<missing>") != "<missing>", f"{path.stem}: {key}"
        distributions(OmegaConf.to_container(sweeper.params))
        build_pruner(OmegaConf.to_container(sweeper.pruner))
        build_sampler(OmegaConf.to_container(sweeper.sampler))
        if sweeper.pruner.name != "nop":  # a search that prunes reports each evaluation to its trial
            pruning = cfg.hooks.optuna_pruning
            assert pruning.name == "optuna_pruning" and pruning.trial is None
        else:  # one that does not (dqn_cartpole: the final evaluation is the objective) needs no hook
            assert "optuna_pruning" not in cfg.get("hooks", {}), f"{path.stem}: pruning hook, no pruner"


def test_launcher_presets_compose():
    for launcher, target in (("local", "LocalLauncher"), ("slurm", "SlurmLauncher"),
                             ("slurm_gpu", "SlurmLauncher")):
        cfg = _compose([f"hydra/launcher={launcher}"]).hydra.launcher
        assert cfg._target_ == f"hydra_plugins.rlrun_launch.plugins.{target}"
    slurm = _compose(["hydra/launcher=slurm_gpu", "hydra.launcher.partition=gpu"]).hydra.launcher
    assert slurm.gpus_per_node == 1 and slurm.partition == "gpu" and slurm.max_num_timeout > 3
    assert slurm.signal_delay_s > 0 and slurm.wait is True and "additional_parameters" in slurm


def test_multirun_of_a_checked_in_sweep_tags_each_run(tmp_path, capsys):
    """`rlrun -m +sweep=smoke`: one run directory and one MLflow run per job, tagged."""
    code, _, err = run_cli(["-m", "+sweep=smoke", *FAST, f"hydra.sweep.dir={tmp_path}/sw"], tmp_path, capsys)
    assert code == 0, err
    client, runs = mlflow_runs(tmp_path / "mlflow.db")
    assert len(runs) == 2
    by_job = {r.data.tags["job_num"]: r for r in runs}
    assert set(by_job) == {"0", "1"}
    for num, run in by_job.items():
        tags = run.data.tags
        assert tags["sweep"] == "sw" and tags["seed"] == num
        assert len(tags["rlrun_git_commit"]) == 40  # the launch directory is no repository
        summary = read_json(Path(tags["run_dir"]) / "summary.json")
        assert summary["frames"] == 512 and summary["mlflow_run_id"] == run.info.run_id
        assert "summary.json" in {a.path for a in client.list_artifacts(run.info.run_id)}
    assert len({r.data.tags["run_dir"] for r in runs}) == 2


@pytest.mark.timeout(600)
def test_wheel_ships_sweeps_launchers_and_plugins(tmp_path, wheel_venv):
    """A non-editable install finds `+sweep=`, `+hpo=` and the launchers (plugins in hydra_plugins)."""
    venv = wheel_venv
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    rlrun = str(venv / "bin" / "rlrun")
    out = subprocess.run([rlrun, "+sweep=sac_lr", "env=hopper", "--cfg", "hydra"], cwd=elsewhere,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "optim.lr: 1e-4,3e-4,1e-3" in out.stdout and "provider: rlrun-sweeps" in out.stdout
    out = subprocess.run([rlrun, "+hpo=ppo_cartpole", "hydra/launcher=slurm", "--cfg", "hydra"],
                         cwd=elsewhere, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "hydra_plugins.rlrun_launch.plugins.OptunaSweeper" in out.stdout
    assert "hydra_plugins.rlrun_launch.plugins.SlurmLauncher" in out.stdout
    where = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import hydra_plugins.rlrun_launch.plugins as p, rlrun.sweeps as s; "
                            "print(p.__file__, s.__file__)"],
                           cwd=elsewhere, capture_output=True, text=True, check=True).stdout
    assert where.count(str(venv)) == 2  # the installed copies, not the source tree

"""hydra/launcher=slurm_ray without a cluster: the sbatch script it produces, the Ray commands,
the overrides."""

from __future__ import annotations

import sys

import yaml
from hydra_plugins.rlrun_launch.plugins import SlurmRayLauncher
from omegaconf import OmegaConf

from rlrun.launch import slurm_ray
from rlrun.lifecycle.compose import CONF_DIR


def preset(**changes) -> dict:
    """The launcher's parameters as Hydra would pass them: the structured defaults, then the YAML preset."""
    base = OmegaConf.to_container(OmegaConf.structured(slurm_ray.SlurmRayConf))
    text = yaml.safe_load((CONF_DIR / "hydra" / "launcher" / "slurm_ray.yaml").read_text())
    text.pop("defaults")
    params = {**base, **text, **changes}
    params.pop("_target_")
    return params


def test_the_sbatch_script_asks_for_one_task_per_node_on_n_nodes_and_srun_starts_them(tmp_path, monkeypatch):
    import submitit.slurm.slurm

    # the script's text needs no cluster; submitit refuses to build an executor where srun is absent
    monkeypatch.setattr(submitit.slurm.slurm.SlurmExecutor, "affinity", classmethod(lambda cls: 1))
    launcher = SlurmRayLauncher(**preset(nodes=4, submitit_folder=str(tmp_path / "%j")))
    assert launcher.options == {"wait": True, "ray_port": 6379, "ray_start_timeout_s": 600}
    executor = launcher._executor()
    script = executor._executor._make_submission_file_text("python -u -m submitit.core._submit x", "uid")
    lines = script.splitlines()
    for option in ("--nodes=4", "--ntasks-per-node=1", "--cpus-per-task=16", "--mem=64GB", "--time=240",
                   "--signal=USR2@120", "--open-mode=append"):
        assert f"#SBATCH {option}" in lines, (option, script)
    srun = [line for line in lines if line.startswith("srun ")]
    assert len(srun) == 1 and "submitit.core._submit" in srun[0], script


def test_ray_commands_start_a_head_and_join_workers_with_the_jobs_interpreter():
    assert slurm_ray.head_command(6379, 16) == [
        sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--port=6379", "--num-cpus=16",
        "--include-dashboard=false", "--disable-usage-stats"]
    assert slurm_ray.worker_command("node01:6379", 8) == [
        sys.executable, "-m", "ray.scripts.scripts", "start", "--address=node01:6379", "--num-cpus=8",
        "--disable-usage-stats"]
    assert slurm_ray.stop_command()[-2:] == ["stop", "--force"]


def test_the_run_gets_the_ray_backend_and_the_head_address_in_place_of_its_own():
    got = slurm_ray.job_overrides(["+paper=table1/impala_pong", "collector.ray_address=auto",
                                   "collector.backend=local", "seed=3"], "node01:6379")
    assert got == ["+paper=table1/impala_pong", "seed=3", "collector.backend=ray",
                   "collector.ray_address=node01:6379"]


def test_the_run_directory_does_not_depend_on_where_ray_runs():
    """A requeued allocation may get another first node: the run must find its directory again."""
    from rlrun.core.confighash import SAFE_TO_CHANGE, matches
    from rlrun.lifecycle.compose import _run_name_excluded

    overrides = ["+paper=table1/impala_pong", "collector.backend=ray", "collector.ray_address=node01:6379",
                 "env.num_envs=8", "algo=impala"]
    assert _run_name_excluded(overrides) == ["collector.backend", "collector.ray_address", "algo"]
    assert matches("collector.ray_address", SAFE_TO_CHANGE)


def test_every_process_of_the_allocation_uses_token_auth_with_the_jobs_own_token(tmp_path):
    token = tmp_path / "41_ray_token"
    slurm_ray.write_token(token)
    text = token.read_text()
    assert len(text) == 64 and int(text, 16) >= 0 and token.stat().st_mode & 0o777 == 0o600
    slurm_ray.write_token(token)  # a requeued job: a fresh token
    assert token.read_text() != text
    assert slurm_ray.auth_env(token) == {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}

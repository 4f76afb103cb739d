"""End-to-end runs of a few hundred frames: tracking, checkpoints, resume."""

from __future__ import annotations

import signal
import time

import torch
from cli_utils import only_run_dir, run_cli, spawn, summary_of
from mlflow.tracking import MlflowClient

PPO_FAST = ["total_frames=1024", "collector.frames_per_batch=256", "eval.episodes=2"]
SAC_FAST = ["algo=sac", "env=pendulum", "total_frames=600", "collector.frames_per_batch=200",
            "collector.init_random_frames=200", "eval.episodes=1", "buffer.batch_size=64",
            "model.hidden=[32,32]"]


def mlflow_runs(cwd):
    client = MlflowClient(f"sqlite:///{cwd / 'mlflow.db'}")
    exp = client.get_experiment_by_name("rlrun")
    return client, client.search_runs([exp.experiment_id])


def test_default_job_tracks_into_embedded_mlflow(tmp_path, capsys):
    code, _, err = run_cli(PPO_FAST, tmp_path, capsys)
    assert code == 0, err
    run_dir = only_run_dir(tmp_path)
    summary = summary_of(run_dir)
    assert summary["status"] == "finished"
    assert summary["frames"] == 1024
    # the return's value is pinned by tests/trainer/test_hooks_pinned.py (a CartPole return is always > 0)
    assert summary["eval/episodes"] == 2 and "eval/episode_return" in summary
    assert summary["wall_time_s"] > 0
    client, runs = mlflow_runs(tmp_path)
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED" and run.info.run_id == summary["mlflow_run_id"]
    assert run.data.params["loss.clip_epsilon"] == "0.2"
    assert run.data.params["env.id"] == "CartPole-v1"
    assert run.data.tags["algo"] == "ppo" and run.data.tags["env"] == "cartpole"
    for key in ("train/episode_return", "eval/episode_return", "loss/objective", "loss/critic",
                "time/fps", "frames"):
        assert key in run.data.metrics, key
    frames = [m.value for m in client.get_metric_history(run.info.run_id, "frames")]
    assert frames == sorted(set(frames)) and frames[-1] == 1024
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"config.yaml", "summary.json"} <= artifacts


def test_csv_logger_and_no_mlflow(tmp_path, capsys):
    code, _, err = run_cli([*PPO_FAST, "logger=csv"], tmp_path, capsys)
    assert code == 0, err
    rows = (only_run_dir(tmp_path) / "metrics.csv").read_text().splitlines()
    assert rows[0] == "step,key,value"
    assert any(",eval/episode_return," in r for r in rows)
    assert not (tmp_path / "mlflow.db").exists()


def test_sac_prioritized_and_memmap_buffers(tmp_path, capsys):
    code, _, err = run_cli([*SAC_FAST, "buffer=prioritized", "logger=none"], tmp_path, capsys)
    assert code == 0, err
    code, _, err = run_cli([*SAC_FAST, "buffer=memmap", "logger=none", "seed=1"], tmp_path, capsys)
    assert code == 0, err
    memmap_run = next(p for p in tmp_path.glob("runs/sac-pendulum/*") if "memmap" in p.name)
    ram_run = next(p for p in tmp_path.glob("runs/sac-pendulum/*") if "prioritized" in p.name)
    # the memmap storage made its folder in the run directory, and removed its scratch files
    # once the run was closed (the checkpoint holds the rows)
    assert (memmap_run / "buffer").is_dir() and not (ram_run / "buffer").exists()
    assert not any((memmap_run / "buffer").rglob("*.memmap"))


def test_mujoco_and_async_envs(tmp_path, capsys):
    code, _, err = run_cli(["env=halfcheetah", "total_frames=512", "collector.frames_per_batch=256",
                            "eval.episodes=1", "logger=none", "env.num_envs=2",
                            "env.vectorization=async", "model.normalize_observations=true"],
                           tmp_path, capsys)
    assert code == 0, err
    state = torch.load(next(tmp_path.glob("runs/**/checkpoint.pt")), weights_only=True)
    assert state["loss"]["policy.normalizer.count"] > 500  # statistics saved with the run
    assert state["collector"]["frames"] == 512


def test_checkpoint_holds_every_stateful_component(tmp_path, capsys):
    code, _, err = run_cli([*SAC_FAST, "logger=none"], tmp_path, capsys)
    assert code == 0, err
    state = torch.load(next(tmp_path.glob("runs/**/checkpoint.pt")), weights_only=True)
    assert {"loss", "optimizer", "collector", "buffer", "hooks", "rng", "frames"} <= set(state)
    assert set(state["optimizer"]) == {"actor", "critic", "alpha"}
    assert "target_critic.weights.0" in state["loss"] and "log_alpha" in state["loss"]
    assert state["buffer"]["storage"]["length"] == 600
    # the target updates' interval follows the restored optim_steps: the hook keeps no counter
    assert state["hooks"]["target_update"] == {} and state["optim_steps"] > 0


def test_rerun_continues_and_logs_into_the_same_run(tmp_path, capsys):
    args = [*PPO_FAST, "hydra.run.dir=runs/resumable"]
    code, _, err = run_cli(args, tmp_path, capsys)
    assert code == 0, err
    first = summary_of(tmp_path / "runs/resumable")
    code, _, err = run_cli([*args, "total_frames=2048"], tmp_path, capsys)
    assert code == 0, err
    second = summary_of(tmp_path / "runs/resumable")
    assert second["frames"] == 2048 and second["mlflow_run_id"] == first["mlflow_run_id"]
    client, runs = mlflow_runs(tmp_path)
    assert len(runs) == 1
    frames = [m.value for m in client.get_metric_history(runs[0].info.run_id, "frames")]
    assert frames == sorted(set(frames)) and frames[-1] == 2048  # each frame counted once
    # a finished run is not trained again
    code, _, err = run_cli([*args, "total_frames=2048"], tmp_path, capsys)
    assert code == 0 and "already finished" in err


def test_sigterm_then_same_command_finishes_in_same_mlflow_run(tmp_path):
    """Stopped by SIGTERM mid-run, the same command in a fresh process finishes the budget."""
    args = ["total_frames=40960", "collector.frames_per_batch=1024", "checkpoint.interval_frames=2048",
            "eval.interval_frames=0", "eval.episodes=2"]
    proc = spawn(args, tmp_path)
    ckpt_dir = tmp_path / "runs/ppo-cartpole"
    deadline = time.time() + 120
    while time.time() < deadline and not list(ckpt_dir.glob("*/checkpoint.pt")):
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    run_dir = only_run_dir(tmp_path)
    stopped = summary_of(run_dir)
    assert stopped["status"] == "interrupted" and 0 < stopped["frames"] < 40960
    state = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    assert state["frames"] == stopped["frames"]  # the checkpoint was written at the stop

    proc = spawn(args, tmp_path)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    done = summary_of(run_dir)
    assert done["status"] == "finished" and done["frames"] == 40960
    assert done["mlflow_run_id"] == stopped["mlflow_run_id"]
    client, runs = mlflow_runs(tmp_path)
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    frames = [m.value for m in client.get_metric_history(runs[0].info.run_id, "frames")]
    assert frames == sorted(set(frames)) and frames[-1] == 40960

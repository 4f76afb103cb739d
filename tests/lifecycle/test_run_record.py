"""The run directory and the tracker tell the truth: kills, concurrent copies, divergence,
awkward budgets, changed configs on resume (fault injection in fresh processes)."""

from __future__ import annotations

import json
import math
import os
import signal
import time
from pathlib import Path

import pytest
import torch
from cli_utils import run_cli, spawn, summary_of
from mlflow.tracking import MlflowClient

RUN = Path("runs/r")
LONG = ["algo=ppo", "env=cartpole", "total_frames=400000", "collector.frames_per_batch=1024",
        "eval.interval_frames=0", "eval.episodes=2", f"hydra.run.dir={RUN}"]


def mlflow_runs(cwd: Path) -> list:
    client = MlflowClient(f"sqlite:///{cwd / 'mlflow.db'}")
    exp = client.get_experiment_by_name("rlrun")
    return client.search_runs([exp.experiment_id]) if exp else []


def wait_for(predicate, proc, timeout: float = 120.0) -> None:
    deadline = time.time() + timeout
    while not predicate():
        assert proc.poll() is None, proc.communicate()
        assert time.time() < deadline, "timed out"
        time.sleep(0.1)


def checkpoint_frames(run_dir: Path) -> int:
    path = run_dir / "checkpoint.pt"
    return int(torch.load(path, weights_only=True)["frames"]) if path.exists() else 0


def leftovers(run_dir: Path) -> list[str]:
    return sorted(p.name for p in run_dir.glob(".*.tmp*"))


def stored_runs(cwd: Path) -> int:
    """Rows of the store's runs table (sqlite3: MLflow would cache the store for this process)."""
    import sqlite3

    try:
        con = sqlite3.connect(cwd / "mlflow.db", timeout=10)
        try:
            return con.execute("SELECT count(*) FROM runs").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return 0


@pytest.mark.parametrize("kill_point", ["before_first_checkpoint", "before_the_run_id_is_known", "mid_run",
                                        "during_checkpoint_write", "late_in_training", "during_shutdown"])
def test_sigkill_then_rerun_finishes_exactly_in_one_tracker_run(kill_point, tmp_path, capsys):
    total = 12288
    args = ["algo=ppo", "env=cartpole", f"total_frames={total}", "collector.frames_per_batch=1024",
            "eval.interval_frames=0", "eval.episodes=2", f"hydra.run.dir={RUN}",
            "checkpoint.interval_frames=0" if kill_point.startswith("before_")
            else "checkpoint.interval_frames=2048"]
    run_dir = tmp_path / RUN
    # before_the_run_id_is_known: the one checkpoint (interval 0: the last) pauses before it
    # notes the run id, so that a run that trains to its end before the poll below sees the
    # worker's run still leaves tracking.json without it (CI once lost this race)
    pause = {"RLRUN_TEST_PAUSE_AT": "checkpoint_write", "RLRUN_TEST_PAUSE_S": "120"}
    proc = spawn(args, tmp_path, env=pause if kill_point == "before_the_run_id_is_known" else None)
    if kill_point == "before_first_checkpoint":
        wait_for(lambda: (run_dir / "tracking.json").exists(), proc)  # the tracker run exists
        time.sleep(1.0)
    elif kill_point == "before_the_run_id_is_known":
        # the worker has made the tracker run; the run, training or paused before its checkpoint,
        # has not written its id yet: the rerun finds the run by its attempt_id tag
        wait_for(lambda: stored_runs(tmp_path) == 1, proc)
        assert json.loads((run_dir / "tracking.json").read_text())["run_id"] is None
    elif kill_point == "late_in_training":
        wait_for(lambda: checkpoint_frames(run_dir) >= 8192, proc)
    elif kill_point == "during_shutdown":  # the summary is written, the tracker not yet finished
        deadline = time.time() + 300
        while not (run_dir / "summary.json").exists() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.02)
    else:
        wait_for(lambda: checkpoint_frames(run_dir) >= 2048, proc)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    if kill_point == "during_checkpoint_write":  # what a kill inside checkpoint.save leaves behind
        (run_dir / f".checkpoint.pt.tmp-{proc.pid}").write_bytes(b"\x80partial")
    code, _, err = run_cli(args, tmp_path, capsys)
    assert code == 0, err
    summary = summary_of(run_dir)
    assert summary["status"] == "finished" and summary["frames"] == total
    runs = mlflow_runs(tmp_path)
    assert len(runs) == 1 and runs[0].info.status == "FINISHED", [r.info for r in runs]
    assert runs[0].info.run_id == summary["mlflow_run_id"]
    assert leftovers(run_dir) == []


def test_two_copies_of_one_command_one_trains_one_exits_2(tmp_path, capsys):
    proc = spawn(LONG, tmp_path)
    run_dir = tmp_path / RUN
    wait_for(lambda: (run_dir / "tracking.json").exists(), proc)
    try:
        code, _, err = run_cli(LONG, tmp_path, capsys)
        assert code == 2, err
        assert f"in use by process {proc.pid}" in err and "hydra.run.dir=" in err
        assert len(err.strip().splitlines()) == 2  # the message and its fix
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    # the lock of the killed process is taken over: a fresh start in the same directory works
    code, _, err = run_cli([*LONG, "total_frames=2048", "resume=false"], tmp_path, capsys)
    assert code == 0, err
    assert summary_of(run_dir)["frames"] == 2048


def test_divergence_stops_nonzero_and_keeps_the_last_finite_checkpoint(tmp_path, capsys):
    sac = ["algo=sac", "env=pendulum", "collector.init_random_frames=200", "collector.frames_per_batch=200",
           "checkpoint.interval_frames=400", "eval.episodes=1", "logger=csv", f"hydra.run.dir={RUN}"]
    code, _, err = run_cli([*sac, "total_frames=400"], tmp_path, capsys)
    assert code == 0, err
    run_dir = tmp_path / RUN
    good = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    code, _, err = run_cli([*sac, "total_frames=2000", "optim.lr=1e3", "resume_allow_changes=true"],
                           tmp_path, capsys)
    assert code == 3, err
    assert "diverged" in err and "loss_" in err and "frame" in err
    summary = summary_of(run_dir)
    assert summary["status"] == "diverged" and "non-finite" in summary["stop_reason"]
    assert "eval/episode_return" not in summary or math.isfinite(summary["eval/episode_return"])
    kept = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    assert kept["frames"] == good["frames"] == 400  # never overwritten by the diverged state
    assert all(torch.isfinite(v).all() for v in kept["loss"].values() if v.is_floating_point())


def test_divergence_before_the_first_checkpoint_says_none_was_written(tmp_path, capsys):
    """Issue 25 §5: no "last finite checkpoint is kept" when there is none, and eval/export
    then name the divergence, not the checkpoint interval."""
    sac = ["algo=sac", "env=pendulum", "collector.init_random_frames=200", "collector.frames_per_batch=200",
           "checkpoint.interval_frames=100000", "eval.episodes=1", "eval.interval_frames=0", "logger=none",
           "optim.lr=1e3", "total_frames=2000", f"hydra.run.dir={RUN}"]
    code, _, err = run_cli(sac, tmp_path, capsys)
    assert code == 3, err
    run_dir = tmp_path / RUN
    assert not (run_dir / "checkpoint.pt").exists()
    assert "before its first checkpoint, so none was written" in err and "is kept" not in err
    for args in (["eval", str(run_dir)], ["export", str(run_dir)]):
        code, _, err = run_cli(args, tmp_path, capsys)
        assert code == 2 and "diverged before its first checkpoint" in err, err
        assert "interval_frames" not in err


def test_divergence_check_is_off_the_step_path(monkeypatch):
    """One host sync per batch: the per-step part only ORs flags on the device."""
    from rlrun.trainer.builtins import DivergenceGuard

    loss = torch.nn.Linear(2, 1)
    guard = DivergenceGuard(loss)
    trainer = type("T", (), {"optimizer": None, "frames": 10, "diverged": None})()
    trainer.diverge = lambda what: setattr(trainer, "diverged", what)

    def no_sync(*a, **k):
        raise AssertionError("host sync in the step path")

    monkeypatch.setattr(torch.Tensor, "item", no_sync)
    monkeypatch.setattr(torch.Tensor, "__bool__", no_sync)
    for v in (1.0, float("nan"), 2.0):
        guard.post_loss(trainer, None, {"loss_a": torch.tensor(v), "loss_b": torch.tensor(0.0)})
    monkeypatch.undo()
    guard.post_steps(trainer)
    assert trainer.diverged == "non-finite loss_a in the batch ending at frame 10"


@pytest.mark.parametrize("args", [
    ["algo=a2c", "env=cartpole", "total_frames=1012"],          # 40-frame batches over 8 envs
    ["algo=ppo", "env=cartpole", "total_frames=1100"],          # 1024-frame batches
    ["algo=ppo_kl", "env=cartpole", "total_frames=1100"],
    ["algo=dqn", "env=cartpole", "total_frames=1050", "collector.init_random_frames=1000"],
    ["algo=sac", "env=pendulum", "total_frames=1310"],          # 200-frame batches after 1000 random
    ["algo=td3", "env=pendulum", "total_frames=1101"],
    ["algo=ddpg", "env=pendulum", "total_frames=1150"],
])
def test_every_algorithm_accepts_an_awkward_budget(args, tmp_path, capsys):
    """The last batch is partial: it is collected and trained on (minibatches then take all its rows)."""
    code, _, err = run_cli([*args, "logger=none", "eval.episodes=1", "eval.interval_frames=0",
                            "hydra.run.dir=r"], tmp_path, capsys)
    assert code == 0, err
    summary = summary_of(tmp_path / "r")
    total = int(args[2].split("=")[1])
    num_envs = 8 if "env=cartpole" in args and args[0] in ("algo=a2c", "algo=ppo", "algo=ppo_kl") else 1
    assert summary["status"] == "finished" and summary["frames"] == -(-total // num_envs) * num_envs
    assert summary["optim_steps"] > 0


def test_resume_with_a_changed_config_lists_it_and_needs_consent(tmp_path, capsys):
    base = ["algo=ppo", "env=cartpole", "collector.frames_per_batch=256", "eval.episodes=1",
            "hydra.run.dir=runs/a"]
    code, _, err = run_cli([*base, "total_frames=512"], tmp_path, capsys)
    assert code == 0, err
    first = summary_of(tmp_path / "runs/a")
    code, _, err = run_cli([*base, "total_frames=1024", "optim.lr=0.01"], tmp_path, capsys)
    assert code == 2 and "optim.lr" in err and "resume_allow_changes=true" in err
    # budgets may change; the start says where it resumes from
    code, _, err = run_cli([*base, "total_frames=1024"], tmp_path, capsys)
    assert code == 0 and "resuming from frame 512 of 1024" in err and "total_frames: 512 -> 1024" in err
    assert summary_of(tmp_path / "runs/a")["mlflow_run_id"] == first["mlflow_run_id"]
    # another directory's checkpoint continues into a new tracker run tagged with its origin
    other = ["algo=ppo", "env=cartpole", "collector.frames_per_batch=256", "eval.episodes=1",
             "hydra.run.dir=runs/b", "total_frames=1536", f"resume={tmp_path / 'runs/a'}"]
    code, _, err = run_cli(other, tmp_path, capsys)
    assert code == 0, err
    b = summary_of(tmp_path / "runs/b")
    assert b["frames"] == 1536 and b["mlflow_run_id"] != first["mlflow_run_id"]
    tags = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").get_run(b["mlflow_run_id"]).data.tags
    assert tags["resumed_from"].endswith("runs/a/checkpoint.pt") and tags["resumed_from_frame"] == "1024"


def test_a_checkpoint_that_does_not_fit_names_its_likely_cause(tmp_path, capsys):
    base = ["algo=ppo", "env=cartpole", "collector.frames_per_batch=256", "eval.episodes=1",
            "logger=none", "hydra.run.dir=r"]
    code, _, err = run_cli([*base, "total_frames=512"], tmp_path, capsys)
    assert code == 0, err
    path = tmp_path / "r/checkpoint.pt"
    saved = path.read_bytes()
    # what an rlrun whose networks were laid out differently would have saved, with this config
    state = torch.load(path, weights_only=True)
    for part in ("policy", "loss"):
        state[part] = {k.replace("net.0.", "layers.0."): v for k, v in state[part].items()}
    torch.save(state, path)
    code, _, err = run_cli([*base, "total_frames=1024"], tmp_path, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 2, err  # the message and its fix
    assert "does not fit this run" in err and "another version" in err and "resume=false" in err
    # the same checkpoint as written, with a shape change let through by resume_allow_changes
    path.write_bytes(saved)
    code, _, err = run_cli([*base, "total_frames=1024", "model.hidden=[32,32]", "resume_allow_changes=true"],
                           tmp_path, capsys)
    assert code == 2 and "model.hidden" in err and "resume_allow_changes" in err, err
    assert "another version" not in err


def test_checkpoint_says_when_it_leaves_out_the_buffer(tmp_path, capsys):
    sac = ["algo=sac", "env=pendulum", "total_frames=600", "collector.init_random_frames=200",
           "collector.frames_per_batch=200", "eval.episodes=1", "logger=none", "hydra.run.dir=r",
           "checkpoint.max_buffer_mb=0"]
    code, _, err = run_cli(sac, tmp_path, capsys)
    assert code == 0 and "leave out the replay buffer" in err
    assert torch.load(tmp_path / "r/checkpoint.pt", weights_only=True)["buffer"] is None
    code, _, err = run_cli([*sac, "total_frames=800"], tmp_path, capsys)
    assert code == 0 and "holds no replay buffer" in err


def test_tracking_file_names_the_run_from_the_start(tmp_path, capsys):
    code, _, err = run_cli(["total_frames=512", "collector.frames_per_batch=256", "eval.episodes=1",
                            "hydra.run.dir=r"], tmp_path, capsys)
    assert code == 0, err
    info = json.loads((tmp_path / "r/tracking.json").read_text())
    assert info["run_id"] == summary_of(tmp_path / "r")["mlflow_run_id"]
    assert not os.path.exists(tmp_path / "r/.checkpoint.pt.tmp")


def test_a_tracker_run_left_running_after_the_summary_is_finished_by_the_rerun(tmp_path, capsys):
    """What a kill between writing summary.json and the tracker's finish() leaves, made directly."""
    args = ["total_frames=512", "collector.frames_per_batch=256", "eval.episodes=1", "hydra.run.dir=r"]
    code, _, err = run_cli(args, tmp_path, capsys)
    assert code == 0, err
    run_id = summary_of(tmp_path / "r")["mlflow_run_id"]
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    client.update_run(run_id, status="RUNNING")
    code, _, err = run_cli(args, tmp_path, capsys)
    assert code == 0 and "already finished" in err
    runs = mlflow_runs(tmp_path)
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"

"""logger=wandb: offline runs read back from W&B's own files (never the network)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from cli_utils import only_run_dir, run_cli, summary_of
from wandb_offline import offline_runs

FAST = ["total_frames=2048", "collector.frames_per_batch=512", "eval.episodes=1", "eval.interval_frames=1024",
        "progress=false"]
STEPS = [512, 1024, 1536, 2048]
MULTI = ["logger=multi", "~logger.loggers.tensorboard", "+logger.loggers.wandb={name: wandb}"]


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """W&B offline, its files in tmp_path/wb, no credentials of this machine's user."""
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wb"))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    (tmp_path / "wb").mkdir()
    return tmp_path / "wb"


def test_offline_run_holds_config_metrics_tags_and_policy(tmp_path, offline, capsys):
    from rlrun.core.confighash import config_hash
    from rlrun.lifecycle.run import flatten

    code, _, err = run_cli(["logger=wandb", *FAST], tmp_path, capsys)
    assert code == 0, err
    assert "wandb sync" in err  # the offline run says how to upload it
    run_dir = only_run_dir(tmp_path)
    (run,) = offline_runs(offline)
    summary = summary_of(run_dir)
    assert run.run_id == summary["mlflow_run_id"] == json.loads((run_dir / "tracking.json").read_text())[
        "wandb_run_id"]
    # the config, nested as the YAML is
    assert run.config["total_frames"] == 2048 and run.config["collector"]["frames_per_batch"] == 512
    assert run.config["optim"]["lr"] > 0
    # reproducibility tags: config hash, versions, commit
    import yaml

    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert run.config["tags.config_hash"] == config_hash(flatten(cfg))
    assert run.config["tags.version.torch"].startswith("2.")
    assert {"tags.algo", "tags.env", "tags.rlrun_version", "tags.seed"} <= set(run.config)
    assert any(k in run.config for k in ("tags.git_commit", "tags.rlrun_git_commit"))
    assert f"config_hash={run.config['tags.config_hash']}" in run.labels and "algo=ppo" in run.labels
    # the metrics, at rlrun's steps (frames)
    steps = {k: sorted(s for m, s in run.points() if m == k) for k in ("frames", "eval/episode_return")}
    assert steps == {"frames": STEPS, "eval/episode_return": [1024, 2048]}
    final = [r for r in run.history if r["_step"] == 2048][0]
    assert final["eval/episode_return"] == pytest.approx(summary["eval/episode_return"])
    # the files: the policy with its config, the resolved config, the summary
    assert {"policy.pt", "config.yaml", "summary.json"} <= set(run.files)
    files = run.folder / "files"
    assert (files / "policy.pt").read_bytes() == (run_dir / "policy.pt").read_bytes()
    assert not (files / "policy.pt").is_symlink()
    assert run.exit_code == 0


def test_resumed_run_continues_the_same_wandb_run_each_step_once(tmp_path, offline, capsys):
    """A budget extension resumes from the checkpoint: the same W&B id, the new steps only."""
    args = ["logger=wandb", "collector.frames_per_batch=512", "eval.episodes=1", "eval.interval_frames=1024",
            "progress=false", "hydra.run.dir=runs/one"]
    assert run_cli([*args, "total_frames=1024"], tmp_path, capsys)[0] == 0
    code, _, err = run_cli([*args, "total_frames=2048"], tmp_path, capsys)
    assert code == 0, err
    assert "resuming from frame 1024" in err
    first, second = offline_runs(offline)
    assert first.run_id == second.run_id == summary_of(tmp_path / "runs/one")["mlflow_run_id"]
    assert not first.points() & second.points()  # each (metric, step) once over both
    assert sorted(s for m, s in first.points() | second.points() if m == "frames") == STEPS
    assert sorted(s for m, s in second.points() if m == "frames") == [1536, 2048]
    assert "tags.config_hash" not in second.config  # a continued run is not re-tagged as new


def test_multi_with_wandb_logs_what_mlflow_logs(tmp_path, offline, capsys):
    from mlflow.tracking import MlflowClient

    code, _, err = run_cli([*MULTI, *FAST], tmp_path, capsys)
    assert code == 0, err
    run_dir = only_run_dir(tmp_path)
    assert "wandb" not in run_dir.name  # adding a logger does not make another run directory
    summary = summary_of(run_dir)
    (run,) = offline_runs(offline)
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    mlflow_id = summary["mlflow_run_id"]
    logged = {(m.key, m.step) for key in client.get_run(mlflow_id).data.metrics
              for m in client.get_metric_history(mlflow_id, key)}
    assert run.points() == logged  # the same metric names at the same steps
    tracking = json.loads((run_dir / "tracking.json").read_text())
    assert tracking["run_id"] == mlflow_id and tracking["wandb_run_id"] == run.run_id != mlflow_id
    assert "policy.pt" in run.files
    # resumed in multi: MLflow's run and W&B's run both continue
    code, _, err = run_cli([*MULTI, *FAST, "total_frames=2560", f"hydra.run.dir='{run_dir}'"], tmp_path,
                           capsys)
    assert code == 0, err
    assert [r.run_id for r in offline_runs(offline)] == [run.run_id, run.run_id]
    assert summary_of(run_dir)["mlflow_run_id"] == mlflow_id


def test_missing_wandb_package_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb raises ImportError
    code, _, err = run_cli(["logger=wandb", *FAST], tmp_path, capsys)
    assert code == 2
    assert err.strip() == "rlrun: error: logger=wandb needs `pip install 'rlrun[wandb]'`"


def test_mode_is_offline_without_a_key_and_online_with_one(tmp_path, monkeypatch):
    from rlrun.core.errors import ConfigError
    from rlrun.loggers.wandb import resolve_mode

    for var in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE", "WANDB_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    assert resolve_mode("auto") == "offline"  # no netrc file
    (tmp_path / "netrc").write_text("machine example.org login user password other\n")
    assert resolve_mode("auto") == "offline"  # an entry for another host
    (tmp_path / "netrc").write_text("machine api.wandb.ai login user password " + "k" * 40 + "\n")
    assert resolve_mode("auto") == "online"  # `wandb login` wrote this
    monkeypatch.setenv("WANDB_BASE_URL", "https://wandb.example.org")
    assert resolve_mode("auto") == "offline"  # a self-hosted server with no entry
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    assert resolve_mode("auto") == "online"
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert resolve_mode("auto") == "disabled"  # WANDB_MODE decides
    assert resolve_mode("offline") == "offline"
    with pytest.raises(ConfigError, match="logger.mode"):
        resolve_mode("cloud")


def test_wandb_is_imported_only_when_chosen():
    code = ("import sys; from rlrun.core.registry import lookup, entries; entries(); "
            "lookup('logger', 'wandb'); "
            "print('wandb' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_evaluation_video_is_a_file_and_media_at_its_evaluation_step(tmp_path, offline):
    """A video logged during an evaluation goes with that batch's metrics (as rlrun.trainer.video logs it)."""
    from rlrun.loggers.wandb import WandbLogger

    run_dir = tmp_path / "run"
    (run_dir / "videos").mkdir(parents=True)
    video = run_dir / "videos" / "eval-frame0000001024.mp4"
    video.write_bytes(b"\x00\x00\x00\x18ftypmp42" + bytes(64))  # W&B copies it, it does not decode it
    logger = WandbLogger(run_dir, "video", tags={"algo": "ppo"})
    logger.log_metrics({"frames": 512}, step=512)
    logger.log_artifact(video)
    logger.log_metrics({"eval/episode_return": 9.0, "frames": 1024}, step=1024)
    logger.finish()
    (run,) = offline_runs(offline)
    assert "videos/eval-frame0000001024.mp4" in run.files
    assert (run.folder / "files" / "videos" / "eval-frame0000001024.mp4").read_bytes() == video.read_bytes()
    (row,) = [r for r in run.history if "eval/video" in r]
    assert row["_step"] == 1024 and row["eval/video"]["_type"] == "video-file"


def test_unknown_mode_is_one_error_naming_the_key(tmp_path, capsys):
    code, _, err = run_cli(["logger=wandb", "logger.mode=cloud", *FAST], tmp_path, capsys)
    assert code == 2 and "logger.mode" in err and "Traceback" not in err


def test_a_kill_past_the_checkpoint_leaves_each_step_once_with_the_continuing_values(tmp_path, offline):
    """Killed after logging steps 1536-2048 but before their checkpoint: W&B never got them
    (journal); the rerun from the 1024 checkpoint logs them, and sends 512-1024 again, since a
    SIGKILL takes W&B's unflushed records with it (W&B keeps a step's first value at sync)."""
    import os
    import signal

    args = [sys.executable, "-m", "rlrun", "logger=wandb", *FAST, "checkpoint.interval_frames=1024",
            "hydra.run.dir=runs/one", "threads=1"]
    env = {**os.environ, "RLRUN_TEST_PAUSE_AT": "checkpoint_write", "RLRUN_TEST_PAUSE_S": "5"}
    proc = subprocess.Popen(args, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    pauses = 0
    for line in proc.stderr:  # the second checkpoint's pause: its metrics logged, not checkpointed
        pauses += "test pause: checkpoint_write" in line
        if pauses == 2:
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait(timeout=60)
    assert pauses == 2
    env.pop("RLRUN_TEST_PAUSE_AT")
    done = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "resuming from frame 1024" in done.stderr
    killed, rerun = offline_runs(offline)
    assert rerun.run_id == summary_of(tmp_path / "runs/one")["mlflow_run_id"]
    assert all(s <= 1024 for _, s in killed.points())  # nothing past the checkpoint reached W&B
    steps = [int(row["_step"]) for row in rerun.history if "frames" in row]
    assert steps == STEPS  # every step, once, in order: no gap where the kill lost W&B's buffer
    first = {(k, int(r["_step"])): v for r in killed.history for k, v in r.items() if not k.startswith("_")}
    again = {(k, int(r["_step"])): v for r in rerun.history for k, v in r.items() if not k.startswith("_")}
    assert all(again[p] == v for p, v in first.items())  # a step sent twice has one value

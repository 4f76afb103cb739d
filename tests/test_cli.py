"""Bad input gives one clear message naming the key and the fix, and exit code 2."""

from __future__ import annotations

import pytest
from cli_utils import run_cli

FAST = ["total_frames=512", "collector.frames_per_batch=256", "eval.episodes=1", "logger=none"]


def assert_clean_error(code: int, err: str, *needles: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err
    assert err.count("rlrun: error:") == 1, err
    assert "fix:" in err
    for n in needles:
        assert n in err, f"{n!r} not in:\n{err}"


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["algo=foo"], ["algo: unknown algo 'foo'", "ppo", "sac"]),
        (["algo=ppoo"], ["Did you mean 'ppo'?"]),
        (["env=cartpol"], ["env: unknown env 'cartpol'", "Did you mean 'cartpole'?", "pendulum"]),
        (["buffer=fifo"], ["buffer: unknown buffer 'fifo'", "prioritized"]),
        (["loss.name=ppo2"], ["loss.name: unknown loss 'ppo2'", "Did you mean 'ppo'?", "rlrun list loss"]),
        (["hooks.gae.name=gea"], ["hooks.gae.name: unknown hook 'gea'", "Did you mean 'gae'?"]),
        (["env.id=NoSuchEnv-v0"], ["env.id: gymnasium has no environment 'NoSuchEnv-v0'", "env=cartpole"]),
        (["total_frames=0"], ["total_frames: must be a positive integer, got 0"]),
        (["total_frames=-5"], ["total_frames: must be a positive integer, got -5"]),
        (["collector.frames_per_batch=0"], ["collector.frames_per_batch: must be a positive integer"]),
        (["total_frame=1000"], ["total_frame: no such config key", "Did you mean 'total_frames'?",
                                "+total_frame="]),
        (["optim.lrr=0.1"], ["optim.lrr: no such config key", "Did you mean 'lr'?"]),
        (["optim.lr=abc"], ["optim.lr: must be a number > 0, got 'abc'", "set optim.lr to a number"]),
        (["seed=abc"], ["seed: must be a non-negative integer, got 'abc'"]),
        (["+loss.gama=0.9"], ["loss.gama: unknown option 'gama'"]),
        (["algo=sac", "env=pendulum", "buffer.capacity=100", "collector.frames_per_batch=200"],
         ["buffer.capacity: the buffer (100) cannot hold one batch of 200 frames",
          "buffer.capacity >= 200"]),
        (["env.vectorization=threads"], ["env.vectorization: must be one of sync, async, got 'threads'"]),
        (["device=tpu"], ["device: unknown device 'tpu'"]),
        (["buffer.batch_size=512"], ["buffer.batch_size: minibatches of 512 do not fit in the 256 frames"]),
    ],
)
def test_bad_input_gives_one_message_with_key_and_fix(args, needles, tmp_path, capsys):
    code, _, err = run_cli([*FAST, *args], tmp_path, capsys)
    assert_clean_error(code, err, *needles)


def test_sac_on_discrete_env_is_refused_with_a_fix(tmp_path, capsys):
    code, _, err = run_cli([*FAST, "algo=sac", "env=cartpole"], tmp_path, capsys)
    assert_clean_error(code, err, "model.name", "continuous action space")


def test_unreadable_checkpoint_is_reported_and_left_in_place(tmp_path, capsys):
    code, _, err = run_cli(FAST, tmp_path, capsys)
    assert code == 0, err
    ckpt = next(tmp_path.glob("runs/**/checkpoint.pt"))
    ckpt.write_bytes(b"not a checkpoint")
    code, _, err = run_cli(FAST, tmp_path, capsys)
    assert_clean_error(code, err, "resume: cannot read checkpoint", str(ckpt), "delete")
    assert ckpt.read_bytes() == b"not a checkpoint"  # nothing overwritten


def test_resume_from_missing_path(tmp_path, capsys):
    code, _, err = run_cli([*FAST, f"resume={tmp_path / 'nope'}"], tmp_path, capsys)
    assert_clean_error(code, err, "resume: no checkpoint at")


def test_full_traceback_on_request(tmp_path, capsys, monkeypatch):
    from rlrun.errors import ConfigError

    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    with pytest.raises(ConfigError):
        run_cli([*FAST, "total_frames=0"], tmp_path, capsys)


def test_list_shows_every_kind_one_line_each(tmp_path, capsys):
    code, out, _ = run_cli(["list"], tmp_path, capsys)
    assert code == 0
    for needle in ("algo=ppo", "algo=sac", "env=halfcheetah", "loss/ppo", "loss/sac", "buffer/replay",
                   "hook/gae", "logger/mlflow", "collector/sync", "model/actor_critic"):
        assert needle in out
    line = next(ln for ln in out.splitlines() if "loss/sac" in ln)
    assert "SAC" in line
    code, out, _ = run_cli(["list", "hook"], tmp_path, capsys)
    assert "hook/target_update" in out and "loss/ppo" not in out
    code, _, err = run_cli(["list", "hoook"], tmp_path, capsys)
    assert code == 2 and "Did you mean 'hook'?" in err


def test_cfg_job_prints_resolved_config(tmp_path, capsys):
    code, out, _ = run_cli(["algo=sac", "env=pendulum", "--cfg", "job"], tmp_path, capsys)
    assert code == 0
    assert "total_frames: 20000" in out and "name: sac" in out


def test_long_override_lists_get_a_short_stable_run_directory():
    from rlrun.cli import _run_name

    long = ",".join(f"key{i}.option={i}" for i in range(40))
    name = _run_name(long)
    assert len(name) <= 160 and name == _run_name(long) and name != _run_name(long + "x")
    assert _run_name("") == "default" and _run_name("a=1,b=x/y") == "a=1,b=x_y"


def test_precheck_accepts_sweeps_and_globs_and_checks_each_choice():
    from rlrun.cli import precheck
    from rlrun.errors import ConfigError

    precheck(["-m", "algo=ppo,a2c", "env=cartpole", "seed=0,1,2"])
    precheck(["-m", "+paper=glob(table1/sac_*)", "seed=0,1"])
    with pytest.raises(ConfigError, match="unknown algo 'a2d'"):
        precheck(["-m", "algo=ppo,a2d"])

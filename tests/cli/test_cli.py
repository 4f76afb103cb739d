"""Bad input gives one clear message naming the key and the fix, and exit code 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_utils import run_cli

from rlrun.cli.main import main

FAST = ["total_frames=512", "collector.frames_per_batch=256", "eval.episodes=1", "logger=none"]


def assert_clean_error(code: int, err: str, *needles: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err
    assert err.count("rlrun: error:") == 1, err
    assert "fix:" in err
    for n in needles:
        assert n in err, f"{n!r} not in:\n{err}"


SAC = ["algo=sac", "env=pendulum", "collector.frames_per_batch=200"]
LONG_KEY = "a" * 300

# Every kind of bad input met so far; each must give one line naming the key and the fix, exit 2,
# before anything trains. "{tmp}" is the test's directory; CWD: runs the command from there.
BAD_INPUTS = [
    # unknown presets, components and keys (caught before Hydra composes, or by the registry)
    (["algo=foo"], ["algo: unknown algo 'foo'", "ppo", "sac"]),
    (["algo=ppoo"], ["Did you mean 'ppo'?"]),
    # Hydra's own refusals of + and ~ (4 lines, exit 1) come as one line naming the key
    (["+optim.lr=0.1"], ["optim.lr: the key exists already", "drop the +"]),
    (["~optim.nothere"], ["optim.nothere: no such config key to delete"]),
    (["env=cartpol"], ["env: unknown env 'cartpol'", "Did you mean 'cartpole'?", "pendulum"]),
    (["buffer=fifo"], ["buffer: unknown buffer 'fifo'", "prioritized"]),
    (["loss.name=ppo2"], ["loss.name: unknown loss 'ppo2'", "Did you mean 'ppo'?", "rlrun list loss"]),
    (["hooks.gae.name=gea"], ["hooks.gae.name: unknown hook 'gea'", "Did you mean 'gae'?"]),
    (["+hooks.mine.name=nosuch"], ["hooks.mine.name: unknown hook 'nosuch'"]),
    (["env.id=NoSuchEnv-v0"], ["env.id: gymnasium has no environment 'NoSuchEnv-v0'", "env=cartpole"]),
    (["total_frame=1000"], ["total_frame: no such config key", "Did you mean 'total_frames'?",
                            "+total_frame="]),
    (["optim.lrr=0.1"], ["optim.lrr: no such config key", "Did you mean 'lr'?"]),
    (["+loss.gama=0.9"], ["loss.gama: unknown option 'gama'"]),
    (["+logger.foo=1"], ["logger.foo: unknown option 'foo'"]),
    # unknown keys added under non-component sections: the schema knows every key
    (["+eval.record_video=true"], ["eval.record_video: unknown key in eval", "remove it", "max_envs"]),
    (["+trainer.epoch_per_batch=2"], ["trainer.epoch_per_batch: unknown key",
                                      "Did you mean 'epochs_per_batch'?"]),
    (["+checkpoint.keep=3"], ["checkpoint.keep: unknown key in checkpoint"]),
    (["+foo=1"], ["foo: unknown key in the top level", "remove it"]),
    ([f"+eval.{LONG_KEY}=1"], ["override key of 305 characters", "check the override"]),
    ([f"+{LONG_KEY}=1"], ["override key of 300 characters"]),
    # top-level values
    (["total_frames=0"], ["total_frames: must be an integer > 0 and <= 1000000000000 or null, got 0"]),
    (["total_frames=-5"], ["total_frames: must be an integer > 0 and <= 1000000000000 or null, got -5"]),
    (["total_frames=abc"], ["total_frames: must be an integer > 0 and <= 1000000000000 or null, got 'abc'"]),
    (["total_frames=1.5"], ["total_frames: must be an integer > 0 and <= 1000000000000 or null, got 1.5"]),
    (["seed=abc"], ["seed: must be an integer >= 0 and <= 4294967295, got 'abc'"]),
    (["seed=-1"], ["seed: must be an integer >= 0 and <= 4294967295, got -1"]),  # default: conf/config.yaml
    (["threads=0"], ["threads: must be an integer >= 1 or null, got 0"]),
    (["progress=maybe"], ["progress: must be true, false or auto, got 'maybe'"]),
    (["progress=2"], ["progress: must be true, false or auto, got 2"]),
    (["device=tpu"], ["device: unknown device 'tpu'"]),
    # trainer, eval, checkpoint sections
    (["trainer.epochs_per_batch=0"], ["trainer.epochs_per_batch: must be a positive integer, got 0"]),
    (["trainer.learning_starts=-1"], ["trainer.learning_starts: must be a non-negative integer"]),
    (["trainer.optim_steps_per_epoch=-1"], ["trainer.optim_steps_per_epoch: must be a non-negative"]),
    (["eval.episodes=0"], ["eval.episodes: must be a positive integer, got 0"]),
    (["eval.max_envs=0"], ["eval.max_envs: must be a positive integer, got 0"]),
    (["eval.interval_frames=-1"], ["eval.interval_frames: must be a non-negative integer"]),
    (["eval.target_return=abc"], ["eval.target_return: must be a number or null, got 'abc'"]),
    (["eval.target_return=nan"], ["eval.target_return: must be a number or null, got nan"]),
    (["checkpoint.buffer=maybe"], ["checkpoint.buffer: must be true, false or auto, got 'maybe'"]),
    (["checkpoint.buffer=2"], ["checkpoint.buffer: must be true, false or auto, got 2"]),
    (["checkpoint.interval_frames=-5"], ["checkpoint.interval_frames: must be a non-negative integer"]),
    (["checkpoint.max_buffer_mb=-1"], ["checkpoint.max_buffer_mb: must be a number >= 0, got -1"]),
    # budgets and their consistency
    (["collector.frames_per_batch=0"], ["collector.frames_per_batch: must be a positive integer"]),
    (["collector.frames_per_batch=abc"], ["collector.frames_per_batch: must be a positive integer"]),
    (["collector.init_random_frames=-1"], ["collector.init_random_frames: must be a non-negative"]),
    (["env.reward_scale=0"], ["env.reward_scale: must be a number > 0, got 0"]),
    (["env.reward_clip=clip"], ["env.reward_clip: must be sign or null, got 'clip'"]),
    (["+collector.reward_scale=2"], ["collector.reward_scale: unknown option"]),  # lives with the env now
    (["buffer.batch_size=512"], ["buffer.batch_size: minibatches of 512 do not fit in the 256 frames"]),
    (["buffer.batch_size=0"], ["buffer.batch_size: must be a positive integer, got 0"]),  # not ceil_div's
    (["trainer.learning_starts=${nosuch.key}"],
     ["trainer.learning_starts: ${nosuch.key} refers to no config key"]),
    ([*SAC, "buffer.capacity=100"], ["buffer.capacity: the buffer (100) cannot hold one batch of 200 frames",
                                     "buffer.capacity >= 200"]),
    ([*SAC, "buffer.capacity=0"], ["buffer.capacity: must be a positive integer or null, got 0"]),
    ([*SAC, "buffer.alpha=-0.5"], ["buffer.alpha: must be a number >= 0, got -0.5", "(default: 0.6)"]),
    ([*SAC, "buffer.beta=2"], ["buffer.beta: must be a number >= 0 and <= 1, got 2"]),
    ([*SAC, "buffer.sampler=random"], ["buffer.sampler: must be one of uniform, without_replacement"]),
    ([*SAC, "buffer.storage=disk"], ["buffer.storage: must be one of ram, memmap, got 'disk'"]),
    # optimiser
    (["optim.lr=abc"], ["optim.lr: must be a number > 0, got 'abc'", "set optim.lr to a number"]),
    (["optim.lr=-1"], ["optim.lr: must be a number > 0, got -1"]),
    (["optim.lr=0"], ["optim.lr: must be a number > 0, got 0"]),
    (["optim.lr=nan"], ["optim.lr: must be a number > 0, got nan"]),
    (["optim.lr=inf"], ["optim.lr: must be a number > 0, got inf"]),
    (["optim.eps=0"], ["optim.eps: must be a number > 0, got 0"]),
    (["optim.weight_decay=-1"], ["optim.weight_decay: must be a number >= 0, got -1"]),
    (["optim.max_grad_norm=0"], ["optim.max_grad_norm: must be a number > 0 or null, got 0"]),
    (["optim.lr_schedule=cosine"],
     ["optim.lr_schedule: must be one of constant, linear, warmup, got 'cosine'"]),
    (["optim.name=adamax"], ["optim.name: unknown optim 'adamax'"]),
    (["optim=adamax"], ["optim: unknown optim 'adamax'"]),
    # envs
    (["env.num_envs=0"], ["env.num_envs: must be a positive integer, got 0"]),
    (["env.num_envs=abc"], ["env.num_envs: must be a positive integer, got 'abc'"]),
    (["env.max_episode_steps=0"], ["env.max_episode_steps: must be a positive integer or null, got 0"]),
    (["env.vectorization=threads"], ["env.vectorization: must be one of sync, async, got 'threads'"]),
    (["env=breakout", "env.frame_skip=0"], ["env.frame_skip: must be a positive integer, got 0"]),
    (["env=breakout", "env.repeat_action_probability=1.5"],
     ["env.repeat_action_probability: must be a number >= 0 and <= 1, got 1.5"]),
    # exploration and hooks
    (["algo=td3", "env=pendulum", "exploration.sigma=-1"], ["exploration.sigma: must be a number >= 0"]),
    (["algo=dqn", "exploration.eps_end=2"], ["exploration.eps_end: must be a number >= 0 and <= 1, got 2"]),
    (["gamma=abc"], ["gamma: must be a number >= 0 and <= 1, got 'abc'"]),
    (["gamma=1.5"], ["gamma: must be a number >= 0 and <= 1, got 1.5"]),
    (["hooks.gae.lmbda=abc"], ["hooks.gae.lmbda: must be a number >= 0 and <= 1, got 'abc'"]),
    # files and directories
    (["resume={tmp}/empty.pt"], ["resume: checkpoint", "empty.pt is empty (0 bytes)", "delete"]),
    (["resume={tmp}/evil.pt"], ["resume: cannot read checkpoint", "getattr"]),
    (["resume={tmp}/nope"], ["resume: no checkpoint at"]),
    (["hydra.run.dir={tmp}/afile/run"], ["hydra.run.dir: cannot write the run directory", "Not a directory",
                                         "set hydra.run.dir=<a writable directory>"]),
    (["CWD:/proc"], ["hydra.run.dir: cannot write the run directory runs/ in the current directory /proc",
                     "run rlrun from a writable directory"]),
]


class _Touch:
    def __reduce__(self):
        return (getattr, (object, "__class__"))  # loading this would call getattr: refused


@pytest.fixture(scope="module")
def bad_input_dir(tmp_path_factory):
    import torch

    tmp = tmp_path_factory.mktemp("bad")
    (tmp / "empty.pt").touch()
    (tmp / "afile").touch()
    torch.save({"format_version": 1, "payload": _Touch()}, tmp / "evil.pt")
    return tmp


@pytest.mark.parametrize(("args", "needles"), BAD_INPUTS, ids=lambda v: " ".join(v)[:60] if
                         isinstance(v, list) and v and "fix" not in v[0] else None)
def test_bad_input_gives_one_message_with_key_and_fix(args, needles, bad_input_dir, tmp_path, capsys):
    cwd = tmp_path
    if args[0].startswith("CWD:"):
        cwd, args = Path(args[0][4:]), args[1:]
    args = [a.replace("{tmp}", str(bad_input_dir)) for a in args]
    code, _, err = run_cli([*FAST, *args], cwd, capsys)
    assert_clean_error(code, err, *needles)
    assert len(err.strip().splitlines()) == 2, err  # the message and the fix
    assert "weights_only" not in err
    assert not list(cwd.glob("runs/**/summary.json"))  # nothing trained


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
    from rlrun.core.errors import ConfigError

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


def test_help_lists_the_groups_a_user_picks_not_the_signatures(tmp_path, capsys):
    code, out, _ = run_cli(["--help"], tmp_path, capsys)
    assert code == 0
    groups = [line.split(":")[0] for line in out.splitlines() if ": " in line]
    assert {"algo", "env", "logger", "paper/table1", "sweep"} <= set(groups)
    assert not [g for g in groups if g.startswith("signature")]  # factory defaults, not choices
    assert "seed: 0" in out  # the config part of Hydra's help is still there


def test_long_override_lists_get_a_short_stable_run_directory():
    from rlrun.lifecycle.compose import _run_name

    long = ",".join(f"key{i}.option={i}" for i in range(40))
    name = _run_name(long)
    assert len(name) <= 160 and name == _run_name(long) and name != _run_name(long + "x")
    assert _run_name("") == "default" and _run_name("a=1,b=x/y") == "a=1,b=x_y"


def test_precheck_accepts_sweeps_and_globs_and_checks_each_choice():
    from rlrun.core.errors import ConfigError
    from rlrun.lifecycle.compose import precheck

    precheck(["-m", "algo=ppo,a2c", "env=cartpole", "seed=0,1,2"])
    precheck(["-m", "+paper=glob(table1/sac_*)", "seed=0,1"])
    with pytest.raises(ConfigError, match="unknown algo 'a2d'"):
        precheck(["-m", "algo=ppo,a2d"])


def test_the_command_backs_large_tensors_with_huge_pages_unless_the_user_chose(monkeypatch, capsys):
    monkeypatch.delenv("THP_MEM_ALLOC_ENABLE", raising=False)
    assert main(["list", "algo"]) == 0
    assert os.environ["THP_MEM_ALLOC_ENABLE"] == "1"
    monkeypatch.setenv("THP_MEM_ALLOC_ENABLE", "0")
    assert main(["list", "algo"]) == 0
    assert os.environ["THP_MEM_ALLOC_ENABLE"] == "0"


THP_MODE = Path("/sys/kernel/mm/transparent_hugepage/enabled")


@pytest.mark.skipif(not THP_MODE.is_file() or "[never]" in THP_MODE.read_text(),
                    reason="the kernel has no transparent huge pages")
def test_torch_puts_a_large_tensor_on_huge_pages_once_the_command_asked_for_them():
    """What the setting does, in a fresh process: a 64 MB tensor lands on huge pages (AnonHugePages)."""
    code = ("import torch\n"
            "from rlrun.cli.main import use_huge_pages_for_large_tensors\n"
            "use_huge_pages_for_large_tensors()\n"
            "x = torch.ones(16 * 2**20)\n"
            "rollup = open('/proc/self/smaps_rollup').read().splitlines()\n"
            "print([int(l.split()[1]) for l in rollup if l.startswith('AnonHugePages')][0])\n")
    env = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert int(out.stdout.split()[-1]) >= 32 * 1024, out.stdout  # most of the 64 MB, in kB


@pytest.mark.parametrize("bad, key", [("algo=sacc", "algo"),
                                      ("colector.frames_per_batch=3", "colector.frames_per_batch")])
@pytest.mark.parametrize("show", [["--cfg", "job"], ["-c", "all"]])
def test_showing_a_commands_config_checks_its_presets_and_keys_first(tmp_path, capsys, show, bad, key):
    """``--cfg``/``-c`` show the config the command would run: a misspelt preset or key is the
    run's own one-line error and exit 2, not Hydra's listing and exit 1."""
    code, out, err = run_cli(["algo=sac", "env=pendulum", bad, *show], tmp_path, capsys)
    assert code == 2 and err.startswith(f"rlrun: error: {key}: "), err
    assert "Traceback" not in err and "HYDRA_FULL_ERROR" not in err and not out
    code, out, err = run_cli(["algo=sac", "env=pendulum", "seed=3", *show], tmp_path, capsys)
    assert code == 0 and "seed: 3" in out, err

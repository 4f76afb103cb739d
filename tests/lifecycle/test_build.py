"""Rules that span components, checked from declarations when a run is built (through the CLI)."""

from __future__ import annotations

import pytest
from cli_utils import run_cli, summary_of

FAST = ["logger=none", "progress=false", "eval.episodes=2", "eval.interval_frames=0",
        "checkpoint.interval_frames=0"]


@pytest.mark.parametrize(("args", "key", "needles"), [
    # an on-policy loss with a replay buffer: refused, with the fix
    (["algo=ppo", "buffer=replay"], "buffer", ["on-policy", "buffer=minibatch"]),
    (["algo=a2c", "buffer=prioritized"], "buffer", ["on-policy", "buffer=minibatch"]),
    # the discount is one top-level key, for every algorithm
    (["algo=sac", "env=pendulum", "+loss.gamma=0.9"], "loss.gamma", ["top-level", "gamma="]),
    (["algo=ppo", "+hooks.gae.gamma=0.9"], "hooks.gae.gamma", ["top-level", "gamma="]),
    (["algo=ppo", "gamma=1.5"], "gamma", [">= 0 and <= 1"]),
    # PPO without GAE: the loss reads advantages nothing computes
    (["algo=ppo", "~hooks.gae"], "hooks.buffer", ["'advantage'", "hooks.gae"]),
    # a loss with target networks and nothing moving them
    (["algo=td3", "env=pendulum", "~hooks.target_update"], "hooks.target_update", ["target"]),
    # the action space comes from the loss's declaration
    (["algo=dqn", "env=pendulum", "model=qnet"], None, ["discrete"]),
    # minibatches that would not cover an on-policy batch
    (["algo=ppo", "trainer.optim_steps_per_epoch=1"], "trainer.optim_steps_per_epoch", ["cover"]),
    (["algo=ppo", "trainer.updates_per_frame=1"], "trainer.updates_per_frame", ["on-policy"]),
    # an on-policy buffer holds one batch: a larger capacity is refused, not silently used
    (["algo=ppo", "buffer.capacity=4096", "total_frames=2048"], "buffer.capacity",
     ["holds one batch (1024 frames), not 4096", "remove buffer.capacity"]),
    # learning would never start within the budget (naming both keys)
    (["algo=td3", "env=halfcheetah", "total_frames=3000"], "total_frames",
     ["never train", "collector.init_random_frames"]),
])
def test_cross_component_rules_refuse_with_one_message(args, key, needles, tmp_path, capsys):
    code, _, err = run_cli([*args, *FAST], tmp_path, capsys)
    assert code == 2, err
    assert err.startswith("rlrun: error:") and "Traceback" not in err
    if key is not None:
        assert f"error: {key}:" in err
    for needle in needles:
        assert needle in err


def test_hooks_in_another_order_train_the_same(tmp_path, capsys):
    """GAE declared after the buffer in the config still runs before it: the declarations order them.
    (The re-declared node is tuned/ppo_cartpole's own: lmbda 0.8, advantages once per batch.)"""
    base = ["algo=ppo", "env=cartpole", "total_frames=2048", "seed=3", *FAST]
    code, _, err = run_cli([*base, "hydra.run.dir=a"], tmp_path, capsys)
    assert code == 0, err
    moved = [*base, "~hooks.gae", "+hooks.gae={name:gae,lmbda:0.8,every_epoch:false}", "hydra.run.dir=b"]
    code, _, err = run_cli(moved, tmp_path, capsys)
    assert code == 0, err
    a, b = summary_of(tmp_path / "a"), summary_of(tmp_path / "b")
    assert a["eval/episode_return"] == b["eval/episode_return"] and a["optim_steps"] == b["optim_steps"]


def test_off_policy_updates_follow_updates_per_frame(tmp_path, capsys):
    args = ["algo=dqn", "env=cartpole", "total_frames=1200", "collector.init_random_frames=1000",
            "collector.frames_per_batch=100", "trainer.updates_per_frame=0.25", *FAST, "hydra.run.dir=r"]
    code, _, err = run_cli(args, tmp_path, capsys)
    assert code == 0, err
    # learning from frame 1000: batches 10, 11, 12 each give ceil(100 * 0.25) = 25 updates
    assert summary_of(tmp_path / "r")["optim_steps"] == 75


def test_the_action_space_check_refuses_alone():
    """The builder's own action-space guard, called directly (the loss's later failure is another line)."""
    from types import SimpleNamespace

    from rlrun.core.errors import ConfigError
    from rlrun.lifecycle.build import _check_action_space

    loss = SimpleNamespace(action_spaces=("discrete",))
    _check_action_space(loss, SimpleNamespace(discrete=True))
    with pytest.raises(ConfigError) as err:
        _check_action_space(loss, SimpleNamespace(discrete=False))
    assert err.value.key == "algo" and "continuous" in err.value.message

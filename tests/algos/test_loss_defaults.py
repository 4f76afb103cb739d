"""A loss built in Python with its defaults behaves as the one the CLI builds from ``conf/loss/<name>.yaml``.

The yaml files are the documented settings (the paper values); each loss is built twice on the same
networks, once with no settings and once with the yaml's, and every output and one polyak step
must agree. The maths of each setting is pinned by hand elsewhere (test_losses_pinned.py, ...).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from tensordict import TensorDict

from rlrun.algos.a2c import A2CLoss
from rlrun.algos.dqn import DQNLoss
from rlrun.algos.ppo import PPOLoss
from rlrun.algos.sac import SACLoss
from rlrun.algos.td3 import DDPGLoss, TD3Loss
from rlrun.core.specs import EnvSpec
from rlrun.modules.models import actor_critic, actor_twin_q, qnet

DISC = EnvSpec((3,), np.dtype(np.float32), True, 2)
CONT = EnvSpec((3,), np.dtype(np.float32), False, 2)
B = 64


def batch(discrete: bool) -> TensorDict:
    g = torch.Generator().manual_seed(0)
    action = torch.randint(2, (B,), generator=g) if discrete else torch.rand(B, 2, generator=g) * 2 - 1
    return TensorDict({
        "observation": torch.randn(B, 3, generator=g), "action": action,
        "sample_log_prob": torch.randn(B, generator=g) - 1.0,
        "advantage": torch.randn(B, generator=g) * 3 + 1, "value_target": torch.randn(B, generator=g),
        "next": {"observation": torch.randn(B, 3, generator=g), "reward": torch.randn(B, 1, generator=g),
                 "terminated": torch.rand(B, 1, generator=g) < 0.3},
    }, [B])


def preset(name: str) -> dict:
    """``conf/loss/<name>.yaml`` as composed: its signature node (every option) and its own values."""
    from hydra import compose, initialize_config_dir

    from rlrun.lifecycle.compose import CONF_DIR, register_resolvers

    register_resolvers()
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return OmegaConf.to_container(compose(f"loss/{name}").loss)


def perturb_targets(loss) -> None:
    with torch.no_grad():
        for name, p in loss.named_parameters():
            if name.startswith("target_"):
                p.add_(0.3)


CASES = {
    "ppo": (PPOLoss, lambda: actor_critic(DISC, hidden=[8]), {}, True),
    "a2c": (A2CLoss, lambda: actor_critic(DISC, hidden=[8]), {}, True),
    "dqn": (DQNLoss, lambda: qnet(DISC, hidden=[8]), {"gamma": 0.9}, True),
    "sac": (SACLoss, lambda: actor_twin_q(CONT, hidden=[8]), {"spec": CONT, "gamma": 0.9}, False),
    "td3": (TD3Loss, lambda: actor_twin_q(CONT, hidden=[8], head="deterministic"), {"gamma": 0.9}, False),
    "ddpg": (DDPGLoss, lambda: actor_twin_q(CONT, hidden=[8], head="deterministic", num_q=1),
             {"gamma": 0.9}, False),
}


@pytest.mark.parametrize("name", list(CASES))
def test_python_defaults_are_the_configs_settings(name):
    cls, make_policy, required, discrete = CASES[name]
    settings = {k: v for k, v in preset(name).items() if k != "name"}
    assert settings, f"conf/loss/{name}.yaml sets nothing"
    torch.manual_seed(0)
    policy = make_policy()
    losses = [cls(policy, **required), cls(policy, **required, **settings)]
    outs = []
    for loss in losses:
        perturb_targets(loss)  # the targets move away from the online nets the same way in both
        torch.manual_seed(1)  # target smoothing noise, actor samples: the same draws
        outs.append(loss(batch(discrete)))
    default, configured = outs
    assert default.keys() == configured.keys()
    for key in configured:
        torch.testing.assert_close(default[key], configured[key], rtol=0, atol=0, msg=key)
    if losses[0].has_targets:
        for loss in losses:
            loss.update_targets()
        targets = [[p for n, p in loss.named_parameters() if n.startswith("target_")] for loss in losses]
        assert targets[0]
        for a, b in zip(*targets):
            torch.testing.assert_close(a, b, rtol=0, atol=0)

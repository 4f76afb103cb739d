"""IQL and CQL learn from a fixed dataset: a contextual bandit whose best action the data only samples.

States s ~ U[-1, 1]^2, behaviour actions a ~ U[-1, 1], reward -(a - t(s))^2 with
t(s) = 0.5 s0 - 0.3 s1, every step terminal. The behaviour policy scores about -0.45
and behaviour cloning (the mean action, 0) about -0.11; a policy that extracts the best
actions from the data scores near 0. Trained through rlrun's OptimizerStep and the
TransitionSampler, as the loop will.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from rlrun.algos.cql import CQLLoss
from rlrun.algos.iql import IQLLoss
from rlrun.core.policy import Policy
from rlrun.core.specs import EnvSpec
from rlrun.datasets.transitions import TransitionSampler
from rlrun.modules.networks import Actor, TwinQCritic, mlp
from rlrun.trainer.optim import OptimizerStep

SPEC = EnvSpec((2,), np.float32, False, 1)


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def target(s):
    return 0.5 * s[:, 0] - 0.3 * s[:, 1]


def bandit_data(n=4000, seed=0):
    g = torch.Generator().manual_seed(seed)
    s = torch.rand(n, 2, generator=g) * 2 - 1
    a = torch.rand(n, 1, generator=g) * 2 - 1
    r = -(a[:, 0] - target(s)) ** 2
    ones = torch.ones(n, dtype=torch.bool)
    return SimpleNamespace(observation=s, action=a, reward=r, next_observation=torch.zeros_like(s),
                           terminated=ones, truncated=~ones)


def score(actor, n=2000):
    s = torch.rand(n, 2, generator=torch.Generator().manual_seed(99)) * 2 - 1
    with torch.no_grad():
        return float(-((actor.act(s)[:, 0] - target(s)) ** 2).mean())


def train(loss, steps, lr=1e-3):
    opt = OptimizerStep(loss.param_groups(), lr=lr)
    sampler = TransitionSampler(bandit_data(), batch_size=256, seed=1)
    for _ in range(steps):
        opt.step(loss(sampler.sample()))
        loss.update_targets()


@pytest.mark.learning
@pytest.mark.timeout(90)
def test_iql_extracts_better_actions_than_the_data_and_than_cloning():
    torch.manual_seed(0)
    data = bandit_data()
    assert float(data.reward.mean()) < -0.4
    actor = Actor(mlp(2, [64, 64], 1, "relu"), "normal", 1)
    loss = IQLLoss(Policy(actor, TwinQCritic(2, 1, [64, 64])), SPEC, gamma=0.99, value_hidden=[64, 64],
                   expectile=0.9, beta=10.0)
    train(loss, 500)
    assert score(actor) > -0.03  # measured -0.001 (behaviour cloning, beta=0: -0.107)


@pytest.mark.learning
@pytest.mark.timeout(90)
def test_cql_extracts_better_actions_than_the_data_and_than_cloning():
    torch.manual_seed(0)
    actor = Actor(mlp(2, [32, 32], 2, "relu"), "tanh_normal", 1)
    loss = CQLLoss(Policy(actor, TwinQCritic(2, 1, [32, 32])), SPEC, gamma=0.99, cql_alpha=1.0, n_actions=4)
    train(loss, 400, lr=3e-3)
    assert score(actor) > -0.03  # measured -0.007

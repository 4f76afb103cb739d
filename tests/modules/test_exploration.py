"""Exploration components: noise statistics, schedules, resets, evaluation untouched."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlrun.core.errors import ConfigError
from rlrun.core.specs import EnvSpec
from rlrun.modules.exploration import make_epsilon_greedy, make_gaussian, make_ou

CONT = EnvSpec((3,), np.dtype(np.float32), False, 2)
DISC = EnvSpec((3,), np.dtype(np.float32), True, 4)


class ConstActor:
    def __init__(self, value):
        self.value = value

    def act(self, obs):
        return self.value.expand(obs.shape[0], *self.value.shape)


def test_gaussian_noise_has_the_configured_std_and_stays_in_bounds():
    torch.manual_seed(0)
    expl = make_gaussian(ConstActor(torch.zeros(2)), CONT, num_envs=1000, sigma=0.1)
    a = expl(torch.zeros(1000, 3))["action"]
    assert a.abs().max() <= 1.0
    assert a.std().item() == pytest.approx(0.1, rel=0.05)
    edge = make_gaussian(ConstActor(torch.ones(2)), CONT, num_envs=10, sigma=0.5)
    assert edge(torch.zeros(10, 3))["action"].max() <= 1.0  # clipped


def test_epsilon_anneals_per_frame_and_is_saved():
    expl = make_gaussian(ConstActor(torch.zeros(2)), CONT, num_envs=4, sigma=0.1, eps_init=1.0,
                         eps_end=0.0, annealing_frames=100)
    for _ in range(10):  # 10 steps x 4 envs = 40 frames
        expl(torch.zeros(4, 3))
    assert expl.epsilon == pytest.approx(0.6)
    clone = make_gaussian(ConstActor(torch.zeros(2)), CONT, num_envs=4, eps_init=1.0, eps_end=0.0,
                          annealing_frames=100)
    clone.load_state_dict(expl.state_dict())
    assert clone.epsilon == pytest.approx(0.6)
    for _ in range(100):
        expl(torch.zeros(4, 3))
    assert expl.epsilon == 0.0


def test_ou_noise_is_correlated_and_resets_per_env():
    torch.manual_seed(0)
    expl = make_ou(ConstActor(torch.zeros(1)), EnvSpec((3,), np.dtype(np.float32), False, 1),
                   num_envs=2, eps_init=1.0, eps_end=1.0, annealing_frames=0)
    xs = torch.stack([expl(torch.zeros(2, 3))["action"][:, 0] for _ in range(2000)])
    lag1 = np.corrcoef(xs[:-1, 0], xs[1:, 0])[0, 1]
    assert lag1 > 0.7  # white noise would be ~0
    expl.on_episode_end(np.array([1]))
    assert expl.state[1].abs().sum() == 0 and expl.state[0].abs().sum() > 0
    saved = expl.state_dict()
    other = make_ou(ConstActor(torch.zeros(1)), EnvSpec((3,), np.dtype(np.float32), False, 1), 2)
    other.load_state_dict(saved)
    assert torch.equal(other.state, expl.state)


def test_epsilon_greedy_explores_at_epsilon_rate():
    torch.manual_seed(0)
    greedy = ConstActor(torch.tensor(2))
    expl = make_epsilon_greedy(greedy, DISC, num_envs=10000, eps_init=0.3, eps_end=0.3,
                               annealing_frames=0)
    a = expl(torch.zeros(10000, 3))["action"]
    # random actions hit the greedy one 1/4 of the time: P(a != greedy) = 0.3 * 3/4
    assert (a != 2).float().mean().item() == pytest.approx(0.225, abs=0.015)
    assert a.min() >= 0 and a.max() < 4


def test_noise_kind_must_fit_the_action_space():
    with pytest.raises(ConfigError, match="exploration.name"):
        make_epsilon_greedy(ConstActor(torch.zeros(2)), CONT, num_envs=1)
    with pytest.raises(ConfigError, match="exploration.name"):
        make_gaussian(ConstActor(torch.tensor(0)), DISC, num_envs=1)

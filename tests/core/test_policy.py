"""The policy component: which function acts, what it writes, and the value it gives."""

from __future__ import annotations

import pytest
import torch

from rlrun.core.policy import Policy
from rlrun.core.specs import EnvSpec
from rlrun.modules.models import actor_critic, actor_twin_q, qnet


class Tagged:
    """An actor whose acting paths return which path ran."""

    head = "categorical"
    explore_keys = ("action", "sample_log_prob")

    def act(self, obs):
        return torch.full((obs.shape[0],), 1)

    def explore(self, obs):
        return {"action": torch.full((obs.shape[0],), 2), "sample_log_prob": torch.zeros(obs.shape[0])}


def noise(obs):
    return {"action": torch.full((obs.shape[0],), 3)}


OBS = torch.zeros(4, 3)


def test_behaviour_picks_exploration_then_the_actors_sampling_then_the_mode():
    policy = Policy(Tagged())
    assert (policy.behaviour(True)(OBS)["action"] == 2).all()
    assert (policy.behaviour(False)(OBS)["action"] == 1).all()
    assert (policy.explore(OBS)["action"] == 2).all() and (policy.act(OBS) == 1).all()
    policy.exploration = noise
    assert (policy.behaviour(True)(OBS)["action"] == 3).all()
    assert (policy.behaviour(False)(OBS)["action"] == 1).all()  # evaluation never explores


def test_behaviour_keys_name_what_collection_writes():
    policy = Policy(Tagged())
    assert policy.behaviour_keys(True) == {"action", "sample_log_prob"}
    assert policy.behaviour_keys(False) == {"action"}
    policy.exploration = noise
    assert policy.behaviour_keys(True) == {"action"}
    for p, explore in [(actor_critic(EnvSpec((3,), "float32", True, 2)), True),
                       (actor_twin_q(EnvSpec((3,), "float32", False, 2), hidden=[8]), True),
                       (qnet(EnvSpec((3,), "float32", True, 2), hidden=[8]), False)]:
        assert set(p.behaviour(explore)(OBS)) == p.behaviour_keys(explore)


def test_value_is_the_critics_and_needs_one():
    policy = actor_critic(EnvSpec((3,), "float32", True, 2))
    obs = torch.randn(5, 3)
    assert torch.equal(policy.value(obs), policy.critic(obs))
    with pytest.raises(TypeError):
        Policy(Tagged()).value(obs)


def test_the_networks_are_registered_once_in_order():
    policy = actor_critic(EnvSpec((3,), "float32", True, 2), normalize_observations=True)
    names = [n for n, _ in policy.named_children()]
    assert names == ["actor", "critic", "normalizer"] and policy.head == "categorical"
    assert "exploration" not in dict(policy.named_modules())


def test_behaviour_explores_unless_told_not_to():
    # the collector calls behaviour() with no argument: training acts with exploration
    policy = Policy(Tagged())
    assert (policy.behaviour()(OBS)["action"] == 2).all()
    assert policy.behaviour_keys() == {"action", "sample_log_prob"}
    with pytest.raises(TypeError, match="^this policy has no value critic$"):
        policy.value(OBS)

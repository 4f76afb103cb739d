"""TransitionSampler: the replay-buffer key layout, reward scaling, seeded draws; dataset statistics."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from rlrun.datasets.transitions import TransitionSampler, iql_reward_scale, observation_stats


def data():
    n = 6
    obs = torch.arange(2 * n, dtype=torch.float32).reshape(n, 2)
    return SimpleNamespace(observation=obs, action=-obs[:, :1], reward=torch.arange(n, dtype=torch.float32),
                           next_observation=obs + 100,
                           terminated=torch.tensor([0, 0, 1, 0, 0, 0], dtype=torch.bool),
                           truncated=torch.tensor([0, 0, 0, 0, 0, 1], dtype=torch.bool))


def test_batch_rows_are_whole_transitions_with_scaled_rewards():
    s = TransitionSampler(data(), batch_size=32, seed=0, reward_scale=2.0, reward_shift=-1.0)
    b = s.sample()
    assert b.batch_size == torch.Size([32])
    i = b["index"]
    assert torch.equal(b["observation"], torch.stack([2.0 * i, 2.0 * i + 1], -1).float())
    assert torch.equal(b["action"][:, 0], -2.0 * i.float())
    assert torch.equal(b["next", "observation"], b["observation"] + 100)
    assert torch.equal(b["next", "reward"][:, 0], 2.0 * i.float() - 1.0)
    assert torch.equal(b["next", "terminated"][:, 0], i == 2)
    assert torch.equal(b["next", "truncated"][:, 0], i == 5)
    assert torch.equal(b["next", "done"][:, 0], (i == 2) | (i == 5))
    assert b["next", "reward"].shape == (32, 1)


def test_seeded_and_restorable():
    a, b = TransitionSampler(data(), 8, seed=3), TransitionSampler(data(), 8, seed=3)
    state = a.state_dict()
    first = a.sample()["index"]
    assert torch.equal(first, b.sample()["index"])
    a.load_state_dict(state)
    assert torch.equal(a.sample()["index"], first)


def test_iql_reward_scale_and_observation_stats():
    assert iql_reward_scale(torch.tensor([10.0, 510.0, 260.0])) == pytest.approx(2.0)
    with pytest.raises(ValueError):
        iql_reward_scale(torch.tensor([1.0, 1.0]))
    mean, std = observation_stats(torch.tensor([[0.0, 5.0], [2.0, 5.0]]))
    assert mean.tolist() == [1.0, 5.0] and std.tolist() == pytest.approx([1.0, 1e-3])

"""Boundaries of the replay buffer and samplers: the smallest valid inputs and the first invalid ones."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rlrun.buffers.replay import ReplayBuffer
from rlrun.buffers.samplers import PrioritizedSampler


def rows(n: int) -> TensorDict:
    return TensorDict({"x": torch.arange(float(n))}, [n])


@pytest.mark.parametrize("sampler", ["uniform", "without_replacement", "prioritized"])
def test_one_row_and_batches_of_one_are_valid(sampler):
    rb = ReplayBuffer(4, 1, sampler=sampler, generator=torch.Generator().manual_seed(0))
    rb.extend(rows(1))
    assert rb.sample()["x"].tolist() == [0.0]
    with pytest.raises(ValueError):
        ReplayBuffer(4, 0)


def test_priority_index_past_the_stored_rows_is_refused():
    rb = ReplayBuffer(8, 2, sampler="prioritized")
    rb.extend(rows(3))
    rb.update_priority(torch.tensor([2]), torch.tensor([1.0]))  # the last stored row
    with pytest.raises(IndexError):
        rb.update_priority(torch.tensor([3]), torch.tensor([1.0]))


@pytest.mark.parametrize("args", [{"alpha": 0.0}, {"beta": 0.0}, {"eps": 0.0}])
def test_zero_exponents_and_eps_are_valid(args):
    PrioritizedSampler(**args)


@pytest.mark.parametrize("args", [{"alpha": -0.1}, {"beta": -0.1}, {"eps": -0.1}])
def test_negative_exponents_or_eps_are_refused(args):
    with pytest.raises(ValueError):
        PrioritizedSampler(**args)


def test_buffer_hands_alpha_and_beta_to_the_sampler():
    rb = ReplayBuffer(8, 2, sampler="prioritized", alpha=0.3, beta=0.9)
    assert (rb._sampler.alpha, rb._sampler.beta) == (0.3, 0.9)


def test_small_priorities_sample_and_all_zero_priorities_are_refused():
    s = PrioritizedSampler(alpha=1.0, eps=0.0, capacity=4)
    s.on_extend(torch.arange(4))
    s.update_priority(torch.arange(4), torch.full((4,), 0.01))  # total 0.04: still sampled
    index, weight = s.sample(4, 8, torch.Generator().manual_seed(0))
    assert index.max() < 4 and torch.allclose(weight, torch.ones(8))
    s.update_priority(torch.arange(4), torch.zeros(4))
    with pytest.raises(RuntimeError):
        s.sample(4, 8, torch.Generator().manual_seed(0))


@pytest.mark.parametrize("index", [-1, 5])
def test_sampler_refuses_priority_indices_outside_its_capacity(index):
    s = PrioritizedSampler(capacity=5)  # not a power of two: index 5 would land in the tree's padding
    s.update_priority(torch.tensor([0, 4]), torch.ones(2))  # both ends of the range
    with pytest.raises(IndexError):
        s.update_priority(torch.tensor([index]), torch.ones(1))

"""Replay buffer and samplers: the exact error texts, the prioritized defaults (alpha 0.6, beta 0.4,
Schaul et al. 2016), and the checkpoint size of the stored rows."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rlrun.buffers.replay import ReplayBuffer
from rlrun.buffers.samplers import PrioritizedSampler, UniformSampler


def rows(n: int) -> TensorDict:
    return TensorDict({"x": torch.arange(3.0 * n).reshape(n, 3)}, [n])


def zero_priorities():
    s = PrioritizedSampler(eps=0.0, capacity=2)
    s.update_priority(torch.tensor([0, 1]), torch.tensor([0.0, 0.0]))
    s.sample(2, 1)


def capacity_mismatch():
    PrioritizedSampler(capacity=8).load_state_dict(PrioritizedSampler(capacity=4).state_dict())


def stored_past_the_end():
    rb = ReplayBuffer(8, 2, sampler="prioritized")
    rb.extend(rows(3))
    rb.update_priority(torch.tensor([1, 3]), torch.tensor([1.0, 1.0]))


ERRORS = {
    "batch_size": (lambda: ReplayBuffer(4, 0), ValueError, "batch_size must be a positive int, got 0"),
    "priority_past_rows": (stored_past_the_end, IndexError, "priority index 3 >= buffer length 3"),
    "negative_alpha": (lambda: PrioritizedSampler(alpha=-1.0), ValueError,
                       "alpha, beta, eps must be >= 0, got -1.0, 0.4, 1e-06"),
    "no_capacity": (lambda: PrioritizedSampler().sample(1, 1), RuntimeError,
                    "PrioritizedSampler needs a capacity: pass it or call setup()"),
    "empty": (lambda: UniformSampler().sample(0, 1), RuntimeError,
              "cannot sample from an empty buffer; extend it first"),
    "non_finite": (lambda: PrioritizedSampler(capacity=2).update_priority(torch.tensor([0]),
                                                                          torch.tensor([float("nan")])),
                   ValueError, "priorities must be finite"),
    "all_zero": (zero_priorities, RuntimeError, "all priorities are zero; nothing can be sampled"),
    "leaf_range": (lambda: PrioritizedSampler(capacity=2).update_priority(torch.tensor([2]),
                                                                          torch.tensor([1.0])),
                   IndexError, "priority index out of range [0, 2)"),
    "capacity_mismatch": (capacity_mismatch, ValueError, "sampler state has capacity 4, this buffer 8"),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_error_texts(case):
    make, kind, text = ERRORS[case]
    with pytest.raises(kind) as info:
        make()
    assert str(info.value) == text


@pytest.mark.parametrize("build", ["buffer", "sampler"])
def test_prioritized_defaults_are_alpha_0_6_and_beta_0_4(build):
    errors = [0.0, 1.0, 3.0, 7.0]
    p = [(e + 1e-6) ** 0.6 for e in errors]
    g = torch.Generator().manual_seed(0)
    if build == "buffer":
        rb = ReplayBuffer(4, 64, sampler="prioritized", generator=g)
        rb.extend(rows(4))
        rb.update_priority(torch.arange(4), torch.tensor(errors))
        out = rb.sample()
        index, weight = out["index"], out["priority_weight"]
    else:
        s = PrioritizedSampler(capacity=4)
        s.update_priority(torch.arange(4), torch.tensor(errors))
        index, weight = s.sample(4, 64, generator=g)
    assert set(index.tolist()) >= {1, 2, 3}
    for i, w in zip(index.tolist(), weight.tolist()):
        assert w == pytest.approx((p[i] / min(p)) ** -0.4, rel=1e-5)


def test_saved_bytes_are_the_stored_rows_share_of_the_storage():
    rb = ReplayBuffer(8, 2)
    assert rb.saved_nbytes() == 0
    rb.extend(rows(3))
    saved = rb.saved_nbytes()
    # storage for 8 rows of three float32 (96 bytes); a checkpoint writes the 3 stored rows
    assert isinstance(saved, int) and saved == 3 * 3 * 4

"""Tests for the index samplers, above all the sum-tree prioritized sampler."""

from __future__ import annotations

import pytest
import torch

from rlrun.buffers import PrioritizedSampler, UniformSampler, WithoutReplacementSampler


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --- uniform ---------------------------------------------------------------------------


def test_uniform_indices_in_valid_range():
    idx = UniformSampler().sample(7, 10_000, gen())
    assert idx.dtype == torch.int64 and idx.shape == (10_000,)
    assert int(idx.min()) == 0 and int(idx.max()) == 6


def test_uniform_seeded_reproducible():
    s = UniformSampler()
    a, b = s.sample(100, 64, gen(3)), s.sample(100, 64, gen(3))
    assert torch.equal(a, b)
    assert not torch.equal(a, s.sample(100, 64, gen(4)))


def test_empty_raises():
    with pytest.raises(RuntimeError, match="empty"):
        UniformSampler().sample(0, 4)


# --- without replacement -----------------------------------------------------------------


def test_without_replacement_epoch_covers_each_row_once():
    s, g = WithoutReplacementSampler(), gen()
    epoch = torch.cat([s.sample(32, 8, g) for _ in range(4)])
    assert torch.equal(torch.sort(epoch).values, torch.arange(32))


def test_without_replacement_new_permutation_after_exhaustion():
    s, g = WithoutReplacementSampler(), gen()
    first = torch.cat([s.sample(32, 8, g) for _ in range(4)])
    second = torch.cat([s.sample(32, 8, g) for _ in range(4)])
    assert torch.equal(torch.sort(second).values, torch.arange(32))
    assert not torch.equal(first, second)


@pytest.mark.parametrize("drop_last, sizes", [(True, [4, 4, 4]), (False, [4, 4, 2, 4])])
def test_without_replacement_drop_last(drop_last, sizes):
    s, g = WithoutReplacementSampler(drop_last=drop_last), gen()
    got = [s.sample(10, 4, g) for _ in sizes]
    assert [len(i) for i in got] == sizes
    epoch = torch.cat(got[:2] if drop_last else got[:3])
    assert len(set(epoch.tolist())) == len(epoch)


def test_without_replacement_reset_on_extend():
    s, g = WithoutReplacementSampler(), gen()
    s.sample(8, 4, g)
    s.on_extend(torch.arange(8, 16))
    epoch = torch.cat([s.sample(16, 4, g) for _ in range(4)])
    assert torch.equal(torch.sort(epoch).values, torch.arange(16))


def test_without_replacement_reset_on_extend_when_full():
    # A full ring keeps num_valid fixed, so only the extend hook can start the new epoch.
    s, g = WithoutReplacementSampler(), gen()
    s.sample(8, 4, g)
    s.on_extend(torch.arange(4))
    epoch = torch.cat([s.sample(8, 4, g) for _ in range(2)])
    assert torch.equal(torch.sort(epoch).values, torch.arange(8))


def test_without_replacement_batch_larger_than_rows_gives_all_rows_each_call():
    """A run's last, partial batch holds fewer rows than one minibatch: each draw is all of them."""
    s, g = WithoutReplacementSampler(), gen()
    draws = [s.sample(3, 4, g) for _ in range(3)]
    assert all(sorted(d.tolist()) == [0, 1, 2] for d in draws)


# --- prioritized -------------------------------------------------------------------------


def make_prioritized(capacity: int, n: int, priorities, alpha=1.0, beta=0.4, eps=0.0):
    s = PrioritizedSampler(alpha=alpha, beta=beta, eps=eps, capacity=capacity)
    s.on_extend(torch.arange(n))
    s.update_priority(torch.arange(n), torch.as_tensor(priorities, dtype=torch.float64))
    return s


@pytest.mark.parametrize("capacity", [4, 100])
def test_prioritized_frequencies_match_priorities(capacity):
    s, g = make_prioritized(capacity, 4, [1.0, 2.0, 3.0, 4.0]), gen()
    idx = torch.cat([s.sample(4, 64, g)[0] for _ in range(3125)])  # 200k draws
    assert int(idx.max()) < 4  # leaves past the valid rows are never drawn
    freq = torch.bincount(idx, minlength=4).double() / idx.numel()
    expected = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    assert ((freq - expected).abs() / expected).max() < 0.05


def test_prioritized_frequencies_with_alpha():
    prio = torch.tensor([0.5, 1.0, 4.0, 2.0, 0.1], dtype=torch.float64)
    s, g = make_prioritized(5, 5, prio, alpha=0.5), gen(1)
    idx = torch.cat([s.sample(5, 100, g)[0] for _ in range(2000)])
    freq = torch.bincount(idx, minlength=5).double() / idx.numel()
    expected = prio**0.5 / (prio**0.5).sum()
    assert ((freq - expected).abs() / expected).max() < 0.05


def test_prioritized_importance_weights_formula():
    prio = torch.tensor([0.3, 1.5, 2.0, 0.7, 5.0, 1.1], dtype=torch.float64)
    alpha, beta, eps = 0.7, 0.5, 1e-3
    s = make_prioritized(10, 6, prio, alpha=alpha, beta=beta, eps=eps)
    idx, w = s.sample(6, 50, gen())
    assert w.dtype == torch.float32
    p = (prio + eps) ** alpha
    big_p = p / p.sum()
    w_all = (6 * big_p) ** -beta
    expected = w_all[idx] / w_all.max()
    torch.testing.assert_close(w, expected.float())
    assert float(w.max()) <= 1.0


def check_tree(s: PrioritizedSampler, leaves: torch.Tensor) -> None:
    torch.testing.assert_close(s.leaf_priorities(), leaves, rtol=1e-12, atol=0)
    assert s.total == pytest.approx(float(leaves.sum()), rel=1e-12)
    size = s._size
    internal = torch.arange(1, size)
    torch.testing.assert_close(s._sum[internal], s._sum[2 * internal] + s._sum[2 * internal + 1])
    valid = leaves[leaves > 0]
    assert float(s._min[1]) == pytest.approx(float(valid.min()))


@pytest.mark.parametrize("capacity", [1, 13, 37, 64])
def test_prioritized_sum_tree_after_random_updates(capacity):
    alpha, eps = 0.6, 1e-6
    s = PrioritizedSampler(alpha=alpha, eps=eps, capacity=capacity)
    s.on_extend(torch.arange(capacity))
    leaves = torch.full((capacity,), (1.0 + eps) ** alpha, dtype=torch.float64)
    g = gen(7)
    for _ in range(20):
        # Small index range forces repeated indices within one update.
        index = torch.randint(capacity, (2 * capacity,), generator=g)
        prio = torch.rand(2 * capacity, generator=g, dtype=torch.float64) * 10
        s.update_priority(index, prio)
        for i, p in zip(index.tolist(), prio.tolist(), strict=True):  # last write wins
            leaves[i] = (p + eps) ** alpha
        check_tree(s, leaves)


def test_prioritized_repeated_index_last_write_wins():
    s = make_prioritized(8, 8, torch.ones(8))
    s.update_priority(torch.tensor([3, 3, 5, 3]), torch.tensor([1.0, 9.0, 2.0, 4.0]))
    assert s.leaf_priorities()[3] == 4.0 and s.leaf_priorities()[5] == 2.0


def test_prioritized_new_rows_get_max_priority():
    s = make_prioritized(8, 4, [1.0, 7.0, 2.0, 3.0], alpha=0.5, eps=0.0)
    s.update_priority(torch.tensor([1]), torch.tensor([0.5]))  # max is historic, stays 7
    s.on_extend(torch.tensor([4, 5]))
    torch.testing.assert_close(s.leaf_priorities()[4:6], torch.full((2,), 7.0**0.5).double())


def test_prioritized_negative_priority_uses_absolute_value():
    s = make_prioritized(4, 4, [-2.0, 2.0, 1.0, 1.0])
    assert s.leaf_priorities()[0] == s.leaf_priorities()[1] == 2.0


def test_prioritized_non_power_of_two_never_samples_padding():
    s, g = make_prioritized(6, 6, [1.0, 1.0, 1.0, 1.0, 1.0, 5.0]), gen()
    idx = torch.cat([s.sample(6, 128, g)[0] for _ in range(200)])
    assert int(idx.min()) >= 0 and int(idx.max()) == 5
    freq = torch.bincount(idx, minlength=6).double() / idx.numel()
    assert freq[5] == pytest.approx(0.5, rel=0.05)


def test_prioritized_seeded_reproducible_and_state_round_trip(tmp_path):
    s = make_prioritized(10, 10, torch.arange(1.0, 11.0), alpha=0.6)
    torch.save(s.state_dict(), tmp_path / "s.pt")
    t = PrioritizedSampler(capacity=10)
    t.load_state_dict(torch.load(tmp_path / "s.pt", weights_only=True))
    a, b = s.sample(10, 32, gen(5)), t.sample(10, 32, gen(5))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_prioritized_out_of_range_index_raises():
    s = make_prioritized(4, 4, torch.ones(4))
    with pytest.raises(IndexError):
        s.update_priority(torch.tensor([4]), torch.tensor([1.0]))

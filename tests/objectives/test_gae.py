"""gae() against a float64 textbook reverse loop, terminated vs truncated."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from rlrun.objectives.gae import gae


def reference_gae(reward, value, next_value, terminated, done, gamma, lmbda):
    """Plain Python, per env and per step, in float64."""
    r, v, nv = reward.double().tolist(), value.double().tolist(), next_value.double().tolist()
    term, dn = terminated.tolist(), done.tolist()
    adv = [0.0] * len(r)
    next_adv = 0.0
    for t in reversed(range(len(r))):
        delta = r[t] + gamma * nv[t] * (1.0 - term[t]) - v[t]
        next_adv = delta + gamma * lmbda * (1.0 - dn[t]) * next_adv
        adv[t] = next_adv
    return adv


def random_inputs(shape, seed):
    g = torch.Generator().manual_seed(seed)
    reward = torch.randn(shape, generator=g)
    value = torch.randn(shape, generator=g)
    next_value = torch.randn(shape, generator=g)
    terminated = torch.rand(shape, generator=g) < 0.15
    truncated = torch.rand(shape, generator=g) < 0.15
    return reward, value, next_value, terminated, terminated | truncated


BACKENDS = ["torch", pytest.param("numba", marks=pytest.mark.skipif(
    importlib.util.find_spec("numba") is None, reason="numba is not installed"))]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(4, 17), (23,), (2, 3, 9), (3, 1)])
@pytest.mark.parametrize(("gamma", "lmbda"), [(0.99, 0.95), (0.9, 1.0), (1.0, 0.0)])
def test_gae_matches_reference_loop(shape, gamma, lmbda, backend):
    reward, value, next_value, terminated, done = random_inputs(shape, seed=sum(shape))
    assert terminated.any() and (done & ~terminated).any() or shape[-1] == 1
    adv, target = gae(reward, value, next_value, terminated, done, gamma, lmbda, backend=backend)
    assert adv.shape == target.shape == torch.Size(shape)
    assert adv.dtype == target.dtype == value.dtype
    flat = [t.reshape(-1, shape[-1]) for t in (reward, value, next_value, terminated, done)]
    expected = torch.tensor([reference_gae(*(t[i] for t in flat), gamma, lmbda)
                             for i in range(flat[0].shape[0])], dtype=torch.float64).reshape(shape)
    torch.testing.assert_close(adv.double(), expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(target, adv + value)


@pytest.mark.parametrize("backend", BACKENDS)
def test_long_float32_trajectories_stay_within_1e_5_of_float64(backend):
    # the Table 4 regime: long episodes, where float32 recursions drift the most
    reward, value, next_value, terminated, done = random_inputs((8, 2000), seed=3)
    terminated, done = terminated & (torch.rand(8, 2000) < 0.01), done & (torch.rand(8, 2000) < 0.01)
    adv, _ = gae(reward, value, next_value, terminated, done, 0.99, 0.95, backend=backend)
    adv64, _ = gae(*(x.double() for x in (reward, value, next_value)), terminated, done, 0.99, 0.95,
                   backend="torch")
    assert (adv.double() - adv64).abs().max() < 1e-5


@pytest.mark.skipif(importlib.util.find_spec("numba") is None, reason="numba is not installed")
def test_backends_agree_on_noncontiguous_inputs():
    reward, value, next_value, terminated, done = (x.transpose(0, 1) for x in random_inputs((50, 6), 1))
    out = gae(reward, value, next_value, terminated, done, 0.99, 0.95, backend="numba")
    ref = gae(reward, value, next_value, terminated, done, 0.99, 0.95, backend="torch")
    for a, b in zip(out, ref):
        torch.testing.assert_close(a, b)


def test_unknown_backend_is_refused():
    x = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="backend"):
        gae(x, x, x, x.bool(), x.bool(), 0.9, 0.9, backend="jax")


def test_truncated_last_step_bootstraps_from_next_value_terminated_does_not():
    r, v, nv = torch.tensor([[1.0]]), torch.tensor([[0.5]]), torch.tensor([[10.0]])
    yes, no = torch.tensor([[True]]), torch.tensor([[False]])
    adv_trunc, _ = gae(r, v, nv, terminated=no, done=yes, gamma=0.9, lmbda=0.95)
    adv_term, _ = gae(r, v, nv, terminated=yes, done=yes, gamma=0.9, lmbda=0.95)
    torch.testing.assert_close(adv_trunc, torch.tensor([[1.0 + 0.9 * 10.0 - 0.5]]))
    torch.testing.assert_close(adv_term, torch.tensor([[1.0 - 0.5]]))


def test_episode_end_stops_the_recursion_but_truncation_keeps_the_bootstrap():
    # step 0 ends an episode (truncated), step 1 belongs to the next one
    r = torch.tensor([1.0, 100.0])
    v = torch.tensor([0.0, 3.0])
    nv = torch.tensor([2.0, 50.0])
    term = torch.tensor([False, False])
    done = torch.tensor([True, False])
    adv, target = gae(r, v, nv, term, done, gamma=0.5, lmbda=1.0)
    torch.testing.assert_close(adv, torch.tensor([1.0 + 0.5 * 2.0, 100.0 + 0.5 * 50.0 - 3.0]))
    torch.testing.assert_close(target, adv + v)
    # without the episode end, step 0 would include step 1's advantage
    adv_cont, _ = gae(r, v, nv, term, torch.tensor([False, False]), gamma=0.5, lmbda=1.0)
    assert adv_cont[0] == pytest.approx(2.0 + 0.5 * adv[1].item())


def test_all_ones_reward_without_ends_sums_like_the_docstring():
    f = torch.zeros(2, 3, dtype=torch.bool)
    adv, _ = gae(torch.ones(2, 3), torch.zeros(2, 3), torch.zeros(2, 3), f, f, gamma=1.0, lmbda=1.0)
    assert torch.equal(adv, torch.tensor([[3.0, 2.0, 1.0], [3.0, 2.0, 1.0]]))

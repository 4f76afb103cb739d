"""multiagent_gae: per-agent GAE with a shared episode end, against a per-agent reference loop."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from rlrun.objectives.multiagent_gae import multiagent_gae

BACKENDS = ["torch", pytest.param("numba", marks=pytest.mark.skipif(
    importlib.util.find_spec("numba") is None, reason="numba is not installed"))]


def reference(reward, value, next_value, terminated, done, gamma, lmbda):
    """Textbook reverse loop per env and per agent, float64; flags may be [E, T] or [E, T, N]."""
    E, T, N = reward.shape
    adv = torch.zeros(E, T, N, dtype=torch.float64)
    for e in range(E):
        for i in range(N):
            nxt = 0.0
            for t in reversed(range(T)):
                term = terminated[e, t] if terminated.dim() == 2 else terminated[e, t, i]
                dn = done[e, t] if done.dim() == 2 else done[e, t, i]
                delta = float(reward[e, t, i]) + gamma * float(next_value[e, t, i]) * (1 - float(term)) \
                    - float(value[e, t, i])
                nxt = delta + gamma * lmbda * (1 - float(dn)) * nxt
                adv[e, t, i] = nxt
    return adv


@pytest.mark.parametrize("backend", ["auto", *BACKENDS])
@pytest.mark.parametrize("per_agent_flags", [False, True])
def test_matches_a_per_agent_reference_loop(backend, per_agent_flags):
    if backend == "numba" and per_agent_flags:
        pytest.skip("the in-place kernel takes shared flags only")
    g = torch.Generator().manual_seed(0)
    E, T, N = 3, 11, 4
    reward, value, next_value = (torch.randn(E, T, N, generator=g) for _ in range(3))
    flag_shape = (E, T, N) if per_agent_flags else (E, T)
    terminated = torch.rand(flag_shape, generator=g) < 0.15
    done = terminated | (torch.rand(flag_shape, generator=g) < 0.15)
    assert terminated.any() and (done & ~terminated).any()
    adv, target = multiagent_gae(reward, value, next_value, terminated, done, 0.9, 0.9, backend=backend)
    assert adv.shape == target.shape == (E, T, N)
    expected = reference(reward, value, next_value, terminated, done, 0.9, 0.9)
    torch.testing.assert_close(adv.double(), expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(target, adv + value)


def test_agents_with_equal_rewards_and_values_get_equal_advantages():
    # a shared done must cut every agent's recursion at the same step
    E, T = 2, 6
    reward = torch.arange(T, dtype=torch.float32).expand(E, T)[..., None].expand(E, T, 3)
    zeros = torch.zeros(E, T, 3)
    done = torch.zeros(E, T, dtype=torch.bool)
    done[:, 2] = True
    adv, _ = multiagent_gae(reward, zeros, zeros, done, done, 1.0, 1.0)
    # rewards 0..5, episode ends after t=2: returns to go 0+1+2, 1+2, 2 | 3+4+5, 4+5, 5
    torch.testing.assert_close(adv[..., 0], torch.tensor([[3.0, 3, 2, 12, 9, 5]] * 2))
    torch.testing.assert_close(adv[..., 1], adv[..., 0])
    torch.testing.assert_close(adv[..., 2], adv[..., 0])


def test_the_numba_backend_refuses_per_agent_flags():
    x, flags = torch.zeros(1, 2, 3), torch.zeros(1, 2, 3, dtype=torch.bool)
    with pytest.raises(RuntimeError, match="shared flags"):
        multiagent_gae(x, x, x, flags, flags, 0.9, 0.9, backend="numba")

"""vtrace() against float64 reference loops of the paper's definitions, and against GAE at lambda=1."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from rlrun.objectives.gae import gae
from rlrun.objectives.vtrace import vtrace

BACKENDS = ["torch", pytest.param("numba", marks=pytest.mark.skipif(
    importlib.util.find_spec("numba") is None, reason="numba is not installed"))]


def reference_vtrace(log_rho, reward, value, next_value, terminated, done, gamma, rho_bar, c_bar, lmbda):
    """One row in plain Python floats: the paper's Eq. (1) as an explicit sum, episode by episode.

    v_s = V(x_s) + sum_{t=s}^{e} gamma^{t-s} (prod_{i=s}^{t-1} c_i) delta_t, where e is the last step
    of s's episode inside the rollout; delta_t = rho_t (r_t + gamma V(x_{t+1}) [not terminal] - V(x_t)).
    """
    import math

    n = len(reward)
    rho = [math.exp(x) for x in log_rho]
    rho_c = [min(rho_bar, x) for x in rho]
    c = [lmbda * min(c_bar, x) for x in rho]
    boot = [0.0 if terminated[t] else next_value[t] for t in range(n)]
    delta = [rho_c[t] * (reward[t] + gamma * boot[t] - value[t]) for t in range(n)]
    vs = []
    for s in range(n):
        total, weight = value[s], 1.0
        for t in range(s, n):
            total += weight * delta[t]
            if done[t]:
                break
            weight *= gamma * c[t]
        vs.append(total)
    adv = []
    for s in range(n):
        if terminated[s]:
            v_next = 0.0
        elif done[s] or s == n - 1:
            v_next = next_value[s]
        else:
            v_next = vs[s + 1]
        adv.append(rho_c[s] * (reward[s] + gamma * v_next - value[s]))
    return vs, adv


def reference_return(reward, next_value, terminated, done, gamma):
    """The lambda=1 (Monte Carlo, bootstrapped at truncation and rollout end) return of one row."""
    n, out, acc = len(reward), [0.0] * len(reward), 0.0
    for t in reversed(range(n)):
        if terminated[t]:
            acc = reward[t]
        elif done[t] or t == n - 1:
            acc = reward[t] + gamma * next_value[t]
        else:
            acc = reward[t] + gamma * acc
        out[t] = acc
    return out


def inputs(shape, seed, spread=1.0):
    g = torch.Generator().manual_seed(seed)
    log_rho = spread * torch.randn(shape, generator=g)
    reward, value, next_value = (torch.randn(shape, generator=g) for _ in range(3))
    terminated = torch.rand(shape, generator=g) < 0.1
    done = terminated | (torch.rand(shape, generator=g) < 0.1)
    # as a collector records them: inside an episode x_{t+1} is the next row's observation
    next_value[..., :-1] = torch.where(done[..., :-1], next_value[..., :-1], value[..., 1:])
    return log_rho, reward, value, next_value, terminated, done


def rows(*xs):
    return zip(*(x.reshape(-1, x.shape[-1]).double().tolist() if x.is_floating_point()
                 else x.reshape(-1, x.shape[-1]).tolist() for x in xs))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(5, 40), (2, 3, 17), (31,)])
def test_on_policy_vtrace_is_the_lambda_1_return(shape, backend):
    _, reward, value, next_value, terminated, done = inputs(shape, seed=len(shape))
    zero = torch.zeros(shape)
    vs, adv = vtrace(zero, reward, value, next_value, terminated, done, 0.97, backend=backend)
    expected = torch.tensor([reference_return(r, nv, te, d, 0.97)
                             for r, nv, te, d in rows(reward, next_value, terminated, done)],
                            dtype=torch.float64).reshape(shape)
    torch.testing.assert_close(vs.double(), expected, atol=1e-5, rtol=1e-5)
    gae_adv, gae_target = gae(reward, value, next_value, terminated, done, 0.97, 1.0)
    torch.testing.assert_close(vs, gae_target, atol=1e-5, rtol=1e-5)
    # on-policy, the paper's advantage r + gamma v_{t+1} - V is the lambda=1 advantage too
    torch.testing.assert_close(adv, gae_adv, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("rho_bar", "c_bar", "lmbda"), [(1.0, 1.0, 1.0), (2.0, 0.5, 0.9), (0.8, 1.2, 1.0)])
def test_off_policy_matches_the_papers_definition(rho_bar, c_bar, lmbda, backend):
    shape = (6, 30)
    log_rho, reward, value, next_value, terminated, done = inputs(shape, seed=7)
    rho = log_rho.exp()
    assert (rho > max(rho_bar, c_bar)).any() and (rho < min(rho_bar, c_bar)).any()  # clipping acts
    assert (done & ~terminated)[:, 1:-1].any() and terminated[:, 1:-1].any()  # ends mid-rollout
    vs, adv = vtrace(log_rho, reward, value, next_value, terminated, done, 0.95, rho_bar, c_bar, lmbda,
                     backend=backend)
    assert vs.shape == adv.shape == torch.Size(shape) and vs.dtype == adv.dtype == torch.float32
    ref = [reference_vtrace(*row, 0.95, rho_bar, c_bar, lmbda)
           for row in rows(log_rho, reward, value, next_value, terminated, done)]
    torch.testing.assert_close(vs.double(), torch.tensor([r[0] for r in ref], dtype=torch.float64),
                               atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(adv.double(), torch.tensor([r[1] for r in ref], dtype=torch.float64),
                               atol=1e-5, rtol=1e-5)


def test_truncation_bootstraps_from_the_final_value_termination_does_not():
    # one row: step 1 truncates (next value 10), step 3 terminates (next value 20 ignored)
    z = torch.zeros(5)
    r = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])
    nv = torch.tensor([0.0, 10.0, 0.0, 20.0, 7.0])
    term = torch.tensor([False, False, False, True, False])
    done = torch.tensor([False, True, False, True, False])
    vs, adv = vtrace(z, r, z, nv, term, done, gamma=0.5)
    # by hand: v1 = 2 + .5*10 = 7, v0 = 1 + .5*7 = 4.5, v3 = 4, v2 = 3 + .5*4 = 5, v4 = 5 + .5*7 = 8.5
    torch.testing.assert_close(vs, torch.tensor([4.5, 7.0, 5.0, 4.0, 8.5]))
    torch.testing.assert_close(adv, vs)  # V = 0 and rho = 1: the advantage is the target


def test_float64_inputs_keep_their_dtype_and_backends_agree_on_noncontiguous_inputs():
    xs = [x.transpose(0, 1) for x in inputs((30, 4), seed=2)]
    out = vtrace(*xs[:2], *(x.double() for x in xs[2:4]), *xs[4:], 0.9, 1.5, 0.7, backend="torch")
    assert out[0].dtype == torch.float64
    if importlib.util.find_spec("numba") is not None:
        ref = vtrace(*xs[:2], *(x.double() for x in xs[2:4]), *xs[4:], 0.9, 1.5, 0.7, backend="numba")
        for a, b in zip(out, ref):
            torch.testing.assert_close(a, b)


def test_unknown_backend_is_refused():
    x = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="backend"):
        vtrace(x, x, x, x, x.bool(), x.bool(), 0.9, backend="jax")

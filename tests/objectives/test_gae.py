"""gae() against float64 textbook reverse loops (time-last rows and agent groups), terminated vs truncated;
its numpy path against the numba kernel bit for bit."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import numpy as np
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


NUMBA = pytest.mark.skipif(importlib.util.find_spec("numba") is None, reason="numba is not installed")
BACKENDS = ["torch", "numpy", pytest.param("numba", marks=NUMBA)]


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


@NUMBA
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


def group_reference(reward, value, next_value, terminated, done, gamma, lmbda):
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
@pytest.mark.parametrize("flags", ["shared", "per_agent", "mixed"])
def test_group_layout_matches_a_per_agent_reference_loop(backend, flags):
    g = torch.Generator().manual_seed(0)
    E, T, N = 3, 11, 4
    reward, value, next_value = (torch.randn(E, T, N, generator=g) for _ in range(3))
    shapes = {"shared": [(E, T)] * 2, "per_agent": [(E, T, N)] * 2, "mixed": [(E, T), (E, T, N)]}[flags]
    terminated = torch.rand(shapes[0], generator=g) < 0.15
    done = (torch.rand(shapes[1], generator=g) < 0.15) | (terminated if flags != "mixed" else
                                                          terminated.unsqueeze(-1))
    assert terminated.any() and done.sum() > terminated.sum()
    adv, target = gae(reward, value, next_value, terminated, done, 0.9, 0.8, backend=backend, agents=True)
    assert adv.shape == target.shape == (E, T, N)
    expected = group_reference(reward, value, next_value, terminated, done, 0.9, 0.8)
    torch.testing.assert_close(adv.double(), expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(target, adv + value)


def test_shared_flags_imply_the_agent_layout():
    # [E, T, N] data with [E, T] flags: the last dim indexes agents, time is the middle one
    g = torch.Generator().manual_seed(1)
    reward, value, next_value = (torch.randn(2, 5, 3, generator=g) for _ in range(3))
    done = torch.zeros(2, 5, dtype=torch.bool)
    done[:, 1] = True
    adv, _ = gae(reward, value, next_value, done, done, 0.9, 0.9)
    expected = group_reference(reward, value, next_value, done, done, 0.9, 0.9)
    torch.testing.assert_close(adv.double(), expected, rtol=1e-5, atol=1e-5)


def test_agents_with_equal_rewards_and_values_get_equal_advantages():
    # a shared done must cut every agent's recursion at the same step
    E, T = 2, 6
    reward = torch.arange(T, dtype=torch.float32).expand(E, T)[..., None].expand(E, T, 3)
    zeros = torch.zeros(E, T, 3)
    done = torch.zeros(E, T, dtype=torch.bool)
    done[:, 2] = True
    adv, _ = gae(reward, zeros, zeros, done, done, 1.0, 1.0)
    # rewards 0..5, episode ends after t=2: returns to go 0+1+2, 1+2, 2 | 3+4+5, 4+5, 5
    torch.testing.assert_close(adv[..., 0], torch.tensor([[3.0, 3, 2, 12, 9, 5]] * 2))
    torch.testing.assert_close(adv[..., 1], adv[..., 0])
    torch.testing.assert_close(adv[..., 2], adv[..., 0])


def test_fma_emulation_rounds_once():
    from fractions import Fraction

    from rlrun.objectives._gae_exact import fma

    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(4000) * 10.0 ** rng.integers(-3, 4, 4000) for _ in range(3))
    # products whose rounding error decides the result: c cancels most of a * b
    c[:2000] = -(a[:2000] * b[:2000])
    got = fma(a, b, c)
    exact = [float(Fraction(x) * Fraction(y) + Fraction(z)) for x, y, z in zip(a, b, c)]  # one rounding
    assert np.array_equal(got, np.array(exact))
    assert not np.array_equal(a * b + c, np.array(exact))  # two roundings differ somewhere


@NUMBA
@pytest.mark.parametrize("layout", ["rows", "group_shared", "group_per_agent"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_numpy_path_equals_the_kernel_bit_for_bit(layout, dtype):
    # small batches take the numpy path, large ones the kernel: a run's numbers must not depend on which
    g = torch.Generator().manual_seed(7)
    for steps in (1, 3, 4, 9, 128, 1001):
        shape = (5, steps) if layout == "rows" else (5, steps, 3)
        reward, value, next_value = (3 * torch.randn(shape, generator=g, dtype=dtype) for _ in range(3))
        flag_shape = shape if layout != "group_shared" else shape[:2]
        terminated = torch.rand(flag_shape, generator=g) < 0.05
        done = terminated | (torch.rand(flag_shape, generator=g) < 0.05)
        args = (reward, value, next_value, terminated, done, 0.99, 0.95)
        agents = layout != "rows"
        numpy_out, kernel_out = (gae(*args, backend=b, agents=agents) for b in ("numpy", "numba"))
        for x, y in zip(numpy_out, kernel_out):
            assert x.dtype == y.dtype == dtype and torch.equal(x, y), steps


def test_small_batches_do_not_import_numba_and_large_ones_load_the_kernel():
    code = """if True:
        import sys, torch
        import rlrun.objectives.gae as m
        x, f = torch.ones(8, 128), torch.zeros(8, 128, dtype=torch.bool)
        m.gae(x, x, x, f, f, 0.99, 0.95)
        m.gae(x[..., None].expand(8, 128, 3), x[..., None].expand(8, 128, 3), x[..., None].expand(8, 128, 3),
              f, f, 0.99, 0.95)
        print("numba" in sys.modules)
        y, g = torch.ones(8, m.SMALL), torch.zeros(8, m.SMALL, dtype=torch.bool)
        m.gae(y, y, y, g, g, 0.99, 0.95)
        print(m._kernel_loaded() or m._numba_kernel() is None)
    """
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.stdout.split() == ["False", "True"], out.stderr


def test_the_numpy_path_hands_over_to_the_kernel_once_its_budget_is_spent(monkeypatch):
    import rlrun.objectives.gae as module

    calls = []
    monkeypatch.setattr(module, "_kernel_loaded", lambda: False)
    monkeypatch.setattr(module, "_numba_kernel", lambda: (lambda *a: calls.append(a)))
    monkeypatch.setattr(module, "_numpy_spent_s", 0.0)
    monkeypatch.setattr(module, "kernel_fuses", lambda: True)
    x, f = torch.ones(2, 8), torch.zeros(2, 8, dtype=torch.bool)
    gae(x, x, x, f, f, 0.9, 0.9)
    assert not calls and module._numpy_spent_s > 0
    monkeypatch.setattr(module, "_numpy_spent_s", module.NUMPY_BUDGET_S)
    gae(x, x, x, f, f, 0.9, 0.9)
    assert len(calls) == 1


def test_without_a_fused_kernel_small_batches_take_the_kernel(monkeypatch):
    # the numpy path emulates the kernel's FMAs: where numba builds without them it would differ
    import rlrun.objectives._gae_exact as exact
    import rlrun.objectives.gae as module

    monkeypatch.setenv("NUMBA_CPU_NAME", "generic")
    exact.kernel_fuses.cache_clear()
    try:
        assert not exact.kernel_fuses()
    finally:
        exact.kernel_fuses.cache_clear()
    calls = []
    monkeypatch.setattr(module, "_kernel_loaded", lambda: False)
    monkeypatch.setattr(module, "_numba_kernel", lambda: (lambda *a: calls.append(a)))
    monkeypatch.setattr(module, "kernel_fuses", lambda: False)
    x, f = torch.ones(2, 8), torch.zeros(2, 8, dtype=torch.bool)
    gae(x, x, x, f, f, 0.9, 0.9)
    assert len(calls) == 1


def test_a_run_long_enough_loads_the_kernel_at_its_first_call(monkeypatch):
    """The GAE hook projects the numpy path over the calls its frame budget has left: a run whose
    calls would spend more than the numpy budget (here 97 more batches x 10 epochs at 1 ms) loads
    the kernel at once rather than after spending that budget; a short run never loads it."""
    from types import SimpleNamespace

    import rlrun.objectives.gae as module
    from rlrun.trainer.hooks import GAE
    from rlrun.trainer.loop import Budget

    loads = []
    monkeypatch.setattr(module, "_kernel_loaded", lambda: bool(loads))
    monkeypatch.setattr(module, "warm_up", lambda: loads.append(True))
    monkeypatch.setattr(module, "_numpy_spent_s", 0.0)
    assert not module.load_if_it_pays(1e-3, 100) and not loads  # 0.1 s: within the numpy budget
    assert module.load_if_it_pays(1e-3, 970) and loads == [True]

    seen = []
    monkeypatch.setattr("rlrun.trainer.hooks.load_if_it_pays", lambda s, calls: seen.append(calls))
    batch = torch.zeros(8, 128)  # only its frame count is read
    for every_epoch, total, expected in ((True, 100_000, 970), (False, 100_000, 97), (True, 1024, 0)):
        trainer = SimpleNamespace(budget=Budget("frames", total), clock=1024, epochs_per_batch=10)
        hook = GAE(0.99, every_epoch=every_epoch)
        hook._foresee(trainer, batch, 1e-3)
        assert seen.pop() == expected
    GAE(0.99)._foresee(SimpleNamespace(budget=Budget("updates", 500), clock=0), batch, 1e-3)
    assert not seen  # an update budget says nothing about batches


def test_the_projection_times_a_warm_call_not_the_first(monkeypatch):
    """The first call pays numpy's first-use costs (~3x a warm call at 8 x 128): projecting it
    loaded numba (~0.65 s) for PPO's 100k-frame CartPole run, whose 970 warm numpy calls cost
    ~0.33 s. The hook projects a second call of the same inputs, once per run."""
    import time
    from types import SimpleNamespace

    from tensordict import TensorDict

    from rlrun.trainer import hooks

    calls: list[int] = []

    def first_call_slow(reward, value, *rest, agents=None):
        calls.append(1)
        if len(calls) == 1:
            time.sleep(0.05)
        return value, value

    seen: list[float] = []
    monkeypatch.setattr(hooks, "gae", first_call_slow)
    monkeypatch.setattr(hooks.GAE, "_foresee", lambda self, trainer, batch, seconds: seen.append(seconds))
    flag = torch.zeros(8, 128, 1, dtype=torch.bool)
    batch = TensorDict({"observation": torch.ones(8, 128, 4), "next": {
        "observation": torch.ones(8, 128, 4), "reward": torch.ones(8, 128, 1), "terminated": flag,
        "done": flag}}, [8, 128])
    trainer = SimpleNamespace(batches=0, policy=SimpleNamespace(value=lambda obs: obs.sum(-1)))
    hook = hooks.GAE(0.99)
    for trainer.batches in (1, 2):
        hook.pre_epoch(trainer, batch)
    assert len(calls) == 3 and len(seen) == 1 and seen[0] < 0.05
    assert torch.equal(batch["advantage"], torch.full((8, 128), 4.0))

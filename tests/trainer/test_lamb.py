"""LAMB against hand-computed steps and a float64 numpy reference; its state survives a resume."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
import torch
from torch import nn

from rlrun.core.errors import ConfigError
from rlrun.core.registry import build
from rlrun.trainer.lamb import Lamb
from rlrun.trainer.optim import OptimizerStep


def reference(w0, grads, lr, b1=0.9, b2=0.999, eps=1e-8, wd=0.0):
    """Algorithm 2 of You et al. (2019) in float64, for one parameter tensor."""
    w = np.array(w0, dtype=np.float64)
    m, v = np.zeros_like(w), np.zeros_like(w)
    out = []
    for t, g in enumerate(grads, start=1):
        g = np.asarray(g, dtype=np.float64)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        r = (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
        u = r + wd * w
        wn, un = np.linalg.norm(w), np.linalg.norm(u)
        ratio = wn / un if wn > 0 and un > 0 else 1.0
        w = w - lr * ratio * u
        out.append(w.copy())
    return out


def run(w0, grads, **kw):
    """Lamb on one float32 tensor fed the given gradients; the weights after each step."""
    p = nn.Parameter(torch.tensor(w0, dtype=torch.float32))
    opt = Lamb([p], **kw)
    out = []
    for g in grads:
        p.grad = torch.tensor(g, dtype=torch.float32)
        opt.step()
        out.append(p.detach().numpy().astype(np.float64).copy())
    return out


def test_first_step_is_the_sign_of_the_gradient_scaled_by_the_trust_ratio():
    # step 1: m_hat = g, v_hat = g^2, so r = g / |g| = [1, -1]; ||w|| = 5, ||r|| = sqrt(2)
    (w1,) = run([3.0, 4.0], [[1.0, -2.0]], lr=0.1, eps=1e-8)
    step = 0.1 * 5 / math.sqrt(2)
    np.testing.assert_allclose(w1, [3 - step, 4 + step], rtol=1e-6)


def test_weight_decay_is_added_to_the_update_before_the_trust_ratio():
    # u = [1, -1] + 0.1 * [3, 4] = [1.3, -0.6]; step = lr * ||w|| / ||u|| * u
    (w1,) = run([3.0, 4.0], [[1.0, -2.0]], lr=0.1, eps=1e-8, weight_decay=0.1)
    u = np.array([1.3, -0.6])
    np.testing.assert_allclose(w1, np.array([3.0, 4.0]) - 0.1 * 5 / math.sqrt(1.69 + 0.36) * u, rtol=1e-6)


def test_bias_correction_makes_a_constant_gradients_second_step_its_sign_again():
    # the same gradient twice: m_hat = g and v_hat = g^2 again only with the bias correction
    # (without it r would be 0.19 / sqrt(0.001999) = 4.25 times larger, changing u's direction
    # once weight decay is added)
    w1, w2 = run([3.0, 4.0], [[1.0, -2.0]] * 2, lr=0.1, eps=1e-8, weight_decay=0.1)
    u = np.array([1.0, -1.0]) + 0.1 * w1
    np.testing.assert_allclose(w2, w1 - 0.1 * np.linalg.norm(w1) / np.linalg.norm(u) * u, rtol=1e-6)
    uncorrected = 0.19 / math.sqrt(0.001999) * np.array([1.0, -1.0]) + 0.1 * w1
    wrong = w1 - 0.1 * np.linalg.norm(w1) / np.linalg.norm(uncorrected) * uncorrected
    assert np.abs(w2 - wrong).max() > 1e-3


def test_two_steps_match_the_float64_reference():
    w0 = [[0.5, -1.5, 2.0], [0.1, 0.0, -0.7]]
    grads = [[[0.3, -0.2, 1.0], [0.05, -0.4, 0.2]], [[-0.1, 0.6, 0.4], [0.2, 0.1, -0.3]]]
    for kw in ({"lr": 0.01}, {"lr": 0.05, "weight_decay": 0.01, "betas": (0.8, 0.99), "eps": 1e-6}):
        want = reference(w0, grads, kw["lr"], *kw.get("betas", (0.9, 0.999)), kw.get("eps", 1e-6),
                         kw.get("weight_decay", 0.0))
        got = run(w0, grads, **kw)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)


def test_a_zero_weight_tensor_steps_with_trust_ratio_one():
    # a zero-initialised bias: ||w|| = 0, so the ratio is 1 (not 0) and the step is lr * r
    (w1,) = run([0.0, 0.0], [[1.0, -2.0]], lr=0.1, eps=1e-8, weight_decay=0.1)
    np.testing.assert_allclose(w1, [-0.1, 0.1], rtol=1e-6)


def test_a_zero_update_leaves_the_weights_and_is_not_nan():
    # ||u|| = 0 (zero gradient, no decay): the ratio is 1, 0 / 0 is never taken
    w1, w2 = run([3.0, 4.0], [[0.0, 0.0], [0.0, 0.0]], lr=0.1)
    np.testing.assert_array_equal(w2, [3.0, 4.0])
    assert np.isfinite(w1).all()


def test_each_tensor_has_its_own_trust_ratio():
    a = nn.Parameter(torch.tensor([3.0, 4.0]))   # ||w|| = 5
    b = nn.Parameter(torch.tensor([0.3, 0.4]))   # ||w|| = 0.5
    opt = Lamb([a, b], lr=0.1, eps=1e-8)
    a.grad, b.grad = torch.tensor([1.0, -2.0]), torch.tensor([1.0, -2.0])
    opt.step()
    d = 1 / math.sqrt(2)  # r = [1, -1]: each tensor steps lr * ||w|| / sqrt(2) per entry
    np.testing.assert_allclose(a.detach().numpy(), [3 - 0.5 * d, 4 + 0.5 * d], rtol=1e-6)
    np.testing.assert_allclose(b.detach().numpy(), [0.3 - 0.05 * d, 0.4 + 0.05 * d], rtol=1e-6)


def test_its_state_dict_round_trips_and_a_resumed_optimizer_continues_identically():
    torch.manual_seed(0)
    target = torch.randn(4, 3)

    def loss(p):
        return ((p - target) ** 2).sum() + p.sum() ** 2

    p = nn.Parameter(torch.randn(4, 3))
    opt = Lamb([p], lr=0.05, weight_decay=0.01)
    for _ in range(2):
        opt.zero_grad()
        loss(p).backward()
        opt.step()
    buf = io.BytesIO()
    torch.save(opt.state_dict(), buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=True)
    assert state["state"][0]["step"].item() == 2
    assert set(state["state"][0]) == {"step", "exp_avg", "exp_avg_sq"}

    q = nn.Parameter(p.detach().clone())
    resumed = Lamb([q], lr=0.05, weight_decay=0.01)
    resumed.load_state_dict(state)
    fresh_p = nn.Parameter(p.detach().clone())
    fresh = Lamb([fresh_p], lr=0.05, weight_decay=0.01)
    for o, w in ((opt, p), (resumed, q), (fresh, fresh_p)):
        for _ in range(2):
            o.zero_grad()
            loss(w).backward()
            o.step()
    assert torch.equal(p, q)
    assert not torch.allclose(p, fresh_p)  # without the moments and step count it would differ


def test_lamb_is_an_optim_name_with_the_shared_options():
    a = nn.Parameter(torch.tensor([3.0, 4.0]))
    opt = build("optim", {"name": "lamb", "lr": 0.1, "weight_decay": 0.1, "eps": 1e-8},
                param_groups={"g": [a]})
    assert isinstance(opt.optimizers["g"], Lamb)
    opt.step({"loss_g": (a * torch.tensor([1.0, -2.0])).sum()})
    u = np.array([1.3, -0.6])
    want = np.array([3.0, 4.0]) - 0.5 / math.sqrt(2.05) * u
    np.testing.assert_allclose(a.detach().numpy(), want, rtol=1e-6)
    # the schedule and the resume path of OptimizerStep apply to it like to the others
    b = nn.Parameter(torch.tensor([3.0, 4.0]))
    other = OptimizerStep({"g": [b]}, "lamb", lr=0.1, weight_decay=0.1, eps=1e-8)
    other.load_state_dict(opt.state_dict())
    assert other.optimizers["g"].state[b]["step"].item() == 1


def test_an_unknown_optimizer_name_is_still_a_config_error():
    with pytest.raises(ConfigError, match="unknown optimizer 'lamm'.*lamb"):
        OptimizerStep({"g": [nn.Parameter(torch.zeros(1))]}, "lamm")

"""CQLLoss: importance-sampled conservative term, TD target, Lagrange dual by hand; gradient routing."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rlrun.algos.cql import CQLLoss
from rlrun.core.policy import Policy
from rlrun.core.specs import EnvSpec
from rlrun.modules.networks import TwinQCritic

OBS = [[1.0, 0.0], [0.0, 2.0], [-1.0, -1.0]]
ACT = [[0.5, -0.5], [-0.9, 0.1], [0.0, 0.3]]
NEXT = [[2.0, 1.0], [-3.0, 0.0], [1.0, 1.0]]
REW = [1.0, -2.0, 0.5]
TERM = [False, False, True]
# online Q_k(s, a) = QW[k] . (s, a) + QB[k]; target keeps TQW/TQB
TQW, TQB = [[0.5, -1.0, 2.0, 0.1], [1.0, 0.5, -1.0, 0.3]], [0.1, -0.2]
QW, QB = [[0.3, 0.2, 1.0, -0.5], [-0.4, 0.7, 0.5, 0.2]], [0.0, 0.3]
N_ACT = 3


class FixedActor(nn.Module):
    """sample(s) = (tanh(w * (s0 + s1)), tanh(w * s0)) with log-prob w * s0 - s1 (w = 0.5); no randomness."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(0.5))

    def sample(self, obs):
        a = torch.stack([torch.tanh(self.w * obs.sum(-1)), torch.tanh(self.w * obs[:, 0])], -1)
        return a, self.w * obs[:, 0] - obs[:, 1]


def pi(s):
    return [math.tanh(0.5 * (s[0] + s[1])), math.tanh(0.5 * s[0])], 0.5 * s[0] - s[1]


def set_q(critic, w, b):
    with torch.no_grad():
        critic.weights[0].copy_(torch.tensor(w)[:, :, None])
        critic.biases[0].copy_(torch.tensor(b)[:, None, None])


def build(**kw) -> CQLLoss:
    critic = TwinQCritic(2, 2, [], "relu")
    set_q(critic, TQW, TQB)
    kw.setdefault("gamma", 0.99)
    loss = CQLLoss(Policy(FixedActor(), critic), EnvSpec((2,), np.float32, False, 2), n_actions=N_ACT, **kw)
    set_q(critic, QW, QB)
    return loss


def batch():
    return TensorDict({
        "observation": torch.tensor(OBS), "action": torch.tensor(ACT),
        ("next", "observation"): torch.tensor(NEXT), ("next", "reward"): torch.tensor(REW)[:, None],
        ("next", "terminated"): torch.tensor(TERM)[:, None]}, batch_size=[3])


def q(w, b, s, a):
    return sum(x * y for x, y in zip(w, s + a)) + b


def lse(xs):
    m = max(xs)
    return m + math.log(sum(math.exp(x - m) for x in xs))


def expected(uniform, gamma, alpha, cql_alpha, temp, backup_entropy):
    """(td loss, per-Q gap, actor loss) in plain float64 loops."""
    td = [0.0, 0.0]
    gap = [0.0, 0.0]
    actor = 0.0
    b = len(OBS)
    for i, (s, a, s2, r, term) in enumerate(zip(OBS, ACT, NEXT, REW, TERM)):
        a2, lp2 = pi(s2)
        nq = min(q(TQW[k], TQB[k], s2, a2) for k in range(2))
        if backup_entropy:
            nq -= alpha * lp2
        y = r + (0.0 if term else gamma * nq)
        a_s, lp_s = pi(s)
        for k in range(2):
            td[k] += (q(QW[k], QB[k], s, a) - y) ** 2 / b
            terms = [q(QW[k], QB[k], s, uniform[j][i]) - 2 * math.log(0.5) for j in range(N_ACT)]
            terms += [q(QW[k], QB[k], s, a2) - lp2] * N_ACT  # pi(s') actions, evaluated at s
            terms += [q(QW[k], QB[k], s, a_s) - lp_s] * N_ACT
            gap[k] += (temp * lse([t / temp for t in terms]) - q(QW[k], QB[k], s, a)) / b
        actor += (alpha * lp_s - min(q(QW[k], QB[k], s, a_s) for k in range(2))) / b
    return sum(td), gap, actor


@pytest.mark.parametrize("backup_entropy,temp", [(False, 1.0), (True, 2.0)])
def test_cql_terms_by_hand(backup_entropy, temp):
    loss = build(gamma=0.9, init_alpha=0.2, cql_alpha=5.0, temp=temp, backup_entropy=backup_entropy)
    torch.manual_seed(3)
    out = loss(batch())
    # the only random draw is the uniform actions, [n_actions, batch, action_dim] in [-1, 1]
    torch.manual_seed(3)
    uniform = (torch.rand(N_ACT, 3, 2) * 2 - 1).double().tolist()
    td, gap, actor = expected(uniform, 0.9, 0.2, 5.0, temp, backup_entropy)
    assert out["td_loss"].item() == pytest.approx(td, rel=1e-5)
    assert out["loss_critic"].item() == pytest.approx(td + 5.0 * sum(gap), rel=1e-5)
    assert out["loss_actor"].item() == pytest.approx(actor, rel=1e-5)
    assert out["cql_gap"].item() == pytest.approx(sum(gap) / 2, rel=1e-5)


def test_lagrange_dual_by_hand():
    loss = build(gamma=0.9, init_alpha=0.2, cql_alpha=5.0, lagrange=True, target_action_gap=3.0)
    with torch.no_grad():
        loss.log_alpha_prime.fill_(math.log(0.5))
    torch.manual_seed(1)
    out = loss(batch())
    torch.manual_seed(1)
    uniform = (torch.rand(N_ACT, 3, 2) * 2 - 1).double().tolist()
    td, gap, _ = expected(uniform, 0.9, 0.2, 5.0, 1.0, False)
    slack = [5.0 * g - 3.0 for g in gap]
    assert out["loss_critic"].item() == pytest.approx(td + 0.5 * sum(slack), rel=1e-5)
    assert out["loss_alpha_prime"].item() == pytest.approx(-0.5 * 0.5 * sum(slack), rel=1e-5)
    # d loss / d log_alpha' = -0.5 * alpha' * sum(slack): alpha' grows while the gap is above target
    (g,) = torch.autograd.grad(out["loss_alpha_prime"], [loss.log_alpha_prime])
    assert g.item() == pytest.approx(-0.25 * sum(slack), rel=1e-5)
    assert "alpha_prime" in loss.param_groups()


@pytest.mark.parametrize("lagrange", [False, True])
def test_each_loss_reaches_only_its_parameters(lagrange):
    loss = build(lagrange=lagrange)
    out = loss(batch())
    groups = loss.param_groups()
    owners = {"loss_critic": "critic", "loss_actor": "actor", "loss_alpha": "alpha"}
    if lagrange:
        owners["loss_alpha_prime"] = "alpha_prime"
    assert set(groups) == set(owners.values())
    for term, owner in owners.items():
        for name, params in groups.items():
            grads = torch.autograd.grad(out[term], params, retain_graph=True, allow_unused=True)
            touched = any(g is not None and g.abs().sum() > 0 for g in grads)
            assert touched == (name == owner), (term, name)


def test_defaults_are_the_authors_mujoco_settings():
    # gamma 0.99, alpha 1, cql_alpha 5, temp 1, no entropy in the backup, no Lagrange dual
    loss = build()
    torch.manual_seed(4)
    out = loss(batch())
    torch.manual_seed(4)
    uniform = (torch.rand(N_ACT, 3, 2) * 2 - 1).double().tolist()
    td, gap, actor = expected(uniform, 0.99, 1.0, 5.0, 1.0, False)
    assert out["loss_critic"].item() == pytest.approx(td + 5.0 * sum(gap), rel=1e-5)
    assert out["loss_actor"].item() == pytest.approx(actor, rel=1e-5)
    assert "loss_alpha_prime" not in out and set(loss.param_groups()) == {"actor", "critic", "alpha"}
    assert loss.target_entropy == -2.0 and loss.n_actions == N_ACT


def test_diagnostics_and_temperature_loss_by_hand():
    loss = build(gamma=0.9, init_alpha=0.2, target_entropy=-1.5)
    out = loss(batch())
    lp = [pi(s)[1] for s in OBS]
    assert out["alpha"].item() == pytest.approx(0.2)
    assert out["entropy"].item() == pytest.approx(-sum(lp) / 3, rel=1e-5)
    assert out["loss_alpha"].item() == pytest.approx(-math.log(0.2) * sum(x - 1.5 for x in lp) / 3, rel=1e-5)
    qs, errors = [], []
    for s, a, s2, r, term in zip(OBS, ACT, NEXT, REW, TERM):
        a2, _ = pi(s2)
        y = r + (0.0 if term else 0.9 * min(q(TQW[k], TQB[k], s2, a2) for k in range(2)))
        online = [q(QW[k], QB[k], s, a) for k in range(2)]
        qs += online
        errors.append(max(abs(v - y) for v in online))
    assert out["q_value"].item() == pytest.approx(sum(qs) / 6, rel=1e-5)
    assert out["td_error"].tolist() == pytest.approx(errors, rel=1e-5)


def test_lagrange_multiplier_is_capped_at_a_million():
    loss = build(lagrange=True, target_action_gap=3.0)
    with torch.no_grad():
        loss.log_alpha_prime.fill_(math.log(1e8))
    out = loss(batch())
    assert out["alpha_prime"].item() == 1e6


def test_update_targets_moves_the_target_critic_by_tau():
    loss = build(tau=0.25)
    loss.update_targets()
    w = loss.target_critic.weights[0][:, :, 0]
    expected_w = [[0.75 * t + 0.25 * o for t, o in zip(tr, orow)] for tr, orow in zip(TQW, QW)]
    torch.testing.assert_close(w, torch.tensor(expected_w))
    b = loss.target_critic.biases[0].flatten()
    torch.testing.assert_close(b, torch.tensor([0.75 * t + 0.25 * o for t, o in zip(TQB, QB)]))


def test_fixed_temperature_and_documented_defaults_of_the_optional_terms():
    loss = build(learn_alpha=False, init_alpha=0.5)
    assert not loss.log_alpha.requires_grad and "alpha" not in loss.param_groups()
    assert not loss.log_alpha_prime.requires_grad  # no Lagrange dual unless asked
    spec = EnvSpec((2,), np.float32, False, 2)
    default = CQLLoss(Policy(FixedActor(), TwinQCritic(2, 2, [], "relu")), spec, gamma=0.99)
    assert default.n_actions == 10 and default.target_action_gap == 10.0  # the authors' values
    assert default.tau == 0.005  # polyak rate of the target critic, as SAC's

"""SACLoss: hand-computed critic target, gradient routing, temperature, target updates."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rlrun.algos.sac import SACLoss
from rlrun.core.policy import Policy
from rlrun.core.specs import EnvSpec
from rlrun.modules.models import actor_twin_q

SPEC = EnvSpec((3,), np.dtype(np.float32), False, 2)
SPEC1 = EnvSpec((3,), np.dtype(np.float32), False, 1)


class FixedActor(nn.Module):
    """sample(obs): action ``w`` in every dimension, log-prob ``w * obs[:, 0]`` (w = 0.5)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(0.5))

    def sample(self, obs):
        return self.w.expand(obs.shape[0], 1), self.w * obs[:, 0]


class LinearTwinQ(nn.Module):
    """Q_k(s, a) = c_k * (sum(s) + sum(a)) with c = (1, 2)."""

    def __init__(self):
        super().__init__()
        self.c = nn.Parameter(torch.tensor([1.0, 2.0]))

    def forward(self, obs, action):
        return self.c[:, None] * (obs.sum(-1) + action.sum(-1))[None]


def tiny_batch() -> TensorDict:
    return TensorDict({
        "observation": torch.tensor([[1.0, 0.0], [0.0, 2.0], [-1.0, -1.0]]),
        "action": torch.tensor([[0.5], [-1.0], [0.0]]),
        ("next", "observation"): torch.tensor([[2.0, 1.0], [-3.0, 0.0], [1.0, 1.0]]),
        ("next", "reward"): torch.tensor([[1.0], [-2.0], [0.5]]),
        ("next", "terminated"): torch.tensor([[False], [False], [True]]),
    }, batch_size=[3])


def test_critic_target_and_loss_by_hand():
    loss = SACLoss(Policy(FixedActor(), LinearTwinQ()), SPEC1, gamma=0.9, init_alpha=0.2)
    out = loss(tiny_batch())
    gamma, alpha = 0.9, 0.2
    # next rows: sum(s') + a' = 3.5, -2.5, 2.5; min over c in (1, 2); log-prob 0.5 * s'[0]
    targets = []
    for r, s_sum, s0, term in [(1.0, 3.0, 2.0, False), (-2.0, -3.0, -3.0, False), (0.5, 2.0, 1.0, True)]:
        q_next = min(1.0 * (s_sum + 0.5), 2.0 * (s_sum + 0.5))
        targets.append(r if term else r + gamma * (q_next - alpha * 0.5 * s0))
    assert targets[2] == 0.5  # terminated: the reward alone
    q = [[c * x for x in (1.5, 1.0, -2.0)] for c in (1.0, 2.0)]  # sum(s) + a per row
    expected = 0.5 * sum(sum((qk[i] - targets[i]) ** 2 for i in range(3)) / 3 for qk in q)
    assert out["loss_critic"].item() == pytest.approx(expected, rel=1e-6)
    assert out["alpha"].item() == pytest.approx(alpha)
    assert out["q_value"].item() == pytest.approx(sum(map(sum, q)) / 6, rel=1e-6)
    td_err = [max(abs(q[0][i] - targets[i]), abs(q[1][i] - targets[i])) for i in range(3)]
    np.testing.assert_allclose(out["td_error"].numpy(), td_err, rtol=1e-6)
    # actor: alpha * log_prob(s) - min_k Q_k(s, a~), with a~ = 0.5
    new_q = [min(c * (s + 0.5) for c in (1.0, 2.0)) for s in (1.0, 2.0, -2.0)]
    log_prob = [0.5 * s0 for s0 in (1.0, 0.0, -1.0)]
    actor = sum(alpha * lp - nq for lp, nq in zip(log_prob, new_q)) / 3
    assert out["loss_actor"].item() == pytest.approx(actor, rel=1e-6)
    assert out["entropy"].item() == pytest.approx(-sum(log_prob) / 3)
    target_entropy = -1.0
    alpha_loss = -math.log(alpha) * (sum(log_prob) / 3 + target_entropy)
    assert out["loss_alpha"].item() == pytest.approx(alpha_loss, rel=1e-6)


def test_priority_weights_scale_squared_td_errors():
    loss = SACLoss(Policy(FixedActor(), LinearTwinQ()), SPEC1, gamma=0.9, init_alpha=0.2)
    td = tiny_batch()
    plain = loss(td)["loss_critic"]
    td["priority_weight"] = torch.tensor([1.0, 0.0, 0.0])
    only_first = loss(td)["loss_critic"]
    td["priority_weight"] = torch.tensor([0.0, 1.0, 1.0])
    rest = loss(td)["loss_critic"]
    torch.testing.assert_close(only_first + rest, plain)
    assert 0 < only_first < plain


def real_models_and_batch(seed: int = 0):
    torch.manual_seed(seed)
    models = actor_twin_q(SPEC, hidden=[16])
    n = 8
    td = TensorDict({
        "observation": torch.randn(n, 3), "action": torch.rand(n, 2) * 2 - 1,
        ("next", "observation"): torch.randn(n, 3), ("next", "reward"): torch.randn(n, 1),
        ("next", "terminated"): torch.rand(n, 1) < 0.3,
    }, batch_size=[n])
    return models, td


def test_actor_loss_reaches_actor_parameters_not_critic():
    models, td = real_models_and_batch()
    loss = SACLoss(models, SPEC, gamma=0.99)
    out = loss(td)
    out["loss_actor"].backward()
    assert all(p.grad is None for p in models.critic.parameters())
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in models.actor.parameters())
    assert all(p.requires_grad for p in models.critic.parameters())  # still trainable
    assert loss.log_alpha.grad is None  # alpha is detached in the actor loss


def test_critic_gradient_of_the_summed_loss_comes_from_the_td_loss_only():
    models, td = real_models_and_batch()
    loss = SACLoss(models, SPEC, gamma=0.99)
    torch.manual_seed(1)
    out = loss(td)
    sum(v for k, v in out.items() if k.startswith("loss_")).backward()
    total = [p.grad.clone() for p in models.critic.parameters()]
    models.zero_grad()
    torch.manual_seed(1)
    loss(td)["loss_critic"].backward()
    for g, p in zip(total, models.critic.parameters()):
        torch.testing.assert_close(g, p.grad)
    assert all(p.grad is None for p in models.actor.parameters())  # TD loss never reaches the actor


@pytest.mark.parametrize(("target_entropy", "direction"), [(-100.0, -1), (100.0, +1)])
def test_alpha_loss_lowers_log_alpha_when_entropy_is_above_target(target_entropy, direction):
    models, td = real_models_and_batch()
    loss = SACLoss(models, SPEC, gamma=0.99, init_alpha=0.5, target_entropy=target_entropy)
    out = loss(td)
    out["loss_alpha"].backward()
    # d/dlog_alpha of -log_alpha * (log_prob + target_entropy) = entropy - target_entropy
    torch.testing.assert_close(loss.log_alpha.grad, out["entropy"] - target_entropy)
    before = loss.log_alpha.item()
    torch.optim.SGD([loss.log_alpha], lr=1e-3).step()
    assert (loss.log_alpha.item() - before) * direction > 0


def test_fixed_alpha_has_no_parameter_group():
    models, _ = real_models_and_batch()
    fixed = SACLoss(models, SPEC, gamma=0.99, init_alpha=0.1, learn_alpha=False)
    assert set(fixed.param_groups()) == {"actor", "critic"}
    assert fixed.log_alpha.exp().item() == pytest.approx(0.1)
    learned = SACLoss(models, SPEC, gamma=0.99)
    assert set(learned.param_groups()) == {"actor", "critic", "alpha"}
    assert learned.target_entropy == -2.0


def test_update_targets_moves_target_toward_critic_by_tau():
    models, _ = real_models_and_batch()
    loss = SACLoss(models, SPEC, gamma=0.99, tau=0.25)
    with torch.no_grad():
        for p in models.critic.parameters():
            p.add_(torch.randn_like(p))
    before = [p.clone() for p in loss.target_critic.parameters()]
    loss.update_targets()
    for t, t0, c in zip(loss.target_critic.parameters(), before, models.critic.parameters()):
        assert not torch.equal(t0, c)
        torch.testing.assert_close(t, t0 + 0.25 * (c - t0))
        assert not t.requires_grad

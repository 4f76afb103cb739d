"""IQLLoss: every term against a float64 hand computation on fixed linear networks; gradient routing."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rlrun.algos.iql import IQLLoss, dataset_log_prob, expectile_loss
from rlrun.core.errors import ConfigError
from rlrun.core.policy import Policy
from rlrun.core.specs import EnvSpec
from rlrun.modules.networks import Actor, TwinQCritic, ValueCritic

OBS = [[1.0, 0.0], [0.0, 2.0], [-1.0, -1.0], [0.5, 0.5]]
ACT = [[0.5], [-0.9], [0.0], [0.2]]
NEXT = [[2.0, 1.0], [-3.0, 0.0], [1.0, 1.0], [0.0, -1.0]]
REW = [1.0, -2.0, 0.5, 0.25]
TERM = [False, False, True, False]
TRUNC = [False, False, False, True]  # truncated, not terminated: must still bootstrap

# online Q_k(s, a) = QW[k] . (s, a) + QB[k]; the target keeps TQW/TQB (set before the online change)
TQW, TQB = [[0.5, -1.0, 2.0], [1.0, 0.5, -1.0]], [0.1, -0.2]
QW, QB = [[0.3, 0.2, 1.0], [-0.4, 0.7, 0.5]], [0.0, 0.3]
VW, VB = [0.6, -0.3], -0.5
# actor mean = AW . s + AB (then tanh for tanh_normal); log std column for tanh_normal
AW, AB, LOG_STD = [0.4, -0.2], 0.1, -0.5


def batch() -> TensorDict:
    return TensorDict({
        "observation": torch.tensor(OBS), "action": torch.tensor(ACT),
        ("next", "observation"): torch.tensor(NEXT), ("next", "reward"): torch.tensor(REW)[:, None],
        ("next", "terminated"): torch.tensor(TERM)[:, None],
        ("next", "truncated"): torch.tensor(TRUNC)[:, None],
    }, batch_size=[4])


def set_q(critic: TwinQCritic, w, b) -> None:
    with torch.no_grad():
        critic.weights[0].copy_(torch.tensor(w)[:, :, None])
        critic.biases[0].copy_(torch.tensor(b)[:, None, None])


def build(head: str, **kw) -> IQLLoss:
    out = 2 if head == "tanh_normal" else 1
    net = nn.Linear(2, out)
    with torch.no_grad():
        net.weight.zero_(), net.bias.zero_()
        net.weight[0] = torch.tensor(AW)
        net.bias[0] = AB
        if head == "tanh_normal":
            net.bias[1] = LOG_STD  # state-independent through a zero weight row
    actor = Actor(net, head, 1)
    if head == "normal":
        with torch.no_grad():
            actor.log_std.fill_(LOG_STD)
    critic = TwinQCritic(2, 1, [], "relu")
    set_q(critic, TQW, TQB)
    vnet = nn.Linear(2, 1)
    with torch.no_grad():
        vnet.weight.copy_(torch.tensor([VW])), vnet.bias.fill_(VB)
    kw.setdefault("gamma", 0.99)
    loss = IQLLoss(Policy(actor, critic), EnvSpec((2,), np.float32, False, 1), **kw)
    loss.value = ValueCritic(vnet)  # fixed weights in place of the loss's own MLP
    set_q(critic, QW, QB)  # online now differs from the target copy
    return loss


def lin(w, x, b):
    return sum(wi * xi for wi, xi in zip(w, x)) + b


def gauss_logp(x, mu, log_std):
    return -0.5 * ((x - mu) / math.exp(log_std)) ** 2 - log_std - 0.5 * math.log(2 * math.pi)


def by_hand(head: str, gamma: float, tau_e: float, beta: float) -> dict[str, float]:
    """Every term and diagnostic of IQLLoss on ``batch()``, in float64 scalars."""
    lv = lc = la = q_mean = v_mean = adv_mean = 0.0
    td_error = []
    for s, a, s2, r, term in zip(OBS, ACT, NEXT, REW, TERM):
        sa = s + a
        q_t = min(lin(TQW[0], sa, TQB[0]), lin(TQW[1], sa, TQB[1]))
        v = lin(VW, s, VB)
        u = q_t - v
        lv += (tau_e if u >= 0 else 1 - tau_e) * u * u / 4
        y = r + (0.0 if term else gamma * lin(VW, s2, VB))
        q = [lin(QW[k], sa, QB[k]) for k in range(2)]
        lc += sum((qk - y) ** 2 for qk in q) / 4
        td_error.append(max(abs(qk - y) for qk in q))
        q_mean += sum(q) / 8
        v_mean += v / 4
        adv_mean += u / 4
        mu = lin(AW, s, AB)
        if head == "normal":
            logp = gauss_logp(a[0], mu, LOG_STD)
        elif head == "tanh_normal":  # a = tanh(x), x ~ N(mu, std): density of a is N(atanh a) / (1 - a^2)
            logp = gauss_logp(math.atanh(a[0]), mu, LOG_STD) - math.log(1 - a[0] ** 2)
        else:  # deterministic: weighted squared distance of tanh(mean) to the dataset action
            logp = -(math.tanh(mu) - a[0]) ** 2
        la += -min(math.exp(beta * u), 100.0) * logp / 4
    return {"loss_value": lv, "loss_critic": lc, "loss_actor": la, "q_value": q_mean, "value": v_mean,
            "advantage": adv_mean, "td_error": td_error}


@pytest.mark.parametrize("head", ["normal", "tanh_normal", "deterministic"])
def test_iql_terms_by_hand(head):
    out = build(head, gamma=0.9, expectile=0.7, beta=3.0)(batch())
    expected = by_hand(head, 0.9, 0.7, 3.0)
    assert out["loss_value"].item() == pytest.approx(expected["loss_value"], rel=1e-5)
    assert out["loss_critic"].item() == pytest.approx(expected["loss_critic"], rel=1e-5)
    assert out["loss_actor"].item() == pytest.approx(expected["loss_actor"], rel=1e-4)


def test_defaults_are_the_papers_mujoco_settings():
    # gamma 0.99, expectile 0.7, beta 3 (Kostrikov et al. 2022, MuJoCo), polyak rate 0.005
    loss = build("normal")
    out, expected = loss(batch()), by_hand("normal", 0.99, 0.7, 3.0)
    for term in ("loss_value", "loss_critic", "loss_actor"):
        assert out[term].item() == pytest.approx(expected[term], rel=1e-4), term
    loss.update_targets()
    w = loss.target_critic.weights[0][:, 0, 0]
    torch.testing.assert_close(w, torch.tensor([0.995 * TQW[0][0] + 0.005 * QW[0][0],
                                                0.995 * TQW[1][0] + 0.005 * QW[1][0]]))


def test_logged_diagnostics_by_hand():
    out = build("normal", gamma=0.9)(batch())
    expected = by_hand("normal", 0.9, 0.7, 3.0)
    for key in ("q_value", "value", "advantage"):
        assert out[key].item() == pytest.approx(expected[key], rel=1e-5, abs=1e-6), key
    # the per-sample priority: the larger of the twins' absolute TD errors
    assert out["td_error"].tolist() == pytest.approx(expected["td_error"], rel=1e-5)


@pytest.mark.parametrize("expectile", [0.0, 1.0, 1.5, -0.1])
def test_expectile_must_lie_strictly_between_0_and_1(expectile):
    with pytest.raises(ConfigError, match="expectile"):
        build("normal", expectile=expectile)


@pytest.mark.parametrize("edge", [1.0, -1.0])
def test_dataset_actions_on_the_bounds_have_a_finite_log_prob(edge):
    # datasets hold actions clipped to exactly +-1: atanh would be infinite; they are read 1e-6 inside
    loss = build("tanh_normal")
    obs = torch.tensor([[1.0, 0.0]])
    logp = dataset_log_prob(loss.actor, obs, torch.tensor([[edge]]))
    a = edge * float(torch.tensor(1 - 1e-6))  # 1 - 1e-6 as float32 holds it
    expected = gauss_logp(math.atanh(a), lin(AW, [1.0, 0.0], AB), LOG_STD) - math.log(1 - a * a)
    assert torch.isfinite(logp).all()
    assert logp.item() == pytest.approx(expected, rel=1e-3)


def test_advantage_weight_is_clipped_at_100():
    loss = build("normal", beta=50.0)
    out = loss(batch())
    weights = [min(math.exp(50.0 * (min(lin(TQW[0], s + a, TQB[0]), lin(TQW[1], s + a, TQB[1]))
                                    - lin(VW, s, VB))), 100.0) for s, a in zip(OBS, ACT)]
    assert 100.0 in weights and min(weights) < 100.0  # the batch exercises both sides of the clip
    assert out["awr_weight"].item() == pytest.approx(sum(weights) / 4, rel=1e-5)


def test_expectile_loss_is_asymmetric():
    d = torch.tensor([2.0, -2.0])
    assert expectile_loss(d, 0.8).tolist() == pytest.approx([0.8 * 4, 0.2 * 4])


def test_each_loss_reaches_only_its_network():
    loss = build("tanh_normal")
    out = loss(batch())
    groups = loss.param_groups()
    for term, owner in [("loss_value", "value"), ("loss_critic", "critic"), ("loss_actor", "actor")]:
        for name, params in groups.items():
            grads = torch.autograd.grad(out[term], params, retain_graph=True, allow_unused=True)
            touched = any(g is not None and g.abs().sum() > 0 for g in grads)
            assert touched == (name == owner), (term, name)
    assert all(not p.requires_grad for p in loss.target_critic.parameters())


def test_update_targets_moves_target_toward_online():
    loss = build("normal", tau=0.25)
    loss.update_targets()
    w = loss.target_critic.weights[0][:, :, 0]
    expected = [[0.75 * t + 0.25 * o for t, o in zip(tr, orow)] for tr, orow in zip(TQW, QW)]
    assert torch.allclose(w, torch.tensor(expected))


def test_the_value_network_is_an_mlp_of_the_observation_with_the_policys_normaliser():
    from rlrun.modules.networks import ObservationNormalizer

    norm = ObservationNormalizer((3,))
    policy = Policy(Actor(nn.Linear(3, 1), "normal", 1), TwinQCritic(3, 1, [], "relu"), norm)
    spec = EnvSpec((3,), np.float32, False, 1)
    loss = IQLLoss(policy, spec, gamma=0.99, value_hidden=[5], activation="relu")  # mlp defaults to tanh
    linears = [m for m in loss.value.net.modules() if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(3, 5), (5, 1)]  # V(s): one number
    assert any(isinstance(m, nn.ReLU) for m in loss.value.net.modules())
    assert loss.value.normalizer is norm  # V sees the observations the actor and critic see
    assert loss.value(torch.zeros(4, 3)).shape == (4,)

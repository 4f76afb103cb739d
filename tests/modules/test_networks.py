"""Networks: observation normaliser, actor heads, twin Q critic, target copies, polyak update."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn
from torch.distributions import Independent, Normal, TanhTransform, TransformedDistribution

from rlrun.modules.networks import (
    Actor,
    ObservationNormalizer,
    TwinQCritic,
    ValueCritic,
    mlp,
    polyak_update,
    target_copy,
)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# --- ObservationNormalizer ------------------------------------------------------------------


def test_normalizer_running_stats_equal_numpy_over_batches():
    rng = np.random.default_rng(0)
    batches = [rng.normal(3.0, 2.0, (10, 4)), rng.normal(-1.0, 0.5, (5, 2, 4)), rng.normal(7.0, 4.0, (7, 4))]
    norm = ObservationNormalizer((4,))
    for b in batches:
        norm.update(torch.as_tensor(b, dtype=torch.float32))
    data = np.concatenate([b.reshape(-1, 4) for b in batches])
    np.testing.assert_allclose(norm.mean.numpy(), data.mean(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(norm.var.numpy(), data.var(0), rtol=1e-5, atol=1e-5)
    assert norm.count.item() == pytest.approx(len(data))
    x = rng.normal(2.0, 3.0, (6, 4))
    expected = (x - data.mean(0)) / np.sqrt(data.var(0) + 1e-8)
    out = norm(torch.as_tensor(x, dtype=torch.float32))
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_normalizer_clips_and_keeps_stats_in_state_dict():
    norm = ObservationNormalizer((2,), clip=5.0)
    norm.update(torch.tensor([[0.0, 1.0], [2.0, 3.0]]))
    out = norm(torch.tensor([[1e6, -1e6]]))
    assert torch.equal(out, torch.tensor([[5.0, -5.0]]))
    other = ObservationNormalizer((2,), clip=5.0)
    other.load_state_dict(norm.state_dict())
    assert torch.equal(other.mean, torch.tensor([1.0, 2.0])) and torch.equal(other.var, norm.var)


# --- Actor heads ------------------------------------------------------------------------------


def test_categorical_act_is_argmax_and_dist_uses_logits():
    actor = Actor(nn.Linear(3, 4), "categorical", 4)
    obs = torch.randn(16, 3)
    logits = actor.net(obs)
    assert torch.equal(actor.act(obs), logits.argmax(-1))
    torch.testing.assert_close(actor.dist(obs).probs, logits.softmax(-1))
    out = actor.explore(obs)
    assert out["action"].shape == (16,)
    expected = logits.log_softmax(-1).gather(-1, out["action"][:, None])[:, 0]
    torch.testing.assert_close(out["sample_log_prob"], expected)


def test_normal_head_log_std_is_state_independent():
    actor = Actor(nn.Linear(3, 2), "normal", 2, init_log_std=-0.5)
    assert isinstance(actor.log_std, nn.Parameter) and actor.log_std.shape == (2,)
    obs = torch.randn(8, 3) * 10
    d = actor.dist(obs)
    expected_std = torch.full((8, 2), math.exp(-0.5))
    torch.testing.assert_close(d.base_dist.scale, expected_std)
    torch.testing.assert_close(d.base_dist.loc, actor.net(obs))
    assert torch.equal(actor.act(obs), actor.net(obs))
    with torch.no_grad():
        actor.log_std.copy_(torch.tensor([0.0, 1.0]))
    torch.testing.assert_close(actor.dist(obs).base_dist.scale[:, 1], torch.full((8,), math.e))
    action, log_prob = actor.sample(obs)
    torch.testing.assert_close(log_prob, actor.dist(obs).log_prob(action))


def test_tanh_normal_sample_log_prob_matches_change_of_variables():
    actor = Actor(nn.Linear(3, 4), "tanh_normal", 2)
    obs = torch.randn(64, 3)
    torch.manual_seed(1)
    action, log_prob = actor.sample(obs)
    torch.manual_seed(1)
    d = actor.dist(obs)
    u = d.rsample()  # the same pre-tanh sample
    torch.testing.assert_close(action, torch.tanh(u))
    base = Normal(d.base_dist.loc, d.base_dist.scale)
    tanh = TanhTransform(cache_size=1)
    ref = Independent(TransformedDistribution(base, [tanh]), 1)
    ref_action = tanh(u)  # caches u, so log_prob inverts exactly
    torch.testing.assert_close(log_prob, ref.log_prob(ref_action), atol=1e-4, rtol=1e-4)
    # the same density by hand, in float64: log N(u) - sum log(1 - tanh(u)^2)
    manual = (base.log_prob(u).double() - torch.log1p(-torch.tanh(u.double()).pow(2))).sum(-1)
    torch.testing.assert_close(log_prob.double(), manual, atol=1e-4, rtol=1e-4)
    assert (action.abs() < 1).all()
    assert action.requires_grad  # reparameterised


def _sample_via_distributions(actor: Actor, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``Actor.sample`` as it was written before #27: through torch.distributions objects."""
    d = actor.dist(obs)
    u = d.rsample()
    action = torch.tanh(u)
    correction = (2 * (math.log(2) - u - nn.functional.softplus(-2 * u))).sum(-1)
    return action, d.log_prob(u) - correction


def test_tanh_normal_sample_is_bit_identical_to_the_distribution_objects():
    """The closed form (no Normal/Independent per call) gives the same bits, gradients included."""
    results = []
    for sample in (Actor.sample, _sample_via_distributions):
        torch.manual_seed(0)
        actor = Actor(mlp(5, [32, 32], 12, "relu"), "tanh_normal", 6)
        obs = torch.randn(256, 5)
        torch.manual_seed(1)
        action, log_prob = sample(actor, obs)
        # a loss that reads both, as SAC's actor loss does
        (0.2 * log_prob - action.sum(-1)).mean().backward()
        results.append([action, log_prob] + [p.grad for p in actor.parameters()])
    for ours, theirs in zip(*results, strict=True):
        assert torch.equal(ours, theirs)


def test_relu_runs_in_place_with_the_same_values_and_gradients():
    torch.manual_seed(0)
    net = mlp(4, [16, 16], 3, "relu")
    assert all(m.inplace for m in net if isinstance(m, nn.ReLU))
    ref = nn.Sequential(*[nn.ReLU() if isinstance(m, nn.ReLU) else m for m in net])
    x = torch.randn(9, 4)
    outs = []
    for model in (net, ref):
        model.zero_grad()
        out = model(x)
        out.square().sum().backward()
        outs.append([out.detach()] + [p.grad.clone() for p in model.parameters()])
    for a, b in zip(*outs, strict=True):
        assert torch.equal(a, b)


def test_tanh_normal_actions_stay_inside_open_interval_for_large_means():
    net = nn.Linear(3, 2)
    with torch.no_grad():
        net.weight.fill_(0.0)
        net.bias.copy_(torch.tensor([3.0, -2.0]))
    actor = Actor(net, "tanh_normal", 1)
    action, log_prob = actor.sample(torch.randn(500, 3))
    assert (action.abs() < 1).all() and torch.isfinite(log_prob).all()
    torch.testing.assert_close(actor.act(torch.zeros(1, 3)), torch.tanh(torch.tensor([[3.0]])))
    assert "sample_log_prob" not in actor.explore(torch.zeros(1, 3))


def test_tanh_normal_log_std_is_clamped():
    net = nn.Linear(1, 2)
    with torch.no_grad():
        net.weight.fill_(0.0)
        net.bias.copy_(torch.tensor([0.0, 50.0]))
    actor = Actor(net, "tanh_normal", 1, min_log_std=-5.0, max_log_std=2.0)
    torch.testing.assert_close(actor.dist(torch.zeros(1, 1)).base_dist.scale, torch.tensor([[math.exp(2.0)]]))


def test_deterministic_head_is_bounded_tanh_and_has_no_distribution():
    net = nn.Linear(3, 2)
    actor = Actor(net, "deterministic", 2)
    obs = torch.randn(32, 3) * 100
    action = actor.act(obs)
    assert (action.abs() <= 1).all() and action.abs().max() > 0.99
    torch.testing.assert_close(action, torch.tanh(net(obs)))
    torch.testing.assert_close(actor.explore(obs)["action"], action)
    with pytest.raises(TypeError):
        actor.dist(obs)


def test_unknown_head_raises():
    with pytest.raises(ValueError, match="head"):
        Actor(nn.Linear(1, 1), "beta", 1)


def test_actor_applies_the_normalizer_first():
    norm = ObservationNormalizer((3,))
    norm.update(torch.randn(50, 3) * 4 + 2)
    actor = Actor(nn.Linear(3, 2), "deterministic", 2, norm)
    obs = torch.randn(5, 3)
    torch.testing.assert_close(actor.act(obs), torch.tanh(actor.net(norm(obs))))


# --- Critics ----------------------------------------------------------------------------------


def test_twin_q_output_shape_and_equals_each_stacked_net_alone():
    critic = TwinQCritic(obs_dim=3, action_dim=2, hidden=[8, 5], activation="relu")
    obs, act = torch.randn(7, 3), torch.randn(7, 2)
    q = critic(obs, act)
    assert q.shape == (2, 7)
    for k in range(2):
        layers = []
        for i, (w, b) in enumerate(zip(critic.weights, critic.biases)):
            lin = nn.Linear(w.shape[1], w.shape[2])
            with torch.no_grad():
                lin.weight.copy_(w[k].T)
                lin.bias.copy_(b[k, 0])
            layers += [lin] + ([nn.ReLU()] if i < len(critic.weights) - 1 else [])
        torch.testing.assert_close(q[k], nn.Sequential(*layers)(torch.cat([obs, act], -1)).squeeze(-1))
    # ReLU runs in place on baddbmm's output: gradients still reach every weight
    q.sum().backward()
    assert all(w.grad is not None and w.grad.abs().sum() > 0 for w in critic.weights)
    assert not torch.allclose(q[0], q[1])  # two independently initialised networks
    assert critic(torch.randn(4, 6, 3), torch.randn(4, 6, 2)).shape == (2, 4, 6)


def test_twin_q_normalizes_observations_only():
    norm = ObservationNormalizer((3,))
    norm.update(torch.randn(50, 3) * 3 + 1)
    with_norm = TwinQCritic(3, 2, [4], normalizer=norm)
    plain = TwinQCritic(3, 2, [4])
    plain.load_state_dict(with_norm.state_dict(), strict=False)
    obs, act = torch.randn(5, 3), torch.randn(5, 2)
    torch.testing.assert_close(with_norm(obs, act), plain(norm(obs), act))


def test_value_critic_returns_one_value_per_observation():
    critic = ValueCritic(mlp(3, [8], 1))
    assert critic(torch.randn(4, 5, 3)).shape == (4, 5)


def test_mlp_orthogonal_init_zeroes_biases_and_sets_gain():
    net = mlp(4, [16], 3, out_gain=0.01, orthogonal=True)
    assert all(torch.equal(m.bias, torch.zeros_like(m.bias)) for m in net if isinstance(m, nn.Linear))
    w = net[0].weight  # 16 x 4, orthogonal columns scaled by sqrt(2)
    torch.testing.assert_close(w.T @ w, 2.0 * torch.eye(4), atol=1e-5, rtol=1e-5)
    assert net[-1].weight.abs().max() < 0.02


# --- target copies and polyak ------------------------------------------------------------------


class Agent(nn.Module):
    def __init__(self):
        super().__init__()
        self.normalizer = ObservationNormalizer((3,))
        self.critic = TwinQCritic(3, 1, [4], normalizer=self.normalizer)


def test_target_copy_shares_normalizer_and_freezes_copied_parameters():
    agent = Agent()
    target = target_copy(agent)
    assert target.normalizer is agent.normalizer
    assert target.critic.normalizer is agent.normalizer
    for p, tp in zip(agent.parameters(), target.parameters()):
        assert p is not tp and torch.equal(p, tp)
        assert p.requires_grad and not tp.requires_grad
    with torch.no_grad():
        next(agent.parameters()).add_(1.0)
    assert not torch.equal(next(agent.parameters()), next(target.parameters()))
    agent.normalizer.update(torch.randn(20, 3) + 5)
    assert torch.equal(target.normalizer.mean, agent.normalizer.mean)


def test_polyak_update_equals_formula():
    source, target = Agent(), Agent()
    before_t = [p.detach().clone() for p in target.parameters()]
    before_s = [p.detach().clone() for p in source.parameters()]
    polyak_update(target, source, tau=0.3)
    for p, t0, s0 in zip(target.parameters(), before_t, before_s):
        torch.testing.assert_close(p, 0.7 * t0 + 0.3 * s0)
    for p, s0 in zip(source.parameters(), before_s):
        assert torch.equal(p, s0)

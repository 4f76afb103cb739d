"""Group networks: parameter sharing, centralised vs decentralised inputs, VDN and QMIX mixers."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from rlrun.modules.multiagent import GroupActor, GroupMLP, QMixer, VDNMixer

N, F, OUT, HIDDEN = 3, 5, 2, [7, 6]


def reference(net: GroupMLP, x: torch.Tensor) -> torch.Tensor:
    """The group MLP written as a loop over agents and layers with plain matmuls."""
    outs = []
    for i in range(net.n_agents):
        k = 0 if net.share_params else i
        h = x.flatten(-2) if net.centralised else x[..., i, :]
        for layer, (w, b) in enumerate(zip(net.weights, net.biases)):
            h = h @ w[k] + b[k, 0]
            if layer < len(net.weights) - 1:
                h = torch.tanh(h)
        outs.append(h)
    return torch.stack(outs, dim=-2)


@pytest.mark.parametrize("share", [True, False])
@pytest.mark.parametrize("central", [True, False])
def test_group_mlp_matches_a_loop_over_agents(share, central):
    torch.manual_seed(0)
    net = GroupMLP(N, F, OUT, HIDDEN, share_params=share, centralised=central)
    x = torch.randn(4, 2, N, F)
    out = net(x)
    assert out.shape == (4, 2, N, OUT)
    torch.testing.assert_close(out, reference(net, x))


def _mlp_params(in_dim: int) -> int:
    dims = [in_dim, *HIDDEN, OUT]
    return sum(a * b + b for a, b in zip(dims[:-1], dims[1:]))


@pytest.mark.parametrize("central", [True, False])
def test_shared_params_are_one_set_and_unshared_are_one_per_agent(central):
    in_dim = N * F if central else F
    shared = GroupMLP(N, F, OUT, HIDDEN, share_params=True, centralised=central)
    separate = GroupMLP(N, F, OUT, HIDDEN, share_params=False, centralised=central)
    assert sum(p.numel() for p in shared.parameters()) == _mlp_params(in_dim)
    assert sum(p.numel() for p in separate.parameters()) == N * _mlp_params(in_dim)
    assert all(w.shape[0] == 1 for w in shared.weights)
    assert all(w.shape[0] == N for w in separate.weights)
    # separate agents start from different draws and learn separately
    assert not torch.equal(separate.weights[0][0], separate.weights[0][1])
    separate(torch.randn(8, N, F))[..., 1, :].sum().backward()
    grads = separate.weights[0].grad
    assert grads[1].abs().sum() > 0 and grads[0].abs().sum() == 0 and grads[2].abs().sum() == 0


@pytest.mark.parametrize("share", [True, False])
def test_a_centralised_net_sees_other_agents_and_a_decentralised_one_does_not(share):
    torch.manual_seed(0)
    central = GroupMLP(N, F, 1, HIDDEN, share_params=share, centralised=True)
    local = GroupMLP(N, F, 1, HIDDEN, share_params=share, centralised=False)
    x = torch.randn(16, N, F)
    moved = x.clone()
    moved[:, 2] += 1.0  # only agent 2's observation changes
    for i in (0, 1):
        assert not torch.allclose(central(x)[:, i], central(moved)[:, i])
        torch.testing.assert_close(local(x)[:, i], local(moved)[:, i], rtol=0, atol=0)
    assert not torch.allclose(local(x)[:, 2], local(moved)[:, 2])


def test_shared_centralised_output_is_the_same_for_every_agent():
    out = GroupMLP(N, F, 1, HIDDEN, share_params=True, centralised=True)(torch.randn(9, N, F))
    torch.testing.assert_close(out[:, 0], out[:, 1], rtol=0, atol=0)
    torch.testing.assert_close(out[:, 0], out[:, 2], rtol=0, atol=0)


class CentralisedQ(nn.Module):
    """A centralised critic ``Q_i(o_1..o_n, a_1..a_n)`` per agent, as MADDPG's is built."""

    def __init__(self, n_agents: int, obs_dim: int, action_dim: int, hidden: list[int]):
        super().__init__()
        self.net = GroupMLP(n_agents, obs_dim + action_dim, 1, hidden, "relu", False, centralised=True)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([obs.float(), action], -1)).squeeze(-1)


def test_maddpg_q_sees_every_agents_observation_and_action():
    torch.manual_seed(0)
    q = CentralisedQ(N, F, 2, [16, 16])
    obs, act = torch.randn(10, N, F), torch.rand(10, N, 2) * 2 - 1
    assert q(obs, act).shape == (10, N)
    moved_act = act.clone()
    moved_act[:, 0] = -moved_act[:, 0]
    moved_obs = obs.clone()
    moved_obs[:, 0] += 1.0
    base = q(obs, act)
    for other in (q(obs, moved_act), q(moved_obs, act)):
        assert not torch.allclose(base[:, 1], other[:, 1])
        assert not torch.allclose(base[:, 2], other[:, 2])
    # no sharing: each agent's Q has its own weights
    assert q.net.weights[0].shape == (N, N * (F + 2), 16)


def test_vdn_is_the_sum_of_agent_values():
    q = torch.tensor([[1.0, -2.0, 0.5], [3.0, 3.0, 3.0]])
    torch.testing.assert_close(VDNMixer()(q, None), torch.tensor([-0.5, 9.0]))


def test_qmix_matches_the_two_layer_mixing_written_out():
    torch.manual_seed(0)
    mixer = QMixer(N, state_dim=4, embed_dim=6, hypernet_hidden=8)
    q, s = torch.randn(5, N), torch.randn(5, 4)

    def hyper(seq, x):  # Linear, ReLU, Linear by hand
        return torch.relu(x @ seq[0].weight.T + seq[0].bias) @ seq[2].weight.T + seq[2].bias

    expected = []
    for b in range(5):
        w1 = hyper(mixer.hyper_w1, s[b]).abs().reshape(N, 6)
        b1 = s[b] @ mixer.hyper_b1.weight.T + mixer.hyper_b1.bias
        hidden = torch.nn.functional.elu(sum(q[b, i] * w1[i] for i in range(N)) + b1)
        w2 = hyper(mixer.hyper_w2, s[b]).abs()
        expected.append((hidden * w2).sum() + hyper(mixer.hyper_v, s[b])[0])
    torch.testing.assert_close(mixer(q, s), torch.stack(expected))


def test_qmix_weights_are_non_negative_and_q_tot_is_monotonic_in_each_agent():
    torch.manual_seed(1)
    mixer = QMixer(N, state_dim=12)
    state = torch.randn(4096, 12) * 3
    w1, w2 = mixer.mixing_weights(state)
    assert (w1 >= 0).all() and (w2 >= 0).all()
    # the raw hypernetwork outputs do take both signs: the abs is what makes them non-negative
    assert (mixer.hyper_w1(state) < 0).any()
    q = (torch.randn(4096, N) * 5).requires_grad_()
    (grad,) = torch.autograd.grad(mixer(q, state).sum(), q)
    assert (grad >= 0).all()
    assert (grad > 0).float().mean() > 0.5  # not trivially zero


def test_qmix_and_vdn_keep_leading_batch_dims():
    q, s = torch.randn(7, 4, N), torch.randn(7, 4, 10)
    assert QMixer(N, 10)(q, s).shape == (7, 4)
    assert VDNMixer()(q).shape == (7, 4)


def test_group_actor_samples_per_agent_and_scores_them_with_its_own_distribution():
    torch.manual_seed(0)
    normal = GroupActor(GroupMLP(N, F, 2, HIDDEN, share_params=False), "normal", 2, init_log_std=-1.0)
    obs = torch.randn(6, N, F)
    out = normal.explore(obs)
    assert out["action"].shape == (6, N, 2) and out["sample_log_prob"].shape == (6, N)
    mean, std = normal.net(obs), math.exp(-1.0)
    half_log_2pi = 0.5 * math.log(2 * math.pi)
    by_hand = (-(out["action"] - mean) ** 2 / (2 * std ** 2) - math.log(std) - half_log_2pi).sum(-1)
    torch.testing.assert_close(out["sample_log_prob"], by_hand)
    torch.testing.assert_close(normal.act(obs), mean)

    categorical = GroupActor(GroupMLP(N, F, 5, HIDDEN), "categorical", 5)
    out = categorical.explore(obs)
    assert out["action"].shape == (6, N) and out["action"].dtype == torch.long
    logits = categorical.net(obs)
    torch.testing.assert_close(out["sample_log_prob"],
                               logits.log_softmax(-1).gather(-1, out["action"][..., None]).squeeze(-1))
    torch.testing.assert_close(categorical.act(obs), logits.argmax(-1))

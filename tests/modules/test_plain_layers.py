"""The collector's per-step acting without ``nn.Module`` dispatch or distribution objects (issue
#27): ``run_layers`` and the categorical ``explore`` give the bits the usual calls give, and hooks
still run where one is registered."""

from __future__ import annotations

import torch
from torch import nn
from torch.distributions import Categorical

from rlrun.modules.networks import Actor, ValueCritic, mlp, plain_layers, run_layers


def test_plain_layers_are_found_only_in_mlps():
    net = mlp(4, [8, 8], 2, "relu")
    assert plain_layers(net) == (net, *net)
    assert plain_layers(nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4))) is None
    assert plain_layers(nn.Linear(4, 4)) is None


def test_run_layers_equals_the_module_call_with_gradients():
    torch.manual_seed(0)
    for activation in ("tanh", "relu", "elu", "silu"):
        net = mlp(4, [16, 16], 3, activation)
        x = torch.randn(32, 4)
        ours, theirs = run_layers(net, plain_layers(net), x), net(x)
        assert torch.equal(ours, theirs)
        g1 = torch.autograd.grad(ours.sum(), list(net.parameters()))
        g2 = torch.autograd.grad(theirs.sum(), list(net.parameters()))
        assert all(torch.equal(a, b) for a, b in zip(g1, g2))


def test_hooks_still_run():
    net = mlp(4, [8], 2)
    seen = []
    handle = net[0].register_forward_hook(lambda m, i, o: seen.append(o.shape))
    run_layers(net, plain_layers(net), torch.zeros(3, 4))
    assert seen == [torch.Size([3, 8])]
    handle.remove()
    handle = nn.modules.module.register_module_forward_hook(lambda m, i, o: seen.append(type(m)))
    try:
        run_layers(net, plain_layers(net), torch.zeros(3, 4))
    finally:
        handle.remove()
    assert nn.Linear in seen


def test_a_replaced_net_is_called_as_it_is_now():
    actor = Actor(mlp(4, [8], 2), "categorical", 2)
    actor.net = mlp(4, [8], 2)
    assert torch.equal(actor.features(torch.ones(2, 4)), actor.net(torch.ones(2, 4)))
    critic = ValueCritic(mlp(4, [8], 1))
    assert critic._layers is not None
    assert torch.equal(critic(torch.ones(2, 4)), critic.net(torch.ones(2, 4)).squeeze(-1))


def test_categorical_explore_equals_the_distribution_bit_for_bit():
    torch.manual_seed(0)
    actor = Actor(mlp(4, [16], 3), "categorical", 3)
    obs = torch.randn(8, 4) * 3
    torch.manual_seed(5)
    ours, after_ours = actor.explore(obs), torch.rand(3)
    torch.manual_seed(5)
    d = Categorical(logits=actor.net(obs), validate_args=False)
    action, after_theirs = d.sample(), torch.rand(3)
    assert torch.equal(ours["action"], action) and ours["action"].dtype == action.dtype
    assert torch.equal(ours["sample_log_prob"], d.log_prob(action))
    assert torch.equal(after_ours, after_theirs)  # the same draws from the global generator

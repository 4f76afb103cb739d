"""The batched twin-Q ensemble computes what two separate Q networks compute.

``TwinQCritic`` runs both critics with one ``baddbmm`` per layer on stacked weights.
Here the same SAC and TD3 updates run once with it and once with two plain
``nn.Sequential`` critics (``addmm`` per layer) holding the same initial weights,
on the same batches and RNG draws: after 100 updates the weights agree to float
tolerance (the two differ only in matmul rounding).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rlrun.algos.sac import SACLoss
from rlrun.algos.td3 import TD3Loss
from rlrun.core.policy import Policy
from rlrun.envs.gym import EnvSpec
from rlrun.modules.models import actor_twin_q
from rlrun.modules.networks import TwinQCritic
from rlrun.trainer.optim import OptimizerStep

SPEC = EnvSpec((5,), np.dtype(np.float32), False, 2)


class TwoQ(nn.Module):
    """The unbatched reference: two MLPs, stacked outputs ``[2, batch]``."""

    def __init__(self, ensemble: TwinQCritic):
        super().__init__()
        self.nets = nn.ModuleList()
        for k in range(ensemble.weights[0].shape[0]):
            layers: list[nn.Module] = []
            for i, (w, b) in enumerate(zip(ensemble.weights, ensemble.biases)):
                lin = nn.Linear(w.shape[1], w.shape[2])
                with torch.no_grad():
                    lin.weight.copy_(w[k].T)
                    lin.bias.copy_(b[k, 0])
                layers += [lin] + ([nn.ReLU()] if i < len(ensemble.weights) - 1 else [])
            self.nets.append(nn.Sequential(*layers))

    def forward(self, obs, action):
        x = torch.cat([obs.float(), action], -1)
        return torch.stack([net(x).squeeze(-1) for net in self.nets])


def _batches(n=16, batch=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [TensorDict({
        "observation": torch.randn(batch, 5, generator=g),
        "action": torch.rand(batch, 2, generator=g) * 2 - 1,
        "next": {"observation": torch.randn(batch, 5, generator=g),
                 "reward": torch.randn(batch, 1, generator=g),
                 "terminated": torch.rand(batch, 1, generator=g) < 0.1}}, [batch]) for _ in range(n)]


def _train(make_loss, critic_of, head, updates=100):
    torch.manual_seed(0)
    policy = actor_twin_q(SPEC, hidden=[32, 32], head=head)
    ensemble = policy.critic
    if critic_of is not None:
        policy = Policy(policy.actor, critic_of(ensemble), None)
    loss = make_loss(policy)
    optim = OptimizerStep(loss.param_groups(), "adam", lr=1e-3)
    torch.manual_seed(1)  # the actor's sampling and TD3's target noise draw the same numbers
    batches = _batches()
    for i in range(updates):
        optim.step(loss(batches[i % len(batches)]))
        loss.update_targets()
    return policy, loss


def _stacked(critic):
    """The critic's weights in the ensemble's layout (``[num_q, in, out]`` per layer)."""
    if isinstance(critic, TwinQCritic):
        return [w.detach() for w in critic.weights]
    linears = [[m for m in net if isinstance(m, nn.Linear)] for net in critic.nets]
    return [torch.stack([lins[i].weight.detach().T for lins in linears]) for i in range(len(linears[0]))]


@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_ensemble_equals_two_critics_over_100_updates(algo):
    if algo == "sac":
        make, head = (lambda p: SACLoss(p, SPEC, gamma=0.99)), "tanh_normal"
    else:
        make, head = (lambda p: TD3Loss(p, gamma=0.99)), "deterministic"
    batched, loss_b = _train(make, None, head)
    separate, loss_s = _train(make, TwoQ, head)
    for wb, ws in zip(_stacked(batched.critic), _stacked(separate.critic)):
        torch.testing.assert_close(wb, ws, rtol=1e-4, atol=1e-5)
    for wb, ws in zip(_stacked(loss_b.target_critic), _stacked(loss_s.target_critic)):
        torch.testing.assert_close(wb, ws, rtol=1e-4, atol=1e-5)
    for pb, ps in zip(batched.actor.parameters(), separate.actor.parameters()):
        torch.testing.assert_close(pb, ps, rtol=1e-4, atol=1e-5)
    torch.manual_seed(0)
    init = actor_twin_q(SPEC, hidden=[32, 32], head=head).critic
    travelled = max((w - w0).abs().max().item() for w, w0 in zip(_stacked(batched.critic), _stacked(init)))
    assert travelled > 1e-2  # the updates moved the weights far beyond the tolerance

"""TD3/DDPG, DQN and A2C losses against hand-computed targets."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rlrun.algos.a2c import A2CLoss
from rlrun.algos.dqn import DQNLoss
from rlrun.algos.td3 import DDPGLoss, TD3Loss
from rlrun.core.specs import EnvSpec
from rlrun.modules.models import actor_critic, actor_twin_q, qnet
from rlrun.trainer.optim import OptimizerStep

B = 8


def transitions(obs_dim=3, action=None, terminated=None) -> TensorDict:
    g = torch.Generator().manual_seed(0)
    term = terminated if terminated is not None else torch.zeros(B, 1, dtype=torch.bool)
    return TensorDict({
        "observation": torch.randn(B, obs_dim, generator=g),
        "action": action if action is not None else torch.rand(B, 1, generator=g) * 2 - 1,
        "next": {"observation": torch.randn(B, obs_dim, generator=g),
                 "reward": torch.randn(B, 1, generator=g), "terminated": term},
    }, [B])


def test_td3_target_uses_min_of_target_twins_and_stops_at_termination():
    spec = EnvSpec((3,), np.dtype(np.float32), False, 1)
    loss = TD3Loss(actor_twin_q(spec, hidden=[16], head="deterministic"), gamma=0.99, target_noise=0.0)
    term = torch.tensor([[True]] * 4 + [[False]] * 4)
    td = transitions(terminated=term)
    with torch.no_grad():
        a2 = loss.target_actor.act(td["next", "observation"])
        q2 = loss.target_critic(td["next", "observation"], a2).min(0).values
        y = td["next", "reward"].squeeze(-1) + 0.99 * (~term.squeeze(-1)).float() * q2
        q = loss.policy.critic(td["observation"], td["action"])
        expected = ((q - y) ** 2).mean(-1).sum()
    out = loss(td)
    torch.testing.assert_close(out["loss_critic"], expected)


def test_td3_delays_the_actor_and_ddpg_does_not():
    spec = EnvSpec((3,), np.dtype(np.float32), False, 1)
    td3 = TD3Loss(actor_twin_q(spec, hidden=[16], head="deterministic"), gamma=0.99, policy_delay=2)
    td = transitions()
    has_actor = ["loss_actor" in td3(td) for _ in range(4)]
    assert has_actor == [False, True, False, True]
    ddpg = DDPGLoss(actor_twin_q(spec, hidden=[16], head="deterministic", num_q=1), gamma=0.99)
    assert all("loss_actor" in ddpg(td) for _ in range(3))
    actor_before = [p.clone() for p in td3.policy.actor.parameters()]
    opt = OptimizerStep(td3.param_groups(), lr=1e-2)
    opt.step(td3(td))  # call 5: no actor loss -> actor unchanged
    assert all(torch.equal(a, b) for a, b in zip(actor_before, td3.policy.actor.parameters()))
    opt.step(td3(td))  # call 6: actor updated
    assert not all(torch.equal(a, b) for a, b in zip(actor_before, td3.policy.actor.parameters()))


def test_td3_actor_loss_moves_action_uphill_on_q_without_touching_critic():
    spec = EnvSpec((3,), np.dtype(np.float32), False, 1)
    loss = TD3Loss(actor_twin_q(spec, hidden=[16], head="deterministic"), gamma=0.99, policy_delay=1)
    out = loss(transitions())
    loss.policy.zero_grad()
    out["loss_actor"].backward()
    assert all(p.grad is None or p.grad.abs().sum() == 0 for p in loss.policy.critic.parameters())
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in loss.policy.actor.parameters())


def test_td3_call_counter_survives_a_state_dict_round_trip():
    spec = EnvSpec((3,), np.dtype(np.float32), False, 1)
    a = TD3Loss(actor_twin_q(spec, hidden=[16], head="deterministic"), gamma=0.99)
    a(transitions())
    b = TD3Loss(actor_twin_q(spec, hidden=[16], head="deterministic"), gamma=0.99)
    b.load_state_dict(a.state_dict())
    assert b.calls == 1 and "loss_actor" in b(transitions())


def test_dqn_double_target_and_huber_loss():
    spec = EnvSpec((3,), np.dtype(np.float32), True, 2)
    loss = DQNLoss(qnet(spec, hidden=[16]), gamma=0.99, double=True)
    with torch.no_grad():  # make the target net differ from the online net
        for p in loss.target_critic.parameters():
            p.add_(0.5)
    action = torch.randint(2, (B,))
    term = torch.tensor([[True], [False]] * 4)
    td = transitions(action=action, terminated=term)
    with torch.no_grad():
        nxt = td["next", "observation"]
        best = loss.policy.critic(nxt).argmax(-1, keepdim=True)  # chosen by the ONLINE net
        q2 = loss.target_critic(nxt).gather(-1, best).squeeze(-1)  # valued by the TARGET net
        y = td["next", "reward"].squeeze(-1) + 0.99 * (~term.squeeze(-1)).float() * q2
        q = loss.policy.critic(td["observation"]).gather(-1, action[:, None]).squeeze(-1)
        expected = torch.nn.functional.smooth_l1_loss(q, y)
    torch.testing.assert_close(loss(td)["loss_critic"], expected)
    loss.update_targets()  # tau = 1: hard copy
    for t, s in zip(loss.target_critic.parameters(), loss.policy.critic.parameters()):
        assert torch.equal(t, s)


def test_greedy_policy_is_argmax_q():
    spec = EnvSpec((3,), np.dtype(np.float32), True, 4)
    m = qnet(spec, hidden=[8])
    obs = torch.randn(5, 3)
    assert torch.equal(m.actor.act(obs), m.critic(obs).argmax(-1))
    assert len(list(m.parameters())) == len(list(m.critic.parameters()))  # registered once


def test_a2c_loss_is_the_advantage_weighted_log_prob():
    spec = EnvSpec((4,), np.dtype(np.float32), True, 2)
    models = actor_critic(spec, hidden=[16])
    loss = A2CLoss(models, entropy_coef=0.01, critic_coef=0.5)
    g = torch.Generator().manual_seed(1)
    obs, action = torch.randn(B, 4, generator=g), torch.randint(2, (B,), generator=g)
    adv, target = torch.randn(B, generator=g), torch.randn(B, generator=g)
    td = TensorDict({"observation": obs, "action": action, "advantage": adv, "value_target": target}, [B])
    out = loss(td)
    dist = models.actor.dist(obs)
    torch.testing.assert_close(out["loss_objective"], -(dist.log_prob(action) * adv).mean())
    torch.testing.assert_close(out["loss_critic"], 0.25 * (models.critic(obs) - target).pow(2).mean())
    torch.testing.assert_close(out["loss_entropy"], -0.01 * dist.entropy().mean())


def test_a2c_and_dqn_defaults_match_their_configs():
    # conf/loss/a2c.yaml and dqn.yaml: no entropy bonus, critic weight 0.5; Double DQN with a Huber loss
    spec = EnvSpec((4,), np.dtype(np.float32), True, 2)
    models = actor_critic(spec, hidden=[16])
    g = torch.Generator().manual_seed(2)
    obs, action = torch.randn(B, 4, generator=g), torch.randint(2, (B,), generator=g)
    target = torch.randn(B, generator=g)
    td = TensorDict({"observation": obs, "action": action, "advantage": torch.randn(B, generator=g),
                     "value_target": target}, [B])
    out = A2CLoss(models)(td)
    assert out["loss_entropy"].item() == 0.0
    torch.testing.assert_close(out["loss_critic"], 0.25 * (models.critic(obs) - target).pow(2).mean())
    dqn = DQNLoss(qnet(EnvSpec((3,), np.dtype(np.float32), True, 2), hidden=[8]), gamma=0.9)
    assert dqn.double and dqn.loss == "huber" and dqn.tau == 1.0


def _linear_q(loss_or_policy_net, weight):
    layer = next(m for m in loss_or_policy_net.modules() if isinstance(m, torch.nn.Linear))
    with torch.no_grad():
        layer.weight.copy_(torch.tensor(weight))
        layer.bias.zero_()


def test_double_dqn_values_the_online_choice_with_the_target_net_by_hand():
    """Online Q(s) = (s0, s1), target Q'(s) = (2 s1, s0). At s' = (1, 2): the online net picks
    action 1; Double DQN bootstraps Q'(s', 1) = 1, plain DQN max Q'(s') = 4. Reward 0.5,
    gamma 0.9: y = 1.4 (double) or 4.1; Q(s, a=0) at s = (3, 0) is 3; l2 loss 0.5 (q - y)^2."""
    spec = EnvSpec((2,), np.dtype(np.float32), True, 2)
    td = TensorDict({"observation": torch.tensor([[3.0, 0.0]]), "action": torch.tensor([0]),
                     "next": {"observation": torch.tensor([[1.0, 2.0]]), "reward": torch.tensor([[0.5]]),
                              "terminated": torch.tensor([[False]])}}, [1])
    for double, y in ((True, 1.4), (False, 4.1)):
        loss = DQNLoss(qnet(spec, hidden=[]), gamma=0.9, double=double, loss="l2")
        _linear_q(loss.policy.critic, [[1.0, 0.0], [0.0, 1.0]])
        _linear_q(loss.target_critic, [[0.0, 2.0], [1.0, 0.0]])
        assert loss(td)["loss_critic"].item() == pytest.approx(0.5 * (3.0 - y) ** 2)


def test_polyak_rates_ddpg_passes_its_own_and_td3_defaults_to_the_papers():
    spec = EnvSpec((3,), np.dtype(np.float32), False, 1)
    ddpg = DDPGLoss(actor_twin_q(spec, hidden=[4], head="deterministic", num_q=1), gamma=0.99, tau=0.3)
    assert ddpg.tau == 0.3
    with torch.no_grad():
        target = [p.clone() for p in ddpg.target_actor.parameters()]
        for p in ddpg.policy.actor.parameters():
            p.add_(1.0)
    ddpg.update_targets()  # 0.7 target + 0.3 online = target + 0.3
    for t, before in zip(ddpg.target_actor.parameters(), target):
        torch.testing.assert_close(t, before + 0.3)
    td3 = TD3Loss(actor_twin_q(spec, hidden=[4], head="deterministic"), gamma=0.99)
    assert td3.tau == 0.005  # Fujimoto et al. 2018

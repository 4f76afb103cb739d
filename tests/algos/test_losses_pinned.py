"""Loss paths that can go wrong silently, pinned by hand-derived values.

TD3/DDPG targets with target networks that differ from the online ones and
non-zero clipped smoothing noise (recomputed from the seeded RNG here), polyak
rates, A2C with advantage normalisation, and PPO's clipped objective.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rlrun.algos.a2c import A2CLoss
from rlrun.algos.dqn import DQNLoss
from rlrun.algos.ppo import PPOLoss
from rlrun.algos.td3 import DDPGLoss, TD3Loss
from rlrun.core.specs import EnvSpec
from rlrun.modules.models import actor_critic, actor_twin_q, qnet

B = 8
CONT = EnvSpec((3,), np.dtype(np.float32), False, 1)


def transitions(seed: int = 0) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    return TensorDict({
        "observation": torch.randn(B, 3, generator=g),
        "action": torch.rand(B, 1, generator=g) * 2 - 1,
        "next": {"observation": torch.randn(B, 3, generator=g),
                 "reward": torch.randn(B, 1, generator=g),
                 "terminated": torch.tensor([[True], [False]] * (B // 2))},
    }, [B])


def perturbed_targets(loss, scale: float = 3.0) -> None:
    """Makes the target nets differ from the online ones; the target actor saturates near +-1."""
    g = torch.Generator().manual_seed(42)
    with torch.no_grad():
        for p in loss.target_critic.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.3)
        if hasattr(loss, "target_actor"):
            for p in loss.target_actor.parameters():
                p.mul_(scale).add_(torch.randn(p.shape, generator=g) * 0.3)


def twin_q(critic, obs, action) -> list[torch.Tensor]:
    """Each Q net's values as a list, read one net at a time."""
    with torch.no_grad():
        q = critic(obs, action)
    return [q[k] for k in range(q.shape[0])]


def test_td3_target_uses_target_nets_and_clipped_seeded_noise():
    gamma, sigma, clip = 0.9, 0.4, 0.3
    torch.manual_seed(0)  # networks, and so which smoothed actions cross the bounds, fixed
    loss = TD3Loss(actor_twin_q(CONT, hidden=[16], head="deterministic"), gamma=gamma,
                         target_noise=sigma, noise_clip=clip, policy_delay=2)
    perturbed_targets(loss)
    td = transitions()
    torch.manual_seed(0)
    out = loss(td)

    torch.manual_seed(0)
    raw = torch.randn(B, 1) * sigma  # the one draw the loss makes, recomputed from the same seed
    assert (raw.abs() > clip).any(), "the test needs noise beyond the clip"
    noise = torch.tensor([[min(max(x, -clip), clip)] for x in raw.squeeze(-1).tolist()])
    with torch.no_grad():
        mu = loss.target_actor.act(td["next", "observation"])
    assert ((mu + noise) > 1).any() and ((mu + noise) < -1).any(), "the test needs both bounds crossed"
    a2 = (mu + noise).clamp(-1, 1)
    q1, q2 = twin_q(loss.target_critic, td["next", "observation"], a2)
    expected_sum = 0.0
    online = twin_q(loss.policy.critic, td["observation"], td["action"])
    for i in range(B):
        terminal = bool(td["next", "terminated"][i])
        y = float(td["next", "reward"][i]) + (0.0 if terminal else gamma * min(float(q1[i]), float(q2[i])))
        expected_sum += sum((float(q[i]) - y) ** 2 for q in online)
    assert out["loss_critic"].item() == pytest.approx(expected_sum / B, rel=1e-5)
    assert "loss_actor" not in out  # first call of a delay-2 loss

    # the same target with the online nets, unclipped noise, or unclamped actions is a different number
    nxt = td["next", "observation"]
    with torch.no_grad():
        variants = [loss.policy.critic(nxt, (loss.policy.actor.act(nxt) + noise).clamp(-1, 1)),
                    loss.target_critic(nxt, (mu + raw).clamp(-1, 1)),
                    loss.target_critic(nxt, mu + noise)]
    for q_variant in variants:
        assert not torch.allclose(q_variant.min(0).values, torch.minimum(q1, q2))


def test_td3_importance_weights_scale_each_twins_squared_error():
    gamma = 0.9
    loss = TD3Loss(actor_twin_q(CONT, hidden=[16], head="deterministic"), gamma=gamma,
                         target_noise=0.0)
    perturbed_targets(loss)
    td = transitions(4)
    td["priority_weight"] = torch.linspace(0.0, 2.0, B)
    out = loss(td)
    with torch.no_grad():
        a2 = loss.target_actor.act(td["next", "observation"])
    q1n, q2n = twin_q(loss.target_critic, td["next", "observation"], a2)
    online = twin_q(loss.policy.critic, td["observation"], td["action"])
    expected, td_err = 0.0, []
    for i in range(B):
        bootstrap = 0.0 if bool(td["next", "terminated"][i]) else gamma * min(float(q1n[i]), float(q2n[i]))
        y = float(td["next", "reward"][i]) + bootstrap
        w = float(td["priority_weight"][i])
        expected += sum(w * (float(q[i]) - y) ** 2 for q in online)
        td_err.append(max(abs(float(q[i]) - y) for q in online))
    assert out["loss_critic"].item() == pytest.approx(expected / B, rel=1e-5)
    np.testing.assert_allclose(out["td_error"].numpy(), td_err, rtol=1e-5)


def test_td3_actor_loss_is_minus_the_first_q_of_the_online_actor():
    loss = TD3Loss(actor_twin_q(CONT, hidden=[16], head="deterministic"), gamma=0.99, policy_delay=1)
    perturbed_targets(loss)
    td = transitions(1)
    out = loss(td)
    with torch.no_grad():
        q1, _ = twin_q(loss.policy.critic, td["observation"], loss.policy.actor.act(td["observation"]))
    assert out["loss_actor"].item() == pytest.approx(-q1.mean().item(), rel=1e-5)


def test_ddpg_target_uses_target_nets_and_no_noise():
    gamma = 0.95
    loss = DDPGLoss(actor_twin_q(CONT, hidden=[16], head="deterministic", num_q=1), gamma=gamma)
    perturbed_targets(loss, scale=1.5)
    td = transitions(2)
    torch.manual_seed(0)
    first = loss(td)["loss_critic"].item()
    torch.manual_seed(1)
    assert loss(td)["loss_critic"].item() == first  # no randomness in DDPG's target
    with torch.no_grad():
        a2 = loss.target_actor.act(td["next", "observation"])
    (q_next,) = twin_q(loss.target_critic, td["next", "observation"], a2)
    (q,) = twin_q(loss.policy.critic, td["observation"], td["action"])
    expected = 0.0
    for i in range(B):
        bootstrap = 0.0 if bool(td["next", "terminated"][i]) else gamma * float(q_next[i])
        y = float(td["next", "reward"][i]) + bootstrap
        expected += (float(q[i]) - y) ** 2
    assert first == pytest.approx(expected / B, rel=1e-5)


@pytest.mark.parametrize("tau", [0.005, 0.3])
def test_td3_update_targets_moves_both_targets_by_tau(tau):
    """Targets move with the actor (Fujimoto et al.): after an actor step only, both by tau."""
    loss = TD3Loss(actor_twin_q(CONT, hidden=[8], head="deterministic"), gamma=0.99, tau=tau,
                   policy_delay=2)
    perturbed_targets(loss)
    before = {n: [p.clone() for p in getattr(loss, n).parameters()]
              for n in ("target_actor", "target_critic")}
    online = {"target_actor": list(loss.policy.actor.parameters()),
              "target_critic": list(loss.policy.critic.parameters())}
    td = transitions()
    assert "loss_actor" not in loss(td)  # first call of a delay-2 loss: a critic-only step
    loss.update_targets()
    for name, olds in before.items():
        for old, new in zip(olds, getattr(loss, name).parameters()):
            assert torch.equal(new, old), f"{name} moved after a step that left the actor alone"
    assert "loss_actor" in loss(td)  # second call: the actor step
    loss.update_targets()
    for name, olds in before.items():
        for old, new, src in zip(olds, getattr(loss, name).parameters(), online[name]):
            torch.testing.assert_close(new, old + tau * (src - old))


def test_dqn_soft_update_with_tau_below_one():
    spec = EnvSpec((3,), np.dtype(np.float32), True, 2)
    loss = DQNLoss(qnet(spec, hidden=[8]), gamma=0.99, tau=0.25)
    perturbed_targets(loss)
    olds = [p.clone() for p in loss.target_critic.parameters()]
    loss.update_targets()
    for old, new, src in zip(olds, loss.target_critic.parameters(), loss.policy.critic.parameters()):
        torch.testing.assert_close(new, 0.75 * old + 0.25 * src)


def test_dqn_importance_weights_scale_each_sample():
    spec = EnvSpec((3,), np.dtype(np.float32), True, 2)
    loss = DQNLoss(qnet(spec, hidden=[8]), gamma=0.99, loss="l2")
    td = transitions(3)
    td["action"] = torch.tensor([0, 1] * (B // 2))
    plain = loss(td)
    weight = torch.linspace(0.0, 2.0, B)
    td["priority_weight"] = weight
    weighted = loss(td)
    per = 0.5 * plain["td_error"] ** 2
    assert weighted["loss_critic"].item() == pytest.approx((per * weight).mean().item(), rel=1e-5)
    assert plain["loss_critic"].item() == pytest.approx(per.mean().item(), rel=1e-5)


def test_a2c_normalises_advantages_with_the_sample_std():
    spec = EnvSpec((4,), np.dtype(np.float32), True, 2)
    policy = actor_critic(spec, hidden=[16])
    loss = A2CLoss(policy, normalize_advantage=True)
    g = torch.Generator().manual_seed(5)
    obs, action = torch.randn(B, 4, generator=g), torch.randint(2, (B,), generator=g)
    adv = torch.randn(B, generator=g) * 3 + 2
    td = TensorDict({"observation": obs, "action": action, "advantage": adv,
                     "value_target": torch.randn(B, generator=g)}, [B])
    out = loss(td)
    a = adv.tolist()
    mean = sum(a) / B
    std = math.sqrt(sum((x - mean) ** 2 for x in a) / (B - 1))
    with torch.no_grad():
        logp = policy.actor.dist(obs).log_prob(action).tolist()
    expected = -sum(lp * (x - mean) / (std + 1e-8) for lp, x in zip(logp, a)) / B
    # float32 against float64 on a near-zero mean: an absolute tolerance far below the
    # 6% that the population std (or no normalisation) would change
    assert out["loss_objective"].item() == pytest.approx(expected, rel=1e-4, abs=1e-7)
    plain = A2CLoss(policy)(td)["loss_objective"].item()
    assert plain == pytest.approx(-sum(lp * x for lp, x in zip(logp, a)) / B, rel=1e-5)


@pytest.mark.parametrize("normalize", [False, True])
def test_ppo_clipped_objective_by_hand(normalize):
    """Ratios inside and outside [1 - eps, 1 + eps] with advantages of both signs."""
    eps = 0.2
    spec = EnvSpec((4,), np.dtype(np.float32), True, 2)
    torch.manual_seed(0)
    policy = actor_critic(spec, hidden=[16])
    obs, action = torch.randn(B, 4), torch.randint(2, (B,))
    ratios = [0.5, 0.9, 1.1, 1.5, 0.5, 0.9, 1.1, 1.5]
    adv_list = [1.0, 1.0, 1.0, 1.0, -2.0, -2.0, -2.0, -2.0]
    with torch.no_grad():
        logp = policy.actor.dist(obs).log_prob(action)
    td = TensorDict({"observation": obs, "action": action, "advantage": torch.tensor(adv_list),
                     "sample_log_prob": logp - torch.log(torch.tensor(ratios)),
                     "value_target": torch.zeros(B)}, [B])
    out = PPOLoss(policy, clip_epsilon=eps, normalize_advantage=normalize)(td)
    a = adv_list
    if normalize:
        mean = sum(a) / B
        std = math.sqrt(sum((x - mean) ** 2 for x in a) / (B - 1))
        a = [(x - mean) / (std + 1e-8) for x in a]
    terms = [min(r * x, min(max(r, 1 - eps), 1 + eps) * x) for r, x in zip(ratios, a)]
    assert out["loss_objective"].item() == pytest.approx(-sum(terms) / B, rel=1e-5)
    assert out["clip_fraction"].item() == pytest.approx(4 / B)  # 0.5 and 1.5, twice
    kl = sum((r - 1) - math.log(r) for r in ratios) / B
    assert out["approx_kl"].item() == pytest.approx(kl, rel=1e-5)


def test_td3_noise_scale_is_the_target_noise_std():
    """A small std against a wide clip: most of the noise is unclipped, so its scale shows."""
    n, gamma, sigma, clip = 64, 0.9, 0.1, 0.5
    loss = TD3Loss(actor_twin_q(CONT, hidden=[16], head="deterministic"), gamma=gamma,
                         target_noise=sigma, noise_clip=clip)
    g = torch.Generator().manual_seed(9)
    td = TensorDict({"observation": torch.randn(n, 3, generator=g),
                     "action": torch.rand(n, 1, generator=g) - 0.5,
                     "next": {"observation": torch.randn(n, 3, generator=g), "reward": torch.zeros(n, 1),
                              "terminated": torch.zeros(n, 1, dtype=torch.bool)}}, [n])
    torch.manual_seed(3)
    out = loss(td)
    torch.manual_seed(3)
    noise = (torch.randn(n, 1) * sigma).clamp(-clip, clip)
    nxt = td["next", "observation"]
    with torch.no_grad():
        y = gamma * loss.target_critic(nxt, (loss.target_actor.act(nxt) + noise).clamp(-1, 1)).min(0).values
        q = loss.policy.critic(td["observation"], td["action"])
    assert out["loss_critic"].item() == pytest.approx(((q - y) ** 2).mean(-1).sum().item(), rel=1e-5)


def test_ddpg_draws_nothing_from_the_global_rng():
    loss = DDPGLoss(actor_twin_q(CONT, hidden=[8], head="deterministic", num_q=1), gamma=0.99)
    before = torch.get_rng_state()
    loss(transitions())
    assert torch.equal(torch.get_rng_state(), before)


@pytest.mark.parametrize("n", [1, 2])
def test_advantage_normalisation_needs_two_samples(n):
    """One sample has no std (left as is); two are normalised to -1/sqrt(2), +1/sqrt(2)."""
    spec = EnvSpec((4,), np.dtype(np.float32), True, 2)
    torch.manual_seed(0)
    policy = actor_critic(spec, hidden=[8])
    obs, action = torch.randn(n, 4), torch.randint(2, (n,))
    adv = torch.tensor([3.0, 5.0][:n])
    with torch.no_grad():
        logp = policy.actor.dist(obs).log_prob(action)
    td = TensorDict({"observation": obs, "action": action, "advantage": adv, "sample_log_prob": logp,
                     "value_target": torch.zeros(n)}, [n])
    normed = adv if n == 1 else torch.tensor([-1.0, 1.0]) / math.sqrt(2)
    a2c = A2CLoss(policy, normalize_advantage=True)(td)["loss_objective"]
    torch.testing.assert_close(a2c, -(logp * normed).mean())
    ppo = PPOLoss(policy, normalize_advantage=True)(td)["loss_objective"]  # ratio 1
    torch.testing.assert_close(ppo, -normed.mean())


def test_output_keys_and_param_groups_are_the_logged_and_configured_names():
    """Loss keys become metric names (loss/critic, train/q_value); group names are config keys."""
    disc = EnvSpec((4,), np.dtype(np.float32), True, 2)
    td_disc = TensorDict({"observation": torch.randn(B, 4), "action": torch.randint(2, (B,)),
                          "advantage": torch.randn(B), "value_target": torch.randn(B),
                          "sample_log_prob": torch.zeros(B)}, [B])
    ac = actor_critic(disc, hidden=[8])
    assert set(A2CLoss(ac)(td_disc)) == {"loss_objective", "loss_critic", "loss_entropy", "entropy"}
    assert set(PPOLoss(ac)(td_disc)) == {"loss_objective", "loss_critic", "loss_entropy", "entropy",
                                         "approx_kl", "clip_fraction"}
    assert A2CLoss(ac).param_groups().keys() == {"all"}
    q = qnet(EnvSpec((3,), np.dtype(np.float32), True, 2), hidden=[8])
    dqn = DQNLoss(q, gamma=0.99)
    td = transitions()
    td["action"] = torch.randint(2, (B,))
    assert set(dqn(td)) == {"loss_critic", "q_value", "td_error"}
    assert dqn.param_groups() == {"critic": list(q.critic.parameters())}
    td3 = TD3Loss(actor_twin_q(CONT, hidden=[8], head="deterministic"), gamma=0.99, policy_delay=1)
    assert set(td3(transitions())) == {"loss_critic", "q_value", "td_error", "loss_actor"}
    groups = td3.param_groups()
    assert groups == {"actor": list(td3.policy.actor.parameters()),
                      "critic": list(td3.policy.critic.parameters())}


def test_sac_learned_temperature_is_its_own_group_and_moves():
    from rlrun.algos.sac import SACLoss
    from rlrun.trainer.optim import OptimizerStep

    spec = EnvSpec((3,), np.dtype(np.float32), False, 2)
    loss = SACLoss(actor_twin_q(spec, hidden=[8]), spec, gamma=0.99)
    assert loss.param_groups()["alpha"] == [loss.log_alpha]
    out_keys = {"loss_critic", "loss_actor", "loss_alpha", "alpha", "entropy", "q_value", "td_error"}
    td = TensorDict({"observation": torch.randn(B, 3), "action": torch.rand(B, 2) * 2 - 1,
                     "next": {"observation": torch.randn(B, 3), "reward": torch.randn(B, 1),
                              "terminated": torch.zeros(B, 1, dtype=torch.bool)}}, [B])
    out = loss(td)
    assert set(out) == out_keys
    before = loss.log_alpha.item()
    OptimizerStep(loss.param_groups(), lr=0.1).step(out)
    assert loss.log_alpha.item() != before


@pytest.mark.parametrize(("settings", "sigma", "clip"), [({"target_noise": 0.4, "noise_clip": 0.3}, 0.4, 0.3),
                                                         ({}, 0.2, 0.5)])  # the paper's defaults
def test_td3_smoothing_noise_is_clipped_on_both_sides(settings, sigma, clip):
    # target actor outputs 0 and each target Q is the action itself, so the bootstrap value is the
    # clipped noise; the online critic outputs 0, so the loss is 2 * mean(y^2)
    n = 1024
    policy = actor_twin_q(CONT, hidden=[4], head="deterministic")
    with torch.no_grad():
        for p in policy.actor.parameters():
            p.zero_()
    loss = TD3Loss(policy, gamma=0.5, **settings)
    with torch.no_grad():
        for p in loss.target_critic.parameters():
            p.zero_()
        for p in policy.critic.parameters():
            p.zero_()
    # a critic with hidden layers: make the target's output the action through a linear path
    critic = loss.target_critic
    with torch.no_grad():
        critic.weights[0][:, 3, 0] = 1.0  # first hidden unit = relu(action)
        critic.weights[0][:, 3, 1] = -1.0  # second hidden unit = relu(-action)
        critic.weights[-1][:, 0, 0] = 1.0
        critic.weights[-1][:, 1, 0] = -1.0  # relu(a) - relu(-a) = a
    g = torch.Generator().manual_seed(5)
    td = TensorDict({"observation": torch.randn(n, 3, generator=g), "action": torch.zeros(n, 1),
                     "next": {"observation": torch.randn(n, 3, generator=g), "reward": torch.zeros(n, 1),
                              "terminated": torch.zeros(n, 1, dtype=torch.bool)}}, [n])
    torch.manual_seed(7)
    out = loss(td)
    torch.manual_seed(7)
    raw = (torch.randn(n, 1) * sigma).squeeze(-1).tolist()
    assert min(raw) < -clip and max(raw) > clip, "the test needs noise beyond both clips"
    y = [0.5 * min(max(x, -clip), clip) for x in raw]
    assert out["loss_critic"].item() == pytest.approx(2 * sum(v * v for v in y) / n, rel=1e-5)

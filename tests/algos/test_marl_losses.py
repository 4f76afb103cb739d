"""MARL losses on tiny fixed networks: expected values worked out by hand or by scalar loops."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict

from rlrun.algos.marl_losses import MultiAgentQLoss, make_q_mixer
from rlrun.algos.ppo import PPOLoss
from rlrun.core.errors import ConfigError
from rlrun.modules.group_models import GroupPolicy
from rlrun.modules.multiagent import GroupActor, GroupMLP, QMixer, VDNMixer


def constant_net(n_agents: int, biases: list[list[float]], share: bool = False) -> GroupMLP:
    """A one-layer GroupMLP that ignores its input and outputs ``biases[agent]``."""
    net = GroupMLP(n_agents, 1, len(biases[0]), [], share_params=share)
    with torch.no_grad():
        net.weights[0].zero_()
        net.biases[0].copy_(torch.tensor(biases)[:, None, :])
    return net


# ---- PPO family ---------------------------------------------------------------------------

def group_ppo(actor: GroupActor, critic: GroupMLP, **options) -> PPOLoss:
    """PPO's own loss on a group policy, with MAPPO's critic weight 1 (conf/loss/marl_ppo.yaml)."""
    return PPOLoss(GroupPolicy(actor, critic), **{"critic_coef": 1.0, **options})


def test_ppo_loss_by_hand():
    # uniform policy over 2 actions (p = 0.5), old log-prob log(0.25): every ratio is 2
    actor = GroupActor(constant_net(2, [[0.0, 0.0]], share=True), "categorical", 2)
    critic = constant_net(2, [[0.5], [-1.0]])  # V_0 = 0.5, V_1 = -1
    loss = group_ppo(actor, critic, clip_epsilon=0.2, entropy_coef=0.01, critic_coef=1.0,
                             normalize_advantage=False)
    td = TensorDict({"agents": {
        "observation": torch.zeros(2, 2, 1),
        "action": torch.tensor([[0, 1], [1, 0]]),
        "sample_log_prob": torch.full((2, 2), math.log(0.25)),
        "advantage": torch.tensor([[1.0, -1.0], [2.0, 0.5]]),
        "value_target": torch.tensor([[1.0, 2.0], [3.0, 0.0]]),
    }}, batch_size=[2])
    out = loss(td)
    # min(2 A, 1.2 A): 1.2, -2, 2.4, 0.6 -> mean 0.55
    torch.testing.assert_close(out["loss_objective"], torch.tensor(-0.55))
    # errors -0.5, -3, -2.5, -1: 0.5 * (0.25 + 9 + 6.25 + 1) / 4
    torch.testing.assert_close(out["loss_critic"], torch.tensor(2.0625))
    torch.testing.assert_close(out["loss_entropy"], torch.tensor(-0.01 * math.log(2)))
    torch.testing.assert_close(out["approx_kl"], torch.tensor(1 - math.log(2)))
    torch.testing.assert_close(out["clip_fraction"], torch.tensor(1.0))


@pytest.mark.parametrize("centralised", [False, True])
def test_ppo_loss_matches_a_scalar_loop_for_normal_policies(centralised):
    torch.manual_seed(0)
    B, N, F, A = 5, 3, 4, 2
    actor = GroupActor(GroupMLP(N, F, A, [8], share_params=False), "normal", A, init_log_std=-0.3)
    critic = GroupMLP(N, F, 1, [8], share_params=True, centralised=centralised)
    loss = group_ppo(actor, critic, clip_epsilon=0.2, entropy_coef=0.0)
    obs, action = torch.randn(B, N, F), torch.randn(B, N, A)
    old = torch.randn(B, N) - 2.0
    adv, vt = torch.randn(B, N), torch.randn(B, N)
    td = TensorDict({"agents": {"observation": obs, "action": action, "sample_log_prob": old,
                                "advantage": adv, "value_target": vt}}, batch_size=[B])
    out = loss(td)

    mean, value = actor.net(obs).tolist(), critic(obs).squeeze(-1).tolist()
    sigma = math.exp(-0.3)
    a_list, adv_list = action.tolist(), adv.flatten().tolist()
    mu_a = sum(adv_list) / len(adv_list)
    sd_a = math.sqrt(sum((x - mu_a) ** 2 for x in adv_list) / (len(adv_list) - 1))
    surrogate, sq = 0.0, 0.0
    for b in range(B):
        for i in range(N):
            logp = sum(-((a_list[b][i][d] - mean[b][i][d]) ** 2) / (2 * sigma ** 2) - math.log(sigma)
                       - 0.5 * math.log(2 * math.pi) for d in range(A))
            r = math.exp(logp - float(old[b, i]))
            a_norm = (float(adv[b, i]) - mu_a) / (sd_a + 1e-8)
            surrogate += min(r * a_norm, max(min(r, 1.2), 0.8) * a_norm)
            sq += (value[b][i] - float(vt[b, i])) ** 2
    torch.testing.assert_close(out["loss_objective"], torch.tensor(-surrogate / (B * N)))
    torch.testing.assert_close(out["loss_critic"], torch.tensor(0.5 * sq / (B * N)))


# ---- Q family -------------------------------------------------------------------------------

# agent 0's Q values are 1, 2, 3 and agent 1's 0.5, -1, 4 whatever the observation; the target
# network's differ, so Double DQN (online argmax: action 2 for both) and plain DQN (target argmax:
# action 1 for both) bootstrap from different values: [5, 2] and [20, 7].
ONLINE = [[1.0, 2.0, 3.0], [0.5, -1.0, 4.0]]
TARGET = [[10.0, 20.0, 5.0], [1.0, 7.0, 2.0]]


def q_batch(state_dim: int = 3) -> TensorDict:
    g = torch.Generator().manual_seed(0)
    return TensorDict({
        "agents": {"observation": torch.randn(2, 2, 1, generator=g),
                   "action": torch.tensor([[0, 2], [2, 1]])},
        "state": torch.randn(2, state_dim, generator=g),
        "next": {"agents": {"observation": torch.randn(2, 2, 1, generator=g),
                            "reward": torch.tensor([[[1.0], [1.0]], [[0.0], [2.0]]])},
                 "terminated": torch.tensor([[False], [True]]),
                 "state": torch.randn(2, state_dim, generator=g)},
    }, batch_size=[2])


def q_loss(mixer, double: bool) -> MultiAgentQLoss:
    loss = MultiAgentQLoss(constant_net(2, ONLINE), mixer, gamma=0.9, double=double, loss="l2")
    with torch.no_grad():
        loss.target_qnet.biases[0].copy_(torch.tensor(TARGET)[:, None, :])
    return loss


@pytest.mark.parametrize(("double", "expected"), [
    # chosen Q: [1, 4], [3, -1]; targets [1 + .9 * 5, 1 + .9 * 2], [0, 2] (second sample terminated)
    (True, (4.5 ** 2 + 1.2 ** 2 + 3 ** 2 + 3 ** 2) / 4),
    # targets [1 + .9 * 20, 1 + .9 * 7], [0, 2]
    (False, (18 ** 2 + 3.3 ** 2 + 3 ** 2 + 3 ** 2) / 4),
])
def test_iql_loss_by_hand(double, expected):
    out = q_loss(None, double)(q_batch())
    torch.testing.assert_close(out["loss_critic"], torch.tensor(expected))
    torch.testing.assert_close(out["q_value"], torch.tensor((1 + 4 + 3 - 1) / 4))


@pytest.mark.parametrize(("double", "expected"), [
    # Q_tot 5 and 2; team rewards (mean) 1 and 1; targets 1 + .9 * (5 + 2) = 7.3 and 1 (terminated)
    (True, (2.3 ** 2 + 1 ** 2) / 2),
    (False, ((5 - (1 + 0.9 * 27)) ** 2 + 1 ** 2) / 2),
])
def test_vdn_loss_by_hand(double, expected):
    out = q_loss(VDNMixer(), double)(q_batch())
    torch.testing.assert_close(out["loss_critic"], torch.tensor(expected))


def test_qmix_loss_uses_the_mixer_on_the_state_and_the_target_mixer_on_the_next_state():
    torch.manual_seed(0)
    loss = q_loss(QMixer(2, state_dim=3, embed_dim=4, hypernet_hidden=5), double=True)
    with torch.no_grad():  # make the target mixer differ from the online one
        for p in loss.target_mixer.parameters():
            p.add_(0.3)
    td = q_batch()
    chosen = torch.tensor([[1.0, 4.0], [3.0, -1.0]])
    with torch.no_grad():
        q_tot = loss.mixer(chosen, td["state"])
        next_tot = loss.target_mixer(torch.tensor([[5.0, 2.0], [5.0, 2.0]]), td["next", "state"])
    targets = [1 + 0.9 * float(next_tot[0]), 1.0]
    expected = sum((float(q_tot[b]) - targets[b]) ** 2 for b in range(2)) / 2
    torch.testing.assert_close(loss(td)["loss_critic"], torch.tensor(expected))


def test_q_loss_gradients_reach_the_qnet_and_mixer_but_not_the_targets():
    loss = q_loss(QMixer(2, state_dim=3), double=True)
    loss(q_batch())["loss_critic"].backward()
    assert loss.qnet.biases[0].grad.abs().sum() > 0
    assert all(p.grad is not None for p in loss.mixer.parameters())
    assert all(p.grad is None for p in loss.target_qnet.parameters())
    assert all(p.grad is None for p in loss.target_mixer.parameters())


@pytest.mark.parametrize("mixer", [None, VDNMixer()], ids=["iql", "vdn"])
def test_update_targets_works_without_mixer_parameters(mixer):
    loss = q_loss(mixer, double=True)
    loss.update_targets()
    torch.testing.assert_close(loss.target_qnet.biases[0], loss.qnet.biases[0], rtol=0, atol=0)


def test_update_targets_copies_qnet_and_mixer():
    loss = q_loss(QMixer(2, state_dim=3), double=True)
    loss.update_targets()  # tau = 1: hard copy
    for online, target in ((loss.qnet, loss.target_qnet), (loss.mixer, loss.target_mixer)):
        for p, q in zip(online.parameters(), target.parameters()):
            torch.testing.assert_close(p, q, rtol=0, atol=0)


def test_mixer_factory_and_errors():
    assert make_q_mixer("none", 3) is None
    assert isinstance(make_q_mixer("vdn", 3), VDNMixer)
    assert isinstance(make_q_mixer("qmix", 3, 54), QMixer)
    with pytest.raises(ConfigError, match="global state"):
        make_q_mixer("qmix", 3)
    with pytest.raises(ConfigError, match="unknown mixer"):
        make_q_mixer("qtran", 3)


def test_ppo_defaults_clip_at_0_2_standardise_and_add_no_entropy_bonus():
    # the by-hand batch above, with the loss's defaults (clip 0.2, no entropy bonus, critic weight 1,
    # advantages standardised): mean 0.625, sample std 1.25 -> 0.3, -1.3, 1.1, -0.1
    actor = GroupActor(constant_net(2, [[0.0, 0.0]], share=True), "categorical", 2)
    loss = group_ppo(actor, constant_net(2, [[0.5], [-1.0]]))
    td = TensorDict({"agents": {
        "observation": torch.zeros(2, 2, 1),
        "action": torch.tensor([[0, 1], [1, 0]]),
        "sample_log_prob": torch.full((2, 2), math.log(0.25)),
        "advantage": torch.tensor([[1.0, -1.0], [2.0, 0.5]]),
        "value_target": torch.tensor([[1.0, 2.0], [3.0, 0.0]]),
    }}, batch_size=[2])
    out = loss(td)
    # ratio 2: min(2 A, 1.2 A) = 0.36, -2.6, 1.32, -0.2
    torch.testing.assert_close(out["loss_objective"], torch.tensor(0.28))
    torch.testing.assert_close(out["loss_critic"], torch.tensor(2.0625))
    assert out["loss_entropy"].item() == 0.0
    assert set(out) == {"loss_objective", "loss_critic", "loss_entropy", "entropy", "approx_kl",
                        "clip_fraction"}
    torch.testing.assert_close(out["entropy"], torch.tensor(math.log(2)))


def test_huber_loss_and_td_errors_by_hand():
    loss = MultiAgentQLoss(constant_net(2, ONLINE), None, gamma=0.9, double=True, loss="huber")
    with torch.no_grad():
        loss.target_qnet.biases[0].copy_(torch.tensor(TARGET)[:, None, :])
    out = loss(q_batch())
    # chosen Q [1, 4], [3, -1]; targets [5.5, 2.8], [0, 2]: errors -4.5, 1.2, 3, -3; huber |x| - 0.5
    torch.testing.assert_close(out["loss_critic"], torch.tensor((4.0 + 0.7 + 2.5 + 2.5) / 4))
    torch.testing.assert_close(out["td_error"], torch.tensor([[4.5, 1.2], [3.0, 3.0]]))


@pytest.mark.parametrize("mixer", [None, VDNMixer()], ids=["iql", "vdn"])
def test_iql_and_vdn_need_no_global_state(mixer):
    with_state = q_loss(mixer, double=True)(q_batch())["loss_critic"]
    td = q_batch()
    del td["state"]
    del td["next", "state"]
    torch.testing.assert_close(q_loss(mixer, double=True)(td)["loss_critic"], with_state)


def test_vdn_over_an_env_and_time_batch_mixes_over_agents_only():
    # *B = [env 2, time 3]: the team reward is the mean over agents, termination per (env, time)
    g = torch.Generator().manual_seed(1)
    action = torch.randint(0, 3, (2, 3, 2), generator=g)
    reward = torch.randn(2, 3, 2, 1, generator=g)
    terminated = torch.tensor([[[False], [True], [False]], [[False], [False], [True]]])
    td = TensorDict({
        "agents": {"observation": torch.randn(2, 3, 2, 1, generator=g), "action": action},
        "next": {"agents": {"observation": torch.randn(2, 3, 2, 1, generator=g), "reward": reward},
                 "terminated": terminated},
    }, batch_size=[2, 3])
    out = q_loss(VDNMixer(), double=True)(td)
    total = 0.0
    for e in range(2):
        for t in range(3):
            q_tot = sum(ONLINE[i][int(action[e, t, i])] for i in range(2))
            team_reward = (float(reward[e, t, 0, 0]) + float(reward[e, t, 1, 0])) / 2
            # online argmax is action 2 for both agents: the target's values 5 and 2
            y = team_reward + (0.0 if terminated[e, t, 0] else 0.9 * (5.0 + 2.0))
            total += (q_tot - y) ** 2
    torch.testing.assert_close(out["loss_critic"], torch.tensor(total / 6))
    assert out["td_error"].shape == (2, 3)


def test_update_targets_moves_a_changed_mixer():
    loss = q_loss(QMixer(2, state_dim=3), double=True)
    with torch.no_grad():  # the online mixer learns away from its target copy
        for p in loss.mixer.parameters():
            p.add_(0.5)
    loss.update_targets()
    for p, q in zip(loss.mixer.parameters(), loss.target_mixer.parameters()):
        torch.testing.assert_close(q, p, rtol=0, atol=0)


def test_q_loss_defaults_double_dqn_l2_and_hard_target_copies():
    loss = MultiAgentQLoss(constant_net(2, ONLINE), None, gamma=0.9)
    with torch.no_grad():
        loss.target_qnet.biases[0].copy_(torch.tensor(TARGET)[:, None, :])
    expected = (4.5 ** 2 + 1.2 ** 2 + 3 ** 2 + 3 ** 2) / 4  # the Double-DQN l2 value above
    torch.testing.assert_close(loss(q_batch())["loss_critic"], torch.tensor(expected))
    loss.update_targets()
    torch.testing.assert_close(loss.target_qnet.biases[0], loss.qnet.biases[0], rtol=0, atol=0)

"""The registered multi-agent pieces: group models, the MADDPG loss by hand, the GAE hook on a group,
the VMAS collector's batches."""

from __future__ import annotations

import re
import types

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rlrun.algos.marl import GroupQLoss, MADDPGLoss
from rlrun.algos.ppo import PPOLoss
from rlrun.core.errors import ConfigError
from rlrun.core.specs import GROUP, EnvSpec
from rlrun.modules.group_models import GroupPolicy, group_actor_critic, group_actor_q, group_qnet
from rlrun.trainer.hooks import GAE

SPEC = EnvSpec((4,), "float32", False, 2, group=GROUP, n_agents=3, state_shape=(12,))
DISCRETE = EnvSpec((4,), "float32", True, 5, group=GROUP, n_agents=3, state_shape=(12,))


def group_spec(agents: int) -> EnvSpec:
    return EnvSpec((4,), "float32", False, 2, group=GROUP, n_agents=agents)


def _perturb_agent(x: torch.Tensor, agent: int) -> torch.Tensor:
    y = x.clone()
    y[..., agent, :] += 1.0
    return y


@pytest.mark.parametrize("centralised", [True, False])
@pytest.mark.parametrize("share", [True, False])
def test_mappo_critic_sees_every_agent_and_ippo_critic_only_its_own(centralised, share):
    torch.manual_seed(0)
    policy = group_actor_critic(SPEC, hidden=[8], share_params=share, centralised=centralised)
    obs = torch.randn(5, 3, 4)
    moved = _perturb_agent(obs, 2)  # only agent 2's observation changes
    v, v2 = policy.value(obs), policy.value(moved)
    assert v.shape == (5, 3)
    assert torch.equal(v[:, 0] != v2[:, 0], torch.full((5,), centralised))  # agent 0's value
    assert (v[:, 2] != v2[:, 2]).all()
    a, a2 = policy.act(obs), policy.act(moved)
    assert torch.equal(a[:, :2], a2[:, :2])  # actors are decentralised either way


@pytest.mark.parametrize("centralised", [True, False])
def test_maddpg_q_sees_other_agents_observations_and_actions_and_iddpg_q_does_not(centralised):
    torch.manual_seed(0)
    policy = group_actor_q(SPEC, hidden=[8], centralised=centralised)
    obs, action = torch.randn(5, 3, 4), torch.rand(5, 3, 2)
    q = policy.critic(obs, action)
    assert q.shape == (5, 3)
    for moved_obs, moved_action in ((_perturb_agent(obs, 1), action), (obs, _perturb_agent(action, 1))):
        q2 = policy.critic(moved_obs, moved_action)
        assert torch.equal(q[:, 0] != q2[:, 0], torch.full((5,), centralised))
        assert (q[:, 1] != q2[:, 1]).all()


def test_group_policies_write_their_keys_under_the_group():
    keys = group_actor_critic(SPEC, hidden=[8]).behaviour_keys()
    assert keys == {"agents.action", "agents.sample_log_prob"}
    policy = group_qnet(DISCRETE, hidden=[8])
    assert policy.behaviour_keys() == {"agents.action"}
    assert policy.act(torch.zeros(2, 3, 4)).shape == (2, 3)


class _LinearActor(nn.Module):
    """``mu_i(o_i) = w * o_i`` (one action dim), deterministic."""

    head = "deterministic"
    explore = None

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(0.1))

    def act(self, obs):
        return self.w * obs


class _SumCritic(nn.Module):
    """``Q_i(o, a) = c_i * (sum_j o_j + sum_j a_j)``: centralised, linear, easy by hand."""

    def __init__(self):
        super().__init__()
        self.c = nn.Parameter(torch.tensor([1.0, 2.0]))

    def forward(self, obs, action):
        return (obs.sum((-2, -1)) + action.sum((-2, -1)))[..., None] * self.c


def _maddpg_batch(terminated: bool) -> TensorDict:
    return TensorDict({
        "agents": {"observation": torch.tensor([[[1.0], [2.0]]]), "action": torch.tensor([[[0.5], [-0.5]]])},
        "next": {"agents": {"observation": torch.tensor([[[3.0], [4.0]]]),
                            "reward": torch.tensor([[[1.0], [2.0]]])},
                 "terminated": torch.tensor([[terminated]])},
    }, batch_size=[1])


def test_maddpg_loss_by_hand():
    """Two agents, gamma 0.5, mu(o) = 0.1 o, Q_i = c_i (o_1 + o_2 + a_1 + a_2), c = (1, 2).

    Targets: mu'(o') = (0.3, 0.4), Q'_i = c_i * 7.7 = (7.7, 15.4), y = r + 0.5 Q' = (4.85, 9.7).
    Q(o, a) = c_i * 3 = (3, 6): critic loss ((3 - 4.85)^2 + (6 - 9.7)^2) / 2 = 8.55625.
    Actor: agent 0 ascends Q_0(o, mu_0 = 0.1, a_1 = -0.5) = 2.6, agent 1 Q_1(o, a_0 = 0.5, mu_1 = 0.2)
    = 2 * 3.7 = 7.4: loss -(2.6 + 7.4) / 2 = -5 (replacing every action, as a joint-action
    variant would, gives -(3.3 + 6.6) / 2 = -4.95). d loss / dw = -(c_0 o_0 + c_1 o_1) / 2 = -2.5.
    """
    policy = GroupPolicy(_LinearActor(), _SumCritic())
    loss = MADDPGLoss(policy, gamma=0.5, tau=1.0)
    out = loss(_maddpg_batch(terminated=False))
    assert out["loss_critic"].item() == pytest.approx(8.55625)
    assert out["loss_actor"].item() == pytest.approx(-5.0)
    out["loss_actor"].backward()
    assert policy.actor.w.grad.item() == pytest.approx(-2.5)
    assert policy.critic.c.grad is None  # the actor's loss leaves the critic alone

    # termination: no bootstrap, y = r = (1, 2); ((3 - 1)^2 + (6 - 2)^2) / 2 = 10
    assert loss(_maddpg_batch(terminated=True))["loss_critic"].item() == pytest.approx(10.0)


def test_maddpg_targets_move_by_tau_on_update():
    policy = GroupPolicy(_LinearActor(), _SumCritic())
    loss = MADDPGLoss(policy, gamma=0.5, tau=0.25)
    with torch.no_grad():
        policy.actor.w.fill_(0.5)
        policy.critic.c.copy_(torch.tensor([3.0, 6.0]))
    loss.update_targets()
    assert loss.target_actor.w.item() == pytest.approx(0.1 + 0.25 * 0.4)
    assert loss.target_critic.c.tolist() == pytest.approx([1.5, 3.0])


def test_q_family_loss_declares_the_state_only_for_qmix():
    for mixer, state in (("none", False), ("vdn", False), ("qmix", True)):
        loss = GroupQLoss(group_qnet(DISCRETE, hidden=[8]), DISCRETE, gamma=0.9, mixer=mixer)
        assert ("state" in loss.reads) == state
        assert len(loss.param_groups()["all"]) == len(list(loss.policy.parameters())) + (
            len(list(loss.td.mixer.parameters())) if mixer == "qmix" else 0)


def _reference_gae(reward, value, next_value, terminated, done, gamma, lmbda):
    """Per env, per agent, backwards over time: the textbook recursion, one scalar at a time."""
    n, steps, agents = reward.shape
    adv = torch.zeros_like(reward)
    for e in range(n):
        for i in range(agents):
            running = 0.0
            for t in reversed(range(steps)):
                not_term = 0.0 if terminated[e, t] else 1.0
                not_done = 0.0 if done[e, t] else 1.0
                delta = reward[e, t, i] + gamma * not_term * next_value[e, t, i] - value[e, t, i]
                running = delta + gamma * lmbda * not_done * running
                adv[e, t, i] = running
    return adv, adv + value


@pytest.mark.parametrize("every_epoch", [True, False])
def test_multiagent_gae_hook_matches_a_reference_loop(every_epoch):
    torch.manual_seed(0)
    n, steps, agents = 2, 7, 3
    policy = group_actor_critic(group_spec(agents), hidden=[8], centralised=True)
    terminated = torch.zeros(n, steps, 1, dtype=torch.bool)
    truncated = torch.zeros_like(terminated)
    terminated[0, 2], truncated[1, 4], terminated[1, 6] = True, True, True
    batch = TensorDict({
        "agents": {"observation": torch.randn(n, steps, agents, 4)},
        "next": {"agents": {"observation": torch.randn(n, steps, agents, 4),
                            "reward": torch.randn(n, steps, agents, 1)},
                 "terminated": terminated, "truncated": truncated, "done": terminated | truncated},
    }, batch_size=[n, steps])
    trainer = types.SimpleNamespace(policy=policy, batches=1)
    hook = GAE(gamma=0.9, lmbda=0.8, every_epoch=every_epoch, group="agents")
    hook.pre_epoch(trainer, batch)
    with torch.no_grad():
        value = policy.value(batch["agents", "observation"])
        next_value = policy.value(batch["next", "agents", "observation"])
    adv, target = _reference_gae(batch["next", "agents", "reward"].squeeze(-1), value, next_value,
                                 terminated.squeeze(-1), (terminated | truncated).squeeze(-1), 0.9, 0.8)
    torch.testing.assert_close(batch["agents", "advantage"], adv)
    torch.testing.assert_close(batch["agents", "value_target"], target)
    # a second epoch of the same batch recomputes only when asked to
    first = batch["agents", "advantage"].clone()
    with torch.no_grad():
        for p in policy.critic.parameters():
            p.add_(0.1)
    hook.pre_epoch(trainer, batch)
    assert torch.equal(batch["agents", "advantage"], first) != every_epoch


def _ppo_batch(seed: int) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    return TensorDict({"agents": {
        "observation": torch.randn(6, 3, 4, generator=g), "action": torch.rand(6, 3, 2, generator=g),
        "sample_log_prob": torch.randn(6, 3, generator=g) - 2.0, "advantage": torch.randn(6, 3, generator=g),
        "value_target": torch.randn(6, 3, generator=g)}}, batch_size=[6])


def test_mappo_is_ppos_loss_reading_group_keys_through_its_key_map():
    torch.manual_seed(0)
    policy = group_actor_critic(SPEC, hidden=[8])
    loss = PPOLoss(policy, clip_epsilon=0.05, entropy_coef=0.3, critic_coef=0.7, normalize_advantage=False)
    assert loss.reads == ("agents.observation", "agents.action", "agents.sample_log_prob",
                          "agents.advantage", "agents.value_target")
    batch = _ppo_batch(1)
    # the same numbers, at the root, through a single-agent key map: one loss, two layouts
    flat = PPOLoss(policy, clip_epsilon=0.05, entropy_coef=0.3, critic_coef=0.7, normalize_advantage=False)
    flat.set_keys(**{name: name for name in ("observation", "action", "sample_log_prob", "advantage",
                                             "value_target")})
    assert flat.reads == ("observation", "action", "sample_log_prob", "advantage", "value_target")
    out, expected = loss(batch), flat(batch["agents"])
    assert set(out) == set(expected) == {"loss_objective", "loss_critic", "loss_entropy", "entropy",
                                         "approx_kl", "clip_fraction"}
    for key in expected:
        torch.testing.assert_close(out[key], expected[key])
    assert out["clip_fraction"].item() > 0  # the small clip range is the one in use
    value = policy.value(batch["agents", "observation"])
    value_error = 0.5 * (value - batch["agents", "value_target"]).pow(2)
    torch.testing.assert_close(out["loss_critic"], 0.7 * value_error.mean())  # per agent, then averaged


def test_marl_q_passes_its_settings_and_defaults_to_the_td_loss():
    policy = group_qnet(DISCRETE, hidden=[8])
    td = GroupQLoss(policy, DISCRETE, gamma=0.9).td
    assert (td.gamma, td.double, td.loss, td.tau) == (0.9, True, "l2", 0.005)
    td = GroupQLoss(policy, DISCRETE, gamma=0.5, mixer="vdn", double=False, loss="huber", tau=1.0).td
    assert (td.gamma, td.double, td.loss, td.tau) == (0.5, False, "huber", 1.0)
    assert td.qnet is policy.critic
    qmix = GroupQLoss(policy, DISCRETE, gamma=0.9, mixer="qmix")
    assert qmix.reads == ("agents.observation", "agents.action", "next.agents.observation",
                          "next.agents.reward", "next.terminated", "state", "next.state")
    # an env without a global state (no state_shape at all) still trains IQL and VDN
    stateless = EnvSpec((4,), "float32", True, 5, group=GROUP, n_agents=3)
    assert GroupQLoss(policy, stateless, gamma=0.9, mixer="vdn").td.mixer is not None


def _q_batch(n: int) -> TensorDict:
    g = torch.Generator().manual_seed(n)
    return TensorDict({
        "agents": {"observation": torch.randn(n, 3, 4, generator=g), "action": torch.randint(0, 5, (n, 3))},
        "next": {"agents": {"observation": torch.randn(n, 3, 4, generator=g),
                            "reward": torch.randn(n, 3, 1, generator=g)},
                 "terminated": torch.tensor([[i % 2 == 0] for i in range(n)])},
    }, batch_size=[n])


def test_marl_q_forward_is_the_td_loss_of_the_batch():
    torch.manual_seed(0)
    loss = GroupQLoss(group_qnet(DISCRETE, hidden=[8]), DISCRETE, gamma=0.9, mixer="vdn")
    batch = _q_batch(4)
    out, expected = loss(batch), loss.td(batch)  # the agent-dim TD loss, checked by hand in test_marl_losses
    assert set(out) == {"loss_critic", "q_value", "td_error"}
    for key in out:
        torch.testing.assert_close(out[key], expected[key])


def test_maddpg_refuses_a_stochastic_actor_and_names_its_optimiser_groups():
    with pytest.raises(ConfigError) as info:
        MADDPGLoss(group_actor_critic(SPEC, hidden=[8]), gamma=0.9)
    assert str(info.value) == "model.name: MADDPG needs a deterministic actor\n  fix: use model=group_actor_q"
    policy = GroupPolicy(_LinearActor(), _SumCritic())
    groups = MADDPGLoss(policy, gamma=0.5).param_groups()
    assert list(groups) == ["actor", "critic"]  # the optim config's per-group keys
    assert groups["actor"] == [policy.actor.w] and groups["critic"] == [policy.critic.c]


def test_maddpg_loss_of_a_batch_is_the_mean_of_its_rows():
    """Three rows of two agents (batch size != agent count, so a wrong dim cannot broadcast)."""
    policy = GroupPolicy(_LinearActor(), _SumCritic())
    loss = MADDPGLoss(policy, gamma=0.5, tau=1.0)
    rows = [_maddpg_batch(terminated=t) for t in (False, True, False)]
    for k, row in enumerate(rows):  # make the rows differ
        row["agents", "observation"] += float(k)
        row["next", "agents", "reward"] -= float(k)
    batch = torch.cat(rows)
    out = loss(batch)
    singles = [loss(row) for row in rows]
    for key in ("loss_critic", "loss_actor", "q_value"):
        assert out[key].item() == pytest.approx(sum(o[key].item() for o in singles) / 3)
    # and the single rows keep the hand-computed values of test_maddpg_loss_by_hand
    assert singles[0]["loss_actor"].item() == pytest.approx(-5.0)
    assert singles[0]["q_value"].item() == pytest.approx(4.5)  # Q = (3, 6)


def test_maddpg_actor_term_with_several_action_dims_by_hand():
    """Two agents, three action dims, o = 1 and a = 0.5 everywhere, mu(o) = 0.1 o, Q_i = c_i (sum o + sum a).
    Agent 0's row: its own three dims become 0.1: sum a = 0.3 + 1.5 = 1.8, Q_0 = 1 * 7.8; agent 1's
    row likewise, Q_1 = 2 * 7.8: actor loss -(7.8 + 15.6) / 2 = -11.7."""
    policy = GroupPolicy(_LinearActor(), _SumCritic())
    batch = TensorDict({
        "agents": {"observation": torch.ones(1, 2, 3), "action": torch.full((1, 2, 3), 0.5)},
        "next": {"agents": {"observation": torch.ones(1, 2, 3), "reward": torch.zeros(1, 2, 1)},
                 "terminated": torch.tensor([[True]])},
    }, batch_size=[1])
    out = MADDPGLoss(policy, gamma=0.5)(batch)
    assert out["loss_actor"].item() == pytest.approx(-11.7)
    assert out["q_value"].item() == pytest.approx((9.0 + 18.0) / 2)  # Q(o, a) = c_i * (6 + 3)


def test_multiagent_gae_hook_on_the_torch_backend_as_on_gpu(monkeypatch):
    # GPU batches take the torch path (gae on time-last views), not the kernel nor its numpy twin
    import rlrun.objectives.gae as gae_module

    monkeypatch.setattr(gae_module, "_numba_kernel", lambda: None)
    monkeypatch.setattr(gae_module, "SMALL", 0)
    torch.manual_seed(0)
    n, steps, agents = 2, 5, 3
    policy = group_actor_critic(group_spec(agents), hidden=[8], centralised=True)
    terminated = torch.zeros(n, steps, 1, dtype=torch.bool)
    terminated[0, 2] = True
    batch = TensorDict({
        "agents": {"observation": torch.randn(n, steps, agents, 4)},
        "next": {"agents": {"observation": torch.randn(n, steps, agents, 4),
                            "reward": torch.randn(n, steps, agents, 1)},
                 "terminated": terminated, "done": terminated.clone()},
    }, batch_size=[n, steps])
    hook = GAE(gamma=0.9, lmbda=0.8, group="agents")
    hook.pre_epoch(types.SimpleNamespace(policy=policy, batches=1), batch)
    with torch.no_grad():
        value = policy.value(batch["agents", "observation"])
        next_value = policy.value(batch["next", "agents", "observation"])
    adv, target = _reference_gae(batch["next", "agents", "reward"].squeeze(-1), value, next_value,
                                 terminated.squeeze(-1), terminated.squeeze(-1), 0.9, 0.8)
    torch.testing.assert_close(batch["agents", "advantage"], adv)
    torch.testing.assert_close(batch["agents", "value_target"], target)


def test_multiagent_gae_declares_exactly_what_it_reads_and_writes():
    reads = ("agents.observation", "next.agents.observation", "next.agents.reward", "next.terminated",
             "next.done")
    writes = ("agents.advantage", "agents.value_target")
    hook = GAE(gamma=0.9, group="agents")
    assert hook.io() == {"pre_epoch": (reads, writes)}
    # a batch with only the declared inputs is enough, and gains only the declared outputs
    batch = TensorDict({
        "agents": {"observation": torch.randn(2, 3, 3, 4)},
        "next": {"agents": {"observation": torch.randn(2, 3, 3, 4), "reward": torch.randn(2, 3, 3, 1)},
                 "terminated": torch.zeros(2, 3, 1, dtype=torch.bool),
                 "done": torch.zeros(2, 3, 1, dtype=torch.bool)}}, batch_size=[2, 3])
    before = {".".join(k) for k in batch.keys(True, True)}
    hook.pre_epoch(types.SimpleNamespace(policy=group_actor_critic(SPEC, hidden=[8]), batches=1), batch)
    assert {".".join(k) for k in batch.keys(True, True)} - before == set(writes)
    assert before == set(reads)


def test_maddpg_and_the_gae_hook_default_to_their_config_values():
    assert MADDPGLoss(GroupPolicy(_LinearActor(), _SumCritic()), gamma=0.9).tau == 0.005  # conf/loss/maddpg
    hook = GAE(gamma=0.99, group="agents")
    assert (hook.lmbda, hook.every_epoch) == (0.95, True)  # recomputed with each epoch's critic unless told


vmas = pytest.importorskip("vmas")


def test_vmas_collector_batches_follow_the_group_layout_and_count_team_returns():
    from rlrun.collectors.sync import SyncCollector
    from rlrun.collectors.vmas import GROUP_COLLECTED_KEYS
    from rlrun.envs.vmas import VmasEnv

    env = VmasEnv("navigation", num_envs=2, max_steps=5, seed=0)
    policy = group_actor_critic(env.spec, hidden=[8])
    coll = SyncCollector(env, policy.behaviour(), frames_per_batch=20, total_frames=40, seed=3)
    batches = list(coll)
    assert len(batches) == 2 and coll.frames == 40
    batch = batches[0]
    assert batch.batch_size == (2, 10)
    keys = {k if isinstance(k, str) else ".".join(k)
            for k in batch.keys(include_nested=True, leaves_only=True)}
    assert keys == set(GROUP_COLLECTED_KEYS) | {"agents.sample_log_prob"}
    assert batch["agents", "observation"].shape == (2, 10, 3, 18)
    assert batch["agents", "action"].shape == (2, 10, 3, 2)
    assert batch["agents", "sample_log_prob"].shape == (2, 10, 3)
    assert batch["next", "agents", "reward"].shape == (2, 10, 3, 1)
    assert batch["next", "done"].shape == (2, 10, 1)
    assert batch["state"].shape == (2, 10, 54)
    torch.testing.assert_close(batch["state"], batch["agents", "observation"].flatten(-2))
    # 5-step episodes: truncated (time limit) at steps 4 and 9, never terminated here
    ends = batch["next", "truncated"].squeeze(-1)
    assert ends.nonzero()[:, 1].tolist() == [4, 9, 4, 9]
    # within an episode, the next observation is the following step's observation
    obs, nxt = batch["agents", "observation"], batch["next", "agents", "observation"]
    assert torch.equal(nxt[:, :4], obs[:, 1:5]) and not torch.equal(nxt[:, 4], obs[:, 5])
    assert batch["collector", "traj_ids"].tolist() == [[0] * 5 + [2] * 5, [1] * 5 + [3] * 5]
    returns, lengths = coll.pop_episode_stats()
    team = torch.cat([b["next", "agents", "reward"].mean((-2, -1)) for b in batches], 1)  # [2, 20]
    expected = team.view(2, 4, 5).sum(-1).T.flatten()  # episodes in step order, then sub-env order
    assert returns == pytest.approx(expected.tolist(), abs=1e-5) and lengths == [5] * 8


def test_agent_layout_misfits_name_fixes_computed_from_the_presets_and_registry():
    from rlrun.core.agent_groups import check_agent_groups

    with pytest.raises(ConfigError) as single_on_group:
        check_agent_groups({"env": {"name": "vmas"}, "model": {"name": "actor_critic"},
                            "loss": {"name": "ppo"}})
    # PPO's loss trains either layout: the single-agent model is the misfit, and the fix lists
    # every preset whose model and loss declare agent groups (maa2c is a YAML file, in no list)
    assert single_on_group.value.key == "algo" and "model (actor_critic)" in str(single_on_group.value)
    assert set(re.findall(r"algo=(\w+)", single_on_group.value.fix)) == {
        "mappo", "ippo", "maa2c", "qmix", "vdn", "marl_iql", "maddpg", "iddpg"}
    with pytest.raises(ConfigError) as group_on_single:
        check_agent_groups({"env": {"name": "gym"}, "model": {"name": "group_qnet"},
                            "loss": {"name": "marl_q"}})
    assert group_on_single.value.key == "env"
    assert "env=vmas/navigation" in group_on_single.value.fix and "cartpole" not in group_on_single.value.fix
    check_agent_groups({"env": {"name": "vmas"}, "model": {"name": "group_actor_critic"},
                        "loss": {"name": "a2c"}})  # A2C's loss trains a group too: no error

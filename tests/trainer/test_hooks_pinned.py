"""Hooks pinned by hand-derived values: GAE, target updates, the replay hook's priorities, LR schedule.

Fakes reach the networks as the hooks do, through ``trainer.policy`` (a real ``Policy``).

Expected values come from plain loops written here, never from the code under test.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from tensordict import TensorDict
from torch import nn

from rlrun.algos.dqn import DQNLoss
from rlrun.algos.sac import SACLoss
from rlrun.buffers.factory import make_replay_buffer
from rlrun.core.policy import Policy
from rlrun.core.specs import EnvSpec
from rlrun.trainer.hooks import GAE, LRProgress, OffPolicyReplay, OnPolicyMinibatches, TargetUpdate, dispatch
from rlrun.trainer.loop import Trainer
from rlrun.trainer.optim import make_optimizer

# --- GAE hook ----------------------------------------------------------------------------------


class LinearV(nn.Module):
    """V(s) = w . s."""

    def __init__(self, w):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(w))

    def forward(self, obs):
        return obs @ self.w


def gae_batch() -> TensorDict:
    """Two envs, four steps: env 0 terminates at t=1, env 1 is truncated at t=2."""
    g = torch.Generator().manual_seed(3)
    obs = torch.randn(2, 4, 2, generator=g)
    next_obs = torch.randn(2, 4, 2, generator=g)
    reward = torch.tensor([[1.0, -2.0, 0.5, 3.0], [0.25, 1.5, -1.0, 2.0]])
    term = torch.zeros(2, 4, dtype=torch.bool)
    trunc = torch.zeros(2, 4, dtype=torch.bool)
    term[0, 1] = True
    trunc[1, 2] = True
    return TensorDict({"observation": obs, "next": {
        "observation": next_obs, "reward": reward.unsqueeze(-1), "terminated": term.unsqueeze(-1),
        "truncated": trunc.unsqueeze(-1), "done": (term | trunc).unsqueeze(-1)}}, [2, 4])


def reference_gae(batch: TensorDict, w: list[float], gamma: float, lmbda: float):
    """Plain per-element loop: bootstrap unless terminated, cut the recursion at any episode end."""
    adv = np.zeros((2, 4))
    ret = np.zeros((2, 4))
    for i in range(2):
        running = 0.0
        for t in reversed(range(4)):
            s = batch["observation"][i, t].tolist()
            s2 = batch["next", "observation"][i, t].tolist()
            v = sum(a * b for a, b in zip(s, w))
            v2 = sum(a * b for a, b in zip(s2, w))
            r = float(batch["next", "reward"][i, t])
            terminated = bool(batch["next", "terminated"][i, t])
            done = bool(batch["next", "done"][i, t])
            delta = r + (0.0 if terminated else gamma * v2) - v
            running = delta + (0.0 if done else gamma * lmbda * running)
            adv[i, t], ret[i, t] = running, running + v
    return adv, ret


def gae_trainer(w, batches: int = 1):
    return SimpleNamespace(policy=Policy(None, LinearV(w)), batches=batches)


def test_gae_hook_uses_its_gamma_lambda_termination_and_truncation():
    batch, w = gae_batch(), [0.5, -1.5]
    GAE(gamma=0.9, lmbda=0.7).pre_epoch(gae_trainer(w), batch)
    adv, ret = reference_gae(batch, w, 0.9, 0.7)
    np.testing.assert_allclose(batch["advantage"].numpy(), adv, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(batch["value_target"].numpy(), ret, rtol=1e-5, atol=1e-6)
    # the two ends matter: treating truncation as termination, or ignoring either, changes them
    term_as_done, _ = reference_gae(batch.clone().set(("next", "terminated"), batch["next", "done"]),
                                    w, 0.9, 0.7)
    assert not np.allclose(term_as_done, adv)


def test_gae_hook_on_the_torch_backend_as_on_gpu(monkeypatch):
    # GPU batches take gae's torch loop, not the numba kernel (which reshapes its inputs by size)
    import rlrun.objectives.gae as gae_module

    monkeypatch.setattr(gae_module, "_numba_kernel", lambda: None)
    monkeypatch.setattr(gae_module, "SMALL", 0)  # nor the kernel's numpy twin that small batches take
    batch, w = gae_batch(), [0.5, -1.5]
    GAE(gamma=0.9, lmbda=0.7).pre_epoch(gae_trainer(w), batch)
    adv, ret = reference_gae(batch, w, 0.9, 0.7)
    assert batch["advantage"].shape == batch.batch_size
    np.testing.assert_allclose(batch["advantage"].numpy(), adv, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(batch["value_target"].numpy(), ret, rtol=1e-5, atol=1e-6)


def test_gae_hook_reads_and_writes_through_its_key_map():
    # the same batch under other names gives the same numbers, written where the map says
    batch, w = gae_batch(), [0.5, -1.5]
    renamed = TensorDict({"obs": batch["observation"], "obs2": batch["next", "observation"],
                          "r": batch["next", "reward"], "term": batch["next", "terminated"],
                          "end": batch["next", "done"]}, [2, 4])
    keys = {"observation": "obs", "next_observation": "obs2", "reward": "r", "terminated": "term",
            "done": "end", "advantage": "out.adv", "value_target": "out.ret"}
    hook = GAE(gamma=0.9, lmbda=0.7, keys=keys)
    assert hook.io() == {"pre_epoch": (("obs", "obs2", "r", "term", "end"), ("out.adv", "out.ret"))}
    hook.pre_epoch(gae_trainer(w), renamed)
    adv, ret = reference_gae(batch, w, 0.9, 0.7)
    np.testing.assert_allclose(renamed["out", "adv"].numpy(), adv, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(renamed["out", "ret"].numpy(), ret, rtol=1e-5, atol=1e-6)


def test_gae_hook_on_a_group_with_per_agent_episode_ends():
    # group keys by `group`, per-agent flags by the key map; agent i's data is env row i of gae_batch
    single, w = gae_batch(), [0.5, -1.5]
    moved = {k: single.get(k).transpose(0, 1).unsqueeze(0)  # [1 env, 4 steps, 2 agents, ...]
             for k in (("observation",), ("next", "observation"), ("next", "reward"), ("next", "terminated"),
                       ("next", "done"))}
    batch = TensorDict({"team": {"observation": moved["observation",]},
                        "next": {"team": {"observation": moved["next", "observation"],
                                          "reward": moved["next", "reward"],
                                          "terminated": moved["next", "terminated"],
                                          "done": moved["next", "done"]}}}, [1, 4])
    hook = GAE(gamma=0.9, lmbda=0.7, group="team",
               keys={"terminated": "next.team.terminated", "done": "next.team.done"})
    assert hook.io()["pre_epoch"] == (
        ("team.observation", "next.team.observation", "next.team.reward", "next.team.terminated",
         "next.team.done"), ("team.advantage", "team.value_target"))
    hook.pre_epoch(gae_trainer(w), batch)
    adv, ret = reference_gae(single, w, 0.9, 0.7)
    assert batch["team", "advantage"].shape == (1, 4, 2)
    np.testing.assert_allclose(batch["team", "advantage"][0].T.numpy(), adv, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(batch["team", "value_target"][0].T.numpy(), ret, rtol=1e-5, atol=1e-6)


def test_gae_hook_names_an_unknown_key_role():
    from rlrun.core.errors import ConfigError
    from rlrun.core.registry import build

    with pytest.raises(ConfigError) as info:
        build("hook", {"name": "gae", "keys": {"rewards": "next.r"}}, key="hooks.gae", gamma=0.9)
    assert info.value.key == "hooks.gae.keys.rewards" and "reward" in info.value.fix
    hook = build("hook", {"name": "gae", "group": "agents"}, key="hooks.gae", gamma=0.9)
    assert hook.keys["reward"] == "next.agents.reward" and hook.keys["done"] == "next.done"


def test_gae_hook_recomputes_each_epoch_with_the_current_critic():
    batch, w = gae_batch(), [0.5, -1.5]
    trainer, hook = gae_trainer(w), GAE(gamma=0.95, lmbda=0.9)
    hook.pre_epoch(trainer, batch)
    with torch.no_grad():
        trainer.policy.critic.w.copy_(torch.tensor([-1.0, 2.0]))  # as an epoch's update would
    hook.pre_epoch(trainer, batch)
    adv, ret = reference_gae(batch, [-1.0, 2.0], 0.95, 0.9)
    np.testing.assert_allclose(batch["advantage"].numpy(), adv, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(batch["value_target"].numpy(), ret, rtol=1e-5, atol=1e-6)


def test_gae_hook_once_per_batch_keeps_the_first_estimate_until_the_next_batch():
    batch, w = gae_batch(), [0.5, -1.5]
    trainer, hook = gae_trainer(w), GAE(gamma=0.95, lmbda=0.9, every_epoch=False)
    hook.pre_epoch(trainer, batch)
    with torch.no_grad():
        trainer.policy.critic.w.copy_(torch.tensor([-1.0, 2.0]))
    hook.pre_epoch(trainer, batch)  # second epoch of the same batch: unchanged
    adv, _ = reference_gae(batch, w, 0.95, 0.9)
    np.testing.assert_allclose(batch["advantage"].numpy(), adv, rtol=1e-5, atol=1e-6)
    trainer.batches = 2  # next batch: recomputed with the new critic
    hook.pre_epoch(trainer, batch)
    adv, _ = reference_gae(batch, [-1.0, 2.0], 0.95, 0.9)
    np.testing.assert_allclose(batch["advantage"].numpy(), adv, rtol=1e-5, atol=1e-6)


def test_gae_hook_defaults_are_the_papers():
    """lambda 0.95, recomputed every epoch; the discount is the run's one ``gamma`` (0.99 by default)."""
    hook = GAE(gamma=0.9)
    assert (hook.gamma, hook.lmbda, hook.every_epoch) == (0.9, 0.95, True)
    with pytest.raises(TypeError):
        GAE()  # no discount of its own: the builder passes the run's gamma (tests/conf pins 0.99)


# --- target updates ----------------------------------------------------------------------------


class CountingLoss:
    def __init__(self):
        self.updates: list[int] = []
        self.step = 0

    def update_targets(self):
        self.updates.append(self.step)


@pytest.mark.parametrize(("every", "expected"), [(1, [1, 2, 3, 4, 5, 6, 7]), (3, [3, 6])])
def test_target_update_hook_calls_the_loss_every_n_optimiser_steps(every, expected):
    loss = CountingLoss()
    trainer, hook = SimpleNamespace(loss=loss, optim_steps=0), TargetUpdate(every)
    post_optim = dispatch(hook, "post_optim")  # as the trainer calls it: before counting the step
    for step in range(1, 8):
        loss.step = step
        post_optim(trainer)
        trainer.optim_steps += 1
    assert loss.updates == expected
    assert hook.state_dict() == {}  # nothing counted by hand: the trainer's clock says when


def test_target_update_follows_the_restored_optimiser_step_count():
    loss = CountingLoss()
    loss.step = 1
    dispatch(TargetUpdate(3), "post_optim")(SimpleNamespace(loss=loss, optim_steps=2))
    assert loss.updates == [1]  # the third step overall, not the third after the restore


@pytest.mark.parametrize(("interval", "expected"), [
    (178, [200, 400, 600, 800, 900]),
    (100, [100, 200, 300, 400, 500, 600, 700, 800, 900]),
])
def test_target_update_by_frames_copies_before_the_batch_that_crosses_a_multiple(interval, expected):
    """Batches of 100 frames: a multiple of 178 falls in (100, 200], (300, 400], (500, 600], (700, 800]
    and (800, 900] (178, 356, 534, 712, 890); the copy comes before that batch's updates, as SB3's
    callback copies during collection. Stateless: the trainer's clock says when."""
    from rlrun.core.registry import build

    loss = CountingLoss()
    loss.has_targets = True
    node = {"name": "target_update", "interval_updates": None, "interval_frames": interval}
    hook = build("hook", node, loss=loss)
    process_batch, post_optim = dispatch(hook, "process_batch"), dispatch(hook, "post_optim")
    trainer = SimpleNamespace(loss=loss, optim_steps=0, clock=0, last_clock=0,
                              budget=SimpleNamespace(unit="frames"))
    for clock in range(100, 1000, 100):
        trainer.last_clock, trainer.clock, loss.step = clock - 100, clock, clock
        assert process_batch(trainer, "batch") == "batch"  # a chained point hands the batch on
        for _ in range(50):
            post_optim(trainer)  # never moves the targets mid-batch
            trainer.optim_steps += 1
    assert loss.updates == expected and hook.state_dict() == {}


def test_target_update_counts_in_one_unit_and_frames_only_where_frames_are_the_clock():
    from rlrun.core.errors import ConfigError
    from rlrun.core.registry import build

    loss = CountingLoss()
    loss.has_targets = True
    for node, key in [({"interval_frames": 500}, "hooks.target_update.interval_frames"),
                      ({"interval_updates": None}, "hooks.target_update.interval_updates")]:
        with pytest.raises(ConfigError) as info:
            build("hook", {"name": "target_update", **node}, key="hooks.target_update", loss=loss)
        assert info.value.key == key and "interval_updates" in info.value.fix
    hook = build("hook", {"name": "target_update", "interval_updates": None, "interval_frames": 5},
                 loss=loss)
    offline = SimpleNamespace(loss=loss, optim_steps=10, clock=10, last_clock=0,
                              budget=SimpleNamespace(unit="updates"))
    with pytest.raises(ConfigError) as info:
        dispatch(hook, "process_batch")(offline, "batch")
    assert info.value.key == "hooks.target_update.interval_frames" and loss.updates == []


# --- the replay hook's importance weights and priority updates, through real losses -----------


class TableQ(nn.Module):
    """Q(s, .) = s @ W for a discrete action (W is [obs_dim, actions])."""

    def __init__(self, w):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(w))

    def forward(self, obs):
        return obs @ self.w


def replay_transitions(n: int, discrete: bool) -> TensorDict:
    g = torch.Generator().manual_seed(11)
    return TensorDict({
        "observation": torch.randn(n, 2, generator=g),
        "action": (torch.randint(2, (n,), generator=g) if discrete
                   else torch.rand(n, 1, generator=g) * 2 - 1),
        "next": {"observation": torch.randn(n, 2, generator=g),
                 "reward": torch.randn(n, 1, generator=g) * 3,
                 "terminated": torch.rand(n, 1, generator=g) < 0.3},
    }, [n])


def prioritized_trainer(loss, data: TensorDict, alpha, beta):
    buffer = make_replay_buffer(capacity=16, batch_size=6, sampler="prioritized", alpha=alpha, beta=beta)
    trainer = SimpleNamespace(buffer=buffer, loss=loss)
    hook = OffPolicyReplay()
    hook.process_batch(trainer, data)
    sampler = buffer._sampler
    # distinct priorities, so that the importance weights are not all one; the smallest in the
    # right half of the tree, so that the weights' normaliser must be the root's minimum
    sampler.update_priority(torch.arange(len(data)), torch.linspace(2.0, 0.1, len(data)))
    return trainer, hook, sampler


def expected_weights(sampler, index, beta):
    leaves = sampler.leaf_priorities()
    stored = leaves[: 10]
    return [float((leaves[i] / stored.min()) ** -beta) for i in index.tolist()]


def test_dqn_importance_weights_and_priority_updates_end_to_end():
    gamma, eps, alpha, beta = 0.9, 1e-6, 0.7, 0.5  # not the defaults, so that both must reach the sampler
    w = [[1.0, -0.5], [0.25, 2.0]]
    loss = DQNLoss(Policy(None, TableQ(w)), gamma=gamma, double=False, loss="huber")
    with torch.no_grad():
        loss.target_critic.w.copy_(torch.tensor([[0.5, 1.0], [-1.0, 0.75]]))  # differs from online
    data = replay_transitions(10, discrete=True)
    trainer, hook, sampler = prioritized_trainer(loss, data, alpha, beta)
    sub = hook.process_optim_batch(trainer, data)
    weights = expected_weights(sampler, sub["index"], beta)
    np.testing.assert_allclose(sub["priority_weight"].numpy(), weights, rtol=1e-5)
    assert len(set(np.round(weights, 6))) > 1
    out = loss(sub)
    hook.post_loss(trainer, sub, out)

    tw = [[0.5, 1.0], [-1.0, 0.75]]
    per, td = [], {}
    for k, i in enumerate(sub["index"].tolist()):
        s, s2 = data["observation"][i].tolist(), data["next", "observation"][i].tolist()
        a = int(data["action"][i])
        q = s[0] * w[0][a] + s[1] * w[1][a]
        q_next = max(s2[0] * tw[0][b] + s2[1] * tw[1][b] for b in (0, 1))  # target net's own max
        bootstrap = 0.0 if bool(data["next", "terminated"][i]) else gamma * q_next
        y = float(data["next", "reward"][i]) + bootstrap
        err = abs(q - y)
        per.append(weights[k] * (0.5 * err**2 if err < 1 else err - 0.5))
        td[i] = err
    assert out["loss_critic"].item() == pytest.approx(sum(per) / len(per), rel=1e-5)
    leaves = sampler.leaf_priorities()
    for i, err in td.items():
        assert leaves[i].item() == pytest.approx((err + eps) ** alpha, rel=1e-5)
    untouched = sorted(set(range(10)) - set(td))
    np.testing.assert_allclose(leaves[untouched].numpy(),
                               ((torch.linspace(2.0, 0.1, 10)[untouched].double() + eps) ** alpha).numpy(),
                               rtol=1e-6)


class FixedActor(nn.Module):
    """sample(obs): action 0.5, log-prob 0.5 * obs[:, 0]."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(0.5))

    def sample(self, obs):
        return self.w.expand(obs.shape[0], 1), self.w * obs[:, 0]


class LinearTwinQ(nn.Module):
    """Q_k(s, a) = c_k * (sum(s) + sum(a))."""

    def __init__(self, c):
        super().__init__()
        self.c = nn.Parameter(torch.tensor(c))

    def forward(self, obs, action):
        return self.c[:, None] * (obs.sum(-1) + action.sum(-1))[None]


def test_sac_importance_weights_and_priority_updates_end_to_end():
    gamma, alpha_t, eps, alpha, beta = 0.9, 0.2, 1e-6, 0.7, 0.5
    spec = EnvSpec((2,), np.dtype(np.float32), False, 1)
    loss = SACLoss(Policy(FixedActor(), LinearTwinQ([1.0, 2.0])), spec, gamma=gamma, init_alpha=alpha_t)
    with torch.no_grad():
        loss.target_critic.c.copy_(torch.tensor([0.5, -1.5]))  # target twins differ from online
    data = replay_transitions(10, discrete=False)
    trainer, hook, sampler = prioritized_trainer(loss, data, alpha, beta)
    sub = hook.process_optim_batch(trainer, data)
    weights = expected_weights(sampler, sub["index"], beta)
    out = loss(sub)
    hook.post_loss(trainer, sub, out)
    terms, td = [0.0, 0.0], {}
    for k, i in enumerate(sub["index"].tolist()):
        s, s2 = data["observation"][i].tolist(), data["next", "observation"][i].tolist()
        a = float(data["action"][i])
        q_next = min(c * (sum(s2) + 0.5) for c in (0.5, -1.5))
        soft = q_next - alpha_t * 0.5 * s2[0]  # the entropy term of the target
        y = float(data["next", "reward"][i]) + (0.0 if bool(data["next", "terminated"][i]) else gamma * soft)
        errs = [c * (sum(s) + a) - y for c in (1.0, 2.0)]
        for j in (0, 1):
            terms[j] += weights[k] * errs[j] ** 2
        td[i] = max(abs(e) for e in errs)
    n = len(sub)
    assert out["loss_critic"].item() == pytest.approx(0.5 * (terms[0] + terms[1]) / n, rel=1e-5)
    leaves = sampler.leaf_priorities()
    for i, err in td.items():
        assert leaves[i].item() == pytest.approx((err + eps) ** alpha, rel=1e-5)


def test_replay_hook_leaves_priorities_alone_without_weights():
    """A uniform buffer's samples carry no weights: post_loss must not touch the sampler."""
    buffer = make_replay_buffer(capacity=16, batch_size=4, sampler="uniform")
    calls = []
    buffer.update_priority = lambda *a: calls.append(a)
    hook, trainer = OffPolicyReplay(), SimpleNamespace(buffer=buffer)
    hook.process_batch(trainer, replay_transitions(8, discrete=True))
    sub = hook.process_optim_batch(trainer, None)
    hook.post_loss(trainer, sub, {"td_error": torch.ones(4)})
    assert calls == [] and len(buffer) == 8


def test_on_policy_replay_refills_with_the_epoch_batch():
    buffer = make_replay_buffer(capacity=8, batch_size=4, sampler="without_replacement")
    hook, trainer = OnPolicyMinibatches(), SimpleNamespace(buffer=buffer)
    first = TensorDict({"x": torch.arange(8.0)}, [8])
    assert hook.process_batch(trainer, first) is first and len(buffer) == 0  # nothing until an epoch
    hook.pre_epoch(trainer, first)
    second = TensorDict({"x": torch.arange(8.0) + 100}, [8])
    hook.pre_epoch(trainer, second)  # the buffer holds this batch only
    seen = torch.cat([hook.process_optim_batch(trainer, None)["x"] for _ in range(2)])
    assert sorted(seen.tolist()) == list(range(100, 108))


# --- linear LR schedule ------------------------------------------------------------------------


def test_linear_lr_hook_anneals_with_frames_over_total_frames():
    params = {"actor": [nn.Parameter(torch.zeros(1))], "critic": [nn.Parameter(torch.zeros(1))]}
    opt = make_optimizer(params, lr=1e-3, lr_schedule="linear", groups={"critic": {"lr": 4e-3}})
    # a real Trainer: the hook anneals with its progress, frames / total_frames
    collector = SimpleNamespace(frames=300, total_frames=1200)
    trainer = Trainer(collector, None, opt, {})
    LRProgress().post_steps(trainer)
    assert opt.optimizers["actor"].param_groups[0]["lr"] == pytest.approx(1e-3 * 0.75)
    assert opt.optimizers["critic"].param_groups[0]["lr"] == pytest.approx(4e-3 * 0.75)
    collector.frames = 1200
    LRProgress().post_steps(trainer)
    assert opt.optimizers["actor"].param_groups[0]["lr"] == 0.0


# --- evaluation: the deterministic act, the env's raw rewards, each sub-env's quota -----------


class TwoFacedActor:
    """``act`` (deterministic) picks action 1 (reward +(step + 1)); every exploring path picks 0."""

    head = "categorical"
    explore_keys = ("action",)

    def act(self, obs):
        return torch.ones(obs.shape[0], dtype=torch.long)

    def explore(self, obs):
        return {"action": torch.zeros(obs.shape[0], dtype=torch.long)}

    def __call__(self, obs):
        return {"action": torch.zeros(obs.shape[0], dtype=torch.long)}

    def sample(self, obs):
        return torch.zeros(obs.shape[0], dtype=torch.long), torch.zeros(obs.shape[0])

    def dist(self, obs):
        raise AssertionError("evaluation must not build the exploring distribution")


def two_faced_policy() -> Policy:
    """A ``Policy`` whose ``act`` picks 1 and whose exploring paths (the actor's own and an
    exploration component's, as epsilon-greedy would be) pick 0."""
    policy = Policy(TwoFacedActor())
    policy.exploration = lambda obs: {"action": torch.zeros(obs.shape[0], dtype=torch.long)}
    return policy


@pytest.mark.parametrize(("episodes", "returns"), [(2, [3.0, 15.0]), (4, [3.0, 3.0, 15.0, 15.0])])
def test_evaluation_uses_the_deterministic_act_raw_rewards_and_per_env_quotas(
        make_counter_env, episodes, returns):
    from rlrun.trainer.evaluation import Evaluation, Evaluator

    # sub-env 0 (marker 10, even) ends after 2 steps: return 1 + 2; sub-env 1 after 5: 1 + ... + 5.
    # The first episodes to end would be 3, 3, 15, 3: each sub-env's quota must hold.
    env = make_counter_env(num_envs=2, terminate_at=[2, 5])
    logged, seen = [], []
    trainer = SimpleNamespace(policy=two_faced_policy(), log=logged.append,
                              call_hooks=lambda point, m: seen.append((point, m)))
    evaluation = Evaluation(Evaluator(env, episodes, seed=10), interval=0)
    for _ in range(2):  # every evaluation resets with the same seed: the same result
        result = evaluation.run(trainer)
        assert result["eval/episode_return"] == pytest.approx(np.mean(returns))
        assert result["eval/episode_return_std"] == pytest.approx(np.std(returns))
        assert result["eval/episodes"] == episodes
    assert logged[-1] is evaluation.last and seen[-1] == ("post_eval", evaluation.last)


# --- observation statistics: updated from the whole batch, after training on it ----------------


def test_observation_stats_update_after_the_optimisation_from_the_batch():
    from rlrun.modules.networks import ObservationNormalizer
    from rlrun.trainer.hooks import ObservationStats

    norm = ObservationNormalizer((2,))
    trainer = SimpleNamespace(policy=Policy(None, None, norm))
    hook = ObservationStats()
    obs = torch.tensor([[[1.0, 10.0], [3.0, 20.0]], [[5.0, 30.0], [7.0, 40.0]]])  # [envs, T, dim]
    hook.process_batch(trainer, TensorDict({"observation": obs}, [2, 2]))
    assert torch.equal(norm.mean, torch.zeros(2))  # training uses the statistics it collected with
    hook.post_steps(trainer)
    torch.testing.assert_close(norm.mean, torch.tensor([4.0, 25.0]), atol=1e-5, rtol=1e-6)
    torch.testing.assert_close(norm.var, torch.tensor([5.0, 125.0]), atol=1e-4, rtol=1e-5)  # population var
    hook.post_steps(trainer)  # nothing pending: no second update from the same batch
    assert float(norm.count) == pytest.approx(4.0, abs=1e-6)


def test_evaluator_splits_an_uneven_count_of_episodes_over_sub_envs(make_counter_env):
    from rlrun.trainer.evaluation import Evaluator

    # 3 episodes on 2 sub-envs: quotas 2 and 1; returns 3 (sub-env 0, twice) and 15 (sub-env 1)
    env = make_counter_env(num_envs=2, terminate_at=[2, 5])
    evaluator = Evaluator(env, 3, seed=10)
    assert evaluator.quota.tolist() == [2, 1]
    assert sorted(evaluator.evaluate(TwoFacedActor().act).tolist()) == [3.0, 3.0, 15.0]


class ConstantEvaluator:
    def __init__(self, value: float):
        self.value, self.calls = value, 0

    def evaluate(self, act, context=None):
        self.calls += 1
        return np.array([self.value, self.value])


class EvalTrainer(SimpleNamespace):
    def __init__(self, frames: int, total: int):
        super().__init__(frames=frames, collector=SimpleNamespace(total_frames=total),
                         policy=two_faced_policy(), stops=[], logged=[], diverged=None, last_clock=0)

    @property
    def clock(self):
        return self.frames

    @property
    def done(self):
        return self.frames >= self.collector.total_frames

    def log(self, metrics):
        self.logged.append(metrics)

    def call_hooks(self, point, metrics):
        pass

    def request_stop(self, reason, interrupted=True):
        self.stops.append((reason, interrupted))


@pytest.mark.parametrize(("value", "stops"), [(199.0, []), (200.0, [("eval return reached 200.0", False)])])
def test_evaluation_stops_a_run_that_reaches_its_target_as_a_normal_end(value, stops):
    from rlrun.trainer.evaluation import Evaluation

    evaluation = Evaluation(ConstantEvaluator(value), interval=10, target_return=200.0)
    trainer = EvalTrainer(frames=10, total=100)
    dispatch(evaluation, "post_steps_log")(trainer, None)
    assert trainer.stops == stops


def test_evaluation_every_batch_with_interval_one_and_schedule_state():
    from rlrun.trainer.evaluation import Evaluation

    evaluator = ConstantEvaluator(1.0)
    evaluation = Evaluation(evaluator, interval=1)
    trainer = EvalTrainer(frames=0, total=100)
    for frames in (3, 6, 9):
        trainer.frames = frames
        dispatch(evaluation, "post_steps_log")(trainer, None)
        trainer.last_clock = frames
    assert evaluator.calls == 3
    seconds = evaluation.seconds
    assert 0 < seconds == trainer.logged[-1]["eval/time_total_s"] < 60  # a duration, not a clock reading
    assert trainer.logged[0]["eval/time_total_s"] < seconds  # accumulated over evaluations
    restored = Evaluation(ConstantEvaluator(1.0), interval=1)
    restored.load_state_dict(evaluation.state_dict())
    assert (restored.last, restored.seconds) == (evaluation.last, seconds)


@pytest.mark.parametrize(("on_policy", "kind"), [(True, OnPolicyMinibatches), (False, OffPolicyReplay)])
def test_the_buffer_hook_follows_the_losss_on_policy_declaration(on_policy, kind):
    """No replay mode to get wrong: the loss's declaration picks the hook, which stores what it reads."""
    from rlrun.trainer.builtins import learning_hooks

    loss = SimpleNamespace(on_policy=on_policy, reads=("observation", "action", "advantage"),
                           parameters=lambda: [])
    hook, _ = learning_hooks(loss)["buffer"]
    assert type(hook) is kind and hook.stores == loss.reads


def test_an_on_policy_loss_with_a_replay_buffer_is_a_config_error_naming_the_key():
    from rlrun.core.errors import ConfigError
    from rlrun.lifecycle.build import _buffer_config

    cfg = OmegaConf.create({"buffer": {"name": "replay", "sampler": "uniform", "capacity": 1000,
                                       "batch_size": 32}, "collector": {"frames_per_batch": 64}})
    with pytest.raises(ConfigError) as err:
        _buffer_config(cfg, SimpleNamespace(on_policy=True))
    assert err.value.key == "buffer" and "replay" in str(err.value)


# --- training statistics: per-batch averages of the losses, episode returns, fps --------------


def test_train_stats_average_losses_over_the_batch_and_log_returns_and_fps():
    from rlrun.trainer.hooks import TrainStats

    logged = []
    pops = iter([([10.0, 20.0], [5, 7]), ([], []), ([30.0], [9])])
    trainer = SimpleNamespace(log=logged.append, frames=0, wall_time=0.0, optim_steps=0,
                              collector=SimpleNamespace(pop_episode_stats=lambda: next(pops)),
                              optimizer=SimpleNamespace(last_grad_norms={"actor": 0.5}))
    stats = TrainStats()
    for batch, losses in enumerate([[1.0, 3.0], [], [4.0]]):
        for v in losses:
            stats.post_loss(trainer, None, {"loss_critic": torch.tensor(v), "q_value": torch.tensor(2 * v),
                                            "td_error": torch.ones(3)})
        trainer.frames, trainer.wall_time, trainer.optim_steps = 100 * (batch + 1), 2.0 * (batch + 1), batch
        stats.post_steps_log(trainer, None)
    first, second, third = logged
    assert first["loss/critic"] == 2.0 and first["train/q_value"] == 4.0 and "train/td_error" not in first
    assert first["train/episode_return"] == 15.0 and first["train/episode_length"] == 6.0
    assert "time/fps" not in first  # no earlier batch to measure from
    assert "loss/critic" not in second and "train/episode_return" not in second
    assert second["time/fps"] == 100 / 2.0 and second["train/grad_norm_actor"] == 0.5
    assert third["loss/critic"] == 4.0 and third["train/optim_steps"] == 2.0 and third["time/wall_s"] == 6.0
    assert stats.recent_returns == [10.0, 20.0, 30.0]
    for _ in range(3):  # the window keeps the last 100 returns
        stats.post_steps_log(SimpleNamespace(**{**vars(trainer), "collector": SimpleNamespace(
            pop_episode_stats=lambda: ([float(i) for i in range(40)], [1] * 40))}), None)
    assert stats.recent_returns == [float(i) for i in range(20, 40)] + [float(i) for i in range(40)] * 2


def test_train_stats_log_the_mean_policy_lag_of_version_tagged_batches():
    from tensordict import TensorDict

    from rlrun.trainer.hooks import TrainStats

    logged = []
    trainer = SimpleNamespace(log=logged.append, frames=0, wall_time=0.0, optim_steps=0,
                              collector=SimpleNamespace(pop_episode_stats=lambda: ([], []), policy_version=7),
                              optimizer=SimpleNamespace(last_grad_norms={}))
    stats = TrainStats()
    # two rollouts of 3 steps, collected by versions 4 and 6: lags 3 and 1, mean 2
    versions = torch.tensor([[4, 4, 4], [6, 6, 6]])
    tagged = TensorDict({"collector": {"policy_version": versions}}, [2, 3])
    stats.pre_steps_log(trainer, tagged)
    trainer.collector.policy_version = 8  # the push after the update must not count
    stats.post_steps_log(trainer, tagged)
    stats.pre_steps_log(trainer, TensorDict({"observation": torch.zeros(2, 3)}, [2, 3]))  # sync: untagged
    stats.post_steps_log(trainer, None)
    assert logged[0]["collector/policy_lag"] == 2.0
    assert "collector/policy_lag" not in logged[1]

"""IMPALA: the loss against hand-computed terms, the V-trace hook against float64 reference loops."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rlrun.algos.impala import IMPALALoss, VTrace
from rlrun.core.errors import ConfigError
from rlrun.core.specs import EnvSpec
from rlrun.modules.models import actor_critic

N, T, OBS, ACTIONS = 3, 7, 4, 3
GAMMA = 0.9


def models():
    torch.manual_seed(0)
    return actor_critic(EnvSpec((OBS,), np.dtype(np.float32), True, ACTIONS), hidden=[16])


def rollout(policy, behaviour_offset: float = 0.0, seed: int = 1) -> TensorDict:
    """``[N, T]`` steps; row 0 terminates at t=2, row 1 is truncated at t=3 (episodes continue after)."""
    g = torch.Generator().manual_seed(seed)
    obs, next_obs = torch.randn(N, T, OBS, generator=g), torch.randn(N, T, OBS, generator=g)
    action = torch.randint(ACTIONS, (N, T), generator=g)
    terminated = torch.zeros(N, T, 1, dtype=torch.bool)
    truncated = torch.zeros(N, T, 1, dtype=torch.bool)
    terminated[0, 2] = True
    truncated[1, 3] = True
    done = terminated | truncated
    # inside an episode the next observation is the next step's; after an end it is the final one
    inside = ~done[:, :-1, 0]
    next_obs[:, :-1][inside] = obs[:, 1:][inside]
    with torch.no_grad():
        log_pi = policy.actor.dist(obs).log_prob(action)
    # behaviour log-probs: the target's, or shifted by a random per-step amount (a lagging policy)
    log_mu = log_pi + behaviour_offset * torch.randn(N, T, generator=g)
    return TensorDict({
        "observation": obs, "action": action, "sample_log_prob": log_mu,
        "next": {"observation": next_obs, "reward": torch.randn(N, T, 1, generator=g),
                 "terminated": terminated, "truncated": truncated, "done": done},
    }, [N, T])


def run_hook(hook: VTrace, policy, td: TensorDict) -> TensorDict:
    hook.pre_epoch(SimpleNamespace(policy=policy), td)
    return td


def floats(t: torch.Tensor) -> list[list[float]]:
    return t.double().tolist()


def test_loss_terms_are_the_paper_actor_critic_terms():
    policy = models()
    loss = IMPALALoss(policy)  # Table 7's defaults: critic 0.5, entropy 0.01
    g = torch.Generator().manual_seed(2)
    b = 6
    obs, action = torch.randn(b, OBS, generator=g), torch.randint(ACTIONS, (b,), generator=g)
    adv, target = torch.randn(b, generator=g), torch.randn(b, generator=g)
    td = TensorDict({"observation": obs, "action": action, "advantage": adv, "value_target": target}, [b])
    out = loss(td)
    # independently: softmax over the actor's logits, the critic's raw output
    with torch.no_grad():
        logp = torch.log_softmax(policy.actor.net(obs).double(), -1)
        value = policy.critic.net(obs).double().squeeze(-1)
    log_prob_a = logp[torch.arange(b), action]
    entropy = -(logp.exp() * logp).sum(-1).mean()
    expected = {"loss_objective": -(log_prob_a * adv.double()).mean(),
                "loss_critic": 0.5 * 0.5 * ((value - target.double()) ** 2).mean(),
                "loss_entropy": -0.01 * entropy}
    for k, v in expected.items():
        assert out[k].item() == pytest.approx(v.item(), rel=1e-5, abs=1e-7), k
    assert set(out) == {*expected, "entropy"}  # the logged entropy: the bonus's, before its weight
    assert out["entropy"].item() == pytest.approx(entropy.item(), rel=1e-5)
    out["loss_objective"].backward()  # the policy-gradient term moves the actor only
    assert all(p.grad is None or not p.grad.any() for p in policy.critic.parameters())


def test_vtrace_hook_with_target_equal_to_behaviour_gives_lambda_one_returns():
    policy = models()
    td = run_hook(VTrace(GAMMA), policy, rollout(policy))
    with torch.no_grad():
        value = floats(policy.critic.net(td["observation"]).squeeze(-1))
        next_value = floats(policy.critic.net(td["next", "observation"]).squeeze(-1))
    reward = floats(td["next", "reward"].squeeze(-1))
    term, done = td["next", "terminated"].squeeze(-1).tolist(), td["next", "done"].squeeze(-1).tolist()
    for i in range(N):
        # the discounted return to the episode's end, bootstrapped at a truncation or the rollout's end
        ret = [0.0] * T
        for t in reversed(range(T)):
            if term[i][t]:
                ret[t] = reward[i][t]
            elif done[i][t] or t == T - 1:
                ret[t] = reward[i][t] + GAMMA * next_value[i][t]
            else:
                ret[t] = reward[i][t] + GAMMA * ret[t + 1]
        np.testing.assert_allclose(td["value_target"][i].numpy(), ret, rtol=1e-5, atol=1e-5)
        # and the advantage is the one-step TD error against the next target: return - V
        np.testing.assert_allclose(td["advantage"][i].numpy(), np.subtract(ret, value[i]),
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rho_bar,c_bar", [(1.0, 1.0), (2.0, 0.5)])
def test_vtrace_hook_with_lagging_behaviour_and_mid_rollout_truncation(rho_bar, c_bar):
    policy = models()
    td = run_hook(VTrace(GAMMA, rho_bar=rho_bar, c_bar=c_bar), policy, rollout(policy, behaviour_offset=0.7))
    with torch.no_grad():
        log_pi = floats(torch.log_softmax(policy.actor.net(td["observation"]), -1)
                        .gather(-1, td["action"].unsqueeze(-1)).squeeze(-1))
        value = floats(policy.critic.net(td["observation"]).squeeze(-1))
        next_value = floats(policy.critic.net(td["next", "observation"]).squeeze(-1))
    log_mu, reward = floats(td["sample_log_prob"]), floats(td["next", "reward"].squeeze(-1))
    term, done = td["next", "terminated"].squeeze(-1).tolist(), td["next", "done"].squeeze(-1).tolist()
    for i in range(N):
        # the paper's backward recursion, in float64 Python: v_s = V_s + d_s + gamma c_s (v_{s+1} - V_{s+1}),
        # with the episode's end (terminal: no bootstrap; truncated: V of the final obs) cutting the trace
        rho = [math.exp(log_pi[i][t] - log_mu[i][t]) for t in range(T)]
        vs, adv = [0.0] * T, [0.0] * T
        for t in reversed(range(T)):
            boot = 0.0 if term[i][t] else next_value[i][t]
            delta = min(rho_bar, rho[t]) * (reward[i][t] + GAMMA * boot - value[i][t])
            cut = done[i][t] or t == T - 1
            trace = 0.0 if cut else GAMMA * min(c_bar, rho[t]) * (vs[t + 1] - value[i][t + 1])
            vs[t] = value[i][t] + delta + trace
            v_next = boot if cut else vs[t + 1]
            adv[t] = min(rho_bar, rho[t]) * (reward[i][t] + GAMMA * v_next - value[i][t])
        np.testing.assert_allclose(td["value_target"][i].numpy(), vs, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(td["advantage"][i].numpy(), adv, rtol=1e-5, atol=1e-5)


def test_vtrace_hook_refuses_rho_bar_below_c_bar():
    with pytest.raises(ConfigError, match="rho_bar"):
        VTrace(GAMMA, rho_bar=0.5, c_bar=1.0)


def dotted_keys(td: TensorDict) -> set[str]:
    return {k if isinstance(k, str) else ".".join(k) for k in td.keys(True, True)}


def test_vtrace_hook_declares_exactly_what_it_reads_and_writes():
    reads = ("observation", "action", "sample_log_prob", "next.observation", "next.reward", "next.terminated",
             "next.done")
    hook = VTrace(GAMMA)
    assert hook.io() == {"pre_epoch": (reads, ("advantage", "value_target"))}
    # a rollout with only the declared inputs is enough, and gains only the declared outputs
    policy = models()
    td = rollout(policy).select(*(tuple(k.split(".")) for k in reads))
    before = dotted_keys(td)
    assert before == set(reads)
    run_hook(hook, policy, td)
    assert dotted_keys(td) - before == {"advantage", "value_target"}


def test_vtrace_hook_passes_its_clips_and_lambda_to_vtrace():
    from rlrun.objectives.vtrace import vtrace

    g = torch.Generator().manual_seed(3)
    log_rho, reward, value, next_value = (torch.randn(2, 5, generator=g) for _ in range(4))
    terminated = torch.zeros(2, 5, dtype=torch.bool)
    done = terminated.clone()
    done[0, 2] = True
    hook = VTrace(GAMMA, rho_bar=2.0, c_bar=0.5, lmbda=0.7)
    adv, target = hook.estimate(log_rho, reward, value, next_value, terminated, done)
    # vtrace itself is checked against float64 loops in tests/objectives/test_vtrace.py
    vs, expected_adv = vtrace(log_rho, reward, value, next_value, terminated, done, GAMMA, 2.0, 0.5, 0.7)
    torch.testing.assert_close(target, vs)
    torch.testing.assert_close(adv, expected_adv)
    default = VTrace(GAMMA)
    assert (default.rho_bar, default.c_bar, default.lmbda) == (1.0, 1.0, 1.0)  # the paper's


def test_vtrace_error_names_both_clips():
    with pytest.raises(ConfigError) as info:
        VTrace(GAMMA, rho_bar=0.5, c_bar=1.0)
    assert str(info.value) == ("hooks.vtrace.rho_bar: V-trace needs rho_bar >= c_bar, got 0.5 < 1.0\n"
                               "  fix: raise rho_bar or lower c_bar")

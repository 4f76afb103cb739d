"""Offline update throughput: rlrun's IQL loss + ``OptimizerStep`` against a single-file IQL step.

* IQL at HalfCheetah shapes (obs 17, action 6, 256x256 ReLU policy, twin Q and V,
  batch 256, Table 9): rlrun's ``IQLLoss`` + ``OptimizerStep(loss.param_groups())`` +
  ``loss.update_targets()`` + the divergence check, as a run wires them, against a
  CORL-like single-file step: ``nn.Sequential`` networks, three Adams, three backward
  passes (V, then the actor and Q with the new V's ``V(s')``), polyak with
  ``torch._foreach_lerp_``. Same networks, same losses (expectile 0.7, beta 3,
  weights clipped at 100, tanh-Normal log-likelihood of dataset actions).

Both sides read the same pre-made batches (dataset sampling is not timed) and use
torch's default Adam. The ratio is rlrun's throughput over the reference's.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable

import numpy as np
import torch
from tensordict import TensorDict
from torch import Tensor, nn
from torch.distributions import Normal

from rlrun.algos.iql import IQLLoss
from rlrun.benchmarks.common import interleave, median, ratio, table
from rlrun.benchmarks.update import ACT, BATCH, OBS, POOL, _guard, _mlp, sac_batches
from rlrun.envs.gym import EnvSpec
from rlrun.modules.models import actor_twin_q
from rlrun.modules.networks import ValueCritic, mlp
from rlrun.trainer.optim import OptimizerStep

EXPECTILE, BETA, MAX_WEIGHT, GAMMA, TAU = 0.7, 3.0, 100.0, 0.99, 0.005


def iql_batches(seed: int = 0) -> list[TensorDict]:
    """``POOL`` random dataset batches (actions strictly inside (-1, 1), as a tanh policy's)."""
    batches = sac_batches(seed)
    for b in batches:
        b["action"] = b["action"].clamp(-0.999, 0.999)
    return batches


def iql_loss() -> IQLLoss:
    """rlrun's IQL loss at HalfCheetah shapes (tanh-Normal actor, twin Q, V; 256x256 ReLU)."""
    spec = EnvSpec((OBS,), np.dtype(np.float32), False, ACT)
    policy = actor_twin_q(spec)
    value = ValueCritic(mlp(OBS, [256, 256], 1, "relu"))
    return IQLLoss(policy.actor, policy.critic, value, gamma=GAMMA, tau=TAU, expectile=EXPECTILE,
                   beta=BETA, max_weight=MAX_WEIGHT)


def rlrun_iql(batches: list[TensorDict], loss: IQLLoss | None = None) -> Callable[[int], None]:
    """rlrun's IQL update, wired as a run wires it."""
    loss = loss or iql_loss()
    optim = OptimizerStep(loss.param_groups(), "adam", lr=3e-4, eps=1e-8, weight_decay=0.0)
    guard, trainer = _guard(loss, optim)

    def steps(n: int) -> None:
        for i in range(n):
            losses = loss(batches[i % POOL])
            guard.post_loss(trainer, None, losses)
            optim.step(losses)
            loss.update_targets()
        guard.post_steps(trainer)
    return steps


def handwritten_iql(batches: list[TensorDict], nets: tuple[nn.Module, ...] | None = None
                    ) -> Callable[[int], None]:
    """A CORL-like IQL update: V, then Q and the actor, three optimisers, polyak target Q.

    Args:
        batches: The batches, used in turn.
        nets: ``(actor, q1, q2, v)`` ``nn.Sequential`` networks (default: new ones).
    """
    actor, q1, q2, v_net = nets or (
        _mlp([OBS, 256, 256, 2 * ACT], nn.ReLU), _mlp([OBS + ACT, 256, 256, 1], nn.ReLU),
        _mlp([OBS + ACT, 256, 256, 1], nn.ReLU), _mlp([OBS, 256, 256, 1], nn.ReLU))
    q1_t, q2_t = copy.deepcopy(q1), copy.deepcopy(q2)
    q_params, t_params = [*q1.parameters(), *q2.parameters()], [*q1_t.parameters(), *q2_t.parameters()]
    q_opt, v_opt = torch.optim.Adam(q_params, lr=3e-4), torch.optim.Adam(v_net.parameters(), lr=3e-4)
    a_opt = torch.optim.Adam(actor.parameters(), lr=3e-4)
    data = [(b["observation"], b["action"], b["next", "reward"].squeeze(-1),
             b["next", "observation"], b["next", "terminated"].squeeze(-1).float()) for b in batches]

    def log_prob(obs: Tensor, act: Tensor) -> Tensor:
        mean, log_std = actor(obs).chunk(2, -1)
        u = torch.atanh(act.clamp(-1 + 1e-6, 1 - 1e-6))
        correction = 2 * (math.log(2) - u - nn.functional.softplus(-2 * u))
        return (Normal(mean, log_std.clamp(-5, 2).exp()).log_prob(u) - correction).sum(-1)

    def step(obs: Tensor, act: Tensor, rew: Tensor, next_obs: Tensor, term: Tensor) -> None:
        x = torch.cat([obs, act], -1)
        with torch.no_grad():
            target_q = torch.min(q1_t(x), q2_t(x)).squeeze(-1)
        v = v_net(obs).squeeze(-1)
        diff = target_q - v
        v_loss = (torch.where(diff < 0, 1 - EXPECTILE, EXPECTILE) * diff.pow(2)).mean()
        v_opt.zero_grad()
        v_loss.backward()
        v_opt.step()
        advantage = diff.detach()
        with torch.no_grad():
            q_target = rew + GAMMA * (1 - term) * v_net(next_obs).squeeze(-1)
        q_loss = (q1(x).squeeze(-1) - q_target).pow(2).mean() + (q2(x).squeeze(-1) - q_target).pow(2).mean()
        q_opt.zero_grad()
        q_loss.backward()
        q_opt.step()
        weight = torch.exp(BETA * advantage).clamp_max(MAX_WEIGHT)
        actor_loss = -(weight * log_prob(obs, act)).mean()
        a_opt.zero_grad()
        actor_loss.backward()
        a_opt.step()
        with torch.no_grad():
            torch._foreach_lerp_(t_params, q_params, TAU)

    def steps(n: int) -> None:
        for i in range(n):
            step(*data[i % POOL])
    return steps


def run(quick: bool = False, reps: int | None = None) -> dict:
    """IQL updates/s of rlrun against the hand-written step."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    reps = reps or (3 if quick else 7)
    n = 20 if quick else 100
    batches = iql_batches()
    rl, hand = rlrun_iql(batches), handwritten_iql(batches)
    times = interleave({"rlrun": lambda: rl(n), "hand": lambda: hand(n)}, reps)
    r = ratio(times["hand"], times["rlrun"])
    row = {"workload": f"IQL update (HalfCheetah shapes, batch {BATCH})", "unit": "updates/s", "per_rep": n,
           "reps": reps, "rlrun_per_s": n / median(times["rlrun"]), "hand_per_s": n / median(times["hand"]),
           "ratio": r["median"], "ratio_min": r["min"], "ratio_max": r["max"], "times_s": times}
    print(f"  offline_update IQL: ratio {r['median']:.2f}", flush=True)
    return {"rows": [row], "notes": []}


def render(result: dict) -> str:
    """The result as a Markdown table."""
    cols = [("workload", "workload", "s"), ("unit", "unit", "s"), ("rlrun_per_s", "rlrun", ".1f"),
            ("hand_per_s", "hand-written", ".1f"), ("ratio", "rlrun/hand", ".2f"),
            ("ratio_min", "min", ".2f"), ("ratio_max", "max", ".2f")]
    return table(result["rows"], cols)

"""Offline update throughput: rlrun's IQL and DT updates against hand-written ones.

* IQL at HalfCheetah shapes (obs 17, action 6, 256x256 ReLU policy, twin Q and V,
  batch 256, Table 9): rlrun's ``IQLLoss`` + ``OptimizerStep(loss.param_groups())`` +
  ``loss.update_targets()`` + the divergence check, as a run wires them, against a
  CORL-like single-file step: ``nn.Sequential`` networks, three Adams, three backward
  passes (V, then the actor and Q with the new V's ``V(s')``), polyak with
  ``torch._foreach_lerp_``. Same networks, same losses (expectile 0.7, beta 3,
  weights clipped at 100, tanh-Normal log-likelihood of dataset actions).

* DT at Table 9's Hopper shapes (obs 11, action 3; 128-wide, 3 layers, 1 head, context 20,
  batch 64): rlrun's ``DTActionLoss`` on its ``DTPolicy`` (observations normalised, as a run
  does) + ``OptimizerStep`` (AdamW, grad-norm clip 0.25, warm-up schedule) against the same
  ``DecisionTransformer`` module trained in a bare loop: normalise, forward, masked squared
  error, ``torch.optim.AdamW``, ``clip_grad_norm_``, ``LambdaLR``.

Both sides read the same pre-made batches (dataset sampling is not timed) and use
torch's optimisers. The ratio is rlrun's throughput over the reference's.
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
from rlrun.core.specs import EnvSpec
from rlrun.modules.models import actor_twin_q
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
    return IQLLoss(actor_twin_q(spec), spec, gamma=GAMMA, value_hidden=[256, 256], activation="relu",
                   tau=TAU, expectile=EXPECTILE, beta=BETA, max_weight=MAX_WEIGHT)


def rlrun_iql(batches: list[TensorDict], loss: IQLLoss | None = None) -> Callable[[int], None]:
    """rlrun's IQL update, wired as a run wires it."""
    loss = loss or iql_loss()
    optim = OptimizerStep(loss.param_groups(), "adam", lr=3e-4, eps=1e-8, weight_decay=0.0)
    return _wired_steps(loss, optim, batches, update_targets=True)


def _wired_steps(loss, optim: OptimizerStep, batches: list[TensorDict], update_targets: bool
                 ) -> Callable[[int], None]:
    """``n`` updates as a run wires them: loss, divergence check, optimiser step (, targets)."""
    guard, trainer = _guard(loss, optim)

    def steps(n: int) -> None:
        for i in range(n):
            losses = loss(batches[i % POOL])
            guard.post_loss(trainer, None, losses)
            optim.step(losses)
            if update_targets:
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


DT_OBS, DT_ACT, DT_BATCH, DT_K = 11, 3, 64, 20


def dt_batches(seed: int = 0) -> list[TensorDict]:
    """``POOL`` batches of ``[64, 20]`` slices with a few left-padded rows, as the sampler yields."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(POOL):
        mask = torch.ones(DT_BATCH, DT_K, dtype=torch.bool)
        mask[:8, :5] = False  # slices that start near an episode's beginning are left-padded
        out.append(TensorDict({
            "return_to_go": torch.randn(DT_BATCH, DT_K, 1, generator=g),
            "observation": torch.randn(DT_BATCH, DT_K, DT_OBS, generator=g),
            "action": torch.rand(DT_BATCH, DT_K, DT_ACT, generator=g) * 2 - 1,
            "timestep": torch.randint(0, 1000, (DT_BATCH, DT_K), generator=g),
            "mask": mask}, batch_size=[DT_BATCH, DT_K]))
    return out


def dt_policy():
    """rlrun's DT policy at Table 9's DT shapes (Hopper)."""
    from rlrun.algos.dt import decision_transformer

    spec = EnvSpec((DT_OBS,), np.dtype(np.float32), False, DT_ACT)
    return decision_transformer(spec, hidden=128, n_layers=3, n_heads=1, dropout=0.1, head_hidden=[128])


def rlrun_dt(batches: list[TensorDict], policy=None, warmup_steps: int = 10000) -> Callable[[int], None]:
    """rlrun's DT update: ``DTActionLoss`` + ``OptimizerStep`` + the divergence check."""
    from rlrun.algos.dt import DTActionLoss

    policy = policy or dt_policy()
    spec = EnvSpec((DT_OBS,), np.dtype(np.float32), False, DT_ACT)
    loss = DTActionLoss(policy, spec, GAMMA)
    optim = OptimizerStep(loss.param_groups(), "adamw", lr=1e-4, weight_decay=1e-4, max_grad_norm=0.25,
                          lr_schedule="warmup", warmup_steps=warmup_steps)
    return _wired_steps(loss, optim, batches, update_targets=False)  # DT keeps no target networks


def bare_dt(batches: list[TensorDict], policy=None, warmup_steps: int = 10000) -> Callable[[int], None]:
    """The same transformer in a bare loop: forward, masked MSE, AdamW, clipping, warm-up."""
    policy = policy or dt_policy()
    model, norm = policy.model, policy.normalizer
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: min(1.0, (t + 1) / warmup_steps))
    data = [(b["return_to_go"], b["observation"], b["action"], b["timestep"], b["mask"]) for b in batches]

    def steps(n: int) -> None:
        for i in range(n):
            rtg, obs, act, t, mask = data[i % POOL]
            pred = model(rtg, norm(obs), act, t, mask)
            err = (pred - act).pow(2).mean(-1)
            m = mask.float()
            loss = (err * m).sum() / m.sum()
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 0.25)
            opt.step()
            sched.step()
    return steps


def run(quick: bool = False, reps: int | None = None) -> dict:
    """IQL and DT updates/s of rlrun against the hand-written steps."""
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
    rows = [row]
    torch.manual_seed(0)
    batches = dt_batches()
    policy = dt_policy()
    bare_policy = copy.deepcopy(policy)  # same weights, separate optimiser state
    rl, bare = rlrun_dt(batches, policy), bare_dt(batches, bare_policy)
    times = interleave({"rlrun": lambda: rl(n), "bare": lambda: bare(n)}, reps)
    r = ratio(times["bare"], times["rlrun"])
    rows.append({"workload": f"DT update (Hopper shapes, batch {DT_BATCH} x {DT_K})", "unit": "updates/s",
                 "per_rep": n, "reps": reps, "rlrun_per_s": n / median(times["rlrun"]),
                 "hand_per_s": n / median(times["bare"]), "ratio": r["median"], "ratio_min": r["min"],
                 "ratio_max": r["max"], "times_s": times})
    print(f"  offline_update DT: ratio {r['median']:.2f}", flush=True)
    return {"rows": rows, "notes": []}


def render(result: dict) -> str:
    """The result as a Markdown table."""
    cols = [("workload", "workload", "s"), ("unit", "unit", "s"), ("rlrun_per_s", "rlrun", ".1f"),
            ("hand_per_s", "hand-written", ".1f"), ("ratio", "rlrun/hand", ".2f"),
            ("ratio_min", "min", ".2f"), ("ratio_max", "max", ".2f")]
    return table(result["rows"], cols)

"""The equality of issue 39, run in worker processes: the PPO, SAC, DQN, IQL and MAPPO losses
trained for ``UPDATES`` optimiser steps on a fixed stream of global batches, either in one process
on each whole batch or on ``world`` gloo ranks each on its contiguous share of it."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from tensordict import TensorDict

from rlrun.algos.dqn import DQNLoss
from rlrun.algos.iql import IQLLoss
from rlrun.algos.ppo import PPOLoss
from rlrun.algos.sac import SACLoss
from rlrun.core.specs import EnvSpec
from rlrun.modules.group_models import GroupPolicy
from rlrun.modules.models import actor_critic, actor_twin_q, qnet
from rlrun.modules.multiagent import GroupActor, GroupMLP
from rlrun.trainer.optim import OptimizerStep

FAMILIES = ("ppo", "sac", "dqn", "iql", "mappo")
UPDATES, BATCH = 50, 16
CONT = EnvSpec((3,), np.dtype(np.float32), False, 2)
DISC = EnvSpec((4,), np.dtype(np.float32), True, 2)
# SAC samples actions: its noise is drawn per rank, seeded by (update, share)
STOCHASTIC = {"sac"}


def build(family: str):
    torch.manual_seed(0)
    if family == "ppo":
        return PPOLoss(actor_critic(DISC, hidden=[32]))
    if family == "sac":
        return SACLoss(actor_twin_q(CONT, hidden=[32]), CONT, gamma=0.99)
    if family == "dqn":
        return DQNLoss(qnet(DISC, hidden=[32]), gamma=0.99)
    if family == "iql":
        return IQLLoss(actor_twin_q(CONT, hidden=[32]), CONT, gamma=0.99, value_hidden=[32])
    actor = GroupActor(GroupMLP(3, 4, 2, [16], share_params=True), "categorical", 2)
    return PPOLoss(GroupPolicy(actor, GroupMLP(3, 4, 1, [16], share_params=True, centralised=True)),
                   critic_coef=1.0)


def batch(family: str, update: int) -> TensorDict:
    """The global batch of ``update``: the same on every rank and in the one process."""
    g = torch.Generator().manual_seed(100 + update)
    n = BATCH
    if family in ("ppo", "mappo"):
        lead = (n, 3) if family == "mappo" else (n,)
        data = {"observation": torch.randn(*lead, 4, generator=g),
                "action": torch.randint(0, 2, lead, generator=g),
                "sample_log_prob": torch.full(lead, math.log(0.5)) + 0.1 * torch.randn(*lead, generator=g),
                "advantage": torch.randn(*lead, generator=g) * 2 + 0.5,
                "value_target": torch.randn(*lead, generator=g)}
        return TensorDict({"agents": data} if family == "mappo" else data, batch_size=[n])
    disc = family == "dqn"
    obs = 4 if disc else 3
    action = torch.randint(0, 2, (n,), generator=g) if disc else torch.rand(n, 2, generator=g) * 1.8 - 0.9
    return TensorDict({
        "observation": torch.randn(n, obs, generator=g), "action": action,
        ("next", "observation"): torch.randn(n, obs, generator=g),
        ("next", "reward"): torch.randn(n, 1, generator=g),
        ("next", "terminated"): torch.rand(n, 1, generator=g) < 0.2,
        ("next", "truncated"): torch.zeros(n, 1, dtype=torch.bool),
    }, batch_size=[n])


def _losses(loss, td: TensorDict, family: str, update: int, shares: list[int]) -> dict:
    """The loss dict of ``td``; a stochastic loss's noise is seeded per (update, share)."""
    if family not in STOCHASTIC:
        return loss(td)
    parts = td.chunk(len(shares))
    outs = []
    for share, part in zip(shares, parts):
        torch.manual_seed(10_000 * update + share)
        outs.append(loss(part))
    return {k: sum(o[k] for o in outs) / len(outs) for k in outs[0] if k.startswith("loss_")}


def train(family: str, rank: int = 0, world: int = 1, shares: int = 2) -> list[torch.Tensor]:
    """Weights after ``UPDATES`` steps: rank ``rank`` of ``world`` on its share of each batch.

    ``shares``: how many noise streams a stochastic loss's batch is drawn in (the ranks of the
    data-parallel run), so one process reproduces their noise on the whole batch.
    """
    loss = build(family)
    step = OptimizerStep(loss.param_groups(), "adam", lr=1e-3, max_grad_norm=10.0)
    per = BATCH // world
    for i in range(UPDATES):
        td = batch(family, i)[rank * per:(rank + 1) * per]
        mine = list(range(rank * shares // world, (rank + 1) * shares // world))
        step.step(_losses(loss, td, family, i, mine))
        if loss.has_targets:
            loss.update_targets()
    return [p.detach().clone() for p in loss.parameters()]


def worker(rank: int, world: int, rendezvous: str, out: str, average: bool) -> None:
    """One rank: trains every family and saves its weights to ``out/<rank>.pt``."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=world)
    if not average:  # the negative control: gradients stay each rank's own
        import rlrun.trainer.optim as optim
        optim.average_gradients = lambda params: None
    try:
        result = {f: train(f, rank, world, shares=world) for f in FAMILIES}
        torch.save(result, Path(out) / f"{rank}.pt")
    finally:
        dist.destroy_process_group()

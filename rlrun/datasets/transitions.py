"""Uniform transition batches from an offline dataset, in the layout the off-policy losses read.

A batch is a ``[B]`` TensorDict with ``observation``, ``action``, ``index`` and
``next: {observation, reward [B, 1], terminated [B, 1], truncated [B, 1], done [B, 1]}``,
the same keys a replay buffer fed by the collector holds, so SAC, TD3, IQL and CQL
losses read either without change.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict
from torch import Tensor


def iql_reward_scale(episode_returns: Tensor) -> float:
    """IQL's MuJoCo reward scale, ``1000 / (max return - min return)`` over the dataset's episodes."""
    spread = float(episode_returns.max() - episode_returns.min())
    if spread <= 0:
        raise ValueError("all episodes have the same return; the IQL reward scale is undefined")
    return 1000.0 / spread


def observation_stats(observation: Tensor, eps: float = 1e-3) -> tuple[Tensor, Tensor]:
    """Per-feature mean and std of a dataset's observations (std floored at ``eps``), for normalisers."""
    obs = observation.double()
    return obs.mean(0).float(), obs.std(0, unbiased=False).clamp_min(eps).float()


class TransitionSampler:
    """Draws transitions uniformly with replacement from flat offline data.

    Args:
        data: An ``OfflineData`` (``read_dataset``) or anything with its flat fields.
        batch_size: Transitions per batch.
        seed: Seed of the sampler's own generator.
        reward_scale: Rewards are multiplied by this ...
        reward_shift: ... then shifted by this (IQL AntMaze: -1).
    """

    def __init__(self, data: Any, batch_size: int, seed: int = 0, reward_scale: float = 1.0,
                 reward_shift: float = 0.0):
        self.batch_size = int(batch_size)
        dev = data.observation.device
        reward = (data.reward.float() * reward_scale + reward_shift).reshape(-1, 1)
        terminated = data.terminated.reshape(-1, 1)
        truncated = data.truncated.reshape(-1, 1)
        # built once: a batch is one gather of this TensorDict
        self.storage = TensorDict({
            "observation": data.observation,
            "action": data.action,
            "next": {"observation": data.next_observation, "reward": reward, "terminated": terminated,
                     "truncated": truncated, "done": terminated | truncated},
        }, batch_size=[data.observation.shape[0]], device=dev)
        self.generator = torch.Generator(device=dev).manual_seed(seed)

    def __len__(self) -> int:
        return int(self.storage.batch_size[0])

    def sample(self, batch_size: int | None = None) -> TensorDict:
        n = self.batch_size if batch_size is None else int(batch_size)
        index = torch.randint(len(self), (n,), generator=self.generator, device=self.storage.device)
        batch = self.storage[index]
        batch.set("index", index)
        return batch

    def state_dict(self) -> dict[str, Tensor]:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        self.generator.set_state(state["generator"])

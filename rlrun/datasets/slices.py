"""Trajectory slices for sequence models (Decision Transformer, online DT).

A slice is ``K`` consecutive steps of one episode. As in the Decision Transformer's
reference implementation, the episode is drawn with probability proportional to its
length, the start uniformly among its steps, and a slice that runs past the episode's
end keeps its valid steps at the right and is padded on the left; ``mask`` marks the
valid steps. Returns-to-go are undiscounted sums of the episode's remaining rewards
(from each step to the episode's end, not the slice's), divided by ``rtg_scale``.

Sampling builds index arrays only: no Python loop over samples or steps.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict
from torch import Tensor


def returns_to_go(reward: Tensor, episode_start: Tensor, episode_length: Tensor) -> Tensor:
    """Per-step undiscounted return to the end of its episode (float64), flat layout.

    ``rtg[i] = sum(reward[i : end_of_episode(i)])``, from one cumulative sum.
    """
    r = reward.reshape(-1).double()
    cum = torch.cat([r.new_zeros(1), torch.cumsum(r, 0)])  # cum[i] = sum(r[:i])
    end = torch.repeat_interleave(episode_start + episode_length, episode_length)
    return cum[end] - cum[:-1]


class TrajectorySliceSampler:
    """Samples batches of ``[B, K]`` trajectory slices from flat episode storage.

    Args:
        observation: ``[N, *obs]`` observations, episodes stored back to back.
        action: ``[N, *act]`` actions.
        reward: ``[N]`` rewards.
        episode_start: ``[E]`` first row of each episode.
        episode_length: ``[E]`` steps of each episode.
        slice_len: ``K``, steps per slice (the model's context).
        rtg_scale: Returns-to-go are divided by this (DT: 1000 for MuJoCo).
        seed: Seed of the sampler's own generator.
        generator: Use this generator instead (shared across rebuilt samplers).
    """

    def __init__(self, observation: Tensor, action: Tensor, reward: Tensor, episode_start: Tensor,
                 episode_length: Tensor, slice_len: int, rtg_scale: float = 1.0, seed: int = 0,
                 generator: torch.Generator | None = None):
        if slice_len < 1:
            raise ValueError(f"slice_len must be >= 1, got {slice_len}")
        if int(episode_length.min()) < 1:
            raise ValueError("every episode needs at least one step")
        self.observation, self.action = observation, action
        self.reward = reward.reshape(-1).float()
        self.episode_start = episode_start.long()
        self.episode_length = episode_length.long()
        self.slice_len, self.rtg_scale = int(slice_len), float(rtg_scale)
        self.return_to_go = (returns_to_go(self.reward, self.episode_start, self.episode_length)
                             / self.rtg_scale).float()
        self.episode_prob = self.episode_length.double() / self.episode_length.sum()
        self.generator = generator or torch.Generator(device=observation.device).manual_seed(seed)
        self._offsets = torch.arange(self.slice_len, device=observation.device)

    @classmethod
    def from_data(cls, data: Any, slice_len: int, rtg_scale: float = 1.0,
                  seed: int = 0) -> TrajectorySliceSampler:
        """From an ``OfflineData`` (``rlrun.datasets.minari_format.read_dataset``)."""
        return cls(data.observation, data.action, data.reward, data.episode_start, data.episode_length,
                   slice_len, rtg_scale, seed)

    def sample_starts(self, batch_size: int) -> tuple[Tensor, Tensor]:
        """``(episode, start step)`` of ``batch_size`` slices."""
        g = self.generator
        episode = torch.multinomial(self.episode_prob, batch_size, replacement=True, generator=g)
        length = self.episode_length[episode]
        u = torch.rand(batch_size, generator=g, dtype=torch.float64, device=length.device)
        start = (u * length).long().clamp_max(length - 1)
        return episode, start

    def gather(self, episode: Tensor, start: Tensor) -> TensorDict:
        """The slices starting at ``start`` in ``episode``, left-padded to ``K``."""
        k = self.slice_len
        valid = torch.minimum(self.episode_length[episode] - start, start.new_full((), k))  # [B]
        pad = k - valid
        step = start[:, None] + self._offsets[None] - pad[:, None]  # step within episode, [B, K]
        mask = self._offsets[None] >= pad[:, None]
        step = torch.where(mask, step, torch.zeros_like(step))
        row = self.episode_start[episode][:, None] + step

        def take(x: Tensor) -> Tensor:
            v = x[row]
            keep = mask.view(*mask.shape, *([1] * (v.dim() - 2)))
            return torch.where(keep, v, torch.zeros((), dtype=v.dtype, device=v.device))

        return TensorDict({
            "observation": take(self.observation),
            "action": take(self.action),
            "reward": take(self.reward).unsqueeze(-1),
            "return_to_go": take(self.return_to_go).unsqueeze(-1),
            "timestep": step,
            "mask": mask,
        }, batch_size=[len(episode), k], device=self.observation.device)

    def sample(self, batch_size: int) -> TensorDict:
        """A ``[batch_size, K]`` TensorDict: observation, action, reward, return_to_go
        (``[.., 1]``), timestep (int64), mask (bool; False on left padding, where every
        other entry is zero)."""
        return self.gather(*self.sample_starts(batch_size))

    def state_dict(self) -> dict[str, Tensor]:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        self.generator.set_state(state["generator"])


class TrajectoryBuffer:
    """Whole episodes for online DT: seeded with a dataset's best episodes, refreshed FIFO.

    As in the online DT reference: if the dataset has more episodes than ``capacity``,
    the ``capacity`` highest-return ones are kept; new episodes then overwrite the
    oldest slots in ring order. Returns-to-go of collected episodes come from their
    actual rewards (hindsight relabelling), as for dataset episodes. Episodes are
    added once per collection round, so ``sampler()`` rebuilds the flat storage then;
    the per-update sampling stays vectorised.

    Args:
        capacity: Episodes kept.
        slice_len: ``K`` of the slices.
        rtg_scale: Returns-to-go divisor.
        seed: Seed of the buffer's generator (kept across rebuilds).
    """

    def __init__(self, capacity: int, slice_len: int, rtg_scale: float = 1.0, seed: int = 0):
        self.capacity, self.slice_len, self.rtg_scale = int(capacity), slice_len, rtg_scale
        self.generator = torch.Generator().manual_seed(seed)
        self.episodes: list[tuple[Tensor, Tensor, Tensor]] = []  # (observation, action, reward) each
        self._next = 0
        self._sampler: TrajectorySliceSampler | None = None

    def seed_with(self, observation: Tensor, action: Tensor, reward: Tensor, episode_start: Tensor,
                  episode_length: Tensor) -> None:
        """Fills the buffer from flat episodes, keeping the ``capacity`` highest returns."""
        ends = (episode_start + episode_length).tolist()
        eps = [(observation[s:e], action[s:e], reward[s:e].reshape(-1))
               for s, e in zip(episode_start.tolist(), ends)]
        if len(eps) > self.capacity:
            returns = torch.stack([r.double().sum() for _, _, r in eps])
            keep = torch.argsort(returns, stable=True)[-self.capacity:].tolist()
            eps = [eps[i] for i in keep]
        self.episodes, self._next, self._sampler = eps, 0, None

    def add(self, observation: Tensor, action: Tensor, reward: Tensor) -> None:
        """Adds one collected episode (``[T, ...]`` each), overwriting the oldest when full."""
        ep = (observation, action, reward.reshape(-1))
        if len(self.episodes) < self.capacity:
            self.episodes.append(ep)
        else:
            self.episodes[self._next] = ep
            self._next = (self._next + 1) % self.capacity
        self._sampler = None

    def __len__(self) -> int:
        return len(self.episodes)

    def sampler(self) -> TrajectorySliceSampler:
        """A slice sampler over the current episodes, rebuilt after changes."""
        if self._sampler is None:
            if not self.episodes:
                raise RuntimeError("the trajectory buffer is empty; seed it or add episodes first")
            obs, act, rew = (torch.cat(x) for x in zip(*self.episodes))
            length = torch.tensor([len(r) for _, _, r in self.episodes], device=obs.device)
            start = torch.cumsum(length, 0) - length
            if self.generator.device != obs.device:
                self.generator = torch.Generator(device=obs.device).manual_seed(self.generator.initial_seed())
            self._sampler = TrajectorySliceSampler(obs, act, rew, start, length, self.slice_len,
                                                   self.rtg_scale, generator=self.generator)
        return self._sampler

    def sample(self, batch_size: int) -> TensorDict:
        return self.sampler().sample(batch_size)

    def saved_nbytes(self) -> int:
        """Bytes of the stored episodes (what ``state_dict`` adds to a checkpoint)."""
        return sum(t.numel() * t.element_size() for ep in self.episodes for t in ep)

    def state_dict(self) -> dict:
        """The episodes, the ring cursor and the sampling generator."""
        return {"episodes": [list(ep) for ep in self.episodes], "next": self._next,
                "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.episodes = [tuple(ep) for ep in state["episodes"]]
        self._next, self._sampler = int(state["next"]), None  # the flat storage is rebuilt on demand
        self.generator.set_state(state["generator"])

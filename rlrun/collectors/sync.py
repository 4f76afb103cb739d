"""Synchronous data collection over any batched env: one collector for single agents and agent groups.

``SyncCollector`` steps any ``rlrun.core.envs.VecEnv`` (gymnasium, EnvPool, VMAS) in one
loop: the policy acts, the env returns an ``EnvStep``, and the step's entries are written in
place into columns allocated once per batch (``rlrun.collectors.columns``: numpy arrays for
envs that step in numpy, tensors on the env's device for VMAS); a TensorDict is built once
per batch over those columns, without a copy. A single agent is the one-group case: an agent
group's entries go under its key with an agent dim (``rlrun.core.specs.entry_key``), the
episode ends and the global state at the root.

Episode returns are tracked here from the env's raw rewards (a group's: the agents' mean),
before the env's learning-signal transforms (``learning_reward``, ``learning_terminal``), so
that logged and evaluated returns are the environment's own (unscaled, unclipped).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict
from torch import Tensor

from rlrun.collectors.columns import DeviceColumns, HostColumns
from rlrun.core.contracts import COLLECTED_KEYS, FrameSource, key_name
from rlrun.core.envs import VecEnv
from rlrun.core.errors import ConfigError
from rlrun.core.registry import NonNegativeInt, PositiveInt, register
from rlrun.core.specs import EnvSpec, entry_key

PolicyFn = Callable[[Tensor], dict[str, Tensor]]


class SyncCollector(FrameSource):
    """Collects ``[num_envs, T]`` batches of transitions in TorchRL's key layout.

    Args:
        env: The vector env.
        policy: Maps an observation batch to ``{"action": ..., **extras}``.
        frames_per_batch: Frames per batch (all envs together); divisible by ``num_envs``.
        total_frames: Frames to collect in all; the last batch is shortened so
            that exactly this many are collected (rounded up to ``num_envs``).
        init_random_frames: Leading frames with uniform random actions.
        seed: Seeds the envs and the random-action generator.
        device: Where batches are put.

    Examples:
        >>> env = GymVecEnv("CartPole-v1", num_envs=2)
        >>> coll = SyncCollector(env, lambda o: {"action": torch.zeros(2, dtype=torch.long)},
        ...                      frames_per_batch=8, total_frames=16)
        >>> [b.batch_size for b in coll]
        [torch.Size([2, 4]), torch.Size([2, 4])]
    """

    def __init__(self, env: VecEnv, policy: PolicyFn, frames_per_batch: int, total_frames: int,
                 init_random_frames: int = 0, seed: int = 0, device: str = "cpu"):
        n = env.num_envs
        if frames_per_batch % n:
            raise ConfigError(f"{frames_per_batch} frames per batch do not split over {n} envs",
                              key="collector.frames_per_batch",
                              fix=f"use a multiple of env.num_envs={n}")
        self.env, self.policy, self.device = env, policy, torch.device(device)
        self.frames_per_batch, self.init_random_frames = frames_per_batch, init_random_frames
        self.total_frames = -(-total_frames // n) * n
        self.seed = seed
        self.frames = 0
        self._next_traj = n
        self._traj = np.arange(n)
        self._obs: Any = None  # where each sub-env goes on from (numpy or tensors, as the env steps)
        self._state: Any = None  # the group's global state that goes with it (None without one)
        self._store: HostColumns | DeviceColumns | None = None  # chosen by the env's array kind
        self.provided_keys = collected_keys(env.spec)
        self._ep_return = np.zeros(n)
        self._ep_length = np.zeros(n, dtype=np.int64)
        self.finished_returns: list[float] = []
        self.finished_lengths: list[int] = []
        self._gen = torch.Generator().manual_seed(seed)
        self.on_episode_end: Callable[[Any], None] | None = None  # e.g. resets OU noise
        self.policy_version = 0  # it acts with the live policy: nothing to push

    def __iter__(self) -> Iterator[TensorDict]:
        while self.frames < self.total_frames:
            yield self.collect()

    def _random_action(self) -> dict[str, Tensor]:
        spec = self.env.spec
        shape = (self.env.num_envs, spec.n_agents) if spec.is_group else (self.env.num_envs,)
        if spec.discrete:
            action = torch.randint(spec.action_dim, shape, generator=self._gen)
        else:
            u = torch.rand(*shape, spec.action_dim, generator=self._gen)
            action = spec.action_low + u * (spec.action_high - spec.action_low)
        device = self._store.random_device if self._store is not None else None
        return {"action": action if device is None else action.to(device)}  # acts where the policy does

    def _begin(self) -> None:
        """Starts fresh episodes: a new run, or a restored one (which must not replay its first episodes)."""
        env = self.env
        # mixing the seed with the frame count keeps a resumed run from replaying its first episodes
        self._obs = env.reset(seed=self.seed + 7919 * (self.frames // env.num_envs))
        state_of = getattr(env, "state", None)  # envs with a global state (agent groups) say it
        self._state = state_of(self._obs) if callable(state_of) else None
        if self._store is None:
            store = DeviceColumns if isinstance(self._obs, Tensor) else HostColumns
            self._store = store(env, self.device)

    def collect(self) -> TensorDict:
        """Runs the envs for one batch and returns it as a ``[num_envs, T]`` TensorDict."""
        env, n = self.env, self.env.num_envs
        if self._obs is None:
            self._begin()
        steps = min(self.frames_per_batch, self.total_frames - self.frames) // n
        store, obs, state, on_end = self._store, self._obs, self._state, self.on_episode_end
        store.begin(n, steps, obs, state)
        random_steps = max(0, -(-(self.init_random_frames - self.frames) // n))
        with torch.inference_mode():  # entered once per batch: it is not free per step
            for t in range(steps):
                out = self._random_action() if t < random_steps else self.policy(store.to_policy(obs))
                step = env.step(store.record_action(t, out))
                store.record_step(t, obs, state, step)
                if on_end is not None and (ended := step.terminated | step.truncated).any():
                    on_end(store.ended_index(ended))
                obs, state = step.obs, step.state
        self._obs, self._state = obs, state
        self.frames += steps * n
        traj = self._track_episodes(*store.finish(random_steps))
        td = TensorDict(store.batch(traj), batch_size=[n, steps])
        return td if self.device == store.device else td.to(self.device, non_blocking=True)

    def _track_episodes(self, reward: np.ndarray, ended: np.ndarray) -> np.ndarray:
        """Records the batch's finished episodes and returns its ``[n, T]`` trajectory ids.

        Whole-batch array ops rather than per-step bookkeeping (which measured
        ~14 us per step). Episodes and new trajectory ids are numbered in step
        order, then sub-env order; returns and lengths carry across batches.
        """
        n, steps = ended.shape
        cum = np.cumsum(reward, axis=1)
        t_end, env_end = np.nonzero(ended.T)  # step order, then sub-env order
        # each end's previous end in the same sub-env (-1: the episode began before this batch)
        by_env = np.lexsort((t_end, env_end))
        e, t = env_end[by_env], t_end[by_env]
        prev = np.empty_like(t_end)
        prev[by_env] = np.where(np.r_[False, e[1:] == e[:-1]], np.r_[-1, t[:-1]], -1)
        first = prev < 0
        since = np.where(first, 0.0, cum[env_end, np.maximum(prev, 0)])
        returns = cum[env_end, t_end] - since + np.where(first, self._ep_return[env_end], 0.0)
        lengths = t_end - prev + np.where(first, self._ep_length[env_end], 0)
        self.finished_returns.extend(returns.tolist())
        self.finished_lengths.extend(lengths.tolist())

        last = np.full(n, -1)
        np.maximum.at(last, env_end, t_end)
        done = last >= 0
        rows = np.arange(n)
        tail = cum[:, -1] - np.where(done, cum[rows, np.maximum(last, 0)], 0.0)
        self._ep_return = np.where(done, 0.0, self._ep_return) + tail
        self._ep_length = np.where(done, steps - 1 - last, self._ep_length + steps)

        new_ids = self._next_traj + np.arange(len(t_end))  # increasing in time, so a running max
        self._next_traj += len(t_end)                     # carries each sub-env's current id
        ids = np.full((n, steps), -1, np.int64)
        ids[:, 0] = self._traj
        inside = t_end + 1 < steps
        ids[env_end[inside], t_end[inside] + 1] = new_ids[inside]
        latest = np.full(n, -1, np.int64)
        np.maximum.at(latest, env_end, new_ids)
        self._traj = np.where(done, latest, self._traj)
        return np.maximum.accumulate(ids, axis=1)

    def update_policy_weights(self, state_dict=None) -> None:
        """The live policy acts here, so new weights are in use at once; only the version moves."""
        self.policy_version += 1

    def shutdown(self) -> None:
        """Nothing to release: the run closes the env it built."""

    def pop_episode_stats(self) -> tuple[list[float], list[int]]:
        """Returns and clears the returns and lengths of episodes finished since the last call."""
        stats = self.finished_returns, self.finished_lengths
        self.finished_returns, self.finished_lengths = [], []
        return stats

    def state_dict(self) -> dict:
        return {"frames": self.frames, "next_traj": self._next_traj,
                "generator": self._gen.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.frames, self._next_traj = int(state["frames"]), int(state["next_traj"])
        self._gen.set_state(state["generator"])
        n = self.env.num_envs
        self._traj = self._next_traj + np.arange(n)
        self._next_traj += n
        self._obs = self._state = None


def collected_keys(spec: EnvSpec) -> frozenset[str]:
    """What every batch of an env with this spec holds (dotted names, as hooks and losses declare
    them): ``COLLECTED_KEYS`` placed for its group, and the global state where it has one."""
    names = COLLECTED_KEYS | ({"state", "next.state"} if spec.state_shape else set())
    return frozenset(key_name(entry_key(name, spec.group)) for name in names)


@register("collector", "sync")
def make_sync_collector(env: VecEnv, policy, frames_per_batch: PositiveInt, total_frames: int,
                        init_random_frames: NonNegativeInt = 0, explore: bool = True, seed: int = 0,
                        device: str = "cpu") -> SyncCollector:
    """Single-process collector stepping a (sync or async) vector env.

    Any ``VecEnv``: gymnasium, EnvPool, or an agent group on VMAS (in torch on its
    device, no numpy per step).

    Acts with the policy's behaviour: its exploration component if it has
    one, else the actor's own sampling; ``explore: false`` uses the
    deterministic policy.
    """
    collector = SyncCollector(env, policy.behaviour(explore), frames_per_batch, total_frames,
                              init_random_frames, seed, device)
    if explore and policy.exploration is not None:
        collector.on_episode_end = policy.exploration.on_episode_end  # None unless the noise has state
    return collector

"""Synchronous data collection over a vector env.

The per-step loop touches only numpy arrays and the actor's tensors: each
step writes into arrays allocated once per batch, and a TensorDict is built
once per batch (zero-copy over those arrays). Episode returns are tracked here
from the env's raw rewards, before any reward transform, so that logged and
evaluated returns are the environment's own (unscaled, unclipped).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import torch
from tensordict import TensorDict
from torch import Tensor

from rlrun.envs.gym import GymVecEnv
from rlrun.errors import ConfigError
from rlrun.registry import register

Policy = Callable[[Tensor], dict[str, Tensor]]


class SyncCollector:
    """Collects ``[num_envs, T]`` batches of transitions in TorchRL's key layout.

    Args:
        env: The vector env.
        policy: Maps an observation batch to ``{"action": ..., **extras}``.
        frames_per_batch: Frames per batch (all envs together); divisible by ``num_envs``.
        total_frames: Frames to collect in all; the last batch is shortened so
            that exactly this many are collected (rounded up to ``num_envs``).
        init_random_frames: Leading frames with uniform random actions.
        reward_scale: Multiplies rewards (the learning signal only).
        reward_clip: ``"sign"`` clips learning rewards to {-1, 0, 1}.
        seed: Seeds the envs and the random-action generator.
        device: Where batches are put.

    Examples:
        >>> env = GymVecEnv("CartPole-v1", num_envs=2)
        >>> coll = SyncCollector(env, lambda o: {"action": torch.zeros(2, dtype=torch.long)},
        ...                      frames_per_batch=8, total_frames=16)
        >>> [b.batch_size for b in coll]
        [torch.Size([2, 4]), torch.Size([2, 4])]
    """

    def __init__(self, env: GymVecEnv, policy: Policy, frames_per_batch: int, total_frames: int,
                 init_random_frames: int = 0, reward_scale: float = 1.0,
                 reward_clip: str | None = None, seed: int = 0, device: str = "cpu"):
        n = env.num_envs
        if frames_per_batch % n:
            raise ConfigError(f"{frames_per_batch} frames per batch do not split over {n} envs",
                              key="collector.frames_per_batch",
                              fix=f"use a multiple of env.num_envs={n}")
        self.env, self.policy, self.device = env, policy, torch.device(device)
        self.frames_per_batch, self.init_random_frames = frames_per_batch, init_random_frames
        self.total_frames = -(-total_frames // n) * n
        self.reward_scale, self.reward_clip, self.seed = reward_scale, reward_clip, seed
        self.frames = 0
        self._next_traj = n
        self._traj = np.arange(n)
        self._obs: np.ndarray | None = None
        self._ep_return = np.zeros(n)
        self._ep_length = np.zeros(n, dtype=np.int64)
        self.finished_returns: list[float] = []
        self.finished_lengths: list[int] = []
        self._gen = torch.Generator().manual_seed(seed)
        self.on_episode_end: Callable[[np.ndarray], None] | None = None  # e.g. resets OU noise

    def __iter__(self) -> Iterator[TensorDict]:
        while self.frames < self.total_frames:
            yield self.collect()

    def _random_action(self) -> dict[str, Tensor]:
        spec, n = self.env.spec, self.env.num_envs
        if spec.discrete:
            return {"action": torch.randint(spec.action_dim, (n,), generator=self._gen)}
        u = torch.rand(n, spec.action_dim, generator=self._gen)
        return {"action": spec.action_low + u * (spec.action_high - spec.action_low)}

    def collect(self) -> TensorDict:
        """Runs the envs for one batch and returns it as a ``[num_envs, T]`` TensorDict."""
        env, n = self.env, self.env.num_envs
        if self._obs is None:
            # A restored run starts fresh episodes; mixing the seed with the frame
            # count keeps a resumed run from replaying its first episodes.
            self._obs = env.reset(seed=self.seed + 7919 * (self.frames // n))
        steps = min(self.frames_per_batch, self.total_frames - self.frames) // n
        obs_buf = np.empty((n, steps, *self._obs.shape[1:]), self._obs.dtype)
        next_buf = np.empty_like(obs_buf)
        rew_buf = np.empty((n, steps), np.float32)
        term_buf = np.empty((n, steps), bool)
        trunc_buf = np.empty((n, steps), bool)
        traj_buf = np.empty((n, steps), np.int64)
        outs: dict[str, np.ndarray] = {}
        obs = self._obs
        on_cpu = self.device.type == "cpu"
        with torch.inference_mode():  # entered once per batch: it is not free per step
            for t in range(steps):
                if self.frames + t * n < self.init_random_frames:
                    out = self._random_action()
                else:
                    obs_t = torch.from_numpy(obs)
                    out = self.policy(obs_t if on_cpu else obs_t.to(self.device, non_blocking=True))
                for k, v in out.items():
                    if k not in outs:  # zeros: random-action steps have no policy extras (log-probs)
                        outs[k] = np.zeros((n, steps, *v.shape[1:]), _np_dtype(v))
                    outs[k][:, t] = v.numpy() if on_cpu else v.cpu().numpy()
                self._obs = obs = self._env_step(t, outs, obs_buf, next_buf, rew_buf, term_buf,
                                                 trunc_buf, traj_buf)
        self.frames += steps * n
        return self._to_tensordict(obs_buf, next_buf, rew_buf, term_buf, trunc_buf, traj_buf, outs)

    def _env_step(self, t, outs, obs_buf, next_buf, rew_buf, term_buf, trunc_buf, traj_buf):
        env = self.env
        next_obs, reward, terminated, truncated, obs = env.step(outs["action"][:, t])
        obs_buf[:, t], next_buf[:, t] = self._obs, next_obs
        rew_buf[:, t], trunc_buf[:, t] = reward, truncated
        term_buf[:, t] = terminated | env.life_lost if env.life_loss_terminal else terminated
        traj_buf[:, t] = self._traj
        self._track_episodes(reward, terminated | truncated)
        return obs

    def _track_episodes(self, reward: np.ndarray, done: np.ndarray) -> None:
        self._ep_return += reward
        self._ep_length += 1
        if done.any():
            idx = done.nonzero()[0]
            self.finished_returns.extend(self._ep_return[idx].tolist())
            self.finished_lengths.extend(self._ep_length[idx].tolist())
            self._ep_return[idx] = 0.0
            self._ep_length[idx] = 0
            self._traj[idx] = self._next_traj + np.arange(len(idx))
            self._next_traj += len(idx)
            if self.on_episode_end is not None:
                self.on_episode_end(idx)

    def _to_tensordict(self, obs, next_obs, reward, terminated, truncated, traj, outs) -> TensorDict:
        n, steps = reward.shape
        reward_t = torch.from_numpy(reward).unsqueeze(-1)
        if self.reward_clip == "sign":
            reward_t = reward_t.sign()
        if self.reward_scale != 1.0:
            reward_t = reward_t * self.reward_scale
        term_t = torch.from_numpy(terminated).unsqueeze(-1)
        trunc_t = torch.from_numpy(truncated).unsqueeze(-1)
        td = TensorDict(
            {
                "observation": torch.from_numpy(obs),
                **{k: torch.from_numpy(v) for k, v in outs.items()},
                "next": {"observation": torch.from_numpy(next_obs), "reward": reward_t,
                         "terminated": term_t, "truncated": trunc_t, "done": term_t | trunc_t},
                "collector": {"traj_ids": torch.from_numpy(traj)},
            },
            batch_size=[n, steps],
        )
        return td.to(self.device, non_blocking=True) if self.device.type != "cpu" else td

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
        self._obs = None


def _np_dtype(t: Tensor) -> np.dtype:
    return torch.empty((), dtype=t.dtype).numpy().dtype


@register("collector", "sync")
def make_sync_collector(env: GymVecEnv, actor, frames_per_batch: int,
                        total_frames: int, init_random_frames: int = 0,
                        reward_scale: float = 1.0, reward_clip: str | None = None,
                        explore: bool = True, exploration=None, seed: int = 0,
                        device: str = "cpu") -> SyncCollector:
    """Single-process collector stepping a (sync or async) vector env.

    Acts with the exploration component if there is one, else with the
    actor's own sampling; ``explore: false`` uses the deterministic policy.
    """
    if explore and exploration is not None:
        policy = exploration
    elif explore and actor.explore is not None:
        policy = actor.explore
    else:
        policy = lambda obs: {"action": actor.act(obs)}  # noqa: E731
    if reward_clip not in (None, "sign"):
        raise ConfigError(f"unknown reward_clip {reward_clip!r}", key="collector.reward_clip",
                          fix="use null or sign")
    collector = SyncCollector(env, policy, frames_per_batch, total_frames, init_random_frames,
                              reward_scale, reward_clip, seed, device)
    if explore and exploration is not None:
        collector.on_episode_end = exploration.on_episode_end
    return collector

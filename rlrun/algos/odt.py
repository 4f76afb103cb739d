"""Online Decision Transformer (Zheng, Zhang & Grover 2022): a schedule of sources on the one loop.

``rlrun algo=odt dataset=<id>``: the run's source first yields offline rounds (the
dataset's slices, as DT) for ``online.offline_updates`` updates, then online rounds:
each collects whole episodes with the current policy, sampling its actions and
conditioned on ``online.target_return``, into a ``TrajectoryBuffer`` seeded with the
dataset's highest-return episodes, whose returns-to-go are relabelled with the
returns actually achieved (hindsight); the round's updates then sample that buffer.

The budget stays ``total_updates`` (offline and online updates together); ``frames``
counts the env steps of the online phase (every sub-env step, including those a
sub-env takes after its episode of the round ended, which are not stored).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from tensordict import TensorDict

from rlrun.algos.dt import DatasetSlices, DTPolicy, unit_actions
from rlrun.datasets.slices import TrajectoryBuffer
from rlrun.errors import ConfigError
from rlrun.modules.transformer import RollingContext
from rlrun.registry import build


class ScheduledSlices:
    """The buffer of an online DT run: the dataset's slices offline, the trajectory buffer online.

    Args:
        offline: The dataset's slices (``buffer=trajectory_slices``).
        online: The trajectory buffer, seeded with the dataset.
    """

    sample_keys = DatasetSlices.sample_keys

    def __init__(self, offline: DatasetSlices, online: TrajectoryBuffer):
        self.offline, self.online = offline, online
        self.is_online = False
        self.batch_size = offline.batch_size

    def sample(self, batch_size: int | None = None) -> TensorDict:
        if self.is_online:
            return self.online.sample(batch_size or self.batch_size)
        return self.offline.sample(batch_size)

    def __len__(self) -> int:
        return sum(len(r) for _, _, r in self.online.episodes) if self.is_online else len(self.offline)

    def saved_nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for ep in self.online.episodes for t in ep)

    def state_dict(self) -> dict:
        return {"offline": self.offline.state_dict(), "is_online": self.is_online,
                "episodes": [list(ep) for ep in self.online.episodes], "next": self.online._next,
                "generator": self.online.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.offline.load_state_dict(state["offline"])
        self.is_online = bool(state["is_online"])
        self.online.episodes = [tuple(ep) for ep in state["episodes"]]
        self.online._next, self.online._sampler = int(state["next"]), None
        self.online.generator.set_state(state["generator"])


class OnlineDTSource:
    """Offline rounds, then rounds that collect whole episodes before their updates.

    Each round is followed by ``updates_per_round`` updates (the trainer's
    ``optim_steps_per_epoch``); the first ``offline_updates / updates_per_round``
    rounds are offline (empty batches). An online round resets the env with a seed
    of its own (the run's seed + round), plays until every sub-env has finished one
    episode with sampled actions, and adds those episodes to the buffer.

    Args:
        env: The env it collects on (``cfg.env``).
        policy: A ``tanh_normal`` ``DTPolicy``.
        buffer: The run's ``ScheduledSlices``.
        offline_updates: Updates before the first collection.
        updates_per_round: Updates after each round.
        target_return: Return conditioned on when collecting (env units).
        seed: Base seed of the rounds' env resets.
        max_steps: Vector steps per round at most (a guard for envs without a time limit).
    """

    total_frames = None

    def __init__(self, env: Any, policy: DTPolicy, buffer: ScheduledSlices, offline_updates: int,
                 updates_per_round: int, target_return: float, seed: int, max_steps: int = 100_000):
        self.env, self.policy, self.buffer = env, policy, buffer
        self.offline_rounds = offline_updates // updates_per_round
        self.updates_per_round, self.target_return = updates_per_round, float(target_return)
        self.seed, self.max_steps = seed, max_steps
        self.frames = 0
        self.rounds = 0
        self.policy_version = 0
        self._returns: list[float] = []
        self._lengths: list[int] = []
        self._empty = TensorDict({}, batch_size=[0])

    def __iter__(self) -> Iterator[TensorDict]:
        while True:  # the trainer ends the run when the update budget is spent
            if self.rounds >= self.offline_rounds:
                self.buffer.is_online = True
                self.collect()
            self.rounds += 1
            yield self._empty

    @torch.no_grad()
    def collect(self) -> None:
        """Plays one episode per sub-env with sampled actions and adds them to the buffer."""
        env, policy = self.env, self.policy
        model = policy.model
        n = env.num_envs
        device = next(model.parameters()).device
        ctx = RollingContext(n, policy.eval_context, model.obs_dim, model.action_dim, self.target_return,
                             policy.rtg_scale, device)
        obs = env.reset(seed=self.seed + self.rounds)
        observations, actions, rewards = [], [], []
        length = np.zeros(n, dtype=np.int64)
        finished = np.zeros(n, dtype=bool)
        training = model.training
        model.eval()
        try:
            for _ in range(self.max_steps):
                obs_t = torch.as_tensor(obs, device=device)
                action = policy.sample_action(obs_t, ctx)
                _, reward, terminated, truncated, next_obs = env.step(action.cpu().numpy())
                done = terminated | truncated
                ctx.record(action, torch.as_tensor(reward, device=device),
                           torch.as_tensor(done, device=device))
                observations.append(obs_t.float()), actions.append(action), rewards.append(reward)
                self.frames += n
                length += ~finished
                for i in np.flatnonzero(done & ~finished):  # only when an episode ends
                    t = int(length[i])
                    ep_obs = torch.stack([o[i] for o in observations[-t:]])
                    ep_act = torch.stack([a[i] for a in actions[-t:]])
                    ep_rew = torch.as_tensor(np.array([r[i] for r in rewards[-t:]]), dtype=torch.float32)
                    self.buffer.online.add(ep_obs, ep_act, ep_rew.to(device))
                    self._returns.append(float(ep_rew.double().sum()))
                    self._lengths.append(t)
                finished |= done
                if finished.all():
                    break
                obs = next_obs
        finally:
            model.train(training)

    def update_policy_weights(self) -> None:
        """The source acts with the live policy."""

    def pop_episode_stats(self) -> tuple[list[float], list[int]]:
        out = (self._returns, self._lengths)
        self._returns, self._lengths = [], []
        return out

    def state_dict(self) -> dict:
        return {"frames": self.frames, "rounds": self.rounds, "returns": list(self._returns),
                "lengths": list(self._lengths)}

    def load_state_dict(self, state: dict) -> None:
        self.frames, self.rounds = int(state["frames"]), int(state["rounds"])
        self._returns, self._lengths = list(state["returns"]), list(state["lengths"])

    def shutdown(self) -> None:
        self.env.close()


def online_source(cfg: DictConfig, policy: Any, slices: DatasetSlices, data: Any,
                  device: torch.device) -> tuple[OnlineDTSource, ScheduledSlices]:
    """The source and buffer of an online DT run, from the config's ``online`` node."""
    node = OmegaConf.to_container(cfg.online, resolve=True)
    if not isinstance(policy, DTPolicy) or policy.head != "tanh_normal":
        raise ConfigError("the online DT phase samples from a tanh_normal Decision Transformer",
                          key="model", fix="use model=dt with model.head=tanh_normal (algo=odt)")
    per_round = int(node.get("updates_per_round", 300))
    offline = int(node.get("offline_updates", 0))
    if per_round < 1:
        raise ConfigError(f"must be >= 1, got {per_round}", key="online.updates_per_round", fix="e.g. 300")
    if offline < 0 or offline % per_round:
        raise ConfigError(f"offline_updates={offline} is not a multiple of updates_per_round={per_round}",
                          key="online.offline_updates",
                          fix=f"e.g. {max(1, offline // per_round) * per_round}")
    if cfg.trainer.get("optim_steps_per_epoch") not in (None, per_round):
        raise ConfigError("an online DT run's rounds have online.updates_per_round updates",
                          key="trainer.optim_steps_per_epoch", fix="remove it; set online.updates_per_round")
    trajectories = TrajectoryBuffer(int(node.get("capacity", 1000)), slices.sampler.slice_len,
                                    slices.sampler.rtg_scale, seed=cfg.seed)
    trajectories.seed_with(data.observation.float().to(device), unit_actions(data).to(device),
                           data.reward.float().to(device), data.episode_start, data.episode_length)
    buffer = ScheduledSlices(slices, trajectories)
    env = build("env", cfg.env, key="env")
    source = OnlineDTSource(env, policy, buffer, offline, per_round, float(node["target_return"]),
                            seed=int(cfg.seed) + 1_000_003, max_steps=int(node.get("max_steps", 100_000)))
    return source, buffer


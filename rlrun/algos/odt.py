"""Online Decision Transformer (Zheng, Zhang & Grover 2022): a schedule of sources on the one loop.

``rlrun algo=odt dataset=<id>``: the run's source first yields offline rounds (the
dataset's slices, as DT) for ``online.offline_updates`` updates, then online rounds:
each collects whole episodes with the current policy, sampling its actions and
conditioned on ``online.target_return``, into a ``TrajectoryBuffer`` seeded with the
dataset's highest-return episodes, whose returns-to-go are relabelled with the
returns actually achieved (hindsight); the round's updates then sample that buffer.

The source is a component like any collector (``collector/online_dt``, a
``rlrun.core.contracts.Source``), built by ``rlrun.lifecycle.build`` from the ``online`` section, whose
defaults have one home (``rlrun.core.config_schema.OnlineSection``). The schedule (rounds
done, offline rounds) lives in one ``RoundSchedule`` that the source advances and the
buffer reads.

The budget stays ``total_updates`` (offline and online updates together); ``frames``
counts the env steps of the online phase (every sub-env step, including those a
sub-env takes after its episode of the round ended, which are not stored).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Annotated, Any

import numpy as np
import torch
from tensordict import TensorDict
from torch import Tensor

from rlrun.algos.dt import DatasetSlices, DTPolicy, unit_actions
from rlrun.core.config_schema import OnlineSection
from rlrun.core.errors import ConfigError
from rlrun.core.registry import NonNegativeInt, PositiveInt, Range, build, register
from rlrun.datasets.slices import TrajectoryBuffer
from rlrun.modules.transformer import RollingContext


class RoundSchedule:
    """Where an online DT run is in its schedule: the one record of it, which the source
    advances and the buffer reads (saved once, with the source's state).

    Args:
        offline_rounds: Rounds of dataset updates before the first collection.
    """

    def __init__(self, offline_rounds: int):
        self.offline_rounds, self.rounds = offline_rounds, 0

    @property
    def collects(self) -> bool:
        """The next round collects episodes before its updates."""
        return self.rounds >= self.offline_rounds

    @property
    def online(self) -> bool:
        """The current round's updates sample the trajectory buffer (the round collected)."""
        return self.rounds > self.offline_rounds


class ScheduledSlices:
    """The buffer of an online DT run: the dataset's slices offline, the trajectory buffer online.

    Args:
        offline: The dataset's slices (``buffer=trajectory_slices``).
        online: The trajectory buffer, seeded with the dataset.
        schedule: The source's schedule, which says which of the two is sampled.
    """

    sample_keys = DatasetSlices.sample_keys

    def __init__(self, offline: DatasetSlices, online: TrajectoryBuffer, schedule: RoundSchedule):
        self.offline, self.online, self.schedule = offline, online, schedule
        self.batch_size = offline.batch_size

    def sample(self, batch_size: int | None = None) -> TensorDict:
        if self.schedule.online:
            return self.online.sample(batch_size or self.batch_size)
        return self.offline.sample(batch_size)

    def __len__(self) -> int:
        return sum(len(r) for _, _, r in self.online.episodes) if self.schedule.online else len(self.offline)

    def saved_nbytes(self) -> int:
        return self.online.saved_nbytes()

    def state_dict(self) -> dict:
        return {"offline": self.offline.state_dict(), **self.online.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.offline.load_state_dict(state["offline"])
        self.online.load_state_dict(state)


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
        buffer: The run's ``ScheduledSlices``; its ``schedule`` (offline rounds, rounds done) is the
            source's too.
        updates_per_round: Updates after each round.
        target_return: Return conditioned on when collecting (env units).
        seed: Base seed of the rounds' env resets.
        max_steps: Vector steps per round at most (a guard for envs without a time limit).
    """

    budget_unit = "updates"
    provided_keys: frozenset[str] = frozenset()  # rounds are empty: the buffer's samples hold the data
    updates_per_round: int  # the schedule's, fixed for every round (online.updates_per_round)
    total_frames = None

    def __init__(self, env: Any, policy: DTPolicy, buffer: ScheduledSlices, updates_per_round: int,
                 target_return: float, seed: int, max_steps: int):
        self.env, self.policy, self.buffer = env, policy, buffer
        self.schedule = buffer.schedule
        self.updates_per_round, self.target_return = updates_per_round, float(target_return)
        self.seed, self.max_steps = seed, max_steps
        self.frames = 0
        self.policy_version = 0
        self._returns: list[float] = []
        self._lengths: list[int] = []
        self._empty = TensorDict({}, batch_size=[0])

    def __iter__(self) -> Iterator[TensorDict]:
        while True:  # the trainer ends the run when the update budget is spent
            if self.schedule.collects:
                self.collect()
            self.schedule.rounds += 1
            yield self._empty

    @property
    def rounds(self) -> int:
        """Rounds yielded so far (offline and online)."""
        return self.schedule.rounds

    def sampled_buffer(self, buffer: Any) -> ScheduledSlices:
        """The schedule's buffer (the run's dataset slices, then the collected episodes)."""
        return self.buffer

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

    def update_policy_weights(self, state_dict: Mapping[str, Tensor] | None = None) -> None:
        """The source acts with the live policy: nothing to push."""

    def pop_episode_stats(self) -> tuple[list[float], list[int]]:
        out = (self._returns, self._lengths)
        self._returns, self._lengths = [], []
        return out

    def state_dict(self) -> dict:
        return {"frames": self.frames, "rounds": self.rounds, "returns": list(self._returns),
                "lengths": list(self._lengths)}

    def load_state_dict(self, state: dict) -> None:
        self.frames, self.schedule.rounds = int(state["frames"]), int(state["rounds"])
        self._returns, self._lengths = list(state["returns"]), list(state["lengths"])

    def shutdown(self) -> None:
        self.env.close()


@register("collector", "online_dt")
def online_dt_source(env_config: Mapping, policy: Any, buffer: Any, data: Any, seed: int, device: str,
                     target_return: Annotated[float, Range()],  # any finite return (env units)
                     offline_updates: NonNegativeInt = OnlineSection.offline_updates,
                     updates_per_round: PositiveInt = OnlineSection.updates_per_round,
                     capacity: PositiveInt = OnlineSection.capacity,
                     max_steps: PositiveInt = OnlineSection.max_steps) -> OnlineDTSource:
    """Online DT's schedule (``algo=odt``, the ``online`` section): dataset rounds, then rounds
    that collect whole episodes into a trajectory buffer seeded with the dataset.

    Args:
        env_config: The run's ``env`` node (the source steps an env of its own).
        policy: A ``tanh_normal`` ``DTPolicy``.
        buffer: The run's dataset slices (``buffer=trajectory_slices``).
        data: The dataset, whose best episodes seed the trajectory buffer.
        seed: The run's seed.
        device: The learner's device (the trajectory buffer's).
        target_return: Return conditioned on when collecting (env units).
        offline_updates: Updates before the first collection (whole rounds).
        updates_per_round: Updates after each round.
        capacity: Episodes in the trajectory buffer.
        max_steps: Vector steps per round at most (a guard for envs without a time limit).
    """
    if not isinstance(policy, DTPolicy) or policy.head != "tanh_normal":
        raise ConfigError("the online DT phase samples from a tanh_normal Decision Transformer",
                          key="model", fix="use model=dt with model.head=tanh_normal (algo=odt)")
    if offline_updates % updates_per_round:
        raise ConfigError(f"offline_updates={offline_updates} is not a multiple of updates_per_round="
                          f"{updates_per_round}", key="online.offline_updates",
                          fix=f"e.g. {max(1, offline_updates // updates_per_round) * updates_per_round}")
    trajectories = TrajectoryBuffer(capacity, buffer.sampler.slice_len, buffer.sampler.rtg_scale, seed=seed)
    trajectories.seed_with(data.observation.float().to(device), unit_actions(data).to(device),
                           data.reward.float().to(device), data.episode_start, data.episode_length)
    scheduled = ScheduledSlices(buffer, trajectories, RoundSchedule(offline_updates // updates_per_round))
    env = build("env", env_config, key="env")
    return OnlineDTSource(env, policy, scheduled, updates_per_round, target_return,
                          seed=seed + 1_000_003, max_steps=max_steps)

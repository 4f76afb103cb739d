"""Data sources of the loop other than collectors: offline datasets.

The loop iterates a *source*: a collector yields env-step batches; a
``DatasetSource`` yields one empty batch per *round* of updates, so that the
loop's hook points (metrics, evaluation, checkpoints, signals) run between rounds
exactly as they run between collected batches. The optimisation batches of an
offline run come from the dataset sampler that stands in the buffer's place
(``rlrun.trainer.hooks.DatasetSamples``). An offline run's budget counts updates
(``total_updates``): no env frame is ever collected, so ``frames`` stays 0.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping
from typing import Any, Literal

import torch
from tensordict import TensorDict
from torch import Tensor

from rlrun.core.errors import ConfigError
from rlrun.core.registry import NonNegativeInt, PositiveFloat, PositiveInt, register
from rlrun.datasets.minari_format import OfflineData, read_dataset
from rlrun.datasets.transitions import TransitionSampler, iql_reward_scale, observation_stats


class DatasetSource:
    """The source of an offline run: no env steps, one empty ``[0]`` batch per round.

    It meets the ``Source`` protocol (``rlrun.core.contracts``), so the lifecycle (checkpoints,
    resume, shutdown) treats it as any collector; its only state is the dataset's id
    (the sampler's generator is the buffer's state).

    Args:
        data: The dataset (its id is reported; its rows are the buffer's).
    """

    budget_unit = "updates"
    provided_keys: frozenset[str] = frozenset()  # rounds are empty: the buffer's samples hold the data
    updates_per_round = None  # rlrun.lifecycle.build divides the intervals into rounds
    frames = 0
    total_frames = None
    policy_version = 0

    def __init__(self, data: OfflineData):
        self.data = data
        self._round = TensorDict({}, batch_size=[0])

    def __iter__(self) -> Iterator[TensorDict]:
        while True:  # the trainer ends the run when the update budget is spent
            yield self._round

    def sampled_buffer(self, buffer: Any) -> Any:
        """The dataset's sampler, which stands in the buffer's place."""
        return buffer

    def update_policy_weights(self, state_dict: Mapping[str, Tensor] | None = None) -> None:
        """Nothing acts from a copy of the weights offline."""

    def pop_episode_stats(self) -> tuple[list[float], list[int]]:
        return [], []

    def state_dict(self) -> dict:
        return {"dataset": self.data.dataset_id}

    def load_state_dict(self, state: dict) -> None:
        if state.get("dataset") not in (None, self.data.dataset_id):
            raise ValueError(f"the checkpoint trained on dataset {state['dataset']!r}, "
                             f"this run reads {self.data.dataset_id!r}")

    def shutdown(self) -> None:
        """No workers to stop."""


@register("collector", "dataset")
def dataset_source(data: OfflineData) -> DatasetSource:
    """The rounds of an offline run (``dataset=<id>``): updates on the dataset, no env steps.

    Args:
        data: The dataset (supplied by rlrun from the run's ``dataset`` key).
    """
    return DatasetSource(data)


class DatasetTransitions(TransitionSampler):
    """A dataset's transitions in the buffer's place: uniform batches, nothing to store.

    Checkpoints keep only the sampler's generator (``saved_nbytes`` is 0): the data
    is the dataset on disk, named by the run's ``dataset`` key.
    """

    sample_keys = frozenset({"observation", "action", "index", "next.observation", "next.reward",
                             "next.terminated", "next.truncated", "next.done"})

    def saved_nbytes(self) -> int:
        return 0


@register("buffer", "dataset")
def dataset_transitions(data: OfflineData, batch_size: PositiveInt = 256, seed: NonNegativeInt = 0,
                        device: str = "cpu", reward_scale: PositiveFloat | Literal["iql"] = 1.0,
                        reward_shift: float = 0.0) -> DatasetTransitions:
    """Uniform transition batches from the run's dataset (``dataset=<id>``).

    Args:
        data: The dataset (supplied by rlrun from the run's ``dataset`` key).
        batch_size: Transitions per optimiser step.
        seed: The sampler's seed (the run's).
        device: Where batches live (the run's device).
        reward_scale: Rewards are multiplied by this; ``iql`` is IQL's MuJoCo rule,
            ``1000 / (max - min episode return)`` over the dataset.
        reward_shift: Then shifted by this (IQL's AntMaze rule: -1).
    """
    if reward_scale == "iql":
        try:
            reward_scale = iql_reward_scale(data.episode_returns())
        except ValueError as err:
            raise ConfigError(f"{err} ({data.num_episodes} episodes)", key="buffer.reward_scale",
                              fix="give a number, e.g. buffer.reward_scale=1.0") from None
    elif isinstance(reward_scale, str):
        raise ConfigError(f"unknown reward scale {reward_scale!r}", key="buffer.reward_scale",
                          fix="give a number or iql (1000 / (max - min) episode return)")
    moved = OfflineData(**{**vars(data), **{k: getattr(data, k).to(device) for k in _TENSOR_FIELDS}})
    return DatasetTransitions(moved, batch_size, seed=seed, reward_scale=float(reward_scale),
                              reward_shift=reward_shift)


_TENSOR_FIELDS = ("observation", "action", "reward", "next_observation", "terminated", "truncated",
                  "episode_start", "episode_length")


def load_dataset(dataset_id: str, root: str | None, spec: Any) -> OfflineData:
    """Reads ``dataset_id``, checks that its spaces fit the env's spec, and maps its actions
    into the policy's action space.

    Datasets store actions in the env's own space (minari's convention, so that other
    tools read them as they are); rlrun's policies act in ``[spec.action_low,
    spec.action_high]`` (``[-1, 1]`` when the env rescales, gymnasium's
    ``RescaleAction``), so continuous actions are mapped affinely from the dataset's
    Box bounds to the policy's, as the env maps them back when the policy acts.

    Raises:
        ConfigError: No such dataset (the message lists the ones found), or its
            observation/action spaces differ from the env's.
    """
    data = read_dataset(dataset_id, root)
    obs_shape = tuple(data.observation_space.shape)
    space = data.action_space
    discrete = hasattr(space, "n")
    action = int(space.n) if discrete else int(space.shape[0])
    if obs_shape != tuple(spec.observation_shape) or discrete != spec.discrete or action != spec.action_dim:
        env_id = recorded_env_id(data.metadata)
        kind = "discrete" if discrete else "continuous"
        raise ConfigError(
            f"dataset {dataset_id} ({kind} actions of size {action}, observations {obs_shape}, recorded "
            f"on {env_id}) does not fit this run's env ({'discrete' if spec.discrete else 'continuous'} "
            f"actions of size {spec.action_dim}, observations {tuple(spec.observation_shape)})",
            key="dataset", fix=f"pick the env the dataset was recorded on (env=... for {env_id}) "
            "or another dataset (`rlrun dataset list`)")
    if not discrete:
        low = torch.as_tensor(space.low, dtype=torch.float32)
        high = torch.as_tensor(space.high, dtype=torch.float32)
        if torch.isfinite(low).all() and torch.isfinite(high).all():
            unit = (data.action - low) / (high - low)  # in [0, 1]
            action = spec.action_low + unit * (spec.action_high - spec.action_low)
            data = dataclasses.replace(data, action=action.clamp(spec.action_low, spec.action_high))
    return data


def recorded_env_id(metadata: dict) -> str:
    """The gymnasium id of the env a dataset was recorded on (its metadata's env spec), or "?"."""
    spec = metadata.get("env_spec")
    try:
        return json.loads(spec)["id"] if isinstance(spec, str) else "?"
    except (ValueError, KeyError, TypeError):
        return "?"


@torch.no_grad()
def normalize_from_dataset(policy: Any, data: OfflineData) -> None:
    """Sets the policy's observation normaliser (if any) to the dataset's mean and std, for good:
    offline runs never update it, and checkpoints save it with the policy."""
    norm = getattr(policy, "normalizer", None)
    if norm is None:
        return
    mean, std = observation_stats(data.observation)
    norm.mean.copy_(mean.to(norm.mean))
    norm.var.copy_((std.pow(2) - norm.eps).clamp_min(0).to(norm.var))
    norm.count.fill_(float(data.num_steps))

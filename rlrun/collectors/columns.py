"""Where ``SyncCollector`` keeps a batch while it steps: columns allocated once per batch, written in place.

The collector runs one loop for every ``VecEnv``; what differs between envs is where
their arrays live, so it is kept here, in two stores with one interface:

- ``HostColumns``: numpy arrays (gymnasium, EnvPool). Each step is written into
  ``[num_envs, T]`` arrays; the batch's TensorDict wraps them without a copy.
- ``DeviceColumns``: tensors on the env's device (VMAS). Steps are staged time-major in
  chunks (``StagedColumns``); observations are stored once, as next observations, and each
  step's observation is derived from them (the reset one where an episode ended).

A store's ``begin`` starts a batch; per step ``to_policy`` gives the policy its input,
``record_action`` stores the policy's output and returns what the env is stepped with, and
``record_step`` stores the ``EnvStep``; ``finish`` returns the batch's raw (team) rewards and
episode ends, as numpy ``[num_envs, T]`` for the episode bookkeeping, and ``batch`` the
TensorDict's entries, keyed for the env's group (``rlrun.core.specs.entry_key``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from rlrun.core.envs import EnvStep
from rlrun.core.specs import entry_key


def np_dtype(t: Tensor) -> np.dtype:
    """The numpy dtype of a tensor's dtype."""
    return torch.empty((), dtype=t.dtype).numpy().dtype


class HostColumns:
    """A batch in numpy arrays: envs whose steps are numpy (gymnasium, EnvPool).

    Rewards are kept in float64, the env's own, because episode returns are summed from
    them; the stored learning reward is float32 after the env's ``learning_reward``.
    """

    def __init__(self, env: Any, device: torch.device):
        self.env, self.device = env, torch.device("cpu")  # the batch is built here, then moved
        self.on_cpu = device.type == "cpu"
        self.policy_device = device
        self.random_device: torch.device | None = None  # random actions stay on the CPU

    def begin(self, n: int, steps: int, first_obs: np.ndarray, first_state: Any) -> None:
        self.obs = np.empty((n, steps, *first_obs.shape[1:]), first_obs.dtype)
        self.next_obs = np.empty_like(self.obs)
        self.reward = np.empty((n, steps))
        self.terminated = np.empty((n, steps), bool)
        self.truncated = np.empty((n, steps), bool)
        self.lost = np.zeros((n, steps), bool) if self.env.learning_terminal is not None else None
        self.outs: dict[str, np.ndarray] = {}
        self.n, self.steps = n, steps

    def to_policy(self, obs: np.ndarray) -> Tensor:
        obs_t = torch.from_numpy(obs)
        return obs_t if self.on_cpu else obs_t.to(self.policy_device, non_blocking=True)

    def record_action(self, t: int, out: dict[str, Tensor]) -> np.ndarray:
        outs = self.outs
        for k, v in out.items():
            if k not in outs:  # zeros: random-action steps have no policy extras (log-probs)
                outs[k] = np.zeros((self.n, self.steps, *v.shape[1:]), np_dtype(v))
            outs[k][:, t] = v.numpy() if self.on_cpu else v.cpu().numpy()
        return outs["action"][:, t]

    def record_step(self, t: int, obs: np.ndarray, state: Any, step: EnvStep) -> None:
        self.obs[:, t], self.next_obs[:, t] = obs, step.next_obs
        self.reward[:, t], self.terminated[:, t], self.truncated[:, t] = (
            step.reward, step.terminated, step.truncated)
        if self.lost is not None:
            self.lost[:, t] = self.env.learning_terminal

    @staticmethod
    def ended_index(ended: np.ndarray) -> np.ndarray:
        return ended.nonzero()[0]

    def finish(self, random_steps: int) -> tuple[np.ndarray, np.ndarray]:
        return self.reward, self.terminated | self.truncated

    def batch(self, traj: np.ndarray) -> dict:
        term = self.terminated
        if self.lost is not None:
            term |= self.lost  # the learning signal ends there (Atari: a lost life); the episode goes on
        reward = self.env.learning_reward(torch.from_numpy(self.reward.astype(np.float32)).unsqueeze(-1))
        term_t = torch.from_numpy(term).unsqueeze(-1)
        trunc_t = torch.from_numpy(self.truncated).unsqueeze(-1)
        return {"observation": torch.from_numpy(self.obs),
                **{k: torch.from_numpy(v) for k, v in self.outs.items()},
                "next": {"observation": torch.from_numpy(self.next_obs), "reward": reward,
                         "terminated": term_t, "truncated": trunc_t, "done": term_t | trunc_t},
                "collector": {"traj_ids": torch.from_numpy(traj)}}


class DeviceColumns:
    """A batch in tensors on the env's device: envs whose steps are tensors (VMAS), never numpy per step.

    A group's team return is the mean of the agents' rewards summed over the episode.
    Where the env's global state is its observations flattened (``state_is_observations``),
    the state entries are views of the observation columns, not copies.
    """

    def __init__(self, env: Any, device: torch.device):
        self.env, self.device = env, env.device
        self.policy_device = self.random_device = device
        self.same_device = device == env.device
        group = env.spec.group
        self.group = group
        self.k_obs, self.k_next_obs = entry_key("observation", group), entry_key("next.observation", group)
        self.k_reward = entry_key("next.reward", group)
        self.state_is_obs = getattr(env, "state_is_observations", True)
        self._out_keys: dict[str, Any] = {}
        self.staged = StagedColumns(shifted={self.k_next_obs: self.k_obs})  # reused batch after batch

    def begin(self, n: int, steps: int, first_obs: Tensor, first_state: Any) -> None:
        self.staged.begin(n, steps)
        self.first_obs, self.n, self.steps = first_obs, n, steps
        self.resets: list[tuple[int, Tensor]] = []  # (step, observations after it) where episodes ended

    def to_policy(self, obs: Tensor) -> Tensor:
        return obs if self.same_device else obs.to(self.policy_device, non_blocking=True)

    def record_action(self, t: int, out: dict[str, Tensor]) -> Tensor:
        self.out = out
        action = out["action"]
        return action if self.same_device else action.to(self.env.device)

    def _out_key(self, k: str) -> Any:
        key = self._out_keys.get(k)
        if key is None:
            key = self._out_keys[k] = entry_key(k, self.group)
        return key

    def record_step(self, t: int, obs: Tensor, state: Any, step: EnvStep) -> None:
        columns = {**{self._out_key(k): v for k, v in self.out.items()},
                   self.k_next_obs: step.next_obs, self.k_reward: step.reward.unsqueeze(-1),
                   ("next", "terminated"): step.terminated.unsqueeze(-1),
                   ("next", "truncated"): step.truncated.unsqueeze(-1)}
        if not self.state_is_obs:
            columns["state"], columns["next", "state"] = state, step.next_state
        self.staged.write(t, columns)
        if step.obs is not step.next_obs:  # some episodes ended: their next step starts afresh
            self.resets.append((t, step.obs))

    @staticmethod
    def ended_index(ended: Tensor) -> Tensor:
        return ended.nonzero().squeeze(-1)

    def finish(self, random_steps: int) -> tuple[np.ndarray, np.ndarray]:
        cols = self.staged.columns(random_steps)
        term, trunc = cols.pop(("next", "terminated")), cols.pop(("next", "truncated"))
        observation, next_obs = cols[self.k_obs], cols[self.k_next_obs]
        _first_and_reset_observations(observation, self.first_obs, self.resets, term | trunc)
        if self.state_is_obs and self.group is not None:  # views of the observations, no copy
            cols["state"], cols["next", "state"] = observation.flatten(-2), next_obs.flatten(-2)
        self.cols, self.term, self.trunc = cols, term, trunc
        ended = (term | trunc).squeeze(-1)
        reward = cols[self.k_reward]
        team = reward.mean((-2, -1)) if self.group is not None else reward.squeeze(-1)
        # one transfer per batch
        return team.double().cpu().numpy(), ended.cpu().numpy()

    def batch(self, traj: np.ndarray) -> dict:
        term, trunc = self.term, self.trunc
        reward = self.cols[self.k_reward]
        self.cols[self.k_reward] = self.env.learning_reward(reward)
        return {("next", "terminated"): term, ("next", "truncated"): trunc, ("next", "done"): term | trunc,
                ("collector", "traj_ids"): torch.from_numpy(traj).to(self.env.device), **self.cols}


# Steps staged time-major before they go to the [num_envs, T] batch. Written in place per step, a
# step's [num_envs, ...] slice of a batch is one small row per sub-env, T rows apart: at a few
# thousand envs those scattered writes cost a third of VMAS's own step (rlrun.benchmarks vmas).
# A chunk of steps is one contiguous write per step, then one copy per chunk that writes each
# sub-env's rows together.
_CHUNK = 10


class StagedColumns:
    """Per-step tensors ``[num_envs, ...]`` gathered into ``[num_envs, T, ...]`` columns.

    The staging chunks live as long as the collector (``begin`` starts a batch, reusing
    them); the columns are new each batch (they are the batch handed out). ``shifted``
    maps a key to a second column that gets its values one step later (each step's
    observation is the previous step's next observation): written from the staged chunk
    while it is in cache, not in a pass over the finished column.
    """

    def __init__(self, shifted: dict | None = None):
        self.shifted = dict(shifted or {})
        self._stage: dict = {}
        self._cols: dict = {}
        self._first: dict = {}  # the first step each column was written at (policy extras start late)
        self.n = self.steps = self.chunk = 0

    def begin(self, n: int, steps: int) -> None:
        """Starts a batch of ``steps`` steps of ``n`` sub-envs."""
        self.n, self.steps, self.chunk = n, steps, min(_CHUNK, steps)
        self._cols, self._first = {}, {}

    def write(self, t: int, values: dict) -> None:
        for key, v in values.items():
            if key not in self._cols:
                stage = self._stage.get(key)  # kept from an earlier batch if it still fits
                if stage is None or stage.shape != (self.chunk, *v.shape) or stage.dtype != v.dtype:
                    self._stage[key] = torch.empty((self.chunk, *v.shape), dtype=v.dtype, device=v.device)
                with torch.inference_mode(False):  # the loss reads these outside inference mode
                    self._cols[key] = torch.empty((self.n, self.steps, *v.shape[1:]), dtype=v.dtype,
                                                  device=v.device)
                    if key in self.shifted:
                        self._cols[self.shifted[key]] = torch.empty_like(self._cols[key])
                self._first[key] = t
            self._stage[key][t % self.chunk] = v
        if (t + 1) % self.chunk == 0 or t + 1 == self.steps:
            self._flush(t)

    def _flush(self, t: int) -> None:
        start = t - t % self.chunk
        for key, first in self._first.items():
            lo = max(start, first)
            if lo > t:
                continue
            chunk = self._stage[key][lo - start:t + 1 - start].transpose(0, 1)
            self._cols[key][:, lo:t + 1] = chunk
            if key in self.shifted:
                hi = min(t + 2, self.steps)
                self._cols[self.shifted[key]][:, lo + 1:hi] = chunk[:, :hi - lo - 1]

    def columns(self, random_steps: int) -> dict:
        """The filled columns; a column first written after step 0 (a policy extra such as
        ``sample_log_prob``, absent from random-action steps) is zero before it."""
        for key, first in self._first.items():
            if first:
                self._cols[key][:, :first] = 0
        return dict(self._cols)


def _first_and_reset_observations(obs: Tensor, first: Tensor, resets: list[tuple[int, Tensor]],
                                  ended: Tensor) -> None:
    """Completes the observation column, which holds each step's previous next observation.

    Step 0 observes what the batch started from; where an episode ended at t, step
    t+1 observes its reset instead (``next`` keeps the true final observation, for
    bootstrapping through truncation).
    """
    obs[:, 0] = first
    steps = obs.shape[1]
    for t, after in resets:
        if t + 1 < steps:
            rows = ended[:, t, 0]
            obs[rows, t + 1] = after[rows]

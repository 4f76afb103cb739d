"""Collection for agent groups: VMAS stepped in torch, per-agent data under ``("agents", ...)``.

``VmasCollector`` follows ``SyncCollector``'s protocol (frames, total_frames,
policy_version, episode statistics, state) but never leaves torch: actions go
to the env and observations come back as tensors on the env's device. Steps
are staged time-major in chunks and copied into columns allocated once per
batch (``_StagedColumns``); observations are stored once, as next
observations, and each step's observation is derived from them (with the reset
observation where an episode ended); the batch's TensorDict is built once over
the columns. Episode returns (the team's, the mean of
the agents' rewards summed over the episode) and trajectory ids are computed
once per batch from the batch's rewards and ends, as ``SyncCollector`` does.

Batch layout (``[num_envs, T]``):

- ``("agents", "observation") [n, T, n_agents, obs]``, ``("agents", "action")`` and
  the policy's extras (``sample_log_prob``) per agent;
- ``("next", "agents", "observation")``, ``("next", "agents", "reward") [n, T, n_agents, 1]``;
- ``("next", "terminated" | "truncated" | "done") [n, T, 1]`` shared by the group;
- ``"state"``, ``("next", "state") [n, T, state]``: the global state (QMIX's mixer input).
"""

from __future__ import annotations

import torch
from tensordict import TensorDict
from torch import Tensor

from rlrun.collectors.sync import PolicyFn, SyncCollector
from rlrun.core.contracts import key_name
from rlrun.core.errors import ConfigError
from rlrun.core.registry import NonNegativeInt, PositiveInt, register
from rlrun.core.specs import GROUP, entry_key
from rlrun.envs.vmas import VmasEnv

# What every VmasCollector batch holds (dotted names, as hooks and losses declare them).
GROUP_COLLECTED_KEYS: frozenset[str] = frozenset(key_name(entry_key(name, GROUP)) for name in (
    "observation", "action", "next.observation", "next.reward", "next.terminated", "next.truncated",
    "next.done", "state", "next.state", "collector.traj_ids"))


class VmasCollector(SyncCollector):
    """Collects ``[num_envs, T]`` batches of an agent group from a ``VmasEnv``.

    Args:
        env: The VMAS env.
        policy: Maps observations ``[num_envs, n_agents, obs]`` to ``{"action": ..., **extras}``
            with an agent dim.
        frames_per_batch: Frames per batch (all sub-envs together); divisible by ``num_envs``.
        total_frames: Frames to collect in all (rounded up to ``num_envs``).
        init_random_frames: Leading frames with uniform random actions.
        seed: Seeds the env's resets and the random-action generator.
        device: Where batches are put (the policy acts there).
    """

    provided_keys = GROUP_COLLECTED_KEYS

    def __init__(self, env: VmasEnv, policy: PolicyFn, frames_per_batch: int, total_frames: int,
                 init_random_frames: int = 0, seed: int = 0, device: str = "cpu"):
        super().__init__(env, policy, frames_per_batch, total_frames, init_random_frames, seed, device)
        self._state: Tensor | None = None
        # its staging memory is reused batch after batch
        self._staged = _StagedColumns(shifted={("next", GROUP, "observation"): (GROUP, "observation")})

    def _random_action(self) -> dict[str, Tensor]:
        return {"action": super()._random_action()["action"].to(self.device)}  # acts where the policy does

    def collect(self) -> TensorDict:
        """Runs the envs for one batch and returns it as a ``[num_envs, T]`` TensorDict."""
        env, n = self.env, self.env.num_envs
        if self._obs is None:
            # as SyncCollector: a resumed run starts fresh episodes, not a replay of its first ones
            self._obs = env.reset(seed=self.seed + 7919 * (self.frames // n))
            self._state = env.state(self._obs)
        steps = min(self.frames_per_batch, self.total_frames - self.frames) // n
        obs, state = self._obs, self._state
        same_device = self.device == env.device
        random_steps = max(0, -(-(self.init_random_frames - self.frames) // n))
        staged = self._staged
        staged.begin(n, steps)
        resets: list[tuple[int, Tensor]] = []  # (step, observations after it) where episodes ended
        with torch.inference_mode():  # entered once per batch: it is not free per step
            first_obs = obs
            for t in range(steps):
                out = self._random_action() if t < random_steps else self.policy(
                    obs if same_device else obs.to(self.device, non_blocking=True))
                action = out["action"]
                step = env.step(action if same_device else action.to(env.device))
                columns = {**{(GROUP, k): v for k, v in out.items()},
                           ("next", GROUP, "observation"): step.next_obs,
                           ("next", GROUP, "reward"): step.reward.unsqueeze(-1),
                           ("next", "terminated"): step.terminated.unsqueeze(-1),
                           ("next", "truncated"): step.truncated.unsqueeze(-1)}
                if not env.state_is_observations:
                    columns["state"], columns["next", "state"] = state, step.next_state
                staged.write(t, columns)
                if step.obs is not step.next_obs:  # some episodes ended: their next step starts afresh
                    resets.append((t, step.obs))
                obs, state = step.obs, step.state
        self._obs, self._state = obs, state
        self.frames += steps * n
        cols = staged.columns(random_steps)
        term, trunc = cols.pop(("next", "terminated")), cols.pop(("next", "truncated"))
        observation, next_obs = cols[(GROUP, "observation")], cols[("next", GROUP, "observation")]
        _first_and_reset_observations(observation, first_obs, resets, term | trunc)
        if env.state_is_observations:  # the state is the observations flattened: views, no copy
            cols["state"], cols["next", "state"] = observation.flatten(-2), next_obs.flatten(-2)
        ended = (term | trunc).squeeze(-1)
        # one transfer per batch: the team's return is the agents' mean reward summed over the episode
        reward = cols[("next", GROUP, "reward")]
        traj = self._track_episodes(reward.mean((-2, -1)).double().cpu().numpy(), ended.cpu().numpy())
        td = TensorDict({("next", "terminated"): term, ("next", "truncated"): trunc,
                         ("next", "done"): term | trunc,
                         ("collector", "traj_ids"): torch.from_numpy(traj).to(env.device), **cols},
                        batch_size=[n, steps])
        return td if same_device else td.to(self.device, non_blocking=True)

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self._state = None


@register("collector", "vmas")
def make_vmas_collector(env: VmasEnv, policy, frames_per_batch: PositiveInt, total_frames: int,
                        init_random_frames: NonNegativeInt = 0, explore: bool = True, seed: int = 0,
                        device: str = "cpu") -> VmasCollector:
    """Single-process collector of an agent group on a VMAS env, in torch (no numpy per step).

    Acts with the policy's behaviour (its exploration component, else the actor's
    sampling); ``explore: false`` uses the deterministic policy.
    """
    if not isinstance(env, VmasEnv):
        raise ConfigError(f"collector=vmas collects from VMAS envs, not {type(env).__name__}",
                          key="collector.name", fix="use collector=sync for single-agent envs")
    return VmasCollector(env, policy.behaviour(explore), frames_per_batch, total_frames,
                         init_random_frames, seed, device)


# -- batch storage --------------------------------------------------------------------------------

# Steps staged time-major before they go to the [num_envs, T] batch. Written in place per step, a
# step's [num_envs, ...] slice of a batch is one small row per sub-env, T rows apart: at a few
# thousand envs those scattered writes cost a third of VMAS's own step (rlrun.benchmarks vmas).
# A chunk of steps is one contiguous write per step, then one copy per chunk that writes each
# sub-env's rows together.
_CHUNK = 10


class _StagedColumns:
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

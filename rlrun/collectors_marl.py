"""Collection for agent groups: VMAS stepped in torch, per-agent data under ``("agents", ...)``.

``VmasCollector`` follows ``SyncCollector``'s protocol (frames, total_frames,
policy_version, episode statistics, state) but never leaves torch: actions go
to the env and observations come back as tensors on the env's device, and
each step writes into tensors allocated once per batch; the batch's
TensorDict is built once over them. Episode returns (the team's, the mean of
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

from collections.abc import Iterator

import torch
from tensordict import TensorDict
from torch import Tensor

from rlrun.collectors import PolicyFn, SyncCollector
from rlrun.envs.vmas import VmasEnv
from rlrun.errors import ConfigError
from rlrun.registry import NonNegativeInt, PositiveInt, register

GROUP = "agents"

# What every VmasCollector batch holds (dotted names, as hooks and losses declare them).
GROUP_COLLECTED_KEYS: frozenset[str] = frozenset({
    "agents.observation", "agents.action", "next.agents.observation", "next.agents.reward",
    "next.terminated", "next.truncated", "next.done", "state", "next.state", "collector.traj_ids"})


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

    collected_keys = GROUP_COLLECTED_KEYS

    def __init__(self, env: VmasEnv, policy: PolicyFn, frames_per_batch: int, total_frames: int,
                 init_random_frames: int = 0, seed: int = 0, device: str = "cpu"):
        super().__init__(env, policy, frames_per_batch, total_frames, init_random_frames, seed, device)
        self._state: Tensor | None = None

    def __iter__(self) -> Iterator[TensorDict]:
        while self.frames < self.total_frames:
            yield self.collect()

    def _random_action(self) -> dict[str, Tensor]:
        spec, n = self.env.spec, self.env.num_envs
        if spec.discrete:
            action = torch.randint(spec.action_dim, (n, spec.n_agents), generator=self._gen)
        else:
            u = torch.rand(n, spec.n_agents, spec.action_dim, generator=self._gen)
            action = spec.action_low + u * (spec.action_high - spec.action_low)
        return {"action": action.to(self.device)}

    def collect(self) -> TensorDict:
        """Runs the envs for one batch and returns it as a ``[num_envs, T]`` TensorDict."""
        env, n = self.env, self.env.num_envs
        if self._obs is None:
            # as SyncCollector: a resumed run starts fresh episodes, not a replay of its first ones
            self._obs = env.reset(seed=self.seed + 7919 * (self.frames // n))
            self._state = env.state(self._obs)
        steps = min(self.frames_per_batch, self.total_frames - self.frames) // n
        obs, state = self._obs, self._state
        dev, agents = env.device, env.n_agents
        obs_buf = torch.empty((n, steps, *obs.shape[1:]), dtype=obs.dtype, device=dev)
        next_buf = torch.empty_like(obs_buf)
        copy_state = not env.state_is_observations
        if copy_state:
            state_buf = torch.empty((n, steps, *state.shape[1:]), dtype=state.dtype, device=dev)
            next_state_buf = torch.empty_like(state_buf)
        else:  # the state is the observations flattened: views of their buffers, written once
            state_buf, next_state_buf = obs_buf.flatten(-2), next_buf.flatten(-2)
        rew_buf = torch.empty((n, steps, agents, 1), device=dev)
        term_buf = torch.empty((n, steps, 1), dtype=torch.bool, device=dev)
        trunc_buf = torch.empty_like(term_buf)
        outs: dict[str, Tensor] = {}
        same_device = self.device == dev
        random_steps = max(0, -(-(self.init_random_frames - self.frames) // n))
        with torch.inference_mode():  # entered once per batch: it is not free per step
            for t in range(steps):
                out = self._random_action() if t < random_steps else self.policy(
                    obs if same_device else obs.to(self.device, non_blocking=True))
                for k, v in out.items():
                    if k not in outs:  # zeros: random-action steps have no policy extras (log-probs)
                        with torch.inference_mode(False):  # the loss reads these outside inference mode
                            outs[k] = torch.zeros((n, steps, *v.shape[1:]), dtype=v.dtype, device=v.device)
                    outs[k][:, t] = v
                action = outs["action"][:, t]
                step = env.step(action if same_device else action.to(dev))
                obs_buf[:, t], next_buf[:, t] = obs, step.next_obs
                if copy_state:
                    state_buf[:, t], next_state_buf[:, t] = state, step.next_state
                rew_buf[:, t, :, 0] = step.reward
                term_buf[:, t, 0], trunc_buf[:, t, 0] = step.terminated, step.truncated
                obs, state = step.obs, step.state
        self._obs, self._state = obs, state
        self.frames += steps * n
        ended = (term_buf | trunc_buf).squeeze(-1)
        # one transfer per batch: the team's return is the agents' mean reward summed over the episode
        traj = self._track_episodes(rew_buf.mean((-2, -1)).double().cpu().numpy(), ended.cpu().numpy())
        td = TensorDict({
            GROUP: {"observation": obs_buf, **outs},
            "state": state_buf,
            "next": {GROUP: {"observation": next_buf, "reward": rew_buf}, "state": next_state_buf,
                     "terminated": term_buf, "truncated": trunc_buf, "done": term_buf | trunc_buf},
            "collector": {"traj_ids": torch.from_numpy(traj).to(dev)},
        }, batch_size=[n, steps])
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

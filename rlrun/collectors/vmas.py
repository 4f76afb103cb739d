"""``collector=vmas``: the name agent-group configs collect with, kept as an alias of ``collector=sync``.

There is one collector (``rlrun.collectors.sync.SyncCollector``): an agent group is the
one-group case of it, and a VMAS env's tensors stay on its device (``DeviceColumns``).
Batch layout of a group (``[num_envs, T]``):

- ``("agents", "observation") [n, T, n_agents, obs]``, ``("agents", "action")`` and
  the policy's extras (``sample_log_prob``) per agent;
- ``("next", "agents", "observation")``, ``("next", "agents", "reward") [n, T, n_agents, 1]``;
- ``("next", "terminated" | "truncated" | "done") [n, T, 1]`` shared by the group;
- ``"state"``, ``("next", "state") [n, T, state]``: the global state (QMIX's mixer input).
"""

from __future__ import annotations

from rlrun.collectors.sync import SyncCollector, collected_keys, make_sync_collector
from rlrun.core.envs import VecEnv
from rlrun.core.registry import NonNegativeInt, PositiveInt, register
from rlrun.core.specs import GROUP, EnvSpec

# What every batch of an agent group holds (dotted names, as hooks and losses declare them).
GROUP_COLLECTED_KEYS: frozenset[str] = collected_keys(EnvSpec((1,), "float32", False, 1, group=GROUP,
                                                              state_shape=(1,)))


@register("collector", "vmas")
def make_vmas_collector(env: VecEnv, policy, frames_per_batch: PositiveInt, total_frames: int,
                        init_random_frames: NonNegativeInt = 0, explore: bool = True, seed: int = 0,
                        device: str = "cpu") -> SyncCollector:
    """Single-process collector of an agent group on a VMAS env, in torch (no numpy per step).

    The one collector (``collector=sync``), under the name agent-group presets use.

    Acts with the policy's behaviour (its exploration component, else the actor's
    sampling); ``explore: false`` uses the deterministic policy.
    """
    return make_sync_collector(env, policy, frames_per_batch, total_frames, init_random_frames,
                               explore, seed, device)

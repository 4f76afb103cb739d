"""The rule that pairs agent-group algorithms with agent-group envs, from what their factories declare.

A loss class declares ``multi_agent`` (``rlrun.contracts.Loss``); an env factory
declares it as an attribute (``make_vmas_env.multi_agent = True``). The check
runs on the config, before any component is built or any section is checked
against its factory: an algorithm preset for agent groups sets env options
(``env.continuous_actions``) that a single-agent env does not have, and the
misfit, not the option, is what the user must hear about.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlrun.errors import ConfigError
from rlrun.registry import lookup

MULTI_AGENT_ALGOS = "mappo, ippo, maddpg, iddpg, marl_iql, vdn or qmix"
MULTI_AGENT_ENVS = "env=vmas/navigation, vmas/balance or vmas/sampling"


def check_agent_groups(cfg: Mapping[str, Any]) -> None:
    """Raises ``ConfigError`` when the loss trains an agent group and the env is single-agent, or back."""
    loss, env = cfg.get("loss") or {}, cfg.get("env") or {}
    loss_name, env_name = loss.get("name"), env.get("name")
    if not isinstance(loss_name, str) or not isinstance(env_name, str):
        return  # _target_ components declare nothing to check
    group_loss = getattr(lookup("loss", loss_name, key="loss.name").factory, "multi_agent", False)
    group_env = getattr(lookup("env", env_name, key="env.name").factory, "multi_agent", False)
    if group_loss and not group_env:
        raise ConfigError(f"the algorithm's loss ({loss_name}) trains an agent group, but "
                          f"env.name={env_name} is single-agent", key="env",
                          fix=f"use a multi-agent env ({MULTI_AGENT_ENVS}) or a single-agent algorithm "
                          "(`rlrun list algo`)")
    if group_env and not group_loss:
        raise ConfigError(f"env.name={env_name} is an agent group, but the algorithm's loss ({loss_name}) "
                          "is single-agent", key="algo",
                          fix=f"use a multi-agent algorithm: algo={MULTI_AGENT_ALGOS}")

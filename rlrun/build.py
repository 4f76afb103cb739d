"""From a resolved config to the run's components, with the rules that span them.

Rules that involve more than one component are checked here, from what the
components declare (``Loss.on_policy``, ``Loss.action_spaces``,
``Loss.reads``, ``Hook.io``), not left to YAML interpolations:

- an on-policy loss learns from minibatches that cover each collected batch
  (``buffer=minibatch``: sampled without replacement, as large as the batch);
  a replay buffer is refused;
- the loss must support the env's action space;
- optimiser steps per batch follow from the declarations: minibatch coverage
  (on-policy) or ``trainer.updates_per_frame`` (off-policy);
- learning starts after ``collector.init_random_frames`` unless
  ``trainer.learning_starts`` says otherwise, and must start within the budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from rlrun.agent_groups import check_agent_groups
from rlrun.contracts import COLLECTED_KEYS
from rlrun.errors import ConfigError
from rlrun.registry import build
from rlrun.trainer.builtins import learning_hooks, reporting_hooks
from rlrun.trainer.hooks import Hook, TargetUpdate


@dataclass
class Run:
    """The built components of one run (everything but the logger and the lifecycle hooks)."""

    env: Any
    eval_env: Any
    policy: Any
    loss: Any
    optimizer: Any
    collector: Any
    buffer: Any
    hooks: dict[str, Hook]
    origins: dict[str, str]  # hook name -> where it comes from (for `rlrun explain`)
    provided: set[str]       # keys of every collected batch
    epochs_per_batch: int
    optim_steps_per_epoch: int
    learning_starts: int

    def close(self) -> None:
        self.env.close()
        self.eval_env.close()


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise ConfigError(f"unknown device {device!r}", key="device",
                          fix="use auto, cpu, cuda or cuda:N") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("CUDA is not available here", key="device", fix="use device=cpu or auto")
    return dev


def build_run(cfg: DictConfig, run_dir: Path, device: torch.device) -> Run:
    """Builds env, policy, loss, optimiser, exploration, collector, buffer and hooks.

    The order is fixed (it decides which draws of the global RNG initialise
    which network), so that a seed gives the same run every time.
    """
    check_agent_groups(cfg)
    env = build("env", cfg.env)
    policy = build("model", cfg.model, spec=env.spec).to(device)
    loss = build("loss", cfg.loss, policy=policy, spec=env.spec, gamma=cfg.gamma).to(device)
    _check_action_space(loss, env.spec)
    optimizer = build("optim", cfg.optim, param_groups=loss.param_groups())
    if cfg.get("exploration"):
        policy.exploration = build("exploration", cfg.exploration, actor=policy.actor, spec=env.spec,
                                   num_envs=env.num_envs)
    collector = build("collector", cfg.collector, env=env, policy=policy,
                      total_frames=cfg.total_frames, seed=cfg.seed, device=str(device))
    fpb = cfg.collector.frames_per_batch
    buffer_cfg = _buffer_config(cfg, loss)
    buffer = build("buffer", buffer_cfg, seed=cfg.seed, device=str(device), run_dir=run_dir)

    configured = {name: (build("hook", node, key=f"hooks.{name}", gamma=cfg.gamma, loss=loss,
                               policy=policy), f"config: hooks.{name}")
                  for name, node in (cfg.get("hooks") or {}).items() if node}
    eval_env = build("env", {**OmegaConf.to_container(cfg.env, resolve=True),
                             "num_envs": min(cfg.eval.episodes, cfg.eval.max_envs)}, key="env")
    learning = learning_hooks(loss)
    reporting = reporting_hooks(cfg, optimizer, eval_env, str(device), run_dir)
    for name in sorted(configured.keys() & (learning.keys() | reporting.keys())):
        raise ConfigError(f"hooks.{name} is a built-in hook's name", key=f"hooks.{name}",
                          fix=f"rename it, e.g. hooks.my_{name}")
    # built-in learning hooks, then the config's, then reporting: the tie-break of the declared order
    wired = {**learning, **configured, **reporting}
    hooks = {name: hook for name, (hook, _) in wired.items()}
    origins = {name: origin for name, (_, origin) in wired.items()}
    if loss.has_targets and not any(isinstance(h, TargetUpdate) for h in hooks.values()):
        raise ConfigError(f"{type(loss).__name__} keeps target networks, but no hook moves them",
                          key="hooks.target_update",
                          fix="add hooks.target_update={name:target_update,interval_updates:1}")

    steps = _optim_steps(cfg, loss, buffer_cfg, fpb)
    learning_starts = cfg.trainer.get("learning_starts")
    if learning_starts is None:
        learning_starts = cfg.collector.get("init_random_frames", 0) or 0
    if learning_starts >= cfg.total_frames:
        raise ConfigError(
            f"learning starts at {learning_starts} frames, but the run has only total_frames="
            f"{cfg.total_frames}: it would never train", key="total_frames",
            fix=f"raise total_frames above {learning_starts}, or lower collector.init_random_frames "
            "(and trainer.learning_starts if set)")
    collected = getattr(collector, "collected_keys", COLLECTED_KEYS)  # an agent group's live under "agents"
    provided = set(collected) | policy.behaviour_keys(cfg.collector.get("explore", True))
    return Run(env, eval_env, policy, loss, optimizer, collector, buffer, hooks, origins, provided,
               cfg.trainer.epochs_per_batch, steps, learning_starts)


def _check_action_space(loss: Any, spec: Any) -> None:
    space = "discrete" if spec.discrete else "continuous"
    if space not in getattr(loss, "action_spaces", (space,)):
        raise ConfigError(f"the loss {type(loss).__name__} needs {' or '.join(loss.action_spaces)} "
                          f"actions; this env's are {space}", key="algo",
                          fix=f"pick an algorithm for {space} actions (`rlrun list algo`) or another env")


def _buffer_config(cfg: DictConfig, loss: Any) -> dict:
    """The buffer's config with the on-policy rule applied (capacity = one batch)."""
    if cfg.get("buffer") is None:
        raise ConfigError("this algorithm learns from a buffer but none is configured", key="buffer",
                          fix="use buffer=minibatch (on-policy) or buffer=replay (off-policy)")
    node = OmegaConf.to_container(cfg.buffer, resolve=True)
    fpb = cfg.collector.frames_per_batch
    if getattr(loss, "on_policy", False):
        if node.get("sampler") != "without_replacement":
            raise ConfigError(
                f"{type(loss).__name__} learns on-policy from each collected batch, but "
                f"buffer={node.get('name')} samples {node.get('sampler')} from a replay buffer",
                key="buffer", fix="use buffer=minibatch (each epoch visits every frame of the batch once)")
        if node.get("capacity") is None:
            node["capacity"] = fpb
        elif node["capacity"] != fpb:
            raise ConfigError(f"an on-policy buffer holds one batch ({fpb} frames), not {node['capacity']}",
                              key="buffer.capacity", fix="remove buffer.capacity (it follows the batch)")
    elif node.get("capacity") is None:
        raise ConfigError("an off-policy buffer needs a capacity", key="buffer.capacity",
                          fix="set buffer.capacity, e.g. 1000000")
    capacity, batch = node.get("capacity"), node.get("batch_size")
    if _is_int(capacity) and 0 < capacity < fpb:
        raise ConfigError(f"the buffer ({capacity}) cannot hold one batch of {fpb} frames",
                          key="buffer.capacity",
                          fix=f"set buffer.capacity >= {fpb} or lower collector.frames_per_batch")
    if node.get("sampler") == "without_replacement" and _is_int(batch) and _is_int(capacity) \
            and batch > capacity:
        raise ConfigError(f"minibatches of {batch} do not fit in the {capacity} frames of a batch",
                          key="buffer.batch_size",
                          fix=f"set buffer.batch_size <= {capacity} or raise collector.frames_per_batch")
    return node


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _optim_steps(cfg: DictConfig, loss: Any, buffer_cfg: dict, fpb: int) -> int:
    """Optimiser steps per epoch: explicit, or derived from the declarations."""
    explicit = cfg.trainer.get("optim_steps_per_epoch")
    per_frame = cfg.trainer.get("updates_per_frame")
    if getattr(loss, "on_policy", False):
        if per_frame is not None:
            raise ConfigError("on-policy runs take one pass of minibatches per epoch",
                              key="trainer.updates_per_frame",
                              fix="remove it; set buffer.batch_size or trainer.epochs_per_batch instead")
        cover = -(-buffer_cfg["capacity"] // buffer_cfg["batch_size"])
        if explicit is not None and explicit < cover:
            raise ConfigError(f"{explicit} minibatches of {buffer_cfg['batch_size']} do not cover a batch "
                              f"of {fpb} frames", key="trainer.optim_steps_per_epoch",
                              fix=f"remove it (derived: {cover}) or set it >= {cover}")
        return explicit if explicit is not None else cover
    if explicit is not None:  # an explicit count wins over the preset's ratio
        return explicit
    if per_frame is None:
        return 1
    if not per_frame > 0:
        raise ConfigError(f"must be > 0, got {per_frame}", key="trainer.updates_per_frame",
                          fix="e.g. trainer.updates_per_frame=1 (one update per collected frame)")
    return max(1, math.ceil(fpb * per_frame - 1e-9))


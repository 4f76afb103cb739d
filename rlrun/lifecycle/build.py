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
  ``trainer.learning_starts`` says otherwise, and must start within the budget;
- the data source fits the loss (``Loss.learns_from``): a run with ``dataset=<id>``
  is offline (a ``DatasetSource``, or oDT's schedule with ``online.*``, the dataset
  in the buffer's place, budget in ``total_updates``, intervals in updates), one
  without collects (``total_frames``); the dataset's spaces must fit the env; the
  source's declared ``budget_unit`` must be the budget's.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from rlrun.core.agent_groups import check_agent_groups
from rlrun.core.errors import ConfigError
from rlrun.core.registry import build
from rlrun.distributed.ranked import one_run
from rlrun.distributed.sync import active
from rlrun.lifecycle.load import resolve_device  # noqa: F401 -- the run's device, as rlrun.load resolves it
from rlrun.lifecycle.writer import CheckpointWriter, save_best
from rlrun.loggers.deferred import DeferredLogger
from rlrun.loggers.tracking import Progress
from rlrun.trainer.builtins import (
    Checkpointing,
    KeepBest,
    ProgressHook,
    WorldStop,
    learning_hooks,
    reporting_hooks,
)
from rlrun.trainer.hooks import Hook, TargetUpdate
from rlrun.trainer.loop import Budget, Trainer

WORLD_STOP = "world_stop"  # the hook through which several ranks stop together

OFFLINE_ROUND = 1000  # updates per round of an offline run (metrics, signals and intervals are checked
                      # between rounds): ~1-5 s of IQL on a CPU; trainer.optim_steps_per_epoch overrides


@dataclass
class Parts:
    """The built components of one run and their hooks (``build_parts``); ``Run`` adds the rest."""

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
    budget: Budget

    def close(self) -> None:
        self.env.close()
        if self.eval_env is not self.env:
            self.eval_env.close()


def build_parts(cfg: DictConfig, run_dir: Path, device: torch.device) -> Parts:
    """Builds env, policy, loss, optimiser, exploration, buffer, source and hooks.

    The order is fixed (it decides which draws of the global RNG initialise
    which network), so that a seed gives the same run every time. The source is
    built as any component (``collector`` kind, ``rlrun.core.contracts.Source``) from the
    node ``_source_node`` picks; what the run does with it follows from what it
    declares (its budget unit, its keys, its updates per round).
    """
    check_agent_groups(cfg)
    reads_dataset = cfg.get("dataset") is not None
    eval_env_cfg = {**OmegaConf.to_container(cfg.env, resolve=True),
                    "num_envs": min(cfg.eval.episodes, cfg.eval.max_envs)}
    # a run that reads a dataset steps no env of its own to learn: one env evaluates and gives the spec
    env = build("env", eval_env_cfg if reads_dataset else cfg.env, key="env")
    policy = build("model", cfg.model, spec=env.spec).to(device)
    loss = build("loss", cfg.loss, policy=policy, spec=env.spec, gamma=cfg.gamma).to(device)
    _check_action_space(loss, env.spec)
    budget = _check_source(cfg, loss, reads_dataset)
    optimizer = build("optim", cfg.optim, param_groups=loss.param_groups())
    if cfg.get("exploration"):
        policy.exploration = build("exploration", cfg.exploration, actor=policy.actor, spec=env.spec,
                                   num_envs=env.num_envs)
    data = _dataset(cfg, env, policy) if reads_dataset else None
    buffer_cfg = _buffer_config(cfg, loss, reads_dataset)
    buffer = build("buffer", buffer_cfg, data=data, seed=cfg.seed, device=str(device), run_dir=run_dir)
    source_node, source_key = _source_node(cfg)
    source = build("collector", source_node, key=source_key, env=env, env_config=cfg.env, policy=policy,
                   data=data, buffer=buffer, total_frames=cfg.total_frames, seed=cfg.seed, device=str(device))
    if source.budget_unit != budget.unit:
        source.shutdown()
        raise ConfigError(f"the source {type(source).__name__} counts {source.budget_unit}, but this run's "
                          f"budget counts {budget.unit}", key=f"{source_key}.name",
                          fix=f"pick a source that counts {budget.unit}, or set total_{source.budget_unit}")
    buffer = source.sampled_buffer(buffer)

    configured = {name: (build("hook", node, key=f"hooks.{name}", gamma=cfg.gamma, loss=loss,
                               policy=policy), f"config: hooks.{name}")
                  for name, node in (cfg.get("hooks") or {}).items() if node}
    eval_env = env if reads_dataset else build("env", eval_env_cfg, key="env")
    learning = learning_hooks(loss, buffer.sample_keys if reads_dataset else None)
    reporting = reporting_hooks(cfg, optimizer, eval_env, str(device), run_dir, budget.unit)
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

    provided = set(source.provided_keys)
    if provided:  # the acting policy writes its behaviour's keys (e.g. sample_log_prob) into every step
        provided |= policy.behaviour_keys(cfg.get("collector", {}).get("explore", True))
    steps = _optim_steps(cfg, loss, buffer_cfg, source)
    learning_starts = _learning_starts(cfg, budget)
    return Parts(env, eval_env, policy, loss, optimizer, source, buffer, hooks, origins, provided,
               cfg.trainer.epochs_per_batch, steps, learning_starts, budget)


@dataclass(frozen=True)
class Run:
    """A whole run: its parts, the trainer over them, its logger (whose tracker run ``open`` makes
    once a checkpoint is restored), checkpoint writer and progress line. ``with`` closes it as one
    thing, last opened first: progress, the source's workers, the envs."""

    parts: Parts
    trainer: Trainer
    logger: DeferredLogger
    writer: CheckpointWriter
    progress: Progress
    done: int  # progress in the budget's unit where the checkpoint left it (0: a fresh start)
    closing: contextlib.ExitStack

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc: object) -> None:
        self.closing.close()


def build_run(cfg: DictConfig, run_dir: Path, device: torch.device, state: dict | None = None,
              config_text: str | None = None, tracking: dict | None = None) -> Run:
    """The whole run, every attribute given at construction: ``build_parts``, then the progress line,
    the checkpoint writer (``tracking``: what ``tracking.json`` will hold), the logger (not yet
    open), the compiled step (``compile=true``) and the trainer with the lifecycle hooks: progress,
    and the checkpoint last in config order (its save() logs the batch's metrics, progress
    included, first). ``state``: the checkpoint to resume (only its counters are read here)."""
    with contextlib.ExitStack() as closing:  # what is built is closed if a later part fails
        parts = one_run(build_parts(cfg, run_dir, device))  # issue 39: counted in all ranks' frames
        closing.callback(parts.close)
        closing.callback(parts.collector.shutdown)
        unit, total = parts.budget.unit, parts.budget.total
        done = int(state["frames"] if unit == "frames" else state["optim_steps"]) if state is not None else 0
        progress = Progress(total, done, cfg.progress, unit=unit)
        closing.callback(progress.close)
        writer = CheckpointWriter(cfg, run_dir, config_text, tracking)
        hooks = {**parts.hooks, "progress": ProgressHook(progress, parts.hooks["train_stats"]),
                 "checkpoint": Checkpointing(writer.save, cfg.checkpoint.get(f"interval_{unit}"))}
        if cfg.checkpoint.get("keep_best"):  # <run dir>/best/ by the evaluation return
            hooks["keep_best"] = KeepBest(lambda frames, metrics: save_best(
                run_dir, cfg, parts.policy, frames, metrics, writer.config_text))
        compiled = None
        if cfg.get("compile") is True:  # torch.compile (and torch._dynamo) only when asked for
            from rlrun.trainer.compiled import CompiledUpdate, compile_mode

            compiled = CompiledUpdate(parts.loss, parts.optimizer, compile_mode(device))
        elif cfg.get("compile") == "auto":  # compiles later, if the warm-up's timing says it pays
            hooks["compile_auto"] = _compile_auto(parts, device)
        if active():  # last: every rank leaves the loop after the same batch
            hooks[WORLD_STOP] = WorldStop()
        logger = DeferredLogger(cfg.logger)
        trainer = Trainer(parts.collector, parts.loss, parts.optimizer, hooks, parts.epochs_per_batch,
                          parts.optim_steps_per_epoch, parts.learning_starts, parts.buffer, logger=logger,
                          policy=parts.policy, provided=parts.provided, budget=parts.budget,
                          compiled=compiled)
        return Run(parts, trainer, logger, writer, progress, done, closing.pop_all())


def _compile_auto(parts: Any, device: torch.device) -> Hook:
    """``compile=auto``'s hook (rlrun.trainer.compile_auto); builds ``compile=true``'s update to switch to."""
    from rlrun.trainer.compile_auto import CompileAuto

    def build_compiled() -> Any:
        from rlrun.trainer.compiled import CompiledUpdate, compile_mode

        return CompiledUpdate(parts.loss, parts.optimizer, compile_mode(device))
    return CompileAuto(build_compiled)


def _source_node(cfg: DictConfig) -> tuple[dict, str]:
    """The source's config node and its key: ``collector`` for a run that collects; with
    ``dataset=<id>``, the dataset's rounds, or the ``online`` section's schedule (online DT)."""
    if cfg.get("collector") is not None:
        return OmegaConf.to_container(cfg.collector, resolve=True), "collector"
    if cfg.get("online") is not None:
        return {"name": "online_dt", **OmegaConf.to_container(cfg.online, resolve=True)}, "online"
    return {"name": "dataset"}, "dataset"


def _learning_starts(cfg: DictConfig, budget: Budget) -> int:
    """Frames collected before the first update (0 when the budget counts updates)."""
    if budget.unit == "updates":
        return 0
    learning_starts = cfg.trainer.get("learning_starts")
    if learning_starts is None:
        learning_starts = cfg.collector.get("init_random_frames", 0) or 0
    if learning_starts >= cfg.total_frames:
        raise ConfigError(
            f"learning starts at {learning_starts} frames, but the run has only total_frames="
            f"{cfg.total_frames}: it would never train", key="total_frames",
            fix=f"raise total_frames above {learning_starts}, or lower collector.init_random_frames "
            "(and trainer.learning_starts if set)")
    return learning_starts


def _check_source(cfg: DictConfig, loss: Any, offline: bool) -> Budget:
    """The data source fits the loss, and the budget counts what the source gives."""
    name = type(loss).__name__
    total_frames, total_updates = cfg.get("total_frames"), cfg.get("total_updates")
    if offline:
        if "dataset" not in loss.learns_from:
            raise ConfigError(f"{name} learns from collected {'batches' if loss.on_policy else 'steps'}, "
                              "not from a dataset", key="dataset",
                              fix="remove dataset=..., or pick an offline algorithm (algo=iql, algo=cql)")
        if total_frames is not None:
            raise ConfigError(f"total_frames={total_frames} counts env steps, but an offline run (dataset="
                              f"{cfg.dataset}) takes none", key="total_frames",
                              fix="set total_frames=null and the budget in updates: total_updates=N")
        if total_updates is None:
            raise ConfigError("an offline run's budget counts optimiser steps, and is not set",
                              key="total_updates", fix="e.g. total_updates=50000")
        for section in ("eval", "checkpoint"):
            if cfg[section].get("interval_updates") is None:
                raise ConfigError("an offline run counts its intervals in updates",
                                  key=f"{section}.interval_updates",
                                  fix=f"set {section}.interval_updates=N (0: only at the end)")
        return Budget("updates", int(total_updates))
    if "collector" not in loss.learns_from:
        raise ConfigError(f"{name} learns from a dataset, and none is given", key="dataset",
                          fix="add dataset=<id> (`rlrun dataset list`), or make one with "
                          "`rlrun dataset make env=<env> kind=medium-replay`")
    if total_updates is not None:
        raise ConfigError(f"total_updates={total_updates} is an offline run's budget; this run collects "
                          "from the env", key="total_updates",
                          fix="remove total_updates and set total_frames=N (or give dataset=<id>)")
    if total_frames is None:
        raise ConfigError("is not set", key="total_frames", fix="e.g. total_frames=100000")
    return Budget("frames", int(total_frames))


def _dataset(cfg: DictConfig, env: Any, policy: Any) -> Any:
    """The run's dataset (its spaces checked against the env's); the normaliser set from its statistics."""
    from rlrun.collectors.dataset import load_dataset, normalize_from_dataset

    data = load_dataset(str(cfg.dataset), cfg.get("dataset_root"), env.spec)
    normalize_from_dataset(policy, data)
    return data


def _check_action_space(loss: Any, spec: Any) -> None:
    space = "discrete" if spec.discrete else "continuous"
    if space not in loss.action_spaces:  # LossModule members: checked when the loss was built
        raise ConfigError(f"the loss {type(loss).__name__} needs {' or '.join(loss.action_spaces)} "
                          f"actions; this env's are {space}", key="algo",
                          fix=f"pick an algorithm for {space} actions (`rlrun list algo`) or another env")


def _buffer_config(cfg: DictConfig, loss: Any, reads_dataset: bool = False) -> dict:
    """The buffer's config: a dataset's sampler for a run that reads one; else with the
    on-policy rule applied (capacity = one batch)."""
    if reads_dataset:
        node = OmegaConf.to_container(cfg.buffer, resolve=True) if cfg.get("buffer") is not None else {}
        name = str(node.get("name", ""))
        if not (name.startswith("dataset") or name == "trajectory_slices"):
            raise ConfigError(f"an offline run samples its dataset, not buffer={node.get('name')}",
                              key="buffer",
                              fix="use buffer=dataset (or trajectory_slices for sequence models)")
        return node
    if cfg.get("buffer") is None:
        raise ConfigError("this algorithm learns from a buffer but none is configured", key="buffer",
                          fix="use buffer=minibatch (on-policy) or buffer=replay (off-policy)")
    node = OmegaConf.to_container(cfg.buffer, resolve=True)
    fpb = cfg.collector.get("frames_per_batch")
    if fpb is None:  # the collector's own check comes later: the buffer is built first
        raise ConfigError("is required but not set", key="collector.frames_per_batch",
                          fix="set collector.frames_per_batch=<env steps per batch> (the presets set it)")
    if loss.on_policy:
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


def _optim_steps(cfg: DictConfig, loss: Any, buffer_cfg: dict, source: Any) -> int:
    """Optimiser steps per epoch: the source's rounds, explicit, or derived from the declarations."""
    explicit = cfg.trainer.get("optim_steps_per_epoch")
    if source.updates_per_round is not None:
        if explicit not in (None, source.updates_per_round):
            raise ConfigError(f"this run's source has {source.updates_per_round} updates per round",
                              key="trainer.optim_steps_per_epoch",
                              fix="remove it; the source's own setting decides (online.updates_per_round)")
        return source.updates_per_round
    if source.budget_unit == "updates":
        if explicit:
            return explicit
        # rounds that divide every interval, so that evaluations and checkpoints land on them
        intervals = [cfg.eval.get("interval_updates"), cfg.checkpoint.get("interval_updates")]
        return math.gcd(OFFLINE_ROUND, *(int(i) for i in intervals if i))
    fpb = cfg.collector.frames_per_batch
    per_frame = cfg.trainer.get("updates_per_frame")
    if loss.on_policy:
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


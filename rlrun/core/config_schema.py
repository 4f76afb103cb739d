"""The schema of the config sections that are not components, and one check of the whole config.

Component sections (``env``, ``model``, ``loss``, ``buffer``, ``optim``,
``collector``, ``logger``, ``exploration``, ``hooks.*``) are described by their
factories' signatures (``rlrun.core.registry``); the others by the dataclasses
below. ``validate_sections`` checks both, before anything is built: every key
must be known, every value of the annotated type and range, so that a key added
to a section or a factory is checked by construction.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from omegaconf import DictConfig, OmegaConf

from rlrun.core.agent_groups import check_agent_groups
from rlrun.core.errors import ConfigError, did_you_mean
from rlrun.core.limits import available_memory
from rlrun.core.registry import (
    Footprint,
    Fraction,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    Range,
    check_kwargs,
    check_value,
    resolve_factory,
    run_check,
)

# Budgets up to 10^12 (11 days at a million frames per second): counters stay exact in int64 and
# in the float fractions schedules use; a larger number is a typo, not a plan.
Budget = Annotated[int, Range(gt=0, le=10**12)]
# What numpy's and torch's seeding accept (numpy: 0 <= seed < 2^32); a larger one overflowed mid-build.
Seed = Annotated[int, Range(ge=0, le=2**32 - 1)]

# Sections built by the registry: config key -> component kind.
# Checked in this order: a key that others interpolate (collector.frames_per_batch) comes first.
COMPONENT_SECTIONS = {"collector": "collector", "env": "env", "optim": "optim", "buffer": "buffer",
                      "model": "model", "loss": "loss", "exploration": "exploration", "logger": "logger"}


# The sections conf/config.yaml writes out in full have their defaults there, and only there: the
# dataclasses below give their keys' types and ranges (kw_only: no defaults, any order). A key deleted
# from the config is then reported missing rather than filled from a second copy of its default.


@dataclass(kw_only=True)
class TrainerSection:
    epochs_per_batch: PositiveInt
    optim_steps_per_epoch: NonNegativeInt | None  # null: derived (rlrun.lifecycle.build)
    updates_per_frame: PositiveFloat | None       # off-policy update-to-data ratio
    learning_starts: NonNegativeInt | None        # null: collector.init_random_frames


@dataclass(kw_only=True)
class EvalSection:
    interval_frames: NonNegativeInt          # 0: only the final evaluation
    interval_updates: NonNegativeInt | None  # offline runs (budget in updates); 0: only the final
    episodes: PositiveInt
    max_envs: PositiveInt
    target_return: float | None
    video: bool               # record evaluation episodes (rlrun.trainer.video.EvalVideo)
    video_every: PositiveInt  # every k-th evaluation


@dataclass(kw_only=True)
class CheckpointSection:
    interval_frames: NonNegativeInt
    interval_updates: NonNegativeInt | None  # offline runs (budget in updates)
    buffer: bool | Literal["auto"]
    max_buffer_mb: NonNegativeFloat
    keep_best: bool = False   # <run dir>/best/policy.pt: the best evaluation's policy
    keep_last: PositiveInt = 1  # periodic checkpoints kept (N > 1: also checkpoints/<frames>.pt)


@dataclass
class PaperSection:
    """The reference a ``+paper=...`` config reproduces (``rlrun report`` reads it)."""

    table: str
    algo: str
    env: str
    reference_mean: float | None  # None: the paper reports curves only (Figure 2)
    reference_std: NonNegativeFloat | None
    budget_frames: PositiveInt | None = None   # online tables (Table 1)
    budget_updates: PositiveInt | None = None  # offline tables (Table 2): gradient updates


@dataclass
class OnlineSection:
    """Online DT's schedule (``algo=odt``): offline updates, then rounds that collect episodes."""

    target_return: float                 # conditioned on when collecting (env units)
    offline_updates: NonNegativeInt = 0  # updates on the dataset before the first collection
    updates_per_round: PositiveInt = 300
    capacity: PositiveInt = 1000         # episodes in the trajectory buffer
    max_steps: PositiveInt = 100_000     # vector steps per round at most


@dataclass(kw_only=True)
class RunConfig:
    """The top level of a run's config (component sections are checked by their factories).

    Defaults: conf/config.yaml (``???`` where a preset must set the value); ``paper`` and
    ``online``, which only presets write, have theirs in their dataclasses.
    """

    total_frames: Budget | None          # online budget (env steps); null for offline runs
    total_updates: Budget | None         # offline budget (optimiser steps)
    dataset: str | None                  # offline data: a Minari dataset id (`rlrun dataset list`)
    dataset_root: str | None             # where datasets live (null: $MINARI_DATASETS_PATH, ~/.minari)
    gamma: Fraction
    seed: Seed
    device: str
    threads: Annotated[int, Range(ge=1)] | None
    compile: bool | Literal["auto"]  # torch.compile the update (rlrun.trainer.compiled); auto: compile_auto
    gemm: Literal["auto", "blas", "onednn"] = "blas"  # large CPU matrix products (rlrun.modules.onednn)
    resume: bool | str
    resume_allow_changes: bool
    progress: bool | Literal["auto"]
    trainer: TrainerSection
    eval: EvalSection
    checkpoint: CheckpointSection
    hooks: dict[str, Any]
    paper: PaperSection | None = None
    online: OnlineSection | None = None  # online DT's schedule of sources (rlrun.algos.odt)


def validate_sections(cfg: DictConfig | dict) -> None:
    """Checks every section of a run config; raises ``ConfigError`` naming the key and the fix.

    Component sections are checked against their factories' signatures
    without building anything; the others against ``RunConfig``.
    """
    check_deletions(cfg, deleted_keys())
    if isinstance(cfg, DictConfig):
        if OmegaConf.is_missing(cfg, "total_frames"):
            raise ConfigError("is not set", key="total_frames", fix="e.g. total_frames=100000")
        cfg, unresolved = _resolve(cfg)
    else:
        unresolved = []
    components = {k: cfg[k] for k in COMPONENT_SECTIONS if k in cfg}
    check_dataclass(RunConfig, {k: v for k, v in cfg.items() if k not in components}, "")
    check_agent_groups(components)  # before the env's options: a misfit algorithm sets options it lacks
    footprints = {}
    for section, kind in COMPONENT_SECTIONS.items():
        if components.get(section) is not None:
            footprints[section] = check_component(kind, components[section], section)
    for name, node in (cfg.get("hooks") or {}).items():
        if node:  # hooks.<name>: null switches a preset's hook off
            check_component("hook", node, f"hooks.{name}")
    if unresolved:  # the keys it refers to are fine (else they were reported above)
        raise unresolved[0]
    if isinstance(footprints.get("env"), Footprint) and cfg.get("dataset") is None:
        check_memory(cfg, footprints["env"])


def deleted_keys() -> list[str]:
    """The keys this Hydra job's command line deletes (``~optim.lr``, ``~optim.lr=3e-4``)."""
    try:
        from hydra.core.hydra_config import HydraConfig

        if not HydraConfig.initialized():
            return []
        task = list(HydraConfig.get().overrides.task)
    except Exception:  # not run by Hydra (rlrun.train, a loaded config): nothing was deleted
        return []
    return [o[1:].partition("=")[0] for o in task if o.startswith("~")]


def check_deletions(cfg: DictConfig | dict, deleted: list[str]) -> None:
    """Refuses deleting a key that then falls back to a default in code (a factory's signature or
    the schema below): ``~optim.lr`` silently trained with Adam's own 1e-3 instead of the preset's
    value. Deleting a section or a hook (``~hooks.x``) stays allowed: nothing falls back."""
    for key in deleted:
        found, default, owner = _code_default(cfg, key)
        if found:
            raise ConfigError(f"deleting it does not unset it: the run would silently use {owner}'s "
                              f"default {default!r} instead of the preset's value", key=key,
                              fix=f"set it instead, e.g. {key}={_yaml_value(default)}")


def _yaml_value(v: Any) -> str:
    """``v`` as written on the command line: null, true, [64,64], 0.0003."""
    if v is None or isinstance(v, bool):
        return {None: "null", True: "true", False: "false"}[v]
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_yaml_value(x) for x in v) + "]"
    return str(v)


def _code_default(cfg: DictConfig | dict, key: str) -> tuple[bool, Any, str]:
    """``(True, default, owner)`` when ``key`` is an option whose default lives in code."""
    parts = key.split(".")
    section = parts[0]
    if section in COMPONENT_SECTIONS or section == "hooks":
        depth = 3 if section == "hooks" else 2
        if len(parts) != depth:
            return False, None, ""
        node_key = ".".join(parts[:-1])
        node = OmegaConf.select(cfg, node_key) if OmegaConf.is_config(cfg) else None
        if node is None and not OmegaConf.is_config(cfg):
            node = cfg.get(parts[0], {}) if depth == 2 else (cfg.get("hooks") or {}).get(parts[1])
        if not isinstance(node, (dict, DictConfig)):
            return False, None, ""
        node = OmegaConf.to_container(node, resolve=False) if OmegaConf.is_config(node) else dict(node)
        kind = "hook" if section == "hooks" else COMPONENT_SECTIONS[section]
        try:
            factory, _ = resolve_factory(kind, node, node_key)
            param = inspect.signature(factory).parameters.get(parts[-1])
        except (ConfigError, TypeError, ValueError):
            return False, None, ""
        if param is None or param.default is param.empty:
            return False, None, ""
        return True, param.default, f"{node_key} {node.get('name') or node.get('_target_')}"
    schema: Any = RunConfig
    for i, part in enumerate(parts):
        fields = {f.name: f for f in dataclasses.fields(schema)}
        if part not in fields:
            return False, None, ""
        f = fields[part]
        nested = _section_type(typing.get_type_hints(schema, include_extras=True)[part])
        if nested is not None and i < len(parts) - 1:
            schema = nested
            continue
        if i < len(parts) - 1 or nested is not None or f.default is dataclasses.MISSING:
            return False, None, ""
        return True, f.default, "rlrun"
    return False, None, ""


def _resolve(cfg: DictConfig) -> tuple[dict, list[ConfigError]]:
    """The config as plain containers; a value whose interpolation fails is left out and reported.

    Leaving it out lets the checks name the key the user set (``buffer.batch_size=0``)
    rather than the one that interpolates it (``trainer.optim_steps_per_epoch``).
    """
    errors: list[ConfigError] = []

    def walk(node: Any, raw: Any, prefix: str) -> Any:
        if not isinstance(raw, dict):
            return raw
        out = {}
        for k, v in raw.items():
            key = f"{prefix}{k}"
            if isinstance(v, dict):
                out[k] = walk(node, v, f"{key}.")
                continue
            try:
                value = OmegaConf.select(node, key, throw_on_missing=True)
            except Exception as err:  # e.g. ceil_div by a batch size of 0, or of 'abc'
                cause = str(err.__cause__ or err).splitlines()[0] or type(err).__name__
                errors.append(ConfigError(f"cannot resolve {v} ({cause})", key=key,
                                          fix="check the keys it refers to (see `rlrun --cfg job`)"))
                continue
            out[k] = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
        return out

    return walk(cfg, OmegaConf.to_container(cfg, resolve=False), ""), errors


def check_component(kind: str, node: Any, key: str) -> Any:
    """Checks a component node's options against its factory, as ``registry.build`` will, and
    runs the factory's own config check (``registry.register(check=...)``), returning its result."""
    if not isinstance(node, dict):
        raise ConfigError(f"must be a config section (name: ... and options), got {node!r}", key=key,
                          fix=f"select a preset with {key}=<preset> or set {key}.name")
    factory, node = resolve_factory(kind, node, key)
    return run_check(factory, check_kwargs(factory, node, key), key)


def check_dataclass(schema: type, node: Any, key: str) -> None:
    """Checks ``node`` against a schema dataclass: known keys, required keys, types and ranges."""
    where = key or "the top level"
    if not isinstance(node, dict):
        raise ConfigError(f"must be a config section, got {node!r}", key=key,
                          fix=f"set the keys of {key} one by one, e.g. {key}.<key>=...")
    fields = {f.name: f for f in dataclasses.fields(schema)}
    hints = typing.get_type_hints(schema, include_extras=True)
    for name, value in node.items():
        sub = f"{key}.{name}" if key else str(name)
        if name not in fields:
            raise ConfigError(
                f"unknown key in {where}.{did_you_mean(str(name), fields)}", key=sub,
                fix=f"remove it; the keys of {where} are {', '.join(fields)} (see `rlrun --cfg job`)")
        hint, f = hints[name], fields[name]
        section = _section_type(hint)
        if section is not None and value is not None:
            check_dataclass(section, value, sub)
        elif section is None:
            default = f.default if f.default is not dataclasses.MISSING else dataclasses.MISSING
            check_value(value, hint, sub, default)
    for name, f in fields.items():
        if (name not in node and f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING):
            sub = f"{key}.{name}" if key else name
            raise ConfigError("is required but not set", key=sub, fix=f"set {sub}=...")


def _section_type(hint: Any) -> type | None:
    """The schema dataclass of a nested section (``X`` or ``X | None``), else None."""
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    options = typing.get_args(hint) if union else (hint,)
    return next((o for o in options if dataclasses.is_dataclass(o)), None)


# Per stored transition beyond observations and action: reward, terminated, truncated, done, ...
_SCALAR_BYTES = 16


def check_memory(cfg: dict, env: Footprint, available: int | None = None) -> None:
    """Refuses a run whose sub-envs, collected batch and RAM replay buffer cannot fit in memory.

    One estimate for every preset, fed by the env's ``Footprint`` and the sizes in the config
    (``collector.frames_per_batch``, ``collector.workers``, ``buffer.capacity``). Every term is
    a lower bound, so a refused run could not have run: it allocated until the kernel killed it.
    """
    available = available_memory() if available is None else available
    if not available:
        return
    collector, buffer = cfg.get("collector") or {}, cfg.get("buffer") or {}
    workers = collector.get("workers") if isinstance(collector.get("workers"), int) else 1
    fpb = collector.get("frames_per_batch")
    fpb = fpb if isinstance(fpb, int) else 0
    capacity = buffer.get("capacity")
    capacity = capacity if isinstance(capacity, int) else fpb  # null: on-policy, one batch
    device = str(cfg.get("device", "auto"))
    on_host = device == "cpu" or (device == "auto" and not _cuda())
    if buffer.get("storage") == "memmap" or not on_host:
        capacity = 0  # on disk or on the accelerator: not this machine's RAM
    envs = env.count * max(workers, 1)

    def terms(transition: int) -> dict[str, tuple[str, int]]:
        return {f"{env.count_key}": (f"{envs} sub-envs", envs * (env.each_bytes + transition)),
                "collector.frames_per_batch": (f"a batch of {fpb} frames", fpb * transition),
                "buffer.capacity": (f"a replay buffer of {capacity} transitions", capacity * transition)}

    if isinstance(env.transition_bytes, int):  # known from the options alone
        found = terms(env.transition_bytes + _SCALAR_BYTES)
    else:
        found = terms(12 + _SCALAR_BYTES)  # one float observation and action: the least a step holds
        if sum(b for _, b in found.values()) > available // 8:  # worth a look at the env's real sizes
            try:
                found = terms(env.transition_bytes() + _SCALAR_BYTES)
            except Exception:  # the env cannot be made here (a missing extra): building it says why
                pass
    total = sum(b for _, b in found.values())
    if total <= available:
        return
    key = max(found, key=lambda k: found[k][1])
    parts = ", ".join(f"{what}: {_size(b)}" for what, b in found.values() if b)
    raise ConfigError(f"the run would hold at least {_size(total)} in memory ({parts}) but "
                      f"{_size(available)} is available", key=key,
                      fix=f"lower {key} (the sizes above are lower bounds)")


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"

"""The identity of an experiment's config: its params but the seed and keys that do not change it.

Runs record it as the ``config_hash`` tag; ``rlrun report`` groups runs by it by default.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

RUNTIME_KEYS = ("logger", "progress", "resume", "device", "threads", "compile", "gemm", "dataset_root")
"""The one list of keys that say where and how a run executes, logs and resumes, never what it
learns. A name matches itself and everything under it (``logger`` matches ``logger.tracking_uri``).
The three uses below add what is particular to each."""

NOT_CONFIG = (*RUNTIME_KEYS, "seed", "env.backend", "eval.interval_frames", "eval.interval_updates",
              "eval.max_envs", "checkpoint", "hydra", "paper")
"""Params left out of the config hash: the runtime keys, the seed, how often the run is evaluated and
checkpointed, and which library steps the env (like ``device``, the backend changes rounding, not
the experiment; runs from before the key existed keep their hash)."""

SAFE_TO_CHANGE = (*RUNTIME_KEYS, "resume_allow_changes", "collector.ray_address", "total_frames",
                  "total_updates", "eval", "checkpoint", "hooks.optuna_pruning")
"""Keys a resumed run may change without ``resume_allow_changes``: the runtime keys, budgets and the
schedules of evaluation and checkpoints. Anything else changes the experiment."""

RUN_NAME_EXCLUDED = (*RUNTIME_KEYS, "resume_allow_changes", "collector.ray_address", "collector.backend",
                     "hydra.run.dir")
"""Overrides left out of a run directory's name (``conf/config.yaml`` reads them through the
``rlrun_run_name_excluded`` resolver): the runtime keys and where Ray runs (a requeued job finds its
directory again). The ``algo`` and ``env`` choices, which the parent directory names, are left out
too, but not their options (``env.num_envs=2`` is another run)."""


def matches(key: str, names: tuple[str, ...]) -> bool:
    """Whether ``key`` is one of ``names`` or under one of them (``eval`` matches ``eval.episodes``)."""
    return any(key == n or key.startswith(n + ".") for n in names)


def run_name_excluded(keys: list[str] | tuple[str, ...]) -> list[str]:
    """``keys`` (a command line's override keys) that ``RUN_NAME_EXCLUDED`` leaves out of the name."""
    return [k for k in keys if k in ("algo", "env") or matches(k, RUN_NAME_EXCLUDED)]


def experiment_params(params: dict[str, Any]) -> dict[str, Any]:
    """The params that define the experiment: all but ``NOT_CONFIG``."""
    return {k: v for k, v in params.items() if not matches(k, NOT_CONFIG)}


def config_hash(params: dict[str, Any]) -> str:
    """12 hex digits identifying a flat config up to ``NOT_CONFIG`` (values compared as text,
    as MLflow stores them, cut at MLflow's 6000 characters)."""
    text = json.dumps({k: str(v)[:6000] for k, v in experiment_params(params).items()}, sort_keys=True)
    return hashlib.sha1(text.encode()).hexdigest()[:12]

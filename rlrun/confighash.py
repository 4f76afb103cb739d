"""The identity of an experiment's config: its params but the seed and keys that do not change it.

Runs record it as the ``config_hash`` tag; ``rlrun report`` groups runs by it by default.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

NOT_CONFIG = ("seed", "logger", "progress", "resume", "device", "threads", "compile", "env.backend",
              "eval.interval_frames", "eval.interval_updates", "eval.max_envs", "checkpoint", "hydra",
              "paper", "dataset_root")
"""Params that do not change the experiment (the seed, where and how it is logged, run, resumed,
checkpointed, how often it is evaluated, which library steps the env and whether the update
is compiled: like ``device``, the backend and ``compile`` change rounding, not the experiment,
and runs from before those keys existed keep their hash) and so are left out of its config hash; a name
matches itself and everything under it (``logger`` matches ``logger.tracking_uri``)."""


def experiment_params(params: dict[str, Any]) -> dict[str, Any]:
    """The params that define the experiment: all but ``NOT_CONFIG``."""
    return {k: v for k, v in params.items()
            if not any(k == n or k.startswith(n + ".") for n in NOT_CONFIG)}


def config_hash(params: dict[str, Any]) -> str:
    """12 hex digits identifying a flat config up to ``NOT_CONFIG`` (values compared as text,
    as MLflow stores them, cut at MLflow's 6000 characters)."""
    text = json.dumps({k: str(v)[:6000] for k, v in experiment_params(params).items()}, sort_keys=True)
    return hashlib.sha1(text.encode()).hexdigest()[:12]

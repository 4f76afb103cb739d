"""D4RL-normalised scores: ``100 * (return - random) / (expert - random)``.

Reference returns are D4RL's own (``d4rl/infos.py``, ``REF_MIN_SCORE`` / ``REF_MAX_SCORE``,
the same for every dataset of an env, v0 to v2): a random policy and D4RL's expert.
They were measured on D4RL's gym MuJoCo v2 envs; rlrun runs gymnasium's v5, whose
dynamics and rewards differ slightly, so scores against them are comparable to the
literature's only approximately (``rlrun report table2`` says so).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlrun.core.errors import ConfigError

# env -> (random return, expert return), from D4RL's d4rl/infos.py
D4RL_REFERENCE: dict[str, tuple[float, float]] = {
    "halfcheetah": (-280.178953, 12135.0),
    "hopper": (-20.272305, 3234.3),
    "walker2d": (1.629008, 4592.3),
    "ant": (-325.6, 3879.7),
}
_GYM_NAMES = {"HalfCheetah": "halfcheetah", "Hopper": "hopper", "Walker2d": "walker2d", "Ant": "ant"}


def d4rl_reference(env: str) -> tuple[float, float]:
    """``(ref_min_score, ref_max_score)`` for ``halfcheetah`` or a gymnasium id like ``Hopper-v5``."""
    name = _GYM_NAMES.get(env.split("/")[-1].split("-v")[0], env.lower())
    if name not in D4RL_REFERENCE:
        raise ConfigError(f"no D4RL reference scores for env {env!r}", key="env",
                          fix=f"use one of {', '.join(D4RL_REFERENCE)}, or give ref_min/ref_max scores")
    return D4RL_REFERENCE[name]


def normalized_score(returns: Any, ref_min: float, ref_max: float) -> np.ndarray:
    """``100 * (returns - ref_min) / (ref_max - ref_min)``, elementwise (float64)."""
    if ref_max == ref_min:
        raise ValueError("reference scores must differ")
    return 100.0 * (np.asarray(returns, dtype=np.float64) - ref_min) / (ref_max - ref_min)


def d4rl_normalized_score(returns: Any, env: str) -> np.ndarray:
    """D4RL-normalised score of raw episode returns on ``env``."""
    return normalized_score(returns, *d4rl_reference(env))

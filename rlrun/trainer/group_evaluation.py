"""Deterministic evaluation of an agent group on a VMAS env, in torch.

An episode's return is the team's: the agents' mean reward summed over the
episode (what the training statistics and the paper's Figure 2 report).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor

from rlrun.trainer.evaluation import Evaluator


class GroupEvaluator(Evaluator):
    """``Evaluator`` for a ``VmasEnv``: same quota per sub-env and seed, tensors throughout."""

    def evaluate(self, act: Callable[[Tensor], Tensor], max_steps: int = 1_000_000,
                 context: Any = None) -> np.ndarray:
        if context is not None:  # the Evaluator protocol's argument; no group policy keeps a context
            raise TypeError("agent groups have no context-conditioned policies")
        env, n = self.env, self.env.num_envs
        obs = env.reset(seed=self.seed)
        quota = torch.as_tensor(self.quota, device=env.device)
        running = torch.zeros(n, dtype=torch.float64, device=env.device)
        counts = torch.zeros(n, dtype=torch.long, device=env.device)
        returns: list[Tensor] = []
        for _ in range(max_steps):
            with torch.inference_mode():
                action = act(obs.to(self.device)).to(env.device)
            step = env.step(action)
            obs = step.obs
            active = counts < quota
            running += step.reward.mean(-1) * active
            ended = (step.terminated | step.truncated) & active
            if ended.any():  # VMAS syncs on episode ends every step anyway
                returns.append(running[ended].clone())
                running[ended] = 0.0
                counts += ended
                if bool((counts >= quota).all()):
                    break
        return torch.cat(returns).cpu().numpy() if returns else np.zeros(0)

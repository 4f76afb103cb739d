"""Picklable env factories and policies for the multi-process collector tests (imported by workers)."""

from __future__ import annotations

import fake_env  # noqa: F401  (registers the counter envs in the worker that imports this module)
import torch
from fake_env import COUNTER_ID
from torch import nn

from rlrun.envs.gym import GymVecEnv

MAX_STEPS = 7  # the counter env's time limit here: sub-envs that would terminate later are truncated


def counter_env(num_envs: int = 2) -> GymVecEnv:
    """Counter envs ending by termination (3, 5 or 4 steps, by sub-env seed) or truncation (at 7)."""
    return GymVecEnv(COUNTER_ID, num_envs, max_episode_steps=MAX_STEPS,
                     make_kwargs={"terminate_at": [3, 9, 5, 4]})


class ExplodingEnv(GymVecEnv):
    """A counter vector env whose sixth step raises."""

    def __init__(self) -> None:
        super().__init__(COUNTER_ID, 2)
        self.calls = 0

    def step(self, action):
        self.calls += 1
        if self.calls > 5:
            raise RuntimeError("the env exploded at step 6")
        return super().step(action)


class BiasPolicy(nn.Module):
    """Deterministic discrete policy: every env takes ``argmax(logits)``; also reports a value."""

    def __init__(self, logits: tuple[float, float] = (1.0, 0.0)):
        super().__init__()
        self.logits = nn.Parameter(torch.tensor(logits))

    def forward(self, obs: torch.Tensor) -> dict[str, torch.Tensor]:
        n = obs.shape[0]
        return {"action": self.logits.argmax().expand(n).clone(),
                "value": self.logits.max().expand(n).clone()}

    def explore(self, obs: torch.Tensor) -> dict[str, torch.Tensor]:
        """An actor's sampling method, as registered collectors call it (here: the same action)."""
        return self.forward(obs)

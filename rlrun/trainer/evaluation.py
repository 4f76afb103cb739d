"""Deterministic evaluation on a separate vector env."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor

from rlrun.core.envs import VecEnv
from rlrun.trainer.hooks import Every, Hook


class Evaluator:
    """Runs ``episodes`` episodes with a deterministic policy, spread over sub-envs.

    Each sub-env plays its share of the episodes; extra episodes a sub-env
    starts after finishing its share are ignored, so the result does not depend
    on which env finishes first. Every evaluation resets with the same seed.
    An episode's return is the env's reward summed; for an agent group
    (``env.spec.is_group``) it is the team's: the agents' mean reward summed
    (what the training statistics and the paper's Figure 2 report).

    Args:
        env: The evaluation env (not the training one), any ``rlrun.core.envs.VecEnv``: a
            gymnasium vector env (numpy arrays) or a VMAS group (tensors on its device).
        episodes: Episodes per evaluation.
        seed: Reset seed of every evaluation.
    """

    def __init__(self, env: VecEnv, episodes: int, seed: int, device: str = "cpu"):
        self.env, self.episodes, self.seed, self.device = env, episodes, seed, device
        n = env.num_envs
        self.quota = np.full(n, episodes // n) + (np.arange(n) < episodes % n)
        self.group = getattr(env, "spec", None) is not None and env.spec.is_group

    def evaluate(self, act: Callable[[Tensor], Tensor], max_steps: int = 1_000_000,
                 context: Any = None) -> np.ndarray:
        """Returns the episode returns (raw env rewards; the team's for an agent group).

        Args:
            act: Observations to deterministic actions.
            max_steps: Vector steps at most.
            context: A policy that acts on per-episode context (a Decision Transformer):
                its ``reset_context()`` runs before the first step and ``record(action,
                reward, done)`` after each; None for Markov policies (no extra work).
        """
        n = self.env.num_envs
        obs = self.env.reset(seed=self.seed)
        if context is not None:
            context.reset_context()
        # The per-step bookkeeping stays where the env's arrays live: numpy for gymnasium's (its
        # ops on a few sub-envs cost ~1 us where torch's cost ~5-10 us), torch on VMAS's device
        # (no host copy per step). Boolean indexing copies in both.
        numpy_env = isinstance(obs, np.ndarray)
        if numpy_env:
            quota, running, counts = self.quota, np.zeros(n), np.zeros(n, np.int64)
            to_env, as_array = (lambda a: a.cpu().numpy()), np.asarray
        else:
            env_device = obs.device
            quota = torch.as_tensor(self.quota, device=env_device)
            running = torch.zeros(n, dtype=torch.float64, device=env_device)
            counts = torch.zeros(n, dtype=torch.long, device=env_device)
            to_env, as_array = (lambda a: a.to(env_device)), torch.as_tensor
        returns: list = []
        for _ in range(max_steps):
            with torch.inference_mode():
                action_t = act(torch.as_tensor(obs).to(self.device))
            _, reward, terminated, truncated, obs = self.env.step(to_env(action_t))[:5]
            reward, done = as_array(reward), as_array(terminated | truncated)
            if context is not None:
                with torch.inference_mode():
                    context.record(action_t, torch.as_tensor(reward), torch.as_tensor(done))
            if self.group:  # the team's reward: the agents' mean, as torch rounds it
                reward = as_array(torch.as_tensor(reward).mean(-1))
            active = counts < quota
            running += reward * active
            ended = done & active
            if ended.any():  # VMAS syncs on episode ends every step anyway
                returns.append(running[ended])
                running[ended] = 0.0
                counts += ended
                if bool((counts >= quota).all()):
                    break
        if not returns:
            return np.zeros(0)
        return np.concatenate(returns) if numpy_env else torch.cat(returns).cpu().numpy()

    def close(self) -> None:
        self.env.close()


class Evaluation(Hook):
    """Evaluates every ``interval`` steps of the budget's clock (frames or updates) and at the end.

    Logs ``eval/episode_return`` (mean), ``eval/episode_return_std`` and
    ``eval/episodes`` with the batch's other metrics, then calls the hooks'
    ``post_eval`` with them (e.g. a pruner, which so sees each result in the
    batch it was made).
    """

    def __init__(self, evaluator: Evaluator, interval: int, target_return: float | None = None):
        self.evaluator, self.interval, self.target = evaluator, interval, target_return
        self.every = {"post_steps_log": Every(interval, final=True)}  # the trainer's dispatch filters
        self.last: dict[str, float] = {}
        self.seconds = 0.0  # wall time spent evaluating, so that training time can be told apart

    def run(self, trainer) -> dict[str, float]:
        start = time.perf_counter()
        policy = trainer.policy
        # a policy acting on a context of past steps (DT) is reset and fed each step
        returns = self.evaluator.evaluate(policy.act, context=policy if hasattr(policy, "record") else None)
        self.seconds += time.perf_counter() - start
        self.last = {"eval/episode_return": float(returns.mean()),
                     "eval/episode_return_std": float(returns.std()),
                     "eval/episodes": float(len(returns)), "eval/time_total_s": self.seconds}
        trainer.log(self.last)
        trainer.call_hooks("post_eval", self.last)
        return self.last

    def post_steps_log(self, trainer, batch) -> None:
        if trainer.diverged:  # non-finite weights: nothing worth evaluating
            return
        result = self.run(trainer)
        if self.target is not None and result["eval/episode_return"] >= self.target:
            trainer.request_stop(f"eval return reached {self.target}", interrupted=False)

    def state_dict(self) -> dict:
        return {"last": dict(self.last), "seconds": self.seconds}

    def load_state_dict(self, state: dict) -> None:
        # checkpoints before the dispatch filtered intervals also hold "next_at": the clock now says it
        self.last, self.seconds = dict(state["last"]), float(state.get("seconds", 0.0))

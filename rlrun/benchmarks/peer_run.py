"""The peer's side of a pairing (``rlrun.benchmarks.peers``): SB3 or SBX trained in this process.

Run as a script by an interpreter that has the peer installed (``--peer-python``):
``python peer_run.py LIB TASK SEED [FRAMES]`` prints one JSON line (eval curve, final return,
times). That interpreter needs the peer and rlrun's source tree, not rlrun's dependencies:
``rlrun.benchmarks.peers`` imports nothing heavy.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: the source tree that holds this file is importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from rlrun.benchmarks.peers import EVAL_EPISODES, EVAL_SEED_OFFSET, TASKS, peer_spec, warmup  # noqa: E402


def _objects(spec: dict[str, Any], lib: str, env) -> dict[str, Any]:
    """``peer_spec``'s plain data as the peer's objects (torch for SB3, flax/optax for SBX)."""
    import numpy as np

    kwargs = json.loads(json.dumps(spec["model"]))  # a copy
    sched, lr = kwargs.pop("learning_rate")
    kwargs["learning_rate"] = (lambda remaining: lr * remaining) if sched == "linear" else lr
    pk = kwargs.setdefault("policy_kwargs", {})
    opt_name, eps = pk.pop("optimizer")
    if lib == "sb3":
        import torch

        pk["activation_fn"] = {"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU}[pk["activation_fn"]]
        pk["optimizer_class"], pk["optimizer_kwargs"] = torch.optim.Adam, {"eps": eps}
    else:
        import flax.linen as nn
        import optax

        pk["activation_fn"] = {"tanh": nn.tanh, "relu": nn.relu}[pk["activation_fn"]]
        pk["optimizer_class"], pk["optimizer_kwargs"] = optax.adam, {"eps": eps}
        if "target_update_interval" in kwargs:
            kwargs.pop("max_grad_norm", None)  # SBX's DQN has no gradient clipping (DIFFERENCES)
    if "action_noise" in kwargs:
        from stable_baselines3.common.noise import NormalActionNoise, OrnsteinUhlenbeckActionNoise

        dim = env.action_space.shape[-1]
        kind, sigma, *rest = kwargs["action_noise"]
        kwargs["action_noise"] = (
            NormalActionNoise(np.zeros(dim), sigma * np.ones(dim))
            if kind == "normal"
            else OrnsteinUhlenbeckActionNoise(np.zeros(dim), sigma * np.ones(dim), theta=rest[0], dt=rest[1])
        )
    return kwargs


def peer_evaluate(model, env_id: str, seed: int, episodes: int = EVAL_EPISODES) -> float:
    """Mean return of ``episodes`` deterministic episodes, one per sub-env (as rlrun's Evaluator)."""
    import gymnasium as gym
    import numpy as np

    envs = gym.vector.SyncVectorEnv(
        [lambda: gym.make(env_id)] * episodes, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )
    obs, _ = envs.reset(seed=seed + EVAL_SEED_OFFSET)
    returns, running = np.zeros(episodes), np.ones(episodes, bool)
    while running.any():
        action, _ = model.predict(obs, deterministic=True)
        obs, reward, term, trunc, _ = envs.step(action)
        returns += reward * running
        running &= ~(term | trunc)
    envs.close()
    return float(returns.mean())


def build(lib: str, task_name: str, seed: int, frames: int | None = None) -> tuple[Any, Any, int]:
    """The peer's model for ``task`` (every mapped setting), its task and its budget in frames."""
    import torch

    torch.set_num_threads(1)  # rlrun's threads: 1
    if lib == "sbx":
        import sbx as peer_lib
    else:
        import stable_baselines3 as peer_lib
    from stable_baselines3.common.env_util import make_vec_env

    task = TASKS[task_name]
    spec = peer_spec(task)
    budget = frames or spec["learn"]["total_timesteps"]
    env = make_vec_env(task.env_id, n_envs=spec["env"]["n_envs"], seed=seed)
    kwargs = _objects(spec, lib, env)
    if "learning_starts" in kwargs:  # a shorter budget (smoke): the warm-up shrinks with it
        kwargs["learning_starts"] = warmup(task, frames)
    model = getattr(peer_lib, task.algo.upper())("MlpPolicy", env, seed=seed, device="cpu", **kwargs)
    return model, task, budget


def peer_child(lib: str, task_name: str, seed: int, frames: int | None = None) -> dict[str, Any]:
    """Trains the peer on ``task`` in this process; its eval curve, final return and times."""
    from stable_baselines3.common.callbacks import BaseCallback

    model, task, budget = build(lib, task_name, seed, frames)
    interval = min(task.eval_interval, budget)
    curve: list[tuple[int, float]] = []
    clock = {"eval_s": 0.0}

    def evaluate(frames_now: int) -> None:
        start = time.perf_counter()
        curve.append((frames_now, peer_evaluate(model, task.env_id, seed)))
        clock["eval_s"] += time.perf_counter() - start

    class Eval(BaseCallback):
        """Evaluates at rollout starts, after the previous batch's updates, as rlrun does."""

        def _on_rollout_start(self) -> None:
            if (
                self.num_timesteps
                and self.num_timesteps % interval == 0
                and (not curve or curve[-1][0] != self.num_timesteps)
            ):
                evaluate(self.num_timesteps)

        def _on_step(self) -> bool:
            return True

    start = time.perf_counter()
    model.learn(total_timesteps=budget, callback=Eval())
    if not curve or curve[-1][0] != model.num_timesteps:
        evaluate(int(model.num_timesteps))  # the final evaluation, after the last batch's updates
    wall = time.perf_counter() - start
    return {
        "frames": int(model.num_timesteps),
        "curve": curve,
        "return": curve[-1][1],
        "train_s": wall - clock["eval_s"],
        "eval_s": clock["eval_s"],
    }


if __name__ == "__main__":  # python peer_run.py LIB TASK SEED [FRAMES]: the peer's side, one JSON line
    lib_arg, task_arg, seed_arg, *rest = sys.argv[1:]
    print(json.dumps(peer_child(lib_arg, task_arg, int(seed_arg), int(rest[0]) if rest else None)))

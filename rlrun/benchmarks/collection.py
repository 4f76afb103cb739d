"""Collection throughput: rlrun's ``SyncCollector`` against a bare hand-written loop.

Both sides step their own copy of the same vector env (``GymVecEnv(...).env``:
``gymnasium.make_vec`` with rlrun's wrappers and SAME_STEP autoreset) with the
same actor under ``torch.inference_mode()``: ``actor_critic`` (64x64 tanh) on
Pendulum-v1 and HalfCheetah-v5; on ALE/Breakout-v5 (when ale-py is installed)
rlrun's ``atari`` env and ``actor_critic_cnn``.

* ``rlrun``: ``SyncCollector(env, actor.explore, ...)``, batches of 1000 frames.
* ``bare``: obs -> ``torch.from_numpy`` -> the actor's MLP, then a Normal sample
  and its log-prob in plain tensor ops (Categorical for discrete actions) ->
  ``action.numpy()`` -> ``env.step``; obs/action/log-prob/reward/next obs/flags
  go into arrays allocated once, and the true final observation replaces the
  reset one where an episode ended (as rlrun does).
* ``bare+explore``: the bare loop calling ``actor.explore`` as its policy. It
  splits rlrun's gap into policy cost (bare+explore vs bare) and collector-loop
  cost (rlrun vs bare+explore).

Env backends (``run_backends``, part of ``run`` when EnvPool is installed): rlrun's
``SyncCollector`` over the same preset on ``env.backend=gymnasium`` and
``env.backend=envpool``, paired in one process: HalfCheetah-v5 with ``actor_critic``
and Breakout with ``actor_critic_cnn`` (the same actor object on both sides), and the
same with uniform random actions (no network: the env alone).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor

from rlrun.benchmarks.common import interleave, median, ratio, table
from rlrun.collectors.sync import SyncCollector
from rlrun.envs.gym import GymVecEnv
from rlrun.modules.models import actor_critic
from rlrun.modules.networks import Actor

FRAMES_PER_BATCH = 1000
PolicyFn = Callable[[Tensor], tuple[Tensor, Tensor]]


def plain_policy(actor: Actor) -> PolicyFn:
    """The actor's network followed by hand-written sampling (no ``torch.distributions``)."""
    trunk = getattr(actor, "trunk", None)  # rlrun's CNN actors: trunk -> linear head
    net = (lambda obs: actor.net(trunk(obs))) if trunk is not None else actor.net
    if actor.head == "categorical":
        def act(obs: Tensor) -> tuple[Tensor, Tensor]:
            logp_all = torch.log_softmax(net(obs if trunk is not None else obs.float()), -1)
            action = torch.multinomial(logp_all.exp(), 1)
            return action.squeeze(-1), logp_all.gather(-1, action).squeeze(-1)
        return act

    log_std = actor.log_std
    half_log_2pi = 0.5 * math.log(2 * math.pi)

    def act(obs: Tensor) -> tuple[Tensor, Tensor]:
        mean = net(obs)
        noise = torch.randn_like(mean)
        action = mean + log_std.exp() * noise
        return action, (-0.5 * noise.square() - log_std - half_log_2pi).sum(-1)
    return act


def explore_policy(actor: Actor) -> PolicyFn:
    """``actor.explore`` (what rlrun's collector calls) in the bare loop's signature."""
    def act(obs: Tensor) -> tuple[Tensor, Tensor]:
        out = actor.explore(obs)
        return out["action"], out["sample_log_prob"]
    return act


class BareLoop:
    """A hand-written collection loop over a gymnasium vector env.

    Args:
        venv: A gymnasium vector env in SAME_STEP autoreset mode.
        policy: Observation batch to ``(action, log_prob)``.
        frames_per_batch: Frames per ``collect`` call (all sub-envs together).
        seed: Reset seed.
    """

    def __init__(self, venv: Any, policy: PolicyFn, frames_per_batch: int, seed: int = 0):
        self.venv, self.policy = venv, policy
        n = venv.num_envs
        self.obs, _ = venv.reset(seed=seed)
        self.steps = frames_per_batch // n
        act_space = venv.single_action_space
        self.obs_buf = np.empty((self.steps, *self.obs.shape), self.obs.dtype)
        self.next_buf = np.empty_like(self.obs_buf)
        self.act_buf = np.empty((self.steps, n, *act_space.shape), act_space.dtype)
        self.logp_buf = np.empty((self.steps, n), np.float32)
        self.rew_buf = np.empty((self.steps, n), np.float32)
        self.term_buf = np.empty((self.steps, n), bool)
        self.trunc_buf = np.empty((self.steps, n), bool)

    def collect(self) -> None:
        """Runs one batch of frames into the preallocated arrays."""
        obs, venv, policy = self.obs, self.venv, self.policy
        with torch.inference_mode():
            for t in range(self.steps):
                action, logp = policy(torch.from_numpy(obs))
                action = action.numpy()
                next_obs, reward, term, trunc, info = venv.step(action)
                self.obs_buf[t] = obs
                self.act_buf[t] = action
                self.logp_buf[t] = logp.numpy()
                self.rew_buf[t], self.term_buf[t], self.trunc_buf[t] = reward, term, trunc
                obs = next_obs
                if "_final_obs" in info:
                    mask = info["_final_obs"]
                    next_obs = next_obs.copy()
                    next_obs[mask] = np.stack(info["final_obs"][mask])
                self.next_buf[t] = next_obs
        self.obs = obs


def _configs(quick: bool) -> tuple[list[tuple[str, int, str, int, int]], list[str]]:
    """``(env id, num_envs, vectorization, batches per rep, frames per batch)`` to run, and notes."""
    batches = 2 if quick else 5
    shapes = [(1, "sync")] if quick else [(n, v) for v in ("sync", "async") for n in (1, 2, 4)]
    configs = [(i, n, v, batches, FRAMES_PER_BATCH)
               for i in ("Pendulum-v1", "HalfCheetah-v5") for n, v in shapes]
    try:  # Breakout through rlrun's own Atari env and CNN model (conf/env/breakout.yaml)
        import ale_py  # noqa: F401

        import rlrun.envs.atari  # noqa: F401
        import rlrun.modules.cnn  # noqa: F401
    except ImportError as err:
        return configs, [f"Breakout skipped: {err} (pip install 'rlrun[atari]')."]
    configs += [("ALE/Breakout-v5", n, v, 1, 100 if quick else 200) for n, v in shapes]
    return configs, ["Breakout: rlrun's atari env (DeepMind preprocessing, uint8 [4, 84, 84], "
                     "fire_reset) and actor_critic_cnn; one batch of 200 frames per rep (100 with --quick) "
                     "(the CNN is slow on CPU)."]


def _make_env(env_id: str, num_envs: int, vectorization: str) -> GymVecEnv:
    if env_id.startswith("ALE/"):
        from rlrun.envs.atari import make_atari_env

        return make_atari_env(env_id, num_envs, vectorization, fire_reset=True)
    return GymVecEnv(env_id, num_envs, vectorization)


def _make_actor(env_id: str, env: GymVecEnv) -> Actor:
    if env_id.startswith("ALE/"):
        from rlrun.modules.cnn import actor_critic_cnn

        return actor_critic_cnn(env.spec).actor
    return actor_critic(env.spec, hidden=[64, 64], activation="tanh").actor


def bench_one(env_id: str, num_envs: int, vectorization: str, batches: int, reps: int,
              frames_per_batch: int = FRAMES_PER_BATCH) -> dict:
    """Interleaves rlrun, bare and bare+explore on one env configuration."""
    envs = [_make_env(env_id, num_envs, vectorization) for _ in range(3)]
    torch.manual_seed(0)
    actor = _make_actor(env_id, envs[0])
    collector = SyncCollector(envs[0], actor.explore, frames_per_batch, total_frames=2**62, seed=0)
    bare = BareLoop(envs[1].env, plain_policy(actor), frames_per_batch)
    bare_explore = BareLoop(envs[2].env, explore_policy(actor), frames_per_batch)

    def run(collect: Callable[[], Any]) -> Callable[[], None]:
        return lambda: [collect() for _ in range(batches)] and None

    try:
        times = interleave({"rlrun": run(collector.collect), "bare": run(bare.collect),
                            "bare_explore": run(bare_explore.collect)}, reps)
    finally:
        for env in envs:
            env.close()
    frames = batches * frames_per_batch
    r, loop = ratio(times["bare"], times["rlrun"]), ratio(times["bare_explore"], times["rlrun"])
    return {
        "env": env_id, "num_envs": num_envs, "vectorization": vectorization,
        "frames_per_rep": frames, "reps": reps,
        **{f"fps_{k}": frames / median(v) for k, v in times.items()},
        "ratio": r["median"], "ratio_min": r["min"], "ratio_max": r["max"],
        "ratio_vs_bare_explore": loop["median"],
        "policy_ratio": ratio(times["bare"], times["bare_explore"])["median"],
        "times_s": times,
    }


BACKEND_ENVS = {"HalfCheetah-v5": {"name": "gym", "id": "HalfCheetah-v5"},
                "ALE/Breakout-v5": {"name": "atari", "id": "ALE/Breakout-v5", "fire_reset": True}}


def bench_backends(env_id: str, num_envs: int, policy: str, batches: int, reps: int,
                   frames_per_batch: int) -> dict:
    """Interleaves ``SyncCollector`` on the gymnasium and EnvPool backends of one preset.

    Args:
        policy: ``actor`` (the preset's model, the same actor on both sides) or ``random``
            (uniform random actions: ``init_random_frames`` covers every frame).
    """
    from rlrun.core.registry import build

    node = {**BACKEND_ENVS[env_id], "num_envs": num_envs}
    envs = {b: build("env", {**node, "backend": b}, key="env") for b in ("gymnasium", "envpool")}
    torch.manual_seed(0)
    actor = _make_actor(env_id, envs["gymnasium"])
    random_frames = 2**62 if policy == "random" else 0
    collectors = {b: SyncCollector(env, actor.explore, frames_per_batch, total_frames=2**62,
                                   init_random_frames=random_frames, seed=0) for b, env in envs.items()}
    # CPU seconds of the whole process (all threads: EnvPool's workers too) beside the wall clock:
    # on a shared machine, the work per frame, which other processes' load does not stretch
    cpu: dict[str, list[float]] = {b: [] for b in collectors}

    def case(b: str) -> Callable[[], None]:
        def collect() -> None:
            start = time.process_time()
            for _ in range(batches):
                collectors[b].collect()
            cpu[b].append(time.process_time() - start)
        return collect

    try:
        times = interleave({b: case(b) for b in collectors}, reps)
    finally:
        for env in envs.values():
            env.close()
    cpu = {b: v[-reps:] for b, v in cpu.items()}  # the timed repetitions (not the warm-up)
    frames = batches * frames_per_batch
    r, r_cpu = ratio(times["gymnasium"], times["envpool"]), ratio(cpu["gymnasium"], cpu["envpool"])
    return {"env": env_id, "num_envs": num_envs, "policy": policy, "frames_per_rep": frames, "reps": reps,
            "fps_gymnasium": frames / median(times["gymnasium"]),
            "fps_envpool": frames / median(times["envpool"]),
            "ratio": r["median"], "ratio_min": r["min"], "ratio_max": r["max"],
            "cpu_ratio": r_cpu["median"], "times_s": times, "cpu_s": cpu}


def run_backends(quick: bool = False, reps: int | None = None) -> dict:
    """The backend comparison: envpool/gymnasium frames/s ratios (above 1: EnvPool is faster)."""
    try:
        import envpool  # noqa: F401
    except ImportError as err:
        return {"rows": [], "notes": [f"Env backends skipped: {err} (pip install 'rlrun[envpool]')."]}
    reps = max(3, reps or (3 if quick else 5))
    rows, notes = [], []
    for env_id in BACKEND_ENVS:
        atari = env_id.startswith("ALE/")
        for n in (1,) if quick else (1, 4):
            for policy in ("actor", "random"):
                # the CNN is slow on CPU: Breakout with the actor gets fewer frames
                fpb = (100 if quick else 200) if atari and policy == "actor" else FRAMES_PER_BATCH
                batches = 1 if atari or quick else 3
                try:
                    rows.append(bench_backends(env_id, n, policy, batches, reps, -(-fpb // n) * n))
                except ImportError as err:  # the Atari stack is optional
                    notes.append(f"{env_id} skipped: {err}")
                    break
                print(f"  backends {env_id} x{n} {policy}: envpool/gymnasium {rows[-1]['ratio']:.2f}",
                      flush=True)
    return {"rows": rows, "notes": notes}


def run(quick: bool = False, reps: int | None = None) -> dict:
    """Runs every configuration; ``quick``: 1 sync env only, fewer frames and repetitions."""
    torch.set_num_threads(1)
    configs, notes = _configs(quick)
    reps = reps or (3 if quick else 5)
    rows = []
    for env_id, n, vec, batches, fpb in configs:
        try:
            rows.append(bench_one(env_id, n, vec, batches, reps, fpb))
        except Exception as err:  # the Atari stack is optional: report it, keep the rest
            if not env_id.startswith("ALE/"):
                raise
            notes.append(f"{env_id} x{n} {vec} failed: {err!r}")
            continue
        print(f"  collection {env_id} x{n} {vec}: ratio {rows[-1]['ratio']:.2f}", flush=True)
    return {"rows": rows, "notes": notes, "backends": run_backends(quick, reps)}


def render(result: dict) -> str:
    """The result as a Markdown table."""
    cols = [("env", "env", "s"), ("num_envs", "envs", "d"), ("vectorization", "vec", "s"),
            ("fps_rlrun", "rlrun fps", ".0f"), ("fps_bare", "bare fps", ".0f"),
            ("ratio", "rlrun/bare", ".2f"), ("ratio_min", "min", ".2f"), ("ratio_max", "max", ".2f"),
            ("policy_ratio", "bare+explore/bare", ".2f"),
            ("ratio_vs_bare_explore", "rlrun/bare+explore", ".2f")]
    out = "\n".join([table(result["rows"], cols), *(f"\n{n}" for n in result["notes"])])
    return out + ("\n\n" + render_backends(result["backends"]) if "backends" in result else "")


def render_backends(result: dict) -> str:
    """The backend comparison as a Markdown table."""
    cols = [("env", "env", "s"), ("num_envs", "envs", "d"), ("policy", "policy", "s"),
            ("fps_gymnasium", "gymnasium fps", ".0f"), ("fps_envpool", "envpool fps", ".0f"),
            ("ratio", "envpool/gymnasium", ".2f"), ("ratio_min", "min", ".2f"), ("ratio_max", "max", ".2f"),
            ("cpu_ratio", "CPU-time ratio", ".2f")]
    title = "Env backends (SyncCollector, same policy; ratios: gymnasium time / envpool time):"
    return "\n".join([title, table(result["rows"], cols),
                      *(f"\n{n}" for n in result["notes"])])

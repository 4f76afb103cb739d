"""EnvPool as an env backend (``env.backend=envpool``): the same array interface as ``GymVecEnv``.

EnvPool (``pip install 'rlrun[envpool]'``) steps a batch of envs in C++ threads: one
call steps every sub-env, with no Python loop over them. This adapter gives it the
gymnasium backend's semantics, so the collector, the evaluator and the losses cannot
tell the two apart:

* **Autoreset.** EnvPool resets a finished sub-env on the NEXT step, ignoring that
  step's action (gymnasium's NEXT_STEP mode). Here, right after a step in which some
  sub-envs ended, those sub-envs alone are reset (``reset(env_ids)``, a forced reset:
  the next step is a real one). ``step`` then returns the true final observation as
  ``next_obs`` and the reset one as where the sub-env continues, as the gymnasium
  backend does in SAME_STEP mode.
* **Termination vs truncation.** EnvPool marks ``trunc`` when its step count reaches
  ``max_episode_steps``; ``terminated`` is ``done & ~trunc``. For Atari the game-over
  flag (``info["terminated"]``) decides, so a game lost on the last allowed step is
  terminated, as with ALE. MuJoCo reports no such flag: an env that becomes unhealthy on
  exactly its last allowed step is reported truncated only (gymnasium: both).
* **Seeds.** EnvPool seeds its envs when the pool is built (sub-env ``i`` gets
  ``seed + i``) and ignores ``reset(seed=...)``; a seeded ``reset`` here rebuilds the
  pool with that seed, so that a reset with the same seed (each evaluation) replays the
  same episodes.
* **Actions and observations** as the gymnasium backend's wrappers: Box actions
  clipped to the policy's bounds and rescaled from [-1, 1] to the env's own
  (``rescale_actions``, ``clip_actions``), float64 observations as float32.
* **Atari**: EnvPool's own DeepMind preprocessing (no-op starts, frame skip with a
  max over the last two frames, grayscale resized with area interpolation, frame
  stack), configured from rlrun's Atari keys. Lost lives are learning-only terminals
  (``learning_terminal``) exactly as in ``rlrun.envs.atari``: EnvPool runs with
  ``episodic_life=False`` and the adapter compares ``info["lives"]``. ``fire_reset``
  presses FIRE at reset (EnvPool's ``use_fire_reset``) and after each lost life (one
  extra step of those sub-envs only, its reward added, as ``FireOnLifeStart`` does).
  Rewards stay raw (EnvPool's ``reward_clip=False``); ``reward_clip`` acts on the
  learning signal only.

Differences that remain: EnvPool's MuJoCo (3.6.0) is not the ``mujoco`` package
gymnasium uses, so trajectories agree to rounding (~1e-15 a step) and then drift apart
as any chaotic system does (tests/envs/test_envpool.py measures it); Ant-v5, with many
contacts, differs by ~5e-8 after one step and ~0.3 after 20 (mujoco 4.0.0); its rewards are
float32; its reset noise comes from its own generator, so the same seed gives other
initial states than gymnasium's; its Atari time limit counts agent steps
(``max_episode_steps // frame_skip``), not emulator frames. Video recording needs
gymnasium's per-sub-env render wrappers: a factory asked for a render mode builds the
gymnasium backend (the same env and preprocessing).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import gymnasium as gym
import numpy as np

from rlrun.core.envs import EnvStep
from rlrun.core.errors import ConfigError
from rlrun.core.specs import EnvSpec
from rlrun.envs.gym import BACKENDS, GymVecEnv, _spec, set_learning_signal

FIRE = 1  # ALE's index of FIRE in every minimal action set that has it (as rlrun.envs.atari)
_INSTALL_FIX = ("pip install 'rlrun[envpool]' (EnvPool 1.2 wheels: Python >= 3.11, Linux), "
                "or env.backend=gymnasium")
_NO_LIMIT = 10**9  # EnvPool needs a positive step limit (and adds 1 to it: not INT_MAX)


def _envpool() -> Any:
    try:
        import envpool
    except ImportError as err:
        raise ConfigError(f"env.backend=envpool needs EnvPool, which is not installed ({err})",
                          key="env.backend", fix=_INSTALL_FIX) from None
    return envpool


def envpool_task(id: str) -> str:
    """EnvPool's task id for a gymnasium id (``ALE/Breakout-v5`` -> ``Breakout-v5``), checked."""
    task = id.removeprefix("ALE/")
    envpool = _envpool()
    if task not in envpool.list_all_envs():
        raise ConfigError(
            f"EnvPool has no environment {task!r} (from env.id={id!r})", key="env.id",
            fix="pick an id EnvPool has (python -c 'import envpool; print(envpool.list_all_envs())'), "
            "or env.backend=gymnasium")
    return task


class EnvPoolVecEnv:
    """An EnvPool batch of envs behind ``GymVecEnv``'s array interface (see the module docstring).

    Args:
        id: Gymnasium id of the env (``HalfCheetah-v5``, ``ALE/Breakout-v5``); EnvPool must have it.
        num_envs: Number of sub-envs (one EnvPool batch: all are stepped together).
        max_episode_steps: The time limit in steps (truncation); None: EnvPool's default for the id.
        rescale_actions: Box actions are rescaled so the policy acts in [-1, 1].
        clip_actions: Box actions are clipped to the policy's bounds.
        make_kwargs: EnvPool config keys for the env (e.g. ``reset_noise_scale``).
        reward_clip: ``"sign"``: learning rewards clipped to {-1, 0, 1}; logged returns stay raw.
        reward_scale: Multiplies learning rewards.
        seed: Seed the pool is first built with (``reset(seed=...)`` rebuilds it).

    Attributes:
        learning_terminal: None (Atari: see ``EnvPoolAtariVecEnv``).
    """

    learning_reward = GymVecEnv.learning_reward  # the same learning-signal transforms

    def __init__(self, id: str, num_envs: int = 1, max_episode_steps: int | None = None,
                 rescale_actions: bool = True, clip_actions: bool = True,
                 make_kwargs: dict[str, Any] | None = None, reward_clip: str | None = None,
                 reward_scale: float = 1.0, seed: int = 0):
        set_learning_signal(self, reward_clip, reward_scale)
        self.id, self.num_envs = id, num_envs
        self.factory = functools.partial(type(self), id, num_envs, max_episode_steps, rescale_actions,
                                         clip_actions, make_kwargs, reward_clip, reward_scale, seed)
        self._task = envpool_task(id)
        self._kwargs = dict(make_kwargs or {})
        if max_episode_steps:
            self._kwargs["max_episode_steps"] = max_episode_steps
        self._pool = self._make_pool(seed)
        self._seed, self._fresh = seed, True
        obs_space, act_space = self._pool.single_observation_space, self._pool.single_action_space
        self._float32 = isinstance(obs_space, gym.spaces.Box) and obs_space.dtype == np.float64
        if self._float32:
            obs_space = gym.spaces.Box(obs_space.low.astype(np.float32), obs_space.high.astype(np.float32),
                                       obs_space.shape, np.float32)
        self._box = isinstance(act_space, gym.spaces.Box)
        self._clip, self._rescale = clip_actions and self._box, rescale_actions and self._box
        if self._box:
            low, high = act_space.low.astype(np.float64), act_space.high.astype(np.float64)
            self._low, self._half_range = low, (high - low) / 2
            self._clip_low, self._clip_high = (-1.0, 1.0) if self._rescale else (low, high)
            if self._rescale:
                act_space = gym.spaces.Box(-1.0, 1.0, act_space.shape, np.float32)
        self.spec: EnvSpec = _spec(obs_space, act_space)

    def _make_pool(self, seed: int) -> Any:
        envpool = _envpool()
        # sub-env i is seeded with seed + i, a C++ int
        seed = int(seed) % (2**31 - 1 - self.num_envs)
        try:
            return envpool.make_gymnasium(self._task, num_envs=self.num_envs, seed=seed, **self._kwargs)
        except TypeError as err:  # EnvPool's message for an unknown config key
            raise ConfigError(f"EnvPool's {self._task} does not take these options ({err})",
                              key="env.make_kwargs",
                              fix="use keys of EnvPool's config for the env "
                              "(python -c 'import envpool; print(envpool.make_spec(\"ID\").config)')"
                              ) from None

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Resets every sub-env; a seed rebuilds the pool with it (EnvPool seeds only at build time)."""
        if seed is not None and (seed != self._seed or not self._fresh):
            self._pool.close()
            self._pool, self._seed = self._make_pool(seed), seed
        self._fresh = False
        obs, info = self._pool.reset()
        self._after_reset(np.arange(self.num_envs), info)
        return self._obs(obs)

    def _obs(self, obs: np.ndarray) -> np.ndarray:
        return obs.astype(np.float32) if self._float32 else obs

    def _action(self, action: np.ndarray) -> np.ndarray:
        if self._clip:
            action = np.clip(action, self._clip_low, self._clip_high)
        if self._rescale:  # [-1, 1] -> [low, high], as gymnasium's RescaleAction
            action = self._low + (np.asarray(action, np.float64) + 1.0) * self._half_range
        return action

    def step(self, action: np.ndarray) -> EnvStep:
        """Steps every sub-env: an ``EnvStep`` of numpy arrays, as ``GymVecEnv.step``."""
        self._fresh = False
        obs, reward, terminated, truncated, info = self._pool.step(self._action(action))
        obs, reward, terminated, truncated = self._after_step(obs, reward, terminated, truncated, info)
        next_obs = self._obs(obs)
        done = terminated | truncated
        if not done.any():
            return EnvStep(next_obs, reward, terminated, truncated, next_obs)
        ids = np.flatnonzero(done).astype(np.int32)
        reset_obs, reset_info = self._pool.reset(ids)  # a forced reset: EnvPool's next step is a real one
        self._after_reset(ids, reset_info)
        start = next_obs.copy()
        start[ids] = self._obs(reset_obs)
        return EnvStep(next_obs, reward, terminated, truncated, start)

    def _after_step(self, obs: np.ndarray, reward: np.ndarray, terminated: np.ndarray,
                    truncated: np.ndarray, info: dict) -> tuple[np.ndarray, ...]:
        """Atari's hook (lives, FIRE); plain envs return EnvPool's step as it is."""
        return obs, reward, terminated, truncated

    def _after_reset(self, ids: np.ndarray, info: dict) -> None:
        """Atari's hook (lives at reset)."""

    def close(self) -> None:
        self._pool.close()


class EnvPoolAtariVecEnv(EnvPoolVecEnv):
    """An ALE game through EnvPool's Atari envs, with rlrun's Atari semantics (module docstring).

    Args:
        id: ``ALE/<Game>-v5``.
        num_envs: Number of sub-envs.
        terminal_on_life_loss: ``learning_terminal`` marks the sub-envs that lost a life
            without the game ending.
        fire_reset: Press FIRE at reset and after each lost life.
        make_kwargs: EnvPool Atari config (``noop_max``, ``frame_skip``, ``img_height``, ...).
        max_episode_steps: Agent steps per episode (EnvPool's unit).
        reward_clip, seed: As ``EnvPoolVecEnv``.
    """

    def __init__(self, id: str, num_envs: int = 1, terminal_on_life_loss: bool = True,
                 fire_reset: bool = False, make_kwargs: dict[str, Any] | None = None,
                 max_episode_steps: int = _NO_LIMIT, reward_clip: str | None = None, seed: int = 0):
        self.terminal_on_life_loss, self.fire_reset = terminal_on_life_loss, fire_reset
        self._lives = np.zeros(num_envs, np.int64)
        # life loss and reward clipping are rlrun's (learning signal only), never EnvPool's
        kwargs = {**(make_kwargs or {}), "episodic_life": False, "reward_clip": False,
                  "use_fire_reset": fire_reset}
        super().__init__(id, num_envs, max_episode_steps, False, False, kwargs, reward_clip, 1.0, seed)
        self.factory = functools.partial(EnvPoolAtariVecEnv, id, num_envs, terminal_on_life_loss,
                                         fire_reset, make_kwargs, max_episode_steps, reward_clip, seed)
        if terminal_on_life_loss:
            self.learning_terminal = np.zeros(num_envs, dtype=bool)

    def _after_reset(self, ids: np.ndarray, info: dict) -> None:
        self._lives[ids] = info["lives"]

    def _after_step(self, obs: np.ndarray, reward: np.ndarray, terminated: np.ndarray,
                    truncated: np.ndarray, info: dict) -> tuple[np.ndarray, ...]:
        terminated, truncated = _game_over_first(terminated, truncated, info)
        lives = info["lives"]
        lost = (lives < self._lives) & ~(terminated | truncated)
        if self.fire_reset and lost.any():
            # serve again, as FireOnLifeStart: one step of those sub-envs only, its reward added
            ids = np.flatnonzero(lost).astype(np.int32)
            obs, reward, lives = obs.copy(), reward.copy(), lives.copy()
            f_obs, f_reward, f_term, f_trunc, f_info = self._pool.step(np.full(len(ids), FIRE, np.int32), ids)
            obs[ids], reward[ids], lives[ids] = f_obs, reward[ids] + f_reward, f_info["lives"]
            terminated[ids], truncated[ids] = _game_over_first(f_term, f_trunc, f_info)
        if self.terminal_on_life_loss:
            self.learning_terminal = (lives < self._lives) & ~(terminated | truncated)
        self._lives = np.asarray(lives, np.int64)
        return obs, reward, terminated, truncated


def _game_over_first(terminated: np.ndarray, truncated: np.ndarray,
                     info: dict) -> tuple[np.ndarray, np.ndarray]:
    """Game over is a termination even on the last allowed step (as ALE), the time limit else."""
    game_over = info["terminated"].astype(bool)
    return game_over, (terminated | truncated) & ~game_over


def check_fire(id: str, full_action_space: bool) -> None:
    """``fire_reset`` needs FIRE at action 1; checked through ale-py's action meanings when installed."""
    try:
        import ale_py
    except ImportError:  # EnvPool alone has no action meanings; its own fire reset checks the action set
        return
    gym.register_envs(ale_py)
    env = gym.make(id, full_action_space=full_action_space)
    meanings = env.unwrapped.get_action_meanings()
    env.close()
    if len(meanings) < 3 or meanings[FIRE] != "FIRE":
        raise ConfigError(f"{id} has no FIRE action to serve with", key="env.fire_reset",
                          fix="set env.fire_reset=false for this game")


def make_envpool_atari(id: str, num_envs: int, noop_max: int, frame_skip: int, screen_size: int,
                       grayscale: bool, frame_stack: int, terminal_on_life_loss: bool,
                       max_episode_steps: int, repeat_action_probability: float, full_action_space: bool,
                       fire_reset: bool, reward_clip: str | None) -> EnvPoolAtariVecEnv:
    """``make_atari_env``'s arguments (``rlrun.envs.atari``) on EnvPool; ``max_episode_steps`` in frames."""
    if noop_max < 1:
        raise ConfigError(f"noop_max={noop_max}: EnvPool always takes 1 to noop_max no-ops at reset",
                          key="env.noop_max", fix="use env.noop_max >= 1, or env.backend=gymnasium")
    if not grayscale:
        raise ConfigError("EnvPool stacks RGB frames as [3 x stack, H, W], not rlrun's [stack, H, W, 3]",
                          key="env.grayscale", fix="use env.grayscale=true, or env.backend=gymnasium")
    if fire_reset:
        check_fire(id, full_action_space)
    config = {"noop_max": noop_max, "frame_skip": frame_skip, "img_height": screen_size,
              "img_width": screen_size, "gray_scale": True, "stack_num": frame_stack,
              "repeat_action_probability": repeat_action_probability,
              "full_action_space": full_action_space, "use_inter_area_resize": True}
    # EnvPool's limit counts agent steps; rlrun's key counts emulator frames (ALE's unit)
    steps = math.ceil(max_episode_steps / frame_skip) if max_episode_steps else _NO_LIMIT
    return EnvPoolAtariVecEnv(id, num_envs, terminal_on_life_loss, fire_reset, config, steps, reward_clip)


BACKENDS["envpool"] = EnvPoolVecEnv  # env.backend=envpool for gymnasium ids (rlrun.envs.gym)

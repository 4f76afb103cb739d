"""Atari 2600 games (ALE) with DeepMind's preprocessing, as a ``GymVecEnv``.

Each sub-env is ``gymnasium.make(id, frameskip=1, ...)`` wrapped in gymnasium's
own ``AtariPreprocessing`` (1 to 30 random no-op frames at reset, action repeat
4 with a max over the last two frames against sprite flicker, 84x84 grayscale)
and ``FrameStackObservation(4)``: observations are uint8 ``[4, 84, 84]``. They
stay uint8 through the env, the collector and the buffers (4x less memory than
float32); the CNN models convert and scale them on the device.

A lost life is a terminal for learning only (``terminal_on_life_loss``): the
env reports ``info["lives"]``, ``AtariVecEnv`` turns a drop into its
``learning_terminal`` and the collector marks that step terminated in the
batch, while the game, its episode return and the sub-env itself go on to game
over (which is why ``AtariPreprocessing`` runs with its own
``terminal_on_life_loss=False``). Learning rewards are clipped to their sign
(``reward_clip: sign`` in the presets); logged and evaluated returns stay
game scores.

Budgets: rlrun counts one frame per step of one sub-env, i.e. per AGENT step.
With frame skip 4 one agent step is 4 emulator frames, so the paper's
"40M frames (10M steps)" for A2C/PPO is ``total_frames=10_000_000`` here.

Examples:
    >>> env = make_atari_env("ALE/Breakout-v5", num_envs=2)  # doctest: +SKIP
    >>> env.reset(seed=0).shape, env.spec.action_dim  # doctest: +SKIP
    ((2, 4, 84, 84), 4)
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from rlrun.core.errors import ConfigError
from rlrun.core.registry import Footprint, Fraction, NonNegativeInt, PositiveInt, register
from rlrun.envs.gym import GymVecEnv

FIRE = 1  # ALE's action index of FIRE in every minimal action set that has it

# ale-py ships the ROMs; gymnasium's AtariPreprocessing resizes frames with OpenCV.
_MISSING_FIX = "pip install 'gymnasium[atari]' ale-py opencv-python-headless"


class FireOnLifeStart(gym.Wrapper):
    """Presses FIRE after reset and after every lost life.

    Games such as Breakout wait for FIRE to serve the ball, at the start and
    again after each lost life. A policy that has not yet learned this in the
    serve state stalls until the 108k-frame cap: a deterministic (argmax)
    evaluation can then burn 27000 steps per episode and score 0. This is
    baselines' ``FireResetEnv`` (gymnasium has no equivalent); since rlrun does
    not reset on a lost life, FIRE is also pressed right after one, as
    baselines' ``EpisodicLifeEnv`` + ``FireResetEnv`` pair effectively does. The
    extra step's reward is added to the step that lost the life.
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        meanings = env.unwrapped.get_action_meanings()
        if len(meanings) < 3 or meanings[FIRE] != "FIRE":
            raise ConfigError(f"{env.spec.id if env.spec else env} has no FIRE action to serve with",
                              key="env.fire_reset", fix="set env.fire_reset=false for this game")
        self._lives = 0

    def reset(self, **kwargs: Any) -> tuple[Any, dict]:
        self.env.reset(**kwargs)
        obs, _, terminated, truncated, info = self.env.step(FIRE)
        if terminated or truncated:  # never seen in practice; start over without pressing FIRE
            obs, info = self.env.reset(**kwargs)
        self._lives = info["lives"]
        return obs, info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if info["lives"] < self._lives and not (terminated or truncated):
            obs, fire_reward, terminated, truncated, info = self.env.step(FIRE)
            reward += fire_reward
        self._lives = info["lives"]
        return obs, reward, terminated, truncated, info


class AtariVecEnv(GymVecEnv):
    """A ``GymVecEnv`` that can report lost lives as learning-only terminals.

    Args:
        terminal_on_life_loss: After each step, ``learning_terminal`` marks the
            sub-envs that lost a life without the game ending.
        **kwargs: As ``GymVecEnv``.
    """

    def __init__(self, *args: Any, terminal_on_life_loss: bool = True, **kwargs: Any):
        import ale_py  # a collector worker rebuilds the env from `factory`: it must register ALE/* too

        gym.register_envs(ale_py)
        super().__init__(*args, **kwargs)
        self.factory = functools.partial(AtariVecEnv, *self.factory.args, **self.factory.keywords,
                                         terminal_on_life_loss=terminal_on_life_loss)
        self.terminal_on_life_loss = terminal_on_life_loss
        self._lives: np.ndarray | None = None
        if terminal_on_life_loss:
            self.learning_terminal = np.zeros(self.num_envs, dtype=bool)

    def _after_step(self, info: dict, done: np.ndarray) -> None:
        # Learning treats a lost life as terminal (DeepMind's Atari set-up) while
        # the game, its episode return and the env itself go on.
        if self.terminal_on_life_loss:
            lives = np.asarray(info["lives"])
            self.learning_terminal = ((lives < self._lives) & ~done if self._lives is not None
                                      else np.zeros(self.num_envs, dtype=bool))
            self._lives = lives


def atari_wrappers(noop_max: int = 30, frame_skip: int = 4, screen_size: int = 84,
                   grayscale: bool = True, frame_stack: int = 4,
                   fire_reset: bool = False) -> list[Callable[[gym.Env], gym.Env]]:
    """The per-sub-env wrappers, innermost first (see ``make_atari_env`` for the arguments)."""

    def preprocess(env: gym.Env) -> gym.Env:
        # Life loss stays off here: rlrun marks it for learning without ending the episode.
        return gym.wrappers.AtariPreprocessing(
            env, noop_max=noop_max, frame_skip=frame_skip, screen_size=screen_size,
            terminal_on_life_loss=False, grayscale_obs=grayscale, scale_obs=False)

    wrappers: list[Callable[[gym.Env], gym.Env]] = [preprocess]
    if fire_reset:  # inside the stack: FIRE's frame is the one stacked, not the life-loss one
        wrappers.append(FireOnLifeStart)
    wrappers.append(lambda env: gym.wrappers.FrameStackObservation(env, frame_stack))
    return wrappers


def _footprint(options: dict, key: str) -> Footprint:
    """What the sub-envs and their stored frames hold (``registry.register(check=...)``)."""
    frame = options["screen_size"] ** 2 * (1 if options["grayscale"] else 3)
    return Footprint(count=int(options["num_envs"]), count_key=f"{key}.num_envs",
                     # an ALE emulator and its wrappers' frame buffers: a lower bound per sub-env
                     each_bytes=8 * 2**20 if options.get("vectorization") == "async" else 256 * 2**10,
                     transition_bytes=2 * options["frame_stack"] * frame + 4)  # uint8 frames, an index


@register("env", "atari", check=_footprint)
def make_atari_env(
    id: str,
    num_envs: PositiveInt = 1,
    vectorization: Literal["sync", "async"] = "sync",
    noop_max: NonNegativeInt = 30,
    frame_skip: PositiveInt = 4,
    screen_size: PositiveInt = 84,
    grayscale: bool = True,
    frame_stack: PositiveInt = 4,
    terminal_on_life_loss: bool = True,
    max_episode_steps: NonNegativeInt = 108_000,  # 0: no limit
    repeat_action_probability: Fraction = 0.0,
    full_action_space: bool = False,
    fire_reset: bool = False,
    reward_clip: Literal["sign"] | None = None,
    render_mode: str | None = None,
    backend: Literal["gymnasium", "envpool"] = "gymnasium",
) -> AtariVecEnv:
    """An ALE game with DeepMind's preprocessing: uint8 [4, 84, 84] frames, 4 frames per step.

    Args:
        id: An ALE id, e.g. ``"ALE/Breakout-v5"`` (made with ``frameskip=1``:
            ``AtariPreprocessing`` does the skipping and the max-pooling).
        num_envs: Number of sub-envs.
        vectorization: ``"sync"`` or ``"async"`` (one process per sub-env).
        noop_max: 1 to this many random no-op emulator frames at reset (0: none).
        frame_skip: Emulator frames per agent step (the action is repeated).
        screen_size: Observations are ``screen_size`` x ``screen_size``.
        grayscale: Grayscale frames (else RGB, ``[stack, H, W, 3]``).
        frame_stack: Last frames stacked into one observation.
        terminal_on_life_loss: Expose lost lives as learning-only terminals.
        max_episode_steps: Episode cap in EMULATOR frames (ALE's
            ``max_num_frames_per_episode``; 0: none). 108000 frames = 27000
            agent steps = 30 minutes of play, the usual evaluation cap.
        repeat_action_probability: Sticky actions. 0.0 (default) is the setting
            of DeepMind's papers and of the ``NoFrameskip-v4`` envs that the
            A2C/PPO/IMPALA results the paper reproduces were obtained with;
            0.25 is the v5 default (Machado et al. 2018), which makes games
            stochastic and scores lower, so results would not be comparable.
        full_action_space: All 18 actions instead of the game's minimal set.
        fire_reset: Press FIRE after reset and each lost life (see
            ``FireOnLifeStart``); for games that wait for it, e.g. Breakout.
        reward_clip: ``"sign"``: learning rewards clipped to {-1, 0, 1} (DeepMind's
            set-up, in every Atari preset); returns are logged unclipped.
        render_mode: gymnasium's render mode (``rgb_array`` for videos: ``rlrun.trainer.video``).
        backend: ``envpool``: EnvPool's Atari envs and preprocessing (``rlrun.envs.envpool``);
            a render mode (videos) keeps gymnasium, whose sub-envs the recorder wraps.
    """
    if backend == "envpool" and render_mode is None:
        from rlrun.envs.envpool import make_envpool_atari

        return make_envpool_atari(id, num_envs, noop_max, frame_skip, screen_size, grayscale, frame_stack,
                                  terminal_on_life_loss, max_episode_steps, repeat_action_probability,
                                  full_action_space, fire_reset, reward_clip)
    try:
        import ale_py
        import cv2  # noqa: F401  (AtariPreprocessing resizes with OpenCV)
    except ImportError as err:
        raise ConfigError(f"Atari envs need a package that is not installed ({err})", key="env.id",
                          fix=_MISSING_FIX) from None
    gym.register_envs(ale_py)  # importing ale_py registers the ALE/* ids; this keeps the import used
    if frame_skip < 1 or frame_stack < 1:
        raise ConfigError(f"frame_skip={frame_skip} and frame_stack={frame_stack} must be >= 1",
                          key="env.frame_skip" if frame_skip < 1 else "env.frame_stack",
                          fix="use positive values (DeepMind's set-up: 4 and 4)")
    make_kwargs = {"frameskip": 1, "repeat_action_probability": repeat_action_probability,
                   "full_action_space": full_action_space,
                   "max_num_frames_per_episode": max_episode_steps,
                   **({"render_mode": render_mode} if render_mode else {})}
    wrappers = atari_wrappers(noop_max, frame_skip, screen_size, grayscale, frame_stack, fire_reset)
    return AtariVecEnv(id, num_envs, vectorization, max_episode_steps=None, rescale_actions=False,
                       clip_actions=False, extra_wrappers=wrappers, make_kwargs=make_kwargs,
                       reward_clip=reward_clip, terminal_on_life_loss=terminal_on_life_loss)

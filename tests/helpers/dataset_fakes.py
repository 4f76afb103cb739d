"""Small random-action datasets in minari's layout, for tests that need any dataset of an env."""

from __future__ import annotations

import hashlib
import os

import gymnasium as gym
import numpy as np

from rlrun.datasets.minari_format import MAIN_FILE, Episode, dataset_path, read_metadata, write_dataset


def record_episode(env: gym.Env, choose, seed: int) -> Episode:
    """One episode of ``env`` from ``reset(seed=seed)``, acting with ``choose(obs)``."""
    obs, _ = env.reset(seed=seed)
    o, a, r, term, trunc = [obs], [], [], [], []
    done = False
    while not done:
        act = choose(obs)
        obs, rew, te, tr, _ = env.step(act)
        o.append(obs), a.append(act), r.append(rew), term.append(te), trunc.append(tr)
        done = te or tr
    return Episode(np.array(o), np.array(a), np.array(r), np.array(term), np.array(trunc))


def random_dataset(env_id: str, dataset_id: str, root, episodes: int = 6, seed: int = 0,
                   max_steps: int | None = None) -> None:
    """Random-action episodes of ``env_id`` (truncated at ``max_steps`` or the env's limit)."""
    env = gym.make(env_id, max_episode_steps=max_steps) if max_steps else gym.make(env_id)
    env.action_space.seed(seed)
    eps = [record_episode(env, lambda _: env.action_space.sample(), seed + i) for i in range(episodes)]
    write_dataset(dataset_id, eps, env.observation_space, env.action_space, env_spec=env.spec, root=root,
                  algorithm_name="random")
    env.close()


def swing_up(obs: np.ndarray) -> np.ndarray:
    """Energy-pumping swing-up, PD near the top (Pendulum-v1: returns about -130 from random starts)."""
    c, s, w = obs
    if c > 0.85:
        u = -(12.0 * np.arctan2(s, c) + 2.5 * w)
    else:
        u = 2.0 * np.sign(w if w != 0 else 1.0) * (5.0 - (w * w / 6 + 5.0 * c))
    return np.clip([u], -2.0, 2.0).astype(np.float32)


def hold_down(obs: np.ndarray) -> np.ndarray:
    """PD toward the bottom: the worst steady behaviour (about -900 over 100 steps)."""
    c, s, w = obs
    return np.clip([-(4.0 * np.arctan2(-s, -c) + 1.0 * w)], -2.0, 2.0).astype(np.float32)


def mixed_dataset(dataset_id: str, root, episodes: int = 30, max_steps: int = 100) -> None:
    """A third each: random actions (returns ~ -400 to -800 over 100 steps), swing-up (~ -0 to -250)
    and holding the pendulum down (~ -900)."""
    env = gym.make("Pendulum-v1", max_episode_steps=max_steps)
    env.action_space.seed(0)

    def controller(i: int):  # samples a random action every step, used or not (the calibrated data's RNG)
        return lambda obs: (env.action_space.sample(), swing_up(obs), hold_down(obs))[i % 3]
    eps = [record_episode(env, controller(i), i) for i in range(episodes)]
    write_dataset(dataset_id, eps, env.observation_space, env.action_space, env_spec=env.spec, root=root,
                  algorithm_name="random+swing-up")
    env.close()


# A balancing controller for InvertedPendulum-v5 (observation: cart position, pole angle, their
# velocities); noiseless it holds the pole for the whole 1000 steps.
BALANCE_GAINS = np.array([1.0, 10.0, 1.0, 1.0])


def detuned_balancers_dataset(dataset_id: str, root, episodes: int = 40, max_return: float = 150.0,
                              seed: int = 0) -> None:
    """InvertedPendulum-v5 episodes of balancing controllers with randomly detuned gains (each gain
    scaled by exp(N(0, 1)), a fifth flipped in sign) and little noise, keeping only those that drop
    the pole within ``max_return`` steps: precise but poor behaviour (returns 4 to 117, mean 33 with
    the defaults), which return-conditioned imitation alone cannot lift far above its best episode."""
    env = gym.make("InvertedPendulum-v5")
    rng = np.random.default_rng(seed)
    eps: list[Episode] = []
    while len(eps) < episodes:
        gains = BALANCE_GAINS * np.exp(rng.normal(0.0, 1.0, 4)) * rng.choice([1, -1], 4, p=[0.8, 0.2])

        def act(obs, gains=gains):
            return np.clip([gains @ obs + 0.1 * rng.standard_normal()], -3.0, 3.0).astype(np.float32)
        episode = record_episode(env, act, len(eps))
        if episode.rewards.sum() <= max_return:
            eps.append(episode)
    write_dataset(dataset_id, eps, env.observation_space, env.action_space, env_spec=env.spec, root=root,
                  algorithm_name="detuned-balancers")
    env.close()


def verify_checksum(dataset_id: str, root: str | os.PathLike | None = None) -> bool:
    """Whether ``main_data.hdf5`` still has the SHA-256 rlrun recorded in the metadata when writing it."""
    recorded = read_metadata(dataset_id, root).get("rlrun", {}).get("sha256")
    assert recorded is not None, f"dataset {dataset_id} carries no rlrun checksum (not written by rlrun)"
    data = (dataset_path(dataset_id, root) / "data" / MAIN_FILE).read_bytes()
    return hashlib.sha256(data).hexdigest() == recorded

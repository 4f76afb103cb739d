"""Small random-action datasets in minari's layout, for tests that need any dataset of an env."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from rlrun.datasets.minari_format import Episode, write_dataset


def random_dataset(env_id: str, dataset_id: str, root, episodes: int = 6, seed: int = 0,
                   max_steps: int | None = None) -> None:
    """Random-action episodes of ``env_id`` (truncated at ``max_steps`` or the env's limit)."""
    env = gym.make(env_id, max_episode_steps=max_steps) if max_steps else gym.make(env_id)
    env.action_space.seed(seed)
    eps = []
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        o, a, r, term, trunc = [obs], [], [], [], []
        done = False
        while not done:
            act = env.action_space.sample()
            obs, rew, te, tr, _ = env.step(act)
            o.append(obs), a.append(act), r.append(rew), term.append(te), trunc.append(tr)
            done = te or tr
        eps.append(Episode(np.array(o), np.array(a), np.array(r), np.array(term), np.array(trunc)))
    write_dataset(dataset_id, eps, env.observation_space, env.action_space, env_spec=env.spec, root=root,
                  algorithm_name="random")
    env.close()

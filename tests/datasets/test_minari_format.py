"""Minari-format datasets: minari itself opens rlrun's, the reader round-trips, receipts hold."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from dataset_fakes import verify_checksum

from rlrun.core.errors import ConfigError
from rlrun.datasets.minari_format import (
    Episode,
    dataset_root,
    episodes_from_transitions,
    list_datasets,
    read_dataset,
    read_metadata,
    write_dataset,
)

minari = pytest.importorskip("minari")


def collect(env_id: str, n: int, seed: int, max_steps: int) -> tuple[list[Episode], gym.Env]:
    """Random-policy episodes straight from gymnasium (independent of rlrun's env layer)."""
    env = gym.make(env_id, max_episode_steps=max_steps)
    env.action_space.seed(seed)
    episodes = []
    for i in range(n):
        obs, _ = env.reset(seed=seed + i)
        o, a, r, te, tr = [obs], [], [], [], []
        while True:
            action = env.action_space.sample()
            obs, reward, term, trunc, _ = env.step(action)
            o.append(obs), a.append(action), r.append(reward), te.append(term), tr.append(trunc)
            if term or trunc:
                break
        episodes.append(Episode(np.array(o), np.array(a), np.array(r), np.array(te), np.array(tr),
                                seed=seed + i))
    return episodes, env


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    return tmp_path


def test_minari_opens_rlrun_dataset_and_agrees_with_listing(root):
    episodes, env = collect("Pendulum-v1", 3, seed=7, max_steps=25)
    episodes += collect("Pendulum-v1", 1, seed=11, max_steps=40)[0]
    returns = [float(np.sum(ep.rewards)) for ep in episodes]
    write_dataset("rlrun/pendulum/random-v0", episodes, env.observation_space, env.action_space,
                  env_spec=env.spec, algorithm_name="random", ref_min_score=-1200.0, ref_max_score=-150.0,
                  receipts={"seed": 7, "git_commit": "abc123", "source": "test"})
    assert dataset_root() == root

    ds = minari.load_dataset("rlrun/pendulum/random-v0")
    assert ds.total_episodes == 4 and ds.total_steps == 3 * 25 + 40
    assert ds.observation_space == env.observation_space and ds.action_space == env.action_space
    got = list(ds.iterate_episodes())
    for ep, theirs in zip(episodes, got):
        np.testing.assert_array_equal(theirs.observations, ep.observations)
        np.testing.assert_array_equal(theirs.actions, ep.actions)
        np.testing.assert_array_equal(theirs.rewards, ep.rewards)
        # Pendulum never terminates: every episode ends in a truncation, kept as one
        assert not theirs.terminations.any() and theirs.truncations[-1] and not theirs.truncations[:-1].any()
    assert [float(e.rewards.sum()) for e in got] == pytest.approx(returns)
    assert minari.get_normalized_score(ds, np.array([-150.0, -1200.0])) == pytest.approx([1.0, 0.0])
    assert ds.recover_environment().spec.id == "Pendulum-v1"
    assert "rlrun/pendulum/random-v0" in minari.list_local_datasets()

    (info,) = list_datasets()
    assert (info.dataset_id, info.episodes, info.steps, info.source) == ("rlrun/pendulum/random-v0", 4, 115,
                                                                         "test")
    assert info.mean_return == pytest.approx(np.mean(returns))
    assert (info.min_return, info.max_return) == pytest.approx((min(returns), max(returns)))
    meta = read_metadata("rlrun/pendulum/random-v0")
    assert meta["rlrun"]["seed"] == 7 and meta["rlrun"]["git_commit"] == "abc123"
    assert meta["algorithm_name"] == "random" and meta["ref_max_score"] == -150.0


def test_reader_round_trip_keeps_terminations_and_truncations(root):
    # CartPole with a short limit: some episodes terminate (pole falls), some are truncated
    episodes, env = collect("CartPole-v1", 6, seed=3, max_steps=15)
    ends = [(bool(ep.terminations[-1]), bool(ep.truncations[-1])) for ep in episodes]
    assert (True, False) in ends and (False, True) in ends
    write_dataset("cartpole/mixed-v1", episodes, env.observation_space, env.action_space,
                  env_spec="CartPole-v1")
    data = read_dataset("cartpole/mixed-v1")

    exp_obs = np.concatenate([ep.observations[:-1] for ep in episodes])
    exp_next = np.concatenate([ep.observations[1:] for ep in episodes])
    np.testing.assert_array_equal(data.observation.numpy(), exp_obs)
    np.testing.assert_array_equal(data.next_observation.numpy(), exp_next)
    np.testing.assert_array_equal(data.action.numpy(), np.concatenate([ep.actions for ep in episodes]))
    np.testing.assert_allclose(data.reward.numpy(), np.concatenate([ep.rewards for ep in episodes]))
    for ours, theirs in ((data.terminated, "terminations"), (data.truncated, "truncations")):
        np.testing.assert_array_equal(ours.numpy(), np.concatenate([getattr(ep, theirs) for ep in episodes]))
    lengths = [len(ep.rewards) for ep in episodes]
    assert data.episode_length.tolist() == lengths
    assert data.episode_start.tolist() == [sum(lengths[:i]) for i in range(len(lengths))]
    assert data.action.dtype.is_floating_point is False and data.observation.dtype.is_floating_point
    np.testing.assert_allclose(data.episode_returns().numpy(), [ep.rewards.sum() for ep in episodes])


def test_episodes_from_transitions_splits_at_ends_and_keeps_the_tail():
    # one env's stream: obs t -> t+1; terminated at step 1, truncated at step 4, unfinished 5..6
    obs = np.array([[0.], [1.], [10.], [11.], [12.], [20.], [21.]])
    nxt = np.array([[1.], [2.], [11.], [12.], [13.], [21.], [22.]])
    term = np.array([0, 1, 0, 0, 0, 0, 0], bool)
    trunc = np.array([0, 0, 0, 0, 1, 0, 0], bool)
    eps = episodes_from_transitions(obs, np.arange(7.0)[:, None], np.arange(7.0), nxt, term, trunc)
    assert [e.observations[:, 0].tolist() for e in eps] == [[0, 1, 2], [10, 11, 12, 13], [20, 21, 22]]
    assert [e.terminations.tolist() for e in eps] == [[False, True], [False] * 3, [False] * 2]
    assert [e.truncations.tolist() for e in eps] == [[False, False], [False, False, True], [False] * 2]
    assert [e.rewards.tolist() for e in eps] == [[0, 1], [2, 3, 4], [5, 6]]
    bad = nxt.copy()
    bad[2] = 99.0  # not followed by its next observation inside an episode
    with pytest.raises(ValueError, match="time order"):
        episodes_from_transitions(obs, obs, np.zeros(7), bad, term, trunc)


def test_checksum_detects_a_changed_file_and_existing_id_is_refused(root):
    episodes, env = collect("Pendulum-v1", 1, seed=0, max_steps=5)
    path = write_dataset("pn/x-v0", episodes, env.observation_space, env.action_space)
    assert verify_checksum("pn/x-v0")
    with pytest.raises(ConfigError, match="already exists"):
        write_dataset("pn/x-v0", episodes, env.observation_space, env.action_space)
    import h5py
    with h5py.File(path / "data" / "main_data.hdf5", "a") as f:
        f["episode_0/rewards"][0] += 1.0
    assert not verify_checksum("pn/x-v0")


def test_missing_dataset_names_the_existing_ones(root):
    episodes, env = collect("Pendulum-v1", 1, seed=0, max_steps=5)
    write_dataset("pn/x-v0", episodes, env.observation_space, env.action_space)
    with pytest.raises(ConfigError, match=r"pn/x-v0.*\n.*rlrun dataset make") as e:
        read_dataset("pn/y-v0")
    assert e.value.key == "dataset"
    with pytest.raises(ConfigError, match="malformed"):
        read_dataset("no-version")


def test_episode_needs_the_final_observation():
    with pytest.raises(ValueError, match="final observation"):
        Episode(np.zeros((3, 1)), np.zeros((3, 1)), np.zeros(3), np.zeros(3, bool), np.zeros(3, bool))


def test_file_reads_as_torchrl_minari_replay_reads_it(root):
    # TorchRL's MinariExperienceReplay opens main_data.hdf5 with PersistentTensorDict.from_h5 and
    # requires observations to have one row more than actions, rewards, terminations, truncations
    from tensordict import PersistentTensorDict
    episodes, env = collect("CartPole-v1", 2, seed=1, max_steps=10)
    path = write_dataset("cartpole/trl-v0", episodes, env.observation_space, env.action_space)
    h5 = PersistentTensorDict.from_h5(str(path / "data" / "main_data.hdf5"))
    try:
        assert sorted(h5.keys()) == ["episode_0", "episode_1"]
        for ep, (_, group) in zip(episodes, sorted(h5.items())):
            steps = group["actions"].shape[0]
            assert steps == len(ep.rewards) and group["observations"].shape[0] == steps + 1
            assert {k: group[k].shape[0] for k in ("rewards", "terminations", "truncations")} == {
                "rewards": steps, "terminations": steps, "truncations": steps}
    finally:
        h5.close()

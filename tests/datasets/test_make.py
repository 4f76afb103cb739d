"""``rlrun dataset make`` and ``list``: D4RL's recipe through rlrun's own SAC, read back by minari."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from dataset_fakes import verify_checksum
from offline_data import pendulum_medium_replay  # noqa: F401  (the session fixture)

from rlrun.cli.main import main
from rlrun.cli.make_dataset import buffer_episodes
from rlrun.datasets.minari_format import read_metadata

minari = pytest.importorskip("minari")


def _listing(capsys, root) -> dict[str, list[str]]:
    assert main(["dataset", "list", f"root={root}"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:6] == ["id", "episodes", "steps", "mean", "min", "max"]
    return {line.split()[0]: line.split() for line in lines[1:]}


def test_pendulum_medium_replay_end_to_end(pendulum_medium_replay, monkeypatch, capsys):  # noqa: F811
    made = pendulum_medium_replay
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(made.root))
    ds = minari.load_dataset(made.dataset_id)
    episodes = list(ds.iterate_episodes())
    returns = np.array([ep.rewards.sum() for ep in episodes])
    row = _listing(capsys, made.root)[made.dataset_id]
    assert int(row[1]) == ds.total_episodes == len(episodes)
    assert int(row[2]) == ds.total_steps == sum(len(ep.rewards) for ep in episodes)
    assert [float(x) for x in row[3:6]] == pytest.approx(
        [returns.mean(), returns.min(), returns.max()], abs=0.051)
    assert row[6] == str(made.run_dir.resolve())

    # the whole replay buffer: as many steps as the SAC run collected, which stopped at "medium"
    summary = json.loads((made.run_dir / "summary.json").read_text())
    meta = read_metadata(made.dataset_id)
    assert ds.total_steps == summary["frames"] == meta["rlrun"]["sac_frames"]
    assert summary["eval/episode_return"] >= -800.0 or summary["frames"] == summary["total_frames"]
    assert meta["rlrun"]["seed"] == 0 and meta["rlrun"]["env_id"] == "Pendulum-v1"
    assert len(meta["rlrun"]["git_commit"] or "x" * 40) == 40 and verify_checksum(made.dataset_id)
    assert ds.spec.env_spec.id == "Pendulum-v1"
    for ep in episodes:
        assert len(ep.observations) == len(ep.rewards) + 1
        # Pendulum never terminates; its 200-step time limit truncates, and the cut end is a truncation
        assert not ep.terminations.any() and ep.truncations[-1] and not ep.truncations[:-1].any()
        assert len(ep.rewards) == 200 or ep is episodes[-1]
    actions = np.concatenate([ep.actions for ep in episodes])
    # the env's own action space [-2, 2], not the policy's [-1, 1]
    assert ds.action_space.contains(actions[0]) and np.abs(actions).max() > 1.2


def test_buffer_episodes_split_by_trajectory_keep_flags_and_map_actions():
    # two sub-envs interleaved as the collector stores [num_envs, T] batches flattened env-major;
    # trajectory 0 (env 0) terminates after 2 steps, trajectory 1 (env 1) is truncated after 3,
    # trajectory 2 (env 0, after the reset) is cut by the end of collection after 2 steps
    traj = [0, 0, 2, 1, 1, 1, 2]
    step_of = [0, 1, 0, 0, 1, 2, 1]
    obs = np.array([[10 * t + s] for t, s in zip(traj, step_of)], np.float32)
    nxt = obs + 1
    term = np.array([0, 1, 0, 0, 0, 0, 0], bool)
    trunc = np.array([0, 0, 0, 0, 0, 1, 0], bool)
    reward = np.array([1, 2, 3, 4, 5, 6, 7], np.float32)
    action = np.arange(7, dtype=np.float32)[:, None] / 10
    data = {"observation": torch.tensor(obs), "action": torch.tensor(action),
            "next": {"observation": torch.tensor(nxt), "reward": torch.tensor(reward)[:, None],
                     "terminated": torch.tensor(term)[:, None], "truncated": torch.tensor(trunc)[:, None],
                     "done": torch.tensor(term | trunc)[:, None]},
            "collector": {"traj_ids": torch.tensor(traj)}}
    state = {"storage": {"cursor": 7, "length": 7, "data": data}}
    eps = buffer_episodes(state, capacity=100, action_map=lambda a: 2 * a)
    assert [e.observations[:, 0].tolist() for e in eps] == [[0, 1, 2], [10, 11, 12, 13], [20, 21, 22]]
    assert [e.rewards.tolist() for e in eps] == [[1, 2], [4, 5, 6], [3, 7]]
    assert [e.terminations.tolist() for e in eps] == [[False, True], [False] * 3, [False, False]]
    assert [e.truncations.tolist() for e in eps] == [[False, False], [False, False, True], [False, True]]
    assert eps[2].actions[:, 0].tolist() == pytest.approx([0.4, 1.2])


def test_buffer_episodes_undo_a_wrapped_ring():
    # capacity 4, 6 steps written: rows hold steps [4, 5, 2, 3], the oldest at the cursor (2)
    steps = np.array([4, 5, 2, 3], np.float32)
    data = {"observation": torch.tensor(steps)[:, None], "action": torch.zeros(4, 1),
            "next": {"observation": torch.tensor(steps + 1)[:, None], "reward": torch.tensor(steps)[:, None],
                     "terminated": torch.zeros(4, 1, dtype=torch.bool),
                     "truncated": torch.zeros(4, 1, dtype=torch.bool),
                     "done": torch.zeros(4, 1, dtype=torch.bool)},
            "collector": {"traj_ids": torch.zeros(4, dtype=torch.long)}}
    (ep,) = buffer_episodes({"storage": {"cursor": 2, "length": 4, "data": data}}, 4, lambda a: a)
    assert ep.observations[:, 0].tolist() == [2, 3, 4, 5, 6]


@pytest.mark.parametrize("args, key", [
    (["env=cartpole", "kind=medium-replay"], "env"),
    (["env=pendulum", "kind=mediumreplay"], "kind"),
    (["env=pendulum"], "kind"),
    (["env=pendulum", "kind=medium", "env.reward_scale=2"], "env.reward_scale"),
])
def test_bad_input_is_one_message_and_exit_2(args, key, capsys, tmp_path):
    assert main(["dataset", "make", f"root={tmp_path}", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rlrun: error: {key}: ") and "fix:" in err and "Traceback" not in err
    assert not any(tmp_path.iterdir())


def test_list_of_an_empty_root_says_how_to_make_one(tmp_path, capsys):
    assert main(["dataset", "list", f"root={tmp_path}"]) == 0
    assert "rlrun dataset make env=pendulum kind=medium-replay" in capsys.readouterr().out


def test_rollout_episodes_share_out_whole_episodes_with_their_final_observation():
    from fake_env import COUNTER_BOX_ID

    from rlrun.cli.make_dataset import rollout_episodes

    def policy(obs):
        return np.full((len(obs), 1), 0.5, np.float32)

    # CounterBox terminates at step 5: every episode is 5 steps; sub-env 0 (seed 3) runs 3, sub-env 1 two
    eps = rollout_episodes(policy, COUNTER_BOX_ID, episodes=5, seed=3, num_envs=2)
    assert [int(e.observations[0, 1]) for e in eps] == [3, 3, 3, 4, 4]
    assert [int(e.observations[0, 2]) for e in eps] == [0, 1, 2, 0, 1]  # episode counters: none skipped
    for e in eps:
        assert e.observations[:, 0].tolist() == [0, 1, 2, 3, 4, 5]  # the final observation included
        assert e.rewards.tolist() == pytest.approx([0.5, 1.0, 1.5, 2.0, 2.5])
        assert e.terminations.tolist() == [False] * 4 + [True] and not e.truncations.any()


def test_bad_input_fails_before_torch_is_imported(tmp_path):
    import subprocess
    import sys

    check = ("import sys\nfrom rlrun.cli.main import main\n"
             "code = main(['dataset', 'make', 'env=cartpole', 'kind=medium-replay'])\n"
             "print(code, [m for m in ('gymnasium', 'torch', 'h5py') if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, cwd=tmp_path,
                          timeout=120)
    assert done.stdout.strip().splitlines()[-1] == "2 []", done.stdout + done.stderr


def test_an_offline_run_reads_the_actions_the_sac_run_took(pendulum_medium_replay):  # noqa: F811
    """The dataset stores Pendulum's torques in [-2, 2]; the loop's loader gives the policy's [-1, 1]
    back: exactly the actions in the SAC run's replay buffer (one env: buffer order is episode order)."""
    from rlrun.collectors.dataset import load_dataset
    from rlrun.core.checkpoint import load
    from rlrun.core.specs import EnvSpec

    made = pendulum_medium_replay
    data = load_dataset(made.dataset_id, str(made.root), EnvSpec((3,), np.dtype(np.float32), False, 1))
    buffer = load(made.run_dir / "checkpoint.pt")["buffer"]["storage"]["data"]
    torch.testing.assert_close(data.action, buffer["action"], rtol=0, atol=1e-6)
    torch.testing.assert_close(data.observation, buffer["observation"])
    torch.testing.assert_close(data.reward, buffer["next"]["reward"].reshape(-1))

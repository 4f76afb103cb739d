"""Offline learning tests: the shipped offline presets improve on their data, on Pendulum, fixed seeds.

The dataset (``dataset_fakes.mixed_dataset``, 30 episodes of 100 steps, 3000 transitions) is a
third each of random actions (mean return -562), an energy-pumping swing-up controller (-140)
and a controller that holds the pendulum down (-894): mean -532. Behaviour cloning of all of
it scores about -700; picking out the swing-up is what an offline RL algorithm must do.
"""

from __future__ import annotations

import pytest
from cli_utils import only_run_dir, run_cli, summary_of
from dataset_fakes import mixed_dataset

pytestmark = [pytest.mark.learning, pytest.mark.timeout(900)]
DATASET = "test/pendulum/mixed-v0"


@pytest.fixture(scope="module")
def mixed_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("datasets")
    mixed_dataset(DATASET, root, episodes=30, max_steps=100)
    return root


def train(tmp_path, capsys, root, algo: str, *extra: str) -> dict:
    code, _, err = run_cli([f"algo={algo}", "env=pendulum", "env.max_episode_steps=100", f"dataset={DATASET}",
                            f"dataset_root={root}", "seed=0", "logger=none", "progress=false", "threads=1",
                            "eval.episodes=20", "checkpoint.interval_updates=0", *extra], tmp_path, capsys)
    assert code == 0, err
    return summary_of(only_run_dir(tmp_path))


def test_iql_picks_the_swing_up_out_of_mixed_data_within_3000_updates(tmp_path, capsys, mixed_root):
    """algo=iql (smaller networks) reaches -450 over 20 evaluation episodes.

    Calibration (seed 0 / 1, 20 episodes after 3000 updates): IQL -362 / -359; with its advantage
    weights off (``loss.beta=0``, behaviour cloning) -702; with the squashed ``tanh_normal`` actor
    -619 / -599 (see conf/algo/iql.yaml). The dataset's mean is -532.
    """
    s = train(tmp_path, capsys, mixed_root, "iql", "total_updates=3000", "eval.interval_updates=3000",
              "model.hidden=[64,64]", "model.critic_hidden=[64,64]", "loss.value_hidden=[64,64]")
    assert s["optim_steps"] == 3000 and s["eval/episodes"] == 20
    assert s["eval/episode_return"] >= -450, s

"""Offline runs through the one loop: a dataset source, a budget in updates, intervals in updates,
resume and SIGTERM exactly as online, and one clear line for each kind of bad input."""

from __future__ import annotations

import csv
import signal
import sys
import time

import numpy as np
import pytest
import torch
from cli_utils import only_run_dir, run_cli, spawn, summary_of
from dataset_fakes import random_dataset

DATASET = "test/pendulum/random-v0"


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("datasets")
    random_dataset("Pendulum-v1", DATASET, root)
    return root


def offline_args(root, *extra: str) -> list[str]:
    return ["algo=iql", "env=pendulum", f"dataset={DATASET}", f"dataset_root={root}", "total_updates=250",
            "trainer.optim_steps_per_epoch=100", "eval.interval_updates=100", "eval.episodes=2",
            "checkpoint.interval_updates=100", "buffer.batch_size=64", "logger=csv", "progress=false",
            "model.hidden=[32,32]", "loss.value_hidden=[32,32]", *extra]


def metric_rows(run_dir) -> list[dict]:
    """metrics.csv (step, key, value) as one dict per step, in order."""
    rows: dict[int, dict] = {}
    with open(run_dir / "metrics.csv") as f:
        for r in csv.DictReader(f):
            rows.setdefault(int(r["step"]), {"step": r["step"]})[r["key"]] = r["value"]
    return list(rows.values())


def test_an_offline_run_counts_updates_and_evaluates_on_its_interval(tmp_path, capsys, data_root):
    code, _, err = run_cli(offline_args(data_root), tmp_path, capsys)
    assert code == 0, err
    run_dir = only_run_dir(tmp_path)
    summary = summary_of(run_dir)
    # rounds of 100 updates, cut at the budget: 100, 200, 250
    assert summary["optim_steps"] == 250 and summary["total_updates"] == 250
    assert summary["frames"] == 0 and summary["total_frames"] is None
    assert np.isfinite(summary["eval/episode_return"])
    rows = metric_rows(run_dir)
    evaluated = [int(float(r["updates"])) for r in rows if r.get("eval/episode_return")]
    assert evaluated == [100, 200, 250]
    assert [int(float(r["step"])) for r in rows] == [100, 200, 250]  # logged at the update clock
    state = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    assert state["optim_steps"] == 250
    # the normaliser holds the dataset's statistics, saved with the policy
    mean = state["loss"]["policy.normalizer.mean"]
    assert mean.shape == (3,) and mean.abs().sum() > 0


def test_without_a_round_length_rounds_divide_the_intervals_so_evaluations_land_on_them(
        tmp_path, capsys, data_root):
    """Rounds default to 1000 updates, cut to divide eval/checkpoint intervals (gcd): 150 gives 50."""
    args = [a for a in offline_args(data_root, "total_updates=300", "eval.interval_updates=150",
                                    "checkpoint.interval_updates=0")
            if not a.startswith("trainer.optim_steps_per_epoch")]
    code, _, err = run_cli(args, tmp_path, capsys)
    assert code == 0, err
    rows = metric_rows(only_run_dir(tmp_path))
    assert [int(float(r["updates"])) for r in rows if r.get("eval/episode_return")] == [150, 300]
    assert [int(float(r["step"])) for r in rows] == [50, 100, 150, 200, 250, 300]


def test_the_normaliser_is_set_from_the_dataset(data_root):
    from rlrun.collectors.dataset import normalize_from_dataset
    from rlrun.core.specs import EnvSpec
    from rlrun.datasets.minari_format import read_dataset
    from rlrun.modules.models import actor_twin_q

    data = read_dataset(DATASET, data_root)
    policy = actor_twin_q(EnvSpec((3,), np.float32, False, 1, -2.0, 2.0), hidden=[8],
                          normalize_observations=True)
    normalize_from_dataset(policy, data)
    obs = data.observation.double()
    normalised = policy.normalizer(data.observation).double()
    # independent: the dataset's own mean and std, by numpy
    expected = (obs.numpy() - obs.numpy().mean(0)) / obs.numpy().std(0)
    assert np.allclose(normalised.numpy(), np.clip(expected, -10, 10), atol=1e-3)


@pytest.mark.parametrize(("extra", "key", "needle"), [
    (["dataset=test/pendulum/nothing-v0"], "dataset", "rlrun dataset make"),
    (["total_frames=1000"], "total_frames", "total_updates"),
    (["env=halfcheetah"], "dataset", "does not fit"),
    (["eval.interval_updates=null"], "eval.interval_updates", "updates"),
])
def test_bad_offline_input_is_one_clear_line_and_exit_2(tmp_path, capsys, data_root, extra, key, needle):
    code, _, err = run_cli(offline_args(data_root, *extra), tmp_path, capsys)
    assert code == 2, err
    assert "Traceback" not in err
    assert key in err and needle in err, err


def test_an_online_algorithm_refuses_a_dataset(tmp_path, capsys, data_root):
    code, _, err = run_cli(["algo=ppo", "env=pendulum", f"dataset={DATASET}", f"dataset_root={data_root}",
                            "total_frames=null", "total_updates=100", "logger=csv", "progress=false"],
                           tmp_path, capsys)
    assert code == 2 and "dataset" in err and "not from a dataset" in err, err


def test_an_offline_algorithm_without_a_dataset_says_how_to_get_one(tmp_path, capsys):
    code, _, err = run_cli(["algo=iql", "env=pendulum", "logger=csv", "progress=false"], tmp_path, capsys)
    assert code == 2 and "dataset" in err and "rlrun dataset" in err, err


def test_total_updates_on_an_online_run_is_refused(tmp_path, capsys):
    code, _, err = run_cli(["total_updates=100", "logger=csv", "progress=false"], tmp_path, capsys)
    assert code == 2 and "total_updates" in err and "total_frames" in err, err


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_sigterm_mid_run_then_the_same_command_ends_at_exactly_total_updates(tmp_path, data_root):
    args = offline_args(data_root, "total_updates=3000", "eval.interval_updates=0",
                        "checkpoint.interval_updates=100", "eval.episodes=1")
    proc = spawn(args, tmp_path)
    deadline = time.time() + 120
    while time.time() < deadline and not list(tmp_path.glob("runs/*/*/checkpoint.pt")):
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    run_dir = only_run_dir(tmp_path)
    stopped = summary_of(run_dir)
    assert stopped["status"] == "interrupted" and 0 < stopped["optim_steps"] < 3000, stopped
    assert stopped["optim_steps"] % 100 == 0  # stopped between rounds, with the round's checkpoint

    proc = spawn(args, tmp_path)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    summary = summary_of(run_dir)
    assert summary["optim_steps"] == 3000 and summary["status"] == "finished"
    assert f"resuming from update {stopped['optim_steps']} of 3000" in err
    rows = metric_rows(run_dir)
    steps = [int(float(r["step"])) for r in rows]
    assert steps == sorted(set(steps)) and steps[-1] == 3000  # one record, no step logged twice


def test_dataset_actions_are_mapped_into_the_policys_action_space(data_root):
    from rlrun.collectors.dataset import load_dataset
    from rlrun.core.specs import EnvSpec
    from rlrun.datasets.minari_format import read_dataset

    raw = read_dataset(DATASET, data_root)  # Pendulum's torque in [-2, 2], as the env takes it
    assert raw.action.abs().max() > 1.0
    # the policy acts in [-1, 1] (the env rescales): a / 2
    data = load_dataset(DATASET, data_root, EnvSpec((3,), np.float32, False, 1, -1.0, 1.0))
    assert np.allclose(data.action.numpy(), raw.action.numpy() / 2.0, atol=1e-6)
    # an env that does not rescale keeps the dataset's actions
    same = load_dataset(DATASET, data_root, EnvSpec((3,), np.float32, False, 1, -2.0, 2.0))
    assert np.allclose(same.action.numpy(), raw.action.numpy(), atol=1e-6)

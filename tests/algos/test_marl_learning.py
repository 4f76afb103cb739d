"""Learning tests for agent groups on VMAS at CPU scale, with fixed seeds.

MAPPO and IPPO on navigation: 60 envs, 6000 frames per batch, 10 iterations,
smaller networks and a larger learning rate than Table 10 (whose lr 5e-5 is
for 500 iterations). An untrained policy scores about -0.7 (the first batch's
team return); calibrated runs reach eval returns of 2.5-3.0 here. MAA2C, a
preset with no code of its own, learns there too (A2C_SCALE).

The Q family on navigation (discrete, 5 actions), 90k frames: QMIX beats
independent Q-learning by a margin that a non-monotonic (broken) mixer does
not reach, averaged over paired seeds 0-2. Calibration (eval over 60 episodes,
seeds 0 / 1): IQL 2.41 / 2.76, VDN 2.63 / 2.79, QMIX 2.84 / 3.14 (seed 2: IQL 2.61,
QMIX 2.99); QMIX with sign-flipped first-layer mixing
weights (non-monotonic, seed 0) scored -29.6, far below the margin. VDN's lead
over IQL on navigation (+0.22 / +0.03) is not reliable at this scale, so VDN is
tested on sampling only: beating IQL there needs it to learn, and more.

On sampling (the task the paper's text names), 60k frames (about a minute a run
here): IQL 32.8 / 32.9, VDN 46.0 / 41.4, QMIX 39.1 / 29.3 (seeds 0 / 1). VDN
leads IQL by 13.2 / 8.4 and is tested there; QMIX's lead is not reliable on
sampling at this scale (-3.6 on seed 1), so QMIX is tested on navigation. A VDN
mixer that sums agent 0's value only (n * Q_0) scored 25.7, below IQL.
"""

from __future__ import annotations

import pytest
from cli_utils import logged, only_run_dir, run_cli, summary_of

pytest.importorskip("vmas")
pytestmark = [pytest.mark.learning, pytest.mark.timeout(1500)]

PPO_SCALE = ["env=vmas/navigation", "seed=0", "logger=csv", "total_frames=60000", "env.num_envs=60",
             "collector.frames_per_batch=6000", "model.hidden=[64,64]", "optim.lr=5e-4",
             "trainer.epochs_per_batch=10", "buffer.batch_size=1000", "eval.interval_frames=0",
             "eval.episodes=60", "eval.max_envs=60", "checkpoint.interval_frames=0", "progress=false"]
Q_SCALE = ["env=vmas/navigation", "seed=0", "logger=csv", "total_frames=90000", "env.num_envs=60",
           "collector.frames_per_batch=6000", "model.hidden=[64,64]", "optim.lr=5e-4",
           "trainer.epochs_per_batch=1", "trainer.optim_steps_per_epoch=100", "buffer.batch_size=512",
           "buffer.capacity=100000", "exploration.annealing_frames=45000", "eval.interval_frames=0",
           "eval.episodes=60", "eval.max_envs=60", "checkpoint.interval_frames=0", "progress=false"]

# MAA2C (conf/algo/maa2c.yaml, configuration only): its own short rollouts, 200 updates.
# Calibration (seed 0): first batch -0.57, eval 2.47 after 120k frames (about 3 min here).
A2C_SCALE = ["env=vmas/navigation", "seed=0", "logger=csv", "total_frames=120000", "env.num_envs=60",
             "model.hidden=[64,64]", "eval.interval_frames=0", "eval.episodes=60", "eval.max_envs=60",
             "checkpoint.interval_frames=0", "progress=false"]

SAMPLING_SCALE = [*(o for o in Q_SCALE if not o.startswith(("env=", "total_frames=", "exploration."))),
                  "env=vmas/sampling", "total_frames=60000", "exploration.annealing_frames=30000"]


def train(tmp_path, capsys, algo: str, scale: list[str]) -> tuple[float, float]:
    """(first batch's mean team return, final eval return over 60 episodes)."""
    code, _, err = run_cli([f"algo={algo}", *scale], tmp_path, capsys)
    assert code == 0, err
    run_dir = only_run_dir(tmp_path)
    first = next(iter(logged(run_dir, "train/episode_return").values()))
    summary = summary_of(run_dir)
    assert summary["eval/episodes"] == 60
    return first, summary["eval/episode_return"]


@pytest.mark.parametrize("algo", ["mappo", "ippo"])
def test_ppo_family_raises_the_team_return_on_navigation(algo, tmp_path, capsys):
    first, final = train(tmp_path, capsys, algo, PPO_SCALE)
    assert first < 0.0, first  # untrained
    assert final >= 2.0 and final - first >= 2.5, (first, final)


def test_maa2c_a_yaml_only_algorithm_raises_the_team_return_on_navigation(tmp_path, capsys):
    first, final = train(tmp_path, capsys, "maa2c", A2C_SCALE)
    assert first < 0.0, first  # untrained
    assert final >= 1.5 and final - first >= 2.0, (first, final)


def final_returns(tmp_path, capsys, scale: list[str], *algos: str) -> list[float]:
    """Each algo's final eval return, one run directory per algo, same scale and seed."""
    finals = []
    for algo in algos:
        (tmp_path / algo).mkdir()
        finals.append(train(tmp_path / algo, capsys, algo, scale)[1])
    return finals


QMIX_SEEDS = (0, 1, 2)


def test_qmix_beats_independent_q_learning_on_navigation(tmp_path, capsys):
    """Paired over seeds 0-2 (each seed's IQL and QMIX runs share its env draws): the mean of the
    per-seed leads QMIX - IQL must reach 0.25, the margin one seed used to carry alone. Calibration
    (2026-12-05): IQL 2.41 / 2.76 / 2.61, QMIX 2.84 / 3.14 / 2.99, leads 0.43 / 0.38 / 0.38 (mean
    0.40); a non-monotonic mixer (-29.6 on seed 0) fails it by far. One unlucky seed can no longer
    fail the test alone, nor one lucky seed pass a broken mixer."""
    leads = []
    for seed in QMIX_SEEDS:
        (tmp_path / f"seed{seed}").mkdir()
        scale = [f"seed={seed}" if o.startswith("seed=") else o for o in Q_SCALE]
        iql, qmix = final_returns(tmp_path / f"seed{seed}", capsys, scale, "marl_iql", "qmix")
        leads.append(qmix - iql)
    assert sum(leads) / len(leads) >= 0.25, leads


def test_vdn_beats_independent_q_learning_on_sampling(tmp_path, capsys):
    iql, vdn = final_returns(tmp_path, capsys, SAMPLING_SCALE, "marl_iql", "vdn")
    assert vdn >= iql + 4.0, (iql, vdn)

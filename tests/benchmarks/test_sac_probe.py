"""The SAC probe: its statistics against values worked out by hand, its recorder, a smoke run."""

import json
import math

import pytest
import torch

from rlrun.benchmarks import sac_probe


def test_correction_gap_is_sb3s_floor_on_a_saturated_entry():
    # u = 10 (std e^-20 around mu = 10): 1 - tanh(10)^2 = sech(10)^2 = 4 e^-20 / (1 + e^-20)^2 = 8.2446e-9.
    # Exact: log(8.2446e-9) = log 4 - 20 = -18.61371. SB3: log(8.2446e-9 + 1e-6) = log(1e-6) + log(1.0082446)
    # = -13.81551 + 0.00821 = -13.80730. Gap 4.80641. The entry at u = 0: log(1 + 1e-6) - log 1 = 1e-6.
    mu = torch.tensor([[10.0, 0.0]], dtype=torch.float64)
    head = torch.full((1, 2), -30.0, dtype=torch.float64)
    s = sac_probe.squash_stats(mu, head, -20.0, torch.Generator().manual_seed(0))
    assert s["correction_gap_mean"] == pytest.approx(4.80641, abs=1e-4)
    assert s["correction_gap_max"] == pytest.approx(4.80641, abs=1e-4)
    assert s["log_std_min"] == -30.0 and s["below_rlrun_clamp"] == 1.0 and s["u_above_6"] == 0.5


def test_no_gap_where_the_squash_is_not_saturated():
    # |u| < 2 everywhere: log(1 + 1e-6 / sech(u)^2) <= 1e-6 cosh(2)^2 = 1.4e-5 per entry, 6 entries
    mu = torch.zeros(64, 6)
    s = sac_probe.squash_stats(mu, torch.full((64, 6), -3.0), -5.0, torch.Generator().manual_seed(0))
    assert 0 <= s["correction_gap_mean"] < 6 * 1.5e-5 and s["u_above_6"] == 0 and s["below_rlrun_clamp"] == 0


@pytest.mark.parametrize("own_min, expected", [(-5.0, 0.9311), (-20.0, 1.0)])
def test_u_is_drawn_with_the_librarys_own_clamp(own_min, expected):
    # mu = 6.01 and a head at -30: rlrun's clamp gives std e^-5 = 0.006738, so P(u > 6) =
    # Phi(0.01 / 0.006738) = Phi(1.4841) = 0.9311; SB3's gives std e^-20, so u > 6 always
    n = 40_000
    mu, head = torch.full((n, 1), 6.01, dtype=torch.float64), torch.full((n, 1), -30.0, dtype=torch.float64)
    s = sac_probe.squash_stats(mu, head, own_min, torch.Generator().manual_seed(1))
    assert s["u_above_6"] == pytest.approx(expected, abs=0.01)


def test_upper_clamp_bounds_the_draws():
    # head +5 clamps to 2: std e^2 = 7.389, P(|u| > 6) = 2 (1 - Phi(0.812)) = 0.4168 (unclamped: 0.968)
    n = 40_000
    gen = torch.Generator().manual_seed(2)
    s = sac_probe.squash_stats(torch.zeros(n, 1), torch.full((n, 1), 5.0), -5.0, gen)
    assert s["u_above_6"] == pytest.approx(0.4168, abs=0.01)


def test_recorder_keeps_every_tenth_loss_call_and_skips_collection():
    record = sac_probe.Recorder(batch=4, own_min=-5.0)
    for _ in range(25):
        assert not record.due(1)  # collection: one env
        if record.due(4):
            record.record(torch.zeros(4, 2), torch.zeros(4, 2))
    assert record.calls == 25 and len(record.records) == 25 // sac_probe.EVERY


def test_phases_take_minimum_means_and_maximum_per_part():
    records = [{"log_std_min": -float(i), "below_rlrun_clamp": float(i % 2), "u_above_6": 0.1 * i,
                "correction_gap_mean": float(i), "correction_gap_max": float(10 * i)} for i in range(4)]
    parts = sac_probe.phases(records, n=2)
    assert parts[0] == pytest.approx({"log_std_min": -1.0, "below_rlrun_clamp": 0.5, "u_above_6": 0.05,
                                      "correction_gap_mean": 0.5, "correction_gap_max": 10.0})
    assert parts[1]["log_std_min"] == -3.0 and parts[1]["correction_gap_max"] == 30.0


def test_bad_input_is_one_line_and_exit_2(capsys):
    assert sac_probe.main(["--task", "ppo_cartpole"]) == 2
    assert sac_probe.main(["--seeds", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and err[0].startswith("error: --task: 'ppo_cartpole' is not a SAC task")


def test_smoke_run_observes_both_libraries_training(tmp_path):
    """Both sides train a short SAC Pendulum run with their actors observed: records on each side."""
    pytest.importorskip("stable_baselines3")
    assert sac_probe.main(["--task", "sac_pendulum", "--frames", "600", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "sac_probe.json").read_text())
    for side in ("rlrun", "sb3"):
        lib = result["libs"][side]
        assert lib["calls"][0] >= 10 * sac_probe.PHASES and math.isfinite(lib["returns"][0])
        assert len(lib["phases"]) == sac_probe.PHASES
        assert all(-20 < p["log_std_min"] < 2 for p in lib["phases"])
    # the two sides make the same number of loss calls: two actor calls per update, same updates
    assert result["libs"]["rlrun"]["calls"] == result["libs"]["sb3"]["calls"]
    assert (tmp_path / "sac_probe.md").read_text().count("| rlrun |") == sac_probe.PHASES

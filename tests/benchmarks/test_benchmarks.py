"""The benchmark suite's references compute what rlrun computes (timings are not tested)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlrun.benchmarks import BENCHMARKS
from rlrun.benchmarks import gae as gae_bench
from rlrun.benchmarks.__main__ import parse_args
from rlrun.objectives.gae import gae


def test_gae_references_agree_with_rlrun_on_small_data():
    d = gae_bench.make_data(7, 300, done_freq=0.02, seed=1)
    ours = gae(**{k: torch.from_numpy(v) for k, v in d.items()}, gamma=0.99, lmbda=0.95)[0].numpy()
    ref = gae_bench.reference64(d)
    time_major = {k: np.ascontiguousarray(v.T) for k, v in d.items()}
    for other in (gae_bench.gae_numpy(**time_major, gamma=0.99, lmbda=0.95)[0].T,
                  gae_bench.gae_torch(**{k: torch.from_numpy(v) for k, v in d.items()},
                                      gamma=0.99, lmbda=0.95)[0].numpy(), ours):
        assert np.abs(other - ref).max() < 1e-5
    numba_ref = gae_bench.make_gae_numba()
    if numba_ref is not None:
        assert np.abs(numba_ref(**d, gamma=0.99, lmbda=0.95)[0] - ref).max() < 1e-5


def test_gae_benchmark_runs_and_reports_the_error_check():
    result = gae_bench.run(quick=True, reps=1)
    assert result["rlrun_matches_1e-5"], result["rlrun_max_abs_err"]
    assert {r["impl"] for r in result["rows"]} >= {"rlrun", "numpy", "torch", "rlrun[torch]"}
    assert "| rlrun |" in gae_bench.render(result)


def test_command_line_names_the_benchmarks():
    assert parse_args(["end_to_end", "--quick"]).benchmarks == ["end_to_end"]
    with pytest.raises(SystemExit):
        parse_args(["gea"])
    assert "end_to_end" in BENCHMARKS


def test_table5_times_every_case_on_the_same_frames():
    from rlrun.benchmarks import table5

    row = table5.bench_one("Pendulum-v1", workers=1, frames=200, rollout=100, reps=1)
    assert all(len(row["times_s"][c]) == 1 and row[f"fps_{c}"] > 0 for c in table5.CASES)
    assert row["ratio_gym_sync"] == 1.0
    rendered = table5.render({"rows": [row], "notes": []})
    assert "| Pendulum-v1 | 1 |" in rendered and "multi_async fps" in rendered

"""``python -m rlrun.benchmarks compiled`` (the GPU check's compiled-against-eager part) runs on CPU,
and its checks cannot pass vacuously."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from torch import nn

from rlrun.benchmarks.compiled import LEANRL, LOOP_CASES, UPDATE_CASES, max_deviation, steady_fps


def test_weights_outside_the_tolerance_are_named():
    a, b = nn.Linear(3, 2), nn.Linear(3, 2)
    b.load_state_dict(a.state_dict())
    assert max_deviation(a, b) == (0.0, [])
    with torch.no_grad():
        b.bias[0] += 1e-3
    worst, off = max_deviation(a, b)
    assert off == ["bias"] and worst == pytest.approx(1e-3, rel=1e-3)


def test_steady_throughput_is_the_second_half_of_the_run():
    # the first batch is slow (compilation): the second half's rate ignores it
    marks = [(10.0, 1000), (11.0, 2000), (12.0, 3000), (13.0, 4000)]
    assert steady_fps(marks) == pytest.approx(1000.0)
    assert steady_fps(marks[:2]) is None  # too short to tell warm-up from steady


def test_the_loop_workloads_are_leanrls_four():
    assert set(LOOP_CASES) == set(LEANRL) and set(LEANRL) <= set(UPDATE_CASES)


@pytest.mark.slow
def test_the_benchmark_runs_on_cpu_and_compiled_matches_eager(tmp_path):
    out = tmp_path / "compiled.json"
    done = subprocess.run([sys.executable, "-m", "rlrun.benchmarks", "compiled", "--device", "cpu", "--quick",
                           "--cases", "ppo", "--reps", "1", "--json", str(out)],
                          capture_output=True, text=True, timeout=900, env={**__import__("os").environ,
                                                                           "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads(out.read_text())
    (update,), (loop,), (e2e,) = result["updates"], result["loop"], result["e2e"]
    assert update["problems"] == [] and update["weights_match"] and update["graphs"] >= 1
    assert update["compiled_ms"] > 0 and update["eager_ms"] > 0
    assert loop["problems"] == [] and loop["eager_frames"] == loop["compiled_frames"] == 512
    assert e2e["problems"] == [] and e2e["frames"] > 0

"""The ddp benchmark's projection: a ring all-reduce moves 2 (n - 1) / n of the bytes per rank."""

from __future__ import annotations

import pytest

from rlrun.benchmarks.ddp import project


def test_ring_all_reduce_projection():
    assert project(10**9, 2, 1.0, 0.0) == pytest.approx(1.0)  # 2 ranks: each sends the bytes once
    assert project(10**9, 8, 1.0, 0.0) == pytest.approx(1.75)
    assert project(0, 8, 1.0, 5.0) == pytest.approx(14 * 5e-6)  # latency: 2 (n - 1) ring steps

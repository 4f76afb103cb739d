"""Fixtures of the launching tests: a live SLURM cluster when there is one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # launch_utils, next to this file

from launch_utils import slurm_problem  # noqa: E402
from shared_resources import shared_lock  # noqa: E402


@pytest.fixture(autouse=True)
def one_slurm_test_at_a_time(request, tmp_path_factory):
    """Tests that submit to the cluster take turns: a one-node test cluster has few CPUs, and
    jobs queued behind another test's would run into this test's own timeouts."""
    if "slurm_partition" not in request.fixturenames:
        yield
        return
    with shared_lock(tmp_path_factory, "slurm"):
        yield


@pytest.fixture(scope="session")
def slurm_partition() -> str:
    """The default partition of a live SLURM cluster; skips without one (fails if RLRUN_REQUIRE_SLURM=1)."""
    problem = slurm_problem()
    if problem:
        if os.environ.get("RLRUN_REQUIRE_SLURM") == "1":  # CI started a cluster: do not skip silently
            pytest.fail(problem)
        pytest.skip(problem)
    out = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=20).stdout
    parts = out.split()
    return next((p.rstrip("*") for p in parts if p.endswith("*")), parts[0])

"""A Pendulum medium-replay dataset made once per test session with ``rlrun dataset make``.

Tests that learn from it (IQL, CQL, DT) request the fixture::

    from offline_data import pendulum_medium_replay  # noqa: F401  (the fixture)

    def test_iql_learns(pendulum_medium_replay, monkeypatch):
        monkeypatch.setenv("MINARI_DATASETS_PATH", str(pendulum_medium_replay.root))
        ... dataset=pendulum_medium_replay.dataset_id ...

The dataset is the replay buffer of a small SAC run on Pendulum-v1 (seed 0) until its
evaluation return reaches -800 (``rlrun.cli.make_dataset.RECIPES``): about 3000 steps, 15
episodes, returns from about -1800 to -850; ~20 s of CPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

DATASET_ID = "rlrun/pendulum/medium-replay-v0"


@dataclass(frozen=True)
class MadeDataset:
    """Where a made dataset lies: ``root`` (a MINARI_DATASETS_PATH), its id, and the SAC run."""

    root: Path
    dataset_id: str
    run_dir: Path


def make_pendulum_medium_replay(where: Path, seed: int = 0) -> MadeDataset:
    """Runs ``rlrun dataset make env=pendulum kind=medium-replay`` into ``where/datasets``."""
    from rlrun.cli.make_dataset import make

    root, run_dir = where / "datasets", where / "sac-run"
    make(["env=pendulum", "kind=medium-replay", f"seed={seed}", f"root={root}", f"run_dir={run_dir}",
          "progress=false", "threads=1"])
    return MadeDataset(root, DATASET_ID, run_dir)


@pytest.fixture(scope="session")
def pendulum_medium_replay(tmp_path_factory) -> MadeDataset:
    """The Pendulum medium-replay dataset, made once per session (see the module docstring)."""
    return make_pendulum_medium_replay(tmp_path_factory.mktemp("pendulum-medium-replay"))

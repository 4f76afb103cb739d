"""Machine-wide resources that tests take turns on when ``-n auto`` runs one test process per core."""

from __future__ import annotations

import pytest
from filelock import FileLock


def shared_lock(tmp_path_factory: pytest.TempPathFactory, name: str) -> FileLock:
    """A file lock every test process of this run shares.

    It lives in the common parent of the test processes' base temp directories, which is
    where a single-process run keeps its own too. Tests that need one machine-wide resource
    (the local Ray instance, the SLURM cluster's few CPUs) hold it while they run.

    Examples:
        >>> with shared_lock(tmp_path_factory, "ray"):  # doctest: +SKIP
        ...     ...  # the only Ray test running now
    """
    return FileLock(tmp_path_factory.getbasetemp().parent / f"rlrun-{name}.lock")

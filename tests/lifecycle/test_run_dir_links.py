"""A run directory writes only inside itself (issue 40 §1): a link or a non-regular file where
rlrun (or Hydra on its behalf) writes is refused with one line, exit 2, and nothing outside the
directory is touched. One test per writer."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_utils import only_run_dir, run_cli

from rlrun.core import runfiles
from rlrun.core.errors import RlrunError

TRAIN = ["total_frames=512", "collector.frames_per_batch=256", "eval.episodes=1", "logger=none",
         "progress=false", "threads=1"]
# Each file rlrun or Hydra writes in a run directory (logger=csv adds metrics.csv, params.csv).
WRITTEN = [".rlrun.lock", "rlrun.log", ".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml",
           "checkpoint.pt", "policy.pt", "summary.json", "tracking.json", "config.yaml", "metrics.csv",
           "params.csv", "videos"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    where = tmp_path_factory.mktemp("trained")
    proc = subprocess.run([sys.executable, "-m", "rlrun", *TRAIN], cwd=where, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return only_run_dir(where)


@pytest.mark.parametrize("name", WRITTEN)
def test_a_link_where_rlrun_writes_is_refused_and_its_target_untouched(trained, tmp_path, capsys, name):
    run_dir = tmp_path / "run"
    shutil.copytree(trained, run_dir, ignore=shutil.ignore_patterns(".rlrun.lock"))
    outside = tmp_path / "outside"
    outside.write_text("precious\n")
    link = run_dir / name
    if link.is_dir():
        shutil.rmtree(link)
    link.unlink(missing_ok=True)
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside)
    before = outside.stat()
    code, _, err = run_cli([*TRAIN, "logger=csv", "total_frames=1024", f"hydra.run.dir={run_dir}"], tmp_path,
                           capsys)
    assert code == 2, err
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("[rlrun]")]
    assert lines[0].startswith("rlrun: error:") and "symbolic link" in lines[0] and name in lines[0], err
    assert len(lines) == 2 and "fix:" in lines[1] and "Traceback" not in err, err
    assert outside.read_text() == "precious\n" and outside.stat().st_mtime_ns == before.st_mtime_ns


def test_a_fifo_in_the_run_dir_is_refused_without_blocking(trained, tmp_path, capsys):
    run_dir = tmp_path / "run"
    shutil.copytree(trained, run_dir, ignore=shutil.ignore_patterns(".rlrun.lock"))
    (run_dir / "rlrun.log").unlink()
    os.mkfifo(run_dir / "rlrun.log")
    code, _, err = run_cli([*TRAIN, "total_frames=1024", f"hydra.run.dir={run_dir}"], tmp_path, capsys)
    assert code == 2 and "not a regular file" in err and "rlrun.log" in err, err


@pytest.mark.parametrize("mode", ["a", "w"])
def test_open_write_refuses_a_link_and_touches_nothing(tmp_path, mode):
    outside = tmp_path / "outside"
    outside.write_text("precious\n")
    (tmp_path / "metrics.csv").symlink_to(outside)
    with pytest.raises(RlrunError) as err:
        runfiles.open_write(tmp_path / "metrics.csv", mode)
    assert "symbolic link" in err.value.message and "metrics.csv" in err.value.message
    assert outside.read_text() == "precious\n"
    with runfiles.open_write(tmp_path / "fresh.csv", mode) as f:
        f.write("x")
    assert (tmp_path / "fresh.csv").read_text() == "x"


def test_the_lock_refuses_a_link(tmp_path):
    from rlrun.core.rundir import RunLock

    outside = tmp_path / "outside"
    outside.write_text("precious\n")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / ".rlrun.lock").symlink_to(outside)
    with pytest.raises(RlrunError):
        RunLock(run_dir).acquire()
    assert outside.read_text() == "precious\n"


def test_the_journal_and_csv_logger_refuse_links(tmp_path):
    from rlrun.loggers.tracking import CSVLogger

    outside = tmp_path / "outside"
    outside.write_text("precious\n")
    for name in ("metrics.csv", "params.csv"):
        d = tmp_path / name.split(".")[0]
        d.mkdir()
        (d / name).symlink_to(outside)
        with pytest.raises(RlrunError):
            logger = CSVLogger(run_dir=d, resumed=True, resume_step=None)
            logger.log_params({"a": 1})
    assert outside.read_text() == "precious\n"

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


def _outside(tmp_path: Path) -> tuple[Path, os.stat_result]:
    outside = tmp_path / "outside"
    outside.write_text("precious\n")
    return outside, outside.stat()


def _untouched(outside: Path, before: os.stat_result) -> bool:
    return outside.read_text() == "precious\n" and outside.stat().st_mtime_ns == before.st_mtime_ns


def _one_line(err: str, name: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("rlrun: error:") and name in lines[0], err
    assert "symbolic link" in lines[0] and "fix:" in lines[1] and "Traceback" not in err, err


@pytest.mark.parametrize("fmt", ["pt2", "onnx"])
def test_export_refuses_a_link_at_its_output(trained, tmp_path, capsys, fmt):
    run_dir = Path(shutil.copytree(trained, tmp_path / "run"))
    outside, before = _outside(tmp_path)
    (run_dir / f"policy.{fmt}").symlink_to(outside)
    code, _, err = run_cli(["export", str(run_dir), "--format", fmt], tmp_path, capsys)
    assert code == 2, err
    _one_line(err, f"policy.{fmt}")
    assert _untouched(outside, before)


def test_an_atomic_write_never_writes_through_a_link_in_its_temp_files_name(trained, tmp_path, capsys):
    """checkpoint.atomic_write (checkpoints, policy.pt, summaries, exports, eval JSONs): its temp
    file's name is predictable (.<name>.tmp-<pid>); a link planted there is removed, not followed."""
    run_dir = Path(shutil.copytree(trained, tmp_path / "run"))
    outside, before = _outside(tmp_path)
    (run_dir / f".policy.pt2.tmp-{os.getpid()}").symlink_to(outside)
    code, _, err = run_cli(["export", str(run_dir)], tmp_path, capsys)
    assert code == 0, err
    assert _untouched(outside, before) and (run_dir / "policy.pt2").is_file()


def test_the_dataset_writer_refuses_links(tmp_path):
    import gymnasium as gym
    import numpy as np

    from rlrun.datasets.minari_format import Episode, write_dataset

    box = gym.spaces.Box(-1, 1, (2,), np.float32)
    ep = Episode(observations=np.zeros((3, 2), np.float32), actions=np.zeros((2, 2), np.float32),
                 rewards=np.zeros(2), terminations=np.array([False, True]), truncations=np.zeros(2, bool))
    outside, before = _outside(tmp_path)
    (tmp_path / "root" / "ns").mkdir(parents=True)
    (tmp_path / "root" / "ns" / "namespace_metadata.json").symlink_to(outside)
    with pytest.raises(RlrunError, match="symbolic link"):
        write_dataset("ns/d-v0", [ep], box, box, root=tmp_path / "root")
    (tmp_path / "root" / "ns" / "namespace_metadata.json").unlink()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "root" / "ns" / "d-v0").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(RlrunError, match="symbolic link"):
        write_dataset("ns/d-v0", [ep], box, box, root=tmp_path / "root", overwrite=True)
    assert _untouched(outside, before) and not any(elsewhere.iterdir())


def test_tensorboard_refuses_a_link_in_or_as_its_folder(tmp_path):
    pytest.importorskip("tensorboard")
    from rlrun.loggers.tracking import TensorBoardLogger

    outside, before = _outside(tmp_path)
    (tmp_path / "a" / "tensorboard").mkdir(parents=True)
    (tmp_path / "a" / "tensorboard" / "events.out.tfevents.1").symlink_to(outside)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "tensorboard").symlink_to(elsewhere, target_is_directory=True)
    for run_dir in (tmp_path / "a", tmp_path / "b"):
        with pytest.raises(RlrunError, match="symbolic link"):
            TensorBoardLogger(run_dir, resumed=True, resume_step=3)
    assert _untouched(outside, before) and not any(elsewhere.iterdir())


def test_the_sweep_files_refuse_links(tmp_path):
    """The launcher's status file lock and job queue in a sweep directory (sweep.json's lock and
    best.yaml go through the same runfiles.open_write)."""
    from rlrun.launch.local import claim
    from rlrun.launch.status import update_status

    outside, before = _outside(tmp_path)
    (tmp_path / ".status.json.lock").symlink_to(outside)
    with pytest.raises(RlrunError, match="symbolic link"):
        update_status(tmp_path / "status.json", state="RUNNING")
    (tmp_path / ".queue-1").symlink_to(outside)
    with pytest.raises(RlrunError, match="symbolic link"):
        claim(tmp_path / ".queue-1", 3)
    (tmp_path / ".status.json.lock").unlink()
    (tmp_path / f".status.json.tmp-{os.getpid()}").symlink_to(outside)
    update_status(tmp_path / "status.json", state="RUNNING")
    assert _untouched(outside, before)


def test_eval_refuses_a_link_as_the_run_dirs_eval_folder(trained, tmp_path, capsys):
    run_dir = Path(shutil.copytree(trained, tmp_path / "run"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.rmtree(run_dir / "eval", ignore_errors=True)
    (run_dir / "eval").symlink_to(elsewhere, target_is_directory=True)
    code, _, err = run_cli(["eval", str(run_dir)], tmp_path, capsys)
    assert code == 2, err
    _one_line(err, "eval")
    assert not any(elsewhere.iterdir())

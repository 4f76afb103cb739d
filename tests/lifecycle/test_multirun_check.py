"""A multirun's values and its sweep directory are checked before any job starts (issue 40 §1, §3):
one line, exit 2, no sweep directory made, nothing written through a link."""

from __future__ import annotations

import time

import pytest
from cli_utils import run_cli

from rlrun.core.errors import RlrunError
from rlrun.lifecycle.multirun_check import _jobs, check_multirun

BASE = ["logger=none", "eval.episodes=1", "collector.frames_per_batch=256", "progress=false"]


@pytest.mark.parametrize("bad", ["total_frames=512,-5", "gamma=0.9,1.5", "seed=0,1 optim.lr=1e-3,-1"])
def test_a_bad_value_in_any_job_is_one_line_before_any_job_starts(tmp_path, capsys, bad):
    start = time.monotonic()
    code, _, err = run_cli(["-m", *bad.split(), *BASE], tmp_path, capsys)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("rlrun: error:") and "fix:" in lines[1], err
    assert not (tmp_path / "runs" / "multirun").exists(), list((tmp_path / "runs").rglob("*"))
    assert time.monotonic() - start < 30


def test_a_link_in_the_sweep_dir_is_refused_before_hydra_writes_there(tmp_path, capsys):
    outside = tmp_path / "outside"
    outside.write_text("precious\n")
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "multirun.yaml").symlink_to(outside)
    args = ["-m", "total_frames=256,512", *BASE, f"hydra.sweep.dir={sweep}"]
    code, _, err = run_cli(args, tmp_path, capsys)
    assert code == 2 and "symbolic link" in err and "multirun.yaml" in err, err
    assert outside.read_text() == "precious\n"


def test_each_value_is_composed_once_not_every_combination():
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(["a=1,2,3", "b=x,y", "c=5"])
    assert _jobs(parsed) == [["a=1", "b=x", "c=5"], ["a=2", "b=x", "c=5"], ["a=3", "b=x", "c=5"],
                             ["a=1", "b=y", "c=5"]]


def test_a_good_multirun_and_a_single_run_pass(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    check_multirun(["-m", "total_frames=256,512", *BASE])
    check_multirun(["total_frames=-5"])  # not a multirun: the single run's own checks report it
    with pytest.raises(RlrunError):
        check_multirun(["--multirun", "total_frames=-5"])

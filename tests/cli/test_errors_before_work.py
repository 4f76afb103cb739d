"""Bad input is refused before any work, from every entry point (issue 40 §3): one line naming
the key and the fix, exit 2, and nothing left behind."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from cli_utils import run_cli


def one_error(err: str, key: str) -> None:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert lines and lines[0].startswith(f"rlrun: error: {key}:"), err
    assert len(lines) == 2 and lines[1].strip().startswith("fix:") and "Traceback" not in err, err


@pytest.mark.parametrize("args", [["paper=table1/sac_halfcheetah"], ["-m", "paper=table1/sac_halfcheetah"]])
def test_an_added_group_without_plus_names_the_fix(args, tmp_path, capsys):
    """`rlrun list` shows the group as ``paper``; only ``+paper=`` adds it (Hydra: 30 lines, exit 1)."""
    code, _, err = run_cli(args, tmp_path, capsys)
    assert code == 2, err
    one_error(err, "paper")
    assert "fix: write +paper=table1/sac_halfcheetah" in err


@pytest.mark.parametrize(("arg", "key"), [("total_frames=-5", "total_frames"), ("gamma=1.5", "gamma"),
                                          ("trainer.epochs_per_batch=0", "trainer.epochs_per_batch")])
def test_a_bad_value_leaves_no_run_dir_and_no_store_files(arg, key, tmp_path):
    """The process's own command (MLflow's worker started early, the config composed beside torch's
    import): refused before Hydra makes the run directory and before the store is opened."""
    proc = subprocess.run([sys.executable, "-m", "rlrun", arg, "progress=false"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    one_error(proc.stderr, key)
    assert not list(tmp_path.glob("runs/*/*")), list(tmp_path.glob("runs/**"))
    assert not list(tmp_path.glob("mlflow.db*")) and not (tmp_path / "mlruns").exists()


@pytest.mark.parametrize(("arg", "key"), [("episodes=-3", "episodes"), ("episodes=0", "episodes"),
                                          ("episodes=many", "episodes"), ("seed=-1", "seed"),
                                          ("version=1.5", "version"), ("threshold=nan", "threshold"),
                                          ("threshold=high", "threshold"), ("overwrite=maybe", "overwrite")])
def test_dataset_make_checks_every_argument_before_training(arg, key, tmp_path, capsys, monkeypatch):
    """``episodes=-3`` trained SAC for minutes, then failed with a traceback."""
    import rlrun.cli.make_dataset as make

    def no_training(*args, **kwargs):
        raise AssertionError("the SAC run started before the arguments were checked")
    monkeypatch.setattr(make, "train_sac", no_training)
    code, _, err = run_cli(["dataset", "make", "env=pendulum", "kind=medium", f"root={tmp_path}", arg],
                           tmp_path, capsys)
    assert code == 2, err
    one_error(err, key)
    assert not any(tmp_path.iterdir())


def test_resume_takes_a_run_dir_named_with_equals_and_commas(tmp_path, capsys):
    """rlrun names run directories by their overrides (``seed=1,lr=0.1``): ``resume=`` takes them."""
    fast = ["collector.frames_per_batch=256", "eval.episodes=1", "logger=none", "progress=false"]
    code, _, err = run_cli(["total_frames=512", *fast, "hydra.run.dir=first"], tmp_path, capsys)
    assert code == 0, err
    named = tmp_path / "runs" / "ppo-cartpole" / "seed=0,total_frames=512"
    named.parent.mkdir(parents=True)
    (tmp_path / "first").rename(named)
    code, _, err = run_cli(["total_frames=1024", *fast, f"resume={named.relative_to(tmp_path)}",
                            "hydra.run.dir=second"], tmp_path, capsys)
    assert code == 0, err
    assert "resuming from frame 512 of 1024" in err


def test_a_value_with_grammar_characters_that_is_no_path_names_the_quoting_fix(tmp_path, capsys):
    code, _, err = run_cli(["resume=runs/ppo-cartpole/seed=0,lr=1"], tmp_path, capsys)
    assert code == 2, err
    one_error(err, "resume")
    assert "fix: quote it: \"resume='runs/ppo-cartpole/seed=0,lr=1'\"" in err


def test_onnx_export_is_one_file_that_opens_alone(tmp_path, capsys):
    """The model's weights are inside it: copied alone, it opens in onnxruntime."""
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    fast = ["total_frames=256", "collector.frames_per_batch=256", "eval.episodes=1", "logger=none",
            "progress=false", "hydra.run.dir=r"]
    code, _, err = run_cli(fast, tmp_path, capsys)
    assert code == 0, err
    (tmp_path / "out").mkdir()
    code, _, err = run_cli(["export", "r", "--format", "onnx", "--out", str(tmp_path / "out" / "p.onnx")],
                           tmp_path, capsys)
    assert code == 0, err
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["p.onnx"]
    alone = tmp_path / "elsewhere"
    alone.mkdir()
    (tmp_path / "out" / "p.onnx").rename(alone / "p.onnx")
    session = ort.InferenceSession(str(alone / "p.onnx"))
    assert session.run(None, {"observation": np.zeros((3, 4), np.float32)})[0].shape[0] == 3


@pytest.mark.parametrize("launcher", ["slurm", "slurm_ray"])
def test_a_slurm_launcher_without_slurm_names_the_missing_command(launcher, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "no-slurm-here"))
    code, _, err = run_cli(["-m", f"hydra/launcher={launcher}", "total_frames=600", "logger=none",
                            f"hydra.sweep.dir={tmp_path / 'sw'}"], tmp_path, capsys)
    assert code == 2, err
    one_error(err, "hydra/launcher")
    assert "`srun` is not on this machine's PATH" in err and "SLURM login node" in err
    assert not list((tmp_path / "sw").rglob("*.pkl"))  # nothing was submitted

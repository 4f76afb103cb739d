"""Checkpoints: atomic writes, weights-only loading, clear errors, RNG state round trips."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch

from rlrun.core import checkpoint
from rlrun.core.checkpoint import FORMAT_VERSION, load, rng_state, save, set_rng_state
from rlrun.core.errors import CheckpointError


def test_save_then_load_round_trips_tensors_and_containers(tmp_path):
    path = tmp_path / "checkpoint.pt"
    save({"weights": {"w": torch.arange(3.0)}, "frames": 7, "names": ["a", "b"]}, path)
    state = load(path)
    assert state["format_version"] == FORMAT_VERSION
    assert torch.equal(state["weights"]["w"], torch.arange(3.0))
    assert state["frames"] == 7 and state["names"] == ["a", "b"]
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]


def test_failed_save_leaves_previous_checkpoint_intact_and_no_temp_file(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint.pt"
    save({"frames": 1, "w": torch.ones(1000)}, path)
    before = path.read_bytes()
    real_save = torch.save

    def crashing_save(obj, f, *args, **kwargs):
        f.write(b"partial checkpoint bytes")
        raise RuntimeError("disk full")

    monkeypatch.setattr(torch, "save", crashing_save)
    with pytest.raises(RuntimeError, match="disk full"):
        save({"frames": 2, "w": torch.zeros(1000)}, path)
    monkeypatch.setattr(torch, "save", real_save)
    assert path.read_bytes() == before
    assert load(path)["frames"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]


def test_successful_save_replaces_the_previous_checkpoint(tmp_path):
    path = tmp_path / "checkpoint.pt"
    save({"frames": 1}, path)
    save({"frames": 2}, str(path))
    assert load(str(path))["frames"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]


class _Touch:
    """Unpickling this object creates a file: code execution a weights-only load must refuse."""

    def __init__(self, target: Path):
        self.target = target

    def __reduce__(self):
        return (Path.touch, (self.target,))


def test_pickled_code_is_refused_with_checkpoint_error(tmp_path):
    path, sentinel = tmp_path / "evil.pt", tmp_path / "pwned"
    torch.save({"format_version": FORMAT_VERSION, "payload": _Touch(sentinel)}, path)
    with pytest.raises(CheckpointError) as info:
        load(path)
    assert info.value.key == "resume"
    assert not sentinel.exists()
    # the same file does run code when loaded with full unpickling: the check above is meaningful
    torch.load(path, weights_only=False)
    assert sentinel.exists()


def test_garbage_bytes_raise_checkpoint_error_with_a_fix(tmp_path):
    path = tmp_path / "checkpoint.pt"
    path.write_bytes(b"\x00\x01 not a torch file \xff" * 10)
    with pytest.raises(CheckpointError) as info:
        load(path)
    err = info.value
    assert err.key == "resume"
    assert str(path) in err.message
    assert err.fix and "delete" in err.fix and str(path) in err.fix
    assert "Traceback" not in err.render()


def test_pickled_code_error_does_not_pass_on_the_advice_to_unpickle_fully(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"format_version": FORMAT_VERSION, "payload": _Touch(tmp_path / "pwned")}, path)
    with pytest.raises(CheckpointError) as info:
        load(path)
    text = info.value.render()
    for advice in ("weights_only", "Re-running", "safe_globals"):  # following it would run the file
        assert advice not in text
    assert "global" in text.lower() and "getattr" in text  # the reason is kept: what the file loads
    assert len(text.splitlines()) == 2  # message + fix


@pytest.mark.parametrize("keep", [0, 1, 100])
def test_empty_or_truncated_checkpoint_raises_checkpoint_error(tmp_path, keep):
    path = tmp_path / "checkpoint.pt"
    save({"frames": 3, "weights": torch.arange(1000.0)}, path)
    path.write_bytes(path.read_bytes()[:keep])
    with pytest.raises(CheckpointError) as info:
        load(path)
    err = info.value
    assert err.key == "resume" and str(path) in err.message and "delete" in err.fix
    if keep == 0:
        assert "empty (0 bytes)" in err.message


def test_missing_file_raises_checkpoint_error(tmp_path):
    with pytest.raises(CheckpointError) as info:
        load(tmp_path / "nope.pt")
    assert info.value.key == "resume" and info.value.fix


@pytest.mark.parametrize("content", [{"frames": 3}, {"format_version": 999}, [1, 2, 3]])
def test_torch_files_that_are_not_rlrun_checkpoints_are_refused(tmp_path, content):
    path = tmp_path / "other.pt"
    torch.save(content, path)
    with pytest.raises(CheckpointError) as info:
        load(path)
    assert info.value.key == "resume" and "format" in info.value.message


def draws():
    return (torch.rand(4), np.random.rand(4), [random.random() for _ in range(4)], np.random.randn(3))


def assert_same_draws(a, b):
    assert torch.equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert a[2] == b[2]
    np.testing.assert_array_equal(a[3], b[3])


def test_rng_state_round_trip_reproduces_torch_numpy_python_draws():
    np.random.randn()  # leaves a cached gaussian in numpy's state
    state = rng_state()
    first = draws()
    set_rng_state(state)
    assert_same_draws(draws(), first)


def test_rng_state_survives_a_weights_only_checkpoint(tmp_path):
    torch.manual_seed(1)
    np.random.seed(2)
    random.seed(3)
    np.random.randn()
    path = tmp_path / "checkpoint.pt"
    save({"rng": rng_state()}, path)
    first = draws()
    draws()  # move every generator on
    set_rng_state(load(path)["rng"])
    assert_same_draws(draws(), first)


def test_rng_state_round_trip_reproduces_python_gauss_draws():
    random.seed(0)
    random.gauss(0.0, 1.0)  # caches the second value of the Box-Muller pair
    state = rng_state()
    first = [random.gauss(0.0, 1.0) for _ in range(3)]
    set_rng_state(state)
    assert [random.gauss(0.0, 1.0) for _ in range(3)] == first


def test_checkpoint_module_uses_weights_only_loading(monkeypatch, tmp_path):
    seen = {}
    real_load = torch.load

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return real_load(*args, **kwargs)

    monkeypatch.setattr(checkpoint.torch, "load", spy)
    save({"x": 1}, tmp_path / "c.pt")
    load(tmp_path / "c.pt")
    assert seen.get("weights_only") is True


def test_checkpoint_error_texts(tmp_path):
    # what the CLI prints for each unusable resume= target (key, message, fix)
    missing = tmp_path / "nope.pt"
    with pytest.raises(CheckpointError) as info:
        load(missing)
    assert str(info.value) == (f"resume: no checkpoint file at {missing}\n"
                               "  fix: point resume= at a run directory or checkpoint.pt written by rlrun")
    other = tmp_path / "other.pt"
    torch.save([1, 2], other)
    with pytest.raises(CheckpointError) as info:
        load(other)
    assert str(info.value) == (f"resume: {other} is not an rlrun checkpoint of format {FORMAT_VERSION}\n"
                               f"  fix: delete {other} to start afresh")
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"\x00\x01 not a torch file \xff" * 10)
    with pytest.raises(CheckpointError) as info:
        load(garbage)
    assert info.value.message.startswith(f"cannot read checkpoint {garbage} (UnpicklingError: ")
    assert info.value.fix == (f"the file is damaged or not an rlrun checkpoint: delete {garbage} to start "
                              "afresh, or set resume= to another checkpoint")


def test_error_reason_keeps_the_reason_and_drops_the_advice():
    from rlrun.core.checkpoint import error_reason

    unpickler = RuntimeError("Weights only load failed. Re-running with weights_only=False will run code.\n"
                             "WeightsUnpickler error: Unsupported global: GLOBAL pathlib.Path was not an "
                             "allowed global by default. Please use `torch.serialization.add_safe_globals`")
    assert error_reason(unpickler) == "Unsupported global: GLOBAL pathlib.Path was not an allowed global " \
                                      "by default."
    assert error_reason(ValueError("x" * 400)) == "x" * 300
    assert error_reason(EOFError()) == "empty or truncated file"
    assert error_reason(RuntimeError("Check the documentation of torch.load")) == "unreadable"


@pytest.mark.parametrize("payload", ["reduce", "numpy"])
def test_a_pickled_checkpoint_is_one_message_through_every_command(tmp_path, capsys, payload):
    """``resume=<file>``, ``resume=<run dir>``, ``rlrun eval`` and ``rlrun export`` each refuse a
    checkpoint that pickles objects: exit 2, one message (with its fix), no torch advice, and the
    object's code never runs."""
    from cli_utils import run_cli

    sentinel = tmp_path / "pwned"
    run_dir = tmp_path / "old"
    run_dir.mkdir()
    obj = _Touch(sentinel) if payload == "reduce" else np.zeros(3)
    torch.save({"format_version": FORMAT_VERSION, "frames": 512, "payload": obj}, run_dir / "checkpoint.pt")
    train = ["total_frames=512", "logger=none", "progress=false", "hydra.run.dir=new"]
    for args in ([*train, f"resume={run_dir / 'checkpoint.pt'}"], [*train, f"resume={run_dir}"],
                 ["eval", str(run_dir)], ["export", str(run_dir / "checkpoint.pt")]):
        code, out, err = run_cli(args, tmp_path, capsys)
        assert code == 2, (args, err)
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 2 and lines[0].startswith("rlrun: error: ") and lines[1].startswith("  fix: ")
        assert str(run_dir / "checkpoint.pt") in lines[0], lines
        for advice in ("Traceback", "weights_only", "Weights only", "safe_globals", "pytorch.org", "Please"):
            assert advice not in err, (args, err)
    assert not sentinel.exists()

"""Files rlrun loads are data: a hostile checkpoint.pt / policy.pt never runs code (issue 25 §1).

Every hostile file here would, if its config were instantiated or its pickle executed, create a
marker file; each test asserts the marker never appears and that the refusal is rlrun's own error
(one message with its key and fix, exit 2 from the CLI) without torch's weights-only advice.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_utils import only_run_dir, run_cli
from omegaconf import OmegaConf

import rlrun
from rlrun.core.errors import CheckpointError, ConfigError


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A finished tiny PPO run on CartPole (checkpoint.pt and policy.pt), logger=none."""
    where = tmp_path_factory.mktemp("trained")
    proc = subprocess.run([sys.executable, "-m", "rlrun", "total_frames=512",
                           "collector.frames_per_batch=256", "eval.episodes=1", "logger=none",
                           "progress=false", "threads=1"],
                          cwd=where, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return only_run_dir(where)


def hostile_targets(marker: Path) -> dict[str, dict]:
    """Config nodes that would create ``marker`` if rlrun built them through ``_target_``."""
    cmd = f"touch {marker}"
    return {
        "os.system": {"_target_": "os.system", "command": cmd},
        "os.popen": {"_target_": "os.popen", "cmd": cmd},
        "builtins.exec": {"_target_": "builtins.exec", "source": f"open({str(marker)!r}, 'w')"},
        "subprocess.call": {"_target_": "subprocess.call", "args": ["touch", str(marker)]},
    }


def rewrite(src: Path, dst: Path, edit) -> Path:
    """``src`` (a checkpoint.pt or policy.pt) with its saved config changed by ``edit(cfg)``."""
    state = torch.load(src, map_location="cpu", weights_only=True)
    cfg = OmegaConf.create(state["config"])
    edit(cfg)
    state["config"] = OmegaConf.to_yaml(cfg)
    torch.save(state, dst)
    return dst


def one_error(err: str) -> None:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert lines and lines[0].startswith("rlrun: error:"), err
    assert len(lines) <= 2 and (len(lines) == 1 or lines[1].strip().startswith("fix:")), err
    assert "Traceback" not in err and "weights_only" not in err.lower() and "weights only" not in err.lower()


@pytest.mark.parametrize("name", ["os.system", "os.popen", "builtins.exec", "subprocess.call"])
@pytest.mark.parametrize("file", ["policy.pt", "checkpoint.pt"])
def test_a_target_in_a_loaded_config_never_runs(trained, tmp_path, name, file):
    marker = tmp_path / "PWNED"
    node = hostile_targets(marker)[name]
    for where in ("model", "env", "exploration"):
        path = rewrite(trained / file, tmp_path / f"{where}-{file}",
                       lambda cfg, where=where: OmegaConf.update(cfg, where, node, merge=False))
        with pytest.raises(CheckpointError) as err:
            rlrun.load(path)
        assert err.value.key == f"{where}._target_" and name in err.value.message
        assert not marker.exists()


def test_nested_targets_interpolations_and_env_imports_are_refused(trained, tmp_path):
    marker = tmp_path / "PWNED"
    node = hostile_targets(marker)["os.system"]
    os.environ["RLRUN_TEST_SECRET"] = "s3cret"
    cases = {
        "model.actor.net": lambda cfg: OmegaConf.update(cfg, "model.actor", {"net": node}, merge=False),
        "env.make_kwargs.x": lambda cfg: OmegaConf.update(cfg, "env.make_kwargs", {"x": node}, merge=False),
        "env.make_kwargs.g": lambda cfg: OmegaConf.update(
            cfg, "env.make_kwargs", {"g": "${oc.env:RLRUN_TEST_SECRET}"}, merge=False),
        "env.imports[0]": lambda cfg: OmegaConf.update(cfg, "env.imports", ["os"], merge=False),
        "env.id": lambda cfg: OmegaConf.update(cfg, "env.id", "os:CartPole-v1"),
    }
    for key, edit in cases.items():
        path = rewrite(trained / "policy.pt", tmp_path / "policy.pt", edit)
        with pytest.raises(CheckpointError) as err:
            rlrun.load(path)
        assert err.value.key.startswith(key.split(".x")[0].split(".g")[0]), (key, err.value.key)
        assert "s3cret" not in str(err.value)
        assert not marker.exists()


def test_the_registry_refuses_targets_while_a_loaded_config_is_built(trained):
    """The second line of defence: a loader that skipped the check still cannot import."""
    from rlrun.core.registry import build, untrusted

    with untrusted("a test file"), pytest.raises(ConfigError) as err:
        build("model", {"_target_": "os.system", "command": "true"})
    assert err.value.key == "model._target_"
    assert build("model", {"_target_": "argparse.Namespace", "a": 1}).a == 1  # the user's own: allowed


def test_trust_code_opts_in_and_says_what_it_imports(trained, tmp_path, capsys):
    path = rewrite(trained / "policy.pt", tmp_path / "policy.pt",
                   lambda cfg: OmegaConf.update(cfg, "env.imports", ["json"], merge=False))
    pi = rlrun.load(path, trust_code=True)
    assert pi.frames == 512
    err = capsys.readouterr().err
    assert "trust_code" in err and "an import of module 'json'" in err


def test_the_cli_refuses_hostile_files_in_one_message_and_exit_2(trained, tmp_path, capsys):
    marker = tmp_path / "PWNED"
    node = hostile_targets(marker)["os.system"]
    path = rewrite(trained / "checkpoint.pt", tmp_path / "checkpoint.pt",
                   lambda cfg: OmegaConf.update(cfg, "model", node, merge=False))
    for args in (["eval", str(path)], ["export", str(path)]):
        code, _, err = run_cli(args, tmp_path, capsys)
        assert code == 2, err
        one_error(err)
        assert "model._target_" in err and "trust" in err
    assert not marker.exists()


class _Reduce:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_reduce_is_never_executed_and_the_error_is_rlruns(trained, tmp_path, capsys):
    marker = tmp_path / "PWNED"
    path = tmp_path / "policy.pt"
    state = torch.load(trained / "policy.pt", map_location="cpu", weights_only=True)
    state["exploration"] = _Reduce(marker)
    torch.save(state, path, pickle_protocol=pickle.HIGHEST_PROTOCOL)
    for args in (["eval", str(path)], ["export", str(path)]):
        code, _, err = run_cli(args, tmp_path, capsys)
        assert code == 2, err
        one_error(err)
        assert "rlrun expects a torch.save file of tensors" in err
    with pytest.raises(CheckpointError):
        rlrun.load(path)
    assert not marker.exists()


def test_resume_never_resolves_a_hostile_interpolation(trained, tmp_path, capsys):
    """``resume=<file>`` diffs the old config against the new one: unresolved, so an
    ``${oc.env:...}`` in the file cannot copy the environment into the listed changes."""
    os.environ["RLRUN_TEST_SECRET"] = "s3cret"
    path = rewrite(trained / "checkpoint.pt", tmp_path / "checkpoint.pt",
                   lambda cfg: OmegaConf.update(cfg, "env.make_kwargs", {"g": "${oc.env:RLRUN_TEST_SECRET}"},
                                                merge=False))
    code, out, err = run_cli(["total_frames=512", "collector.frames_per_batch=256", "logger=none",
                              f"resume={path}"], tmp_path, capsys)
    assert code == 2 and "s3cret" not in out + err, err


def test_export_to_an_unwritable_place_is_one_line(trained, tmp_path, capsys):
    code, _, err = run_cli(["export", str(trained), "--out", "/proc/x/policy.pt2"], tmp_path, capsys)
    assert code == 2, err
    one_error(err)
    assert "--out" in err


@pytest.mark.parametrize("where", ["config.yaml", "best.yaml"])
def test_rerunning_a_best_trial_never_builds_a_target_from_the_sweep(trained, tmp_path, capsys, where):
    """``python -m rlrun.launch best DIR`` trains the config a sweep directory names: a sweep copied
    from elsewhere is data, so a ``_target_`` in its config.yaml (or in best.yaml) is refused."""
    from rlrun.launch.__main__ import main as launch_main

    marker = tmp_path / "PWNED"
    cfg = OmegaConf.load(trained / "config.yaml")
    best = {"trial": 0, "value": 1.0, "params": {}, "study_name": "s", "metric": "eval/episode_return",
            "run_dirs": [str(trained)], "config": str(tmp_path / "config.yaml")}
    node = hostile_targets(marker)["os.system"]
    if where == "config.yaml":
        OmegaConf.update(cfg, "model", node, merge=False)
    else:
        best["params"] = {"lr": node}
    OmegaConf.save(cfg, tmp_path / "config.yaml")
    OmegaConf.save(OmegaConf.create(best), tmp_path / "best.yaml")
    code = launch_main(["best", str(tmp_path), "total_frames=256", "logger=none"])
    err = capsys.readouterr().err
    assert code == 2, err
    one_error("\n".join(line for line in err.splitlines() if not line.startswith("[rlrun]")))
    assert "_target_" in err and "trust" in err
    assert not marker.exists() and not list(tmp_path.rglob("checkpoint.pt"))


# -- datasets: metadata.json and main_data.hdf5 are data ------------------------------------------

DATASET = "test/pendulum/hostile-v0"


@pytest.fixture
def dataset_root(tmp_path):
    from dataset_fakes import random_dataset

    root = tmp_path / "datasets"
    random_dataset("Pendulum-v1", DATASET, root, episodes=2, max_steps=20)
    return root


def _edit_metadata(root: Path, edit) -> None:
    import json

    path = root / DATASET / "data" / "metadata.json"
    meta = json.loads(path.read_text())
    path.write_text(json.dumps(edit(meta)))


def _space(**fields) -> str:
    import json

    return json.dumps({"type": "Box", "dtype": "float32", "shape": [3], "low": -1.0, "high": 1.0, **fields})


def _hostile_spec(marker: Path) -> str:
    import json

    return json.dumps({"id": "Pendulum-v1", "entry_point": "os:system",
                       "kwargs": {"command": f"touch {marker}"},
                       "additional_wrappers": [{"name": "x", "entry_point": "subprocess:call",
                                                "kwargs": {"args": ["touch", str(marker)]}}]})


HOSTILE_METADATA = {
    "huge shape": lambda m: {**m, "observation_space": _space(shape=[10**12])},  # allocated the bounds
    "object dtype": lambda m: {**m, "observation_space": _space(dtype="object")},
    "not a space": lambda m: {**m, "action_space": {"type": "Box"}},
    "discrete n as text": lambda m: {**m, "action_space": '{"type": "Discrete", "n": "5"}'},
    "episodes as text": lambda m: {**m, "total_episodes": "many"},
    "negative steps": lambda m: {**m, "total_steps": -1},
    "not an object": lambda m: [m],
    "env_spec not text": lambda m: {**m, "env_spec": {"entry_point": "os:system"}},
}


@pytest.mark.parametrize("case", list(HOSTILE_METADATA))
def test_a_hostile_dataset_metadata_is_one_line_and_nothing_runs(dataset_root, tmp_path, case):
    from rlrun.datasets.minari_format import list_datasets, read_dataset

    marker = tmp_path / "PWNED"
    _edit_metadata(dataset_root, lambda m: HOSTILE_METADATA[case]({**m, "env_spec": _hostile_spec(marker)}))
    for read in (lambda: read_dataset(DATASET, dataset_root), lambda: list_datasets(dataset_root)):
        with pytest.raises(ConfigError) as err:
            read()
        assert err.value.key == "dataset" and "\n" not in err.value.message, err.value.message
    assert not marker.exists()


def test_a_dataset_env_spec_entry_point_is_never_imported(dataset_root, tmp_path):
    """The env_spec is kept as text: only its id is read; the run's env config builds the env."""
    from rlrun.collectors.dataset import recorded_env_id
    from rlrun.datasets.minari_format import list_datasets, read_dataset

    marker = tmp_path / "PWNED"
    _edit_metadata(dataset_root, lambda m: {**m, "env_spec": _hostile_spec(marker)})
    data = read_dataset(DATASET, dataset_root)
    assert recorded_env_id(data.metadata) == "Pendulum-v1" and len(list_datasets(dataset_root)) == 1
    assert not marker.exists()


@pytest.mark.parametrize("damage", ["truncated", "not hdf5", "wrong shape"])
def test_a_damaged_dataset_file_is_one_line_and_exit_2(dataset_root, tmp_path, capsys, damage):
    import h5py

    path = dataset_root / DATASET / "data" / "main_data.hdf5"
    if damage == "truncated":  # a download or copy cut short (OSError from h5py before)
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif damage == "not hdf5":
        path.write_bytes(b"<html>404</html>")
    else:
        with h5py.File(path, "r+") as f:
            del f["episode_0/observations"]
            f["episode_0"].create_dataset("observations", data=np.zeros((21, 5), np.float32))
    code, _, err = run_cli(["algo=iql", "env=pendulum", f"dataset={DATASET}", f"dataset_root={dataset_root}",
                            "total_updates=10", "logger=none", "progress=false"], tmp_path, capsys)
    assert code == 2, err
    one_error(err)
    assert "dataset:" in err and "main_data.hdf5" in err
    code, _, err = run_cli(["dataset", "list", f"root={dataset_root}"], tmp_path, capsys)
    if damage != "wrong shape":  # listing reads only the rewards
        assert code == 2, err
        one_error(err)

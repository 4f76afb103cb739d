"""Every loader reads saved files through rlrun.core.saved (issue 40 §2): eval, export, load,
resume (by path and automatic) and ``python -m rlrun.launch best`` refuse a damaged or hostile
file with one line and exit 2, quickly, never a traceback."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from cli_utils import only_run_dir, run_cli
from omegaconf import OmegaConf

import rlrun
from rlrun.core.errors import RlrunError

TRAIN = ["total_frames=512", "collector.frames_per_batch=256", "eval.episodes=1", "logger=none",
         "progress=false", "threads=1"]
_BOMB = "a: &a [" + ",".join(["x"] * 9) + "]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]\n" for i in range(8))
ALIAS_BOMB = _BOMB + "#" * (1859 - len(_BOMB)) + "\n"  # 1,860 characters, 9**9 leaves


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    where = tmp_path_factory.mktemp("trained")
    proc = subprocess.run([sys.executable, "-m", "rlrun", *TRAIN], cwd=where, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return only_run_dir(where)


def one_error(err: str, *words: str) -> None:
    lines = [line for line in err.strip().splitlines() if line.strip() and not line.startswith("[rlrun]")]
    assert lines and lines[0].startswith("rlrun: error:"), err
    assert len(lines) <= 2 and (len(lines) == 1 or lines[1].strip().startswith("fix:")), err
    assert "Traceback" not in err, err
    for w in words:
        assert w in err, err


def damaged(src: Path, dst: Path, **fields) -> Path:
    state = torch.load(src, map_location="cpu", weights_only=True)
    state.update(fields)
    torch.save(state, dst)
    return dst


BAD_FIELDS = {
    "alias bomb config": ({"config": ALIAS_BOMB}, "alias bomb"),
    "python tag config": ({"config": "env: !!python/object/apply:os.system ['true']\n"}, "not plain YAML"),
    "syntax error config": ({"config": "env: [1, 2\n"}, "not plain YAML"),
    "config a list": ({"config": ["a"]}, "config"),
    "config other YAML": ({"config": "- just\n- a list\n"}, "run config"),
    "config without model": ({"config": "env: {}\nseed: 1\n"}, "model"),
    "frames a string": ({"frames": "12"}, "frames"),
    "frames negative": ({"frames": -4}, "frames"),
    "policy a list": ({"policy": [1, 2]}, "policy"),
}


@pytest.mark.parametrize("file", ["policy.pt", "checkpoint.pt"])
@pytest.mark.parametrize("case", list(BAD_FIELDS))
def test_eval_export_and_load_refuse_a_bad_field_in_one_line(trained, tmp_path, capsys, file, case):
    fields, word = BAD_FIELDS[case]
    path = damaged(trained / file, tmp_path / file, **fields)
    for args in (["eval", str(path)], ["export", str(path), "--out", str(tmp_path / "out.pt")]):
        start = time.perf_counter()
        code, _, err = run_cli(args, tmp_path, capsys)
        assert code == 2, err
        one_error(err, str(path), word)
        assert time.perf_counter() - start < 10
    with pytest.raises(RlrunError):
        rlrun.load(path)
    assert not (tmp_path / "out.pt").exists()


RESUME_FIELDS = ["alias bomb config", "python tag config", "syntax error config", "config a list",
                 "config other YAML", "frames a string", "policy a list"]


@pytest.mark.parametrize("case", RESUME_FIELDS + ["wall_time NaN", "optim_steps a list"])
def test_resume_from_a_path_refuses_a_bad_field_in_one_line(trained, tmp_path, capsys, case):
    fields, word = BAD_FIELDS.get(case) or ({case.split()[0]: float("nan") if "NaN" in case else [1]},
                                            case.split()[0])
    path = damaged(trained / "checkpoint.pt", tmp_path / "checkpoint.pt", **fields)
    code, _, err = run_cli([*TRAIN, f"resume={path}", f"hydra.run.dir={tmp_path / 'run'}"], tmp_path, capsys)
    assert code == 2, err
    one_error(err, word)


@pytest.mark.parametrize("case", ["python tag config", "alias bomb config", "config a list"])
def test_automatic_resume_refuses_a_bad_checkpoint_in_one_line(trained, tmp_path, capsys, case):
    run_dir = tmp_path / "run"
    shutil.copytree(trained, run_dir, ignore=shutil.ignore_patterns(".rlrun.lock"))
    damaged(trained / "checkpoint.pt", run_dir / "checkpoint.pt", **BAD_FIELDS[case][0])
    code, _, err = run_cli([*TRAIN, "total_frames=1024", f"hydra.run.dir={run_dir}"], tmp_path, capsys)
    assert code == 2, err
    one_error(err, "checkpoint.pt", BAD_FIELDS[case][1])


def test_a_config_yaml_that_is_another_file_is_refused(trained, tmp_path, capsys):
    """A checkpoint without a config reads the config.yaml beside it: that file is checked too."""
    damaged(trained / "policy.pt", tmp_path / "policy.pt", config="")
    for text, word in (("- a list\n", "run config"), (ALIAS_BOMB, "alias bomb"), ("a: 1\n", "env")):
        (tmp_path / "config.yaml").write_text(text)
        code, _, err = run_cli(["eval", str(tmp_path / "policy.pt")], tmp_path, capsys)
        assert code == 2, err
        one_error(err, "config.yaml", word)


def _sweep(trained: Path, where: Path, **changes) -> Path:
    best = {"trial": 0, "value": 1.0, "params": {}, "study_name": "s", "metric": "eval/episode_return",
            "run_dirs": [str(trained)], "config": str(trained / "config.yaml"), **changes}
    (where / "best.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(best)))
    return where


@pytest.mark.parametrize(("changes", "word"), [
    ({"value": "high"}, "value"), ({"trial": None}, "trial"), ({"trial": -1}, "trial"),
    ({"config": "BEST"}, "env is missing"), ({"params": [1]}, "params"),
    ({"study_name": ["x"]}, "study_name"),
])
def test_launch_best_refuses_a_malformed_best_yaml_in_one_line(trained, tmp_path, capsys, changes, word):
    from rlrun.launch.__main__ import main as launch_main

    if changes.get("config") == "BEST":  # a config that is another file: best.yaml itself
        changes = {"config": str(tmp_path / "best.yaml")}
    _sweep(trained, tmp_path, **changes)
    code = launch_main(["best", str(tmp_path), "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2, err
    one_error(err, word)


def test_launch_best_refuses_a_seed_that_is_a_path(trained, tmp_path, capsys):
    from rlrun.launch.__main__ import main as launch_main

    cfg = OmegaConf.load(trained / "config.yaml")
    cfg.seed = "../../escaped"
    OmegaConf.save(cfg, tmp_path / "config.yaml")
    _sweep(trained, tmp_path, config=str(tmp_path / "config.yaml"))
    code = launch_main(["best", str(tmp_path), "--dry-run"])
    out, err = capsys.readouterr()
    assert code == 2, err
    one_error(err, "seed")
    assert "escaped" not in out
    code = launch_main(["best", str(tmp_path), "--dry-run", "seed=../x"])
    out, err = capsys.readouterr()
    assert code == 2 and "seed" in err and "../x" not in out, err

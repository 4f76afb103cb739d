"""A non-editable install ships the config tree: `rlrun` works from any directory."""

from __future__ import annotations

import subprocess

import pytest


@pytest.mark.timeout(300)
def test_wheel_install_runs_from_any_directory(tmp_path, wheel_venv):
    venv, py = wheel_venv, wheel_venv / "bin" / "python"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = subprocess.run([str(venv / "bin" / "rlrun"), "algo=sac", "env=hopper", "--cfg", "job"],
                         cwd=elsewhere, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "id: Hopper-v5" in out.stdout and "name: sac" in out.stdout
    where = subprocess.run([str(py), "-c", "import rlrun.conf, sys; print(rlrun.conf.__file__)"],
                           cwd=elsewhere, capture_output=True, text=True, check=True).stdout
    assert str(venv) in where  # the installed copy, not the source tree
    index = subprocess.run([str(py), "-c", "from importlib.resources import files; "
                            "print(files('rlrun').joinpath('component_index.json').is_file())"],
                           cwd=elsewhere, capture_output=True, text=True, check=True).stdout
    assert index.strip() == "True"  # rlrun list reads it instead of importing torch

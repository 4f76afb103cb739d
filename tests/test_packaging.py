"""A non-editable install ships the config tree: `rlrun` works from any directory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(300)
def test_wheel_install_runs_from_any_directory(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(ROOT)],
                   check=True, capture_output=True)
    venv = tmp_path / "venv"
    # system site packages provide torch & co.; the wheel's own rlrun shadows the editable one
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    py = venv / "bin" / "python"
    wheel = next(wheels.glob("rlrun-*.whl"))
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(wheel)],
                   check=True, capture_output=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = subprocess.run([str(venv / "bin" / "rlrun"), "algo=sac", "env=hopper", "--cfg", "job"],
                         cwd=elsewhere, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "id: Hopper-v5" in out.stdout and "name: sac" in out.stdout
    where = subprocess.run([str(py), "-c", "import rlrun.conf, sys; print(rlrun.conf.__file__)"],
                           cwd=elsewhere, capture_output=True, text=True, check=True).stdout
    assert str(venv) in where  # the installed copy, not the source tree

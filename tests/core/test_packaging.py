"""A non-editable install ships the config tree: `rlrun` works from any directory."""

from __future__ import annotations

import json
import subprocess
import sysconfig

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
                            "print(files('rlrun.core').joinpath('component_index.json').is_file())"],
                           cwd=elsewhere, capture_output=True, text=True, check=True).stdout
    assert index.strip() == "True"  # rlrun list reads it instead of importing torch


def test_wheel_venv_sees_the_environment_running_the_tests(wheel_venv):
    """Inside an activated venv too (README: `python -m venv v && . v/bin/activate`), not only the base's."""
    code = "import json, sys, torch, omegaconf, hydra, rlrun; print(json.dumps([sys.path, rlrun.__file__]))"
    out = subprocess.run([str(wheel_venv / "bin" / "python"), "-c", code], capture_output=True, text=True,
                         cwd=wheel_venv)  # not the checkout, whose rlrun/ would be imported
    assert out.returncode == 0, out.stderr
    path, rlrun_file = json.loads(out.stdout)
    own = sysconfig.get_paths()["purelib"]  # the running environment's site-packages (a venv's own)
    assert own in path, f"{own} (running environment) not on the wheel venv's sys.path"
    assert rlrun_file.startswith(str(wheel_venv))  # the wheel's rlrun, not an editable one


def test_every_package_of_the_tree_is_listed_for_the_wheel():
    """pyproject's explicit ``packages`` names every folder of rlrun/ with an ``__init__.py`` (a new
    one left out installs editable but breaks a wheel at import: rlrun.core.private once did)."""
    from pathlib import Path

    import tomllib

    root = Path(__file__).resolve().parents[2]
    listed = set(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    tree = {".".join(p.parent.relative_to(root).parts) for p in (root / "rlrun").rglob("__init__.py")}
    tree = {t for t in tree if not t.startswith("rlrun.launch.hydra_plugins")}  # ships as hydra_plugins.*
    assert tree <= listed, sorted(tree - listed)

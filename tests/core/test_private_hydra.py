"""Hydra's private names (``rlrun.core.private.hydra``): on a Hydra where one moved, a single run
takes Hydra's public path (``hydra.main``), says so once, and runs the same."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rlrun.core.private import hydra as private

# the name rlrun looks up is not where it was (hydra.main itself still works on this Hydra)
_MOVED = ("import rlrun.core.private.hydra as h; "
          "h._LOOKUP['report'] = ('hydra._internal.utils', 'run_and_report_moved'); ")


def test_a_missing_private_name_is_said_once_and_not_available(monkeypatch, capsys):
    monkeypatch.setitem(private._LOOKUP, "Callbacks", ("hydra._internal.callbacks", "Moved"))
    monkeypatch.setattr(private, "_CHECKED", [])
    monkeypatch.setattr(private, "_NAMES", {})
    assert private.available() is False and private.available() is False
    err = capsys.readouterr().err
    assert err.count("rlrun: note: Hydra") == 1 and "public path" in err, err


def test_the_names_are_there_on_this_hydra(monkeypatch):
    monkeypatch.setattr(private, "_CHECKED", [])
    assert private.available()


@pytest.mark.parametrize("moved", [False, True])
def test_a_single_run_takes_the_public_path_when_a_private_name_moved(tmp_path, moved):
    script = (_MOVED if moved else "") + "from rlrun.cli.main import main; sys.exit(main())"
    args = ["total_frames=1024", "progress=false", "logger=csv", "hydra.run.dir=run"]
    done = subprocess.run([sys.executable, "-c", "import sys; " + script, *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600, env=os.environ)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("rlrun: note: Hydra") == (1 if moved else 0), done.stderr
    assert "[rlrun] finished: 1024 frames" in done.stderr + done.stdout
    for name in ("config.yaml", ".hydra/config.yaml", ".hydra/overrides.yaml", "summary.json"):
        assert (tmp_path / "run" / name).is_file(), name

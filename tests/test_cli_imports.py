"""Commands that need no training import no torch or MLflow: ``rlrun list`` and early config errors."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


@pytest.mark.parametrize(("args", "code"), [(["list"], 0), (["list", "loss"], 0), (["algo=nope"], 2),
                                            (["env=cartpol"], 2), (["trainer.epochs=3"], 2)])
def test_no_heavy_import(args, code, tmp_path):
    check = textwrap.dedent(f'''
        import sys
        from rlrun.cli import main
        code = main({args!r})
        heavy = [m for m in ("gymnasium", "mlflow", "pandas", "tensordict", "torch") if m in sys.modules]
        print(code, heavy)
    ''')
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, cwd=tmp_path,
                          timeout=120)
    assert done.stdout.strip().splitlines()[-1] == f"{code} []", done.stdout + done.stderr


def test_unknown_env_id_is_found_before_torch(tmp_path):
    """gymnasium's registry needs no torch: the build would find the id seconds later, after torch."""
    check = textwrap.dedent('''
        import sys
        from rlrun.cli import main
        code = main(["env.id=Nope-v0"])
        print(code, [m for m in ("mlflow", "tensordict", "torch") if m in sys.modules])
    ''')
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, cwd=tmp_path,
                          timeout=120)
    assert done.stdout.strip().splitlines()[-1] == "2 []", done.stdout + done.stderr
    assert "env.id: gymnasium has no environment 'Nope-v0'" in done.stderr

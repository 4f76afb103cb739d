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
        from rlrun.cli.main import main
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
        from rlrun.cli.main import main
        code = main(["env.id=Nope-v0"])
        print(code, [m for m in ("mlflow", "tensordict", "torch") if m in sys.modules])
    ''')
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, cwd=tmp_path,
                          timeout=120)
    assert done.stdout.strip().splitlines()[-1] == "2 []", done.stdout + done.stderr
    assert "env.id: gymnasium has no environment 'Nope-v0'" in done.stderr


def test_an_mlflow_run_keeps_mlflow_in_its_worker_process(tmp_path):
    """MLflow's import and store opening run in rlrun.loggers.remote's process, beside the build;
    the run's metrics, params, artifacts and status reach the store all the same."""
    check = textwrap.dedent(f'''
        import json, sys
        from rlrun.cli.main import main
        code = main(["total_frames=1024", "progress=false", "hydra.run.dir={tmp_path / 'run'}"])
        print(code, "mlflow" in sys.modules)
    ''')
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, cwd=tmp_path,
                          timeout=600)
    assert done.stdout.strip().splitlines()[-1:] == ["0 False"], done.stdout + done.stderr[-3000:]
    import json

    from mlflow.tracking import MlflowClient

    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    run = client.get_run(summary["mlflow_run_id"])
    assert run.info.status == "FINISHED" and run.data.params["total_frames"] == "1024"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "frames")] == [1024]
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert artifacts == {"config.yaml", "policy.pt", "summary.json"}

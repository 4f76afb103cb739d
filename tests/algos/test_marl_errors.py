"""Clear errors for algorithms and envs that do not fit: exit 2, the key and the problem, then the fix."""

from __future__ import annotations

import pytest
from cli_utils import run_cli

pytest.importorskip("vmas")


@pytest.mark.parametrize(("args", "key", "fix"), [
    (["algo=mappo", "env=cartpole"], "env", "env=vmas/navigation"),
    (["algo=qmix", "env=pendulum"], "env", "env=vmas/navigation"),
    (["algo=ppo", "env=vmas/navigation"], "algo", "algo=mappo"),
    (["algo=dqn", "env=vmas/sampling"], "algo", "algo=mappo"),
    (["algo=qmix", "env=vmas/navigation", "env.continuous_actions=true"], "env.continuous_actions",
     "env.continuous_actions=false"),
    (["algo=marl_iql", "env=vmas/balance", "env.continuous_actions=true"], "env.continuous_actions",
     "env.continuous_actions=false"),
])
def test_misfits_exit_2_with_one_line_naming_key_and_fix(args, key, fix, tmp_path, capsys):
    code, _, err = run_cli([*args, "logger=none"], tmp_path, capsys)
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 2 and "Traceback" not in err, err  # the error, then its fix
    assert lines[0].startswith(f"rlrun: error: {key}: "), lines[0]
    assert lines[1].strip().startswith("fix:") and fix in lines[1], lines[1]

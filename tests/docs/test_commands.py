"""Every command in the documentation runs (issue 42): each marked bash block of ``docs/`` is run
with a small budget, or composed with ``--cfg job`` where it needs a cluster, a GPU, a server or
hours (``docs_blocks``: the markers)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from docs_blocks import Block, blocks, composed, training_args, with_overrides

from rlrun.lifecycle.compose import config_groups

BLOCKS = blocks()
RUN = [b for b in BLOCKS if b.mode == "run"]
COMPOSE = [b for b in BLOCKS if b.mode == "compose"]


def _env() -> dict[str, str]:
    env = dict(os.environ, MLFLOW_DISABLE_TELEMETRY="true", WANDB_MODE="offline", PYTHONUNBUFFERED="1")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # this venv's rlrun
    env.pop("HYDRA_FULL_ERROR", None)
    return env


def script(block: Block) -> str:
    """The block as a bash script, the marker's overrides appended to each training command."""
    overrides = shlex.split(block.arg)
    lines = ["set -euo pipefail"]
    for command in block.commands:
        parsed = training_args(command)
        if parsed is None or not overrides:
            lines.append(command)
        else:
            prefix, args = parsed
            lines.append(shlex.join([*prefix, *with_overrides(args, overrides)]))
    return "\n".join(lines) + "\n"


def test_every_rlrun_block_says_how_it_is_tested():
    unmarked = [b.id for b in BLOCKS if b.needs_marker and b.mode is None]
    assert not unmarked, f"bash blocks with rlrun commands but no <!-- test: ... --> marker: {unmarked}"
    unsaid = [b.id for b in BLOCKS if b.mode in ("compose", "skip") and not b.arg.startswith("(")]
    assert not unsaid, f"compose/skip markers must say why, in parentheses: {unsaid}"
    assert len(RUN) >= 10 and len(COMPOSE) >= 10, (len(RUN), len(COMPOSE))


def test_the_overrides_replace_a_commands_own_budget():
    assert with_overrides(["algo=sac", "total_frames=20000", "seed=3"], ["total_frames=400"]) == [
        "algo=sac", "seed=3", "total_frames=400"]
    block = Block("x.md", 1, "run", "total_frames=10 logger=none",
                  ("rlrun total_frames=20000 algo=sac", "rlrun eval $RUN episodes=3", "rlrun list"))
    assert script(block).splitlines()[1:] == ["rlrun algo=sac total_frames=10 logger=none",
                                              "rlrun eval $RUN episodes=3", "rlrun list"]
    groups = {"paper": ["marl/a", "table1/x", "table1/y"]}
    assert composed(["-m", "+paper/table1=glob(*)", "seed=0,1,2"], groups) == [
        "+paper/table1=x", "seed=0", "--cfg", "job"]


@pytest.mark.parametrize("block", RUN, ids=[b.id for b in RUN])
def test_a_runnable_docs_block_runs(block: Block, tmp_path):
    proc = subprocess.run(["bash", "-c", script(block)], cwd=tmp_path, env=_env(), capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, f"{block.id} exited {proc.returncode}:\n{script(block)}\n" \
                                 f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"


@pytest.mark.parametrize("block", COMPOSE, ids=[b.id for b in COMPOSE])
def test_a_compose_only_docs_block_composes(block: Block, tmp_path):
    groups = config_groups()
    for command in block.commands:
        parsed = training_args(command)
        assert parsed is not None, f"{block.id}: not an rlrun training command: {command}"
        argv = ["rlrun", *composed(parsed[1], groups)]
        proc = subprocess.run(argv, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0 and "total_frames" in proc.stdout, \
            f"{block.id}: {shlex.join(argv)} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
